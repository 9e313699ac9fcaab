//! Client sites for wide-area runs (EPaxos §7.2, Fig. 4): clients placed at the sites of the
//! replicas, the client-to-remote-replica latency emulated, and latency reported per site.
//!
//! - **Placement.** Client `i` is at site `i mod n` ([`site_of`]) and its home replica (the
//!   endpoint it tries first, [`crate::target::TargetSpec::connect`]) is that site's replica,
//!   so `k × n` clients are `k` clients at each site, spread exactly like the bench spreads
//!   clients over replicas.
//! - **Distance.** The replica transport emulates replica-to-replica links
//!   (`crates/runtime/src/link.rs`); a client talks to replicas over loopback. For a client to
//!   pay the wide-area trip when its protocol sends it to a remote replica (Multi-Paxos: to
//!   the leader), each site reaches every *other* site's replica through a [`DelayProxy`]: a
//!   TCP relay on 127.0.0.1 that holds every chunk for half the sites' RTT in each direction
//!   (FIFO per direction, like the TCP stream it stands for). The site's own replica is
//!   reached directly.
//! - **Per-site latency.** [`SiteTarget`] wraps a client's target and records each measured
//!   operation's latency (from the call to the answer) into its site's histogram
//!   ([`SiteRecorder`]); an operation counts when it starts inside the measurement window,
//!   as in the driver. Operations cut off by the driver's `op_timeout` are not seen here (they
//!   are errors in the run's overall summary).

use crate::stats::{ClassStats, ClassSummary, Completion};
use crate::target::{Outcome, Target, TargetError};
use crate::workload::BenchOp;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The site of client `client` among `sites` sites.
pub fn site_of(client: usize, sites: usize) -> usize {
    client % sites.max(1)
}

/// A TCP relay to `upstream` that delays every byte by `one_way` in each direction. Dropping
/// it stops accepting; open relays end with their connections.
pub struct DelayProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl DelayProxy {
    /// Listen on 127.0.0.1 (a port the OS hands out) and relay to `upstream`.
    pub async fn start(upstream: String, one_way: Duration) -> std::io::Result<DelayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else { return };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::spawn(relay(cr, sw, one_way));
                    tokio::spawn(relay(sr, cw, one_way));
                });
            }
        });
        Ok(DelayProxy { addr, accept })
    }
}

/// Copy `from` to `to`, each chunk released `delay` after it was read, in order.
async fn relay(mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf, delay: Duration) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if tx.send((Instant::now() + delay, buf[..n].to_vec())).is_err() {
                    break;
                }
            }
        }
    }
    drop(tx);
    let _ = writer.await;
}

/// Latency per client site over the measurement window.
pub struct SiteRecorder {
    /// Start of measurement, set by the driver (`RunConfig::start_slot`).
    start: Arc<OnceLock<std::time::Instant>>,
    /// Length of the measurement window.
    duration: Duration,
    sites: Mutex<Vec<(ClassStats, usize)>>,
}

impl SiteRecorder {
    /// A recorder for `sites` sites of `clients_per_site` clients each, measuring the
    /// operations that start within `duration` after the instant `start` will hold.
    pub fn new(
        sites: usize,
        clients_per_site: usize,
        start: Arc<OnceLock<std::time::Instant>>,
        duration: Duration,
    ) -> SiteRecorder {
        SiteRecorder {
            start,
            duration,
            sites: Mutex::new((0..sites).map(|_| (ClassStats::new(3), clients_per_site)).collect()),
        }
    }

    /// Record one operation of a client at `site` that started at `started`.
    pub fn record(&self, site: usize, started: std::time::Instant, latency: Duration, completion: Completion) {
        let Some(&start) = self.start.get() else { return };
        if started < start || started >= start + self.duration {
            return;
        }
        if let Some((stats, _)) = self.sites.lock().expect("sites lock").get_mut(site) {
            stats.record(latency, completion);
        }
    }

    /// One summary per site (class = the site's name), throughput over the window.
    pub fn summaries(&self, names: &[String]) -> Vec<(ClassSummary, usize)> {
        let secs = self.duration.as_secs_f64().max(1e-9);
        self.sites
            .lock()
            .expect("sites lock")
            .iter()
            .enumerate()
            .map(|(i, (s, clients))| {
                let name = names.get(i).cloned().unwrap_or_else(|| format!("site{i}"));
                (ClassSummary::of(&name, s, secs), *clients)
            })
            .collect()
    }
}

/// `site,clients,ok,errors,ops_s,p50_ms,p90_ms,p99_ms,p999_ms,max_ms` rows.
pub fn sites_csv(rows: &[(ClassSummary, usize)]) -> String {
    let mut out = String::from("site,clients,ok,rejected,errors,ops_s,p50_ms,p90_ms,p99_ms,p999_ms,max_ms\n");
    for (c, clients) in rows {
        out.push_str(&format!(
            "{},{},{},{},{},{:.1},{:.3},{:.3},{:.3},{:.3},{:.3}\n",
            c.class,
            clients,
            c.ok,
            c.rejected + c.ambivalent,
            c.errors,
            c.throughput,
            c.p50_ms,
            c.p90_ms,
            c.p99_ms,
            c.p999_ms,
            c.max_ms
        ));
    }
    out
}

/// A client's target that also records its latency under its site (no recorder: just the
/// target, so one driver call serves runs with and without sites).
pub struct SiteTarget<T> {
    inner: T,
    site: usize,
    recorder: Option<Arc<SiteRecorder>>,
}

impl<T> SiteTarget<T> {
    pub fn new(inner: T, site: usize, recorder: Option<Arc<SiteRecorder>>) -> SiteTarget<T> {
        SiteTarget { inner, site, recorder }
    }
}

impl<T: Target> Target for SiteTarget<T> {
    async fn execute(&mut self, op: &BenchOp) -> Result<Outcome, TargetError> {
        let Some(recorder) = &self.recorder else { return self.inner.execute(op).await };
        let started = std::time::Instant::now();
        let r = self.inner.execute(op).await;
        let completion = match &r {
            Ok(Outcome::Ok) => Completion::Ok,
            Ok(Outcome::Rejected(_)) => Completion::Rejected,
            Ok(Outcome::Ambivalent(_)) => Completion::Ambivalent,
            Ok(Outcome::Error(_)) | Err(_) => Completion::Error,
        };
        recorder.record(self.site, started, started.elapsed(), completion);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_proxy_delays_each_direction() {
        // An echo server behind a 30 ms one-way proxy: a round trip takes ≥ 60 ms.
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo_addr = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = [0u8; 16];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    return;
                }
                s.write_all(&buf[..n]).await.unwrap();
            }
        });
        let proxy = DelayProxy::start(echo_addr.to_string(), Duration::from_millis(30)).await.unwrap();
        let mut c = TcpStream::connect(proxy.addr).await.unwrap();
        for round in 0..3u8 {
            let t = std::time::Instant::now();
            c.write_all(&[round, 1, 2]).await.unwrap();
            let mut got = [0u8; 3];
            c.read_exact(&mut got).await.unwrap();
            let rtt = t.elapsed();
            assert_eq!(got, [round, 1, 2], "bytes pass unchanged and in order");
            assert!(rtt >= Duration::from_millis(60), "round trip {rtt:?} < 2 × 30 ms");
            assert!(rtt < Duration::from_millis(1000), "round trip {rtt:?}");
        }
    }

    #[test]
    fn sites_record_only_the_measurement_window() {
        let slot = Arc::new(OnceLock::new());
        let r = SiteRecorder::new(2, 10, slot.clone(), Duration::from_secs(10));
        let t0 = std::time::Instant::now();
        r.record(0, t0, Duration::from_millis(5), Completion::Ok);
        assert_eq!(r.summaries(&[])[0].0.ok, 0, "nothing before the start is known");
        slot.set(t0 + Duration::from_secs(1)).unwrap();
        r.record(0, t0, Duration::from_millis(5), Completion::Ok); // warm-up
        r.record(0, t0 + Duration::from_secs(2), Duration::from_millis(70), Completion::Ok);
        r.record(1, t0 + Duration::from_secs(2), Duration::from_millis(150), Completion::Ok);
        r.record(1, t0 + Duration::from_secs(3), Duration::from_millis(150), Completion::Error);
        r.record(1, t0 + Duration::from_secs(12), Duration::from_millis(9), Completion::Ok); // after
        let names = vec!["CA".to_string(), "VA".to_string()];
        let s = r.summaries(&names);
        assert_eq!((s[0].0.class.as_str(), s[0].0.ok, s[0].1), ("CA", 1, 10));
        assert!((s[0].0.p50_ms - 70.0).abs() < 1.0, "{}", s[0].0.p50_ms);
        assert_eq!((s[1].0.ok, s[1].0.errors), (1, 1));
        assert!((s[1].0.p50_ms - 150.0).abs() < 1.0);
        let csv = sites_csv(&s);
        assert!(csv.lines().nth(2).unwrap().starts_with("VA,10,1,0,1,"), "{csv}");
        assert_eq!((site_of(0, 3), site_of(4, 3), site_of(5, 3)), (0, 1, 2));
    }
}
