#!/usr/bin/env bash
# Issue 23: the matrix variants (KILN_VULKAN_COOP, docs/VULKAN.md) timed and tested in one GPU call:
#   scripts/experiments/vulkan_coop_sweep.sh [variants...]
# Lines: products (matrix column; base also FMA tiles), stats (the driver's, if any), unet (SD 1.5, batch 2,
# fp16: matrix forced, measured, FMA tiles), tests (forced; f16acc only VulkanProducts, the others' bounds being
# for float32 sums). About 2 minutes for the default three (base sg32 f16acc; session 19: 110 s wall): a kiln
# bench ~8 s (OpenMP weights, upload, 7 calls of ~0.15 s) for 2 per variant + 1, products ~5 s per variant, 20 s
# unpacking; then the tests side by side in what is left of 335 s.
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${KILN_SWEEP_RUN:-scripts/run-on-device.sh}
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(base sg32 f16acc)
start=$SECONDS out=$(mktemp -d)
late() { [ $((SECONDS - start)) -ge 250 ] && echo "$1: skipped (time budget)"; }
failed() { echo "$1: exit $2$([ "$2" -eq 124 ] && echo ' (timed out)'): $(tail -1 "$3")"; }
$run kiln info --devices 2>&1 | grep -i vulkan | sed 's/^/sweep: /'  # unpacks the stage first
for v in "${variants[@]}"; do
  late "products $v" && continue
  mode=matrix && [ "$v" = base ] && mode=f16
  KILN_VULKAN_STATS=1 KILN_VULKAN_COOP=$v timeout 60 $run vulkan-products 0 5 $mode > "$out/p-$v" 2>&1 || failed "products $v" $? "$out/p-$v"
  grep -E '^(linear|conv3x3)' "$out/p-$v" | sed "s/^/products $v  /"
  grep -E '^vulkan stats (matmul|conv2d)_coop' "$out/p-$v" | sed "s/^vulkan stats/stats $v/"
done
unet() {  # variant, label, KILN_VULKAN_GEMM ("": measured)
  late "unet $1 $2" && return
  KILN_VULKAN_COOP=$1 KILN_VULKAN_GEMM=$3 timeout 60 $run kiln bench --arch sd15 --suite unet --batch 2 \
    --device vulkan --warmup 2 --repeats 5 > "$out/u-$1-$2" 2>&1 || { failed "unet $1 $2" $? "$out/u-$1-$2"; return; }
  grep -E '^unet ' "$out/u-$1-$2" | awk -v v="$1" -v l="$2" \
    '{ printf "unet %-6s %-8s median %s ms (min %s, max %s)  %s TFLOP/s\n", v, l, $3, $4, $5, $9 }'
}
for v in "${variants[@]}"; do unet "$v" matrix matrix; done
unet base large large
for v in "${variants[@]}"; do unet "$v" measured ""; done
limit=$((335 - (SECONDS - start)))
[ $limit -lt 30 ] && { echo "tests: skipped (time budget)"; exit 0; }
for v in "${variants[@]}"; do  # side by side: own pipeline caches, two OpenMP threads each
  filter='*Vulkan*:*vulkan*' && [ "$v" = f16acc ] && filter='VulkanProducts.*'
  mkdir -p "$out/c-$v"
  KILN_VULKAN_COOP=$v KILN_VULKAN_GEMM=matrix KILN_EXPECT_VULKAN=1 KILN_VULKAN_CACHE_DIR="$out/c-$v" OMP_NUM_THREADS=2 \
    timeout $limit $run gpu-tests "$filter" > "$out/t-$v" 2>&1 &
done
wait
for v in "${variants[@]}"; do
  tail_line=$(grep -E '^\[  PASSED  \]|FAILED TESTS?$' "$out/t-$v" | tail -1)
  names=$(grep -E '^\[  FAILED  \] [A-Za-z]' "$out/t-$v" | sed 's/^\[  FAILED  \] //; s/[ ,] *(.*//; s/, where.*//' | sort -u | tr '\n' ' ')
  echo "tests $v: ${tail_line:-no summary (stopped at $limit s?): $(tail -1 "$out/t-$v")}${names:+; failed: $names}"
done
echo "sweep: $((SECONDS - start)) s; logs in $out"
