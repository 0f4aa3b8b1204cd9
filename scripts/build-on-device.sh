#!/usr/bin/env bash
# On a GPU machine that lacks kiln's Debian libraries: builds kiln with the CUDA backend against a bundle of
# headers and static libraries made on a Debian machine (.stage-deps/deps.tar.xz, from
# scripts/make-device-deps.sh), using the machine's nvcc, g++ and cores. The reference BLAS stands in for
# OpenBLAS (the CPU side of the GPU tests is small). Prints the configure log on failure.
#   scripts/build-on-device.sh [BUILD_DIR] [targets...]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-device}
shift || true
D=$PWD/.stage-deps/deps
[ -d "$D" ] || tar -C .stage-deps -xJf .stage-deps/deps.tar.xz
export CXXFLAGS="-I$D/include"
export LIBRARY_PATH="$D/lib:${LIBRARY_PATH:-}" LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}"
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$D" -DCMAKE_LIBRARY_PATH="$D/lib" -DCMAKE_INCLUDE_PATH="$D/include" \
    -DPNG_LIBRARY="$D/lib/libpng16.a" -DPNG_PNG_INCLUDE_DIR="$D/include" \
    -DZLIB_LIBRARY="$D/lib/libz.a" -DZLIB_INCLUDE_DIR="$D/include" \
    -DOPENSSL_USE_STATIC_LIBS=TRUE -DOPENSSL_ROOT_DIR="$D" -DOPENSSL_CRYPTO_LIBRARY="$D/lib/libcrypto.a" \
    -DOPENSSL_INCLUDE_DIR="$D/include" -DBLAS_LIBRARIES="$D/lib/libblas.so" \
    -DUTF8PROC_INCLUDE_DIR="$D/include" -DUTF8PROC_LIBRARY="$D/lib/libutf8proc.a" \
    -DGTEST_ROOT="$D" -DGTEST_INCLUDE_DIR="$D/include" -DGTEST_LIBRARY="$D/lib/libgtest.a" \
    -DGTEST_MAIN_LIBRARY="$D/lib/libgtest_main.a" >"$build.configure.log" 2>&1; then
  tail -40 "$build.configure.log"
  exit 1
fi
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(kiln_cli kiln_cuda_tests)
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" 2>&1 | grep -E "error|FAILED|warning: unused" | head -40
exit "${PIPESTATUS[0]}"
