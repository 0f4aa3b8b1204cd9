#!/usr/bin/env bash
# On the GPU machine, after scripts/stage-for-device.sh here: unpacks the staged programs, puts the fixtures
# where the test binary was told they are (its build's absolute path), and runs what is asked:
#   scripts/run-on-device.sh tests [gtest filter]    the CUDA tests (kiln_cuda_tests)
#   scripts/run-on-device.sh kiln ARGS...            the kiln program (bench, txt2img, info --devices)
set -euo pipefail
cd "$(dirname "$0")/.."
root=${KILN_STAGE_ROOT:-/tmp/kiln-stage}
if [ ! -x "$root/pack/kiln" ]; then
  mkdir -p "$root" && tar -C "$root" -xJf .stage-cuda/stage.tar.xz
fi
export LD_LIBRARY_PATH="$root/pack/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
data=$(strings "$root/pack/kiln_cuda_tests" | grep -m1 -E '^/.*/test-data$' || true)
if [ -n "$data" ] && [ ! -d "$data/sd15-mini" ]; then
  mkdir -p "$data" && tar -C "$data" -xJf tests/data/fixtures.tar.xz
fi
what=$1
shift
case "$what" in
  tests) exec "$root/pack/kiln_cuda_tests" ${1:+--gtest_filter="$1"} ;;
  kiln) exec "$root/pack/kiln" "$@" ;;
  *) echo "usage: $0 tests [filter] | kiln ARGS..." >&2; exit 2 ;;
esac
