#!/usr/bin/env bash
# Reproduce the paper's Sec. 4.2 claims on CIFAR-10 as budget-accuracy frontiers (the CIFAR-10 frontier
# design; plan, pass rules and cost: docs/cifar/PLAN.md, plan version 2), then report.
#
#   scripts/reproduce_cifar.sh [extra Hydra overrides ...]
#
# Every (preset, budget, seed) is one run whose rate halves 5 times over its own budget
# (trainer.max_steps=B optim.decay_rate=0.5 optim.decay_steps=B/5, 4 evaluations) on top of the
# presets in conf/experiment/. The ladder decisions are made in Python from the runs already in the
# sweep folder (bnexp/designs/ladder.py: `python -m bnexp.designs.ladder next|plan SWEEP_DIR ...`), on
# the seed means of the decision seeds (0, 1):
#   stage 1: the baseline at 6k steps, rates 0.025, 0.04 x dropout 0, 0.3; the winner is the highest
#            seed-mean final test accuracy (its 6k runs are the ladder's 6k rung: same folder);
#   stage 2: the winner at 3k, 6k, 12k, 24k steps, then doubling while the last doubling gains >= 0.5
#            points (the convergence rule), up to the cap of 192k steps; a* = its best accuracy;
#   stage 3: the headline, bn_x5 (5x the winner's rate, no dropout, weight decay / 5) from 375 steps,
#            doubling until it reaches a*, or a doubling gains < 0.5 points, or the baseline's largest budget;
#   stage 4: the other presets in order: bn_baseline (from 1.5k) with the same rules; with PRESETS=all,
#            baseline_x5 (3k; the tuned baseline at 5x its rate), baseline_sigmoid (3k), bn_x5_sigmoid
#            (375), bn_x30 (375); a ladder at chance (or diverged) by 12k stops there, the sigmoid pair
#            stops at 12k, baseline_sigmoid also at its first rung above chance + 5 points;
#   stage 5: EXTRA_SEEDS (none by default) at every rung the ladders ran, baseline and bn_x5 first.
# `DRY_RUN=1` prints which rule stopped each ladder; after a sweep the same plan is written to
# SWEEP_DIR/ladders.txt (and copied into DOCS_DIR with the report).
# Each batch is one Hydra multirun through the joblib launcher (one torch thread per job), longest
# budget first, so the parallel jobs of a batch (the seeds) finish together; then `bnexp report`
# writes the frontier section (bnexp/report/frontier.py) and the rest, copied to DOCS_DIR.
# Environment:
#   SCALE      cpu | gpu (default cpu; gpu: a longer ladder and 3 seeds, not run yet)
#   PRESETS    default (bn_x5, bn_baseline) | all (+ baseline_x5, baseline_sigmoid, bn_x5_sigmoid, bn_x30)
#              | NAME,NAME (the headline bn_x5 always runs first)
#   SEEDS      comma-separated decision seeds (default: the scale's ladder, 0,1 on cpu)
#   EXTRA_SEEDS  seeds run after every ladder stopped, at the rungs they ran (e.g. 2; default none);
#              they change no decision (one seed runs one job at a time)
#   JOBS       parallel jobs (default: number of cores; a multiple of it in seeds uses every core)
#   LADDER     overrides of the ladder, e.g. "tune=40;baseline=20,40;cap=80;early=40;bn_x5=10;bn_baseline=20"
#   DRY_RUN=1  print the planned runs, total steps and estimated wall time; train nothing
#   STEPS_PER_S  one job's steps/s for DRY_RUN's estimate (default 15; docs/cifar/PLAN.md, "Cost")
#   SWEEP_DIR  default outputs/sweeps/cifar_frontier_<scale>, + <extra overrides> when there are any
#   DOCS_DIR   where the report files are copied (default docs/cifar for the cpu run with PRESETS=default|all,
#              default seeds and no LADDER or extra overrides; else none)
#   BNEXP_DATA_ROOT, VERIFY_CHECKSUMS: as in scripts/_data_env.sh (the ../shared/data copy of CIFAR-10
#   is re-encoded, so data.verify_checksums=false is passed for it).
# Resumable: a second call skips the complete runs (bnexp skips a folder whose summary.json is finished
# or diverged, and resumes an interrupted one from its checkpoint), so a cut sweep completes. Failed
# jobs: the loop stops when a batch still misses runs after it ran; the report covers the rest and the
# script exits non-zero. Extra overrides must not repeat the ladder's keys (max_steps, schedule, rate).
set -euo pipefail
rc=0
cd "$(dirname "$0")/.."
SCALE="${SCALE:-cpu}"
JOBS="${JOBS:-$(nproc)}"
PRESETS="${PRESETS:-default}"
source scripts/_sweep_name.sh
source scripts/_report_docs.sh
SWEEP_DIR="${SWEEP_DIR:-outputs/sweeps/cifar_frontier_${SCALE}$(sweep_suffix "$@")}"
if [[ -z "${DOCS_DIR+x}" ]]; then
  DOCS_DIR=""
  if [[ $# -eq 0 && "${SCALE}" == "cpu" && -z "${LADDER:-}" && -z "${SEEDS:-}" && ( "${PRESETS}" == "default" || "${PRESETS}" == "all" ) ]]; then
    DOCS_DIR="docs/cifar"
  fi
fi
PLAN=("${SWEEP_DIR}" --scale "${SCALE}" --presets "${PRESETS}")
if [[ -n "${SEEDS:-}" ]]; then PLAN+=(--seeds "${SEEDS}"); fi
if [[ -n "${EXTRA_SEEDS:-}" ]]; then PLAN+=(--extra-seeds "${EXTRA_SEEDS}"); fi
if [[ -n "${LADDER:-}" ]]; then PLAN+=(--ladder "${LADDER}"); fi
if [[ "${DRY_RUN:-0}" == "1" ]]; then
  echo "DRY_RUN: the planned runs of ${SWEEP_DIR} (nothing is trained)"
  exec python -m bnexp.designs.ladder plan "${PLAN[@]}" --jobs "${JOBS}" --steps-per-s "${STEPS_PER_S:-15}"
fi
source scripts/_data_env.sh
THREADS=1
if [[ "${SCALE}" == "gpu" ]]; then THREADS=0; fi
COMMON=(hydra/launcher=joblib "hydra.launcher.n_jobs=${JOBS}" "$(sweep_dir_override "${SWEEP_DIR}")"
        "trainer.num_threads=${THREADS}" trainer.progress=false "data.verify_checksums=${VERIFY}" "scale=${SCALE}")
start=$(date +%s)
previous=""
while :; do
  if ! batch="$(python -m bnexp.designs.ladder next "${PLAN[@]}")"; then rc=2; break; fi
  if [[ -z "${batch}" ]]; then break; fi
  if [[ "${batch}" == "${previous}" ]]; then
    echo "error: these runs are still missing after they ran (failed jobs, see above); stopping:" >&2
    echo "${batch}" >&2
    rc=1
    break
  fi
  previous="${batch}"
  while IFS= read -r line; do
    if [[ "${line}" == "#"* ]]; then echo "${line#\# }"; continue; fi
    read -ra OVERRIDES <<< "${line}"
    bnexp train -m "${COMMON[@]}" "${OVERRIDES[@]}" "$@" < /dev/null || rc=$?
  done <<< "${batch}"
done
end=$(date +%s)
echo "sweep wall time: $((end - start)) s (${JOBS} parallel jobs, scale ${SCALE})"
# every planned run, its status and the rule that stopped each ladder, beside the runs (and in DOCS_DIR)
if [[ -d "${SWEEP_DIR}" ]]; then
  python -m bnexp.designs.ladder plan "${PLAN[@]}" --jobs "${JOBS}" --steps-per-s "${STEPS_PER_S:-15}" \
    > "${SWEEP_DIR}/ladders.txt" || rc=2
  sed -n '/^ladders (/,/^to run/p' "${SWEEP_DIR}/ladders.txt" | sed '$d'
fi
bnexp report "${SWEEP_DIR}" || rc=$?
copy_report "${SWEEP_DIR}" "${DOCS_DIR}"  # scripts/_report_docs.sh
if [[ -n "${DOCS_DIR}" && -f "${SWEEP_DIR}/ladders.txt" && -f "${SWEEP_DIR}/report.json" ]]; then
  cp "${SWEEP_DIR}/ladders.txt" "${DOCS_DIR}/"
fi
echo "total wall time: $(( $(date +%s) - start )) s"
exit "${rc}"
