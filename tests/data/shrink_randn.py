#!/usr/bin/env python3
"""Reduces the fixtures' torch.randn references (rng/randn.safetensors) to what the tests need to stay exact:
each stream of more than 1024 values keeps its first 256 (tests compare prefixes of them) and its whole length
and FNV-1a 64-bit digest of its float32 bytes go to rng/randn_digests.json (tests/rng/randn_fixture.h checks a
generated stream against both). The streams themselves are random floats that xz cannot shrink: 3 MB of the
tracked tree. Run once on an unpacked copy of the fixtures, then re-pack (tests/data/README.md):
    python3 tests/data/shrink_randn.py DIR     # DIR holds rng/randn.safetensors
No dependency beyond Python's standard library."""
import json
import struct
import sys

KEEP, LONGER_THAN = 256, 1024


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main(root: str) -> None:
    path = f"{root}/rng/randn.safetensors"
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    digests, out_header, out_data = {}, {}, bytearray()
    for name in sorted(k for k in header if k != "__metadata__"):
        info = header[name]
        assert info["dtype"] == "F32", name
        begin, end = info["data_offsets"]
        values = data[begin:end]
        count = len(values) // 4
        if count > LONGER_THAN:
            digests[name] = {"count": count, "fnv1a64": f"{fnv1a64(values):016x}"}
            values = values[: 4 * KEEP]
        out_header[name] = {"dtype": "F32", "shape": [len(values) // 4] if name in digests else info["shape"],
                            "data_offsets": [len(out_data), len(out_data) + len(values)]}
        out_data += values
    if "__metadata__" in header:
        out_header["__metadata__"] = header["__metadata__"]
    text = json.dumps(out_header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + bytes(out_data))
    with open(f"{root}/rng/randn_digests.json", "w") as f:
        json.dump({"first_values_kept": KEEP, "streams": digests}, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
