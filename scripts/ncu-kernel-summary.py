#!/usr/bin/env python3
"""Summarises an ncu CSV of kiln's kernels: per kernel name, then the 40 slowest launches.

Made on the GPU machine with (graphs off, so that each kernel is its own launch):
  KILN_CUDA_GRAPHS=0 ncu --metrics gpu__time_duration.sum --csv --page raw --clock-control none \\
      --cache-control none scripts/run-on-device.sh kiln bench ... --warmup 1 --repeats 1 > raw.csv
  grep '^"' raw.csv > kernels.csv; python3 scripts/ncu-kernel-summary.py kernels.csv [marker]
Only the kernels from the last launch whose name contains `marker` (default: timestep, the UNet call's first
kernel) on are counted: the last call, not the first one's route and algorithm timings. ncu runs each kernel
alone, so small kernels cost more than inside a graph (docs/DEVELOPING.md).
"""
import collections
import csv
import re
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    marker = sys.argv[2] if len(sys.argv) > 2 else "timestep"
    rows = [r for r in csv.DictReader(open(sys.argv[1])) if r.get("Kernel Name")]
    starts = [i for i, r in enumerate(rows) if marker in r["Kernel Name"].lower()]
    if not starts:
        sys.exit(f"no kernel named like {marker!r} in {sys.argv[1]}")
    last = rows[starts[-1]:]

    def us(r):  # ncu reports nanoseconds
        try:
            return float(r["gpu__time_duration.sum"].replace(",", "")) / 1000.0
        except ValueError:
            return 0.0

    def name(r):
        n = re.sub(r"^void ", "", r["Kernel Name"])
        n = n.replace("kiln::<unnamed>::", "").replace("kiln::cuda::", "").replace("kiln::", "")
        m = re.match(r"[A-Za-z0-9_:]+", n)
        return m.group(0) if m else n[:60]

    kinds = collections.defaultdict(lambda: [0, 0.0])
    for r in last:
        kinds[name(r)][0] += 1
        kinds[name(r)][1] += us(r)
    print(f"{len(last)} kernels, {sum(us(r) for r in last):.1f} us")
    for k, (count, total) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        print(f"{total:9.1f} us {count:4d} x {total / count:6.1f}  {k}")
    print("--- the 40 slowest launches")
    for r in sorted(last, key=lambda r: -us(r))[:40]:
        print(f'{us(r):8.1f} us  {name(r)[:60]:60s} grid {r.get("Grid Size", "")} block {r.get("Block Size", "")}')


if __name__ == "__main__":
    main()
