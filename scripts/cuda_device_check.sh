#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds the CUDA backend alone (tests/cuda/standalone), runs its tests,
# compute-sanitizer (memcheck, racecheck) on the small shapes, the benchmark with every tile configuration,
# and PyTorch SDPA's timings and output check (scripts/bench_torch_sdpa.py). Logs go to $OUT (default
# out/cuda); the last lines printed are the summary tables.
#   scripts/cuda_device_check.sh [GTEST_SOURCE_DIR]   (a googletest tree, if the machine has no GTest)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/cuda}
mkdir -p "$out"
log=$out/build_and_tests.log
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  nvcc --version | tail -2
  echo "headers present: $(ls /usr/include | grep -i -E 'gtest|cblas|openblas|omp.h' | tr '\n' ' ')"
} 2>&1 | tee "$log"

gtest_arg=()
[ $# -ge 1 ] && gtest_arg=(-DKILN_GTEST_SOURCE_DIR="$(realpath "$1")")
t0=$(date +%s)
cmake -S tests/cuda/standalone -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release "${gtest_arg[@]}" >>"$log" 2>&1 &&
  cmake --build build-cuda -j"$(nproc)" >>"$log" 2>&1
rc=$?
echo "build rc=$rc in $(( $(date +%s) - t0 )) s" | tee -a "$log"
grep -E "CPU reference|warning|error" "$log" | head -20
[ $rc -eq 0 ] || exit 1

t0=$(date +%s)
./build-cuda/kiln_cuda_tests >"$out/tests.log" 2>&1
tests_rc=$?
echo "tests rc=$tests_rc in $(( $(date +%s) - t0 )) s"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==|tests? (ran|PASSED|FAILED)" "$out/tests.log" | tail -8

small='*AttentionCudaSmall*:CudaDevice*:AttentionCudaArgs*:BlockReduce*'
for tool in memcheck racecheck; do
  t0=$(date +%s)
  compute-sanitizer --tool $tool --error-exitcode 99 ./build-cuda/kiln_cuda_tests --gtest_filter="$small" \
    >"$out/$tool.log" 2>&1
  echo "compute-sanitizer $tool rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool.log" | tail -1)"
done

rm -rf /tmp/kiln_attention_dump && mkdir -p /tmp/kiln_attention_dump
./build-cuda/kiln_cuda_attention_bench --sweep --csv "$out/kiln_bench.csv" --dump /tmp/kiln_attention_dump \
  >"$out/bench.log" 2>&1 || echo "bench failed"
# Where the time goes, for one configuration of one shape (hardware counters; clocks left alone).
for c in ${NCU_CONFIGS:-0}; do
  ncu --clock-control none -k regex:attention_kernel -c 1 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section Occupancy --section LaunchStats \
    ./build-cuda/kiln_cuda_attention_bench --shape ${NCU_SHAPE:-sdxl_self_l4096_h10_d64} --config $c --warmup 1 --runs 20
done >"$out/ncu.log" 2>&1
PYTHONUNBUFFERED=1 python3 scripts/bench_torch_sdpa.py --kiln-csv "$out/kiln_bench.csv" \
  --check /tmp/kiln_attention_dump >"$out/sdpa.log" 2>&1
echo "sdpa script rc=$?"
echo; awk '/figures/ { if ($NF + 0 > worst) { worst = $NF + 0; line = $0 } } END { print "largest err/bound:", line }' "$out/tests.log"
echo; grep -E "attention_kernel|Throughput|Issued Warp|No Eligible|Achieved Occupancy|Warp Cycles Per Issued|Registers Per|Theoretical Occ" "$out/ncu.log" | sed -E 's/ +/ /g' | cut -c1-110
echo; cat "$out/bench.log"
echo; tail -25 "$out/sdpa.log"
