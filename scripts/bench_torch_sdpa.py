#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the shapes kiln_cuda_attention_bench times, timed the same way,
and a check of the bench's output against it.

Timing (as the kiln bench): fp16 CUDA tensors in kiln's layout ([B, L, H*D] viewed as [B, H, L, D], no copies),
uniform inputs in [-1, 1), warm-up runs, then a sleep kernel holds the GPU while every timed run is queued
between CUDA events, so the intervals are GPU time; the median interval is reported with 4*B*H*Lq*Lk*D / median
as TFLOP/s. Each SDPA backend is timed on its own where it accepts the shape, and the default dispatch too.

  python3 scripts/bench_torch_sdpa.py [--runs 30] [--warmup 10] [--kiln-csv FILE] [--check DIR]
  --kiln-csv  the bench's --csv output: print kiln's default configuration next to SDPA
  --check     the bench's --dump folder: compare kiln's output with SDPA (fp16) and with a float64 reference
"""
import argparse
import glob
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

# Kept equal to kShapes in bench/cuda/attention_bench.cu.
SHAPES = [
    ("sd15_self_l4096_d40", 2, 8, 4096, 4096, 40),
    ("sd15_cross_l4096x77_d40", 2, 8, 4096, 77, 40),
    ("sd15_self_l1024_d80", 2, 8, 1024, 1024, 80),
    ("sd15_self_l256_d160", 2, 8, 256, 256, 160),
    ("sdxl_self_l4096_h10_d64", 2, 10, 4096, 4096, 64),
    ("sdxl_self_l1024_h10_d64", 2, 10, 1024, 1024, 64),
    ("sdxl_self_l1024_h20_d64", 2, 20, 1024, 1024, 64),
]


def heads_view(x, B, L, H, D):
    """[B, L, H*D] -> [B, H, L, D] as a view: kiln's layout, given to SDPA without a copy."""
    return x.view(B, L, H, D).transpose(1, 2)


def time_gpu(fn, runs, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(runs + 1)]
    torch.cuda._sleep(40_000_000)  # ~20 ms: longer than queueing the runs takes
    events[0].record()
    for i in range(runs):
        fn()
        events[i + 1].record()
    events[-1].synchronize()
    ms = sorted(events[i].elapsed_time(events[i + 1]) for i in range(runs))
    median = ms[runs // 2] if runs % 2 else 0.5 * (ms[runs // 2 - 1] + ms[runs // 2])
    return median, ms[0]


def backends():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = [("default", None)]
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
        if hasattr(SDPBackend, name):
            out.append((name.lower(), getattr(SDPBackend, name)))
    return out, sdpa_kernel


def bench(args):
    torch.manual_seed(0)
    variants, sdpa_kernel = backends()
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}; median of {args.runs} runs after "
          f"{args.warmup} warm-up")
    print(f"{'shape':26s} {'backend':20s} {'median ms':>10s} {'min ms':>10s} {'TFLOP/s':>8s}")
    results = {}
    for name, B, H, Lq, Lk, D in SHAPES:
        q = heads_view(torch.rand(B, Lq, H * D, device="cuda", dtype=torch.float16) * 2 - 1, B, Lq, H, D)
        k = heads_view(torch.rand(B, Lk, H * D, device="cuda", dtype=torch.float16) * 2 - 1, B, Lk, H, D)
        v = heads_view(torch.rand(B, Lk, H * D, device="cuda", dtype=torch.float16) * 2 - 1, B, Lk, H, D)
        flops = 4.0 * B * H * Lq * Lk * D
        for label, backend in variants:
            def run():
                return F.scaled_dot_product_attention(q, k, v)

            try:
                if backend is None:
                    median, low = time_gpu(run, args.runs, args.warmup)
                else:
                    with sdpa_kernel([backend]):
                        median, low = time_gpu(run, args.runs, args.warmup)
            except RuntimeError as e:  # the backend does not take this shape
                print(f"{name:26s} {label:20s} {'n/a':>10s}   ({str(e).splitlines()[0][:60]})")
                continue
            tflops = flops / (median * 1e-3) / 1e12
            results[(name, label)] = (median, tflops)
            print(f"{name:26s} {label:20s} {median:10.4f} {low:10.4f} {tflops:8.1f}")
    return results


def compare_table(results, kiln_csv):
    kiln = {}
    with open(kiln_csv) as f:
        header = f.readline().strip().split(",")
        for line in f:
            row = dict(zip(header, line.strip().split(",")))
            if row["chosen"] == "1":  # what cuda_attention_f16 runs for the shape
                kiln[row["shape"]] = (float(row["median_ms"]), float(row["tflops"]))
    print()
    print(f"{'shape':26s} {'kiln ms':>9s} {'TFLOP/s':>8s} {'SDPA ms':>9s} {'TFLOP/s':>8s} {'best SDPA':>20s} "
          f"{'ms':>9s} {'kiln/best':>9s}")
    for name, *_ in SHAPES:
        if name not in kiln:
            continue
        km, kt = kiln[name]
        dm, dt = results.get((name, "default"), (math.nan, math.nan))
        timed = [(v[0], label) for (n, label), v in results.items() if n == name]
        bm, bl = min(timed) if timed else (math.nan, "-")
        print(f"{name:26s} {km:9.4f} {kt:8.1f} {dm:9.4f} {dt:8.1f} {bl:>20s} {bm:9.4f} {km / bm:9.2f}")


def check(folder):
    """kiln's fp16 output against SDPA's fp16 output and a float64 reference on the same fp16 inputs."""
    files = sorted(glob.glob(os.path.join(folder, "*.bin")))
    if not files:
        print(f"no .bin files in {folder}")
        return False
    print()
    print(f"{'shape':26s} {'kiln-sdpa':>10s} {'kiln-ref':>10s} {'sdpa-ref':>10s} {'kiln rms':>10s} {'sdpa rms':>10s}"
          "   (max abs diff / max|ref|; rms err / rms ref)")
    ok = True
    for path in files:
        with open(path, "rb") as f:
            if f.read(8) != b"KILNATT1":
                print(f"{path}: not a kiln attention dump")
                ok = False
                continue
            B, Lq, Lk, H, D, causal = struct.unpack("<6i", f.read(24))
            nq, nk = B * Lq * H * D, B * Lk * H * D
            arrays = [np.frombuffer(f.read(2 * n), dtype=np.float16) for n in (nq, nk, nk, nq)]
        q, k, v, out = (torch.from_numpy(a.copy()).cuda() for a in arrays)
        q, out = (heads_view(t, B, Lq, H, D) for t in (q, out))
        k, v = (heads_view(t, B, Lk, H, D) for t in (k, v))
        sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        ref = torch.empty(B, H, Lq, D, dtype=torch.float64, device="cuda")
        for b in range(B):  # float64, one batch at a time to bound the score matrix
            s = (q[b].double() @ k[b].double().transpose(-1, -2)) / math.sqrt(D)
            if causal:
                s.masked_fill_(torch.ones(Lq, Lk, device="cuda", dtype=torch.bool).triu(1), -math.inf)
            ref[b] = torch.softmax(s, dim=-1) @ v[b].double()
        kd, sd = out.double(), sdpa.double()
        scale = ref.abs().max().item()
        rms = ref.pow(2).mean().sqrt().item()
        nan = torch.isnan(kd).sum().item()
        a = (kd - sd).abs().max().item() / scale
        b_ = (kd - ref).abs().max().item() / scale
        c = (sd - ref).abs().max().item() / scale
        kr = (kd - ref).pow(2).mean().sqrt().item() / rms
        sr = (sd - ref).pow(2).mean().sqrt().item() / rms
        name = os.path.basename(path)[:-4]
        print(f"{name:26s} {a:10.2e} {b_:10.2e} {c:10.2e} {kr:10.2e} {sr:10.2e}" + (f"  {nan} NaN!" if nan else ""))
        # fp16 output rounding alone is 2^-11 relative; allow a few times that against SDPA.
        if nan or not a < 4.0 / 2048:
            ok = False
    print("check:", "PASS" if ok else "FAIL", "(kiln-sdpa < 4 * 2^-11 of max|ref| and no NaN)")
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--kiln-csv")
    p.add_argument("--check")
    args = p.parse_args()
    if args.runs < 20:
        p.error("--runs must be at least 20")
    if not torch.cuda.is_available():
        print("no CUDA device visible to torch", file=sys.stderr)
        return 2
    results = bench(args)
    if args.kiln_csv:
        compare_table(results, args.kiln_csv)
    if args.check and not check(args.check):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
