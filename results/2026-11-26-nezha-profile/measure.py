#!/usr/bin/env python3
# usage: measure.py DIR BIN TARGETNAME ADDRS CLIENTS DURATION [perf]
# Runs a closed-loop YCSB-A bench and reports per-request CPU per process, messages, counters.
import subprocess, sys, json, time, os, urllib.request, re
d, binp, name, addrs, clients, dur = sys.argv[1:7]
perf = len(sys.argv) > 7 and sys.argv[7] == 'perf'
clients = int(clients); dur = float(dur)
cl = {'nezha-proxy': 'nezha', 'nezha': 'nezha', 'multipaxos': 'mp', 'fast-paxos': 'fp', 'raft': 'raft'}[name]
base = {'nezha': 23000, 'mp': 23010, 'fp': 23020, 'raft': 23030}[cl] + int(os.environ.get('OFF', '0'))
def procs():
    out = {}
    for pid in os.listdir('/proc'):
        if not pid.isdigit(): continue
        try: cmd = open(f'/proc/{pid}/cmdline').read().split('\0')
        except: continue
        if not cmd or '/tmp/nezha-h/' not in cmd[0]: continue
        s = ' '.join(cmd)
        m = re.search(rf'{d}/{cl}/node(\d)\.toml', s)
        if m and ' server ' in s: out[f'n{m.group(1)}'] = int(pid)
        if ' proxy ' in s and f'{d}/{cl}/' in s:
            m = re.search(r'--listen \S+:(\d+)', s); out[f'proxy{m.group(1) if m else pid}'] = int(pid)
    return out
def ticks(pid):
    f = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
    return int(f[11]) + int(f[12])
def get(url):
    try: return urllib.request.urlopen(url, timeout=2).read().decode()
    except Exception as e: return ''
def metric(i, name):
    t = get(f'http://127.0.0.1:{base+200+i}/metrics'); s = 0
    for l in t.splitlines():
        if l.startswith(name): s += float(l.split()[-1])
    return s
def status(i):
    try: return json.loads(get(f'http://127.0.0.1:{base+200+i}/status'))
    except: return {}
ps = procs()
out = f'{d}/m-{name}-{clients}'
os.makedirs(out, exist_ok=True)
b = subprocess.Popen([binp, 'bench', '--target', f'synod={addrs}', '--workload', 'a', '--records', '1000', '-c', str(clients),
                      '-d', f'{int(dur)+2}s', '--warmup', '1s', '--no-plots', '-o', out + '/bench'], stdout=open(out + '/bench.txt', 'w'), stderr=subprocess.STDOUT)
time.sleep(3.5)  # load + warmup
t0 = {k: ticks(p) for k, p in ps.items()}; bt0 = ticks(b.pid)
st0 = {i: status(i) for i in (1, 2, 3)}
m0 = {i: (metric(i, 'synod_peer_messages_sent_total'), metric(i, 'synod_client_requests_total'), metric(i, 'synod_client_replies_total'), metric(i, 'synod_applied_commands_total'), metric(i,'synod_node_batches_total'), metric(i, 'synod_node_events_total')) for i in (1, 2, 3)}
w0 = time.time()
perfs = []
if perf:
    for k, p in ps.items():
        perfs.append(subprocess.Popen(['perf', 'record', '-F', '999', '-g', '-p', str(p), '-o', f'{out}/{k}.data', '--', 'sleep', '4'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
time.sleep(dur - 2)
for p in perfs: p.wait()
w1 = time.time()
t1 = {k: ticks(p) for k, p in ps.items()}; bt1 = ticks(b.pid)
st1 = {i: status(i) for i in (1, 2, 3)}
m1 = {i: (metric(i, 'synod_peer_messages_sent_total'), metric(i, 'synod_client_requests_total'), metric(i, 'synod_client_replies_total'), metric(i, 'synod_applied_commands_total'), metric(i,'synod_node_batches_total'), metric(i, 'synod_node_events_total')) for i in (1, 2, 3)}
b.wait()
ops = max(m1[i][3] - m0[i][3] for i in (1, 2, 3))  # applied commands (max over replicas)
hz = os.sysconf('SC_CLK_TCK')
r = [f'== {name} c={clients} window {w1-w0:.1f}s load {open("/proc/loadavg").read().split()[:3]}',
     f'applied ops in window {ops:.0f} ({ops/(w1-w0):.0f}/s)']
for k in sorted(ps):
    r.append(f'  {k}: CPU {(t1[k]-t0[k])*1e6/hz/max(ops,1):.1f} us/op ({(t1[k]-t0[k])/hz/(w1-w0)*100:.0f}% of a core)')
r.append(f'  bench: CPU {(bt1-bt0)*1e6/hz/max(ops,1):.1f} us/op')
for i in (1, 2, 3):
    dm = [m1[i][j] - m0[i][j] for j in range(6)]
    role = st1[i].get('role')
    r.append(f'  n{i} {role}: peer msgs sent/op {dm[0]/max(ops,1):.2f}, client reqs/op {dm[1]/max(ops,1):.2f}, client replies/op {dm[2]/max(ops,1):.2f}, turns/op {dm[4]/max(ops,1):.2f}, events/turn {dm[5]/max(dm[4],1):.1f}')
    e0, e1 = st0[i].get('extra', {}), st1[i].get('extra', {})
    ks = ['released', 'release_lag_us', 'late', 'deadline_modified', 'synced_in_place', 'synced_moved', 'fetched', 'view_changes']
    r.append('     ' + ', '.join(f'{k} {int(e1.get(k,0))-int(e0.get(k,0))}' for k in ks if k in e1))
tail = open(out + '/bench.txt').read().strip().splitlines()
r += [l for l in tail if 'YCSB' in l or 'class' in l or l.strip().startswith(('all', 'read', 'update'))][-4:]
print('\n'.join(r)); open(out + '/summary.txt', 'w').write('\n'.join(r) + '\n')
