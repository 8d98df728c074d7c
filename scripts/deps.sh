# Sourced by the scripts in this folder: installs Debian 12 packages that are missing.
# ty_ensure_packages PKG...: apt-get installs those not yet installed (as root, or via sudo).
ty_ensure_packages() {
  local missing=()
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

# The packages every build needs.
TY_BUILD_PACKAGES=(build-essential cmake ninja-build pkg-config libopenblas-dev zlib1g-dev
                   libgtest-dev libgmock-dev libbenchmark-dev)
