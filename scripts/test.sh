#!/usr/bin/env bash
# Builds kiln (Release unless KILN_CMAKE_ARGS says otherwise) and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${KILN_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${KILN_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)"
# The kiln program asks OpenBLAS for the kernels of the CPU's vector units where OpenBLAS took its generic
# ones (src/runtime/openblas_core.h); the test programs are started by ctest, so ask for them here.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
  if [[ " $flags " == *" avx512bw "* && " $flags " == *" avx512vl "* && " $flags " == *" avx512dq "* ]]; then
    export OPENBLAS_CORETYPE=SkylakeX
  elif [[ " $flags " == *" avx2 "* && " $flags " == *" fma "* ]]; then
    export OPENBLAS_CORETYPE=Haswell
  fi
fi
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" ${KILN_CTEST_ARGS:-}
