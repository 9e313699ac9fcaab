//! Redirect and retry logic against tiny fake replicas that speak the wire protocol.

use super::*;
use std::sync::{Arc, Mutex};
use synod_core::client_policy::{ClientConfig, ClientCtx, ClientPolicy, Outcome, RequestMeta};
use synod_core::{Reply, Role};
use tokio::net::TcpListener;

/// How a fake replica reacts to the n-th request it receives (n counts from 0).
#[derive(Clone, Debug)]
enum React {
    Answer(ReplyBody),
    /// Close the connection without answering (as a crashing replica would).
    Drop,
    /// Read the request and never answer.
    Silent,
}

/// A fake replica: answers `Status` with its id and requests per `script`; records every
/// request it receives.
struct Fake {
    addr: String,
    seen: Arc<Mutex<Vec<Command>>>,
    metas: Arc<Mutex<Vec<RequestMeta>>>,
}

impl Fake {
    async fn start(
        id: NodeId,
        leader: Option<NodeId>,
        script: impl Fn(usize) -> React + Send + Sync + 'static,
    ) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let metas = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(script);
        let (seen2, metas2) = (seen.clone(), metas.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let (seen, metas, script) = (seen2.clone(), metas2.clone(), script.clone());
                tokio::spawn(async move { serve(stream, id, leader, seen, metas, script).await });
            }
        });
        Fake { addr, seen, metas }
    }

    fn seen(&self) -> Vec<Command> {
        self.seen.lock().unwrap().clone()
    }
}

async fn serve(
    mut stream: TcpStream,
    id: NodeId,
    leader: Option<NodeId>,
    seen: Arc<Mutex<Vec<Command>>>,
    metas: Arc<Mutex<Vec<RequestMeta>>>,
    script: Arc<impl Fn(usize) -> React>,
) {
    let mut magic = [0u8; 8];
    if stream.read_exact(&mut magic).await.is_err() || &magic != CLIENT_MAGIC {
        return;
    }
    let mut buf = BytesMut::new();
    loop {
        let payload = loop {
            if let Some(p) = wire::take_frame(&mut buf, 1 << 20).unwrap() {
                break p;
            }
            if stream.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                return;
            }
        };
        let out = match wire::decode_payload::<ClientMsg>(&payload).unwrap() {
            ClientMsg::Auth { .. } => continue, // no password in this fake
            ClientMsg::Status => ServerMsg::Status(Status {
                id,
                protocol: "fake".into(),
                role: if leader == Some(id) { Role::Leader } else { Role::Follower },
                ballot: "0".into(),
                leader,
                commit_index: 0,
                execute_index: 0,
                extra: Default::default(),
            }),
            ClientMsg::Request { cmd, meta } => {
                metas.lock().unwrap().push(meta);
                let n = {
                    let mut s = seen.lock().unwrap();
                    s.push(cmd.clone());
                    s.len() - 1
                };
                match script(n) {
                    React::Answer(body) => ServerMsg::Reply(Reply { client: cmd.client, seq: cmd.seq, from: id, body }),
                    React::Drop => return,
                    React::Silent => continue,
                }
            }
        };
        if stream.write_all(&wire::frame(&out)).await.is_err() {
            return;
        }
    }
}

fn put_op() -> Op {
    Op::Put { key: Bytes::from_static(b"k"), value: Bytes::from_static(b"v") }
}

fn fast() -> ClientOptions {
    ClientOptions {
        request_timeout: Duration::from_millis(500),
        max_retry_time: Duration::from_secs(10),
        ..Default::default()
    }
}

#[tokio::test]
async fn redirect_to_the_leader_is_followed_and_cached() {
    // Node 1 is a follower that knows node 2 leads; the client starts at node 1 because the
    // fake status of node 1 does not name a leader (so the cache cannot shortcut it).
    let follower = Fake::start(1, None, |_| React::Answer(ReplyBody::NotLeader { leader: Some(2) })).await;
    let leader = Fake::start(2, None, |_| React::Answer(ReplyBody::Done(OpResult::Done))).await;
    let mut c = Client::with_options(&[&follower.addr, &leader.addr], fast()).await.unwrap();
    assert_eq!(c.current_endpoint(), follower.addr);

    assert_eq!(c.execute(put_op()).await.unwrap(), OpResult::Done);
    let (f, l) = (follower.seen(), leader.seen());
    assert_eq!(f.len(), 1);
    assert_eq!(l.len(), 1);
    assert_eq!((f[0].client, f[0].seq), (l[0].client, l[0].seq), "the redirect keeps the session seq");
    assert_eq!(c.current_endpoint(), leader.addr);

    // The next request goes straight to the cached leader, with the next seq and the first
    // one acknowledged.
    c.put("a", "b").await.unwrap();
    assert_eq!(follower.seen().len(), 1);
    let l = leader.seen();
    assert_eq!(l.len(), 2);
    assert_eq!((l[1].seq, l[1].acked_below), (2, 2));
}

#[tokio::test]
async fn dropped_connection_is_retried_with_the_same_seq() {
    // The first request's connection is dropped (reply lost); the retry must reuse the seq.
    let node = Fake::start(1, Some(1), |n| {
        if n == 0 {
            React::Drop
        } else {
            React::Answer(ReplyBody::Done(OpResult::Deleted(true)))
        }
    })
    .await;
    let mut c = Client::with_options(&[&node.addr], fast()).await.unwrap();
    assert!(c.delete("k").await.unwrap());
    let seen = node.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0], seen[1], "the retry is the identical command (client, seq, acked_below, op)");
    assert_eq!(seen[0].seq, 1);
    assert_eq!(seen[0].client, c.client_id());
    assert_ne!(c.client_id(), 0);
}

#[tokio::test]
async fn timeout_moves_to_the_next_endpoint_with_the_same_seq() {
    let silent = Fake::start(1, None, |_| React::Silent).await;
    let good = Fake::start(2, None, |_| React::Answer(ReplyBody::Done(OpResult::Value(None)))).await;
    let mut c = Client::with_options(&[&silent.addr, &good.addr], fast()).await.unwrap();
    assert_eq!(c.get("k").await.unwrap(), None);
    assert_eq!(silent.seen().len(), 1);
    assert_eq!(good.seen().len(), 1);
    assert_eq!(silent.seen()[0], good.seen()[0]);
}

#[tokio::test]
async fn invalid_is_final_and_not_retried() {
    let node =
        Fake::start(1, Some(1), |_| React::Answer(ReplyBody::Invalid { reason: "value too large".into() })).await;
    let mut c = Client::with_options(&[&node.addr], fast()).await.unwrap();
    let err = c.execute(put_op()).await.unwrap_err();
    assert!(matches!(&err, ClientError::Invalid(r) if r == "value too large"), "{err}");
    // Give a wrongly retrying client the chance to send again before counting.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(node.seen().len(), 1);
}

#[tokio::test]
async fn rejected_and_leaderless_are_retried_until_done() {
    let node = Fake::start(1, Some(1), |n| match n {
        0 => React::Answer(ReplyBody::Rejected { reason: "overloaded".into() }),
        1 => React::Answer(ReplyBody::NotLeader { leader: None }),
        _ => React::Answer(ReplyBody::Done(OpResult::Done)),
    })
    .await;
    let mut c = Client::with_options(&[&node.addr], fast()).await.unwrap();
    c.put("k", "v").await.unwrap();
    let seen = node.seen();
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|s| s.seq == 1));
}

#[tokio::test]
async fn gives_up_after_max_retry_time_saying_the_outcome_is_unknown() {
    let node = Fake::start(1, Some(1), |_| React::Drop).await;
    let opts = ClientOptions {
        request_timeout: Duration::from_millis(200),
        max_retry_time: Duration::from_millis(600),
        ..Default::default()
    };
    let mut c = Client::with_options(&[&node.addr], opts).await.unwrap();
    let start = Instant::now();
    let err = c.execute(put_op()).await.unwrap_err();
    assert!(matches!(err, ClientError::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("may or may not have been applied"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(5));
    let seen = node.seen();
    assert!(seen.len() >= 2, "retried: {}", seen.len());
    assert!(seen.iter().all(|s| s.seq == 1));
    // The abandoned seq is never reused; the next request acknowledges it.
    let _ = c.execute(put_op()).await;
    let last = node.seen().last().cloned().unwrap();
    assert_eq!((last.seq, last.acked_below), (2, 2));
}

#[tokio::test]
async fn connect_needs_one_reachable_endpoint() {
    // A port nobody listens on: bind, then drop the listener.
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().to_string()
    };
    let opts = ClientOptions {
        request_timeout: Duration::from_millis(200),
        max_retry_time: Duration::from_millis(300),
        ..Default::default()
    };
    let err = Client::with_options(&[&dead], opts.clone()).await.unwrap_err();
    assert!(matches!(err, ClientError::NoReplicaReachable { .. }), "{err}");
    assert!(err.to_string().contains(&dead), "{err}");
    assert!(matches!(Client::with_options(&[] as &[&str], opts).await, Err(ClientError::NoEndpoints)));
}

#[tokio::test]
async fn status_all_reports_down_endpoints() {
    let node = Fake::start(7, Some(7), |_| React::Silent).await;
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().to_string()
    };
    let all = status_all(&[&node.addr, &dead], Duration::from_millis(500)).await;
    assert_eq!(all[0].1.as_ref().unwrap().id, 7);
    assert!(matches!(&all[1].1, Err(ClientError::Unreachable { endpoint, .. }) if *endpoint == dead));
}

/// A multicast policy in the style of IDEM's clients (§5.3): send to every replica; the first
/// `Done` wins; a reject or an unreachable replica counts against the request; when all `n`
/// replicas count against it, it is rejected for good; when the attempt timer fires with
/// fewer, it is rejected ambivalently (it may still execute). Stamps `sent_at` and an
/// extension on every send.
struct Multicast {
    against: std::collections::BTreeSet<NodeId>,
}

impl ClientPolicy for Multicast {
    fn begin(&mut self, cx: &mut ClientCtx<'_>, _cmd: &Command) {
        self.against.clear();
        cx.send_all(RequestMeta { sent_at: cx.now, ext: Bytes::from_static(b"attempt-1") });
        cx.set_timer(1, Duration::from_millis(300));
    }
    fn on_reply(&mut self, cx: &mut ClientCtx<'_>, reply: Reply) {
        match reply.body {
            ReplyBody::Done(r) => cx.finish(Outcome::Done(r)),
            ReplyBody::Rejected { .. } => self.count(cx, reply.from),
            _ => {}
        }
    }
    fn on_timer(&mut self, cx: &mut ClientCtx<'_>, _id: u64) {
        let reason = format!("{} of {} replicas refused", self.against.len(), cx.members.len());
        cx.finish(Outcome::Rejected { definitive: false, reason });
    }
    fn on_unreachable(&mut self, cx: &mut ClientCtx<'_>, node: NodeId) {
        self.count(cx, node);
    }
}

impl Multicast {
    fn count(&mut self, cx: &mut ClientCtx<'_>, node: NodeId) {
        self.against.insert(node);
        if self.against.len() == cx.members.len() {
            cx.cancel_timer(1);
            cx.finish(Outcome::Rejected { definitive: true, reason: "every replica refused".into() });
        }
    }
}

fn multicast(_: &ClientConfig) -> Box<dyn ClientPolicy> {
    Box::new(Multicast { against: Default::default() })
}

fn multicast_opts() -> ClientOptions {
    ClientOptions { policy: multicast, ..fast() }
}

fn reject() -> React {
    React::Answer(ReplyBody::Rejected { reason: "overloaded".into() })
}

#[tokio::test]
async fn a_multicast_policy_reaches_every_replica_once_with_its_metadata() {
    let a = Fake::start(1, None, |_| reject()).await;
    let b = Fake::start(2, None, |_| React::Answer(ReplyBody::Done(OpResult::Done))).await;
    let c3 = Fake::start(3, None, |_| reject()).await;
    let mut c = Client::with_options(&[&a.addr, &b.addr, &c3.addr], multicast_opts()).await.unwrap();
    c.put("k", "v").await.unwrap();
    for f in [&a, &b, &c3] {
        let seen = f.seen();
        assert_eq!(seen.len(), 1, "one copy per replica");
        assert_eq!((seen[0].client, seen[0].seq), (c.client_id(), 1));
        let meta = f.metas.lock().unwrap()[0].clone();
        assert_eq!(meta.ext, Bytes::from_static(b"attempt-1"));
        assert!(meta.sent_at > Time::ZERO, "the policy stamped its clock");
    }
    // The connections stay open and are reused: the next request reaches all three again.
    c.put("k", "w").await.unwrap();
    assert!([&a, &b, &c3].iter().all(|f| f.seen().len() == 2));
}

#[tokio::test]
async fn all_replicas_rejecting_is_a_definitive_reject() {
    let a = Fake::start(1, None, |_| reject()).await;
    let b = Fake::start(2, None, |_| reject()).await;
    // The third one drops the connection: unreachable counts against the request too.
    let c3 = Fake::start(3, None, |_| React::Drop).await;
    let mut c = Client::with_options(&[&a.addr, &b.addr, &c3.addr], multicast_opts()).await.unwrap();
    let err = c.put("k", "v").await.unwrap_err();
    assert!(matches!(&err, ClientError::Rejected { definitive: true, .. }), "{err}");
    assert!(err.never_applied());
    assert!(err.to_string().contains("never applied"), "{err}");
}

#[tokio::test]
async fn a_silent_replica_leaves_the_reject_ambivalent() {
    let a = Fake::start(1, None, |_| reject()).await;
    let b = Fake::start(2, None, |_| reject()).await;
    let c3 = Fake::start(3, None, |_| React::Silent).await;
    let mut c = Client::with_options(&[&a.addr, &b.addr, &c3.addr], multicast_opts()).await.unwrap();
    let err = c.put("k", "v").await.unwrap_err();
    assert!(matches!(&err, ClientError::Rejected { definitive: false, reason } if reason.contains("2 of 3")), "{err}");
    assert!(!err.never_applied());
    assert!(err.to_string().contains("may or may not"), "{err}");
}

#[tokio::test]
async fn the_home_policy_stays_home_and_fails_over() {
    let a = Fake::start(1, None, |_| React::Answer(ReplyBody::Done(OpResult::Done))).await;
    let b = Fake::start(2, None, |_| React::Drop).await;
    let opts = ClientOptions { home: 1, policy: synod_core::client_policy::home_policy, ..fast() };
    let mut c = Client::with_options(&[&a.addr, &b.addr], opts).await.unwrap();
    c.put("k", "v").await.unwrap();
    assert_eq!(b.seen().len(), 1, "home first");
    assert_eq!(a.seen().len(), 1, "then the next replica");
    c.put("k", "w").await.unwrap();
    assert_eq!((a.seen().len(), b.seen().len()), (2, 1), "and it stays there");
}
