#!/usr/bin/env bash
# Runs every test: installs the Debian packages the build and the tests need and the datasets
# the end-to-end tests train on (when missing), configures and builds into build/, then runs
# ctest. Extra arguments go to ctest (e.g. -R Autograd).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ty_prepare "${TY_TEST_PACKAGES[@]}"
ty_ensure_deploy_tools

jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${TY_CMAKE_ARGS:-}
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs" "$@"
