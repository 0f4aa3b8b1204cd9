#!/usr/bin/env python3
"""Whole-image PSNR of quantized weights against the same model's own fp16 weights (docs/QUANT.md).

Runs `kiln txt2img` on the demo model for 3 prompts x 3 seeds with the file's fp16 weights and with each
`--weights` format, and prints the PSNR of every quantized image against its fp16 twin (8-bit RGB, peak 255),
and the mean and minimum per format. Dev tool: needs numpy and Pillow (the oracle venv has them).

    /work/oracle-venv/bin/python scripts/quant-quality.py [--kiln build/kiln] [--model build/models/kiln-shapes.safetensors]
        [--formats q8_0,q4_0,q4_1] [--steps 20] [--size 128] [--env KILN_QUANT_ALL=1] [--file gguf-q8=PATH]
"""
import argparse
import math
import os
import subprocess
import tempfile

import numpy as np
from PIL import Image

PROMPTS = [
    "a large red circle on the left on a blue background",
    "a small yellow triangle at the top on a gray background",
    "a large cyan ring on a green background",
]
SEEDS = [1, 2, 3]


def generate(args, out, prompt, seed, weights, env):
    model = args.model
    if weights in args.files:  # a quantized file instead of --weights
        model, weights = args.files[weights], None
    cmd = [args.kiln, "txt2img", "-m", model, "-p", prompt, "--seed", str(seed), "--steps", str(args.steps), "-W", str(args.size), "-H", str(args.size),
           "--device", "cpu", "-q", "-o", out]
    if weights:
        cmd += ["--weights", weights]
    subprocess.run(cmd, check=True, env=env)
    return np.asarray(Image.open(out).convert("RGB"), dtype=np.float64)


def psnr(a, b):
    mse = np.mean((a - b) ** 2)
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kiln", default="build/kiln")
    p.add_argument("--model", default="build/models/kiln-shapes.safetensors")
    p.add_argument("--formats", default="q8_0,q4_0,q4_1")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--size", type=int, default=128, help="pixels (the demo model's native 128)")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE for the quantized runs")
    p.add_argument("--file", action="append", default=[],
                   help="LABEL=PATH: also compare the model file PATH (e.g. a GGUF conversion) under LABEL")
    args = p.parse_args()
    args.files = dict(e.split("=", 1) for e in args.file)
    env = dict(os.environ)
    qenv = dict(env, **dict(e.split("=", 1) for e in args.env))
    formats = args.formats.split(",") + list(args.files)
    results = {f: [] for f in formats}
    with tempfile.TemporaryDirectory() as tmp:
        for pi, prompt in enumerate(PROMPTS):
            for seed in SEEDS:
                ref = generate(args, os.path.join(tmp, "ref.png"), prompt, seed, None, env)
                for f in formats:
                    img = generate(args, os.path.join(tmp, f + ".png"), prompt, seed, f, qenv)
                    results[f].append(psnr(img, ref))
                    print(f"prompt {pi} seed {seed} {f}: {results[f][-1]:.2f} dB", flush=True)
    for f in formats:
        v = results[f]
        print(f"{f}: mean {np.mean(v):.2f} dB, min {np.min(v):.2f} dB over {len(v)} images")


if __name__ == "__main__":
    main()
