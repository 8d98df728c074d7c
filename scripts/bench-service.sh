#!/usr/bin/env bash
# The service's control-plane benchmark (bench/control_plane_bench.cc): one real coordinator
# with 1 000 simulated workers heartbeating every second and 100 watchers (CPU use, heartbeat
# latency), then submit-to-first-step with real worker daemons. Extra arguments go to the
# benchmark (--workers N --watchers N --seconds N --rounds N).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ty_prepare
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${TY_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)" --target control_plane_bench
build/bench/control_plane_bench "$@" 2> >(grep -v '^[IW] ' >&2)
