//! Helpers shared by the integration tests: free loopback ports, cluster configs, a minimal
//! raw client speaking `synod_core::wire`, and a minimal HTTP GET.

#![allow(dead_code)]

use bytes::{Bytes, BytesMut};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use synod_core::wire::{self, ClientMsg, ServerMsg, CLIENT_MAGIC};
use synod_core::{Command, Op, OpResult, Reply, ReplyBody, Status};
use synod_runtime::{Member, NodeConfig};
use synod_wal::FsyncMode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// `n` distinct free loopback addresses (bound together, then released).
pub fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let listeners: Vec<_> = (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    listeners.iter().map(|l| l.local_addr().unwrap()).collect()
}

/// Configs of an `n`-replica cluster on loopback; `data` = WAL parent dir (None: in memory).
pub fn cluster_configs(n: u32, protocol: &str, data: Option<&Path>, fsync: FsyncMode) -> Vec<NodeConfig> {
    let addrs = free_addrs(3 * n as usize);
    let members: Vec<Member> = (0..n)
        .map(|i| {
            let a = &addrs[3 * i as usize..];
            Member { id: i + 1, peer_addr: a[0], client_addr: a[1], admin_addr: a[2], resp_addr: None }
        })
        .collect();
    (1..=n)
        .map(|id| {
            let toml = format!("id = {id}\nprotocol = \"{protocol}\"\nmembers = []\n");
            let mut c: NodeConfig = toml::from_str(&toml).unwrap();
            c.members = members.clone();
            c.fsync = fsync;
            match data {
                Some(d) => c.data_dir = Some(d.join(format!("node{id}"))),
                None => c.in_memory = true,
            }
            c.params.heartbeat_ms = 20;
            c.params.election_timeout_min_ms = 150;
            c.params.election_timeout_max_ms = 300;
            c
        })
        .collect()
}

/// A replica running in this process; `stop` shuts it down and returns what `run` returned.
pub struct Running {
    pub config: NodeConfig,
    stop: Option<oneshot::Sender<()>>,
    handle: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    pub fn start(config: NodeConfig) -> Running {
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(synod_runtime::run(config.clone(), async move {
            let _ = rx.await;
        }));
        Running { config, stop: Some(tx), handle }
    }

    pub fn start_with(config: NodeConfig, protocol: Box<dyn synod_core::Protocol>) -> Running {
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(synod_runtime::run_protocol(config.clone(), protocol, async move {
            let _ = rx.await;
        }));
        Running { config, stop: Some(tx), handle }
    }

    pub fn client_addr(&self) -> SocketAddr {
        self.config.me().client_addr
    }

    pub async fn stop(mut self) -> anyhow::Result<()> {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(10), self.handle).await.expect("replica stops in time").unwrap()
    }
}

/// A raw native-protocol connection.
pub struct RawClient {
    stream: TcpStream,
    buf: BytesMut,
}

impl RawClient {
    /// Connect, retrying while the replica is still binding.
    pub async fn connect(addr: SocketAddr) -> RawClient {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match TcpStream::connect(addr).await {
                Ok(mut stream) => {
                    stream.write_all(CLIENT_MAGIC).await.unwrap();
                    return RawClient { stream, buf: BytesMut::new() };
                }
                Err(e) if Instant::now() > deadline => panic!("cannot connect to {addr}: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    pub async fn send(&mut self, msg: &ClientMsg) -> std::io::Result<()> {
        self.stream.write_all(&wire::frame(msg)).await
    }

    /// The next message, or None on close / timeout.
    pub async fn recv(&mut self, timeout: Duration) -> Option<ServerMsg> {
        let fut = async {
            loop {
                if let Some(f) = wire::take_frame(&mut self.buf, 64 << 20).unwrap() {
                    return Some(wire::decode_payload::<ServerMsg>(&f).unwrap());
                }
                self.buf.reserve(4096);
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(timeout, fut).await.ok().flatten()
    }

    pub async fn request(&mut self, cmd: Command, timeout: Duration) -> Option<Reply> {
        self.send(&ClientMsg::Request { cmd, meta: Default::default() }).await.ok()?;
        match self.recv(timeout).await? {
            ServerMsg::Reply(r) => Some(r),
            ServerMsg::Status(s) => panic!("status instead of a reply: {s:?}"),
            ServerMsg::Refused { reason } => panic!("connection refused: {reason}"),
        }
    }

    pub async fn status(&mut self) -> Status {
        self.send(&ClientMsg::Status).await.unwrap();
        match self.recv(Duration::from_secs(5)).await.expect("status reply") {
            ServerMsg::Status(s) => s,
            other => panic!("expected status, got {other:?}"),
        }
    }
}

/// One client session that finds the leader by following `NotLeader` and retries (same seq)
/// on timeouts and connection errors.
pub struct Session {
    pub id: u64,
    next_seq: u64,
    addrs: Vec<SocketAddr>,
    current: usize,
    conn: Option<RawClient>,
    /// `NotLeader` redirects followed (replica ids are 1..=n, in the order of `addrs`).
    pub redirects: u64,
}

impl Session {
    pub fn new(id: u64, addrs: Vec<SocketAddr>) -> Session {
        Session { id, next_seq: 1, addrs, current: 0, conn: None, redirects: 0 }
    }

    pub async fn execute(&mut self, op: Op) -> OpResult {
        let seq = self.next_seq;
        self.next_seq += 1;
        let cmd = Command { client: self.id, seq, acked_below: seq, now_ms: 0, op };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.conn.is_none() {
                let addr = self.addrs[self.current];
                if let Ok(Ok(mut stream)) = tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(addr)).await
                {
                    if stream.write_all(CLIENT_MAGIC).await.is_ok() {
                        self.conn = Some(RawClient { stream, buf: BytesMut::new() });
                    }
                }
                if self.conn.is_none() {
                    self.current = (self.current + 1) % self.addrs.len();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
            let reply = self.conn.as_mut().unwrap().request(cmd.clone(), Duration::from_secs(2)).await;
            match reply.map(|r| r.body) {
                Some(ReplyBody::Done(result)) => return result,
                Some(ReplyBody::NotLeader { leader: Some(l) }) => {
                    self.redirects += 1;
                    self.conn = None;
                    self.current = (l as usize - 1) % self.addrs.len();
                }
                Some(ReplyBody::Invalid { reason }) => panic!("invalid request: {reason}"),
                _ => {
                    // Election in progress, rejected, timeout or connection lost: next replica.
                    self.conn = None;
                    self.current = (self.current + 1) % self.addrs.len();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        panic!("request {cmd:?} not answered within 30 s");
    }

    pub async fn put(&mut self, key: &str, value: &str) {
        let op =
            Op::Put { key: Bytes::copy_from_slice(key.as_bytes()), value: Bytes::copy_from_slice(value.as_bytes()) };
        assert_eq!(self.execute(op).await, OpResult::Done);
    }

    pub async fn get(&mut self, key: &str) -> Option<Bytes> {
        match self.execute(Op::Get { key: Bytes::copy_from_slice(key.as_bytes()) }).await {
            OpResult::Value(v) => v,
            other => panic!("get {key}: unexpected {other:?}"),
        }
    }
}

/// A minimal HTTP/1.1 GET; returns (status code, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    http(addr, "GET", path, "").await
}

/// A minimal HTTP/1.1 request with a JSON body; returns (status code, body).
pub async fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut stream = loop {
        match TcpStream::connect(addr).await {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => panic!("cannot connect to {addr}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let code: u16 = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (code, body)
}

/// Poll `addr`'s status until its execute index reaches `target`; panics after `within`.
pub async fn wait_executed(addr: SocketAddr, target: u64, within: Duration) -> Status {
    let mut raw = RawClient::connect(addr).await;
    let deadline = Instant::now() + within;
    loop {
        let st = raw.status().await;
        if st.execute_index >= target {
            return st;
        }
        assert!(Instant::now() < deadline, "replica at {addr} stuck at {} < {target}", st.execute_index);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether the peer closed the connection within `timeout` (reads return EOF or an error).
pub async fn closed_by_peer(stream: &mut TcpStream, timeout: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let fut = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(timeout, fut).await.unwrap_or(false)
}
