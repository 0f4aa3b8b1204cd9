#!/usr/bin/env python3
"""Writes tests/data/gguf/reference.gguf with gguf-py (the GGUF library of ggml's llama.cpp project), an
implementation of the format and of ggml's q8_0/q4_0/q4_1 independent of kiln's. The io tests read it:
kiln's reader must see the metadata and tensors gguf-py wrote, kiln's quantization of `x` must give the bytes
gguf-py's gives, and kiln's dequantization the floats gguf-py's gives (stored as F32 beside them).

Dev tool only (tests do not run Python). Run from the repository root with a venv holding gguf and numpy,
outside the repository:
    python3 -m venv /tmp/gguf-venv && /tmp/gguf-venv/bin/pip install gguf numpy
    /tmp/gguf-venv/bin/python scripts/make-gguf-fixtures.py
Written with gguf 0.19.0 / numpy 2.4.6 (the file is ~12 KB and deterministic for a given gguf version).
"""
import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

OUT = "tests/data/gguf/reference.gguf"

rng = np.random.default_rng(22)
# 4 rows x 96 values: three blocks a row. Row 1 holds a block of zeros, row 2 one large value in a block,
# row 3 tiny values whose q8_0/q4_0 scales are fp16 subnormals.
x = rng.standard_normal((4, 96)).astype(np.float32)
x[1, 32:64] = 0.0
x[2, 40] = 300.0
x[3, :] *= np.float32(2e-6)

w = gguf.GGUFWriter(OUT, arch="kiln-test")
w.add_custom_alignment(64)
w.add_string("kiln.test.string", "hello, GGUF")
w.add_int32("kiln.test.int32", -7)
w.add_uint64("kiln.test.uint64", 1 << 40)
w.add_float32("kiln.test.float32", 0.25)
w.add_bool("kiln.test.bool", True)
w.add_array("kiln.test.strings", ["a", "bc", ""])
w.add_array("kiln.test.ints", [1, 2, 3, 4])

w.add_tensor("x", x)
for name, qtype in (("q8_0", T.Q8_0), ("q4_0", T.Q4_0), ("q4_1", T.Q4_1)):
    q = gguf.quantize(x, qtype)
    w.add_tensor("x." + name, q, raw_shape=q.shape, raw_dtype=qtype)
    w.add_tensor("x." + name + ".dequantized", gguf.dequantize(q, qtype).astype(np.float32))
w.add_tensor("f16", np.arange(-6, 6, dtype=np.float16).reshape(2, 3, 2) / np.float16(4))
bf16 = gguf.quantize(np.array([[1.5, -2.0], [3.0e38, 1e-3]], dtype=np.float32), T.BF16)
w.add_tensor("bf16", bf16, raw_shape=bf16.view(np.uint8).shape, raw_dtype=T.BF16)

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

# What gguf-py's own reader sees in the file, for the tests to compare kiln's reader with: one line per
# tensor (name, type, shape outermost first, absolute data offset, bytes) and per scalar/string metadata value.
r = gguf.GGUFReader(OUT)
with open(OUT.replace(".gguf", ".expected"), "w") as f:
    f.write(f"data_offset {r.data_offset}\n")
    for t in r.tensors:
        shape = ",".join(str(int(d)) for d in reversed(list(t.shape)))
        f.write(f"tensor {t.name} {t.tensor_type.name} {shape} {t.data_offset} {t.n_bytes}\n")
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            f.write(f"array {name} {len(field.data)}\n")
        elif kind == gguf.GGUFValueType.STRING:
            f.write(f"string {name} {field.contents()}\n")
        else:
            f.write(f"scalar {name} {field.contents()}\n")
print("wrote", OUT)
