#!/usr/bin/env bash
# "Does BN reduce internal covariate shift?": the paper's view and Santurkar et al.'s on the same runs.
#
#   scripts/ics_study.sh [extra Hydra overrides for both parts ...]
#
# The design, claims and views are fixed in docs/ics/PLAN.md before the results.
# Part 1, MNIST (paper Fig. 1 net, 50,000 steps): BN and no BN x seeds {0, ..., 4}, each at its own rate chosen
# on the MNIST reproduction's tuning seeds 100-102 (the grids of reproduce_mnist.sh's stage 1 in
# MNIST_TUNING_DIR, default outputs/sweeps/mnist_fig1; an lr=RATE override sets every rate instead), and noisy
# BN at BN's rate and noise strengths bn.noise_scale in {1, 3, 10} x the same seeds (NOISE_SCALES to change them).
# Part 2, CIFAR-10 (the bn_baseline preset at the CPU scale, its rate): the same configurations x seeds {0, 1, 2}.
# Santurkar et al.'s argument needs noisy BN to carry more distribution shift than the plain
# network; the report's noise-strength table shows at which strength its per-unit shift exceeds
# no BN's, and the steps to the target at every strength.
# Every run records the distribution-shift metrics (default, monitor.bn_stats=batch, with BN's
# input; every 500 steps on MNIST, every hist_every of the preset on CIFAR-10), gradient-based ICS and
# the loss-landscape probes (raw and scale-invariant, every 1,000 steps).
# Environment: JOBS, LAUNCHER (hydra/launcher=LAUNCHER, default stacked; docs/stacked.md), DRY_RUN=1 (print the plan, the
# commands and the estimated wall time; train nothing), MNIST_DIR (outputs/sweeps/ics_mnist), CIFAR_DIR
# (outputs/sweeps/ics_cifar; both + <extra overrides> when there are any), CIFAR_OVERRIDES (space-separated overrides for the CIFAR-10
# part only, e.g. "scale.baseline_steps=3000": half the preset's budget, its schedule scaled with it),
# NOISE_SCALES (1,3,10), MNIST_TUNING_DIR (incomplete grids: one "error:" line, exit 2), BNEXP_DATA_ROOT, VERIFY_CHECKSUMS (see reproduce_cifar.sh),
# MNIST_DOCS_DIR, CIFAR_DOCS_DIR: where each part's report.md/.json/.csv and figures are copied (defaults
# docs/ics/mnist and docs/ics/cifar for the default run: no extra overrides, NOISE_SCALES and, for the
# CIFAR-10 part, CIFAR_OVERRIDES unset; otherwise none; set one to copy a run with overrides, e.g. the CIFAR-10
# part at a reduced budget, or to "" to copy nothing). Then `bnexp report --update-docs` rewrites the docs'
# numbers from the copied report.json.
# Checked before anything runs: every environment value and extra override (each block's config is composed
# and validated as bnexp train does), the sweep and docs folders; a problem is one "error:" line, exit code 2.
# Ctrl-C or SIGTERM stops every process the script started (each block runs in its own process group): the
# runs save their checkpoints and are recorded interrupted, nothing is left running after 10 s, no further
# block starts, and the exit code is 130 / 143; the same command resumes. (bnexp/designs/orchestrate.py)
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m bnexp.designs.orchestrate ics "$@"
