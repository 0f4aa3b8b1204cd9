#!/usr/bin/env bash
# Writes tests/data/gguf/sdcpp/: a tiny original-layout checkpoint (tiny.safetensors, five fp16 tensors named as
# SD 1.5's UNet names them) and what stable-diffusion.cpp's own converter makes of it in q8_0 and q4_0. The io
# tests read them (gguf_sdcpp_test.cpp). Dev tool, run by hand; the files are committed (22 KB).
#
# stable-diffusion.cpp was built from its public source (commit 97d2990, ggml 8e800ce), out of the tree, CPU only:
#   cmake -S sd.cpp -B sd-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSD_WEBP=OFF -DSD_WEBM=OFF -DGGML_NATIVE=OFF
#   cmake --build sd-build --target sd-cli -j2
# (the snapshot available in session lacked the vocabulary headers of tokenizers that converting does not use;
# one-line stand-ins defining empty arrays let it compile.)
# Usage: SD_CLI=/path/to/sd-cli GGUF_PY=/tmp/gguf-venv/bin/python scripts/make-sdcpp-gguf-fixtures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=tests/data/gguf/sdcpp
mkdir -p "$out"
"${GGUF_PY:-python3}" - "$out/tiny.safetensors" <<'PY'
import json, struct, sys
import numpy as np
rng = np.random.default_rng(22)
t = {
    "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight": rng.standard_normal((64, 32)) * 0.05,
    "model.diffusion_model.input_blocks.1.1.norm.weight": 1 + 0.2 * rng.standard_normal(64),
    "model.diffusion_model.input_blocks.1.1.proj_in.bias": 0.1 * rng.standard_normal(64),
    "model.diffusion_model.input_blocks.1.0.in_layers.2.weight": 0.05 * rng.standard_normal((4, 32, 3, 3)),
    "model.diffusion_model.time_embed.0.weight": 0.05 * rng.standard_normal((32, 32)),
}
t["model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight"][3, 5] = 1.5  # one large value
header, data = {}, b""
for name, v in t.items():
    b = v.astype(np.float16).tobytes()
    header[name] = {"dtype": "F16", "shape": list(v.shape), "data_offsets": [len(data), len(data) + len(b)]}
    data += b
h = json.dumps(header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
for q in q8_0 q4_0; do
  "${SD_CLI:-sd-cli}" -M convert -m "$out/tiny.safetensors" -o "$out/tiny-$q.gguf" --type "$q"
done
