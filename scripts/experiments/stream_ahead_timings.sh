#!/usr/bin/env bash
# Streamed UNet blocks fetched ahead on CUDA's copy stream (docs/MEMORY.md, "Fetched ahead") against copies in
# line (KILN_CUDA_UPLOAD_AHEAD=0), in one call on the GPU machine; staged as quant_gpu_timings.sh says.
# With the argument "vulkan": the same on Vulkan's transfer queues ("Fetched ahead on Vulkan"): the tests on every
# queue the device has, then txt2img ahead on each queue against in line (KILN_VULKAN_UPLOAD_AHEAD=0); about 5
# minutes on the H200 (carry .gl as well).
set -u
R=scripts/run-on-device.sh
if [ "${1:-cuda}" = vulkan ]; then
  echo "== tests: weights offloaded, streamed, fetched ahead; the queue each run used"
  KILN_VULKAN_VERBOSE=1 $R gpu-tests 'Devices/WeightOffload*vulkan*:VulkanSettings.*' 2>&1 | grep -E "FAILED|PASSED|Failure|copied" | sort | uniq -c | head
  KILN_VULKAN_UPLOAD_AHEAD=0 $R gpu-tests 'Devices/WeightOffload.*vulkan*' 2>&1 | grep -E "FAILED|PASSED" | head -3
  echo "== SD 1.5 txt2img 512, 20 steps, UNet streamed under --vram 1G: ahead on each queue vs in line"
  T="kiln bench --arch sd15 --suite txt2img --device vulkan --warmup 1 --repeats 3 --vram 1G"
  for round in 1 2; do
    for q in family second same; do
      echo "-- ahead ($q) $round: $(KILN_VULKAN_TRANSFER_QUEUE=$q KILN_VULKAN_VERBOSE=1 $R $T 2>&1 | grep -E '^txt2img|rror|placement|copied' | sort -u | tr '\n' ' ')"
    done
    echo "-- inline $round: $(KILN_VULKAN_UPLOAD_AHEAD=0 $R $T 2>&1 | grep -E '^txt2img|rror|placement' | tr '\n' ' ')"
  done
  echo "-- q8_0 ahead: $($R $T --weights q8_0 2>&1 | grep -E '^txt2img|rror')"
  echo "-- q8_0 inline: $(KILN_VULKAN_UPLOAD_AHEAD=0 $R $T --weights q8_0 2>&1 | grep -E '^txt2img|rror')"
  exit 0
fi
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
