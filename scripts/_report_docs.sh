# Sourced by the sweep scripts: copy a sweep's report into docs/, where the docs' numbers come from.
#   docs_dir_default DIR ARGS...    prints DIR when ARGS (the script's extra overrides) is empty, else nothing:
#                                   only a script's default run writes into docs/
#   copy_report SWEEP_DIR DOCS_DIR  copies report.md, report.json, report.csv and the report's figures (every
#                                   *.png at the top of SWEEP_DIR; the runs are in subfolders) into DOCS_DIR;
#                                   does nothing when DOCS_DIR is empty
# The numbers in README.md and docs/**/*.md are then rewritten from the copied report.json by
# `bnexp report --update-docs` (bnexp/report/docs_numbers.py); tests/test_docs_numbers.py fails until then.
docs_dir_default() {
  local dir="$1"
  shift
  if [[ $# -eq 0 ]]; then printf '%s' "${dir}"; fi
}

copy_report() {
  local sweep="$1" docs="$2" f
  if [[ -z "${docs}" ]]; then return 0; fi
  if [[ ! -f "${sweep}/report.json" ]]; then
    echo "no report in ${sweep} (see the errors above): nothing copied into ${docs}" >&2
    return 0
  fi
  mkdir -p "${docs}"
  for f in "${sweep}"/report.md "${sweep}"/report.json "${sweep}"/report.csv "${sweep}"/*.png; do
    if [[ -f "${f}" ]]; then cp "${f}" "${docs}/"; fi
  done
  echo "copied the report of ${sweep} into ${docs}; \`bnexp report --update-docs\` rewrites the docs' numbers from it"
}
