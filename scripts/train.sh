#!/usr/bin/env bash
# Trains a job spec on this machine: installs the build packages and the datasets (when
# missing), builds the trainyard CLI into build/ and runs `trainyard train`.
#   scripts/train.sh                                   # examples/fashion-mlp.yaml
#   scripts/train.sh examples/kjv-gpt.yaml --set steps=500
# Arguments after the spec go to trainyard train (-o json, --set path=value, --quiet).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ty_prepare

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${TY_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)" --target trainyard
spec=${1:-examples/fashion-mlp.yaml}
shift || true
exec build/bin/trainyard train "$spec" "$@"
