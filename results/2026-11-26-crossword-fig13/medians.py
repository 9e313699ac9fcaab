#!/usr/bin/env python3
"""Median over rounds (r*/PROTOCOL/medians.csv) of throughput, p50 and p99 per sweep point.
Usage: python3 results/2026-11-26-crossword-fig13/medians.py [DIR]"""
import csv, glob, os, statistics, sys

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rows = {}
for f in sorted(glob.glob(os.path.join(d, "r*", "*", "medians.csv"))):
    for r in csv.DictReader(open(f)):
        rows.setdefault((r["target"], r["point"]), []).append(r)
protocols = ["multipaxos", "raft", "crossword", "rspaxos", "craft", "chain"]
points = sorted({p for _, p in rows}, key=lambda p: int(p.split("=")[1]))
print("| clients | " + " | ".join(protocols) + " |")
print("|---" * (len(protocols) + 1) + "|")
for p in points:
    cells = []
    for t in protocols:
        rs = rows.get((t, p), [])
        if not rs:
            cells.append("–")
            continue
        med = lambda k: statistics.median(float(r[k]) for r in rs)
        cells.append(f"{med('throughput_ops_s'):,.0f} ops/s, p50 {med('p50_ms'):.1f}, p99 {med('p99_ms'):,.0f} ms (n={len(rs)})")
    print(f"| {p.split('=')[1]} | " + " | ".join(cells) + " |")
