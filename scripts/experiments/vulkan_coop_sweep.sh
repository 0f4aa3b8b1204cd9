#!/usr/bin/env bash
# Issue 23: the matrix-unit variants (KILN_VULKAN_COOP, docs/VULKAN.md) timed and tested in one GPU call:
#   scripts/experiments/vulkan_coop_sweep.sh [variants...]      (default: base and every variant)
# Lines: "products" (kiln_vulkan_products_bench, matrix column; base also the FMA tiles), "unet" (SD 1.5 UNet
# call, batch 2, fp16: forced onto the matrix units, measured choice, and base's 128x128 FMA tiles), "tests"
# (kiln_gpu_tests' Vulkan tests forced onto the variant; f16acc only VulkanProducts, the others' bounds being
# for float32 sums). Under 6 minutes on an H200: a kiln bench is ~8 s (synthetic weights by OpenMP, upload,
# the first call's timing per shape, 7 calls of ~0.15 s), a products bench ~5 s, so ~17 x 8 + 8 x 5 + 20 s
# of unpacking = ~200 s; the tests then run side by side (mostly CPU references) in what is left. Whatever
# would pass the budget is skipped or stopped, with a line saying so.
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${KILN_SWEEP_RUN:-scripts/run-on-device.sh}  # a stand-in, to try the script elsewhere
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(base k64 sg4 wide db f16sh lean f16acc)
start=$SECONDS
budget=${KILN_SWEEP_BUDGET_S:-340}       # seconds in all
bench_budget=${KILN_SWEEP_BENCH_S:-250}  # no bench starts later
left() { echo $((budget - (SECONDS - start))); }
out=$(mktemp -d)

echo "sweep: variants ${variants[*]}; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
# Unpacks the stage first, and says which extension runs the matrix units (variants need the KHR one).
$run kiln info --devices 2>&1 | grep -i vulkan | sed 's/^/sweep: /'
for v in "${variants[@]}"; do
  if [ $((SECONDS - start)) -ge "$bench_budget" ]; then echo "products $v: skipped (time budget)"; continue; fi
  mode=matrix
  [ "$v" = base ] && mode=f16
  KILN_VULKAN_COOP=$v timeout 60 $run vulkan-products 0 5 "$mode" > "$out/products-$v" 2>&1
  rc=$?
  [ $rc -eq 0 ] || echo "products $v: exit $rc$([ $rc -eq 124 ] && echo ' (timed out at 60 s)'): $(tail -1 "$out/products-$v")"
  grep -E '^(linear|conv3x3)' "$out/products-$v" | sed "s/^/products $v  /"
done
unet() {  # variant, label, KILN_VULKAN_GEMM value ("" for the measured default)
  if [ $((SECONDS - start)) -ge "$bench_budget" ]; then echo "unet $1 $2: skipped (time budget)"; return; fi
  KILN_VULKAN_COOP=$1 KILN_VULKAN_GEMM=$3 timeout 60 $run kiln bench --arch sd15 --suite unet --batch 2 \
    --device vulkan --warmup 2 --repeats 5 > "$out/unet-$1-$2" 2>&1
  local rc=$? row
  row=$(grep -E '^unet ' "$out/unet-$1-$2")
  if [ -n "$row" ]; then
    echo "$row" | awk -v v="$1" -v l="$2" '{ printf "unet %-6s %-8s median %s ms (min %s, max %s)  %s TFLOP/s\n", v, l, $3, $4, $5, $9 }'
  else
    echo "unet $1 $2: exit $rc$([ $rc -eq 124 ] && echo ' (timed out at 60 s)'): $(tail -1 "$out/unet-$1-$2")"
  fi
}
for v in "${variants[@]}"; do unet "$v" matrix matrix; done
unet base large large
for v in "${variants[@]}"; do unet "$v" measured ""; done

# Side by side, each with its own pipeline cache (no shared file being written) and two OpenMP threads.
limit=$(( $(left) - 5 ))
if [ "$limit" -lt 30 ]; then
  echo "tests: skipped (time budget: ${limit} s left)"
else
  for v in "${variants[@]}"; do
    filter='*Vulkan*:*vulkan*'
    [ "$v" = f16acc ] && filter='VulkanProducts.*'
    mkdir -p "$out/cache-$v"
    KILN_VULKAN_COOP=$v KILN_VULKAN_GEMM=matrix KILN_EXPECT_VULKAN=1 KILN_VULKAN_CACHE_DIR="$out/cache-$v" \
      OMP_NUM_THREADS=2 timeout "$limit" $run gpu-tests "$filter" > "$out/tests-$v" 2>&1 &
  done
  wait
  for v in "${variants[@]}"; do
    tail_line=$(grep -E '^\[  PASSED  \]|FAILED TESTS?$' "$out/tests-$v" | tail -1)
    failed=$(grep -E '^\[  FAILED  \] [A-Za-z]' "$out/tests-$v" | sed 's/^\[  FAILED  \] //; s/[ ,] *(.*//; s/, where.*//' | sort -u | tr '\n' ' ')
    echo "tests $v (KILN_VULKAN_GEMM=matrix): ${tail_line:-no summary ($(tail -1 "$out/tests-$v"); stopped at ${limit} s?)}${failed:+; failed: $failed}"
  done
fi
echo "sweep: $((SECONDS - start)) s; logs in $out"
