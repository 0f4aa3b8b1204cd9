#!/usr/bin/env bash
# Issue 21: KILN_FAIL_ALLOCATION_AT=cuda:N swept through a CUDA txt2img on the GPU machine, as
# tests/cli/allocation_failure_test.cpp sweeps the CPU and lavapipe in CI: every N must end in one error line
# naming the allocation and no file (no PNG, no temporary), or in an image, whose largest difference from the
# uninjected one is printed (CUDA's timed route choices make runs differ by rounding). Staged with STAGE_PROGRAMS="kiln" (docs/DEVELOPING.md); from the tree root on the GPU machine:
#   bash scripts/experiments/cuda_allocation_sweep.sh [first] [last] [step]   (default 1 3300 41)
set -u
cd "$(dirname "$0")/../.."
R=scripts/run-on-device.sh
first=${1:-1} last=${2:-3300} step=${3:-41}
out=$(mktemp -d)
$R kiln info --devices > /dev/null 2>&1  # unpacks the stage and the fixtures
model=/tmp/kiln-stage/test-data/sd15-mini/sd15-mini.safetensors
draw() { $R kiln txt2img -m "$model" -p "a red circle" -W 128 -H 128 --steps 2 --seed 3 --device cuda --quiet -o "$1" > /dev/null; }
draw "$out/want.png" 2> "$out/want.err" || { echo "the uninjected run failed: $(cat "$out/want.err")"; exit 1; }
clean=0 recovered=0 bad=0 runs=0 diffs=""
for n in $(seq "$first" "$step" "$last"); do
  dir="$out/n$n"; mkdir -p "$dir"
  KILN_FAIL_ALLOCATION_AT=cuda:$n draw "$dir/out.png" 2> "$dir/err"; rc=$?
  runs=$((runs + 1))
  if [ $rc -eq 0 ]; then
    # CUDA picks convolution and attention routes by timing them, so two runs may round differently: report how
    # far each image is from the uninjected one (PIL, from torch's environment) rather than require its bytes.
    diff=$(python3 -c 'import sys; from PIL import Image, ImageChops
a, b = (Image.open(f).convert("RGB") for f in sys.argv[1:]); print(max(hi for lo, hi in ImageChops.difference(a, b).getextrema()))' \
           "$dir/out.png" "$out/want.png" 2>/dev/null || echo "?")
    recovered=$((recovered + 1)); diffs="$diffs $diff"
  elif [ $rc -gt 128 ]; then echo "N=$n: killed by signal $((rc - 128)): $(tail -2 "$dir/err")"; bad=$((bad + 1))
  elif [ "$(grep -c . "$dir/err")" -ne 1 ] || ! grep -q "out of memory" "$dir/err"; then
    echo "N=$n: exit $rc, not one out-of-memory line: $(head -3 "$dir/err")"; bad=$((bad + 1))
  elif [ -n "$(ls -A "$dir" | grep -v '^err$')" ]; then echo "N=$n: left $(ls "$dir")"; bad=$((bad + 1))
  else clean=$((clean + 1)); fi
done
echo "cuda allocation sweep: $runs runs (N = $first..$last step $step): $clean failed cleanly, $recovered wrote an image (largest difference from the uninjected image, levels of 255, each:$diffs), $bad wrong"
