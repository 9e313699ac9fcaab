#!/usr/bin/env python3
"""Per-interval goodput and rejects around a fault, from each variant's timeline.csv.
Usage: crash_timeline.py <scenario out dir> [from_s] [to_s]"""
import csv, glob, os, sys

root = sys.argv[1]
lo = float(sys.argv[2]) if len(sys.argv) > 2 else 8.0
hi = float(sys.argv[3]) if len(sys.argv) > 3 else 16.0
for path in sorted(glob.glob(os.path.join(root, "*", "timeline.csv"))):
    name = os.path.basename(os.path.dirname(path))
    print(f"{name}: t_s ok/s rejects/s (definitive+ambivalent) reject_p50_ms ok_p50_ms")
    for r in csv.DictReader(open(path)):
        t = float(r["t_s"])
        if r["class"] != "all" or not (lo <= t < hi):
            continue
        print(f"  {t:5.1f} {float(r['throughput_ops_s']):7.0f} {float(r.get('reject_ops_s', 0)):7.0f}"
              f" {float(r.get('reject_p50_ms', 0)):7.2f} {float(r['p50_ms']):7.2f}")
