#!/usr/bin/env python3
"""Summarises a kernel timeline (scripts/experiments/kernel_timeline.cpp) of kiln's recorded calls.

  python3 scripts/kernel-timeline-summary.py timeline.csv [gaps]

Takes the last replay of the graph with the most nodes (the UNet call in `kiln bench --suite unet`), and prints
its span, the time the GPU ran no kernel of it, and per kernel name the count and the time on the critical path
(memsets and copies that a library put in the graph are rows too: "memset BYTES", "memcpy kind K BYTES"). With
`gaps`, also the 40 longest idle stretches and the kernels either side: where a launch waits on the one before.
Unlike ncu's, these times are the graph's own: kernels overlap where programmatic dependent launch lets them.
"""
import collections
import csv
import re
import sys


def short(name):
    """The nested names of a mangled kernel name (kiln's namespaces left out); others as they are."""
    if not name.startswith("_Z"):
        return name[:70]
    parts, i = [], 3 if name[2:3] == "N" else 2
    while i < len(name) and name[i].isdigit():
        j = i
        while name[j].isdigit():
            j += 1
        parts.append(name[j:j + int(name[i:j])])
        i = j + int(name[i:j])
    kept = [p for p in parts if p not in ("kiln", "cuda") and not p.startswith("_GLOBAL__N")]
    return "::".join(kept)[:70] or name[:70]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = list(csv.DictReader(open(sys.argv[1])))
    for r in rows:
        r["start"], r["end"] = int(r["start"]), int(r["end"])
    nodes = collections.defaultdict(set)
    for r in rows:
        if r["graph"] != "0":
            nodes[r["graph"]].add(r["node"])
    if not nodes:
        sys.exit("no graph replays in the timeline")
    graph = max(nodes, key=lambda g: len(nodes[g]))
    mine = sorted((r for r in rows if r["graph"] == graph), key=lambda r: r["start"])
    last = mine[-len(nodes[graph]):]
    span = last[-1]["end"] - last[0]["start"]
    busy, reach, gaps = 0, last[0]["start"], []
    for prev, r in zip([None] + last[:-1], last):
        if r["start"] > reach:
            gaps.append((r["start"] - reach, prev, r))
            busy += r["end"] - r["start"]
        else:
            busy += max(0, r["end"] - reach)
        reach = max(reach, r["end"])
    print(f"graph {graph}: {len(last)} nodes, span {span / 1e3:.1f} us, busy {busy / 1e3:.1f} us, "
          f"idle {(span - busy) / 1e3:.1f} us in {len(gaps)} gaps")
    # A kernel's own time on the critical path: from the later of its start and the previous kernels' end to
    # its end. A programmatic dependent launch starts early and waits, so its start-to-end time overstates it.
    kinds = collections.defaultdict(lambda: [0, 0, 0])
    reach = last[0]["start"]
    for r in last:
        k = kinds[short(r["name"])]
        k[0] += 1
        k[1] += r["end"] - r["start"]
        k[2] += max(0, r["end"] - max(r["start"], reach))
        reach = max(reach, r["end"])
    print("  own time    count x mean   start-to-end  kernel (own time: on the critical path, idle excluded)")
    for k, (count, total, own) in sorted(kinds.items(), key=lambda kv: -kv[1][2]):
        print(f"{own / 1e3:9.1f} us {count:4d} x {own / count / 1e3:6.2f} {total / 1e3:9.1f} us   {k}")
    if len(sys.argv) > 2:
        print("--- the 40 longest idle stretches: before -> after")
        for gap, prev, r in sorted(gaps, key=lambda g: -g[0])[:40]:
            before = short(prev["name"]) if prev else "(start)"
            print(f"{gap / 1e3:7.2f} us  {before[:45]:45s} -> {short(r['name'])[:45]}")


if __name__ == "__main__":
    main()
