#!/usr/bin/env bash
# "Does BN reduce internal covariate shift?": the paper's view and Santurkar et al.'s on the same runs.
#
#   scripts/ics_study.sh [extra Hydra overrides for both parts ...]
#
# Part 1, MNIST (paper Fig. 1 net, 50,000 steps): BN, noisy BN and no BN x seeds {0, 1, 2}.
# Part 2, CIFAR-10 (the bn_baseline preset at the CPU scale): BN, noisy BN and no BN x seeds {0, 1}.
# Every run records the distribution-shift metrics (default), gradient-based ICS and the
# loss-landscape probes (monitor.grad_ics=true, monitor.landscape=true, every 1,000 steps).
# Environment: JOBS, MNIST_DIR (outputs/sweeps/ics_mnist), CIFAR_DIR (outputs/sweeps/ics_cifar),
# BNEXP_DATA_ROOT, VERIFY_CHECKSUMS (see reproduce_cifar.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${JOBS:-$(nproc)}"
MNIST_DIR="${MNIST_DIR:-outputs/sweeps/ics_mnist}"
CIFAR_DIR="${CIFAR_DIR:-outputs/sweeps/ics_cifar}"
source scripts/_data_env.sh
# every probe value is kept for the Wasserstein distances (the default keeps 20,000 per layer, for speed)
PROBES=(monitor.grad_ics=true monitor.landscape=true monitor.grad_ics_every=1000 monitor.landscape_every=1000
        monitor.shift_max_values=200000)
start=$(date +%s)
bnexp train -m hydra/launcher=joblib "hydra.launcher.n_jobs=${JOBS}" "hydra.sweep.dir=${MNIST_DIR}" \
  trainer.num_threads=1 trainer.progress=false trainer.eval_every=500 trainer.hist_every=500 \
  bn=true,noisy,false seed=0,1,2 "${PROBES[@]}" "$@"
mid=$(date +%s)
bnexp train -m hydra/launcher=joblib "hydra.launcher.n_jobs=${JOBS}" "hydra.sweep.dir=${CIFAR_DIR}" \
  trainer.num_threads=1 trainer.progress=false "data.verify_checksums=${VERIFY}" \
  +experiment=bn_baseline scale=cpu bn=true,noisy,false seed=0,1 "${PROBES[@]}" "$@"
end=$(date +%s)
echo "MNIST part: $((mid - start)) s, CIFAR-10 part: $((end - mid)) s, total $((end - start)) s (${JOBS} jobs)"
bnexp report "${MNIST_DIR}"
bnexp report "${CIFAR_DIR}"
