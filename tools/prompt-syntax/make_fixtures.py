#!/usr/bin/env python3
"""Writes tests/data/prompt-syntax/a1111_prompt_syntax.json: what AUTOMATIC1111's prompt parser returns
for many prompts, and how its CLIP wrapper cuts their tokens into 75-token chunks.

The oracle is AUTOMATIC1111's own modules/prompt_parser.py, loaded from a checkout given on the command
line (kiln does not carry its code). Run it in a virtual environment outside the repository:

    python3 -m venv /work/a1111-venv
    /work/a1111-venv/bin/pip install lark==1.1.2 transformers==5.17.0
    /work/a1111-venv/bin/python tools/prompt-syntax/make_fixtures.py \
        --a1111 /path/to/stable-diffusion-webui --commit <its commit> \
        --tokenizer /path/to/sd15-mini/diffusers/tokenizer \
        --out tests/data/prompt-syntax/a1111_prompt_syntax.json

lark 1.1.2 is the version AUTOMATIC1111 pins (requirements_versions.txt). The repository stores the file
packed (a1111_prompt_syntax.tar.xz; tests/data/prompt-syntax/README.md has the command), not the JSON itself.

Four parts:
- floats: Python's float() of number texts of the shapes the syntax lets through (for kiln's
  python::parse_float), or "ValueError".
- attention: parse_prompt_attention(prompt), or the name of the exception it raises.
- schedules: get_learned_conditioning_prompt_schedules([prompt], steps)[0] with AUTOMATIC1111's defaults
  (no hires pass, use_old_scheduling=False). Its lark grammar is ambiguous, and for some prompts the tree
  lark picks depends on Python's string hashing (PYTHONHASHSEED). Every prompt is therefore parsed in
  several processes with different hash seeds, and the fixture keeps every distinct outcome, in the order
  first seen. A prompt with one outcome was parsed the same way under every seed tried.
- chunks: the 77-token chunks of modules/sd_hijack_clip.py's tokenize_line (75 prompt tokens between a
  start and an end token, BREAK closing a chunk, a chunk that would overflow moved back to just after the
  last comma when that comma is within 20 tokens of the chunk's end: the default "comma_padding_backtrack"),
  computed by chunks_like_a1111() below with transformers' CLIPTokenizer. Without textual-inversion
  embeddings. pad "zero" is what the webui feeds OpenCLIP encoders (SD 2.x, SDXL's second): every token
  after the first end token becomes 0. When the checkout also holds modules/sd_hijack_clip.py, its own
  tokenize_line is run too (torch and the webui modules stubbed out) and must agree. Each chunk's ids and
  weights are written with runs of four or more equal values as [value, count].

Floats are written as JSON numbers (Python's shortest repr, which round-trips), except the non-finite ones,
written as the strings "inf", "-inf" and "nan".
"""
import argparse
import importlib.util
import json
import math
import os
import random
import subprocess
import sys
import types

HASH_SEEDS = 16        # processes per prompt for the schedules
EXTRA_HASH_SEEDS = 48  # more processes for the prompts that came out differently under the first ones


def load_prompt_parser(checkout):
    # The module imports torch at the end (only for functions not used here); a stand-in keeps torch out.
    sys.modules.setdefault("torch", types.ModuleType("torch"))
    path = os.path.join(checkout, "modules", "prompt_parser.py")
    spec = importlib.util.spec_from_file_location("modules.prompt_parser", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def number(x):
    """A float (or int) as JSON can hold it."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


# ---- the prompts -------------------------------------------------------------------------------------

ATTENTION_PROMPTS = [
    "", " ", "normal text", "an (important) word", "(unbalanced", "\\(literal\\]", "(unnecessary)(parens)",
    "a (((house:1.3)) [on] a (hill:0.5), sun, (((sky))).",
    "(a)", "((a))", "(((a)))", "[a]", "[[a]]", "([a])", "[(a)]", "(a:1.3)", "(a:0.5)", "((a:1.3))", "[(a:1.3)]",
    "(a:1)", "(a:0)", "(a:-1)", "(a:+2)", "(a:-0)", "(a:1.)", "(a:.5)", "(a: 1.5 )", "(a:\t2\n)", "(a :1.2)",
    "(a:1e3)", "(a:)", "(a:1.2.3)", "(a:.)", "(a:..5)", "(a:1:2)", "(a:b)", "(a:1.5]", "[a:1.5)", "a:1.5)",
    "(a:99999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999"
    "9999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999"
    "9999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999)",
    "((a:999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999"
    "9999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999"
    "99999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999):0)",
    "(a:0.000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000001)",
    "(a:\u0661.\u0665)", "(a:\uff12)", "(a:\u00b2)", "(a:1\u00a0)", "(a:\u20031.5\u3000)",
    ")", "]", "(", "[", "((", "))", "(]", "[)", ")a(", "]a[", "a)b(c", "(a]b)", "[a)b]", "((a)", "(a))", "[[a]",
    "[a]]", "(a [b) c]", "[a (b] c)", "\\", "a\\", "\\\\", "\\\\(a)", "\\((a)\\)", "\\a", "\\ ", "a\\:b",
    "\\(a:1.5\\)", "(a\\:1.5)", "(a:1.5\\)", ":", "::", "a:b", "a: 1.5)", "(:1.5)", "()", "[]", "(())", "[[]]",
    "BREAK", "a BREAK b", "aBREAKb", "a BREAKb", "a_BREAK b", "a BREAK_ b", "BREAK BREAK", "a BREAK BREAK b",
    "a\nBREAK\nb", " BREAK ", "break", "Break", "BREAKING news", "a,BREAK,b", "1BREAK", "BREAK1", "(BREAK)",
    "[BREAK]", "(a BREAK b)", "(a BREAK b:0)", "(a BREAK b:-1)", "(a:-1)BREAK b", "\\(BREAK\\)", "a (BREAK:2) b",
    "\u00e9BREAK b", "a BREAK\u00e9", "\u0661BREAK", "a\u00a0BREAK\u00a0b", "a\u3000BREAK\u2003b",
    "caf\u00e9 (cr\u00e8me:1.2)", "\u732b (\u72ac:1.5) [\u9ce5]", "emoji \U0001F600 (\U0001F431:1.3)",
    "(a:1.1)(b:1.1)", "(a:1.1) (b:1.1)", "[a][b]", "[a] [b]", "(a)(b:1.1)", "a (b) c (d) e",
    "(a (b (c (d (e)))))", "[a [b [c [d [e]]]]]", "((((((((((a))))))))))", "[[[[[[[[[[a]]]]]]]]]]",
    "(a:1.5) and [b] and (c:0.8)", "masterpiece, best quality, (red hair:1.2), [blurry], ((smile))",
    "[a:b:0.5]", "[a|b]", "(a|b)", "a|b", "[a:b:c]", "(a:1.2) BREAK (b:0.8)", "\t(a)\n",
    "(" * 300 + "a", "[" * 300 + "a", "(" * 100 + "a" + ")" * 100, "(a:2)" * 50,
]

SCHEDULE_PROMPTS = [
    # the docstring's examples
    ("test", 10), ("a [b:3]", 10), ("a [b: 3]", 10), ("a [[[b]]:2]", 10), ("[(a:2):3]", 10), ("a [b : c : 1] d", 10),
    ("a[b:[c:d:2]:1]e", 10), ("a [unbalanced", 10), ("a [b:.5] c", 10), ("a [{b|d{:.5] c", 10),
    ("((a][:b:c [d:3]", 10), ("[a|(b:1.1)]", 10), ("[fe|]male", 10), ("[fe|||]male", 10),
    ("fantasy landscape with a [mountain:lake:0.25] and [an oak:a christmas tree:0.75][ in foreground::0.6]"
     "[ in background:0.25] [shoddy:masterful:0.5]", 100),
    # prompt editing: fractions, step numbers, the edges
    ("[a:b:0]", 10), ("[a:b:1]", 10), ("[a:b:9]", 10), ("[a:b:10]", 10), ("[a:b:11]", 10), ("[a:b:1000]", 10),
    ("[a:b:0.0]", 10), ("[a:b:0.1]", 10), ("[a:b:0.09]", 10), ("[a:b:0.99]", 10), ("[a:b:1.0]", 10),
    ("[a:b:1.5]", 10), ("[a:b:2.0]", 10), ("[a:b:-1]", 10), ("[a:b:-0.5]", 10), ("[a:b:+3]", 10),
    ("[a:b:3.]", 10), ("[a:b:.3]", 10), ("[a:b:1e1]", 10), ("[a:b:1e-1]", 10), ("[a:b:5e-1]", 10),
    ("[a:b:0.5e1]", 10), ("[a:b:1E0]", 10), ("[a:b:2.5e-1]", 10), ("[a:b:1e400]", 10), ("[a:b:-1e400]", 10),
    ("[a:b:1.5e308]", 10), ("[a:b:1e308]", 10), ("[a:b:-1e308]", 10), ("[a:b:1e-400]", 10),
    ("[a:b:99999999999999999999999]", 10), ("[a:b:0.3333]", 3), ("[a:b:0.5]", 1), ("[a:b:1]", 1),
    ("[a:b:0.29]", 7), ("[a:b:0.57]", 7), ("[a:b:0.14]", 7),
    ("[a:b: 3]", 10), ("[a:b:3 ]", 10), ("[a:b: 3 ]", 10), ("[a:b:\t3\n]", 10), ("[a:b:\u30003]", 10),
    ("[a:b:3 4]", 10), ("[a:b:3a]", 10), ("[a:b:a3]", 10), ("[a:b:]", 10), ("[a:b:1.2.3]", 10), ("[a:b:1e]", 10),
    ("[a:b:.]", 10), ("[a:b:-]", 10), ("[a:b:+-1]", 10), ("[a:b:1_0]", 10), ("[a:b:\uff13]", 10),
    ("[b:3]", 10), ("[:3]", 10), ("[::3]", 10), ("[a::3]", 10), ("[:b:3]", 10), ("[ : 3]", 10), ("[a:b:c:3]", 10),
    ("[a:b:3:4]", 10), ("[a:b]", 10), ("[a:3", 10), ("a:3]", 10), ("[a:(b):3]", 10), ("[(a):[b]:3]", 10),
    ("[[a:b:3]:c:5]", 10), ("[a:[b:c:5]:3]", 10), ("[[a:b:5]:[c:d:7]:3]", 10), ("[a:b:0.5] [c:d:0.5]", 4),
    ("([a:b:3])", 10), ("(a:[b:c:3])", 10), ("([a:b:3]:1.2)", 10), ("[([a:b:3]):4]", 10), ("[a\\:b:c:3]", 10),
    ("\\[a:b:3\\]", 10), ("[a:b\\]:3]", 10), ("[a:b:3]\\", 10), ("\\[a:b:3]", 10), ("[a:b:3] BREAK [c:4]", 10),
    # alternation
    ("[a|b]", 10), ("[a|b|c]", 10), ("[a|b]", 1), ("[a|b]", 3), ("[|]", 4), ("[|a]", 4), ("[a|]", 4),
    ("[||]", 4), ("[a||b]", 6), ("[[a|b]|c]", 8), ("[a|[b|c]]", 8), ("[a|b][c|d|e]", 6), ("[a|b:3]", 10),
    ("[a:b|c:3]", 10), ("[a|b:c|d]", 10), ("([a|b])", 4), ("(a|b)", 4), ("a|b", 4), ("[a|b", 4), ("a|b]", 4),
    ("[a|(b:1.5)|[c]]", 6), ("[[a:b:2]|c]", 6), ("[a|b] [c:d:3]", 6), ("[a | b]", 4), ("[(a|b)]", 4),
    # unbalanced and stray brackets around valid groups
    ("[a:b:1]]", 10), ("[a:1]]", 10), ("[a:1]]]", 10), ("[a:1](", 10), ("[a:1]((", 10), ("[a:1]:", 10),
    ("[a:1])", 10), ("][a:1]", 10), ("(][a:1]", 10), ("[[a:b:1]", 10), ("[[[a:1]", 10), (":[a:1]", 10),
    ("[a]:[b:1]", 10), ("[a:1] ]", 10), ("[a:1]a]", 10), ("[a|b]]", 4), ("[a|b](", 4), ("((a)", 10), ("(a))", 10),
    ("[a]]", 10), ("(a)]", 10), (")", 10), ("]", 10), ("[", 10), (":", 10), ("|", 10), ("\\", 10), ("a\\", 10),
    ("a\\\nb", 10), ("a\\nb", 10), ("", 10), (" ", 10), ("a  b", 10), ("a\n\nb", 10),
    # unicode
    ("caf\u00e9 [cr\u00e8me:lait:3]", 10), ("\u732b[\u72ac:\u9ce5:0.5]", 10), ("[\U0001F600|\U0001F431]", 4),
    ("a\u00a0[b:c:2]\u2003d", 10), ("[a:b:\u0663]", 10),
]

# Number texts as the weight pattern ([+-]?[.\d]+) and lark's SIGNED_NUMBER let them through, around the
# edges of the doubles: the largest, the smallest subnormal, halfway cases, long mantissas.
FLOAT_TEXTS = [
    "0", "-0", "+0", "1", "1.", ".5", "+.5", "-.5", "0.1", "1.1", "1.3", "00012.50", "1e3", "1E3", "1e+3", "1e-3",
    "1.5e2", ".5e1", "5.e-1", "1e308", "1.7976931348623157e308", "1.7976931348623158e308",
    "1.7976931348623159e308", "2e308", "1e309", "-1e309", "1e400", "1e99999999999999999999", "4.9e-324",
    "2.4703282292062327e-324", "2.4703282292062328e-324", "2.5e-324", "2.4e-324", "1e-320", "1e-400",
    "-1e-400", "1e-99999999999999999999", "9" * 400, "-" + "9" * 400, "0." + "0" * 400 + "1",
    "1" + "0" * 308 + ".5", "0" * 50 + "1.5", "0.1000000000000000055511151231257827",
    "0.10000000000000000555111512312578271", "9007199254740993", "123456789012345678901234567890",
    ".", "..", "1.2.3", "+", "-", "", "+-1", "e5", "1e", "1e+", "1.5e", ".e1",
]

CHUNK_WORDS = ["cat", "dog", "red", "blue", "tree", "house", "sky", "sun", "moon", "star", "river", "stone"]


def chunk_prompts():
    """Prompts around the 75-token boundary, with commas at every interesting distance from it."""
    words = lambda n, start=0: " ".join(CHUNK_WORDS[(start + i) % len(CHUNK_WORDS)] for i in range(n))
    out = [
        "", "a", "a cat", "BREAK", "BREAK BREAK", "a BREAK b", "a BREAK", "BREAK a", "a, b, c",
        "(a cat:1.3) [on] a (hill:0.5), sun, (((sky)))", "(a BREAK b)", "[a BREAK b]", "(a BREAK b:0)",
        words(74), words(75), words(76), words(151),
        words(75) + " BREAK " + words(3), words(74) + " BREAK", words(75) + " BREAK", words(76) + " BREAK",
        words(75) + " BREAK BREAK x", ", " * 40, ",",
        "(" + words(80) + ":1.2)", "[" + words(40) + "] (" + words(40) + ")",
    ]
    # A comma followed by k more words, so that the chunk fills up k tokens after the comma.
    for k in (0, 1, 19, 20, 21, 40, 74):
        before = 75 - 1 - k
        out.append(words(before) + ", " + words(k + 5, 3))
    # Commas right at the boundary: as token 75, as token 76, and two commas near the end.
    out.append(words(74) + ", " + words(5))
    out.append(words(75) + ", " + words(5))
    out.append(words(60) + ", " + words(10) + ", " + words(10))
    out.append(words(60) + ", " + words(14) + ", " + words(10))
    # A relocation whose moved tail then meets a BREAK, and a second chunk with its own comma.
    out.append(words(65) + ", " + words(12) + " BREAK " + words(3))
    out.append(words(140) + ", " + words(20) + ", " + words(30))
    out.append(words(70) + ", (" + words(10) + ":1.5) tail")
    return out


def random_prompts(seed, count, max_len):
    """Strings drawn from the syntax's characters (and a few words, numbers and BREAKs) with a fixed seed."""
    rng = random.Random(seed)
    pieces = list("[]():|\\ ,.") + ["a", "b", "cat", "1", "0.5", "2", "-1", "1e1", "BREAK", "\n", "\u00e9", "\u732b"]
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(0, max_len))) for _ in range(count)]


def structured_prompts(seed, count):
    """Random nestings of every construct, then a few random characters inserted or removed."""
    rng = random.Random(seed)
    texts = ["a", "b", "red cat", " ", "1", "BREAK", "\\(", "\\]", ",", "x y"]
    nums = ["1", "2", "3", "0.5", ".25", "1.", "0", "-1", "15", "1e1", "5e-1", " 2 ", "+3", "1.5"]

    def node(depth):
        if depth > 2 or rng.random() < 0.4:
            return rng.choice(texts)
        sub = lambda: "".join(node(depth + 1) for _ in range(rng.randint(0, 2)))
        kind = rng.randrange(7)
        if kind == 0:
            return "(" + sub() + ")"
        if kind == 1:
            return "(" + sub() + ":" + rng.choice(nums) + ")"
        if kind == 2:
            return "[" + sub() + "]"
        if kind == 3:
            return "[" + sub() + ":" + rng.choice(nums) + "]"
        if kind == 4:
            return "[" + sub() + ":" + sub() + ":" + rng.choice(nums) + "]"
        if kind == 5:
            return "[" + "|".join(sub() for _ in range(rng.randint(2, 3))) + "]"
        return "[" + sub() + "::" + rng.choice(nums) + "]"

    out = []
    for _ in range(count):
        s = "".join(node(0) for _ in range(rng.randint(1, 3)))
        for _ in range(rng.choice([0, 0, 1, 2])):
            i = rng.randint(0, len(s))
            if rng.random() < 0.5 and s:
                s = s[:i] + s[i + 1:]
            else:
                s = s[:i] + rng.choice("[]():|") + s[i:]
        out.append(s)
    return out


def all_schedule_cases():
    cases = list(SCHEDULE_PROMPTS)
    steps = [1, 4, 10, 20]
    cases += [(p, steps[i % 4]) for i, p in enumerate(random_prompts(2, 100, 12))]
    cases += [(p, steps[i % 4]) for i, p in enumerate(structured_prompts(3, 110))]
    return cases


def all_attention_prompts():
    prompts = list(ATTENTION_PROMPTS)
    prompts += [p for p, _ in SCHEDULE_PROMPTS if p not in prompts]
    prompts += random_prompts(1, 130, 16)
    return prompts


# ---- the schedules, in one process per hash seed -------------------------------------------------------

def schedules_worker(checkout):
    """Reads [prompt, steps] pairs on stdin, writes each schedule (or the exception's name) on stdout."""
    parser = load_prompt_parser(checkout)
    results = []
    for prompt, steps in json.load(sys.stdin):
        try:
            results.append(parser.get_learned_conditioning_prompt_schedules([prompt], steps)[0])
        except Exception as e:  # noqa: BLE001 - the oracle's exceptions are part of what it does
            results.append(type(e).__name__)
    json.dump(results, sys.stdout)


def schedules_under_seed(checkout, cases, seed):
    env = dict(os.environ, PYTHONHASHSEED=str(seed))
    out = subprocess.run([sys.executable, __file__, "--worker", "--a1111", checkout], input=json.dumps(cases),
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout)


def collect_schedules(checkout, cases):
    outcomes = [[] for _ in cases]

    def add(index, result):
        if result not in outcomes[index]:
            outcomes[index].append(result)

    for seed in range(HASH_SEEDS):
        for i, result in enumerate(schedules_under_seed(checkout, cases, seed)):
            add(i, result)
    varied = [i for i, o in enumerate(outcomes) if len(o) > 1]
    for seed in range(HASH_SEEDS, HASH_SEEDS + EXTRA_HASH_SEEDS):
        for i, result in zip(varied, schedules_under_seed(checkout, [cases[i] for i in varied], seed)):
            add(i, result)
    fixture = []
    for (prompt, steps), found in zip(cases, outcomes):
        errors = [o for o in found if isinstance(o, str)]
        if errors:
            assert len(found) == 1, (prompt, found)
            fixture.append({"prompt": prompt, "steps": steps, "error": errors[0]})
        else:
            fixture.append({"prompt": prompt, "steps": steps, "outcomes": found})
    return fixture


# ---- chunks -------------------------------------------------------------------------------------------

def chunks_like_a1111(parsed, encode, bos, eos, comma, chunk_length=75, backtrack=20):
    """What tokenize_line in AUTOMATIC1111's modules/sd_hijack_clip.py makes of parse_prompt_attention's
    output: a list of (ids, weights, prompt tokens in the chunk) and the token count its UI shows.

    Tokens are collected chunk by chunk. A BREAK (text "BREAK", weight -1) closes the chunk. When a chunk
    is full and the next token is not a comma, the tokens after the chunk's last comma move to the next
    chunk, provided that comma is within `backtrack` tokens of the end (a comma that opened the chunk is
    not remembered). A closed chunk is padded with end tokens to `chunk_length` and framed by a start and
    an end token. The count adds `chunk_length` for every chunk but the last, which adds its own tokens."""
    chunks, ids, weights = [], [], []
    state = {"last_comma": -1, "count": 0}

    def close(last):
        state["count"] += len(ids) if last else chunk_length
        filler = chunk_length - len(ids)
        chunks.append(([bos] + ids + [eos] * filler + [eos], [1.0] + weights + [1.0] * filler + [1.0], len(ids)))
        ids.clear()
        weights.clear()
        state["last_comma"] = -1

    for text, weight in parsed:
        if text == "BREAK" and weight == -1:
            close(False)
            continue
        for token in encode(text):
            last_comma = state["last_comma"]
            if token == comma:
                state["last_comma"] = len(ids)
            elif len(ids) == chunk_length and last_comma != -1 and chunk_length - last_comma <= backtrack:
                moved_ids, moved_weights = ids[last_comma + 1:], weights[last_comma + 1:]
                del ids[last_comma + 1:], weights[last_comma + 1:]
                close(False)
                ids.extend(moved_ids)
                weights.extend(moved_weights)
            if len(ids) == chunk_length:
                close(False)
            ids.append(token)
            weights.append(weight)
    if ids or not chunks:
        close(True)
    return chunks, state["count"]


def runs(values):
    """Lossless and short: a run of four or more equal values becomes [value, count]."""
    out, i = [], 0
    while i < len(values):
        j = i
        while j < len(values) and json.dumps(values[j]) == json.dumps(values[i]):  # keeps -0.0 apart from 0.0
            j += 1
        out += [[values[i], j - i]] if j - i >= 4 else values[i:j]
        i = j
    return out


def with_zero_padding(ids, eos):
    """The webui's OpenCLIP encoders get 0 (the "!" token) after the chunk's first end token."""
    first = ids.index(eos)
    return ids[:first + 1] + [0] * (len(ids) - first - 1)


def a1111_clip_wrapper(checkout, parser, encode, bos, eos, comma):
    """AUTOMATIC1111's own CLIP wrapper (for tokenize_line and get_target_prompt_token_count), when the
    checkout has it: torch and the webui modules it imports are replaced by stand-ins that offer only what
    those two touch."""
    path = os.path.join(checkout, "modules", "sd_hijack_clip.py")
    if not os.path.exists(path):
        return None
    torch = sys.modules["torch"]
    torch.nn = types.SimpleNamespace(Module=object)
    opts = types.SimpleNamespace(emphasis="Original", comma_padding_backtrack=20)
    package = types.ModuleType("modules")
    package.__path__ = []
    package.prompt_parser = parser
    for name in ("devices", "sd_hijack", "sd_emphasis"):
        setattr(package, name, types.ModuleType("modules." + name))
    shared = types.ModuleType("modules.shared")
    shared.opts = opts
    sys.modules.update({"modules": package, "modules.prompt_parser": parser, "modules.shared": shared})
    spec = importlib.util.spec_from_file_location("modules.sd_hijack_clip", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    wrapper = module.FrozenCLIPEmbedderWithCustomWordsBase.__new__(module.FrozenCLIPEmbedderWithCustomWordsBase)
    wrapper.chunk_length = 75
    wrapper.id_start, wrapper.id_end, wrapper.comma_token = bos, eos, comma
    no_embeddings = types.SimpleNamespace(find_embedding_at_position=lambda tokens, position: (None, None))
    wrapper.hijack = types.SimpleNamespace(embedding_db=no_embeddings)
    wrapper.tokenize = lambda texts: [encode(t) for t in texts]
    return wrapper


def collect_chunks(checkout, parser, tokenizer_dir):
    from transformers import CLIPTokenizer

    tokenizer = CLIPTokenizer.from_pretrained(tokenizer_dir)
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    comma = tokenizer.get_vocab()[",</w>"]
    webui = a1111_clip_wrapper(checkout, parser, encode, bos, eos, comma)

    fixture = []
    for i, prompt in enumerate(chunk_prompts()):
        chunks, count = chunks_like_a1111(parser.parse_prompt_attention(prompt), encode, bos, eos, comma)
        # The count under the webui's prompt box reads "token_count/target".
        target = math.ceil(max(count, 1) / 75) * 75
        if webui is not None:
            theirs, their_count = webui.tokenize_line(prompt)
            assert target == webui.get_target_prompt_token_count(count)
            assert count == their_count and [(c.tokens, c.multipliers) for c in theirs] == \
                [(ids, weights) for ids, weights, _ in chunks], f"chunks_like_a1111 disagrees with the webui on {prompt!r}"
        # The zero-padded variant (OpenCLIP) for every third prompt: it only changes the padding.
        for pad in ["eos", "zero"] if i % 3 == 0 else ["eos"]:
            fixture.append({
                "prompt": prompt, "pad": pad, "token_count": count, "target": target,
                "chunks": [{"ids": runs(with_zero_padding(ids, eos) if pad == "zero" else ids),
                            "weights": runs([number(w) for w in weights]), "tokens": n} for ids, weights, n in chunks],
            })
    return fixture, webui is not None


# ---- main ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a1111", required=True, help="a checkout of AUTOMATIC1111/stable-diffusion-webui")
    ap.add_argument("--commit", help="the checkout's commit, recorded in the fixture")
    ap.add_argument("--tokenizer", help="a CLIP tokenizer folder (vocab.json, merges.txt)")
    ap.add_argument("--out", help="the fixture to write")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return schedules_worker(args.a1111)
    if not (args.commit and args.tokenizer and args.out):
        ap.error("--commit, --tokenizer and --out are needed")

    import lark
    import transformers

    parser = load_prompt_parser(args.a1111)
    attention = []
    for prompt in all_attention_prompts():
        try:
            parsed = parser.parse_prompt_attention(prompt)
            attention.append({"prompt": prompt, "parsed": [[text, number(w)] for text, w in parsed]})
        except Exception as e:  # noqa: BLE001
            attention.append({"prompt": prompt, "error": type(e).__name__})
    floats = []
    for text in FLOAT_TEXTS:
        try:
            floats.append({"text": text, "value": number(float(text))})
        except ValueError:
            floats.append({"text": text, "error": "ValueError"})
    schedules = collect_schedules(args.a1111, all_schedule_cases())
    chunks, checked = collect_chunks(args.a1111, parser, args.tokenizer)

    fixture = {
        "source": {"a1111_commit": args.commit, "lark": lark.__version__, "transformers": transformers.__version__,
                   "hash_seeds": [HASH_SEEDS, EXTRA_HASH_SEEDS], "chunks_checked_against_webui": checked},
        "floats": floats, "attention": attention, "schedules": schedules, "chunks": chunks,
    }
    # One case a line: small diffs when the cases change.
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("{\n")
        f.write('"source": ' + json.dumps(fixture["source"]) + ",\n")
        for key in ("floats", "attention", "schedules", "chunks"):
            f.write(f'"{key}": [\n')
            f.write(",\n".join(json.dumps(case, ensure_ascii=False, separators=(",", ":")) for case in fixture[key]))
            f.write("\n]" + (",\n" if key != "chunks" else "\n"))
        f.write("}\n")
    varied = sum(1 for s in schedules if len(s.get("outcomes", [])) > 1)
    print(f"{args.out}: {len(floats)} floats, {len(attention)} attention, {len(schedules)} schedule ({varied} hash-dependent), "
          f"{len(chunks)} chunk cases; chunks checked against the webui's tokenize_line: {checked}")


if __name__ == "__main__":
    main()
