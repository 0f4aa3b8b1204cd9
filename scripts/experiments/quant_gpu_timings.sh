#!/usr/bin/env bash
# The GPU measurements behind docs/QUANT.md's "Where it was" (weights dequantized ahead vs in line, SD 1.5 and
# SDXL UNet calls, txt2img with quantized weights) and docs/LORA.md's H200 LoRA time, in one call on the GPU
# machine (session 18: about 6 minutes). Stage first, in the repository root here:
#   STAGE_PROGRAMS="kiln kiln_cuda_tests kiln_gpu_tests" scripts/stage-for-device.sh
#   pip download --no-deps -d .whl diffusers==0.42.1 importlib_metadata zipp   # the random checkpoint there
#   mkdir -p .stage-blas && xz -c /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 > .stage-blas/libopenblas.so.0.xz
# move models/kiln-shapes/kiln-shapes.tar.xz out of the tree meanwhile (and back before building), and carry
# .stage-cuda, .gl, .whl and .stage-blas.
set -u
R=scripts/run-on-device.sh
t0=$SECONDS; lap() { echo "   [$((SECONDS - t0)) s]"; }
echo "== tests: block weights with weights dequantized ahead (default) and in line"
$R gpu-tests 'Devices/BlockWeights*:Devices/QuantizedModel*' 2>&1 | grep -E "FAILED|PASSED|Failure" | head
KILN_CUDA_DEQUANT_AHEAD=0 $R gpu-tests 'Devices/BlockWeights*:Devices/QuantizedModel*' 2>&1 | grep -E "FAILED|PASSED|Failure" | head
$R tests 2>&1 | grep -E "^\[  FAILED|^\[  PASSED" | head
lap
U="kiln bench --arch sd15 --suite unet --batch 2 --device cuda --warmup 3 --repeats 20"
echo "== SD 1.5 UNet b2 64x64: ahead (default) vs in line (KILN_CUDA_DEQUANT_AHEAD=0)"
for round in 1 2; do
  formats="f16 q8_0 q4_K q4_0"; [ $round = 2 ] && formats="f16 q8_0"
  for w in $formats; do
    echo "-- ahead $w $round: $($R $U --weights $w 2>&1 | grep -E '^unet|rror')"
    echo "-- inline $w $round: $(KILN_CUDA_DEQUANT_AHEAD=0 $R $U --weights $w 2>&1 | grep -E '^unet|rror')"
  done
done
lap
echo "== SDXL UNet b2 128x128"
X="kiln bench --arch sdxl --suite unet --batch 2 -W 1024 -H 1024 --device cuda --warmup 2 --repeats 10"
for w in f16 q8_0 q4_K; do echo "-- ahead $w: $($R $X --weights $w 2>&1 | grep -E '^unet|rror')"; done
echo "-- inline q8_0: $(KILN_CUDA_DEQUANT_AHEAD=0 $R $X --weights q8_0 2>&1 | grep -E '^unet|rror')"
lap
echo "== SD 1.5 txt2img 512 20 steps (bench), f16 / q8_0 / q4_K, and q4_K under --vram 1G"
T="kiln bench --arch sd15 --suite txt2img --device cuda --warmup 1 --repeats 3"
for w in f16 q8_0 q4_K; do echo "-- $w: $($R $T --weights $w 2>&1 | grep -E '^txt2img|rror')"; done
echo "-- q4_K 1G: $($R $T --weights q4_K --vram 1G 2>&1 | grep -E '^txt2img|rror')"
lap
echo "== LoRA application time with OpenBLAS (the stage's reference BLAS is slow)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
mkdir -p /tmp/m && python3 scripts/make-random-checkpoint.py /tmp/m 2>&1 | tail -1
python3 scripts/make-random-lora.py /tmp/m/sd15-random.safetensors /tmp/m/lora.safetensors --rank 32
rm -rf /tmp/kiln-blas && cp -a /tmp/kiln-stage /tmp/kiln-blas && xz -dc .stage-blas/libopenblas.so.0.xz > /tmp/kiln-blas/pack/lib/libopenblas.so.0
L="kiln txt2img -m /tmp/m/sd15-random.safetensors --device cuda -p cat -W 512 -H 512 --steps 2 --profile -o /tmp/m/o.png"
for i in 1 2 3; do
  echo "-- none $i: $(KILN_STAGE_ROOT=/tmp/kiln-blas $R $L 2>&1 | grep -E '^load |rror')"
  echo "-- lora $i: $(KILN_STAGE_ROOT=/tmp/kiln-blas $R $L --lora /tmp/m/lora.safetensors:1 2>&1 | grep -E '^load |rror')"
done
nproc
lap
