#!/usr/bin/env bash
# Session 16 (docs/MEMORY.md, "GPU weights by stage and streamed"): SD 1.5 txt2img 512x512 and SDXL 1024x1024 under
# --vram budgets on CUDA and Vulkan: the placement the plan chose (the notice line), time, kiln's allocator peak and
# the driver's peak (nvidia-smi, sampled every 20 ms, above idle). Run on the GPU machine after
# scripts/stage-for-device.sh (STAGE_PROGRAMS="kiln kiln_gpu_tests"), from the tree root:
#   bash scripts/experiments/vram_plan_probe.sh [cuda|vulkan|sdxl]...
set -u
cd "$(dirname "$0")/../.."
R=scripts/run-on-device.sh
export KILN_PLAN_CHECK=1  # each stage's measured peak beside the plan's (pipeline/generate.cpp)
peak() {
  local base; base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 20 > /tmp/smi.txt & local p=$!
  "$@" 2>&1 | grep -E "^txt2img|^unet|^vae|rror|kiln:|plan check|allocator|peak|^text_encode|^denoise_step|^vae_decode" | sort | uniq -c | head -24; kill $p; wait $p 2>/dev/null
  echo "driver peak: $(( $(sort -n /tmp/smi.txt | tail -1) - base )) MiB above idle"
}
for what in "${@:-cuda}"; do
  case "$what" in
    cuda|vulkan)
      B="kiln bench --suite txt2img --arch sd15 -W 512 -H 512 --device $what --warmup 1 --repeats 3"
      echo "== $what none"; peak $R $B
      for v in ${VRAMS:-3G 2G 1536M 1G 768M 512M}; do echo "== $what --vram $v"; peak $R $B --vram $v; done ;;
    sdxl)
      B="kiln bench --suite txt2img --arch sdxl -W 1024 -H 1024 --device cuda --warmup 1 --repeats 1 --steps 4"
      echo "== sdxl none"; peak $R $B
      for v in 6G 4G; do echo "== sdxl --vram $v"; peak $R $B --vram $v; done ;;
  esac
done
