#!/usr/bin/env bash
# Builds kiln (Release unless KILN_CMAKE_ARGS says otherwise) and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${KILN_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${KILN_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)"
# The kiln program asks OpenBLAS for the kernels of the CPU's vector units where OpenBLAS took its generic
# ones (src/runtime/openblas_core.h); the test programs are started by ctest, so they get the kernels the
# program names on its CPU line.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  core=$("$build/kiln" info --devices 2>/dev/null | sed -n "s/^cpu .*OpenBLAS's \([A-Za-z0-9]*\) kernels.*/\1/p" || true)
  if [ -n "$core" ]; then export OPENBLAS_CORETYPE=$core; fi
fi
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" ${KILN_CTEST_ARGS:-}
