#!/usr/bin/env bash
# The GPU check (docs/stacked.md, "GPU"): one command for a person with a CUDA GPU, made to fit a borrowed
# GPU's 15-minute slot with room to spare: under 8 minutes on one GPU. The plan (DRY_RUN=1 prints it with
# each step's command, its budget and the limit it is stopped at: 350 s budgeted, 460 s at most):
#
#   1. gpu test tier      tests/test_gpu.py -m gpu: no host sync where nothing is due, the sync budget of
#                         due steps (counts kept in OUT/syncs.json), resume on CUDA, stack vs alone
#   2. bench_stacked      MLP R=8 and CIFAR-10 R=4 on CUDA; fails when MLP R=8 is not faster stacked
#   3. MNIST pair         BN and no-BN, 2,000 steps each (the paper's Fig. 1 pair, short)
#   4. CIFAR-10 preset    bn_baseline, 500 steps
#   5. the table          device, compute capability, TF32, steps/s per case: OUT/table.md, and appended to
#                         docs/gpu_checks.md (the file the project keeps; docs/stacked.md says how to read it)
#
#   scripts/gpu_check.sh [OUT_DIR]        (default: outputs/gpu_check_<date>)
#   DRY_RUN=1 scripts/gpu_check.sh        the plan, its commands and budget; runs nothing, writes nothing
#
# Needs: a CUDA device visible to torch, the data under $BNEXP_DATA_ROOT (set to ../shared/data beside the
# checkout when unset). PYTHON: the interpreter (default: the checkout's .venv/bin/python when it exists).
# PRECISION=fp32|tf32|bf16 (default fp32) for steps 3 and 4. Exit code 1 when a step failed (the table says
# which), 2 when there is no CUDA device.
set -u
cd "$(dirname "$0")/.."
if [[ -z "${BNEXP_DATA_ROOT:-}" && -d ../shared/data ]]; then export BNEXP_DATA_ROOT="$(cd ../shared/data && pwd)"; fi
OUT=${1:-outputs/gpu_check_$(date +%Y-%m-%d_%H-%M-%S)}
if [[ -n "${PYTHON:-}" ]]; then PY=$PYTHON; elif [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python; fi
PRECISION=${PRECISION:-fp32}
KEPT=docs/gpu_checks.md
TOTAL_LIMIT=480  # 8 minutes

# name | seconds budgeted | seconds allowed (the step is stopped there) | log file | command
PLAN=(
  "gpu test tier|150|170|gpu_tests.log|env BNEXP_GPU_SYNC_LOG=$OUT/syncs.json $PY -m pytest -n 0 -p no:cacheprovider -m gpu tests/test_gpu.py -q -rs"
  "bench_stacked (cuda)|70|90|bench_stacked.log|$PY benchmarks/bench_stacked.py --device cuda --threads 0 --steps 100 --blocks 3 --cases mlp:8,cifar:4 --require-faster mlp:8 --json $OUT/bench_stacked.json"
  "MNIST pair, 2000 steps|50|65|mnist_pair.log|$PY -m bnexp.cli train -m bn=true,false trainer.device=cuda trainer.precision=$PRECISION trainer.max_steps=2000 trainer.eval_every=500 trainer.hist_every=1000 trainer.progress=false hydra.sweep.dir=$OUT/mnist_pair"
  "CIFAR-10 bn_baseline, 500 steps|60|75|cifar.log|$PY -m bnexp.cli train +experiment=bn_baseline data.verify_checksums=false trainer.device=cuda trainer.precision=$PRECISION trainer.max_steps=500 trainer.eval_every=250 trainer.hist_every=500 trainer.progress=false hydra.run.dir=$OUT/cifar"
)
TABLE_LIMIT=20
SETUP=20  # the CUDA check and the device line (two interpreter starts), and 5 s per step to kill a stopped one

budget=$SETUP; limit=$((SETUP + TABLE_LIMIT))
for row in "${PLAN[@]}"; do IFS='|' read -r _ b l _ _ <<< "$row"; budget=$((budget + b)); limit=$((limit + l + 5)); done
echo "gpu_check: ${#PLAN[@]} steps and the table, budget ${budget} s, stopped at ${limit} s at most (limit ${TOTAL_LIMIT} s); output in $OUT"
i=0
for row in "${PLAN[@]}"; do
  IFS='|' read -r name b l log cmd <<< "$row"
  i=$((i + 1))
  echo "  $i. $name: budget ${b} s, stopped at ${l} s -> $OUT/$log"
  echo "     \$ $cmd"
done
echo "  $((i + 1)). the table: $OUT/table.md, appended to $KEPT (stopped at ${TABLE_LIMIT} s)"
if (( limit > TOTAL_LIMIT )); then echo "gpu_check: the plan's limits add up to ${limit} s, over ${TOTAL_LIMIT} s" >&2; exit 2; fi
if [[ "${DRY_RUN:-0}" != 0 ]]; then exit 0; fi

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu_check: torch sees no CUDA device here; nothing to check." >&2
  exit 2
fi
mkdir -p "$OUT"
rm -f "$OUT/syncs.json"
"$PY" -c 'import torch; print("device:", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0), "torch", torch.__version__)' | tee "$OUT/device.txt"

failed=0
: > "$OUT/steps.tsv"
for row in "${PLAN[@]}"; do
  IFS='|' read -r name b l log cmd <<< "$row"
  echo "== $name (budget ${b} s): $cmd"
  t0=$SECONDS
  # shellcheck disable=SC2086  # the command is a word list by design (OUT_DIR must not hold spaces)
  timeout --kill-after=5 "$l" $cmd > "$OUT/$log" 2>&1
  rc=$?
  (( rc == 0 )) || failed=1
  printf '%s\t%s\t%s\n' "$name" "$((SECONDS - t0))" "$rc" >> "$OUT/steps.tsv"
  tail -n 5 "$OUT/$log"
done

timeout "$TABLE_LIMIT" "$PY" - "$OUT" "$KEPT" "$PRECISION" <<'EOF'
"""The check's one table: device, compute capability, TF32, steps/s per case, seconds and exit code per step."""
import datetime
import json
import sys
from pathlib import Path

import torch

out, kept, precision = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
steps = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines() if line]
dev = torch.cuda.get_device_name(0)
cap = ".".join(map(str, torch.cuda.get_device_capability(0)))


def summary(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


cases = []  # (case, steps/s, precision it computed in)
bench = summary(out / "bench_stacked.json").get("cases", {})
for case, r in bench.items():
    cases.append((f"bench {case} separate, per run", r["separate"], "fp32"))
    cases.append((f"bench {case} stacked, per run (x{r['ratio']:.2f})", r["stacked"], "fp32"))
for s in sorted((out / "mnist_pair").glob("*/summary.json")):
    d = summary(s)
    cases.append((f"MNIST {'BN' if d.get('bn') else 'no BN'} 2000 steps ({d.get('status')})", d.get("steps_per_s"),
                  d.get("precision")))
d = summary(out / "cifar" / "summary.json")
cases.append((f"CIFAR-10 bn_baseline 500 steps ({d.get('status')})", d.get("steps_per_s"), d.get("precision")))
rows = ["| device | capability | TF32 | case | steps/s |", "|---|---|---|---|---:|"]
for case, sps, prec in cases:
    tf32 = "on" if prec == "tf32" else "off"
    rows.append(f"| {dev} | {cap} | {tf32} | {case} | {sps:.0f} |" if isinstance(sps, (int, float))
                else f"| {dev} | {cap} | {tf32} | {case} | - |")
for name, t, rc in steps:
    rows.append(f"| {dev} | {cap} | - | step: {name} ({t} s, exit {rc}) | - |")
table = "\n".join(rows) + "\n"
(out / "table.md").write_text(table)
head = (f"\n## {datetime.date.today()}: {dev}, torch {torch.__version__}, precision={precision} "
        f"({out})\n\n")
with kept.open("a") as f:
    f.write(head + table)
print(table)
EOF
rc=$?
if (( rc != 0 )); then echo "gpu_check: the table could not be written (exit $rc)" >&2; exit 1; fi
exit "$failed"
