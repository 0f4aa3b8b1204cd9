#!/usr/bin/env bash
# Session 14 (docs/MEMORY.md, "CUDA: --vram SIZE"): txt2img 512 on a GPU machine under --vram caps, the driver's memory
# sampled with nvidia-smi. Run there after scripts/stage-for-device.sh (STAGE_PROGRAMS="kiln kiln_gpu_tests"), from the
# tree root: bash scripts/experiments/vram_probe.sh. A baseline build can be compared in the same call by running
# its kiln with KILN_PLUGIN_DIR set to its own plugins (session 14 carried it in .probe/old).
set -u
cd "$(dirname "$0")/../.."
R=scripts/run-on-device.sh
peak() {
  local base; base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 20 > /tmp/smi.txt & local p=$!
  "$@" 2>&1 | grep -E "^txt2img|^unet|^vae|rror|kiln:|allocator" | head -6; kill $p; wait $p 2>/dev/null
  echo "driver peak: $(( $(sort -n /tmp/smi.txt | tail -1) - base )) MiB above idle"
}
B="kiln bench --suite txt2img --arch sd15 -W 512 -H 512 --device cuda --warmup 1 --repeats 3"
echo "== none"; peak $R $B
for v in 4G 3584M 3G; do echo "== --vram $v"; peak $R $B --vram $v; done
echo "== unet --vram 2560M"; peak $R kiln bench --suite unet --arch sd15 --device cuda --warmup 2 --repeats 10 --vram 2560M
echo "== vae-decode 1024 --vram 1G (whole: fails; the suite does not fall back)"; peak $R kiln bench --suite vae-decode --arch sd15 -W 1024 -H 1024 --device cuda --warmup 1 --repeats 1 --vram 1G
echo "== gpu tests"; $R gpu-tests 2>&1 | tail -3
