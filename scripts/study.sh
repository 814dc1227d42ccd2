#!/usr/bin/env bash
# One of the five studies of issue 23 (design, claims and pass rules: docs/studies/NAME.md), then report.
#
#   scripts/study.sh NAME [extra Hydra overrides ...]
#
# NAME: batch_size | inference_statistics | placement | normalizer | depth. The runs of each study
# (bnexp/designs/studies.py) are Hydra multiruns through the joblib launcher, one torch thread per job, into
# one sweep folder; each run folder is named by the keys its multirun sweeps. inference_statistics then
# evaluates every run's final weights with batch statistics, running averages and Alg. 2 population
# statistics (python -m bnexp.train.inference_eval). `bnexp report` writes the study section (claims with
# per-seed values, 95% intervals and verdicts, a table, a figure) beside the usual report.
# Extra overrides come last and win, e.g. a quick look: scripts/study.sh depth trainer.max_steps=500 seed=0
# Environment:
#   JOBS       parallel jobs (default: number of cores)
#   DRY_RUN=1  print the planned multiruns, run counts, steps and the estimated wall time; train nothing
#   SWEEP_DIR  default outputs/sweeps/study_NAME, + <extra overrides> when there are any
#   DOCS_DIR   where the report files are copied (default docs/studies/NAME for the default run, else none)
#   BNEXP_DATA_ROOT: as in scripts/_data_env.sh
# Resumable: a second call trains only the runs without a finished summary.json (whole multiruns that are
# complete are not started again; bnexp skips finished runs and resumes interrupted ones from their
# checkpoint). Failed jobs: the report covers the rest and the script exits non-zero.
set -euo pipefail
rc=0
cd "$(dirname "$0")/.."
STUDIES="batch_size inference_statistics placement normalizer depth"
NAME="${1:-}"
if [[ -z "${NAME}" || " ${STUDIES} " != *" ${NAME} "* ]]; then
  echo "usage: scripts/study.sh NAME [extra Hydra overrides ...]; NAME is one of: ${STUDIES}" >&2
  exit 2
fi
shift
JOBS="${JOBS:-$(nproc)}"
source scripts/_sweep_name.sh
source scripts/_report_docs.sh
SWEEP_DIR="${SWEEP_DIR:-outputs/sweeps/study_${NAME}$(sweep_suffix "$@")}"
if [[ -z "${DOCS_DIR+x}" ]]; then DOCS_DIR="$(docs_dir_default "docs/studies/${NAME}" "$@")"; fi
if [[ "${DRY_RUN:-0}" == "1" ]]; then
  echo "DRY_RUN: the planned runs of ${SWEEP_DIR} (nothing is trained)"
  exec python -m bnexp.designs.studies plan "${NAME}" "${SWEEP_DIR}" --jobs "${JOBS}" "$@"
fi
source scripts/_data_env.sh
mkdir -p "${SWEEP_DIR}"
# study.json marks the folder as this study's (bnexp report then writes the study section) and sums the
# measured wall time of the calls that trained
record() {
  python - "${SWEEP_DIR}/study.json" "${NAME}" "$@" <<'PY'
import json, sys
path, name, *wall = sys.argv[1:]
try:
    d = json.load(open(path))
except (OSError, ValueError):
    d = {}
d = d if isinstance(d, dict) and d.get("study") == name else {"study": name}
from bnexp.designs.studies import build_studies  # the question the report's study section states
d["question"] = build_studies()[name].question
if wall:
    d.update(wall_time_s=d.get("wall_time_s", 0) + int(wall[0]), jobs=int(wall[1]), calls=d.get("calls", 0) + 1)
json.dump(d, open(path, "w"))
PY
}
record
COMMON=(hydra/launcher=joblib "hydra.launcher.n_jobs=${JOBS}" "$(sweep_dir_override "${SWEEP_DIR}")")
start=$(date +%s)
lines="$(python -m bnexp.designs.studies lines "${NAME}" "${SWEEP_DIR}" "$@")" || exit 2
if [[ -z "${lines}" ]]; then echo "every run of ${SWEEP_DIR} is complete"; fi
while IFS= read -r line; do
  if [[ -z "${line}" ]]; then continue; fi
  read -ra OVERRIDES <<< "${line}"
  bnexp train -m "${COMMON[@]}" "${OVERRIDES[@]}" < /dev/null || rc=$?
done <<< "${lines}"
if [[ "${NAME}" == "inference_statistics" ]]; then
  python -m bnexp.train.inference_eval "${SWEEP_DIR}" || rc=$?
fi
end=$(date +%s)
wall=$((end - start))
echo "study ${NAME}: wall time ${wall} s (${JOBS} parallel jobs)"
if [[ -n "${lines}" ]]; then record "${wall}" "${JOBS}"; fi
bnexp report "${SWEEP_DIR}" || rc=$?
copy_report "${SWEEP_DIR}" "${DOCS_DIR}"  # scripts/_report_docs.sh
exit "${rc}"
