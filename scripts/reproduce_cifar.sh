#!/usr/bin/env bash
# Reproduce the paper's Sec. 4.2 claims on CIFAR-10 in two stages, then report (docs/cifar/PLAN.md).
#
#   scripts/reproduce_cifar.sh [extra Hydra overrides ...]
#
# Stage 1, the baseline's rate grid: +experiment=baseline at every rate of scale.lr_grid (conf/scale/)
#   x SEEDS. The best rate (highest plateau accuracy: mean of the last evaluations, mean over seeds) is
#   "the baseline". When it lies at an edge of the grid, one more rate beyond that edge (x or / 2.5) is
#   run once and the choice repeated.
# Stage 2, the other presets at multiples of that rate (scale.base_lr=<best>): bn_baseline, baseline_x5,
#   baseline_sigmoid (the baseline's budget), bn_x5, bn_x30, bn_x5_sigmoid (their own, shorter budget)
#   x SEEDS.
# Both stages are Hydra multiruns through the joblib launcher, one torch thread per job; then
# `bnexp report` writes the matched-accuracy Sec. 4.2 section (bnexp/report/sec42.py) and the rest.
# Environment: SCALE (cpu | gpu, default cpu), JOBS (parallel jobs, default: number of cores),
# SEEDS (default 0,1), LR_GRID (comma-separated rates, default scale.lr_grid), SWEEP_DIR (default
# outputs/sweeps/cifar_<scale>, + <extra overrides> when there are any), BNEXP_DATA_ROOT (default
# ../shared/data when it exists). The copy in ../shared/data is a non-canonical (re-encoded) copy of
# CIFAR-10, so the script passes data.verify_checksums=false when it uses it; with the official files
# set VERIFY_CHECKSUMS=true. Failed jobs: the report covers the rest and the script exits non-zero.
# Re-running the same command completes only the runs without a finished summary.json.
set -euo pipefail
rc=0  # a sweep with failed jobs: report the rest, then exit non-zero
cd "$(dirname "$0")/.."
SCALE="${SCALE:-cpu}"
JOBS="${JOBS:-$(nproc)}"
source scripts/_sweep_name.sh
SWEEP_DIR="${SWEEP_DIR:-outputs/sweeps/cifar_${SCALE}$(sweep_suffix "$@")}"
SEEDS="${SEEDS:-0,1}"
source scripts/_data_env.sh
THREADS=1
if [[ "${SCALE}" == "gpu" ]]; then THREADS=0; fi
if [[ -z "${LR_GRID:-}" ]]; then
  LR_GRID="$(python -c "from bnexp.config import compose_config
print(','.join(f'{x:g}' for x in compose_config(['scale=${SCALE}']).scale.lr_grid))")"
fi
COMMON=(hydra/launcher=joblib "hydra.launcher.n_jobs=${JOBS}" "hydra.sweep.dir=${SWEEP_DIR}"
        "trainer.num_threads=${THREADS}" trainer.progress=false "data.verify_checksums=${VERIFY}"
        "scale=${SCALE}" "seed=${SEEDS}")
start=$(date +%s)
echo "stage 1: the baseline at rates ${LR_GRID}, seeds ${SEEDS}"
bnexp train -m "${COMMON[@]}" +experiment=baseline "scale.base_lr=${LR_GRID}" "$@" || rc=$?
if ! PICK="$(python -m bnexp.report.sec42 best-lr "${SWEEP_DIR}")"; then
  bnexp report "${SWEEP_DIR}" || true
  exit 1
fi
read -r BEST POSITION <<< "${PICK}"
if [[ "${POSITION}" == "low-edge" || "${POSITION}" == "high-edge" ]]; then
  EXTRA="$(python -c "print(f'{${BEST} * (2.5 if '${POSITION}' == 'high-edge' else 0.4):g}')")"
  echo "the best rate ${BEST} is at the ${POSITION} of the grid: running the baseline at ${EXTRA} too"
  bnexp train -m "${COMMON[@]}" +experiment=baseline "scale.base_lr=${EXTRA}" "$@" || rc=$?
  read -r BEST POSITION <<< "$(python -m bnexp.report.sec42 best-lr "${SWEEP_DIR}")"
fi
echo "stage 2: the presets at multiples of the baseline's rate ${BEST} (${POSITION})"
bnexp train -m "${COMMON[@]}" \
  "+experiment=bn_baseline,baseline_x5,baseline_sigmoid,bn_x5,bn_x30,bn_x5_sigmoid" "scale.base_lr=${BEST}" "$@" || rc=$?
end=$(date +%s)
echo "sweep wall time: $((end - start)) s (${JOBS} parallel jobs, scale ${SCALE})"
bnexp report "${SWEEP_DIR}"
exit "${rc}"
