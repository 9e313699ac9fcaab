//! Kill -9 every replica in the middle of a stream of writes, restart them all, and read every
//! acknowledged write back.
//!
//! A SIGKILL keeps the kernel's page cache, so by itself this passes whether or not the log
//! ever fsyncs. With `SYNOD_WAL_POWER_LOSS=1` (the WAL's test-only power-loss emulation) each
//! replica restarts with only what an fsync covered, as after a power loss of the whole
//! cluster: fsync=always must then still lose nothing acknowledged, and fsync=never does lose
//! acknowledged writes (which shows the emulation, not the page cache, decides).

mod common;

use common::{Cluster, PATIENCE};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use synod_client::{Client, ClientOptions};
use synod_wal::FsyncMode;

const CLIENTS: usize = 4;

/// Crash every replica while `CLIENTS` sessions write unique keys, restart them all; returns
/// how many puts were acknowledged and which of them read back wrong (key, expected, read).
async fn crash_all(fsync: FsyncMode, env: &[(&str, &str)]) -> (usize, Vec<(String, String, Option<String>)>) {
    let mut cluster = Cluster::start_with_env(3, fsync, env, |_| {}).await;
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();

    // Only acknowledged puts are recorded. The retry time is short so the writers give up
    // once the cluster is gone.
    let opts = ClientOptions {
        request_timeout: Duration::from_secs(1),
        max_retry_time: Duration::from_secs(3),
        ..Default::default()
    };
    let mut writers = Vec::new();
    for c in 0..CLIENTS {
        let mut client = Client::with_options(&cluster.endpoints(), opts.clone()).await.unwrap();
        let acked = acked.clone();
        writers.push(tokio::spawn(async move {
            for i in 0.. {
                let (k, v) = (format!("c{c}-{i:06}"), format!("v{c}-{i}"));
                match client.put(k.clone(), v.clone()).await {
                    Ok(()) => acked.lock().unwrap().push((k, v)),
                    Err(_) => return,
                }
            }
        }));
    }

    // Crash in the middle of the stream: once enough writes are acknowledged, while the
    // writers are still going.
    let start = Instant::now();
    while acked.lock().unwrap().len() < 200 {
        assert!(
            start.elapsed() < PATIENCE,
            "only {} puts acknowledged\n{}",
            acked.lock().unwrap().len(),
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for id in 1..=3 {
        cluster.kill9(id);
    }
    let acked_at_crash = acked.lock().unwrap().len();
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    // A put can be acknowledged while the kills are under way (by the replicas still up);
    // those count too.
    assert!(acked.len() >= acked_at_crash);

    for id in 1..=3 {
        cluster.spawn(id);
    }
    cluster.wait_for_leader(&[]).await;
    let mut client = cluster.client().await;
    let mut wrong = Vec::new();
    for (k, v) in &acked {
        let got = client.get(k.clone()).await.unwrap_or_else(|e| panic!("get {k}: {e}\n{}", cluster.logs()));
        if got.as_deref() != Some(v.as_bytes()) {
            wrong.push((k.clone(), v.clone(), got.map(|b| String::from_utf8_lossy(&b).into_owned())));
        }
    }
    (acked.len(), wrong)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_puts_survive_killing_every_replica() {
    let (acked, wrong) = crash_all(FsyncMode::Always, &[]).await;
    assert!(wrong.is_empty(), "{} of {acked} acknowledged puts lost: {:?}", wrong.len(), &wrong[..wrong.len().min(10)]);
    eprintln!("{acked} acknowledged puts from {CLIENTS} clients all survived");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_puts_survive_a_power_loss_of_every_replica_with_fsync_always() {
    let (acked, wrong) = crash_all(FsyncMode::Always, &[("SYNOD_WAL_POWER_LOSS", "1")]).await;
    assert!(wrong.is_empty(), "{} of {acked} acknowledged puts lost: {:?}", wrong.len(), &wrong[..wrong.len().min(10)]);
    eprintln!("power loss, fsync=always: {acked} acknowledged puts from {CLIENTS} clients all survived");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_loss_of_every_replica_loses_acknowledged_puts_with_fsync_never() {
    let (acked, wrong) = crash_all(FsyncMode::Never, &[("SYNOD_WAL_POWER_LOSS", "1")]).await;
    assert!(
        !wrong.is_empty(),
        "fsync=never lost none of {acked} acknowledged puts in a power loss: the emulation is not working"
    );
    // What is lost is lost whole (the key reads as absent), never replaced by another value.
    assert!(wrong.iter().all(|(_, _, got)| got.is_none()), "{:?}", &wrong[..wrong.len().min(10)]);
    eprintln!("power loss, fsync=never: {} of {acked} acknowledged puts lost, as expected", wrong.len());
}
