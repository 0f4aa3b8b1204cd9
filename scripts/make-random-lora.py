#!/usr/bin/env python3
"""Writes a LoRA of random fp16 factors for every attention projection of an SD 1.x/2.x single-file checkpoint,
in kohya's naming (lora_unet_<LDM module>, lora_te_<transformers module>), for measuring the time and memory of
applying a LoRA at full size without a real one (docs/LORA.md). The checkpoint's safetensors header gives the
names and shapes; nothing else is read, so it needs only numpy.
    python3 scripts/make-random-lora.py CHECKPOINT.safetensors OUT.safetensors [--rank 32] [--seed 0]
"""
import argparse
import json
import re
import struct

import numpy as np

UNET = re.compile(r"^model\.diffusion_model\.(.*\.attn[12]\.(to_q|to_k|to_v|to_out\.0))\.weight$")
TEXT = re.compile(r"^cond_stage_model\.transformer\.(text_model\.encoder\.layers\.\d+\.self_attn\.(q|k|v|out)_proj)\.weight$")


def header(path):
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(size))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("out")
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    tensors = {}
    for name, info in sorted(header(a.checkpoint).items()):
        if name == "__metadata__" or len(info["shape"]) != 2:
            continue
        m = UNET.match(name)
        prefix = "lora_unet_" if m else "lora_te_"
        m = m or TEXT.match(name)
        if not m:
            continue
        module = prefix + m.group(1).replace(".", "_")
        out_features, in_features = info["shape"]
        # Small factors, so that the merged change is a few percent of the weights, as a trained LoRA's.
        tensors[module + ".lora_down.weight"] = (rng.standard_normal((a.rank, in_features)) * 0.02).astype(np.float16)
        tensors[module + ".lora_up.weight"] = (rng.standard_normal((out_features, a.rank)) * 0.02).astype(np.float16)
        tensors[module + ".alpha"] = np.array(a.rank, dtype=np.float16)
    if not tensors:
        raise SystemExit(f"{a.checkpoint}: no attention projections under the LDM names (a single-file SD 1.x/2.x?)")
    head, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        blob = t.tobytes()
        head[name] = {"dtype": "F16", "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(head).encode()
    text += b" " * (-len(text) % 8)
    with open(a.out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            f.write(blob)
    print(f"{a.out}: {len(tensors) // 3} modules, rank {a.rank}, {8 + len(text) + offset} bytes")


if __name__ == "__main__":
    main()
