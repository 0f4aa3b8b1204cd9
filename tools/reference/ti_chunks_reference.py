#!/usr/bin/env python3
"""AUTOMATIC1111's own tokenize_line (modules/sd_hijack_clip.py) with textual-inversion embeddings, as the
oracle of kiln's chunk_prompt (tests/text/textual_inversion_chunks_test.cpp): where each embedding lands, when
it moves to the next chunk, what the comma backtrack does with it. Only tokenization runs (no encoder).

    /work/oracle-venv/bin/python tools/reference/ti_chunks_reference.py A1111_CHECKOUT build/test-data OUT.json

(`lark` installed in the venv; packed as textual_inversion_reference.py says.)
The embedding database is the webui's lookup (EmbeddingDatabase.register_embedding and
find_embedding_at_position in modules/textual_inversion/textual_inversion.py): names tokenized without start
and end tokens, grouped by first token, longest first.
"""
import importlib.util
import json
import os
import sys
import types

EMBEDDINGS = {"kilnstyle": 3, "kiln": 2, "tiemb": 5, "big": 40}
WORDS = "red green blue cat dog tree house sky sun moon".split()


def filler(n):
    return " ".join(WORDS[i % len(WORDS)] for i in range(n))


PROMPTS = [
    "a photo of kilnstyle",
    "kiln and kilnstyle and kilnstyles",  # the longest name wins; a longer word does not match
    "(tiemb:1.3) in [kilnstyle]",
    filler(72) + " kilnstyle",            # 3 vectors at 72: fit exactly
    filler(73) + " kilnstyle after",      # at 73: the chunk closes, the vectors start the next
    filler(60) + ", " + filler(13) + " tiemb more",  # the vectors do not fit: the chunk closes at the comma
    filler(60) + ", tiemb " + filler(20),  # comma backtrack: the placeholders move, their fix stays
    filler(70) + " BREAK big " + filler(40) + " big",
    "tiemb tiemb tiemb tiemb tiemb tiemb tiemb tiemb tiemb tiemb tiemb tiemb tiemb tiemb tiemb tiemb",
]


def trim(ids, end):
    """The ids without the run of end tokens that pads them to 77 (the test pads them back)."""
    n = len(ids)
    while n > 0 and ids[n - 1] == end:
        n -= 1
    return ids[:n]


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main(checkout, data, out_path):
    from transformers import CLIPTokenizer
    package = types.ModuleType("modules")
    package.__path__ = []
    sys.modules["modules"] = package
    shared = types.ModuleType("modules.shared")
    shared.opts = types.SimpleNamespace(emphasis="Original", comma_padding_backtrack=20, CLIP_stop_at_last_layers=1,
                                        use_old_emphasis_implementation=False)
    devices = types.ModuleType("modules.devices")
    sys.modules.update({"modules.shared": shared, "modules.devices": devices,
                        "modules.sd_hijack": types.ModuleType("modules.sd_hijack")})
    for name in ("shared", "devices", "sd_hijack"):
        setattr(package, name, sys.modules["modules." + name])
    for name in ("prompt_parser", "sd_emphasis", "sd_hijack_clip"):
        setattr(package, name, load("modules." + name, os.path.join(checkout, "modules", name + ".py")))

    tokenizer = CLIPTokenizer.from_pretrained(os.path.join(data, "sd15-mini", "diffusers", "tokenizer"),
                                              pad_token="<|endoftext|>")
    lookup = {}
    for name, vectors in EMBEDDINGS.items():
        ids = tokenizer([name], truncation=False, add_special_tokens=False)["input_ids"][0]
        emb = types.SimpleNamespace(name=name, vectors=vectors)
        lookup[ids[0]] = sorted(lookup.get(ids[0], []) + [(ids, emb)], key=lambda x: len(x[0]), reverse=True)

    def find_embedding_at_position(tokens, offset):
        for ids, emb in lookup.get(tokens[offset], []):
            if tokens[offset:offset + len(ids)] == ids:
                return emb, len(ids)
        return None, None

    hijack = types.SimpleNamespace(embedding_db=types.SimpleNamespace(
        find_embedding_at_position=find_embedding_at_position), fixes=None, extra_generation_params={})
    wrapped = types.SimpleNamespace(tokenizer=tokenizer, transformer=None)
    enc = package.sd_hijack_clip.FrozenCLIPEmbedderWithCustomWords(wrapped, hijack)
    cases = []
    for prompt in PROMPTS:
        chunks, count = enc.tokenize_line(prompt)
        cases.append({"prompt": prompt, "token_count": count, "chunks": [
            {"ids": trim(c.tokens, tokenizer.eos_token_id), "weights": [[i, w] for i, w in enumerate(c.multipliers) if w != 1.0],
             "fixes": [[f.offset, f.embedding.name] for f in c.fixes]} for c in chunks]})
    with open(out_path, "w") as f:
        json.dump({"embeddings": EMBEDDINGS, "cases": cases}, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
