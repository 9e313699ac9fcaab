//! Real-process nemesis: a `synod local` cluster per protocol, hurt by `synod fault` (kill -9
//! and restart, SIGSTOP/SIGCONT, a partition isolating the leader, clock jumps) while native
//! clients AND Redis-port clients record one history, which both linearizability checkers
//! then judge: the built-in one (`synod_sim::linearizability`) and Porcupine (`tools/porcupine`).
//!
//! Each operation is recorded with its invocation and response time (nanoseconds since the
//! start of the run, one clock for both kinds of client). An operation without a definite
//! answer (a client timeout, `-TRYAGAIN`, a dropped connection) is recorded as indeterminate
//! (`return: null`): it may or may not have taken effect, as docs/history-format.md says.
//!
//! The CI run is short (one fault cycle per protocol). `scripts/nemesis.sh` runs the long
//! version through the same code with these environment variables:
//! - `SYNOD_NEMESIS_ROUNDS`: fault cycles per protocol (default 1);
//! - `SYNOD_NEMESIS_PHASE_MS`: length of one fault phase (default 500);
//! - `SYNOD_NEMESIS_NODES`: replicas (default 3);
//! - `SYNOD_NEMESIS_OUT`: a directory that receives every history (`<protocol>.json`) and a
//!   one-line summary per protocol (`summary.tsv`).
//!
//! `nemesis_catches_the_stale_reads_of_a_deposed_leader` runs a mutant (this test binary's
//! `synod` is built with synod-protocols' `mutants` feature) to show the checkers fail when
//! the cluster is wrong.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use synod_client::{Client, ClientError, ClientOptions};
use synod_harness::cluster::ClusterFile;
use synod_runtime::NodeConfig;
use synod_sim::{History, KvOp, KvOutput, Operation};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const SYNOD: &str = env!("CARGO_BIN_EXE_synod");
/// Keys the clients work on: few, so that operations on one key overlap a lot.
const KEYS: usize = 4;
/// Native clients. Besides, each replica's Redis port has a writer (GET, SET, DEL; it moves
/// to the next replica when its connection fails) and a reader (GET only, always on that
/// replica: what a deposed leader answers is seen).
const NATIVE_CLIENTS: usize = 2;
/// How long one Redis command may take before it is recorded as indeterminate.
const REDIS_TIMEOUT: Duration = Duration::from_secs(2);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v:?} is not valid")),
        Err(_) => default,
    }
}

/// One history, shared by every client of a run.
#[derive(Clone)]
struct Recorder {
    t0: Instant,
    ops: Arc<Mutex<Vec<Operation>>>,
}

impl Recorder {
    fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// Record `op`, invoked at `call`; `out` None = indeterminate.
    fn record(&self, client: u64, op: KvOp, call: u64, out: Option<KvOutput>) {
        let ret = out.as_ref().map(|_| self.now());
        self.ops.lock().unwrap().push(Operation { client, op, call, ret, output: out });
    }
}

/// What the clients saw, for the liveness assertions and the summary.
#[derive(Default)]
struct Counts {
    native_ok: AtomicU64,
    native_unknown: AtomicU64,
    redis_ok: AtomicU64,
    redis_unknown: AtomicU64,
    /// Definite answers after the last heal (the cluster recovered).
    ok_after_heal: AtomicU64,
    /// Set (to the recorder's clock) once the nemesis has healed everything.
    healed_at: AtomicU64,
}

/// How long the clients go on after the last heal.
const QUIET: Duration = Duration::from_millis(1500);

impl Counts {
    /// Whether the clients should stop: the quiet period after the last heal is over, or the
    /// hard deadline `stop` has passed.
    fn done(&self, rec: &Recorder, stop: Instant) -> bool {
        let healed = self.healed_at.load(Ordering::Relaxed);
        Instant::now() >= stop || (healed != 0 && rec.now() > healed + QUIET.as_nanos() as u64)
    }

    fn ok(&self, rec: &Recorder, redis: bool) {
        if redis { &self.redis_ok } else { &self.native_ok }.fetch_add(1, Ordering::Relaxed);
        let healed = self.healed_at.load(Ordering::Relaxed);
        if healed != 0 && rec.now() > healed {
            self.ok_after_heal.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A tiny deterministic generator (xorshift), so the workload needs no dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn key(i: u64) -> String {
    format!("nk{i}")
}

/// A native client: get, put, delete and compare-and-swap through `synod_client`.
async fn native_worker(rec: Recorder, counts: Arc<Counts>, endpoints: Vec<String>, n: usize, stop: Instant) {
    let opts = ClientOptions {
        request_timeout: Duration::from_millis(700),
        max_retry_time: Duration::from_secs(3),
        home: n,
        resolve_policy: Some(synod_protocols::registry::client_for),
        ..Default::default()
    };
    let mut client = loop {
        match Client::with_options(&endpoints, opts.clone()).await {
            Ok(c) => break c,
            Err(e) if !counts.done(&rec, stop) => {
                eprintln!("native client {n}: connect: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("native client {n} never connected: {e}"),
        }
    };
    let id = client.client_id();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (n as u64 + 1));
    let mut last_seen: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut seq = 0u64;
    while !counts.done(&rec, stop) {
        seq += 1;
        let k = key(rng.below(KEYS as u64));
        let value = format!("n{n}-{seq}");
        let call = rec.now();
        let (op, result): (KvOp, Result<KvOutput, ClientError>) = match rng.below(100) {
            // Read-modify-writes the classic model cannot express: INCRBY on a counter and
            // list pushes and pops (both checkers judge them with their rich models).
            0..=11 => {
                let op = match rng.below(3) {
                    0 => synod_core::Op::IncrBy { key: "ctr".into(), by: 1 + rng.below(3) as i64 },
                    1 => synod_core::Op::ListPush {
                        key: "list".into(),
                        values: vec![value.clone().into()],
                        left: rng.below(2) == 0,
                        only_existing: false,
                    },
                    _ => synod_core::Op::ListPop { key: "list".into(), left: rng.below(2) == 0, count: None },
                };
                let r = client.execute(op.clone()).await.map(KvOutput::Result);
                (KvOp::Rich { op, stamp: None }, r)
            }
            12..=39 => {
                let r = client.get(k.clone()).await;
                if let Ok(v) = &r {
                    last_seen.insert(k.clone(), v.as_ref().map(|b| String::from_utf8_lossy(b).into_owned()));
                }
                (KvOp::Get { key: k }, r.map(|v| KvOutput::Value(v.map(|b| String::from_utf8_lossy(&b).into_owned()))))
            }
            40..=74 => (
                KvOp::Put { key: k.clone(), value: value.clone() },
                client.put(k, value).await.map(|()| KvOutput::Done),
            ),
            75..=84 => (KvOp::Delete { key: k.clone() }, client.delete(k).await.map(KvOutput::Deleted)),
            _ => {
                let expect = last_seen.get(&k).cloned().flatten();
                let r = client.cas(k.clone(), expect.clone().map(Into::into), Some(value.clone().into())).await;
                let out = r.map(|(ok, current)| KvOutput::Cas {
                    ok,
                    current: current.map(|b| String::from_utf8_lossy(&b).into_owned()),
                });
                (KvOp::Cas { key: k, expect, new: Some(value) }, out)
            }
        };
        match result {
            Ok(out) => {
                counts.ok(&rec, false);
                rec.record(id, op, call, Some(out));
            }
            Err(e) if e.never_applied() => rec.record(id, op, call, Some(KvOutput::Rejected)),
            Err(_) => {
                counts.native_unknown.fetch_add(1, Ordering::Relaxed);
                rec.record(id, op, call, None);
            }
        }
    }
}

/// A reply of the Redis protocol (the kinds GET, SET and DEL answer with).
#[derive(Debug, PartialEq)]
enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
}

/// A minimal RESP client over one connection.
struct Resp {
    conn: BufReader<TcpStream>,
}

impl Resp {
    async fn connect(addr: SocketAddr) -> std::io::Result<Resp> {
        let tcp = tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(addr))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
        tcp.set_nodelay(true)?;
        Ok(Resp { conn: BufReader::new(tcp) })
    }

    async fn command(&mut self, args: &[&str]) -> std::io::Result<Reply> {
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.conn.get_mut().write_all(req.as_bytes()).await?;
        let mut line = String::new();
        if self.conn.read_line(&mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end_matches("\r\n");
        let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{what}: {line:?}"));
        let (kind, rest) = line.split_at(1.min(line.len()));
        match kind {
            "+" => Ok(Reply::Simple(rest.to_string())),
            "-" => Ok(Reply::Error(rest.to_string())),
            ":" => rest.parse().map(Reply::Int).map_err(|_| bad("bad integer")),
            "$" => {
                let len: i64 = rest.parse().map_err(|_| bad("bad bulk length"))?;
                if len < 0 {
                    return Ok(Reply::Bulk(None));
                }
                let mut buf = vec![0; len as usize + 2];
                self.conn.read_exact(&mut buf).await?;
                buf.truncate(len as usize);
                Ok(Reply::Bulk(Some(buf)))
            }
            _ => Err(bad("unexpected reply")),
        }
    }
}

/// A Redis client on replica `n`'s Redis port (which forwards to the leader). A writer does
/// GET, SET and DEL and, after a timeout or a dropped connection, reconnects to the next
/// replica; a reader only GETs, always from replica `n`.
async fn redis_worker(
    rec: Recorder,
    counts: Arc<Counts>,
    addrs: Vec<SocketAddr>,
    n: usize,
    reader: bool,
    stop: Instant,
) {
    let id = 0xead0_0000 + 2 * n as u64 + reader as u64;
    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (n as u64 + 1));
    // A writer's first connection goes to replica n (the loop moves it on first).
    let mut target = if reader { n } else { n + addrs.len() - 1 };
    let mut conn: Option<Resp> = None;
    let mut seq = 0u64;
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    while !counts.done(&rec, stop) {
        if conn.is_none() {
            if !reader {
                target += 1;
            }
            match Resp::connect(addrs[target % addrs.len()]).await {
                Ok(c) => conn = Some(c),
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
        }
        let c = conn.as_mut().unwrap();
        seq += 1;
        let k = key(rng.below(KEYS as u64));
        let value = format!("r{n}-{seq}");
        let (op, args): (KvOp, Vec<&str>) = match if reader { 0 } else { rng.below(100) } {
            0..=44 => (KvOp::Get { key: k.clone() }, vec!["GET", &k]),
            45..=89 => (KvOp::Put { key: k.clone(), value: value.clone() }, vec!["SET", &k, &value]),
            _ => (KvOp::Delete { key: k.clone() }, vec!["DEL", &k]),
        };
        let call = rec.now();
        let reply = tokio::time::timeout(REDIS_TIMEOUT, c.command(&args)).await;
        let out = match (&op, reply) {
            (KvOp::Get { .. }, Ok(Ok(Reply::Bulk(v)))) => {
                Some(KvOutput::Value(v.map(|b| String::from_utf8_lossy(&b).into_owned())))
            }
            (KvOp::Put { .. }, Ok(Ok(Reply::Simple(s)))) if s == "OK" => Some(KvOutput::Done),
            (KvOp::Delete { .. }, Ok(Ok(Reply::Int(i)))) => Some(KvOutput::Deleted(i > 0)),
            (_, Ok(Ok(Reply::Error(e)))) => {
                // TRYAGAIN: the outcome is unknown; the connection stays usable.
                *errors.entry(e.chars().take(60).collect()).or_default() += 1;
                None
            }
            (_, other) => {
                // Timeout, dropped connection, or an answer of the wrong kind: whatever comes
                // on this connection later would belong to this command, so drop it.
                if let Ok(Ok(r)) = &other {
                    panic!("redis client {n}: {args:?} answered {r:?}");
                }
                conn = None;
                None
            }
        };
        match out {
            Some(out) => {
                counts.ok(&rec, true);
                rec.record(id, op, call, Some(out));
            }
            None => {
                counts.redis_unknown.fetch_add(1, Ordering::Relaxed);
                rec.record(id, op, call, None);
            }
        }
    }
    if !errors.is_empty() {
        eprintln!("redis {} {n}: error replies {errors:?}", if reader { "reader" } else { "writer" });
    }
}

/// `synod fault --cluster DIR ARGS`: what it printed, or why it failed (a fault that cannot be
/// applied right now, e.g. restarting a node that is up, is not a test failure).
fn fault(dir: &Path, args: &[String]) -> Result<String, String> {
    let out = Command::new(SYNOD).arg("fault").arg("--cluster").arg(dir).args(args).output().expect("run synod fault");
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(format!("{}{}", text(&out.stdout), text(&out.stderr)))
    }
}

/// The leader's id, or (leaderless protocols, or no leader right now) `fallback`.
fn leader_or(dir: &Path, fallback: u32) -> u32 {
    ClusterFile::load(dir).ok().and_then(|(_, c)| synod_harness::nemesis::find_leader(&c).ok()).unwrap_or(fallback)
}

/// One fault cycle; returns the log of what was done. Every step's fault is applied through
/// the `synod fault` command line.
async fn nemesis_round(dir: PathBuf, nodes: u32, round: u32, phase: Duration, log: &mut Vec<String>) {
    let step = |log: &mut Vec<String>, args: Vec<String>| {
        let r = fault(&dir, &args);
        let line = match r {
            Ok(out) => format!("fault {}: {}", args.join(" "), out.replace('\n', "; ")),
            Err(e) => format!("fault {} FAILED: {}", args.join(" "), e.replace('\n', "; ")),
        };
        eprintln!("  {line}");
        log.push(line);
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let fallback = round % nodes + 1;
    tokio::time::sleep(phase).await;

    // kill -9 the leader, then restart it from its WAL.
    let victim = leader_or(&dir, fallback);
    step(log, s(&["kill", &victim.to_string()]));
    tokio::time::sleep(phase * 2).await;
    step(log, s(&["restart", "all"]));
    tokio::time::sleep(phase).await;

    // SIGSTOP the leader (it keeps its sockets but says nothing), then SIGCONT.
    let victim = leader_or(&dir, fallback);
    step(log, s(&["pause", &victim.to_string()]));
    tokio::time::sleep(phase * 2).await;
    step(log, s(&["resume", "all"]));
    tokio::time::sleep(phase).await;

    // Isolate the leader from every other replica (clients still reach it).
    let victim = leader_or(&dir, fallback);
    let links: Vec<String> = (1..=nodes).filter(|&o| o != victim).map(|o| format!("{victim}-{o}")).collect();
    step(log, s(&["partition", "--links", &links.join(",")]));
    tokio::time::sleep(phase * 3).await;
    step(log, s(&["heal"]));
    tokio::time::sleep(phase).await;

    // Clock jumps: the leader's clock forward, another replica's backward.
    let victim = leader_or(&dir, fallback);
    let other = victim % nodes + 1;
    step(log, s(&["clock", "--offset-ms=1500", &victim.to_string()]));
    step(log, s(&["clock", "--offset-ms=-800", &other.to_string()]));
    tokio::time::sleep(phase * 2).await;
    step(log, s(&["heal"]));
}

/// Build tools/porcupine once per test binary.
fn porcupine() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/porcupine");
        // In cargo's scratch directory for integration tests: rebuilt (quickly) per run, never
        // left behind in /tmp.
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("porcupine-nemesis");
        let status = Command::new("go").arg("build").arg("-o").arg(&out).arg(".").current_dir(&tool).status();
        match status {
            Ok(s) if s.success() => out,
            Ok(s) => panic!("`go build` of {} failed ({s})", tool.display()),
            Err(e) => panic!(
                "the nemesis test needs the Go toolchain for Porcupine: running `go` failed ({e}). \
                 Install Go (https://go.dev/dl) and put it on PATH; this test must not be skipped."
            ),
        }
    })
}

/// What one run found.
struct Outcome {
    history: History,
    /// The built-in checker's verdict (Err = the violation, printed).
    builtin: Result<(), String>,
    /// Porcupine's verdict: true = linearizable.
    porcupine: bool,
    summary: String,
}

/// Run the nemesis against `protocol` (`SYNOD_NEMESIS_ROUNDS` fault cycles) and check the
/// history; the caller asserts.
fn run(protocol: &str, extra: &[&str]) -> Outcome {
    run_rounds(protocol, extra, env_or("SYNOD_NEMESIS_ROUNDS", 1))
}

fn run_rounds(protocol: &str, extra: &[&str], rounds: u32) -> Outcome {
    // One cluster at a time: the test threads would otherwise run them all at once.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let nodes: u32 = env_or("SYNOD_NEMESIS_NODES", 3);
    let phase = Duration::from_millis(env_or("SYNOD_NEMESIS_PHASE_MS", 500));
    let porcupine = porcupine();

    let dir = tempfile::tempdir().unwrap();
    let nodes_arg = nodes.to_string();
    let mut args = vec!["--nodes", &nodes_arg, "--protocol", protocol, "--fsync", "always"];
    args.extend_from_slice(extra);
    let (child, _file) = common::start_local(dir.path(), &args);
    let _local = common::Local(child);
    let (_, cluster) = ClusterFile::load(dir.path()).unwrap();
    let endpoints: Vec<String> = cluster.nodes.iter().map(|n| n.client_addr.to_string()).collect();
    let resp: Vec<SocketAddr> = cluster
        .nodes
        .iter()
        .map(|n| {
            NodeConfig::load(&n.config).unwrap().me().resp_addr.expect("synod local gives every replica a Redis port")
        })
        .collect();

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let rec = Recorder { t0: Instant::now(), ops: Arc::default() };
    let counts = Arc::new(Counts::default());
    let mut log = Vec::new();
    let started = Instant::now();
    rt.block_on(async {
        // The workers run until QUIET after the last heal (`Counts::done`); `stop` is only a
        // backstop in case the nemesis hangs.
        let stop = Instant::now() + (phase * 13 + Duration::from_secs(30)) * rounds + QUIET;
        let mut workers = Vec::new();
        for n in 0..NATIVE_CLIENTS {
            workers.push(tokio::spawn(native_worker(rec.clone(), counts.clone(), endpoints.clone(), n, stop)));
        }
        for n in 0..resp.len() {
            for reader in [false, true] {
                workers.push(tokio::spawn(redis_worker(rec.clone(), counts.clone(), resp.clone(), n, reader, stop)));
            }
        }
        for round in 0..rounds {
            nemesis_round(dir.path().to_path_buf(), nodes, round, phase, &mut log).await;
        }
        counts.healed_at.store(rec.now(), Ordering::Relaxed);
        for w in workers {
            w.await.expect("a client task panicked");
        }
        // Every key must be readable once the faults are over (liveness); these reads are
        // part of the history too.
        let opts = ClientOptions {
            resolve_policy: Some(synod_protocols::registry::client_for),
            max_retry_time: common::PATIENCE,
            ..Default::default()
        };
        let mut client = Client::with_options(&endpoints, opts).await.expect("a client connects after the faults");
        for k in 0..KEYS as u64 {
            let call = rec.now();
            let v =
                client.get(key(k)).await.unwrap_or_else(|e| panic!("{protocol}: get {} after the faults: {e}", key(k)));
            let v = v.map(|b| String::from_utf8_lossy(&b).into_owned());
            rec.record(client.client_id(), KvOp::Get { key: key(k) }, call, Some(KvOutput::Value(v)));
        }
    });
    drop(rt);

    let ops = std::mem::take(&mut *rec.ops.lock().unwrap());
    let history =
        History { ops, note: format!("nemesis: {protocol}, {nodes} replicas, {rounds} rounds"), expect: None };
    let checked = Instant::now();
    let builtin = synod_sim::linearizability::check(&history).map_err(|v| v.to_string());
    let builtin_time = checked.elapsed();
    let out_dir = std::env::var_os("SYNOD_NEMESIS_OUT").map(PathBuf::from);
    let json = out_dir.as_ref().map_or_else(|| dir.path().join("history.json"), |d| d.join(format!("{protocol}.json")));
    std::fs::write(&json, history.to_json()).unwrap();
    let p = Command::new(porcupine).arg(&json).output().expect("run porcupine");
    let porcupine_ok = match p.status.code() {
        Some(0) => true,
        Some(1) => false,
        _ => panic!("porcupine failed on {}: {}", json.display(), String::from_utf8_lossy(&p.stderr)),
    };
    let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let summary = format!(
        "{protocol}\tnodes={nodes}\trounds={rounds}\tops={}\tnative_ok={}\tnative_unknown={}\tredis_ok={}\tredis_unknown={}\tok_after_heal={}\tbuiltin={}\tporcupine={}\tcheck_ms={}\twall_s={:.1}",
        history.ops.len(),
        c(&counts.native_ok),
        c(&counts.native_unknown),
        c(&counts.redis_ok),
        c(&counts.redis_unknown),
        c(&counts.ok_after_heal),
        if builtin.is_ok() { "linearizable" } else { "VIOLATION" },
        if porcupine_ok { "linearizable" } else { "VIOLATION" },
        builtin_time.as_millis(),
        started.elapsed().as_secs_f64(),
    );
    eprintln!("{summary}");
    if let Some(d) = &out_dir {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(d.join("summary.tsv")).unwrap();
        writeln!(f, "{summary}").unwrap();
        std::fs::write(d.join(format!("{protocol}.faults.txt")), log.join("\n") + "\n").unwrap();
    }
    // The nemesis must really have hurt the cluster: every kind of fault applied.
    for kind in ["kill", "restart", "pause", "resume", "partition", "heal", "clock"] {
        assert!(
            log.iter().any(|l| l.split([' ', ':']).nth(1) == Some(kind) && !l.contains(" FAILED: ")),
            "{protocol}: no `synod fault {kind}` succeeded:\n{}",
            log.join("\n")
        );
    }
    // ... and both kinds of client must have done real work, also after the last heal.
    assert!(c(&counts.native_ok) >= 20, "{protocol}: too few native operations succeeded: {summary}");
    assert!(c(&counts.redis_ok) >= 20, "{protocol}: too few Redis operations succeeded: {summary}");
    assert!(c(&counts.ok_after_heal) >= 1, "{protocol}: nothing succeeded after the last heal: {summary}");
    Outcome { history, builtin, porcupine: porcupine_ok, summary }
}

/// A correct protocol: both checkers must find the history linearizable.
fn nemesis(protocol: &str) {
    let o = run(protocol, &[]);
    if let Err(v) = &o.builtin {
        panic!("{protocol}: the built-in checker found a violation: {v}\n{}", o.summary);
    }
    assert!(o.porcupine, "{protocol}: Porcupine found a violation the built-in checker did not\n{}", o.summary);
    assert!(!o.history.ops.is_empty());
}

/// The nemesis catches a bug: `multipaxos-lease-unchecked` (a mutant: the leader answers
/// reads from its lease without checking that the lease is still valid) serves stale reads
/// once the partition has isolated it and a new leader has taken writes; the Redis client
/// connected to the old leader reads them. Both checkers must say so.
#[test]
fn nemesis_catches_the_stale_reads_of_a_deposed_leader() {
    let o = run_rounds("multipaxos-lease-unchecked", &[], env_or("SYNOD_NEMESIS_ROUNDS", 1).max(2));
    assert!(o.builtin.is_err(), "the built-in checker missed the mutant's stale reads\n{}", o.summary);
    assert!(!o.porcupine, "Porcupine missed the mutant's stale reads\n{}", o.summary);
    eprintln!("caught: {}", o.builtin.unwrap_err());
}

macro_rules! nemesis_tests {
    ($($name:ident => $protocol:literal,)*) => {
        $(
            #[test]
            fn $name() {
                nemesis($protocol);
            }
        )*
        /// Every registered protocol has a test above.
        #[test]
        fn every_registered_protocol_is_covered() {
            let covered = [$($protocol),*];
            for p in synod_protocols::registry::names() {
                assert!(covered.contains(&p), "protocol {p} has no nemesis test");
            }
        }
    };
}

nemesis_tests! {
    nemesis_multipaxos => "multipaxos",
    nemesis_holipaxos => "holipaxos",
    nemesis_raft => "raft",
    nemesis_raft_plus => "raft+",
    nemesis_mencius => "mencius",
    nemesis_epaxos => "epaxos",
    nemesis_crossword => "crossword",
    nemesis_rspaxos => "rspaxos",
    nemesis_craft => "craft",
    nemesis_idem => "idem",
    nemesis_idem_nopr => "idem-nopr",
    nemesis_idem_noaqm => "idem-noaqm",
    nemesis_paxos_lbr => "paxos-lbr",
    nemesis_raft_admit => "raft-admit",
    nemesis_nezha => "nezha",
    nemesis_fast_paxos => "fast-paxos",
    nemesis_chain => "chain",
}
