#!/usr/bin/env python3
"""Fig. 7(a): per variant, the median of the 1 s windows from 2 s into each 8 s phase to its
end (phases: 8 KB, 4 KB, 2 KB, 512 B, 128 B, 8 B), and the ratio to MultiPaxos.
Usage: phases.py RUN_DIR"""
import csv, glob, statistics, sys

sizes = ["8 KB", "4 KB", "2 KB", "512 B", "128 B", "8 B"]
table = {}
for w in sorted(glob.glob(f"{sys.argv[1]}/*/windows.csv")):
    v = w.split("/")[-2]
    rows = list(csv.DictReader(open(w)))
    meds = []
    for k in range(len(sizes)):
        xs = [float(r["throughput_ops_s"]) for r in rows if 8 * k + 2 <= float(r["window_start_s"]) < 8 * k + 8]
        meds.append(statistics.median(xs) if xs else float("nan"))
    table[v] = meds
mp = next((m for v, m in table.items() if v.startswith("multipaxos")), None)
print("| variant | " + " | ".join(sizes) + " |")
print("|---" * (len(sizes) + 1) + "|")
for v, meds in table.items():
    cells = [f"{m:.0f}" + (f" ({m / b:.2f}x)" if mp and b else "") for m, b in zip(meds, mp or meds)]
    print(f"| {v} | " + " | ".join(cells) + " |")
