//! Encoding a message: `postcard::to_allocvec` (a `Vec` grown by doubling) against
//! `synod_core::protocol::to_exact_vec` (sized by a counting pass, allocated once), side by
//! side in one run. The payloads: a follower's WAL record of a batch of 30 client puts of
//! 500 B (the bench-compare workload at ~30 commands per slot), one such put, and an 8-field
//! acknowledgement. `cargo bench -p synod-core --bench encode`.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use serde::Serialize;
use synod_core::kv::{Command, Op};
use synod_core::protocol::to_exact_vec;

/// The synod binary's allocator, so the bench measures what a replica pays.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Serialize)]
struct Record {
    ballot: (u64, u32),
    slot: u64,
    cmds: Vec<Command>,
}

#[derive(Serialize)]
struct Ack {
    from: u32,
    ballot: (u64, u32),
    slot: u64,
    ok: bool,
}

fn put(i: u64) -> Command {
    Command {
        client: 0x9e37_79b9_7f4a_7c15 ^ i,
        seq: 1_000 + i,
        acked_below: 999 + i,
        now_ms: 1_764_000_000_000 + i,
        op: Op::Put { key: Bytes::from(format!("user{:016}", i * 7919)), value: Bytes::from(vec![b'x'; 500]) },
    }
}

fn compare<M: Serialize>(c: &mut Criterion, name: &str, msg: &M) {
    assert_eq!(postcard::to_allocvec(msg).unwrap(), to_exact_vec(msg), "same bytes");
    let mut g = c.benchmark_group(name);
    g.bench_with_input(BenchmarkId::new("to_allocvec", ""), msg, |b, m| b.iter(|| postcard::to_allocvec(m).unwrap()));
    g.bench_with_input(BenchmarkId::new("to_exact_vec", ""), msg, |b, m| b.iter(|| to_exact_vec(m)));
    g.finish();
}

fn bench(c: &mut Criterion) {
    compare(c, "batch_30x500B", &Record { ballot: (7, 2), slot: 123_456, cmds: (0..30).map(put).collect() });
    compare(c, "one_put_500B", &put(1));
    compare(c, "ack", &Ack { from: 3, ballot: (7, 2), slot: 123_456, ok: true });
}

criterion_group!(benches, bench);
criterion_main!(benches);
