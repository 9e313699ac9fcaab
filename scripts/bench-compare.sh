#!/usr/bin/env bash
# Side-by-side benchmark of the request path (issue 19, docs/performance.md): synod
# MultiPaxos with 3 replicas, synod with 1 replica, etcd with 3 members and redis-server,
# every one fsyncing each write, data on /dev/shm (a tmpfs) when it exists. Runs
# `synod bench` (YCSB-A, 500 B values, 10,000 records, 64 closed-loop clients) against each
# target in interleaved rounds (A B C D A B C D ...), and prints per target the median
# throughput and p99, the ratios the issue's targets are stated in, and the CPU time each
# server process spent per operation (utime+stime deltas of /proc/<pid>/stat over the
# measured interval divided by the operations in it).
#
# Usage: scripts/bench-compare.sh
# Env:
#   SYNOD_BIN   the synod binary to measure (default: build target/release/synod)
#   BASELINE    a second synod binary (e.g. /work/main/target/release/synod): adds its 3-node
#               and 1-node clusters as targets "base-3" / "base-1", measured in the same
#               rounds, so an A/B comparison shares the machine's load
#   PROTOCOLS   extra protocols run as 3-node synod targets besides multipaxos
#               (e.g. "raft raft+"); default none
#   ROUNDS      rounds per target (default 3)   DURATION  measured seconds per run (default 8)
#   CLIENTS     closed-loop clients (default 64)   BASE_PORT  first port (default 26000; the
#               script uses BASE_PORT..BASE_PORT+999)
#   SKIP_ETCD=1 / SKIP_REDIS=1   leave a system out;   OUT  keep the bench outputs there
# Needs: python3, etcd (Debian: etcd-server), redis-server.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -n ${SYNOD_BIN:-} ]]; then
  bin=$SYNOD_BIN
else
  cargo build --release -p synod >&2
  bin="${CARGO_TARGET_DIR:-target}/release/synod"
fi
bin=$(readlink -f "$bin")
export SYNOD_BIN=$bin

exec python3 - "$@" <<'PYEOF'
import json, os, shutil, signal, statistics, subprocess, sys, tempfile, time, urllib.request

BIN = os.environ["SYNOD_BIN"]
BASELINE = os.environ.get("BASELINE")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
DURATION = int(os.environ.get("DURATION", "8"))
WARMUP = 2
CLIENTS = int(os.environ.get("CLIENTS", "64"))
BASE = int(os.environ.get("BASE_PORT", "26000"))
PROTOCOLS = os.environ.get("PROTOCOLS", "").split()
RECORDS, VALUE = 10000, 500
TICK = os.sysconf("SC_CLK_TCK")
shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
root = tempfile.mkdtemp(prefix="synod-bench-compare-", dir=shm)
out = os.environ.get("OUT") or os.path.join(root, "out")
os.makedirs(out, exist_ok=True)
procs = []  # (Popen, name) of everything we started


def log(msg):
    print(f"== bench-compare [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def start(name, args, **kw):
    f = open(os.path.join(root, f"{name}.log"), "w")
    p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, start_new_session=True, **kw)
    procs.append((p, name))
    return p


def stop_all():
    for p, _ in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.time() + 10
    for p, _ in procs:
        try:
            p.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)


def http_json(url):
    with urllib.request.urlopen(url, timeout=2) as r:
        return json.load(r)


class Target:
    def __init__(self, label, kind, addrs, pids_fn):
        self.label, self.kind, self.addrs, self.pids_fn = label, kind, addrs, pids_fn
        self.runs = []  # (ops/s, p99 ms, {proc label: µs/op})
        self.loaded = False

    def spec(self):
        return f"{self.kind}=" + ",".join(self.addrs)


def synod_cluster(label, binary, nodes, base, protocol="multipaxos"):
    data = os.path.join(root, label)
    p = start(label, [binary, "local", "--nodes", str(nodes), "--protocol", protocol, "--fsync", "always",
                      "--data-dir", data, "--base-port", str(base), "--log-level", "warn"])

    def pids():
        # The replicas are `synod local`'s children; name each by its role (leader/follower).
        out = {}
        for i in range(1, nodes + 1):
            st = http_json(f"http://127.0.0.1:{base + 200 + i}/status")
            role = "leader" if st.get("leader") == st.get("id") or nodes == 1 else "follower"
            kids = subprocess.run(["pgrep", "-P", str(p.pid), "-f", f"node{i}.toml"], capture_output=True,
                                  text=True).stdout.split()
            if kids:
                out[f"n{i} {role}"] = int(kids[0])
        return out

    return Target(label, "synod", [f"127.0.0.1:{base + 100 + i}" for i in range(1, nodes + 1)], pids)


def etcd_cluster(base):
    names = [f"e{i}" for i in (1, 2, 3)]
    peer = {n: f"http://127.0.0.1:{base + 20 + i}" for i, n in enumerate(names, 1)}
    client = {n: f"127.0.0.1:{base + 10 + i}" for i, n in enumerate(names, 1)}
    initial = ",".join(f"{n}={peer[n]}" for n in names)
    ps = {}
    for n in names:
        ps[n] = start(f"etcd-{n}", ["etcd", "--name", n, "--data-dir", os.path.join(root, f"etcd-{n}"),
                                    "--listen-client-urls", f"http://{client[n]}",
                                    "--advertise-client-urls", f"http://{client[n]}",
                                    "--listen-peer-urls", peer[n], "--initial-advertise-peer-urls", peer[n],
                                    "--initial-cluster", initial, "--initial-cluster-state", "new",
                                    "--initial-cluster-token", "bench-compare", "--log-level", "warn"])

    def pids():
        out = {}
        for n in names:
            role = "member"
            try:
                req = urllib.request.Request(f"http://{client[n]}/v3/maintenance/status", data=b"{}", method="POST")
                with urllib.request.urlopen(req, timeout=2) as r:
                    st = json.load(r)
                role = "leader" if st.get("leader") == st.get("header", {}).get("member_id") else "follower"
            except Exception:
                pass
            out[f"{n} {role}"] = ps[n].pid
        return out

    return Target("etcd-3", "etcd", list(client.values()), pids)


def redis(base):
    port = base + 50
    p = start("redis", ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", root,
                        "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no"])
    return Target("redis", "redis", [f"127.0.0.1:{port}"], lambda: {"redis-server": p.pid})


def summary_row(d):
    summary = next(os.path.join(dp, "summary.csv") for dp, _, fs in os.walk(d) if "summary.csv" in fs)
    rows = [l.split(",") for l in open(summary).read().splitlines()]
    return dict(zip(rows[0], next(r for r in rows[1:] if r[0] == "all")))


def ok_ops(d):
    try:
        return int(summary_row(d)["ok"])
    except (StopIteration, OSError, KeyError, ValueError):
        return 0


def wait_ready(t, timeout=30):
    deadline = time.time() + timeout
    while True:
        r = subprocess.run([BIN, "bench", "--target", t.spec(), "-c", "1", "--records", "1", "--skip-load",
                            "-d", "200ms", "--warmup", "0s", "--no-plots", "-o", os.path.join(root, "probe")],
                           capture_output=True, text=True)
        if r.returncode == 0 and ok_ops(os.path.join(root, "probe")) > 0:
            return
        if time.time() > deadline:
            raise SystemExit(f"{t.label} did not become ready: {r.stdout[-500:]} {r.stderr[-500:]}")
        time.sleep(0.5)


def run_once(t, rnd):
    d = os.path.join(out, f"{t.label}-round{rnd}")
    args = [BIN, "bench", "--target", t.spec(), "-c", str(CLIENTS), "--records", str(RECORDS),
            "--value-size", str(VALUE), "-d", f"{DURATION}s", "--no-plots", "-o", d]
    if t.loaded:
        args += ["--skip-load", "--warmup", f"{WARMUP}s"]
    else:
        # The first run loads the records; its measurement is a warm-up round, not reported.
        args += ["--warmup", "0s"]
    pids = t.pids_fn()
    b = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    cpu = {}
    if t.loaded:
        # CPU over the middle of the measured interval: [warmup + 0.5 s, warmup + duration - 0.5 s].
        time.sleep(WARMUP + 0.5)
        t0, c0 = time.time(), {k: cpu_ticks(v) for k, v in pids.items()}
        time.sleep(DURATION - 1.0)
        t1, c1 = time.time(), {k: cpu_ticks(v) for k, v in pids.items()}
        cpu = {k: (c1[k] - c0[k]) / TICK / (t1 - t0) for k in pids}  # CPU seconds per second
    text, _ = b.communicate()
    if b.returncode != 0:
        raise SystemExit(f"bench against {t.label} failed:\n{text}")
    row = summary_row(d)
    ops, p99, errors = float(row["throughput_ops_s"]), float(row["p99_ms"]), int(row["errors"])
    if not t.loaded:
        t.loaded = True
        log(f"{t.label}: loaded, warm-up run {ops:,.0f} ops/s")
        return
    per_op = {k: v / ops * 1e6 for k, v in cpu.items()} if ops > 0 else {}
    t.runs.append((ops, p99, per_op))
    log(f"{t.label} round {rnd}: {ops:,.0f} ops/s p99 {p99:.2f} ms errors {errors} cpu µs/op "
        + " ".join(f"{k}={v:.1f}" for k, v in sorted(per_op.items())))


def med(xs):
    return statistics.median(xs) if xs else float("nan")


try:
    # `synod local --base-port B` uses B+i, B+100+i, B+200+i, B+300+i: cluster k gets B+10k.
    targets = [synod_cluster("synod-3", BIN, 3, BASE), synod_cluster("synod-1", BIN, 1, BASE + 10)]
    if BASELINE:
        targets += [synod_cluster("base-3", BASELINE, 3, BASE + 20),
                    synod_cluster("base-1", BASELINE, 1, BASE + 30)]
    for i, proto in enumerate(PROTOCOLS[:6]):
        targets.append(synod_cluster(f"{proto}-3", BIN, 3, BASE + 40 + 10 * i, proto))
    if os.environ.get("SKIP_ETCD") != "1":
        targets.append(etcd_cluster(BASE + 500))
    if os.environ.get("SKIP_REDIS") != "1":
        targets.append(redis(BASE + 500))
    for t in targets:
        wait_ready(t)
    log(f"all {len(targets)} targets up; load average {open('/proc/loadavg').read().split()[:3]}")
    load_before = open("/proc/loadavg").read().split()[:3]
    for t in targets:
        run_once(t, 0)
    for rnd in range(1, ROUNDS + 1):
        for t in targets:
            run_once(t, rnd)
    load_after = open("/proc/loadavg").read().split()[:3]

    by = {t.label: t for t in targets}
    ops = {t.label: med([r[0] for r in t.runs]) for t in targets}
    p99 = {t.label: med([r[1] for r in t.runs]) for t in targets}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} · commit {commit} · binary {BIN}"
          + (f" · baseline {BASELINE}" if BASELINE else ""))
    print(f"YCSB-A, {VALUE} B values, {RECORDS} records, {CLIENTS} clients, {ROUNDS} rounds x {DURATION} s, "
          f"fsync per write, data on {shm or 'disk'}; load average before {' '.join(load_before)}, "
          f"after {' '.join(load_after)}; {os.cpu_count()} CPUs")
    print()
    print("| system | ops/s (median) | p99 ms (median) | rounds ops/s | CPU µs/op per process (median) |")
    print("|---|---:|---:|---|---|")
    for t in targets:
        keys = sorted({k for r in t.runs for k in r[2]})
        cpu = ", ".join(f"{k} {med([r[2][k] for r in t.runs if k in r[2]]):.1f}" for k in keys)
        rounds = " / ".join(f"{r[0]:,.0f}" for r in t.runs)
        print(f"| {t.label} | {ops[t.label]:,.0f} | {p99[t.label]:.2f} | {rounds} | {cpu} |")
    print()

    def ratio(a, b, what="throughput"):
        if a in by and b in by and ops[b] > 0:
            print(f"- {a} / {b} {what}: {ops[a] / ops[b]:.2f}x (p99 {p99[a]:.2f} vs {p99[b]:.2f} ms)")

    ratio("synod-3", "synod-1")
    ratio("synod-3", "etcd-3")
    ratio("synod-3", "redis")
    ratio("synod-1", "redis")
    for proto in PROTOCOLS:
        ratio(f"{proto}-3", "synod-3")
    if BASELINE:
        ratio("synod-3", "base-3")
        ratio("synod-1", "base-1")
        ratio("base-3", "base-1")
finally:
    stop_all()
    # The data directories always go (OUT, when given, lives elsewhere); KEEP=1 keeps them.
    if os.environ.get("KEEP") != "1":
        shutil.rmtree(root, ignore_errors=True)
PYEOF
