#!/usr/bin/env bash
# Runs a job on the Trainyard service on this machine: installs the build packages and the
# datasets (when missing), builds the CLI, coordinator and worker into build/ and runs
# `trainyard local`, which starts a coordinator and worker daemons on loopback, trains the job
# and watches it to the end.
#   scripts/local.sh                                         # examples/fashion-mlp.yaml, 2 workers
#   scripts/local.sh examples/kjv-gpt.yaml --workers 2 --set steps=500
# Arguments after the spec go to trainyard local (--workers N, -o json, --set path=value).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ty_prepare

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${TY_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)" --target trainyard trainyard-coordinator trainyard-worker
spec=${1:-examples/fashion-mlp.yaml}
shift || true
exec build/bin/trainyard local "$spec" "$@"
