#!/usr/bin/env bash
# Builds kiln (Release unless KILN_CMAKE_ARGS says otherwise) and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${KILN_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${KILN_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" ${KILN_CTEST_ARGS:-}
