# Sourced by the sweep scripts: sweep_suffix ARGS... prints a folder-name suffix derived from the
# extra Hydra overrides ("" when there are none), so a quick reproduction such as
#   scripts/reproduce_mnist.sh trainer.max_steps=2000
# writes into outputs/sweeps/mnist_fig1+trainer.max_steps=2000, never into the full reproduction's
# folder (whose report would then mix the two). Long suffixes are cut and end in a hash, so they
# stay unique, deterministic (a re-run finds the same folder) and short enough for the file system.
sweep_suffix() {
  if [[ $# -eq 0 ]]; then return 0; fi
  local joined safe digest
  joined="$(printf '%s,' "$@")"
  joined="${joined%,}"
  safe="$(printf '%s' "${joined}" | tr -c 'A-Za-z0-9_.,=+-' '_')"
  if [[ ${#safe} -gt 80 ]]; then
    digest="$(printf '%s' "${joined}" | sha1sum | cut -c1-10)"
    safe="${safe:0:69}_${digest}"
  fi
  printf '+%s' "${safe}"
}

# The extra overrides come last and replace the script's own values of the same keys (e.g. seed=0
# for the script's seed=0,1,2); bnexp train refuses a key given twice unless told so.
export BNEXP_LAST_OVERRIDE_WINS=1

# sweep_dir_override DIR prints the Hydra override hydra.sweep.dir='DIR', quoted for Hydra's
# override grammar (a folder named by sweep_suffix holds '=' and ','): a single quote in DIR is
# escaped as \'. A backslash or '$' in DIR (Hydra/OmegaConf escapes and interpolations) is refused
# with one message and exit code 2.
sweep_dir_override() {
  local dir="$1"
  if [[ "${dir}" == *\\* || "${dir}" == *'$'* ]]; then
    echo "error: sweep folder '${dir}': a backslash or '\$' cannot be passed to Hydra as hydra.sweep.dir; choose another folder" >&2
    exit 2
  fi
  printf "hydra.sweep.dir='%s'" "${dir//\'/\\\'}"
}
