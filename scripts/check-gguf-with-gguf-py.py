#!/usr/bin/env python3
"""Reads a file `kiln convert` wrote with gguf-py (the reference reader) and checks it against its source: the
same names and shapes (gguf-py lists dims innermost first), every tensor dequantizable to finite values, and per type
the largest error relative to the tensor's largest value (0 for the types kept as stored). Exit 1 on a mismatch. Run: /work/gguf-venv/bin/python scripts/check-gguf-with-gguf-py.py OUT.gguf IN.safetensors"""
import json
import struct
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

out_path, src_path = sys.argv[1:3]
with open(src_path, "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    data = f.read()
src = {}
for name, info in header.items():
    if name != "__metadata__":
        raw = data[info["data_offsets"][0]:info["data_offsets"][1]]
        arr = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32) if info["dtype"] == "BF16" \
            else np.frombuffer(raw, {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4"}[info["dtype"]])
        src[name] = arr.astype(np.float64).reshape(info["shape"])
reader = GGUFReader(out_path)
problems, worst = [], {}
for t in reader.tensors:
    ref = src.pop(t.name, None)
    shape = tuple(int(d) for d in reversed(t.shape.tolist()))
    if ref is None or shape != ref.shape and ref.size != 1:
        problems.append(f"{t.name}: not in the source, or shape {shape}")
        continue
    vals = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(ref.shape)
    err = float(np.max(np.abs(vals - ref), initial=0) / (np.max(np.abs(ref), initial=0) or 1))
    if not np.all(np.isfinite(vals)):
        problems.append(f"{t.name}: non-finite values")
    worst[t.tensor_type.name] = max(worst.get(t.tensor_type.name, 0.0), err)
problems += [f"{n}: missing" for n in src]
print(f"{out_path}: {len(reader.tensors)} tensors read by gguf-py")
for kind, err in sorted(worst.items()):
    print(f"  {kind}: largest |error| / largest |value| {err:.4f}")
print("\n".join(problems) or "OK")
sys.exit(1 if problems else 0)
