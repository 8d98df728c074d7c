#!/usr/bin/env bash
# The service's control-plane benchmark (bench/control_plane_bench.cc): one real coordinator
# with 10 000 simulated workers heartbeating every second and 1 000 watchers (CPU use, threads,
# heartbeat latency), a full restart of the coordinator on its state directory (until every
# worker is registered and heartbeating again), then submit-to-first-step with real worker
# daemons. Extra arguments go to the benchmark (--workers N --watchers N --seconds N
# --restart 0|1 --rounds N; --rounds 0 skips the first step).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ty_prepare
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${TY_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$(nproc)" --target control_plane_bench
build/bench/control_plane_bench "$@" 2> >(grep -v '^[IW] ' >&2)
