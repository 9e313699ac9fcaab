//! Targets against in-process fake servers: a synod replica speaking the client wire protocol
//! over a real KV store, and a RESP server with GET/SET/MGET. (etcd's gRPC server is not
//! faked; its mapping is covered by the error-mapping test and by hand against real etcd.)

use super::*;
use crate::workload::WorkloadSpec;
use bytes::BytesMut;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use synod_core::wire::{self, ClientMsg, ServerMsg, CLIENT_MAGIC};
use synod_core::{Reply, ReplyBody, Role, Status};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

type Log = Arc<Mutex<Vec<String>>>;

/// A single-node fake synod replica that is always leader and applies ops to a KvStore-like
/// map; every op is logged as its debug name.
async fn fake_synod() -> (String, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let log: Log = Arc::default();
    let store: Arc<Mutex<std::collections::BTreeMap<Bytes, Bytes>>> = Arc::default();
    let log2 = log.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            tokio::spawn(serve_synod(stream, log2.clone(), store.clone()));
        }
    });
    (addr, log)
}

async fn serve_synod(mut stream: TcpStream, log: Log, store: Arc<Mutex<std::collections::BTreeMap<Bytes, Bytes>>>) {
    let mut magic = [0u8; 8];
    if stream.read_exact(&mut magic).await.is_err() || &magic != CLIENT_MAGIC {
        return;
    }
    let mut buf = BytesMut::new();
    loop {
        let payload = loop {
            if let Some(p) = wire::take_frame(&mut buf, 1 << 24).unwrap() {
                break p;
            }
            if stream.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                return;
            }
        };
        let out = match wire::decode_payload::<ClientMsg>(&payload).unwrap() {
            ClientMsg::Auth { .. } => continue, // no password in this fake
            ClientMsg::Status => ServerMsg::Status(Status {
                id: 1,
                protocol: "fake".into(),
                role: Role::Leader,
                ballot: "0".into(),
                leader: Some(1),
                commit_index: 0,
                execute_index: 0,
                extra: Default::default(),
            }),
            ClientMsg::Request { cmd, .. } => {
                let mut s = store.lock().unwrap();
                let body = match &cmd.op {
                    Op::Put { key, .. } if key.as_ref() == b"refuse" => ReplyBody::Invalid { reason: "too big".into() },
                    Op::Get { key } => {
                        log.lock().unwrap().push("get".into());
                        ReplyBody::Done(OpResult::Value(s.get(key).cloned()))
                    }
                    Op::Put { key, value } => {
                        log.lock().unwrap().push("put".into());
                        s.insert(key.clone(), value.clone());
                        ReplyBody::Done(OpResult::Done)
                    }
                    Op::Scan { start, end, limit } => {
                        log.lock().unwrap().push(format!("scan {limit}"));
                        assert!(end.is_empty());
                        let pairs = s
                            .range(start.clone()..)
                            .take(*limit as usize)
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect();
                        ReplyBody::Done(OpResult::Scan(pairs))
                    }
                    other => panic!("unexpected op {other:?}"),
                };
                ServerMsg::Reply(Reply { client: cmd.client, seq: cmd.seq, from: 1, body })
            }
        };
        if stream.write_all(&wire::frame(&out)).await.is_err() {
            return;
        }
    }
}

/// A tiny RESP2 server: GET, SET, MGET over a map, `-BUSY` for key `busy`, `-ERR` for key
/// `bad`, and `-ERR unknown command` for anything else (the client's setup commands).
async fn fake_redis() -> (String, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let log: Log = Arc::default();
    let store: Arc<Mutex<HashMap<Vec<u8>, Vec<u8>>>> = Arc::default();
    let log2 = log.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let (log, store) = (log2.clone(), store.clone());
            tokio::spawn(async move {
                let (r, mut w) = stream.into_split();
                let mut r = BufReader::new(r);
                while let Some(args) = read_command(&mut r).await {
                    let name = String::from_utf8_lossy(&args[0]).to_uppercase();
                    let reply = {
                        let mut s = store.lock().unwrap();
                        let bulk = |v: Option<&Vec<u8>>| match v {
                            Some(v) => {
                                let mut out = format!("${}\r\n", v.len()).into_bytes();
                                out.extend_from_slice(v);
                                out.extend_from_slice(b"\r\n");
                                out
                            }
                            None => b"$-1\r\n".to_vec(),
                        };
                        match name.as_str() {
                            "GET" | "SET" | "MGET" if args.get(1).map(|k| k.as_slice()) == Some(b"busy") => {
                                b"-BUSY try later\r\n".to_vec()
                            }
                            "GET" | "SET" if args.get(1).map(|k| k.as_slice()) == Some(b"bad") => {
                                b"-ERR bad key\r\n".to_vec()
                            }
                            "GET" => {
                                log.lock().unwrap().push("GET".into());
                                bulk(s.get(&args[1]))
                            }
                            "SET" => {
                                log.lock().unwrap().push("SET".into());
                                s.insert(args[1].clone(), args[2].clone());
                                b"+OK\r\n".to_vec()
                            }
                            "MGET" => {
                                log.lock().unwrap().push(format!("MGET {}", args.len() - 1));
                                let mut out = format!("*{}\r\n", args.len() - 1).into_bytes();
                                for k in &args[1..] {
                                    out.extend(bulk(s.get(k)));
                                }
                                out
                            }
                            _ => b"-ERR unknown command\r\n".to_vec(),
                        }
                    };
                    if w.write_all(&reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, log)
}

async fn read_command(r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> Option<Vec<Vec<u8>>> {
    let mut line = String::new();
    r.read_line(&mut line).await.ok()?;
    let n: usize = line.trim().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        line.clear();
        r.read_line(&mut line).await.ok()?;
        let len: usize = line.trim().strip_prefix('$')?.parse().ok()?;
        let mut arg = vec![0u8; len + 2];
        r.read_exact(&mut arg).await.ok()?;
        arg.truncate(len);
        args.push(arg);
    }
    Some(args)
}

fn ops() -> Vec<BenchOp> {
    let mut w = crate::workload::Workload::new(WorkloadSpec::preset("a").unwrap()).unwrap();
    vec![
        BenchOp::Update { key: key_for(1, 23), value: w.value() },
        BenchOp::Read { key: key_for(1, 23) },
        BenchOp::Insert { key: key_for(5000, 23), value: w.value() },
        BenchOp::Scan { start: key_for(0, 23), record: 0, count: 7 },
        BenchOp::ReadModifyWrite { key: key_for(1, 23), value: w.value() },
    ]
}

#[test]
fn target_specs_parse() {
    let t: TargetSpec = "synod=127.0.0.1:7201, 127.0.0.1:7202".parse().unwrap();
    assert_eq!((t.label.as_str(), t.kind), ("synod", TargetKind::Synod));
    assert_eq!(t.endpoints, vec!["127.0.0.1:7201", "127.0.0.1:7202"]);
    let t: TargetSpec = "raft-3:synod=127.0.0.1:7301".parse().unwrap();
    assert_eq!((t.label.as_str(), t.kind), ("raft-3", TargetKind::Synod));
    let t: TargetSpec = "etcd=http://127.0.0.1:2379".parse().unwrap();
    assert_eq!(t.kind, TargetKind::Etcd);
    assert!("redis".parse::<TargetSpec>().unwrap_err().contains("expected KIND=HOST:PORT"));
    assert!("redis=".parse::<TargetSpec>().unwrap_err().contains("no endpoints"));
    assert!("a b:redis=1.2.3.4:5".parse::<TargetSpec>().unwrap_err().contains("label"));
    assert!("redis=1.2.3.4:99999".parse::<TargetSpec>().unwrap_err().contains("not HOST:PORT"));
    assert!(t.protocol_options.is_empty());
}

#[test]
fn target_specs_carry_protocol_options() {
    let t: TargetSpec =
        "pess:synod[ambivalence=pessimistic, optimistic_wait_ms=7]=127.0.0.1:7201,127.0.0.1:7202".parse().unwrap();
    assert_eq!((t.label.as_str(), t.kind), ("pess", TargetKind::Synod));
    assert_eq!(t.endpoints, vec!["127.0.0.1:7201", "127.0.0.1:7202"]);
    let want: BTreeMap<String, String> =
        [("ambivalence", "pessimistic"), ("optimistic_wait_ms", "7")].map(|(k, v)| (k.into(), v.into())).into();
    assert_eq!(t.protocol_options, want);
    // ... and the client policy is built with them.
    let opts = t.client_options(3, None);
    assert_eq!((opts.home, &opts.client_config().options), (3, &want));
    assert!(t.to_string().contains("[ambivalence=pessimistic,optimistic_wait_ms=7]"), "{t}");
    let t: TargetSpec = "synod[x=1]=127.0.0.1:7201".parse().unwrap();
    assert_eq!((t.label.as_str(), t.protocol_options.len()), ("synod", 1));
    assert!("synod[]=127.0.0.1:1".parse::<TargetSpec>().unwrap_err().contains("empty `[]`"));
    assert!("synod[x]=127.0.0.1:1".parse::<TargetSpec>().unwrap_err().contains("expected KEY=VALUE"));
    assert!("synod[x=1,x=2]=127.0.0.1:1".parse::<TargetSpec>().unwrap_err().contains("given twice"));
    assert!("synod[x=1=127.0.0.1:1".parse::<TargetSpec>().unwrap_err().contains("expected KIND"));
    assert!("synod[x=1]y=127.0.0.1:1".parse::<TargetSpec>().unwrap_err().contains("expected KIND"));
    assert!("redis[x=1]=127.0.0.1:1".parse::<TargetSpec>().unwrap_err().contains("synod targets only"));
}

/// Three fake IDEM replicas (ids 1–3, reporting protocol `idem`): replicas 1 and 2 reject
/// every request durably at once, replica 3 executes it after `slow`. An ambivalent outcome
/// (n − f = 2 REJECTs) then ends a pessimistic client's request at once, while an optimistic
/// one that waits longer than `slow` gets the reply.
async fn fake_idem(slow: std::time::Duration) -> Vec<String> {
    let mut addrs = Vec::new();
    for id in 1..=3 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(listener.local_addr().unwrap().to_string());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                tokio::spawn(serve_idem(stream, id, slow));
            }
        });
    }
    addrs
}

async fn serve_idem(stream: TcpStream, id: synod_core::NodeId, slow: std::time::Duration) {
    let (mut r, w) = stream.into_split();
    let w = Arc::new(tokio::sync::Mutex::new(w));
    let mut magic = [0u8; 8];
    if r.read_exact(&mut magic).await.is_err() || &magic != CLIENT_MAGIC {
        return;
    }
    let mut buf = BytesMut::new();
    loop {
        let payload = loop {
            if let Some(p) = wire::take_frame(&mut buf, 1 << 24).unwrap() {
                break p;
            }
            if r.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                return;
            }
        };
        let (out, delay) = match wire::decode_payload::<ClientMsg>(&payload).unwrap() {
            ClientMsg::Auth { .. } => continue,
            ClientMsg::Status => {
                let status = Status {
                    id,
                    protocol: "idem".into(),
                    role: if id == 1 { Role::Leader } else { Role::Follower },
                    ballot: "0".into(),
                    leader: Some(1),
                    commit_index: 0,
                    execute_index: 0,
                    extra: Default::default(),
                };
                (ServerMsg::Status(status), None)
            }
            ClientMsg::Request { cmd, .. } => {
                let (body, delay) = if id == 3 {
                    (ReplyBody::Done(OpResult::Done), Some(slow))
                } else {
                    (ReplyBody::Rejected { reason: "over the reject threshold".into() }, None)
                };
                (ServerMsg::Reply(Reply { client: cmd.client, seq: cmd.seq, from: id, body }), delay)
            }
        };
        let w = w.clone();
        tokio::spawn(async move {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            let _ = w.lock().await.write_all(&wire::frame(&out)).await;
        });
    }
}

#[tokio::test]
async fn protocol_options_reach_the_client_policy() {
    let slow = std::time::Duration::from_millis(1500);
    let addrs = fake_idem(slow).await;
    let put = BenchOp::Update { key: key_for(1, 23), value: Bytes::from_static(b"v") };
    let run = |spec: String| {
        let put = put.clone();
        async move {
            let spec: TargetSpec = spec.parse().unwrap();
            let mut t = spec.connect(0, 23).await.unwrap();
            let start = std::time::Instant::now();
            let outcome = t.execute(&put).await.unwrap();
            (outcome, start.elapsed())
        }
    };
    let eps = addrs.join(",");
    // Pessimistic (the option reaches IdemPolicy): gives up at n − f = 2 REJECTs, before the
    // slow reply.
    let (outcome, took) = run(format!("synod[ambivalence=pessimistic]={eps}")).await;
    assert!(matches!(outcome, Outcome::Ambivalent(_)), "{outcome:?}");
    assert!(took < slow, "pessimistic client waited {took:?}");
    // Optimistic with a wait longer than the slow replica: the reply arrives in the wait.
    // Without the option (the default 5 ms wait) this would be ambivalent.
    let (outcome, took) = run(format!("synod[optimistic_wait_ms=20000]={eps}")).await;
    assert_eq!(outcome, Outcome::Ok, "after {took:?}");
    assert!(took >= slow, "{took:?}");
    // The default: optimistic, 5 ms, gives up before the slow reply.
    let (outcome, took) = run(format!("synod={eps}")).await;
    assert!(matches!(outcome, Outcome::Ambivalent(_)), "{outcome:?}");
    assert!(took < slow, "{took:?}");
}

#[tokio::test]
async fn synod_target_maps_ycsb_ops_to_kv_ops() {
    let (addr, log) = fake_synod().await;
    let spec: TargetSpec = format!("synod={addr}").parse().unwrap();
    let mut t = spec.connect(0, 23).await.unwrap();
    for op in ops() {
        assert_eq!(t.execute(&op).await.unwrap(), Outcome::Ok, "{op:?}");
    }
    assert_eq!(*log.lock().unwrap(), vec!["put", "get", "put", "scan 7", "get", "put"]);
    let refused = BenchOp::Update { key: Bytes::from_static(b"refuse"), value: Bytes::from_static(b"v") };
    assert!(matches!(t.execute(&refused).await.unwrap(), Outcome::Rejected(r) if r.contains("too big")));
}

#[tokio::test]
async fn redis_target_maps_ycsb_ops_to_commands() {
    let (addr, log) = fake_redis().await;
    let spec: TargetSpec = format!("redis={addr}").parse().unwrap();
    let mut t = spec.connect(0, 23).await.unwrap();
    for op in ops() {
        assert_eq!(t.execute(&op).await.unwrap(), Outcome::Ok, "{op:?}");
    }
    assert_eq!(*log.lock().unwrap(), vec!["SET", "GET", "SET", "MGET 7", "GET", "SET"]);
    let busy = BenchOp::Read { key: Bytes::from_static(b"busy") };
    assert!(matches!(t.execute(&busy).await.unwrap(), Outcome::Rejected(_)));
    let bad = BenchOp::Read { key: Bytes::from_static(b"bad") };
    assert!(matches!(t.execute(&bad).await.unwrap(), Outcome::Error(e) if e.contains("bad key")));
}

#[tokio::test]
async fn unreachable_targets_fail_to_connect_clearly() {
    // A port nobody listens on: bind, learn the port, close.
    let port = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
    let spec: TargetSpec = format!("redis=127.0.0.1:{port}").parse().unwrap();
    let e = spec.connect(0, 23).await.err().expect("nothing listens there").to_string();
    assert!(e.contains("cannot connect to redis"), "{e}");
}

#[test]
fn etcd_errors_map_to_outcomes() {
    let status = |code| tonic::Status::new(code, "x");
    assert!(matches!(etcd_outcome(status(tonic::Code::ResourceExhausted)), Ok(Outcome::Rejected(_))));
    assert!(matches!(etcd_outcome(status(tonic::Code::Internal)), Ok(Outcome::Error(_))));
    assert!(matches!(etcd_outcome(status(tonic::Code::Unavailable)), Err(TargetError::Transport(_))));
    assert!(matches!(
        etcd_outcome(tonic::Status::new(tonic::Code::Unknown, "transport error")),
        Err(TargetError::Transport(_))
    ));
}

#[test]
fn sharded_specs_parse() {
    let t: TargetSpec = "cw:synod=127.0.0.1:1,127.0.0.1:2;127.0.0.1:3".parse().unwrap();
    assert_eq!(t.shards, vec![vec!["127.0.0.1:1", "127.0.0.1:2"], vec!["127.0.0.1:3"]]);
    assert_eq!(t.endpoints, vec!["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]);
    let one: TargetSpec = "synod=127.0.0.1:1".parse().unwrap();
    assert!(one.shards.is_empty());
    assert!("synod=127.0.0.1:1;".parse::<TargetSpec>().unwrap_err().contains("shard 2 has no endpoints"));
    assert!("redis=127.0.0.1:1;127.0.0.1:2".parse::<TargetSpec>().unwrap_err().contains("synod targets only"));
}

#[test]
fn ycsb_keys_split_into_equal_key_ranges() {
    for key_size in [23, 10] {
        let mut count = [0usize; 5];
        let mut bounds = [(u64::MAX, 0u64); 5];
        for n in 0..10_000u64 {
            let key = key_for(n, key_size);
            let s = shard_of(&key, 5);
            count[s] += 1;
            let v: u64 = std::str::from_utf8(&key[4..]).unwrap().parse().unwrap();
            bounds[s] = (bounds[s].0.min(v), bounds[s].1.max(v));
        }
        // Disjoint ranges in key order, each with about a fifth of the records.
        for s in 0..5 {
            assert!((1_700..=2_300).contains(&count[s]), "key size {key_size}: shard {s} has {count:?}");
            if s > 0 {
                assert!(bounds[s - 1].1 < bounds[s].0, "key size {key_size}: ranges overlap: {bounds:?}");
            }
        }
    }
    assert_eq!(shard_of(b"anything", 1), 0);
    assert_eq!(shard_of(b"\x00", 4), 0);
    assert_eq!(shard_of(b"\xff\xff", 4), 3);
    assert_eq!(shard_of(b"user", 3), 1); // not a YCSB key: its bytes decide
}

#[tokio::test]
async fn sharded_target_sends_each_key_to_its_cluster() {
    let (a, log_a) = fake_synod().await;
    let (b, log_b) = fake_synod().await;
    let spec: TargetSpec = format!("synod={a};{b}").parse().unwrap();
    let mut t = spec.connect(0, 23).await.unwrap();
    let (mut to_a, mut to_b) = (0, 0);
    for n in 0..50u64 {
        let key = key_for(n, 23);
        let op = BenchOp::Update { key: key.clone(), value: Bytes::from_static(b"v") };
        assert_eq!(t.execute(&op).await.unwrap(), Outcome::Ok);
        if shard_of(&key, 2) == 0 {
            to_a += 1;
        } else {
            to_b += 1;
        }
    }
    assert!(to_a > 0 && to_b > 0, "both shards used: {to_a} / {to_b}");
    assert_eq!(log_a.lock().unwrap().iter().filter(|l| *l == "put").count(), to_a);
    assert_eq!(log_b.lock().unwrap().iter().filter(|l| *l == "put").count(), to_b);
}
