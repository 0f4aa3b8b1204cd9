#!/usr/bin/env python3
"""Writes a full-size SD 1.5 checkpoint with random fp16 weights, for measuring load time and memory
without a real checkpoint: the values are noise, the names, shapes, dtypes and byte layout are those
of a real SD 1.5 fp16 file.

    python scripts/make-random-checkpoint.py OUT_DIR [--tokenizer DIR] [--seed N]

writes OUT_DIR/sd15-random.safetensors (original LDM single-file layout, ~2 GB: fp16 weights, the
float32 DDPM buffers and the int64 position_ids real files carry) and, with --tokenizer (a folder
holding CLIP's vocab.json and merges.txt, e.g. build/test-data/sd15-mini/diffusers/tokenizer),
OUT_DIR/sd15-random/ as a diffusers folder with the same weights in .fp16.safetensors files.

Needs torch, diffusers, transformers and safetensors (the oracle venv). The models are built on
torch's meta device (shapes only) and filled here, so nothing is initialised twice; the LDM names are
checked by converting them back with diffusers' own single-file converter. Keep the output out of git.
"""
import argparse
import json
import math
import os
import shutil

import torch
from diffusers import AutoencoderKL, UNet2DConditionModel
from diffusers.loaders import single_file_utils as sfu
from safetensors.torch import save_file
from transformers import CLIPTextConfig, CLIPTextModel

UNET_CONFIG = dict(
    sample_size=64, in_channels=4, out_channels=4, layers_per_block=2,
    block_out_channels=(320, 640, 1280, 1280),
    down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
    up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
    cross_attention_dim=768, attention_head_dim=8, norm_num_groups=32)
VAE_CONFIG = dict(
    in_channels=3, out_channels=3, latent_channels=4, layers_per_block=2, sample_size=512,
    block_out_channels=(128, 256, 512, 512), norm_num_groups=32,
    down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4)
CLIP_CONFIG = dict(
    vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
    num_attention_heads=12, max_position_embeddings=77, hidden_act="quick_gelu", projection_dim=768)


def resnet_ldm(rest):
    """A diffusers ResnetBlock2D parameter name as the UNet of the original layout names it."""
    table = {"norm1": "in_layers.0", "conv1": "in_layers.2", "time_emb_proj": "emb_layers.1",
             "norm2": "out_layers.0", "conv2": "out_layers.3", "conv_shortcut": "skip_connection"}
    layer, param = rest.split(".", 1)
    return f"{table[layer]}.{param}"


def unet_ldm_name(name):
    p = name.split(".")
    simple = {"time_embedding.linear_1": "time_embed.0", "time_embedding.linear_2": "time_embed.2",
              "conv_in": "input_blocks.0.0", "conv_norm_out": "out.0", "conv_out": "out.2"}
    for n in (2, 1):
        head = ".".join(p[:n])
        if head in simple:
            return simple[head] + "." + ".".join(p[n:])
    per_level = UNET_CONFIG["layers_per_block"]
    if p[0] == "down_blocks":
        level, kind = int(p[1]), p[2]
        if kind == "downsamplers":  # down_blocks.L.downsamplers.0.conv.*
            return f"input_blocks.{(per_level + 1) * (level + 1)}.0.op.{'.'.join(p[5:])}"
        block = (per_level + 1) * level + int(p[3]) + 1
        rest = ".".join(p[4:])
        return f"input_blocks.{block}.0.{resnet_ldm(rest)}" if kind == "resnets" else f"input_blocks.{block}.1.{rest}"
    if p[0] == "mid_block":
        rest = ".".join(p[3:])
        if p[1] == "attentions":
            return f"middle_block.1.{rest}"
        return f"middle_block.{2 * int(p[2])}.{resnet_ldm(rest)}"
    if p[0] == "up_blocks":
        level, kind = int(p[1]), p[2]
        if kind == "upsamplers":  # after the block's last resnet (and its attention, where there is one)
            has_attention = UNET_CONFIG["up_block_types"][level].startswith("CrossAttn")
            return f"output_blocks.{(per_level + 1) * level + per_level}.{2 if has_attention else 1}.conv.{'.'.join(p[5:])}"
        block = (per_level + 1) * level + int(p[3])
        rest = ".".join(p[4:])
        return f"output_blocks.{block}.0.{resnet_ldm(rest)}" if kind == "resnets" else f"output_blocks.{block}.1.{rest}"
    raise ValueError(f"no LDM name for UNet tensor {name}")


def vae_ldm_name(name):
    """The original-layout name, and whether the tensor is a linear stored there as a 1x1 conv."""
    p = name.split(".")
    if p[0] in ("quant_conv", "post_quant_conv"):
        return name, False
    side, rest = p[0], p[1:]
    if rest[0] in ("conv_in", "conv_out"):
        return name, False
    if rest[0] == "conv_norm_out":
        return f"{side}.norm_out.{rest[1]}", False
    if rest[0] == "mid_block":
        if rest[1] == "resnets":
            layer = rest[3].replace("conv_shortcut", "nin_shortcut")
            return f"{side}.mid.block_{int(rest[2]) + 1}.{layer}.{rest[4]}", False
        attn = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out": "proj_out"}
        layer, param = rest[3], rest[-1]
        return f"{side}.mid.attn_1.{attn[layer]}.{param}", layer != "group_norm"
    levels = len(VAE_CONFIG["block_out_channels"])
    if rest[0] == "down_blocks":
        level = int(rest[1])
        if rest[2] == "downsamplers":
            return f"{side}.down.{level}.downsample.conv.{rest[-1]}", False
        layer = rest[4].replace("conv_shortcut", "nin_shortcut")
        return f"{side}.down.{level}.block.{rest[3]}.{layer}.{rest[5]}", False
    if rest[0] == "up_blocks":
        level = levels - 1 - int(rest[1])  # the original counts up blocks from the highest resolution
        if rest[2] == "upsamplers":
            return f"{side}.up.{level}.upsample.conv.{rest[-1]}", False
        layer = rest[4].replace("conv_shortcut", "nin_shortcut")
        return f"{side}.up.{level}.block.{rest[3]}.{layer}.{rest[5]}", False
    raise ValueError(f"no LDM name for VAE tensor {name}")


def fill(state, gen):
    """Random fp16 values of a plausible scale: matrices ~ 0.5/sqrt(fan_in), biases ~ 0.01, norm
    scales ~ 1, so that activations keep their size through the network (no inf or NaN)."""
    out = {}
    for name, meta in state.items():
        shape = tuple(meta.shape)
        if name.endswith(".bias"):
            t = torch.randn(shape, generator=gen) * 0.01
        elif len(shape) == 1:
            t = 1 + torch.randn(shape, generator=gen) * 0.1
        else:
            fan_in = math.prod(shape[1:])
            t = torch.randn(shape, generator=gen) * (0.5 / math.sqrt(fan_in))
        out[name] = t.to(torch.float16).contiguous()
    return out


def ddpm_buffers():
    """The float32 schedule buffers real SD 1.x single files carry (inference ignores them)."""
    betas = torch.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000, dtype=torch.float64) ** 2
    alphas_cumprod = torch.cumprod(1 - betas, 0)
    prev = torch.cat([torch.ones(1, dtype=torch.float64), alphas_cumprod[:-1]])
    return {k: v.to(torch.float32).contiguous() for k, v in {
        "betas": betas, "alphas_cumprod": alphas_cumprod, "alphas_cumprod_prev": prev,
        "sqrt_alphas_cumprod": alphas_cumprod.sqrt(), "sqrt_one_minus_alphas_cumprod": (1 - alphas_cumprod).sqrt(),
    }.items()}


def check_names(single, unet, vae, unet_config, vae_config):
    """diffusers' own converter must give back every diffusers name with its shape."""
    as_torch = {k: v for k, v in single.items()}
    back = sfu.convert_ldm_unet_checkpoint(as_torch, unet_config)
    assert {k: tuple(v.shape) for k, v in back.items()} == {k: tuple(v.shape) for k, v in unet.items()}, "UNet names"
    back = sfu.convert_ldm_vae_checkpoint(as_torch, vae_config)
    assert {k: tuple(v.shape) for k, v in back.items()} == {k: tuple(v.shape) for k, v in vae.items()}, "VAE names"


def write_diffusers_folder(root, tokenizer, unet_model, vae_model, clip_config, unet, vae, clip):
    shutil.rmtree(root, ignore_errors=True)
    for sub in ("unet", "vae", "text_encoder", "tokenizer", "scheduler"):
        os.makedirs(os.path.join(root, sub))
    save_file(unet, os.path.join(root, "unet", "diffusion_pytorch_model.fp16.safetensors"))
    save_file(vae, os.path.join(root, "vae", "diffusion_pytorch_model.fp16.safetensors"))
    save_file(clip, os.path.join(root, "text_encoder", "model.fp16.safetensors"))
    unet_model.save_config(os.path.join(root, "unet"))
    vae_model.save_config(os.path.join(root, "vae"))
    clip_config.to_json_file(os.path.join(root, "text_encoder", "config.json"))
    for f in ("vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"):
        if os.path.exists(os.path.join(tokenizer, f)):
            shutil.copy(os.path.join(tokenizer, f), os.path.join(root, "tokenizer", f))
    with open(os.path.join(root, "scheduler", "scheduler_config.json"), "w") as f:
        json.dump({"_class_name": "PNDMScheduler", "beta_start": 0.00085, "beta_end": 0.012,
                   "beta_schedule": "scaled_linear", "num_train_timesteps": 1000, "set_alpha_to_one": False,
                   "skip_prk_steps": True, "steps_offset": 1, "prediction_type": "epsilon"}, f, indent=2)
    with open(os.path.join(root, "model_index.json"), "w") as f:
        json.dump({"_class_name": "StableDiffusionPipeline", "scheduler": ["diffusers", "PNDMScheduler"],
                   "text_encoder": ["transformers", "CLIPTextModel"], "tokenizer": ["transformers", "CLIPTokenizer"],
                   "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"]}, f, indent=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--tokenizer", help="folder with CLIP's vocab.json and merges.txt: also write a diffusers folder")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)

    with torch.device("meta"):
        unet_model = UNet2DConditionModel(**UNET_CONFIG)
        vae_model = AutoencoderKL(**VAE_CONFIG)
        clip_config = CLIPTextConfig(**CLIP_CONFIG)
        clip_model = CLIPTextModel(clip_config)
    def single_file(unet, vae, clip):
        single = {}
        for name, t in unet.items():
            single["model.diffusion_model." + unet_ldm_name(name)] = t
        for name, t in vae.items():
            ldm, conv = vae_ldm_name(name)
            single["first_stage_model." + ldm] = t.reshape(*t.shape, 1, 1) if conv and t.dim() == 2 else t
        for name, t in clip.items():
            single["cond_stage_model.transformer." + name] = t
        single["cond_stage_model.transformer.text_model.embeddings.position_ids"] = torch.arange(77).reshape(1, 77)
        single.update(ddpm_buffers())
        return single

    unet_meta, vae_meta = unet_model.state_dict(), vae_model.state_dict()
    # transformers 5 names CLIPTextModel's parameters without the "text_model." level that checkpoints have.
    clip_meta = {k if k.startswith("text_model.") else "text_model." + k: v
                 for k, v in clip_model.state_dict().items() if not k.endswith("position_ids")}
    # The names first, on shapes alone: a mistake shows before a minute of random numbers.
    check_names(single_file(unet_meta, vae_meta, clip_meta), unet_meta, vae_meta, dict(unet_model.config),
                dict(vae_model.config))
    gen = torch.Generator().manual_seed(args.seed)
    unet, vae, clip = fill(unet_meta, gen), fill(vae_meta, gen), fill(clip_meta, gen)
    single = single_file(unet, vae, clip)

    path = os.path.join(args.out_dir, "sd15-random.safetensors")
    save_file(single, path, metadata={"format": "pt"})
    print(f"{path}: {len(single)} tensors, {os.path.getsize(path) / 2**30:.2f} GiB")
    if args.tokenizer:
        root = os.path.join(args.out_dir, "sd15-random")
        write_diffusers_folder(root, args.tokenizer, unet_model, vae_model, clip_config, unet, vae, clip)
        print(f"{root}/: diffusers folder, fp16 variant")


if __name__ == "__main__":
    main()
