#!/usr/bin/env python3
"""diffusers' load_textual_inversion as the oracle of kiln's embeddings (tests/pipeline/textual_inversion_test.cpp).

Each case's embeddings are random vectors, torch.randn([vectors, width]) from a CPU generator seeded as the
case says; the test makes the very same ones with kiln's copy of torch's generator, writes them in
AUTOMATIC1111's layouts and runs kiln. Only diffusers' final latents are stored, packed with the chunk
oracle's output (ti_chunks_reference.py) into tests/data/textual-inversion/textual-inversion.tar.xz:

    mkdir -p /tmp/ti && /work/oracle-venv/bin/python tools/reference/textual_inversion_reference.py \
        build/test-data /tmp/ti/ti-reference.safetensors
    /work/oracle-venv/bin/python tools/reference/ti_chunks_reference.py A1111_CHECKOUT build/test-data \
        /tmp/ti/ti-chunks.json
    tar -C /tmp/ti --sort=name --owner=0 --group=0 --mtime=@0 \
        -cJf tests/data/textual-inversion/textual-inversion.tar.xz ti-chunks.json ti-reference.safetensors
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kiln_reference import Oracle  # noqa: E402

# name -> vectors and seeds; SDXL embeddings have a clip_l and a clip_g part, each from its own seed.
CASES = [
    {"id": "sd15", "model": "sd15-mini", "prompt": "a photo of tiemb in the style of kilnstyle",
     "negative_prompt": "kilnstyle, blurry", "width": 64, "height": 64, "steps": 4, "guidance": 7.0,
     "sampler": "euler", "seed": 7,
     "embeddings": {"tiemb": {"vectors": 3, "seed": 101}, "kilnstyle": {"vectors": 1, "seed": 102}}},
    {"id": "sdxl", "model": "sdxl-mini", "prompt": "tixl on a hill", "negative_prompt": "blurry tixl",
     "width": 64, "height": 64, "steps": 4, "guidance": 6.0, "sampler": "euler", "seed": 9,
     "embeddings": {"tixl": {"vectors": 2, "seed_l": 201, "seed_g": 202}}},
]


def randn(vectors, width, seed):
    return torch.randn([vectors, width], generator=torch.Generator("cpu").manual_seed(seed))


def main(data_dir, out_path):
    tensors, calls = {}, []
    for case in CASES:
        oracle = Oracle()
        call = dict(case, model=os.path.join(data_dir, case["model"], "diffusers"))
        pipe, _ = oracle._pipeline(call["model"])
        for name, e in case["embeddings"].items():
            if "seed" in e:  # one text encoder: AUTOMATIC1111's .pt layout, as diffusers reads it
                vec = randn(e["vectors"], pipe.text_encoder.config.hidden_size, e["seed"])
                pipe.load_textual_inversion({"string_to_param": {"*": vec}, "name": name}, token=name)
            else:  # SDXL: each part to its own encoder, as diffusers' documentation loads them
                l = randn(e["vectors"], pipe.text_encoder.config.hidden_size, e["seed_l"])
                g = randn(e["vectors"], pipe.text_encoder_2.config.hidden_size, e["seed_g"])
                pipe.load_textual_inversion(l, token=name, text_encoder=pipe.text_encoder, tokenizer=pipe.tokenizer)
                pipe.load_textual_inversion(g, token=name, text_encoder=pipe.text_encoder_2, tokenizer=pipe.tokenizer_2)
        out = oracle.run(call)
        tensors[case["id"]] = torch.from_numpy(out["final_latent"]).contiguous()
        calls.append({k: v for k, v in case.items()})
    save_file(tensors, out_path, metadata={"cases": json.dumps(calls)})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
