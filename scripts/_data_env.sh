# Sourced by the sweep scripts: the data root and the CIFAR-10 checksum opt-out.
# BNEXP_DATA_ROOT defaults to ../shared/data (beside the checkout) when that folder exists.
# VERIFY: "true" unless VERIFY_CHECKSUMS says otherwise, or the root is the known re-encoded
# CIFAR-10 copy in ../shared/data (see ../shared/README.md), which needs data.verify_checksums=false.
if [[ -z "${BNEXP_DATA_ROOT:-}" && -d ../shared/data ]]; then
  export BNEXP_DATA_ROOT="$(cd ../shared/data && pwd)"
fi
VERIFY="${VERIFY_CHECKSUMS:-true}"
if [[ -z "${VERIFY_CHECKSUMS:-}" && -n "${BNEXP_DATA_ROOT:-}" && -d ../shared/data ]] \
   && [[ "$(cd "${BNEXP_DATA_ROOT}" && pwd -P)" == "$(cd ../shared/data && pwd -P)" ]]; then
  VERIFY=false
  echo "note: ../shared/data holds a non-canonical CIFAR-10 copy: using data.verify_checksums=false"
fi
