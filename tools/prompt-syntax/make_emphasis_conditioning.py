#!/usr/bin/env python3
"""Writes a1111_emphasis.json (packed into tests/data/prompt-syntax/a1111_and_emphasis.tar.xz): the webui's
conditioning under its other emphasis modes (modules/sd_emphasis.py: "No norm", "Ignore", "None"), and whether
it records "Emphasis" in the image's parameters (modules/sd_hijack_clip.py sets
extra_generation_params["Emphasis"] when a text it encodes holds "(" or "[" and the mode is not "Original").

It is make_conditioning.py (in tools/prompt-syntax/scripts.tar.xz) with shared.opts.emphasis set per case: the
same stubs, the same digests, the webui's own code.

    tar xJf tools/prompt-syntax/scripts.tar.xz -C /tmp
    /work/oracle-venv/bin/python tools/prompt-syntax/make_emphasis_conditioning.py --scripts /tmp \\
        --a1111 /work/a1111 --data build/test-data --out /tmp/and-oracle/a1111_emphasis.json
"""
import argparse
import json
import sys

# (model, steps, prompt, the webui's emphasis option)
CASES = [
    ("sd15-mini", 20, "a (photo) of a [cat]", "No norm"),
    ("sd15-mini", 20, "(a photo:0.5) of a (cat:1.5)", "No norm"),
    ("sd15-mini", 20, "(a photo:0.5) of a (cat:1.5)", "Ignore"),
    ("sd15-mini", 20, "a (photo:1.3) of \\(a\\) [cat] BREAK dog", "None"),
    ("sd15-mini", 20, "a (photo:1.3) of \\(a\\) [cat] BREAK dog", "Ignore"),
    ("sd15-mini", 20, "a [cat:(dog:1.2):5] on a hill", "No norm"),
    ("sd15-mini", 20, "a [cat:dog:5] on a hill", "No norm"),
    ("sd15-mini", 20, "a photo of a cat", "Ignore"),
    ("sd15-mini", 20, "(a photo of a cat:1.3)", "Original"),
    ("sd2-mini", 20, "a (photo) of a [cat]!!", "None"),
    ("sd2-mini", 20, "(a cat:1.3) BREAK a dog", "No norm"),
    ("sdxl-mini", 20, "(a cat:1.3) BREAK (a dog:0.7)", "No norm"),
    ("sdxl-mini", 20, "a ((photo)) of a [cat]", "None"),
]


def hijack_of(fn):
    """The stub hijack make_model's encoder holds (its extra_generation_params)."""
    for cell in fn.__closure__ or ():
        obj = cell.cell_contents
        if hasattr(obj, "hijack"):
            return obj.hijack
    raise RuntimeError("no hijack")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scripts", required=True, help="where scripts.tar.xz was unpacked (make_conditioning.py)")
    ap.add_argument("--a1111", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    sys.path.insert(0, args.scripts)
    import make_conditioning as mc
    import torch
    torch.set_grad_enabled(False)
    webui = mc.load_webui(args.a1111)
    models, out = {}, []
    for model_name, steps, prompt, emphasis in CASES:
        webui.shared.opts.emphasis = emphasis
        webui.shared.opts.CLIP_stop_at_last_layers = 1
        if model_name not in models:
            models[model_name] = mc.make_model(webui, args.data, model_name)
        hijack = hijack_of(models[model_name])
        hijack.extra_generation_params.clear()
        stub = type("Stub", (), {"get_learned_conditioning": staticmethod(models[model_name])})
        schedule = webui.prompt_parser.get_learned_conditioning(stub, [prompt], steps)[0]
        entries = []
        for s in schedule:
            e = {"end_step": s.end_at_step}
            if isinstance(s.cond, dict):
                e["context"], e["pooled"] = mc.digest(s.cond["crossattn"]), mc.digest(s.cond["vector"])
            else:
                e["context"] = mc.digest(s.cond)
            entries.append(e)
        out.append({"model": model_name, "steps": steps, "prompt": prompt, "emphasis": emphasis,
                    "infotext": hijack.extra_generation_params.get("Emphasis"), "schedule": entries})
        print(model_name, emphasis, repr(prompt), len(entries), out[-1]["infotext"])
    with open(args.out, "w") as f:
        json.dump({"cases": out}, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
