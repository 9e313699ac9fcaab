//! Nezha's proxies as processes: `synod local --protocol nezha --proxies 2` starts two
//! `synod proxy` processes; clients given the proxies' addresses commit through them (the
//! proxies count fast and slow commits), a proxy killed with SIGKILL loses nothing that was
//! acknowledged, and the client carries on through the other proxy. The Redis front end of
//! a proxy serves too (when redis-cli is installed).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use synod_client::{Client, ClientOptions};

mod common;

const SYNOD: &str = env!("CARGO_BIN_EXE_synod");

fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

/// The sum of a proxy status counter over `endpoints`.
async fn proxy_counter(endpoints: &[String], name: &str) -> u64 {
    let mut sum = 0;
    for (_, s) in synod_client::status_all(endpoints, Duration::from_secs(2)).await {
        if let Ok(s) = s {
            assert_eq!(s.extra.get("proxy").map(String::as_str), Some("true"), "{s:?}");
            assert_eq!(s.protocol, "nezha-proxy");
            sum += s.extra.get(name).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    sum
}

#[test]
fn nezha_through_proxy_processes_survives_a_proxy_kill() {
    // SYNOD_TEST_BASE_PORT pins the ports (base + 1..3, +101.., +201.., +301.., +401.., +501..).
    let base = std::env::var("SYNOD_TEST_BASE_PORT")
        .ok()
        .and_then(|v| v.parse::<u16>().ok())
        .unwrap_or_else(|| common::free_base_port(3));
    let dir = tempfile::tempdir().unwrap();
    let mut local = Command::new(SYNOD)
        .args(["local", "--protocol", "nezha", "--in-memory", "--proxies", "2", "--base-port", &base.to_string()])
        .arg("--data-dir")
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn synod local");
    let (tx, rx) = mpsc::channel();
    let out = local.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // The proxy table: `PROXY PID CLIENT RESP`, then `proxies: A,B ...`.
    let mut proxies: Vec<(i32, String, String)> = Vec::new();
    let start = Instant::now();
    let mut in_table = false;
    loop {
        let line = rx.recv_timeout(Duration::from_secs(90)).unwrap_or_else(|e| {
            let _ = local.kill();
            panic!("synod local printed no proxy table within 90 s ({e})")
        });
        if line.starts_with("PROXY") {
            in_table = true;
            continue;
        }
        if line.starts_with("proxies:") {
            break;
        }
        let cols: Vec<&str> = line.split_whitespace().collect();
        if in_table && cols.len() == 4 {
            proxies.push((cols[1].parse().expect("pid"), cols[2].to_string(), cols[3].to_string()));
        }
        assert!(start.elapsed() < Duration::from_secs(120));
    }
    assert_eq!(proxies.len(), 2, "two proxies started: {proxies:?}");
    assert_eq!(proxies[0].1, format!("127.0.0.1:{}", base + 401));
    assert_eq!(proxies[1].2, format!("127.0.0.1:{}", base + 502));
    let endpoints: Vec<String> = proxies.iter().map(|p| p.1.clone()).collect();

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        // The default (leader) policy against the proxies, resolved by the name they report
        // (`nezha-proxy`, not a registered protocol): it sends to its home proxy and moves to
        // the next one when that one breaks.
        let opts = ClientOptions {
            resolve_policy: Some(synod_protocols::registry::client_for),
            request_timeout: Duration::from_secs(2),
            ..Default::default()
        };
        let mut client = Client::with_options(&endpoints, opts).await.expect("connect to the proxies");
        let mut acked = Vec::new();
        for i in 0..30 {
            let (k, v) = (format!("k{i:02}"), format!("v{i}"));
            client.put(k.clone(), v.clone()).await.unwrap_or_else(|e| panic!("put {k}: {e}"));
            acked.push((k, v));
        }
        let committed =
            proxy_counter(&endpoints, "fast_commits").await + proxy_counter(&endpoints, "slow_commits").await;
        assert!(committed >= 30, "the proxies committed the puts on the fast or slow path: {committed}");
        assert_eq!(client.current_endpoint(), endpoints[0], "home proxy first");

        // SIGKILL the proxy in use: the client goes on through the other one.
        // SAFETY: kill(2) on a pid we just read from our child's output.
        assert_eq!(unsafe { libc::kill(proxies[0].0, libc::SIGKILL) }, 0);
        let t = Instant::now();
        while alive(proxies[0].0) {
            assert!(t.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(20));
        }
        for i in 30..60 {
            let (k, v) = (format!("k{i:02}"), format!("v{i}"));
            client.put(k.clone(), v.clone()).await.unwrap_or_else(|e| panic!("put {k} after the proxy kill: {e}"));
            acked.push((k, v));
        }
        assert_eq!(client.current_endpoint(), endpoints[1]);
        // Nothing acknowledged was lost: every put reads back, through the surviving proxy
        // and straight from the replicas (the non-proxy mode, the client library's proxy).
        for (k, v) in &acked {
            assert_eq!(client.get(k.clone()).await.unwrap().as_deref(), Some(v.as_bytes()), "key {k}");
        }
        let replicas: Vec<String> = (1..=3).map(|i| format!("127.0.0.1:{}", base + 100 + i)).collect();
        let opts = ClientOptions { resolve_policy: Some(synod_protocols::registry::client_for), ..Default::default() };
        let mut direct = Client::with_options(&replicas, opts).await.expect("connect to the replicas");
        for (k, v) in &acked {
            assert_eq!(direct.get(k.clone()).await.unwrap().as_deref(), Some(v.as_bytes()), "key {k} (direct)");
        }
    });

    // The surviving proxy's Redis front end, if redis-cli is here.
    let resp_port = proxies[1].2.rsplit(':').next().unwrap().to_string();
    if let Ok(o) = Command::new("redis-cli").args(["-p", &resp_port, "set", "rk", "rv"]).output() {
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "OK", "{o:?}");
        let o = Command::new("redis-cli").args(["-p", &resp_port, "get", "k59"]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "v59");
    }

    // SIGTERM: `synod local` stops the replicas and the remaining proxy.
    // SAFETY: kill(2) on our own, unreaped child.
    assert_eq!(unsafe { libc::kill(local.id() as i32, libc::SIGTERM) }, 0);
    let t = Instant::now();
    while local.try_wait().unwrap().is_none() {
        assert!(t.elapsed() < Duration::from_secs(60), "synod local did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    let t = Instant::now();
    while alive(proxies[1].0) {
        assert!(t.elapsed() < Duration::from_secs(30), "proxy {} survived synod local", proxies[1].0);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A proxy in front of a cluster with TLS and a password (`synod local --tls --password`)
/// serves like a replica: with the cluster's CA and password a client commits through it
/// (the proxy dials the replicas over TLS and authenticates to them); without the password,
/// with a wrong one or without TLS the client gets a clear refusal; the proxy's Redis port
/// asks for AUTH over TLS.
#[test]
fn a_proxy_serves_tls_and_asks_for_the_password_like_a_replica() {
    const PASSWORD: &str = "proxy-test-password";
    let dir = tempfile::tempdir().unwrap();
    let args = ["--protocol", "nezha", "--in-memory", "--proxies", "1", "--tls", "--password", PASSWORD];
    let (mut local, _) = common::start_local(dir.path(), &args);
    // `proxies: A ...` once the proxy listens.
    let out_path = dir.path().join("local.out");
    let start = Instant::now();
    let (proxy, resp) = loop {
        let out = std::fs::read_to_string(&out_path).unwrap_or_default();
        let row = out.lines().find(|l| l.starts_with("1001 ")).map(|l| l.split_whitespace().collect::<Vec<_>>());
        if out.lines().any(|l| l.starts_with("proxies:")) {
            let row = row.expect("the proxy's row");
            break (row[2].to_string(), row[3].to_string());
        }
        if start.elapsed() > Duration::from_secs(60) || local.try_wait().unwrap().is_some() {
            let _ = local.kill();
            panic!("no proxy started:\n{out}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let ca = dir.path().join("tls").join("ca.pem");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async {
        let opts = |password: Option<&str>, tls: bool| ClientOptions {
            resolve_policy: Some(synod_protocols::registry::client_for),
            request_timeout: Duration::from_secs(2),
            max_retry_time: Duration::from_secs(3),
            tls: tls.then(|| synod_client::ClientTls::from_ca_file(&ca).unwrap()),
            password: password.map(str::to_string),
            ..Default::default()
        };
        let endpoints = [proxy.clone()];
        let mut client = Client::with_options(&endpoints, opts(Some(PASSWORD), true)).await.expect("connect");
        for i in 0..10 {
            client.put(format!("k{i}"), format!("v{i}")).await.unwrap_or_else(|e| panic!("put k{i}: {e}"));
        }
        assert_eq!(client.get("k9").await.unwrap().as_deref(), Some(&b"v9"[..]));
        let err = Client::with_options(&endpoints, opts(None, true)).await.unwrap_err();
        assert!(matches!(&err, synod_client::ClientError::Auth { reason, .. } if reason.starts_with("NOAUTH")), "{err}");
        let err = Client::with_options(&endpoints, opts(Some("guess"), true)).await.unwrap_err();
        assert!(err.to_string().contains("WRONGPASS"), "{err}");
        assert!(Client::with_options(&endpoints, opts(Some(PASSWORD), false)).await.is_err(), "plain TCP refused");
        // The Redis port: TLS, AUTH, then commands through the proxy.
        let cmds = format!(
            "*2\r\n$4\r\nAUTH\r\n${}\r\n{PASSWORD}\r\n*3\r\n$3\r\nSET\r\n$2\r\nrk\r\n$2\r\nrv\r\n*2\r\n$3\r\nGET\r\n$2\r\nk3\r\n",
            PASSWORD.len()
        );
        let expected = "+OK\r\n+OK\r\n$2\r\nv3\r\n";
        assert_eq!(common::resp_over_tls(&resp, &ca, cmds.as_bytes(), expected.len()).await, expected);
        let noauth = common::resp_over_tls(&resp, &ca, b"*1\r\n$4\r\nPING\r\n", 8).await;
        assert!(noauth.starts_with("-NOAUTH"), "{noauth}");
    })
    }));
    // SAFETY: kill(2) on our own, unreaped child: `synod local` stops the replicas and the proxy.
    unsafe { libc::kill(local.id() as i32, libc::SIGTERM) };
    let t = Instant::now();
    while local.try_wait().unwrap().is_none() && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = local.kill();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
