#!/usr/bin/env bash
# One of the five studies (design, claims and pass rules: docs/studies/NAME.md), then report.
#
#   scripts/study.sh NAME [extra Hydra overrides ...]
#
# NAME: batch_size | inference_statistics | placement | normalizer | depth. The runs of each study
# (bnexp/designs/studies.py) are Hydra multiruns through the stacked launcher, one torch thread per process, into
# one sweep folder; each run folder is named by the keys its multirun sweeps. inference_statistics then
# evaluates every run's final weights with batch statistics, running averages and Alg. 2 population
# statistics (python -m bnexp.train.inference_eval).
# Two stages (docs/studies/PLAN.md and its second amendment): stage 1 runs every grid on the tuning seeds 100-102
# with data.validation=10000 (10,000 training images held out and evaluated instead of the test set, which the
# tuning runs never read); stage 2 trains each configuration at the rate(s) chosen there on the full training set
# (data.validation=0), scored on test, on the fresh evaluation seeds 1000-1004. A seed=... override runs one stage:
# the grids on those seeds, on test. A SWEEP_DIR holding complete tuning runs that read the test set is refused. `bnexp report` writes the study section (claims with
# per-seed values, 95% intervals and verdicts, a table, a figure) beside the usual report.
# Extra overrides come last and win, e.g. a quick look: scripts/study.sh depth trainer.max_steps=500 seed=0
# Environment:
#   JOBS       parallel jobs (default: number of cores)
#   LAUNCHER   the Hydra launcher of every block, hydra/launcher=LAUNCHER (default stacked: the MLP runs
#              of a block that differ only in seed or rate train as one batched model; stacked and joblib get
#              hydra.launcher.n_jobs=JOBS)
#   DRY_RUN=1  print the planned multiruns, run counts, steps and the estimated wall time; train nothing
#   SWEEP_DIR  default outputs/sweeps/study_NAME, + <extra overrides> when there are any
#   DOCS_DIR   where the report files are copied (default docs/studies/NAME for the default run, else none)
#   BNEXP_DATA_ROOT (default ../shared/data when it exists)
# Resumable: a second call trains only the runs without a finished summary.json (whole multiruns that are
# complete are not started again; bnexp skips finished runs and resumes interrupted ones from their
# checkpoint). Failed jobs: the report covers the rest and the script exits non-zero.
# Checked before anything runs: every environment value and extra override (each block's config is composed
# and validated as bnexp train does), the sweep and docs folders; a problem is one "error:" line, exit code 2.
# Ctrl-C or SIGTERM stops every process the script started (each block runs in its own process group): the
# runs save their checkpoints and are recorded interrupted, nothing is left running after 10 s, no further
# block starts, and the exit code is 130 / 143; the same command resumes. (bnexp/designs/orchestrate.py)
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m bnexp.designs.orchestrate study "$@"
