#!/usr/bin/env bash
# Reproduce the paper's Fig. 1 / Sec. 4.1 MNIST claims, each network at its own best rate, then report.
#
#   scripts/reproduce_mnist.sh [extra Hydra overrides ...]
#
# Design (fixed before the run in bnexp/designs/mnist.py, pass rules in docs/mnist/README.md),
# at the paper's setup (784-100-100-100-10 sigmoid MLP, mini-batch 60, plain SGD at a constant rate):
#   BN,    normal init (paper, W ~ N(0, 0.01^2)): lr 0.12, 0.6, 3.6, 5.4, 7.2, 10.8, 14.4, 28.8
#   no BN, normal init:                           lr 0.12, 0.6, 1.2, 1.8, 2.4, 3.6, 5.4, 7.2, 14.4
#   BN,    xavier init (Glorot uniform, control): lr 0.9, 1.8, 3.6, 7.2, 14.4
#   no BN, xavier init:                           lr 0.3, 0.6, 1.2, 2.4, 4.8
#   in two stages (docs/mnist/PLAN.md, held-out tuning, and its amendment of 2026-11-29):
#   1. every rate of every grid on the tuning seeds 100, 101, 102 (81 runs), with data.validation=10000:
#      trained on 50,000 training images, every evaluation (steps to a target) read on the other 10,000,
#      held out by one fixed seeded draw; the tuning runs never read the test set;
#   2. each network at the rate(s) it chose on them (per target 90/95/97%: the fewest failed tuning seeds,
#      then the fewest mean steps, then the smaller rate; bnexp/analysis/tuning.py) on the fresh
#      evaluation seeds 1000, 1001, 1002, 1003, 1004 (at most 60 runs; used by no committed sweep), trained on
#      all 60,000 training images (data.validation=0) and scored on the test set; only stage 2 is scored.
#   trainer.max_steps=30000 (cut from the paper's 50,000 to fit the time on 2 cores), evaluation every
#   250 steps, monitor every 500.
# The grids refine the old sweep's optima (no BN 3.6, BN 7.2; seed 0 pilots at 10,000 steps: steps to 95%
# BN 2,000 / 1,500 / 2,000 / 2,500 at lr 3.6 / 7.2 / 14.4 / 28.8; no BN 7,250 / 5,000 at lr 3.6 / 7.2 and
# at chance at 14.4): neighbouring rates at most 1.5x apart from 1.2 to 7.2 (no BN) and from 3.6 to 14.4
# (BN); the outer rates show the grids' edges. The xavier grids (factor 2) come from a 500-step pilot of
# seed 0 (no BN: 9.6 at chance, 4.8 slow to start; BN: 57.6 at chance, 28.8 slow).
# Each block is one Hydra multirun through the stacked launcher (one torch thread per process; docs/stacked.md); every run's
# folder is SWEEP_DIR/bn=B,init=I,lr=R,seed=S. Then `bnexp report SWEEP_DIR` (speedups at 90/95/97%, each
# at its own best rate: the "best_rate_speedups" claims of report.json), copied to DOCS_DIR.
# Extra overrides come last and win, e.g. a quick check (a seed override makes it one stage: the grid on
# those seeds, no evaluation stage):
#   scripts/reproduce_mnist.sh trainer.max_steps=2000 seed=1 lr=3.6
# Environment:
#   JOBS       parallel jobs (default: number of cores)
#   LAUNCHER   the Hydra launcher of every block, hydra/launcher=LAUNCHER (default stacked: the MLP runs
#              of a block that differ only in seed or rate train as one batched model; stacked and joblib get
#              hydra.launcher.n_jobs=JOBS)
#   EVALUATION_SEEDS  stage 2's seeds (default 1000,1001,1002,1003,1004; must not be tuning seeds)
#   DRY_RUN=1  print the planned runs (those already complete marked), total steps and the estimated wall
#              time; train nothing. The estimate assumes an idle machine, one core per job: BN 290, no BN
#              490 steps/s, 12 s start-up per run (STEPS_PER_S_BN, STEPS_PER_S_NO_BN, STARTUP_S override):
#              about 65 min for stage 1's 81 runs with JOBS=2, and at most about 50 min for stage 2.
#   SWEEP_DIR  default outputs/sweeps/mnist_fig1, or mnist_fig1+<extra overrides> when there are any
#   DOCS_DIR   where the report files are copied (default docs/mnist for the default run, else none)
#   BNEXP_DATA_ROOT (default ../shared/data when it exists).
# Resumable: re-running the same command completes only the runs without a finished summary.json (bnexp
# skips a complete run folder and resumes an interrupted one from its checkpoint). A SWEEP_DIR holding complete
# tuning runs that read the test set (the one-stage design's) is refused: move them aside first.
# Checked before anything runs: every environment value and extra override (each block's config is composed
# and validated as bnexp train does), the sweep and docs folders; a problem is one "error:" line, exit code 2.
# Ctrl-C or SIGTERM stops every process the script started (each block runs in its own process group): the
# runs save their checkpoints and are recorded interrupted, nothing is left running after 10 s, no further
# block starts, and the exit code is 130 / 143; the same command resumes. (bnexp/designs/orchestrate.py)
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m bnexp.designs.orchestrate mnist "$@"
