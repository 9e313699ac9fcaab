//! fsync=always: kill -9 every replica in the middle of a stream of writes; after a restart
//! every acknowledged write is there.

mod common;

use common::{Cluster, PATIENCE};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use synod_client::{Client, ClientOptions};
use synod_wal::FsyncMode;

const CLIENTS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_puts_survive_killing_every_replica() {
    let mut cluster = Cluster::start(3, FsyncMode::Always, |_| {}).await;
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();

    // Several sessions write unique keys as fast as they can; only acknowledged ones are
    // recorded. Their retry time is short so they give up once the cluster is gone.
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
    for (k, v) in &acked {
        let got = client.get(k.clone()).await.unwrap_or_else(|e| panic!("get {k}: {e}"));
        assert_eq!(got.as_deref(), Some(v.as_bytes()), "acknowledged put of {k} lost\n{}", cluster.logs());
    }
    eprintln!("{} acknowledged puts from {CLIENTS} clients all survived", acked.len());
}
