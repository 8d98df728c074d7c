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

# The packages every build needs (libyaml-dev: YAML job specs in the trainyard CLI; libgloo-dev:
# the CPU collectives of worker/dist; gRPC, protobuf, prometheus-cpp and SQLite: the service;
# openssl: the TLS tests make their certificates with it).
TY_BUILD_PACKAGES=(build-essential cmake ninja-build pkg-config libopenblas-dev zlib1g-dev
                   libyaml-dev libgloo-dev libgtest-dev libgmock-dev libbenchmark-dev
                   libgrpc++-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
                   prometheus-cpp-dev libsqlite3-dev openssl)

# The real datasets the examples and the acceptance tests train on (../shared/DATASETS.md).
TY_DATA_PACKAGES=(dataset-fashion-mnist bible-kjv)

# What the tests need beyond the build: prometheus (promtool checks deploy/monitoring in
# scripts/check-monitoring.sh; tests/service/monitoring_test.cc runs its server on a port of
# its own). Where systemd runs, the package also starts its system service on :9090, which no
# test uses (systemctl disable --now prometheus stops it).
TY_TEST_PACKAGES=(prometheus)
# python3-venv: the virtual environment of scripts/check-deploy.sh (ty_ensure_deploy_tools).
TY_TEST_PACKAGES+=(python3-venv)
# valgrind: the emulated CUDA kernels under memcheck (CudaEmuMemcheck, tests/CMakeLists.txt).
TY_TEST_PACKAGES+=(valgrind)
# clang-format: the code_shape test checks that the sources are formatted (.clang-format).
TY_TEST_PACKAGES+=(clang-format)
# iproute2: ip, tc and ss for the multinode tests' nodes in network namespaces
# (tests/testing/netns.h).
TY_TEST_PACKAGES+=(iproute2)

# ty_ensure_data: installs the dataset packages and writes data/kjv.txt (the King James Bible
# as plain text, 4.3 MB) from bible-kjv when it is missing. Run from the repository root.
ty_ensure_data() {
  ty_ensure_packages "${TY_DATA_PACKAGES[@]}"
  if [ ! -s data/kjv.txt ]; then
    mkdir -p data
    bible -l0 "Gen1:1-Rev22:21" > data/kjv.txt.tmp
    mv data/kjv.txt.tmp data/kjv.txt
  fi
}

# ty_prepare [PKG...]: what the scripts do first: the build packages (and PKG...), the datasets.
ty_prepare() {
  ty_ensure_packages "${TY_BUILD_PACKAGES[@]}" "$@"
  ty_ensure_data
}

# ty_ensure_deploy_tools: what scripts/check-deploy.sh needs besides TY_TEST_PACKAGES: kubectl
# (Debian's kubernetes-client where no kubectl is installed; its kustomize v2.0.3 renders
# deploy/k8s as newer ones do) and kubernetes-validate, pinned, from PyPI into
# .cache/deploy-venv (made again when scripts/check-deploy-requirements.txt changes). Run from
# the repository root; the check itself needs no network.
ty_ensure_deploy_tools() {
  command -v kubectl >/dev/null || ty_ensure_packages kubernetes-client
  local venv=.cache/deploy-venv req=scripts/check-deploy-requirements.txt
  if ! cmp -s "$req" "$venv/requirements.txt" || [ ! -x "$venv/bin/kubernetes-validate" ]; then
    echo "installing kubernetes-validate into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
    cp "$req" "$venv/requirements.txt"
  fi
}
