#!/usr/bin/env python3
"""Writes tests/data/gguf/quant-digests.txt: FNV-1a digests of what gguf-py (the oracle) computes for each block
format, on the inputs tests/quant/quant_oracle_test.cpp makes with the same generator (see there).
Run: /work/gguf-venv/bin/python scripts/make-quant-digests.py (numpy + gguf)."""
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

M = (1 << 64) - 1
BLOCKS = 512
# type, values, bytes, offsets of the fp16 fields
FORMATS = [(T.Q8_0, 32, 34, [0]), (T.Q4_0, 32, 18, [0]), (T.Q4_1, 32, 20, [0, 2]), (T.Q5_0, 32, 22, [0]),
           (T.Q5_1, 32, 24, [0, 2]), (T.Q4_K, 256, 144, [0, 2]), (T.Q5_K, 256, 176, [0, 2]), (T.Q6_K, 256, 210, [208]),
           (T.Q2_K, 256, 84, [80, 82]), (T.Q3_K, 256, 110, [108])]


def splitmix(seed):
    s = seed
    while True:
        s = (s + 0x9E3779B97F4A7C15) & M
        z = ((s ^ (s >> 30)) * 0xBF58476D1CE4E5B9) & M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
        yield z ^ (z >> 31)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & M
    return f"{h:016x}"


lines = []
for t, values, nbytes, halves in FORMATS:
    rng = splitmix(int(t))
    raw = bytearray()
    for _ in range(BLOCKS):
        block = bytearray(b"".join(next(rng).to_bytes(8, "little") for _ in range((nbytes + 7) // 8))[:nbytes])
        for o in halves:
            if block[o + 1] & 0x7C == 0x7C:  # inf or NaN made finite
                block[o + 1] &= 0xBF
        raw += block
    deq = quants.dequantize(np.frombuffer(bytes(raw), np.uint8).reshape(BLOCKS, nbytes), t).astype("<f4")
    lines.append(f"dequantize {t.name} {fnv1a64(deq.tobytes())}")
    if values == 32:  # gguf-py quantizes the 32-value formats only
        rng = splitmix(1000 + int(t))
        x = np.array([((next(rng) >> 40) - (1 << 23)) / (1 << 23) * 2.0 ** (i // values % 31 - 20)
                      for i in range(BLOCKS * values)], dtype=np.float32).reshape(BLOCKS, values)
        x[1:3] = 0
        x[2, 7] = 3.5
        lines.append(f"quantize {t.name} {fnv1a64(quants.quantize(x, t).tobytes())}")
out = Path(__file__).resolve().parent.parent / "tests/data/gguf/quant-digests.txt"
out.write_text("\n".join(lines) + "\n")
print(out.read_text(), end="")
