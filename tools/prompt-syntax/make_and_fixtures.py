#!/usr/bin/env python3
"""Writes a1111_and.json (packed into tests/data/prompt-syntax/a1111_and_emphasis.tar.xz): how AUTOMATIC1111's webui splits prompts at AND
(composable diffusion) and reads each part's weight, for kiln's text/composable_prompt.h.

The oracle is the webui's own modules/prompt_parser.py (get_multicond_prompt_list), loaded from a checkout
given on the command line (kiln does not carry its code; torch, which it imports but this function does not
need, is replaced by an empty module). For each prompt the fixture keeps the list of [text, weight] pairs
the function makes (the webui shares one conditioning among parts of equal text; the pairs are before that
sharing), and the "N/75" token count of its UI for the hand-written ones, as a prompt and as a negative prompt
(modules/ui.py update_token_counter: extra-network tags removed, then the AND parts of a prompt, their schedules
over 20 steps, the most tokens of any scheduled text), counted here with transformers' CLIPTokenizer as
make_fixtures.py's chunks_like_a1111() does.

    /work/a1111-venv/bin/python tools/prompt-syntax/make_and_fixtures.py --a1111 /work/a1111 \
        --tokenizer build/test-data/sd15-mini/diffusers/tokenizer --make-fixtures /tmp/make_fixtures.py \
        --out /tmp/and-oracle/a1111_and.json
(make_fixtures.py from `tar xJf tools/prompt-syntax/scripts.tar.xz -C /tmp`).

Floats are Python's shortest repr; non-finite ones the strings "inf", "-inf", "nan".
"""
import argparse
import importlib.util
import json
import math
import os
import random
import re
import sys
import types

HAND_WRITTEN = [
    "a cat AND a dog", "a cat AND a dog :0.5", "a cat :1.2 AND a dog:0.3", "a cat AND a dog : -0.5",
    "a cat AND a dog:+2", "a cat AND a dog:1.", "a cat AND a dog:.5", "a cat AND a dog:.", "a cat AND a dog:1.2.3",
    "a cat AND a dog:1e3", "a cat AND a dog :0.5 ", "a cat AND a dog :0.5\n", "a cat AND a dog\n:\n0.5\n",
    "a cat:0.5", "masterpiece, best quality:1.2", "a cat : 0.5 : 0.7", "a cat::0.5", "a cat:0.5)", "(a cat:0.5)",
    "AND", "AND AND", "ANDAND", "a ANDb", "aAND b", "a_AND_b", "a,AND,b", "a.AND.b", "a AND", "AND a",
    "a and b", "a And b", "a AND b AND c AND d", "a :1 AND b :2 AND c :3",
    "(a cat AND a dog:1.3)", "[a cat AND a dog:5]", "[cat:dog:5] AND [bird|fish]", "a (cat) AND [dog]",
    "a <lora:x:1> AND b", "<lora:a AND b:1> c AND d", "[a:b:1e400] AND c", "a cat BREAK AND a dog", "a cat AND BREAK a dog",
    "a cat AND a dog:" + "9" * 400, "a cat AND a dog:-" + "9" * 400, "a cat AND a dog:0." + "0" * 400 + "1",
    "a cat AND a dog:\u0661.\u0665", "a cat AND a dog:\u0661\u0665", "\u00e9AND b", "a AND\u00e9", "a\u3000AND\u3000b",
    "a AND b:\u30001.5\u3000", "a \\AND b", "a AND\\ b", "", " ", "  AND  ", ":1", " :1", "a:-0", "a:-0.0",
    "a AND b:0", "a AND b AND a", "a AND a", "a cat   AND   a dog   :   0.5   ",
    "\u00e9\u00e9 AND \u00fc:0.5", "x\u2003AND\u2003y:2", "1AND 2", "AND1", "a AND b\t:\t0.25\t",
    "a\u0085AND\u0085b", "a AND b:0.5\x1c", "\u0130AND", "a AND b:1_0", "a AND b:1 0",
]

ALPHABET = ["A", "N", "D", "AND", " AND ", "a", "b", ":", "0", "1", ".", "-", "+", " ", "\n", "(", ")", "[", "]",
            "\u00e9", "_", "\u0665", "\u3000"]


def load_prompt_parser(checkout):
    sys.modules.setdefault("torch", types.ModuleType("torch"))
    path = os.path.join(checkout, "modules", "prompt_parser.py")
    spec = importlib.util.spec_from_file_location("modules.prompt_parser", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def number(x):
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def random_prompts(seed, count, max_len):
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, max_len))) for _ in range(count)]


# modules/extra_networks.py's pattern; parse_prompt replaces every match with "" before the counter reads the text.
RE_EXTRA_NET = re.compile(r"<(\w+):([^>]+)>")


def token_count(parser, chunker, text, steps=20, positive=True):
    """The webui's counter (update_token_counter): the text without extra-network tags, its AND parts (the
    prompt only), their schedules, the most tokens tokenize_line counts for any scheduled text (make_fixtures.py's
    chunks_like_a1111, checked against it); the whole text where the schedule raises."""
    text = RE_EXTRA_NET.sub("", text)
    try:
        flat = parser.get_multicond_prompt_list([text])[1] if positive else [text]
        schedules = parser.get_learned_conditioning_prompt_schedules(flat, steps)
    except Exception:  # noqa: BLE001
        schedules = [[[steps, text]]]
    return max(chunker(parser.parse_prompt_attention(prompt))[1] for schedule in schedules for _, prompt in schedule)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a1111", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--make-fixtures", required=True, help="make_fixtures.py, unpacked from scripts.tar.xz")
    args = ap.parse_args()
    import transformers
    parser = load_prompt_parser(args.a1111)
    tokenizer = transformers.CLIPTokenizer.from_pretrained(args.tokenizer)
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.make_fixtures)))
    from make_fixtures import chunks_like_a1111
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]
    chunker = lambda parsed: chunks_like_a1111(parsed, encode, tokenizer.bos_token_id, tokenizer.eos_token_id,
                                               tokenizer.get_vocab()[",</w>"])
    cases = []
    for prompt in HAND_WRITTEN + random_prompts(4, 120, 12):
        res_indexes, flat, _ = parser.get_multicond_prompt_list([prompt])
        case = {"prompt": prompt, "parts": [[flat[i], number(w)] for i, w in res_indexes[0]]}
        if prompt in HAND_WRITTEN and "9" * 400 not in prompt:
            try:
                case["token_count"] = token_count(parser, chunker, prompt)
                case["negative_token_count"] = token_count(parser, chunker, prompt, positive=False)
            except Exception as e:  # noqa: BLE001  (a schedule the webui rejects; its UI then counts the text)
                case["token_count_error"] = type(e).__name__
        cases.append(case)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("[\n" + ",\n".join(json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cases) + "\n]\n")
    print(f"{args.out}: {len(cases)} prompts")


if __name__ == "__main__":
    main()
