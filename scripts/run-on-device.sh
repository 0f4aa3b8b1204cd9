#!/usr/bin/env bash
# On the GPU machine, after scripts/stage-for-device.sh here: unpacks the staged programs and the fixtures
# (KILN_TEST_DATA tells the tests where), and runs what is asked:
#   scripts/run-on-device.sh tests [gtest filter]    the CUDA tests (kiln_cuda_tests)
#   scripts/run-on-device.sh gdb-tests [filter]      the same under cuda-gdb, printing a backtrace on a crash
#   scripts/run-on-device.sh kiln ARGS...            the kiln program (bench, txt2img, info --devices)
set -euo pipefail
cd "$(dirname "$0")/.."
root=${KILN_STAGE_ROOT:-/tmp/kiln-stage}
if [ ! -d "$root/pack" ]; then
  mkdir -p "$root" && tar -C "$root" -xJf .stage-cuda/stage.tar.xz
fi
# cuDNN: the CUDA image has it inside PyTorch's Python packages (nvidia-cudnn).
cudnn=$(dirname "$(find / -name 'libcudnn.so.9' -not -path '/proc/*' 2>/dev/null | head -1)" 2>/dev/null || true)
export LD_LIBRARY_PATH="$root/pack/lib:/usr/local/cuda/lib64:${cudnn:+$cudnn:}${LD_LIBRARY_PATH:-}"
export KILN_TEST_DATA="$root/test-data"  # read by tests/common/fixtures.h
if [ ! -d "$KILN_TEST_DATA/sd15-mini" ]; then
  mkdir -p "$KILN_TEST_DATA" && tar -C "$KILN_TEST_DATA" -xJf tests/data/fixtures.tar.xz
fi
what=$1
shift
case "$what" in
  tests) exec "$root/pack/kiln_cuda_tests" ${1:+--gtest_filter="$1"} ;;
  gdb-tests) exec cuda-gdb -q -batch -ex run -ex bt --args "$root/pack/kiln_cuda_tests" ${1:+--gtest_filter="$1"} ;;
  kiln) exec "$root/pack/kiln" "$@" ;;
  *) echo "usage: $0 tests [filter] | kiln ARGS..." >&2; exit 2 ;;
esac
