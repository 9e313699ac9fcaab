//! Throughput of the write-ahead log in each fsync mode.
//!
//! ```text
//! cargo run --release -p synod-wal --example wal_bench -- [--dir PATH] [--record-bytes N] [--batch N] [--seconds S]
//! ```
//!
//! For every mode it measures, on a fresh log in a temporary directory under `--dir`
//! (default: the system temp dir):
//! * commits/s: one record appended, then `commit`, in a loop (the latency-bound case);
//! * appends/s: `--batch` records per `commit` (group commit, the throughput-bound case);
//! * recovery: how fast `open` reads the resulting log back.

use bytes::Bytes;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use synod_wal::{FsyncMode, Wal, WalOptions};

struct Args {
    dir: PathBuf,
    record_bytes: usize,
    batch: usize,
    seconds: f64,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { dir: std::env::temp_dir(), record_bytes: 128, batch: 64, seconds: 1.0 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--dir" => args.dir = PathBuf::from(value()?),
            "--record-bytes" => args.record_bytes = value()?.parse().map_err(|e| format!("--record-bytes: {e}"))?,
            "--batch" => args.batch = value()?.parse().map_err(|e| format!("--batch: {e}"))?,
            "--seconds" => args.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "-h" | "--help" => {
                return Err("usage: wal_bench [--dir PATH] [--record-bytes N] [--batch N] [--seconds S]".into())
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.batch == 0 || args.seconds.is_nan() || args.seconds <= 0.0 {
        return Err("--batch and --seconds must be positive".into());
    }
    Ok(args)
}

/// Run `step` (which returns how many records it appended) until `budget` has passed.
/// Returns (records, commits, elapsed).
fn run_for(budget: Duration, mut step: impl FnMut() -> usize) -> (u64, u64, Duration) {
    let start = Instant::now();
    let (mut records, mut commits) = (0u64, 0u64);
    while start.elapsed() < budget {
        records += step() as u64;
        commits += 1;
    }
    (records, commits, start.elapsed())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let budget = Duration::from_secs_f64(args.seconds);
    let record = Bytes::from(vec![0xA5u8; args.record_bytes]);
    let batch: Vec<Bytes> = vec![record.clone(); args.batch];
    println!(
        "synod-wal bench: {} B records, group commits of {}, {:.1} s per measurement, in {}",
        args.record_bytes,
        args.batch,
        args.seconds,
        args.dir.display()
    );
    println!(
        "{:<7} {:>12} {:>14} {:>10} {:>12} {:>16}",
        "mode", "commits/s", "appends/s", "MiB/s", "fsyncs", "recovery rec/s"
    );
    for mode in FsyncMode::ALL {
        let tmp = tempfile::tempdir_in(&args.dir).expect("create a temporary directory");
        let opts = WalOptions { fsync: mode, ..WalOptions::default() };
        let (mut wal, _) = Wal::open(tmp.path(), opts.clone()).expect("open the log");

        let (_, single_commits, single_time) = run_for(budget, || {
            wal.append(std::slice::from_ref(&record)).expect("append");
            wal.commit().expect("commit");
            1
        });
        let (group_records, _, group_time) = run_for(budget, || {
            wal.append(&batch).expect("append");
            wal.commit().expect("commit");
            batch.len()
        });
        wal.sync().expect("sync");
        let stats = wal.stats();
        drop(wal);

        let start = Instant::now();
        let (_, recovered) = Wal::open(tmp.path(), opts).expect("reopen the log");
        let recovery = start.elapsed();
        assert_eq!(recovered.len() as u64, stats.records_appended, "every record comes back");

        let appends_per_s = group_records as f64 / group_time.as_secs_f64();
        println!(
            "{:<7} {:>12.0} {:>14.0} {:>10.1} {:>12} {:>16.0}",
            mode.to_string(),
            single_commits as f64 / single_time.as_secs_f64(),
            appends_per_s,
            appends_per_s * (args.record_bytes + 8) as f64 / (1 << 20) as f64,
            stats.syncs,
            recovered.len() as f64 / recovery.as_secs_f64(),
        );
    }
}
