#!/usr/bin/env python3
"""Medians over the three runs of each figure (figN-roundR/<target>/medians.csv, one round
each) -> figN-medians.csv, and a table on stdout. Usage: python3 medians.py"""
import csv, glob, os, statistics
from collections import defaultdict

here = os.path.dirname(os.path.abspath(__file__))
for fig in ("fig8", "fig9"):
    rows = defaultdict(list)  # (target, point) -> [(tput, p50, p99, errors)]
    order = []
    for path in sorted(glob.glob(f"{here}/{fig}-round*/*/medians.csv")):
        for r in csv.DictReader(open(path)):
            key = (r["target"], r["point"])
            if key not in rows:
                order.append(key)
            rows[key].append((float(r["throughput_ops_s"]), float(r["p50_ms"]), float(r["p99_ms"]), int(r["errors"])))
    out = open(f"{here}/{fig}-medians.csv", "w")
    out.write("target,point,runs,throughput_ops_s_median,p50_ms_median,p99_ms_median,errors_total,throughput_ops_s_runs\n")
    print(f"== {fig}")
    for key in order:
        v = rows[key]
        med = lambda i: statistics.median(x[i] for x in v)
        runs = "/".join(f"{x[0]:.0f}" for x in v)
        out.write(f"{key[0]},{key[1]},{len(v)},{med(0):.0f},{med(1):.3f},{med(2):.3f},{sum(x[3] for x in v)},{runs}\n")
        print(f"{key[0]:22} {key[1]:12} n={len(v)} {med(0):8.0f} ops/s  p50 {med(1):8.3f}  p99 {med(2):8.3f}  errors {sum(x[3] for x in v)}  runs {runs}")
