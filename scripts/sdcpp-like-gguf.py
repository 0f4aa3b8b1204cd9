#!/usr/bin/env python3
"""Converts an original-layout SD single file (.safetensors, F16/F32) to GGUF the way stable-diffusion.cpp's
`convert` decides (its ModelLoader::tensor_should_be_converted: a tensor is quantized when its innermost
dimension is whole 32-value blocks, unless it is a bias, under time_embed. or an embedding; names unchanged),
with gguf-py as the writer: a GGUF file made by another implementation than kiln's. Dev tool (docs/QUANT.md):
    /tmp/gguf-venv/bin/python scripts/sdcpp-like-gguf.py IN.safetensors OUT.gguf q8_0|q4_0|q4_1
"""
import json
import struct
import sys

import gguf
import numpy as np

src, dst, qname = sys.argv[1], sys.argv[2], sys.argv[3]
qtype = getattr(gguf.GGMLQuantizationType, qname.upper())
dtypes = {"F16": np.float16, "F32": np.float32, "I64": np.int64}

with open(src, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    base = 8 + n
    w = gguf.GGUFWriter(dst, arch="sd1")
    quantized = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        f.seek(base + begin)
        values = np.frombuffer(f.read(end - begin), dtype=dtypes[info["dtype"]]).reshape(info["shape"])
        shape = info["shape"]
        convert = (len(shape) > 0 and shape[-1] % 32 == 0 and values.size > 0 and info["dtype"] in ("F16", "F32")
                   and not name.endswith(".bias") and "time_embed." not in name and "embedding" not in name)
        if convert:
            blocks = gguf.quantize(values.astype(np.float32), qtype)
            w.add_tensor(name, blocks, raw_shape=blocks.shape, raw_dtype=qtype)
            quantized += 1
        else:
            w.add_tensor(name, values)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
print(f"{dst}: {quantized} tensors in {qname}")
