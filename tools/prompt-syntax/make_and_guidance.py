#!/usr/bin/env python3
"""Writes and_guidance.json and and_latents.safetensors (packed into tests/data/prompt-syntax/a1111_and_emphasis.tar.xz
beside a1111_and.json): the oracle for kiln's guidance with AUTOMATIC1111's AND parts.

1. combine: the webui's CFGDenoiser.combine_denoised (modules/sd_samplers_cfg_denoiser.py at commit
   029adbe5318b57c04dbc0d92273cce38e1ecf457, read from the search index), its arithmetic
   reproduced in torch (float32, CPU): denoised = clone(uncond); for each image i and each of its parts,
   denoised[i] += (x_out[part] - uncond[i]) * (weight * cond_scale), with x_out laid out as the webui lays it
   out (each image's parts, then the negatives). The inputs are torch.randn from seeded CPU generators, which
   kiln's test makes again; every output value is stored.
2. generations: diffusers' own pipelines on the fixture models (float32, CPU) with the UNet's forward wrapped
   to do what the webui's denoiser does with a composed prompt: each model call runs the UNet on every AND
   part's conditioning (each part's own prompt-editing schedule, read by the webui's
   get_learned_conditioning_prompt_schedules and picked per call as reconstruct_cond_batch does) and on the
   negative, and returns the combination above. The pipeline runs with guidance_scale 1 (so it adds no
   guidance of its own); the parts are plain prompts of at most 75 tokens, whose webui conditioning is
   diffusers' encode_prompt (docs/PROMPTS.md, "Plain prompts"). The final latents are stored.

    /work/oracle-venv/bin/python tools/prompt-syntax/make_and_guidance.py --a1111 /work/a1111 \\
        --data build/test-data --out /tmp/and-oracle
then pack and_guidance.json, and_latents.safetensors and a1111_and.json as tests/data/prompt-syntax/README.md says.
"""
import argparse
import importlib.util
import json
import os
import sys
import types

import torch
from safetensors.torch import save_file

COMBINE_CASES = [
    # (seed, batch, weights, cond_scale, shape of one image's output)
    (1, 1, [1.0], 7.5, [4, 3, 5]),
    (2, 2, [1.0, 0.5], 7.3, [4, 3, 5]),
    (3, 3, [1.2, 0.3, -0.4], 5.5, [4, 2, 3]),
    (4, 1, [0.7], 1.0, [4, 4, 4]),
]

GENERATIONS = [
    {"id": "sd15", "model": "sd15-mini", "prompt": "a cat AND a dog :0.5", "negative_prompt": "blurry", "steps": 4,
     "guidance": 7.0, "sampler": "euler", "seed": 3, "batch_size": 1},
    {"id": "sd15_three", "model": "sd15-mini", "prompt": "a red house:1.2 AND [a tree:a bird:1] AND fog:-0.4",
     "negative_prompt": "blurry AND dark", "steps": 3, "guidance": 5.5, "sampler": "euler", "seed": 5, "batch_size": 2},
    {"id": "sdxl", "model": "sdxl-mini", "prompt": "a cat AND a dog:0.7", "negative_prompt": None, "steps": 3,
     "guidance": 6.0, "sampler": "euler", "seed": 7, "batch_size": 2},
    {"id": "sd15_weight_no_cfg", "model": "sd15-mini", "prompt": "a castle:0.6", "negative_prompt": "fog",
     "steps": 3, "guidance": 1.0, "sampler": "euler", "seed": 9, "batch_size": 1},
]


def load_prompt_parser(checkout):
    path = os.path.join(checkout, "modules", "prompt_parser.py")
    spec = importlib.util.spec_from_file_location("modules.prompt_parser", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def randn(shape, seed):
    return torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed))


def combine_denoised(x_out, conds_list, uncond_rows, cond_scale):
    """The webui's combine_denoised, its arithmetic as written there."""
    denoised_uncond = x_out[-uncond_rows:]
    denoised = torch.clone(denoised_uncond)
    for i, conds in enumerate(conds_list):
        for cond_index, weight in conds:
            denoised[i] += (x_out[cond_index] - denoised_uncond[i]) * (weight * cond_scale)
    return denoised


def combine_cases():
    cases = []
    for seed, batch, weights, scale, shape in COMBINE_CASES:
        uncond = randn([batch] + shape, seed)              # kiln's rows of the negative
        parts = randn([len(weights), batch] + shape, seed + 100)  # kiln's rows of each part
        # The webui's layout: image 0's parts, image 1's parts, ..., then the negatives.
        rows, conds_list = [], []
        for i in range(batch):
            conds_list.append([(len(rows) + k, w) for k, w in enumerate(weights)])
            rows += [parts[k, i] for k in range(len(weights))]
        x_out = torch.cat([torch.stack(rows), uncond])
        out = combine_denoised(x_out, conds_list, batch, scale)
        cases.append({"seed": seed, "batch": batch, "weights": weights, "scale": scale, "shape": shape,
                      "out": [float(v) for v in out.flatten()]})
    return cases


def generation(pipe, parser, case):
    sdxl = "XL" in type(pipe).__name__
    cpu = torch.device("cpu")
    _, flat, _ = parser.get_multicond_prompt_list([case["prompt"]])
    res_indexes, _, _ = parser.get_multicond_prompt_list([case["prompt"]])
    weights = [w for _, w in res_indexes[0]]
    schedules = parser.get_learned_conditioning_prompt_schedules(flat, case["steps"])

    def encode(text):
        if not sdxl:
            return pipe.encode_prompt(text, cpu, 1, False)[0], None
        e, _, pooled, _ = pipe.encode_prompt(text, device=cpu, num_images_per_prompt=1,
                                             do_classifier_free_guidance=False)
        return e, pooled

    encoded = [[(end, encode(text)) for end, text in schedule] for schedule in schedules]
    part_of_index = [i for i, _ in res_indexes[0]]
    if case["negative_prompt"] is None and sdxl:
        z, zp = encode("")
        negative = (torch.zeros_like(z), torch.zeros_like(zp))
    else:
        negative = encode(case["negative_prompt"] or "")
    original = pipe.unet.forward
    state = {"call": 0}

    def pick(schedule, step):  # reconstruct_cond_batch's choice
        for end, cond in schedule:
            if step <= end:
                return cond
        return schedule[0][1]

    def composed(sample, timestep, encoder_hidden_states=None, added_cond_kwargs=None, **kw):
        n = sample.shape[0]
        step = state["call"]
        state["call"] += 1
        conds = [pick(encoded[i], step) for i in part_of_index]
        x_in = torch.cat([torch.stack([sample[i]] * len(conds)) for i in range(n)] + [sample])
        ctx = torch.cat([torch.cat([c[0] for c in conds]) for _ in range(n)] + [negative[0].expand(n, -1, -1)])
        extra = {}
        if sdxl:
            time_ids = added_cond_kwargs["time_ids"][:1]
            pooled = torch.cat([torch.cat([c[1] for c in conds]) for _ in range(n)] + [negative[1].expand(n, -1)])
            extra["added_cond_kwargs"] = {"text_embeds": pooled, "time_ids": time_ids.expand(x_in.shape[0], -1)}
        out = original(x_in, timestep, encoder_hidden_states=ctx, **extra, **kw)[0]
        conds_list = [[(i * len(conds) + k, w) for k, w in enumerate(weights)] for i in range(n)]
        return (combine_denoised(out, conds_list, n, case["guidance"]),)

    import diffusers
    pipe.unet.forward = composed
    try:
        pipe.scheduler = diffusers.EulerDiscreteScheduler.from_config(pipe.scheduler.config)
        args = dict(num_inference_steps=case["steps"], guidance_scale=1.0, num_images_per_prompt=case["batch_size"],
                    generator=torch.Generator("cpu").manual_seed(case["seed"]), output_type="latent",
                    width=64, height=64)
        if sdxl:
            e, p = encode("placeholder")
            args.update(prompt_embeds=e, pooled_prompt_embeds=p)
        else:
            args.update(prompt_embeds=encode("placeholder")[0])
        return pipe(**args).images.contiguous()
    finally:
        pipe.unet.forward = original


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a1111", required=True)
    ap.add_argument("--data", required=True, help="the unpacked fixture models (build/test-data)")
    ap.add_argument("--out", required=True, help="a folder")
    args = ap.parse_args()
    import diffusers
    torch.set_grad_enabled(False)
    parser = load_prompt_parser(args.a1111)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "and_guidance.json"), "w") as f:
        json.dump({"combine": combine_cases(), "generations": GENERATIONS}, f, separators=(",", ":"))
    pipes, latents = {}, {}
    for case in GENERATIONS:
        folder = os.path.join(args.data, case["model"], "diffusers")
        if folder not in pipes:
            with open(os.path.join(folder, "model_index.json")) as f:
                cls = getattr(diffusers, json.load(f)["_class_name"])
            pipes[folder] = cls.from_pretrained(folder, torch_dtype=torch.float32)
            pipes[folder].set_progress_bar_config(disable=True)
        latents[case["id"]] = generation(pipes[folder], parser, case)
        print(case["id"], tuple(latents[case["id"]].shape), float(latents[case["id"]].abs().max()))
    save_file(latents, os.path.join(args.out, "and_latents.safetensors"))


if __name__ == "__main__":
    main()
