#!/usr/bin/env python3
"""Sum reject_hist.csv over the rounds per variant and point, in coarse buckets.
Usage: hist.py DIR [DIR ...]"""
import csv, glob, os, sys
from collections import defaultdict
EDGES = [0, 1, 2, 3, 5, 6, 7, 10, 20, 30]
acc = defaultdict(lambda: [[0, 0] for _ in EDGES])
for d in sys.argv[1:]:
    for p in glob.glob(os.path.join(d, "**", "reject_hist.csv"), recursive=True):
        parts = p.split(os.sep)
        point = next(x for x in parts if x.startswith("clients-"))
        variant = parts[parts.index(point) - 1]
        for r in csv.DictReader(open(p)):
            lo = float(r["from_ms"])
            i = max(k for k, e in enumerate(EDGES) if lo >= e)
            acc[(variant, int(point.split("-")[1]))][i][0] += int(r["definitive"])
            acc[(variant, int(point.split("-")[1]))][i][1] += int(r["ambivalent"])
labels = [f"{a}-{b}" for a, b in zip(EDGES, EDGES[1:])] + [f"{EDGES[-1]}+"]
print("rejects per latency bucket (ms), definitive/ambivalent, summed over rounds")
print(f"{'variant':<20} {'clients':>7} " + " ".join(f"{l:>11}" for l in labels))
for (v, c), b in sorted(acc.items()):
    print(f"{v:<20} {c:>7} " + " ".join(f"{d:>5}/{a:<5}" for d, a in b))
