#!/usr/bin/env bash
# Packs what a GPU machine needs to run kiln's CUDA tests and benchmarks without building there (it lacks
# kiln's Debian libraries): the kiln program with its GPU backend plugins, kiln_cuda_tests and kiln_gpu_tests
# from BUILD_DIR (default build/), the shared libraries they load that a CUDA image may lack. (The fixtures
# travel with the tree.) Writes .stage-cuda/stage.tar.xz; pass .stage-cuda to the device tool's carry, and
# unpack there with scripts/run-on-device.sh.
# OpenBLAS (36 MB) is replaced by the reference BLAS (Debian's libblas3, 0.5 MB) under OpenBLAS's file name:
# the CPU side of the GPU tests is small, and kiln uses only cblas_sgemm (the thread calls are weak symbols).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
stage=.stage-cuda
rm -rf "$stage" && mkdir -p "$stage/pack/lib"
# STAGE_PROGRAMS narrows what goes (e.g. "kiln_cuda_tests" alone fits beside the demo model's archive).
programs=${STAGE_PROGRAMS:-kiln kiln_cuda_tests kiln_gpu_tests}
for prog in $programs; do cp "$build/$prog" "$stage/pack/"; done
# kiln loads its GPU backends from the plugins beside it (libkiln-cuda.so, libkiln-vulkan.so), which fit only
# the kiln they were built with: they go where kiln goes. (The test programs link the backends themselves.)
case " $programs " in *" kiln "*) cp "$build"/libkiln-*.so "$stage/pack/" ;; esac
for bin in "$stage"/pack/kiln* "$stage"/pack/libkiln-*.so; do
  [ -e "$bin" ] || continue
  ldd "$bin" | awk '/=> \// { print $3 }'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++*|libgcc_s*|libcuda.so*|libvulkan.so*) ;;
    libopenblas.so*) cp -L /usr/lib/x86_64-linux-gnu/blas/libblas.so.3 "$stage/pack/lib/libopenblas.so.0" ;;
    *) cp -L "$lib" "$stage/pack/lib/" ;;
  esac
done
# The reference BLAS is Fortran: its runtime comes along.
for dep in $(ldd /usr/lib/x86_64-linux-gnu/blas/libblas.so.3 | awk '/=> \// { print $3 }'); do
  case "$(basename "$dep")" in libc.so*|libm.so*|libgcc_s*|ld-linux*) ;; *) cp -L "$dep" "$stage/pack/lib/" ;; esac
done
rm -f "$stage"/pack/lib/libcudart* "$stage"/pack/lib/libcublas* "$stage"/pack/lib/libcudnn*  # the machine has its own
tar -C "$stage" -cJf "$stage/stage.tar.xz" pack
rm -rf "$stage/pack"
ls -la "$stage"
