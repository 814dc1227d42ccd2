#!/usr/bin/env bash
# Reproduce the paper's Sec. 4.2 claims on CIFAR-10 as budget-accuracy frontiers (the CIFAR-10 frontier
# design; plan, pass rules and cost: docs/cifar/PLAN.md, plan version 2), then report.
#
#   scripts/reproduce_cifar.sh [extra Hydra overrides ...]
#
# Every (preset, budget, seed) is one run whose rate halves 5 times over its own budget
# (trainer.max_steps=B optim.decay_rate=0.5 optim.decay_steps=B/5, 4 evaluations) on top of the
# presets in conf/experiment/. The ladder decisions are made in Python from the runs already in the
# sweep folder (bnexp/designs/ladder.py: `python -m bnexp.designs.ladder next|plan SWEEP_DIR ...`):
#   stage 1: the baseline at 6k steps, rates 0.025, 0.04 x dropout 0, 0.3, seeds 0, 1; the winner is the
#            highest seed-mean final test accuracy (its 6k runs are the ladder's 6k rung: same folder);
#   stage 2: the winner at 3k, 6k, 12k, 24k steps, and 48k when 24k gains >= 0.5 points over 12k;
#   stage 3: bn_baseline from 1.5k and bn_x5 from 375 steps (5x the winner's rate, no dropout, weight
#            decay / 5), doubling until the frontier reaches the baseline's best seed-mean accuracy or the
#            last doubling gains < 0.5 points, capped at the baseline's largest budget.
# Each batch is one Hydra multirun through the stacked launcher (one torch thread per process; docs/stacked.md), longest
# budget first, so the parallel jobs of a batch (the seeds) finish together; then `bnexp report`
# writes the frontier section (bnexp/report/frontier.py) and the rest, copied to DOCS_DIR.
# Environment:
#   SCALE      cpu | gpu (default cpu; gpu: a longer ladder and 3 seeds, not run yet)
#   PRESETS    default (bn_x5, bn_baseline) | all (+ baseline_x5, baseline_sigmoid, bn_x5_sigmoid, bn_x30)
#              | NAME,NAME (the headline bn_x5 always runs first)
#   SEEDS      comma-separated decision seeds (default: the scale's ladder, 0,1 on cpu)
#   EXTRA_SEEDS  seeds run after every ladder stopped, at the rungs they ran (e.g. 2; default none);
#              they change no decision
#   JOBS       parallel jobs (default: number of cores; a multiple of it in seeds uses every core)
#   LAUNCHER   the Hydra launcher of every block, hydra/launcher=LAUNCHER (default stacked: the MLP runs
#              of a block that differ only in seed or rate train as one batched model; stacked and joblib get
#              hydra.launcher.n_jobs=JOBS)
#   LADDER     overrides of the ladder, e.g. "tune=40;baseline=20,40;cap=80;early=40;bn_x5=10;bn_baseline=20"
#   PRECISION  fp32 | bf16 (default fp32). bf16: once the tuning stage and the baseline's fixed rungs are done,
#              the bf16 check (docs/cifar/PLAN.md; bnexp/designs/precision_check.py) trains the tuned baseline and
#              bn_x5 at 6k and 24k steps in bf16 in <SWEEP_DIR>_bf16_check and compares them with the sweep's fp32
#              runs; every later run trains in bf16 only if it passes (verdict: SWEEP_DIR/precision_check.json).
#              Refused on a CPU without native bfloat16 kernels
#   DRY_RUN=1  print the planned runs, total steps and estimated wall time; train nothing
#   STEPS_PER_S  one job's steps/s for DRY_RUN's estimate (default 15: docs/cifar/PLAN.md)
#   SWEEP_DIR  default outputs/sweeps/cifar_frontier_<scale>, + <extra overrides> when there are any
#   DOCS_DIR   where the report files and ladders.txt (every planned run and the rule that stopped each
#              ladder) are copied (default docs/cifar for the cpu run with PRESETS=default|all, default seeds
#              and no LADDER or extra overrides; else none)
#   BNEXP_DATA_ROOT (default ../shared/data when it exists), VERIFY_CHECKSUMS (default true; false for the
#   ../shared/data copy of CIFAR-10, which is re-encoded).
# Resumable: a second call skips the complete runs (bnexp skips a folder whose summary.json is finished
# or diverged, and resumes an interrupted one from its checkpoint), so a cut sweep completes. Failed
# jobs: the loop stops when a batch still misses runs after it ran; the report covers the rest and the
# script exits non-zero. Extra overrides must not repeat the ladder's keys (max_steps, schedule, rate).
# Checked before anything runs: every environment value and extra override (each block's config is composed
# and validated as bnexp train does), the sweep and docs folders; a problem is one "error:" line, exit code 2.
# Ctrl-C or SIGTERM stops every process the script started (each block runs in its own process group): the
# runs save their checkpoints and are recorded interrupted, nothing is left running after 10 s, no further
# block starts, and the exit code is 130 / 143; the same command resumes. (bnexp/designs/orchestrate.py)
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m bnexp.designs.orchestrate cifar "$@"
