#!/usr/bin/env bash
# "Does BN reduce internal covariate shift?": the paper's view and Santurkar et al.'s on the same runs.
#
#   scripts/ics_study.sh [extra Hydra overrides for both parts ...]
#
# Part 1, MNIST (paper Fig. 1 net, 50,000 steps): BN and no BN x seeds {0, 1, 2}, and noisy BN at
# noise strengths bn.noise_scale in {1, 3, 10} x seeds {0, 1, 2} (NOISE_SCALES to change them).
# Part 2, CIFAR-10 (the bn_baseline preset at the CPU scale): the same configurations x seeds {0, 1}.
# Santurkar et al.'s argument needs noisy BN to carry more distribution shift than the plain
# network; the report's noise-strength table shows at which strength its per-unit shift exceeds
# no BN's, and the steps to the target at every strength.
# Every run records the distribution-shift metrics (default, monitor.bn_stats=batch, with BN's
# input; every 500 steps on MNIST, every hist_every of the preset on CIFAR-10), gradient-based ICS and
# the loss-landscape probes (raw and scale-invariant, every 1,000 steps).
# Environment: JOBS, MNIST_DIR (outputs/sweeps/ics_mnist), CIFAR_DIR (outputs/sweeps/ics_cifar; both
# + <extra overrides> when there are any), CIFAR_OVERRIDES (space-separated overrides for the CIFAR-10
# part only, e.g. "scale.baseline_steps=3000": half the preset's budget, its schedule scaled with it),
# NOISE_SCALES (1,3,10), BNEXP_DATA_ROOT, VERIFY_CHECKSUMS (see reproduce_cifar.sh),
# MNIST_DOCS_DIR, CIFAR_DOCS_DIR: where each part's report.md/.json/.csv and figures are copied (defaults
# docs/ics/mnist and docs/ics/cifar for the default run: no extra overrides, NOISE_SCALES and, for the
# CIFAR-10 part, CIFAR_OVERRIDES unset; otherwise none; set one to copy a run with overrides, e.g. the CIFAR-10
# part at a reduced budget, or to "" to copy nothing). Then `bnexp report --update-docs` rewrites the docs'
# numbers from the copied report.json (scripts/_report_docs.sh).
set -euo pipefail
rc=0  # a sweep with failed jobs: report the rest, then exit non-zero
cd "$(dirname "$0")/.."
JOBS="${JOBS:-$(nproc)}"
source scripts/_sweep_name.sh
MNIST_DIR="${MNIST_DIR:-outputs/sweeps/ics_mnist$(sweep_suffix "$@")}"
read -r -a CIFAR_EXTRA <<< "${CIFAR_OVERRIDES:-}"
CIFAR_DIR="${CIFAR_DIR:-outputs/sweeps/ics_cifar$(sweep_suffix "$@" ${CIFAR_EXTRA[@]+"${CIFAR_EXTRA[@]}"})}"
source scripts/_report_docs.sh
# only the default run (no extra overrides, default noise strengths) writes into docs/ unless told to
if [[ -z "${MNIST_DOCS_DIR+x}" ]]; then
  MNIST_DOCS_DIR=""
  if [[ $# -eq 0 && -z "${NOISE_SCALES:-}" ]]; then MNIST_DOCS_DIR="docs/ics/mnist"; fi
fi
if [[ -z "${CIFAR_DOCS_DIR+x}" ]]; then
  CIFAR_DOCS_DIR=""
  if [[ $# -eq 0 && -z "${NOISE_SCALES:-}" && -z "${CIFAR_OVERRIDES:-}" ]]; then CIFAR_DOCS_DIR="docs/ics/cifar"; fi
fi
NOISE_SCALES="${NOISE_SCALES:-1,3,10}"
source scripts/_data_env.sh
# every probe value is kept for the Wasserstein distances (the default keeps 20,000 per layer, for speed)
PROBES=(monitor.grad_ics=true monitor.landscape=true monitor.grad_ics_every=1000 monitor.landscape_every=1000
        monitor.shift_max_values=200000)
start=$(date +%s)
# one sweep folder per dataset: BN and no BN, then noisy BN at every strength (same folder, one report)
MNIST_ARGS=(hydra/launcher=joblib "hydra.launcher.n_jobs=${JOBS}" "$(sweep_dir_override "${MNIST_DIR}")"
            trainer.num_threads=1 trainer.progress=false trainer.eval_every=500 trainer.hist_every=500
            seed=0,1,2 "${PROBES[@]}")
bnexp train -m "${MNIST_ARGS[@]}" bn=true,false "$@" || rc=$?
bnexp train -m "${MNIST_ARGS[@]}" bn=noisy "bn.noise_scale=${NOISE_SCALES}" "$@" || rc=$?
mid=$(date +%s)
CIFAR_ARGS=(hydra/launcher=joblib "hydra.launcher.n_jobs=${JOBS}" "$(sweep_dir_override "${CIFAR_DIR}")"
            trainer.num_threads=1 trainer.progress=false "data.verify_checksums=${VERIFY}"
            +experiment=bn_baseline scale=cpu seed=0,1 "${PROBES[@]}")
bnexp train -m "${CIFAR_ARGS[@]}" bn=true,false "$@" ${CIFAR_EXTRA[@]+"${CIFAR_EXTRA[@]}"} || rc=$?
bnexp train -m "${CIFAR_ARGS[@]}" bn=noisy "bn.noise_scale=${NOISE_SCALES}" "$@" \
  ${CIFAR_EXTRA[@]+"${CIFAR_EXTRA[@]}"} || rc=$?
end=$(date +%s)
echo "MNIST part: $((mid - start)) s, CIFAR-10 part: $((end - mid)) s, total $((end - start)) s (${JOBS} jobs)"
if bnexp report "${MNIST_DIR}"; then copy_report "${MNIST_DIR}" "${MNIST_DOCS_DIR}"; else rc=$?; fi
if bnexp report "${CIFAR_DIR}"; then copy_report "${CIFAR_DIR}" "${CIFAR_DOCS_DIR}"; else rc=$?; fi
exit "${rc}"
