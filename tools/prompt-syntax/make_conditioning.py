#!/usr/bin/env python3
"""Writes tests/data/prompt-syntax/a1111_conditioning.json: digests of the conditioning AUTOMATIC1111's webui
computes for prompts with its syntax (emphasis, nesting, escapes, long prompts, BREAK, prompt editing), on the
fixture models' text encoders (sd15-mini, sd2-mini, sdxl-mini's two).

The oracle is the webui's own code, loaded from a checkout given on the command line (kiln does not carry it):
modules/prompt_parser.py (get_learned_conditioning: the schedule, one batch per prompt), modules/sd_hijack_clip.py
(FrozenCLIPEmbedderWithCustomWords: chunks, empty-chunk padding, the per-chunk encoding, the concatenation,
SDXL's pooled output from the first chunk) and modules/sd_emphasis.py ("Original": multiply, restore the mean).
What this script adds is only what the webui gets from elsewhere:
- shared.opts with the webui's defaults (emphasis "Original", comma_padding_backtrack 20, no old emphasis
  implementation, sdxl_clip_l_skip off) and CLIP_stop_at_last_layers = the case's clip skip; devices on the CPU;
  a hijack without textual-inversion embeddings;
- the wrapped encoders: transformers' CLIPTextModel(WithProjection) of the fixture in place of ldm's / sgm's
  modules. SD 1.x: the webui's FrozenCLIPEmbedderWithCustomWords itself. SDXL's first encoder: its
  FrozenCLIPEmbedderForSDXLWithCustomWords with layer "hidden" at index -2 (sgm's layer_idx 11 of a 12-layer
  CLIP-L, the penultimate). OpenCLIP encoders (SD 2.x; SDXL's second) as modules/sd_hijack_open_clip.py wraps
  them: pad id 0 after the end token, SD 2.x's final-normed output (the fixture's converted encoder already
  stops at the penultimate layer, as the webui's "penultimate" does), SDXL's un-normed penultimate hidden state
  and pooled (projected) output. The tokenizer is transformers' CLIPTokenizer with "!" read as text (the webui's
  open_clip tokenizer has no pad token);
- SDXL's conditioner (sgm GeneralConditioner): both encoders' outputs side by side.
Torch runs in float32 on the CPU.

Run outside the repository:
    /work/a1111-venv/bin/python tools/prompt-syntax/make_conditioning.py --a1111 /work/a1111 \\
        --data build/test-data --out /tmp/a1111_conditioning.json
then pack it (tests/data/prompt-syntax/README.md).

The digest of a tensor (the tree has no room for the tensors themselves): shape; max |v|; sum and sum of
squares (float64); three projections sum_i c_k(i) v_i with pseudo-random coefficients in [-1, 1) that kiln's
test computes alike (coefficient(), below), which a wrong value anywhere moves; and 16 values at
pseudo-random positions (position()). Each entry also records the largest condition number of the means the
"Original" emphasis took (mean |z| / |mean z| over a chunk's batch), which bounds the float32 error of its rescaling.
"""
import argparse
import importlib.util
import json
import math
import os
import sys
import types

SAMPLES = 16
PROJECTIONS = 3


def coefficient(i, k):
    """The k-th projection's coefficient of flat index i: 24 bits of a multiplicative hash, in [-1, 1)."""
    h = (i * 2654435761 + (k + 1) * 40503) & 0xFFFFFFFF
    return (h >> 8) / float(1 << 23) - 1.0


def position(j, n):
    return (j * 2654435761 + 12345) % n


LONG = ", ".join(["a castle on a hill", "(golden light:1.2)", "[fog]", "many birds", "an old stone bridge",
                  "((river))", "pine trees", "snowy mountains", "a small village", "(red roofs:0.8)"] * 3)

# (model, clip skip, steps, prompt)
CASES = [
    ("sd15-mini", 1, 20, "a photo of a cat"),
    ("sd15-mini", 1, 20, "a (photo) of a cat"),
    ("sd15-mini", 1, 20, "a ((photo)) of a [cat]"),
    ("sd15-mini", 1, 20, "a (photo of a cat:1.3)"),
    ("sd15-mini", 1, 20, "(a photo:0.5) of a (cat:1.5)"),
    ("sd15-mini", 1, 20, "a [[[dog]]] and (((a cat:1.1)))"),
    ("sd15-mini", 1, 20, "\\(literal\\) parentheses \\[and\\] brackets"),
    ("sd15-mini", 1, 20, "(unbalanced emphasis to the end"),
    ("sd15-mini", 1, 20, "stray ] bracket and ) parenthesis"),
    ("sd15-mini", 1, 20, "(a:0) zero weight"),
    ("sd15-mini", 1, 20, "(a:-1) negative weight, (b:4)"),
    ("sd15-mini", 1, 20, "first part BREAK second part"),
    ("sd15-mini", 1, 20, "BREAK"),
    ("sd15-mini", 1, 20, ""),
    ("sd15-mini", 1, 20, LONG),
    ("sd15-mini", 1, 20, "a dog BREAK " + LONG),
    ("sd15-mini", 1, 20, "a [cat:dog:5] on a hill"),
    ("sd15-mini", 1, 20, "a [(cat:1.4):dog BREAK running:0.5] on a hill"),
    ("sd15-mini", 1, 4, "a [cat|dog|bird] in the (rain)"),
    ("sd15-mini", 1, 20, "[short:" + LONG + ":3]"),
    ("sd15-mini", 2, 20, "a (photo) of a [cat], clip skip 2"),
    ("sd15-mini", 1, 20, "an (elaborate:1.1) " + " ".join(["word"] * 80)),
    ("sd2-mini", 1, 20, "a photo of a cat"),
    ("sd2-mini", 1, 20, "a (photo) of a [cat]!!"),
    ("sd2-mini", 1, 20, "(a cat:1.3) BREAK a dog"),
    ("sd2-mini", 1, 20, LONG),
    ("sd2-mini", 1, 20, "a [cat:dog:0.25] (wow!:1.2)"),
    ("sdxl-mini", 1, 20, "a photo of a cat"),
    ("sdxl-mini", 1, 20, "a ((photo)) of a [cat]"),
    ("sdxl-mini", 1, 20, "(a cat:1.3) BREAK (a dog:0.7)"),
    ("sdxl-mini", 1, 20, LONG),
    ("sdxl-mini", 1, 20, "a [cat:(dog:1.2):10]"),
    ("sdxl-mini", 1, 6, "[red|green] apple, " + LONG),
]


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_webui(checkout):
    package = types.ModuleType("modules")
    package.__path__ = []
    sys.modules["modules"] = package
    shared = types.ModuleType("modules.shared")
    shared.opts = types.SimpleNamespace(emphasis="Original", comma_padding_backtrack=20, CLIP_stop_at_last_layers=1,
                                        use_old_emphasis_implementation=False, sdxl_clip_l_skip=False,
                                        textual_inversion_add_hashes_to_infotext=True)
    devices = types.ModuleType("modules.devices")
    devices.device = "cpu"
    devices.torch_npu_set_device = lambda: None
    sys.modules.update({"modules.shared": shared, "modules.devices": devices,
                        "modules.sd_hijack": types.ModuleType("modules.sd_hijack")})
    for name in ("shared", "devices", "sd_hijack"):
        setattr(package, name, sys.modules["modules." + name])
    for name in ("prompt_parser", "sd_emphasis", "sd_hijack_clip"):
        setattr(package, name, load("modules." + name, os.path.join(checkout, "modules", name + ".py")))
    return package


def make_model(webui, data, model_name):
    import torch
    from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    hijack = types.SimpleNamespace(
        embedding_db=types.SimpleNamespace(find_embedding_at_position=lambda tokens, position: (None, None)),
        fixes=None, extra_generation_params={})
    clip = webui.sd_hijack_clip
    root = os.path.join(data, model_name, "diffusers")

    def tokenizer(folder):
        # The webui's tokenizers know no pad token: "!" is text.
        return CLIPTokenizer.from_pretrained(os.path.join(root, folder), pad_token="<|endoftext|>")

    class OpenClipLike(clip.FrozenCLIPEmbedderWithCustomWords):
        """modules/sd_hijack_open_clip.py's arrangement: pad id 0 after the end token."""
        def __init__(self, wrapped, hijack, sdxl):
            super().__init__(wrapped, hijack)
            self.id_pad = 0
            self.sdxl = sdxl

        def encode_with_transformers(self, tokens):
            out = self.wrapped.transformer(input_ids=tokens, output_hidden_states=True)
            if not self.sdxl:
                return out.last_hidden_state
            z = out.hidden_states[-2]
            z.pooled = out.text_embeds
            return z

    def wrapped(folder, encoder_folder, cls, **extra):
        transformer = cls.from_pretrained(os.path.join(root, encoder_folder), dtype=torch.float32).eval()
        # transformers 5 keeps CLIPTextModel's final norm on the model itself; the webui reaches it the way
        # transformers 4 laid it out (transformer.text_model.final_layer_norm).
        if hasattr(transformer, "final_layer_norm"):
            object.__setattr__(transformer, "text_model",
                               types.SimpleNamespace(final_layer_norm=transformer.final_layer_norm))
        return types.SimpleNamespace(tokenizer=tokenizer(folder), transformer=transformer, **extra)

    if model_name == "sd15-mini":
        enc = clip.FrozenCLIPEmbedderWithCustomWords(wrapped("tokenizer", "text_encoder", CLIPTextModel), hijack)
        return lambda texts: enc(texts)
    if model_name == "sd2-mini":
        enc = OpenClipLike(wrapped("tokenizer", "text_encoder", CLIPTextModel), hijack, sdxl=False)
        return lambda texts: enc(texts)
    first = clip.FrozenCLIPEmbedderForSDXLWithCustomWords(
        wrapped("tokenizer", "text_encoder", CLIPTextModel, layer="hidden", layer_idx=-2), hijack)
    second = OpenClipLike(wrapped("tokenizer_2", "text_encoder_2", CLIPTextModelWithProjection, return_pooled=True),
                          hijack, sdxl=True)

    def conditioner(texts):
        l = first(texts)
        g, pooled = second(texts)
        return {"crossattn": torch.cat([l, g], dim=2), "vector": pooled}
    return conditioner


def digest(t):
    import torch
    v = t.detach().to(torch.float64).reshape(-1)
    n = v.numel()
    idx = torch.arange(n, dtype=torch.int64)
    projections = []
    for k in range(PROJECTIONS):
        h = (idx * 2654435761 + (k + 1) * 40503) & 0xFFFFFFFF
        c = (h >> 8).to(torch.float64) / float(1 << 23) - 1.0
        projections.append(float((c * v).sum()))
    return {"shape": list(t.shape), "max_abs": float(v.abs().max()), "sum": float(v.sum()),
            "sum_sq": float((v * v).sum()), "projections": projections,
            "samples": [float(v[position(j, n)]) for j in range(SAMPLES)]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a1111", required=True, help="a checkout of AUTOMATIC1111/stable-diffusion-webui")
    ap.add_argument("--data", required=True, help="the unpacked fixtures (build/test-data)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    torch.set_grad_enabled(False)
    assert coefficient(5, 1) == float(((5 * 2654435761 + 2 * 40503) & 0xFFFFFFFF) >> 8) / (1 << 23) - 1.0
    webui = load_webui(args.a1111)

    # Record how well conditioned each mean of the emphasis is (the code that runs is the webui's own).
    conds = []
    original = webui.sd_emphasis.EmphasisOriginal.after_transformers

    def recording(self):
        z = self.z.to(torch.float64)
        conds.append(float(z.abs().mean() / z.mean().abs()))
        original(self)
        z = self.z.to(torch.float64)
        conds.append(float(z.abs().mean() / z.mean().abs()))
    webui.sd_emphasis.EmphasisOriginal.after_transformers = recording

    models = {}
    out = []
    for model_name, clip_skip, steps, prompt in CASES:
        webui.shared.opts.CLIP_stop_at_last_layers = clip_skip
        if model_name not in models:
            models[model_name] = make_model(webui, args.data, model_name)
        stub = types.SimpleNamespace(get_learned_conditioning=models[model_name])
        conds.clear()
        schedule = webui.prompt_parser.get_learned_conditioning(stub, [prompt], steps)[0]
        entries = []
        for s in schedule:
            cond = s.cond
            e = {"end_step": s.end_at_step}
            if isinstance(cond, dict):
                e["context"] = digest(cond["crossattn"])
                e["pooled"] = digest(cond["vector"])
            else:
                e["context"] = digest(cond)
            entries.append(e)
        out.append({"model": model_name, "clip_skip": clip_skip, "steps": steps, "prompt": prompt,
                    "emphasis_condition": max(conds), "schedule": entries})
        print(f"{model_name} skip {clip_skip} steps {steps}: {len(entries)} entries, "
              f"context {entries[0]['context']['shape']}: {prompt[:60]!r}")
    import transformers
    meta = {"torch": torch.__version__, "transformers": transformers.__version__, "samples": SAMPLES,
            "projections": PROJECTIONS}
    with open(args.out, "w") as f:
        json.dump({"made_with": meta, "cases": out}, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
