#!/usr/bin/env bash
# One command for a person with a CUDA GPU (docs/stacked.md, "GPU"): the `gpu` test tier, the stacked
# benchmark on CUDA, the MNIST reproduction, and a table of how long each took.
#
#   scripts/gpu_check.sh [OUT_DIR]        (default: outputs/gpu_check_<date>)
#
# Needs: a CUDA device visible to torch, the data under $BNEXP_DATA_ROOT (set to ../shared/data beside the
# checkout when unset). Writes OUT_DIR/{gpu_tests,bench_stacked,reproduce_mnist}.log
# and OUT_DIR/times.md; exit code 1 when a step failed (the table says which).
set -u
cd "$(dirname "$0")/.."
if [[ -z "${BNEXP_DATA_ROOT:-}" && -d ../shared/data ]]; then export BNEXP_DATA_ROOT="$(cd ../shared/data && pwd)"; fi
OUT=${1:-outputs/gpu_check_$(date +%Y-%m-%d_%H-%M-%S)}
PY=${PYTHON:-python}
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu_check: torch sees no CUDA device here; nothing to check." >&2
  exit 2
fi
mkdir -p "$OUT"
"$PY" -c 'import torch; print("device:", torch.cuda.get_device_name(0), "torch", torch.__version__)' | tee "$OUT/device.txt"

declare -a NAMES TIMES CODES
step() {  # step NAME LOG COMMAND...
  local name=$1 log=$2; shift 2
  echo "== $name: $*"
  local t0=$SECONDS
  "$@" > "$OUT/$log" 2>&1
  local rc=$?
  NAMES+=("$name"); TIMES+=($((SECONDS - t0))); CODES+=($rc)
  tail -n 5 "$OUT/$log"
}

step "gpu test tier" gpu_tests.log "$PY" -m pytest -n 0 -p no:cacheprovider -m gpu tests/test_gpu.py -q -rs
step "bench_stacked (cuda)" bench_stacked.log "$PY" benchmarks/bench_stacked.py --device cuda --threads 0 \
  --steps 200 --blocks 5 --cases mlp:1,mlp:8,mlp:32,cifar:1,cifar:4
step "MNIST reproduction (cuda)" reproduce_mnist.log scripts/reproduce_mnist.sh trainer.device=cuda

{
  echo "| step | seconds | exit code |"
  echo "|---|---:|---:|"
  for i in "${!NAMES[@]}"; do echo "| ${NAMES[$i]} | ${TIMES[$i]} | ${CODES[$i]} |"; done
} | tee "$OUT/times.md"
for rc in "${CODES[@]}"; do [ "$rc" -eq 0 ] || exit 1; done
