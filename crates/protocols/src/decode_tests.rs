//! Malformed peer messages never panic a replica, for every registered protocol (and the
//! mutants' parents): messages captured from a real run of the protocol are truncated,
//! bit-flipped, spliced and replaced by random bytes, then delivered to live replicas as if a
//! peer had sent them. A protocol may reject, ignore or (for well-formed nonsense) act on
//! them; it must not panic. Budget: `SYNOD_FUZZ_ITERS` mutations per captured message
//! (default 40; the recorded long run is in docs/testing.md).

use crate::registry;
use crate::testnet::{put, Net};
use bytes::Bytes;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use synod_core::{Event, NodeId};

/// Peer messages of a 3-replica run with some client traffic, a crash and a restart.
fn capture(build: crate::testnet::Build) -> Vec<(NodeId, NodeId, Bytes)> {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let mut net = Net::new(3, build);
    let log = seen.clone();
    net.drop = Box::new(move |from, to, msg| {
        let mut log = log.borrow_mut();
        if log.len() < 400 {
            log.push((from, to, Bytes::copy_from_slice(msg)));
        }
        false
    });
    net.run_for(Duration::from_secs(2));
    for seq in 1..=10u64 {
        let at = net.leader().unwrap_or(1 + (seq % 3) as NodeId);
        net.request(at, 7, seq, put(&format!("k{}", seq % 3), &"v".repeat(seq as usize * 10)));
        net.run_for(Duration::from_millis(50));
    }
    net.crash(2);
    net.run_for(Duration::from_secs(1));
    net.restart(2);
    net.run_for(Duration::from_secs(2));
    let out = seen.borrow().clone();
    out
}

#[test]
fn malformed_peer_messages_never_panic_any_protocol() {
    let iters = synod_core::fuzz::iterations(40);
    for info in registry::all() {
        let captured = capture(info.build);
        assert!(captured.len() > 20, "{}: only {} messages captured", info.name, captured.len());
        let mut net = Net::new(3, info.build);
        net.run_for(Duration::from_secs(2));
        let mut rng = synod_core::rng_from_seed(0x5eed);
        let mut delivered = 0u64;
        for (i, (from, to, msg)) in captured.iter().enumerate() {
            let other = &captured[(i * 7 + 3) % captured.len()].2;
            for _ in 0..iters {
                let bad = synod_core::fuzz::mutate(&mut rng, msg, other);
                net.event(*to, Event::Message { from: *from, sent_at: net.now, msg: Bytes::from(bad) });
                delivered += 1;
            }
            // Let the replicas act on whatever they accepted (timers, replies to peers).
            if i % 25 == 0 {
                net.run_for(Duration::from_millis(100));
            }
        }
        net.run_for(Duration::from_secs(1));
        eprintln!("{}: {} captured messages, {delivered} malformed deliveries, no panic", info.name, captured.len());
    }
}
