#!/usr/bin/env bash
# Issue 23's table in one GPU call, CUDA beside Vulkan (docs/VULKAN.md, "Measured on the H200"): SD 1.5 UNet call
# (batch 2, 64x64 latents) on the matrix units and with them off (proxy: the RX 580 proxy of sessions 15-24, 128x128
# FMA tiles in float32; rx580: the configuration an RX 580 runs, matrix units off and kiln's defaults otherwise: fp16
# storage, the measured choice among the FMA tiles, the FMA flash kernel; session 25), the SD 1.5 VAE decode at
# 512x512, txt2img 512x512 20 steps, and SDXL's UNet call (batch 2, 128x128 latents).
# Synthetic full-size weights; `kiln bench` medians. Staged with STAGE_PROGRAMS="kiln ..." (docs/DEVELOPING.md):
#   bash scripts/experiments/vulkan_issue_table.sh [rows...]   rows: unet proxy rx580 vae txt2img sdxl (default: all)
set -u
cd "$(dirname "$0")/../.."
R=${KILN_RUN:-scripts/run-on-device.sh}
row() {  # label, then kiln bench arguments
  local label=$1; shift
  echo "$label: $($R kiln bench "$@" 2>&1 | grep -E '^(unet|vae|txt2img)|rror' | head -2 | tr -s ' ' | tr '\n' ' ')"
}
for what in "${@:-unet proxy rx580 vae txt2img sdxl}"; do
  for w in $what; do
    case $w in
      unet) for d in vulkan cuda; do row "sd15 unet b2 $d fp16" --arch sd15 --suite unet --batch 2 --device $d --warmup 3 --repeats 10; done ;;
      proxy) KILN_VULKAN_GEMM=large row "sd15 unet b2 vulkan fp32, FMA tiles" --arch sd15 --suite unet --batch 2 --device vulkan --precision fp32 --warmup 2 --repeats 5 ;;
      rx580) KILN_VULKAN_MATRIX=off row "sd15 unet b2 vulkan fp16, matrix units off" --arch sd15 --suite unet --batch 2 --device vulkan --warmup 2 --repeats 5 ;;
      vae) for d in vulkan cuda; do row "sd15 vae decode 512 $d fp16" --arch sd15 --suite vae-decode --device $d --warmup 2 --repeats 5; done ;;
      txt2img) for d in vulkan cuda; do row "sd15 txt2img 512 20 steps $d fp16" --arch sd15 --suite txt2img --device $d --warmup 1 --repeats 3; done ;;
      sdxl) for d in vulkan cuda; do row "sdxl unet b2 128x128 $d fp16" --arch sdxl --suite unet --batch 2 -W 1024 -H 1024 --device $d --warmup 2 --repeats 5; done ;;
      *) echo "unknown row $w (unet proxy rx580 vae txt2img sdxl)" >&2; exit 2 ;;
    esac
  done
done
