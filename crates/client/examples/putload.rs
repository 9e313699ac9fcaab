//! Closed-loop put load: N concurrent client sessions, each with one put outstanding, for a
//! fixed time; reports throughput and latency percentiles. A quick measurement tool, not the
//! benchmark harness (`synod bench`).
//!
//! ```text
//! cargo run --release -p synod-client --example putload -- \
//!     --endpoints 127.0.0.1:7201,127.0.0.1:7202,127.0.0.1:7203 --clients 32 --seconds 10 --value-size 100
//! ```

use hdrhistogram::Histogram;
use std::time::{Duration, Instant};
use synod_client::{Client, ClientOptions};

struct Opts {
    endpoints: Vec<String>,
    clients: usize,
    seconds: f64,
    value_size: usize,
    /// Distinct keys per client (keys are overwritten round-robin).
    keys: u64,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        endpoints: vec!["127.0.0.1:7201".into(), "127.0.0.1:7202".into(), "127.0.0.1:7203".into()],
        clients: 32,
        seconds: 10.0,
        value_size: 100,
        keys: 1000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        let num = |s: String| s.parse::<f64>().map_err(|_| format!("{flag}: not a number: {s}"));
        match flag.as_str() {
            "--endpoints" => o.endpoints = value()?.split(',').map(str::to_string).collect(),
            "--clients" => o.clients = num(value()?)? as usize,
            "--seconds" => o.seconds = num(value()?)?,
            "--value-size" => o.value_size = num(value()?)? as usize,
            "--keys" => o.keys = (num(value()?)? as u64).max(1),
            "-h" | "--help" => {
                return Err(
                    "usage: putload [--endpoints A,B,C] [--clients 32] [--seconds 10] [--value-size 100] [--keys 1000]"
                        .into(),
                )
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    if o.clients == 0 || o.seconds <= 0.0 {
        return Err("--clients and --seconds must be positive".into());
    }
    Ok(o)
}

#[tokio::main]
async fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let opts = ClientOptions {
        request_timeout: Duration::from_secs(2),
        max_retry_time: Duration::from_secs(10),
        ..Default::default()
    };
    let mut clients = Vec::new();
    for _ in 0..o.clients {
        match Client::with_options(&o.endpoints, opts.clone()).await {
            Ok(c) => clients.push(c),
            Err(e) => {
                eprintln!("cannot connect: {e}");
                std::process::exit(1);
            }
        }
    }
    let value = bytes::Bytes::from(vec![b'x'; o.value_size]);
    let duration = Duration::from_secs_f64(o.seconds);
    let start = Instant::now();
    let end = start + duration;
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(c, mut client)| {
            let value = value.clone();
            let keys = o.keys;
            tokio::spawn(async move {
                // Latency in microseconds, 1 µs .. 60 s, 3 significant digits.
                let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
                let mut errors = 0u64;
                let mut i = 0u64;
                while Instant::now() < end {
                    let key = format!("load-{c}-{}", i % keys);
                    let t = Instant::now();
                    match client.put(key, value.clone()).await {
                        Ok(()) => hist.saturating_record(t.elapsed().as_micros() as u64),
                        Err(e) => {
                            errors += 1;
                            eprintln!("client {c}: {e}");
                        }
                    }
                    i += 1;
                }
                (hist, errors)
            })
        })
        .collect();
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
    let mut errors = 0;
    for t in tasks {
        let (h, e) = t.await.expect("load task");
        all.add(h).expect("same bounds");
        errors += e;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let ms = |q: f64| all.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "clients={} value_size={}B duration={elapsed:.1}s puts={} errors={errors} throughput={:.0} ops/s",
        o.clients,
        o.value_size,
        all.len(),
        all.len() as f64 / elapsed
    );
    println!(
        "latency ms: p50={:.2} p90={:.2} p99={:.2} max={:.2}",
        ms(0.5),
        ms(0.9),
        ms(0.99),
        all.max() as f64 / 1000.0
    );
}
