#!/usr/bin/env bash
# What session 17 built for GPUs without device time to run it (its budget was spent in the first call): run
# this on the GPU machine in one call (docs/DEVELOPING.md, "Session 17"). Stage first with
#   STAGE_PROGRAMS="kiln kiln_cuda_tests kiln_gpu_tests" scripts/stage-for-device.sh
#   pip download --no-deps -d .whl diffusers==0.42.1   # the LoRA timing's random checkpoint needs it there
# and carry .stage-cuda, .gl and .whl (move models/kiln-shapes/kiln-shapes.tar.xz out of the tree meanwhile).
set -u
R=scripts/run-on-device.sh
echo "== CUDA paths of each compute capability (KILN_CUDA_ARCH, docs/CUDA.md)"
$R tests 2>&1 | tail -1
for a in 75 80 86 89; do echo "-- $a"; KILN_CUDA_ARCH=$a $R tests 2>&1 | tail -1; done
for a in 75 86; do echo "-- gpu-tests $a"; KILN_CUDA_ARCH=$a $R gpu-tests 2>&1 | tail -1; done
KILN_CUDA_ARCH=75 $R kiln info --devices 2>&1 | grep -i cuda
U="kiln bench --arch sd15 --suite unet --batch 2 --device cuda --warmup 3 --repeats 20"
echo "== UNet call with 9.0's and 7.5's paths"; $R $U 2>&1 | grep -E "^unet|rror"; KILN_CUDA_ARCH=75 $R $U 2>&1 | grep -E "^unet|rror"
echo "== where a q8_0 UNet call's 2.4 ms go (docs/QUANT.md): op kinds' GPU time, q8_0 then f16"
for w in q8_0 f16; do $R $U --weights $w --profile 2>&1 | sed -n '/^op kind/,/^$/p' | head -14; done
echo "== time to apply a rank-32 LoRA at full size (docs/LORA.md), CUDA"
pip install -q --no-deps --no-index .whl/diffusers-*.whl >/dev/null 2>&1
mkdir -p /tmp/m && python3 scripts/make-random-checkpoint.py /tmp/m >/dev/null 2>&1
python3 scripts/make-random-lora.py /tmp/m/sd15-random.safetensors /tmp/m/lora.safetensors --rank 32
T="kiln txt2img -m /tmp/m/sd15-random.safetensors --device cuda -p cat -W 512 -H 512 --steps 2 --profile -o /tmp/m/o.png"
for i in 1 2 3; do
  echo "-- none $i"; $R $T 2>&1 | grep -E "^load |rror"
  echo "-- lora $i"; $R $T --lora /tmp/m/lora.safetensors:1 2>&1 | grep -E "^load |rror"
done
echo "== the VAE encode in bands (img2img 1024x1024), CUDA and Vulkan: stage time and peak"
$R kiln txt2img -m /tmp/m/sd15-random.safetensors --device cuda -p cat -W 1024 -H 1024 --steps 1 -o /tmp/m/init.png >/dev/null 2>&1
for d in cuda vulkan; do for t in off on; do
  echo "-- $d $t"; $R kiln img2img -m /tmp/m/sd15-random.safetensors -i /tmp/m/init.png --device $d -p cat -W 1024 -H 1024 \
    --steps 2 --vae-tiling $t --profile -o /tmp/m/e-$d-$t.png 2>&1 | grep -E "^vae_encode|rror"
done; done
echo "== KILN_FAIL_ALLOCATION_AT on CUDA (docs/MEMORY.md): each N fails cleanly or recovers"
for n in 1 50 200 800 1600 3200; do
  KILN_FAIL_ALLOCATION_AT=cuda:$n $R kiln txt2img -m /tmp/m/sd15-random.safetensors --device cuda -p cat -W 256 -H 256 --steps 2 -o /tmp/m/f$n.png 2>&1 | tail -1
done
