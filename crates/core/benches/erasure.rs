//! Reed–Solomon cost vs payload size, n = 5 servers, d = 3 data shards (Crossword's Table 1:
//! encoding is cheap next to sending the bytes; its sizes 4 KB … 4 MB, plus 8 B).
//! `cargo bench -p synod-core --bench erasure`.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use synod_core::erasure::Code;

/// The synod binary's allocator (crates/synod/src/main.rs): with glibc's, every multi-MB shard
/// buffer is a fresh mmap and page faults dominate the 4 MB case.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn bench(c: &mut Criterion) {
    let code = Code::for_cluster(5).unwrap();
    let mut g = c.benchmark_group("rs_n5_d3");
    g.sample_size(20);
    for size in [8usize, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20] {
        let payload: Vec<u8> = (0..size).map(|i| (i * 31) as u8).collect();
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("encode", size), &payload, |b, p| b.iter(|| code.encode(p).unwrap()));
        let shards = code.encode(&payload).unwrap();
        // The worst case for decoding: two data shards lost, rebuilt from parity.
        let set: Vec<(usize, Bytes)> = [0usize, 3, 4].iter().map(|&i| (i, shards[i].clone())).collect();
        g.bench_with_input(BenchmarkId::new("decode_2_lost", size), &set, |b, s| {
            b.iter(|| code.decode(size, s).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
