#!/usr/bin/env bash
# Reproduce the paper's Sec. 4.2 claims in kind on CIFAR-10 as one Hydra multirun, then report.
#
#   scripts/reproduce_cifar.sh [extra Hydra overrides ...]
#
# Runs the seven presets of conf/experiment/ (baseline, bn_baseline, bn_x5, bn_x30, bn_x5_sigmoid,
# baseline_x5, baseline_sigmoid) x seeds {0, 1} at the CPU scale (conf/scale/cpu.yaml), in parallel
# through Hydra's joblib launcher, one torch thread per job; then `bnexp report` prints the paper's
# table (steps to reach the baseline's best test accuracy).
# Environment: SCALE (cpu | gpu, default cpu), JOBS (parallel jobs, default: number of cores),
# SWEEP_DIR (default outputs/sweeps/cifar_<scale>, + <extra overrides> when there are any), BNEXP_DATA_ROOT (default ../shared/data when
# it exists). The copy in ../shared/data is a non-canonical (re-encoded) copy of CIFAR-10, so the
# script passes data.verify_checksums=false when it uses it; with the official files set
# VERIFY_CHECKSUMS=true.
# Re-running the same command completes only the runs without a finished summary.json.
set -euo pipefail
rc=0  # a sweep with failed jobs: report the rest, then exit non-zero
cd "$(dirname "$0")/.."
SCALE="${SCALE:-cpu}"
JOBS="${JOBS:-$(nproc)}"
source scripts/_sweep_name.sh
SWEEP_DIR="${SWEEP_DIR:-outputs/sweeps/cifar_${SCALE}$(sweep_suffix "$@")}"
source scripts/_data_env.sh
THREADS=1
if [[ "${SCALE}" == "gpu" ]]; then THREADS=0; fi
start=$(date +%s)
bnexp train -m \
  hydra/launcher=joblib "hydra.launcher.n_jobs=${JOBS}" "hydra.sweep.dir=${SWEEP_DIR}" \
  "trainer.num_threads=${THREADS}" trainer.progress=false "data.verify_checksums=${VERIFY}" \
  "+experiment=baseline,bn_baseline,bn_x5,bn_x30,bn_x5_sigmoid,baseline_x5,baseline_sigmoid" \
  "scale=${SCALE}" seed=0,1 \
  "$@" || rc=$?
end=$(date +%s)
echo "sweep wall time: $((end - start)) s (${JOBS} parallel jobs, scale ${SCALE})"
bnexp report "${SWEEP_DIR}"
exit "${rc}"
