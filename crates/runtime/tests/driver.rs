//! The runtime driving a tiny test-only protocol: a single replica that persists every request
//! and applies it once durable. Checks the action contract end to end (persist → Persisted →
//! apply → reply), timers, recovery from the WAL, validation of client input, and that
//! garbage on either port closes only that connection.

mod common;

use bytes::Bytes;
use common::{closed_by_peer, cluster_configs, RawClient, Running, Session};
use std::collections::HashMap;
use std::time::Duration;
use synod_core::protocol::{decode, encode};
use synod_core::wire::{self, PeerHello, CLIENT_MAGIC, PEER_MAGIC};
use synod_core::{Action, ClientRef, Command, Ctx, Event, Op, Pos, Protocol, Reply, ReplyBody, Role, Status, TimerId};
use synod_wal::FsyncMode;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const TICK: TimerId = 1;
const TICKS: u64 = 3;

/// Single-replica "protocol": the log is the WAL.
#[derive(Default)]
struct Solo {
    next_token: u64,
    waiting: HashMap<u64, (Command, ClientRef)>,
    applied: u64,
    recovered: u64,
    ticks: u64,
}

impl Protocol for Solo {
    fn recover(&mut self, ctx: &mut Ctx<'_>, records: Vec<Bytes>) {
        for r in records {
            let cmd: Command = decode(&r).expect("own records decode");
            self.applied += 1;
            self.recovered += 1;
            ctx.apply(Pos::slot(self.applied, 0), cmd, None);
        }
        ctx.set_timer(TICK, Duration::from_millis(5));
    }

    fn on_event(&mut self, ctx: &mut Ctx<'_>, event: Event) {
        match event {
            Event::Request { client, cmd, .. } => {
                self.next_token += 1;
                ctx.persist(self.next_token, vec![encode(&cmd)]);
                self.waiting.insert(self.next_token, (cmd, client));
            }
            Event::Persisted { token } => {
                let (cmd, client) = self.waiting.remove(&token).expect("a token we persisted");
                self.applied += 1;
                ctx.push(Action::Apply { pos: Pos::slot(self.applied, 0), cmd, reply: Some(client) });
            }
            Event::Timer(TICK) => {
                self.ticks += 1;
                if self.ticks < TICKS {
                    ctx.set_timer(TICK, Duration::from_millis(5));
                }
            }
            other => panic!("unexpected event {other:?}"),
        }
    }

    fn status(&self) -> Status {
        Status {
            id: 1,
            protocol: "solo".into(),
            role: Role::Leader,
            ballot: "0".into(),
            leader: Some(1),
            commit_index: self.applied,
            execute_index: self.applied,
            extra: [("ticks".to_string(), self.ticks.to_string()), ("recovered".into(), self.recovered.to_string())]
                .into(),
        }
    }
}

fn solo_config(dir: Option<&std::path::Path>) -> synod_runtime::NodeConfig {
    let mut c = cluster_configs(1, "solo", dir, FsyncMode::Always).remove(0);
    c.limits.max_value_bytes = 16;
    c.limits.max_frame_bytes = 4096;
    c
}

async fn wait_for_status(addr: std::net::SocketAddr, what: &str, ok: impl Fn(&Status) -> bool) -> Status {
    let mut raw = RawClient::connect(addr).await;
    for _ in 0..200 {
        let st = raw.status().await;
        if ok(&st) {
            return st;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("status never showed {what}");
}

#[tokio::test]
async fn solo_replica_persists_applies_replies_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let config = solo_config(Some(dir.path()));
    let addr = config.me().client_addr;
    let node = Running::start_with(config.clone(), Box::<Solo>::default());

    let mut s = Session::new(7, vec![addr]);
    s.put("a", "1").await;
    s.put("b", "2").await;
    assert_eq!(s.get("a").await.as_deref(), Some(&b"1"[..]));

    // Too large for limits.max_value_bytes: refused at once, never logged.
    let mut raw = RawClient::connect(addr).await;
    let big = Command {
        client: 8,
        seq: 1,
        acked_below: 1,
        now_ms: 0,
        op: Op::Put { key: Bytes::from_static(b"c"), value: Bytes::from(vec![b'x'; 17]) },
    };
    let reply: Reply = raw.request(big, Duration::from_secs(5)).await.unwrap();
    assert_eq!((reply.client, reply.seq, reply.from), (8, 1, 1));
    match reply.body {
        ReplyBody::Invalid { reason } => assert!(reason.contains("max_value_bytes"), "{reason}"),
        other => panic!("expected Invalid, got {other:?}"),
    }

    // The timer was re-armed by the protocol and fired exactly TICKS times.
    let st = wait_for_status(addr, "all ticks", |st| st.extra["ticks"] == TICKS.to_string()).await;
    assert_eq!(st.execute_index, 3);
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(raw.status().await.extra["ticks"], TICKS.to_string());
    node.stop().await.unwrap();

    // Restart: the three logged commands (not the invalid one) are recovered and re-applied.
    let node = Running::start_with(config, Box::<Solo>::default());
    let st = RawClient::connect(addr).await.status().await;
    assert_eq!(st.extra["recovered"], "3");
    let mut s = Session::new(9, vec![addr]);
    assert_eq!(s.get("b").await.as_deref(), Some(&b"2"[..]));
    node.stop().await.unwrap();
}

#[tokio::test]
async fn garbage_closes_only_that_connection() {
    let config = solo_config(None);
    let (peer, client) = (config.me().peer_addr, config.me().client_addr);
    let node = Running::start_with(config, Box::<Solo>::default());
    let mut s = Session::new(1, vec![client]);
    s.put("k", "v").await; // the node is up

    let attempts: Vec<(&str, std::net::SocketAddr, Vec<u8>)> = vec![
        ("peer: not the magic", peer, b"GET / HTTP/1.1\r\n\r\n".to_vec()),
        ("peer: oversized hello", peer, [&PEER_MAGIC[..], &u32::MAX.to_be_bytes()].concat()),
        ("peer: garbage hello", peer, [&PEER_MAGIC[..], &[0, 0, 0, 3, 0xff, 0xff, 0xff]].concat()),
        (
            "peer: wrong cluster",
            peer,
            [
                &PEER_MAGIC[..],
                &wire::frame(&PeerHello { cluster: "other".into(), from: 2, incarnation: 1, to: 1, mac: Vec::new() }),
            ]
            .concat(),
        ),
        (
            "peer: unknown id",
            peer,
            [
                &PEER_MAGIC[..],
                &wire::frame(&PeerHello { cluster: "synod".into(), from: 42, incarnation: 1, to: 1, mac: Vec::new() }),
            ]
            .concat(),
        ),
        ("client: not the magic", client, b"*1\r\n$4\r\nPING\r\n".to_vec()),
        ("client: oversized frame", client, [&CLIENT_MAGIC[..], &[0x7f, 0xff, 0xff, 0xff]].concat()),
        ("client: garbage frame", client, [&CLIENT_MAGIC[..], &[0, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef]].concat()),
    ];
    for (what, addr, bytes) in attempts {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(&bytes).await.unwrap();
        assert!(closed_by_peer(&mut stream, Duration::from_secs(5)).await, "{what}: connection not closed");
    }

    // Still serving, on new and on existing connections.
    assert_eq!(s.get("k").await.as_deref(), Some(&b"v"[..]));
    let mut s2 = Session::new(2, vec![client]);
    s2.put("k2", "v2").await;
    assert_eq!(s2.get("k2").await.as_deref(), Some(&b"v2"[..]));
    node.stop().await.unwrap();
}
