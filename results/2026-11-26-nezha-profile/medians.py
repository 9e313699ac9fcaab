import re, sys, statistics as st
cur = None; data = {}
for line in open(sys.argv[1]):
    m = re.match(r'(\S+) · YCSB-A · (\d+) clients · round (\d+)', line)
    if m: cur = (m.group(1), int(m.group(2))); continue
    m = re.match(r'\s+all\s+(\d+)\s+\d+\s+\d+\s+\d+\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)', line)
    if m and cur: data.setdefault(cur, {'tp': [], 'p50': [], 'p99': [], 'fast': []}); d = data[cur]; d['tp'].append(int(m.group(2))); d['p50'].append(float(m.group(3))); d['p99'].append(float(m.group(5))); continue
    m = re.search(r'fast-commit ratio ([\d.]+)%', line)
    if m and cur: data[cur]['fast'].append(float(m.group(1)))
order = ['nezha-proxy', 'nezha', 'multipaxos', 'fast-paxos', 'raft', 'nezha-proxy-before']
for c in sorted({k[1] for k in data}):
    print(f'clients {c}')
    for t in order:
        d = data.get((t, c))
        if not d: continue
        f = f", fast {st.median(d['fast']):.0f}% ({'/'.join(str(round(x)) for x in d['fast'])})" if d['fast'] else ''
        print(f"  {t:20s} ops/s median {st.median(d['tp']):>6.0f} ({'/'.join(map(str, d['tp']))}), p50 {st.median(d['p50']):.2f} ms ({'/'.join(str(x) for x in d['p50'])}){f}")
    mp = data.get(('multipaxos', c))
    if mp:
        for t in ('nezha-proxy', 'nezha', 'nezha-proxy-before'):
            d = data.get((t, c))
            if d: print(f"  {t} / multipaxos: throughput {st.median(d['tp'])/st.median(mp['tp']):.2f}x, p50 {st.median(d['p50'])/st.median(mp['p50']):.2f}x")
