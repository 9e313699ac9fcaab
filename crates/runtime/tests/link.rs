//! Link emulation and the admin fault API (docs/faults.md).
//!
//! Transport level: one outbound task towards a bare listener, so each test controls exactly
//! what is sent and times what arrives (bandwidth, block, delay, loss, FIFO across a heal).
//! Replica level: the fault API over HTTP (bad bodies, state), a 3-replica MultiPaxos cluster
//! whose leader is cut off and healed, and the clock offset as the protocol sees it.

mod common;

use bytes::{Bytes, BytesMut};
use common::{cluster_configs, http, RawClient, Running, Session};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use synod_core::wire::{self, PeerHello, PEER_MAGIC};
use synod_core::{Action, Command, Ctx, Event, Op, Pos, Protocol, ReplyBody, Role, Status};
use synod_runtime::link::{Link, LinkSpec};
use synod_runtime::node::Clock;
use synod_runtime::transport::{self, Identity, PeerFrame, PeerSender};
use synod_wal::FsyncMode;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// The replica tests run one at a time: the metrics recorder is process-wide and they all use
/// node ids from 1.
static REPLICAS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const MAX_FRAME: usize = 4 << 20;

/// An outbound task from replica 1 to a bare listener standing for replica 2.
struct Pair {
    _tasks: JoinSet<()>,
    sender: PeerSender,
    link: Arc<Link>,
    /// The accepted connection (its preamble already read).
    stream: TcpStream,
    buf: BytesMut,
}

impl Pair {
    async fn new(cluster: &str) -> Pair {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut tasks = JoinSet::new();
        let link = Arc::new(Link::new(1, 2));
        let identity = Identity {
            me: 1,
            cluster: cluster.into(),
            max_frame_bytes: MAX_FRAME,
            incarnation: 1,
            secret: None,
            max_connections: 16,
            tls: None,
            budget: synod_runtime::budget::MemBudget::unlimited(),
        };
        let sender =
            transport::spawn_outbound(&mut tasks, identity, 2, listener.local_addr().unwrap(), 7, link.clone());
        let (mut stream, _) =
            tokio::time::timeout(Duration::from_secs(5), listener.accept()).await.expect("dialed").unwrap();
        stream.write_all(&[0u8; synod_core::wire::PEER_NONCE_BYTES]).await.unwrap(); // the challenge
        transport::read_magic(&mut stream, PEER_MAGIC, "peer").await.unwrap();
        let mut buf = BytesMut::new();
        let hello = transport::read_frame(&mut stream, &mut buf, MAX_FRAME).await.unwrap().unwrap();
        assert_eq!(wire::decode_payload::<PeerHello>(&hello).unwrap().from, 1);
        Pair { _tasks: tasks, sender, link, stream, buf }
    }

    fn send(&self, tag: u64, size: usize) {
        self.sender.send(PeerFrame { sent_at: tag, msg: Bytes::from(vec![tag as u8; size]) });
    }

    /// The next frame, or None if nothing arrives within `timeout`.
    async fn recv(&mut self, timeout: Duration) -> Option<PeerFrame> {
        let frame = tokio::time::timeout(timeout, transport::read_frame(&mut self.stream, &mut self.buf, MAX_FRAME))
            .await
            .ok()?;
        Some(wire::decode_payload(&frame.unwrap().expect("connection open")).unwrap())
    }

    /// Send one message and time its full arrival.
    async fn time_one(&mut self, tag: u64, size: usize) -> Duration {
        let started = Instant::now();
        self.send(tag, size);
        let f = self.recv(Duration::from_secs(10)).await.expect("delivered");
        assert_eq!((f.sent_at, f.msg.len()), (tag, size));
        started.elapsed()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_mbit_link_takes_about_80_ms_per_megabyte() {
    let mut pair = Pair::new("link-bandwidth").await;
    let mb = 1_000_000;
    // Uncapped: loopback moves a megabyte in a few milliseconds (best of three, as the
    // machine may be busy).
    let mut uncapped = Duration::MAX;
    for tag in 0..3 {
        uncapped = uncapped.min(pair.time_one(tag, mb).await);
    }
    pair.link.set(LinkSpec { bandwidth_mbit: Some(100.0), ..Default::default() });
    let capped = pair.time_one(10, mb).await;
    assert!(
        capped >= Duration::from_millis(70) && capped <= Duration::from_millis(250),
        "1 MB at 100 Mbit/s took {capped:?}"
    );
    assert!(uncapped < Duration::from_millis(40), "uncapped 1 MB took {uncapped:?}");
    // Messages queue behind each other on the wire: two megabytes take two slots.
    let started = Instant::now();
    pair.send(11, mb);
    pair.send(12, mb);
    for tag in [11, 12] {
        assert_eq!(pair.recv(Duration::from_secs(10)).await.unwrap().sent_at, tag);
    }
    let two = started.elapsed();
    assert!(two >= Duration::from_millis(150), "2 MB at 100 Mbit/s took {two:?}");
    eprintln!("1 MB: uncapped {uncapped:?}, at 100 Mbit/s {capped:?}; 2 MB at 100 Mbit/s {two:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_link_delivers_nothing_until_unblocked_on_the_same_connection() {
    let mut pair = Pair::new("link-block").await;
    pair.time_one(0, 10).await;
    pair.link.set(LinkSpec::blocked());
    for tag in 1..=20 {
        pair.send(tag, 100);
    }
    assert!(pair.recv(Duration::from_millis(300)).await.is_none(), "a blocked link delivered something");
    pair.link.set(LinkSpec::default());
    // Delivery resumes on the connection that stayed up; what was sent while blocked is gone.
    pair.send(21, 100);
    let f = pair.recv(Duration::from_secs(5)).await.expect("delivered once unblocked");
    assert_eq!(f.sent_at, 21);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_is_added_fifo_survives_a_heal_and_loss_1_drops_everything() {
    let mut pair = Pair::new("link-delay").await;
    pair.link.set(LinkSpec { delay_ms: 100.0, ..Default::default() });
    let delayed = pair.time_one(1, 10).await;
    assert!(delayed >= Duration::from_millis(100), "{delayed:?}");
    assert!(delayed < Duration::from_secs(2), "{delayed:?}");

    // Healed while a message is still in the link: it is not overtaken by the next one,
    // which waits behind it.
    pair.link.set(LinkSpec { delay_ms: 300.0, ..Default::default() });
    let started = Instant::now();
    pair.send(2, 10);
    tokio::time::sleep(Duration::from_millis(100)).await; // message 2 is in the link
    pair.link.set(LinkSpec::default());
    pair.send(3, 10);
    assert_eq!(pair.recv(Duration::from_secs(5)).await.unwrap().sent_at, 2);
    assert_eq!(pair.recv(Duration::from_secs(5)).await.unwrap().sent_at, 3);
    assert!(started.elapsed() >= Duration::from_millis(300), "{:?}", started.elapsed());
    // And a normal link is fast again.
    assert!(pair.time_one(4, 10).await < Duration::from_millis(100));

    pair.link.set(LinkSpec { loss: 1.0, ..Default::default() });
    for tag in 10..60 {
        pair.send(tag, 10);
    }
    assert!(pair.recv(Duration::from_millis(300)).await.is_none(), "loss 1.0 delivered something");
    pair.link.set(LinkSpec::default());
    pair.time_one(99, 10).await; // delivered again
}

#[test]
fn clock_offsets_are_shared_by_clones_and_absolute() {
    let clock = Clock::new();
    let handle = clock.clone();
    let before = clock.now();
    handle.set_offset_nanos(3_600_000_000_000);
    let ahead = clock.now();
    assert!(ahead.since(before) >= Duration::from_secs(3600), "{before} -> {ahead}");
    handle.set_offset_nanos(-60_000_000_000);
    let behind = clock.now();
    assert!(before.since(behind) >= Duration::from_secs(59), "{before} -> {behind}");
    handle.set_offset_nanos(0);
    assert!(clock.now() >= before && clock.now().since(before) < Duration::from_secs(60));
}

async fn post_ok(addr: SocketAddr, path: &str, body: &str) -> serde_json::Value {
    let (code, reply) = http(addr, "POST", path, body).await;
    assert_eq!(code, 200, "POST {path} {body}: {reply}");
    serde_json::from_str(&reply).unwrap()
}

async fn leader_of(addrs: &[SocketAddr], among: &[u32]) -> Option<u32> {
    for (i, addr) in addrs.iter().enumerate() {
        if !among.contains(&(i as u32 + 1)) {
            continue;
        }
        let st = RawClient::connect(*addr).await.status().await;
        if st.role == Role::Leader {
            return Some(st.id);
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_is_replaced_and_catches_up_once_healed() {
    let _one_at_a_time = REPLICAS.lock().await;
    let configs = cluster_configs(3, "multipaxos", None, FsyncMode::Never);
    let client: Vec<SocketAddr> = configs.iter().map(|c| c.me().client_addr).collect();
    let admin: Vec<SocketAddr> = configs.iter().map(|c| c.me().admin_addr).collect();
    let nodes: Vec<Running> = configs.iter().cloned().map(Running::start).collect();
    let mut s = Session::new(21, client.clone());
    for i in 0..5 {
        s.put(&format!("k{i}"), "before").await;
    }
    let old = leader_of(&client, &[1, 2, 3]).await.expect("a leader");
    let old_admin = admin[old as usize - 1];

    // Bad bodies: 400 and a message naming the problem; nothing changes.
    for (path, body, expect) in [
        ("/fault/link", "not json", "bad JSON"),
        ("/fault/link", r#"{"to": "*", "loss": 2}"#, "loss"),
        ("/fault/link", r#"{"to": "*", "dealy_ms": 5}"#, "dealy_ms"),
        ("/fault/link", r#"{"to": "all", "block": true}"#, "\"*\""),
        ("/fault/link", r#"{"to": [9], "block": true}"#, "9"),
        ("/fault/link", &format!(r#"{{"to": [{old}], "block": true}}"#), "itself"),
        ("/fault/link", r#"{"to": "*", "bandwidth_mbit": 0}"#, "bandwidth_mbit"),
        ("/fault/link", r#"{"block": true}"#, "to"),
        ("/fault/clock", r#"{"offset_ms": "soon"}"#, "bad JSON"),
        ("/fault/clock", r#"{"offset_ms": 9223372036854775807}"#, "out of range"),
    ] {
        let (code, reply) = http(old_admin, "POST", path, body).await;
        assert_eq!(code, 400, "{path} {body}: {reply}");
        let v: serde_json::Value = serde_json::from_str(&reply).unwrap_or_else(|e| panic!("{reply}: {e}"));
        let error = v["error"].as_str().unwrap();
        assert!(error.contains(expect), "{body}: {error:?} should mention {expect}");
    }
    let (code, state) = http(old_admin, "GET", "/fault", "").await;
    assert_eq!(code, 200);
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert_eq!(state["clock_offset_ms"], 0);
    assert_eq!(state["links"].as_object().unwrap().len(), 2);
    assert!(state["links"].as_object().unwrap().values().all(|l| l["block"] == false && l["bandwidth_mbit"].is_null()));

    // Cut the leader off in both directions: block its outgoing links, and theirs to it.
    let state = post_ok(old_admin, "/fault/link", r#"{"to": "*", "block": true}"#).await;
    assert!(state["links"].as_object().unwrap().values().all(|l| l["block"] == true), "{state}");
    let others: Vec<u32> = (1..=3).filter(|id| *id != old).collect();
    for id in &others {
        post_ok(admin[*id as usize - 1], "/fault/link", &format!(r#"{{"to": [{old}], "block": true}}"#)).await;
    }
    // The other two elect a leader among themselves and keep serving.
    for i in 0..10 {
        s.put(&format!("k{i}"), "during").await;
    }
    let new = leader_of(&client, &others).await.expect("a new leader among the connected majority");
    assert_ne!(new, old);
    let (_, metrics) = http(old_admin, "GET", "/metrics", "").await;
    let dropped: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("synod_link_dropped_total") && l.contains("reason=\"block\""))
        .filter(|l| l.contains(&format!("node=\"{old}\"")))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert!(dropped > 0.0, "the blocked links counted their drops:\n{metrics}");

    // Heal everything: the old leader hears the new one and catches up.
    for a in &admin {
        let state = post_ok(*a, "/fault/heal", "").await;
        assert!(state["links"].as_object().unwrap().values().all(|l| l["block"] == false), "{state}");
    }
    s.put("after-heal", "yes").await;
    let target = RawClient::connect(client[new as usize - 1]).await.status().await.execute_index;
    let mut raw = RawClient::connect(client[old as usize - 1]).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = raw.status().await;
        if st.execute_index >= target && st.role != Role::Leader {
            break;
        }
        assert!(Instant::now() < deadline, "old leader stuck: {st:?}, target {target}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(s.get("k9").await.as_deref(), Some(&b"during"[..]));
    assert_eq!(s.get("after-heal").await.as_deref(), Some(&b"yes"[..]));
    for n in nodes {
        n.stop().await.unwrap();
    }
}

/// One replica that reports the clock it is shown: `ctx.now` on a 5 ms tick, and the
/// `now_ms` stamped on the last request it received.
#[derive(Default)]
struct ClockProbe {
    now_ns: u64,
    ticks: u64,
    cmd_now_ms: u64,
    applied: u64,
}

impl Protocol for ClockProbe {
    fn recover(&mut self, ctx: &mut Ctx<'_>, _records: Vec<Bytes>) {
        ctx.set_timer(1, Duration::from_millis(5));
    }

    fn on_event(&mut self, ctx: &mut Ctx<'_>, event: Event) {
        self.now_ns = ctx.now.as_nanos();
        match event {
            Event::Timer(_) => {
                self.ticks += 1;
                ctx.set_timer(1, Duration::from_millis(5));
            }
            Event::Request { client, cmd, .. } => {
                self.cmd_now_ms = cmd.now_ms;
                self.applied += 1;
                ctx.push(Action::Apply { pos: Pos::slot(self.applied, 0), cmd, reply: Some(client) });
            }
            _ => {}
        }
    }

    fn status(&self) -> Status {
        Status {
            id: 1,
            protocol: "clock-probe".into(),
            role: Role::Leader,
            ballot: "0".into(),
            leader: Some(1),
            commit_index: self.applied,
            execute_index: self.applied,
            extra: [
                ("now_ns".to_string(), self.now_ns.to_string()),
                ("ticks".to_string(), self.ticks.to_string()),
                ("cmd_now_ms".to_string(), self.cmd_now_ms.to_string()),
            ]
            .into(),
        }
    }
}

fn wall_ms() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// (the protocol's `ctx.now` in ms, ticks so far) from a fresh status.
async fn probe(raw: &mut RawClient) -> (i64, u64) {
    // Two ticks later the status reflects the current clock.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let st = raw.status().await;
    (st.extra["now_ns"].parse::<i64>().unwrap() / 1_000_000, st.extra["ticks"].parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clock_offset_moves_the_time_the_protocol_sees_but_not_its_timers() {
    let _one_at_a_time = REPLICAS.lock().await;
    let config = cluster_configs(1, "clock-probe", None, FsyncMode::Never).remove(0);
    let admin = config.me().admin_addr;
    let node = Running::start_with(config.clone(), Box::new(ClockProbe::default()));
    let mut raw = RawClient::connect(config.me().client_addr).await;
    let close = |a: i64, b: i64| (a - b).abs() < 2_000;

    let (now, ticks0) = probe(&mut raw).await;
    assert!(close(now, wall_ms()), "no offset: {now} vs wall {}", wall_ms());
    let state = post_ok(admin, "/fault/clock", r#"{"offset_ms": 3600000}"#).await;
    assert_eq!(state["clock_offset_ms"], 3_600_000);
    let started = Instant::now();
    let (now, ticks1) = probe(&mut raw).await;
    assert!(close(now, wall_ms() + 3_600_000), "+1 h: {now} vs wall {}", wall_ms());
    // Stamped on client commands too.
    let cmd = Command { client: 5, seq: 1, acked_below: 1, now_ms: 0, op: Op::Noop };
    let reply = raw.request(cmd, Duration::from_secs(5)).await.expect("answered");
    assert!(matches!(reply.body, ReplyBody::Done(_)), "{reply:?}");
    let st = raw.status().await;
    let stamped: i64 = st.extra["cmd_now_ms"].parse().unwrap();
    assert!(close(stamped, wall_ms() + 3_600_000), "command stamped {stamped}, wall {}", wall_ms());
    // Timers did not jump an hour ahead: the tick rate is unchanged (at most one per 5 ms).
    let (_, ticks2) = probe(&mut raw).await;
    let elapsed_ms = started.elapsed().as_millis() as u64;
    assert!(ticks1 >= ticks0 && ticks2 > ticks1, "ticks {ticks0} {ticks1} {ticks2}");
    assert!(ticks2 - ticks1 <= elapsed_ms / 5 + 2, "{} ticks in {elapsed_ms} ms", ticks2 - ticks1);

    post_ok(admin, "/fault/clock", r#"{"offset_ms": -60000}"#).await;
    let (now, _) = probe(&mut raw).await;
    assert!(close(now, wall_ms() - 60_000), "-1 min: {now} vs wall {}", wall_ms());
    let state = post_ok(admin, "/fault/heal", "").await;
    assert_eq!(state["clock_offset_ms"], 0);
    let (now, _) = probe(&mut raw).await;
    assert!(close(now, wall_ms()), "healed: {now} vs wall {}", wall_ms());
    node.stop().await.unwrap();
}
