#!/usr/bin/env bash
# Streamed UNet blocks fetched ahead on CUDA's copy stream (docs/MEMORY.md, "Fetched ahead") against copies in
# line (KILN_CUDA_UPLOAD_AHEAD=0), in one call on the GPU machine; staged as quant_gpu_timings.sh says.
set -u
R=scripts/run-on-device.sh
echo "== tests: weights offloaded, streamed, fetched ahead (CUDA and Vulkan)"
$R gpu-tests 'Devices/WeightOffload*' 2>&1 | grep -E "FAILED|PASSED|Failure" | head
KILN_CUDA_UPLOAD_AHEAD=0 $R gpu-tests 'Devices/WeightOffload.StreamedBlocksAreFetchedAhead*' 2>&1 | grep -E "FAILED|PASSED" | head -3
echo "== SD 1.5 txt2img 512, 20 steps, UNet streamed: ahead vs in line"
T="kiln bench --arch sd15 --suite txt2img --device cuda --warmup 1 --repeats 3"
for round in 1 2; do
  for v in 1536M 768M; do
    echo "-- ahead $v $round: $($R $T --vram $v 2>&1 | grep -E '^txt2img|rror|placement|stream')"
    echo "-- inline $v $round: $(KILN_CUDA_UPLOAD_AHEAD=0 $R $T --vram $v 2>&1 | grep -E '^txt2img|rror|placement|stream')"
  done
done
echo "-- q8_0 1G ahead: $($R $T --vram 1G --weights q8_0 2>&1 | grep -E '^txt2img|rror')"
echo "-- q8_0 1G inline: $(KILN_CUDA_UPLOAD_AHEAD=0 $R $T --vram 1G --weights q8_0 2>&1 | grep -E '^txt2img|rror')"
