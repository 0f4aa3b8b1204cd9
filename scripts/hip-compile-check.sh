#!/usr/bin/env bash
# Compile-checks the CUDA backend's sources as HIP, for AMD GPUs: every .cu and .cpp under
# src/backends/cuda/ (new files are picked up by themselves) except the list below, built with hipcc and
# -DKILN_HIP (gpu_runtime.h renames cuda* to hip*) for three architectures:
#   gfx803  (GCN 3, Polaris/Fiji: wave64)
#   gfx1030 (RDNA 2: wave32)
#   gfx1100 (RDNA 3: wave32)
# so that code assuming 32 lanes, or an API HIP lacks, fails here. Compiled only: nothing is run (no AMD
# GPU here). Needs Debian 12's hipcc (apt-get install hipcc: ROCm 5.2, clang 15). Exits non-zero if any
# file fails; warnings are printed but not fatal, as in the nvcc build.
#   scripts/hip-compile-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# Not compiled as HIP, relative to src/backends/cuda/, each with why. Only code that cannot be HIP
# belongs here (tensor-core PTX, cuBLASLt, cuDNN); everything else must compile.
EXCLUDE=(
  attention.cu  # inline PTX for NVIDIA's tensor cores (mma.sync, ldmatrix, cp.async): AMD needs its own kernel
  gemm.cpp      # cuBLASLt; on AMD the products would go through hipBLASLt (not in Debian's ROCm 5.2)
  cuda_backend.cpp  # CUDA graphs and stream capture, whose hip* names gpu_runtime.h does not map yet
  graph_memset_nodes.cu  # CUDA graph surgery (the same)
)

command -v hipcc >/dev/null || { echo "hip-compile-check: hipcc not found (apt-get install hipcc)" >&2; exit 1; }

flags=(-DKILN_HIP -Iinclude -Isrc -O2 -Wall -Wextra
       -Wno-unused-command-line-argument)  # hipcc adds its link flags even to -c; that noise is not ours
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for f in "${EXCLUDE[@]}"; do  # a stale entry would hide nothing and mislead: keep the list true
  [ -e "src/backends/cuda/$f" ] || { echo "hip-compile-check: excluded $f does not exist" >&2; exit 1; }
done

failed=0 checked=0
t_all=$(date +%s)
while IFS= read -r src; do
  rel=${src#src/backends/cuda/}
  skip=0
  for f in "${EXCLUDE[@]}"; do [ "$rel" = "$f" ] && skip=1; done
  if [ $skip = 1 ]; then echo "skip  $rel (excluded)"; continue; fi
  # The standards of the CUDA build: the .cu files are C++17 (nvcc's), the .cpp files C++20 (the host's).
  std=-std=c++20
  [ "${src##*.}" = cu ] && std=-std=c++17
  t0=$(date +%s)
  # gfx803 and gfx1030: the whole compile, host and device code, with ROCm's device library linked in.
  # gfx1100: ROCm 5.2's device library predates RDNA 3 (no oclc_isa_version_1100.bc), so the device
  # code alone, compiled to ISA assembly without the library: its math calls stay external symbols.
  # The host side does not depend on the GPU architecture and is checked by the first command.
  if hipcc "${flags[@]}" $std --offload-arch=gfx803 --offload-arch=gfx1030 -c "$src" -o "$out/obj.o" &&
     hipcc "${flags[@]}" $std --offload-arch=gfx1100 -nogpulib --cuda-device-only -S "$src" -o "$out/gfx1100.s"; then
    echo "ok    $rel ($(( $(date +%s) - t0 )) s)"
  else
    echo "FAIL  $rel"
    failed=$((failed + 1))
  fi
  checked=$((checked + 1))
done < <(find src/backends/cuda -name '*.cu' -o -name '*.cpp' | LC_ALL=C sort)

echo "hip-compile-check: $checked files for gfx803, gfx1030, gfx1100: $failed failed ($(( $(date +%s) - t_all )) s)"
[ $failed = 0 ]
