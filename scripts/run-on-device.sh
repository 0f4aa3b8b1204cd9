#!/usr/bin/env bash
# On the GPU machine, after scripts/stage-for-device.sh here: unpacks the staged programs and the fixtures
# (KILN_TEST_DATA tells the tests where), and runs what is asked:
#   scripts/run-on-device.sh tests [gtest filter]    the CUDA tests (kiln_cuda_tests)
#   scripts/run-on-device.sh gpu-tests [filter]      the tests of every GPU backend (kiln_gpu_tests: CUDA, Vulkan)
#   scripts/run-on-device.sh gdb-tests [filter]      the same under cuda-gdb, printing a backtrace on a crash
#   scripts/run-on-device.sh kiln ARGS...            the kiln program (bench, txt2img, info --devices)
#   scripts/run-on-device.sh program NAME ARGS...    any staged program by name (e.g. an earlier build staged as
#                                                    kiln_old, alternated with kiln for an A/B comparison)
#   scripts/run-on-device.sh conformance ARGS...     kiln's side of the conformance sweep (scripts/conformance-sweep
#                                                    kiln ARGS, with the staged kiln and the unpacked fixtures)
#   scripts/run-on-device.sh attention-bench ARGS... the attention kernels' bench (bench/cuda), cuDNN's beside them
#   scripts/run-on-device.sh vulkan-products [N] [runs]  the Vulkan product kernels' bench (bench/vulkan)
set -euo pipefail
cd "$(dirname "$0")/.."
root=${KILN_STAGE_ROOT:-/tmp/kiln-stage}
# Unpacked again whenever the staged archive changed: a machine that stays warm between calls keeps $root,
# and would otherwise run the previous call's programs.
stamp=$(sha256sum .stage-cuda/stage.tar.xz | cut -d' ' -f1)
if [ ! -d "$root/pack" ] || [ "$(cat "$root/stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$root/pack" && mkdir -p "$root" && tar -C "$root" -xJf .stage-cuda/stage.tar.xz && echo "$stamp" > "$root/stamp"
fi
# cuDNN: the CUDA image has it inside PyTorch's Python packages (nvidia-cudnn-cu13), and older copies in other
# packages' (9.14 beside torch's 9.19 on 2026-11-24): torch's first, any other where it is missing.
cudnn=$(python3 -c 'import os, nvidia.cudnn as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null || true)
if [ ! -f "$cudnn/libcudnn.so.9" ]; then
  cudnn=$(dirname "$(find / -name 'libcudnn.so.9' -not -path '/proc/*' 2>/dev/null | head -1)" 2>/dev/null || true)
fi
export LD_LIBRARY_PATH="$root/pack/lib:/usr/local/cuda/lib64:${cudnn:+$cudnn:}${LD_LIBRARY_PATH:-}"
export KILN_TEST_DATA="$root/test-data"  # read by tests/common/fixtures.h
# Vulkan: the machine has NVIDIA's driver (ICD, libGLX_nvidia) but may lack the Vulkan loader and the glvnd
# libraries the ICD loads; carried as .gl/*.deb (docs/VULKAN.md says how to fetch them).
if ls .gl/*.deb >/dev/null 2>&1 && [ ! -e /tmp/kiln-gl-unpacked ]; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
  touch /tmp/kiln-gl-unpacked
fi
nvidia_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$nvidia_icd" ]; then export VK_DRIVER_FILES=$nvidia_icd; fi
if [ ! -d "$KILN_TEST_DATA/sd15-mini" ]; then
  mkdir -p "$KILN_TEST_DATA" && tar -C "$KILN_TEST_DATA" -xJf tests/data/fixtures.tar.xz
fi
what=$1
shift
case "$what" in
  tests) exec "$root/pack/kiln_cuda_tests" ${1:+--gtest_filter="$1"} ;;
  gpu-tests) exec "$root/pack/kiln_gpu_tests" ${1:+--gtest_filter="$1"} ;;
  gdb-tests) exec cuda-gdb -q -batch -ex run -ex bt --args "$root/pack/kiln_cuda_tests" ${1:+--gtest_filter="$1"} ;;
  kiln) exec "$root/pack/kiln" "$@" ;;
  program) name=$1; shift; exec "$root/pack/$name" "$@" ;;
  conformance) exec python3 scripts/conformance-sweep kiln --kiln "$root/pack/kiln" --data "$KILN_TEST_DATA" "$@" ;;
  attention-bench) exec "$root/pack/kiln_cuda_attention_bench" "$@" ;;
  vulkan-products) exec "$root/pack/kiln_vulkan_products_bench" "$@" ;;
  *) echo "usage: $0 tests [filter] | gpu-tests [filter] | gdb-tests [filter] | kiln ARGS... | program NAME ARGS... | attention-bench ARGS... | vulkan-products [N] [runs]" >&2; exit 2 ;;
esac
