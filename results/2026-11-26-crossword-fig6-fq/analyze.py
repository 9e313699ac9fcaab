#!/usr/bin/env python3
"""Per value size: medians over rounds of each variant's mean throughput in the windows from
5 s on (the shaping starts at 0 s), the ratio to MultiPaxos, the leader changes of every run
(from the scenario log's `leader:` line), and per run the NIC waits (sample.sh `wait` lines:
cumulative synod_egress_* counters per replica; a counter reset starts the next variant, in
the scenario's protocol order). Usage: analyze.py DIR [TAG=fig6]"""
import csv, glob, os, re, statistics, sys
from collections import defaultdict

d = sys.argv[1]
tag = sys.argv[2] if len(sys.argv) > 2 else "fig6"
runs = {}
for w in sorted(glob.glob(f"{d}/{tag}-*-r*/*/windows.csv")):
    run, variant = w.split("/")[-3], w.split("/")[-2]
    size, rnd = re.match(rf"{tag}-(.+)-r(\d+)", run).groups()
    rows = [r for r in csv.DictReader(open(w)) if float(r["window_start_s"]) >= 5.0]
    if rows:
        runs.setdefault(size, {}).setdefault(variant, []).append(statistics.mean(float(r["throughput_ops_s"]) for r in rows))

changes = defaultdict(list)  # (size, protocol) -> leader changes per round
for log in sorted(glob.glob(f"{d}/log-{tag}-*-r*.txt")):
    size = re.match(rf"log-{tag}-(.+)-r\d+\.txt", os.path.basename(log)).group(1)
    proto = None
    for line in open(log):
        m = re.match(r"^(\S+): [\d,]+ ops/s over", line)
        if m:
            proto = m.group(1)
        m = re.match(r"^\s+leader: (.*)$", line)
        if m and proto:
            changes[(size, proto)].append(len(m.group(1).split(",")) - 1)
            proto = None

for size, variants in runs.items():
    base = [v for v in variants if v.startswith("multipaxos")]
    mp = statistics.median(variants[base[0]]) if base else None
    print(f"== {size}")
    for v, xs in variants.items():
        med = statistics.median(xs)
        ratio = f" {med / mp:.2f}x MultiPaxos" if mp else ""
        print(f"  {v:45s} median {med:7.0f} ops/s of {[round(x) for x in xs]}{ratio}")
    for (s, p), c in changes.items():
        if s == size:
            print(f"  leader changes {p:45s} {c}")

for f in sorted(glob.glob(f"{d}/sample-{tag}-*.txt")):
    segs = defaultdict(list)  # node -> list of final counter dicts, one per variant
    last = {}
    for line in open(f):
        p = line.split()
        if len(p) < 3 or p[1] != "wait":
            continue
        node = p[2]
        kv = {k: int(float(v)) for k, v in (x.split("=") for x in p[3:])}
        fr = kv.get("small_synod_egress_frames_total", 0) + kv.get("large_synod_egress_frames_total", 0)
        if fr == 0:
            continue
        prev = last.get(node)
        pf = 0 if prev is None else prev.get("small_synod_egress_frames_total", 0) + prev.get("large_synod_egress_frames_total", 0)
        if prev is not None and fr < pf:
            segs[node].append(prev)
        last[node] = kv
    for node, kv in last.items():
        segs[node].append(kv)
    print(f"{os.path.basename(f)}: per variant (in scenario order), over all replicas:")
    nvar = max((len(v) for v in segs.values()), default=0)
    for i in range(nvar):
        out = []
        for c in ("small", "large"):
            fr = sum(s[i].get(f"{c}_synod_egress_frames_total", 0) for s in segs.values() if len(s) > i)
            us = sum(s[i].get(f"{c}_synod_egress_wait_us_total", 0) for s in segs.values() if len(s) > i)
            late = sum(s[i].get(f"{c}_synod_egress_waits_over_100ms_total", 0) for s in segs.values() if len(s) > i)
            out.append(f"{c}: {fr} frames, mean NIC wait {us / fr / 1000 if fr else 0:.1f} ms, {late} waited >= 100 ms")
        print(f"  variant {i + 1}: " + "; ".join(out))
