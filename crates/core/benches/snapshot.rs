//! What a snapshot costs the node loop: copying the state machine (the only part that has to
//! happen on the loop, so the copy matches the requested log position) vs serializing it
//! (done off the loop). `cargo bench -p synod-core --bench snapshot`.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use synod_core::session::StateMachine;
use synod_core::{Command, Op};

fn state(keys: u64, value_bytes: usize) -> StateMachine {
    let mut sm = StateMachine::new();
    for i in 0..keys {
        sm.apply(&Command {
            client: 1 + i % 64,
            seq: 1 + i / 64,
            acked_below: 1 + i / 64,
            now_ms: 0,
            op: Op::Put { key: Bytes::from(format!("user{i:019}")), value: Bytes::from(vec![b'v'; value_bytes]) },
        });
    }
    sm
}

fn bench(c: &mut Criterion) {
    let sm = state(100_000, 100);
    let mut g = c.benchmark_group("snapshot_100k_keys_100B");
    g.sample_size(20);
    g.bench_function("clone (on the node loop)", |b| b.iter_batched(|| (), |_| sm.clone(), BatchSize::SmallInput));
    g.bench_function("serialize (off the loop)", |b| b.iter(|| sm.snapshot()));
    g.finish();
    // The price of persistence: applying writes to a store of the same size.
    let mut g = c.benchmark_group("apply_1k_puts_100k_keys");
    g.sample_size(20);
    g.bench_function("apply", |b| {
        b.iter_batched(
            || sm.clone(),
            |mut sm| {
                for i in 0..1_000u64 {
                    sm.apply(&Command {
                        client: 99,
                        seq: 1 + i,
                        acked_below: 1 + i,
                        now_ms: 0,
                        op: Op::Put {
                            key: Bytes::from(format!("user{:019}", i * 97 % 100_000)),
                            value: Bytes::from_static(&[b'w'; 100]),
                        },
                    });
                }
                sm
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
