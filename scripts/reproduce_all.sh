#!/usr/bin/env bash
# The whole paper in one command: the MNIST reproduction, the CIFAR-10 ladder, the ICS study and the five
# studies, in this order, each into its default sweep folder; then every report is copied into docs/ and
# `bnexp report --update-docs` rewrites the docs' numbers from the copies.
#
#   scripts/reproduce_all.sh [extra Hydra overrides for every part ...]
#
# The parts are those of scripts/reproduce_mnist.sh, reproduce_cifar.sh, ics_study.sh and study.sh NAME
# (NAME = batch_size, inference_statistics, placement, normalizer, depth), with their environment variables
# (JOBS, LAUNCHER, BNEXP_DATA_ROOT, VERIFY_CHECKSUMS, STEPS_PER_S_BN, STEPS_PER_S_NO_BN, STARTUP_S, SCALE,
# PRESETS, SEEDS, LADDER, STEPS_PER_S, NOISE_SCALES, CIFAR_OVERRIDES); the variables that name one sweep's
# folders (SWEEP_DIR, DOCS_DIR, MNIST_DIR, CIFAR_DIR, MNIST_DOCS_DIR, CIFAR_DOCS_DIR) are refused. With extra
# overrides every part writes into its folder + <extra overrides> and nothing is copied into docs/.
#   DRY_RUN=1  print every part's plan, the exact commands and the estimated wall time of each part and in
#              all (the CIFAR-10 ladder's later stages are decided from results: its runs always needed count)
# Resumable: every part trains only the runs without a finished summary.json and resumes interrupted runs from
# their checkpoints, so the same command completes a cut reproduction. Everything is checked before anything
# runs (one "error:" line, exit code 2); Ctrl-C or SIGTERM stops every process it started within 10 s, the
# runs recorded interrupted with their checkpoints, exit code 130 / 143. (bnexp/designs/orchestrate.py)
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m bnexp.designs.orchestrate all "$@"
