//! Crossword and RSPaxos: the chooser (§4.1), the codec (assignment, pooling, §3.6
//! recovery) and scenarios on the in-test network (gossip, failover, the Fig. 2 schedule).

use super::*;
use crate::layers::codec::{PayloadCodec, Pieces, Recovered};
use crate::multipaxos::{AcceptedSlot, Value};
use crate::testnet::{get, put, value, Net, DONE};
use std::collections::BTreeMap;
use std::time::Duration;
use synod_core::{Ballot, Command, NodeId, Op, Time};

fn params(options: &[(&str, &str)]) -> ProtocolParams {
    let mut p = ProtocolParams::default();
    for (k, v) in options {
        p.set(&format!("options.{k}={v}")).unwrap();
    }
    p
}

fn batch(bytes: usize, tag: u8) -> Value {
    let op = Op::Put { key: bytes::Bytes::from_static(b"k"), value: bytes::Bytes::from(vec![tag; bytes]) };
    Value::Cmds(vec![Command { client: 1, seq: tag as u64, acked_below: 0, now_ms: 0, op }])
}

const MEMBERS: [NodeId; 5] = [1, 2, 3, 4, 5];

/// A codec whose chooser heard from every replica lately (else §4.3 keeps it at the full
/// copy): a few answered rounds at 0 ms, led by 1 and by 2; use it from `ms(1_000)` on.
fn codec(scheme: Scheme, mode: Mode) -> RsCodec {
    let mut c = RsCodec::new(scheme, mode, DEFAULT_GAP);
    for (k, me) in [1, 2].into_iter().enumerate() {
        for slot in 0..3u64 {
            let slot = 1_000 + 10 * k as u64 + slot;
            c.encode(ms(0), slot, Ballot::new(1, me), batch(10, 0), &MEMBERS, me);
            for m in MEMBERS {
                c.on_accepted(ms(1), m, slot);
            }
        }
    }
    c
}

fn ms(x: u64) -> Time {
    Time(x * 1_000_000)
}

// ----- §4.1 the chooser ---------------------------------------------------------------------

#[test]
fn least_squares_recovers_delay_and_bandwidth_and_drops_outliers() {
    // t = 2 ms + s / (10 MB/s), plus one huge outlier among 40 points.
    let mut pts: Vec<(f64, f64)> = (0..39).map(|i| (i as f64 * 10_000.0, 0.002 + i as f64 * 10_000.0 / 1e7)).collect();
    pts.push((5_000.0, 9.0));
    let m = Model::fit(&pts).unwrap();
    assert!((m.delay - 0.002).abs() < 1e-6, "{m:?}");
    assert!((m.per_byte - 1e-7).abs() < 1e-10, "{m:?}");
    // One size only: a flat line at the mean.
    let flat = Model::fit(&[(100.0, 0.001), (100.0, 0.003)]).unwrap();
    assert_eq!(flat.per_byte, 0.0);
    assert!((flat.delay - 0.002).abs() < 1e-12);
}

/// Feed `per_follower` models: `(delay s, bandwidth B/s)` by sending probes of two sizes.
fn trained(links: &[(NodeId, f64, f64)]) -> Chooser {
    let mut ch = Chooser::default();
    let mut slot = 0;
    for round in 0..20u64 {
        for size in [1_000usize, 200_000] {
            slot += 1;
            let at = ms(round * 50);
            ch.on_send(at, slot, size, links.iter().map(|(p, _, _)| (*p, size)).collect());
            for (p, delay, bw) in links {
                let t = at + Duration::from_secs_f64(delay + size as f64 / bw);
                ch.on_ack(t, *p, slot);
            }
        }
    }
    ch
}

#[test]
fn chooser_picks_full_copy_for_small_values_and_one_shard_for_large_ones() {
    // Four followers, 1 ms away, 12.5 MB/s each (100 Mbps).
    let links: Vec<(NodeId, f64, f64)> = (2..=5).map(|p| (p, 0.001, 12.5e6)).collect();
    let mut ch = trained(&links);
    let followers = [2, 3, 4, 5];
    let cands = synod_core::erasure::boundary_configs(5);
    let now = ms(1_000);
    // 8 B: transfer time is nothing, the smallest quorum wins: (c, q) = (3, 3).
    assert_eq!(ch.choose(now, 8, 3, &followers, &cands, (3, 3)), (3, 3));
    // 1 MB: 80 ms per full copy vs 27 ms for one shard: (1, 5).
    assert_eq!(ch.choose(now, 1_000_000, 3, &followers, &cands, (3, 3)), (1, 5));
    // One slow follower (1 MB/s): waiting for all five is bad, two shards each to four wins.
    let mut links = links;
    links[3] = (5, 0.001, 1e6);
    let mut ch = trained(&links);
    assert_eq!(ch.choose(now, 1_000_000, 3, &followers, &cands, (3, 3)), (2, 4));
}

#[test]
fn chooser_excludes_quorums_the_healthy_followers_cannot_form() {
    // §4.3: followers 4 and 5 never answer: only q ≤ 3 is live, the full copy.
    let links: Vec<(NodeId, f64, f64)> = (2..=3).map(|p| (p, 0.001, 12.5e6)).collect();
    let mut ch = trained(&links);
    let cands = synod_core::erasure::boundary_configs(5);
    assert_eq!(ch.choose(ms(1_000), 1_000_000, 3, &[2, 3, 4, 5], &cands, (3, 3)), (3, 3));
    // No samples at all: the full copy.
    assert_eq!(Chooser::default().choose(ms(0), 1_000_000, 3, &[2, 3, 4, 5], &cands, (3, 3)), (3, 3));
    // Samples age out of the 2 s window: back to the full copy.
    let links: Vec<(NodeId, f64, f64)> = (2..=5).map(|p| (p, 0.001, 12.5e6)).collect();
    let mut ch = trained(&links);
    assert_eq!(ch.choose(ms(1_000), 1_000_000, 3, &[2, 3, 4, 5], &cands, (3, 3)), (1, 5));
    assert_eq!(ch.choose(ms(10_000), 1_000_000, 3, &[2, 3, 4, 5], &cands, (3, 3)), (3, 3));
}

/// A leader whose four followers share its NIC (`mbit`, FIFO), `delay` away each way, with
/// a per-answer extra delay of up to `jitter` (deterministic, heavy-ish tail), `clients`
/// closed-loop proposers of `bytes`-byte payloads. Each instance's configuration comes from
/// `pick` (the chooser, or a fixed one); the chooser is fed every send and answer as the
/// codec feeds it. Returns instances committed per second from 1 s to 4 s, and how many of
/// them used each `c`.
fn nic_run(
    mbit: f64,
    delay: f64,
    jitter: f64,
    clients: usize,
    bytes: usize,
    mut pick: impl FnMut(&mut Chooser, Time) -> (usize, usize),
) -> (f64, BTreeMap<usize, u64>) {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    enum Ev {
        Propose,
        Ack(NodeId, u64),
    }
    let (followers, d, rate) = ([2, 3, 4, 5], 3usize, mbit * 1e6 / 8.0);
    let mut ch = Chooser::default();
    let mut events: BinaryHeap<Reverse<(u64, u64, Ev)>> = BinaryHeap::new();
    let mut seq = 0u64;
    for _ in 0..clients {
        seq += 1;
        events.push(Reverse((0, seq, Ev::Propose)));
    }
    let (mut nic_free, mut rng) = (0.0f64, 0x2545_f491_4f6c_dd1du64);
    // slot -> (answers still needed to commit, c)
    let mut open: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    let (mut slot, mut done, mut used) = (0u64, 0u64, BTreeMap::new());
    while let Some(Reverse((t, _, ev))) = events.pop() {
        let now = Time(t);
        if t > 4_000_000_000 {
            break;
        }
        match ev {
            Ev::Propose => {
                slot += 1;
                let (c, q) = pick(&mut ch, now);
                let piece = if c >= d { bytes } else { c * bytes.div_ceil(d) };
                ch.on_send(now, slot, bytes, followers.iter().map(|p| (*p, piece)).collect());
                for p in followers {
                    nic_free = nic_free.max(t as f64 / 1e9) + piece as f64 / rate;
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let u = (rng % 10_000) as f64 / 10_000.0;
                    let back = nic_free + 2.0 * delay + jitter * u.powi(4);
                    seq += 1;
                    events.push(Reverse(((back * 1e9) as u64, seq, Ev::Ack(p, slot))));
                }
                open.insert(slot, (q - 1, c));
            }
            Ev::Ack(p, s) => {
                ch.on_ack(now, p, s);
                if let Some((need, c)) = open.get_mut(&s) {
                    *need -= 1;
                    if *need == 0 {
                        if t >= 1_000_000_000 {
                            done += 1;
                            *used.entry(*c).or_insert(0u64) += 1;
                        }
                        open.remove(&s);
                        seq += 1;
                        events.push(Reverse((t, seq, Ev::Propose)));
                    }
                }
            }
        }
    }
    (done as f64 / 3.0, used)
}

/// The adaptive chooser against every fixed configuration in one NIC setting: its
/// throughput, the best fixed one's, and the configurations it used.
fn adaptive_vs_fixed(mbit: f64, delay: f64, jitter: f64, bytes: usize) -> (f64, f64, BTreeMap<usize, u64>) {
    let cands = synod_core::erasure::boundary_configs(5);
    let (adaptive, used) = nic_run(mbit, delay, jitter, 8, bytes, |ch, now| {
        // The codec's order: §4.3 first (quorums the healthy followers can form), then the pick.
        if ch.healthy(now, &[2, 3, 4, 5]) < 4 {
            return (3, 3);
        }
        ch.choose(now, bytes, 3, &[2, 3, 4, 5], &cands, (3, 3))
    });
    let best = cands.iter().map(|&cq| nic_run(mbit, delay, jitter, 8, bytes, |_, _| cq).0).fold(0.0, f64::max);
    (adaptive, best, used)
}

#[test]
fn chooser_shards_on_a_saturated_nic_and_keeps_full_copies_for_tiny_values() {
    // Fig. 6's scaled setting: 31.25 Mbit/s per NIC, 4 ms links, 4 KB payloads, 8 proposals
    // in flight. The NIC is the bottleneck: one shard each (a third of the full copy's
    // bytes) is the fastest fixed configuration, and the chooser must find it although it
    // starts at the full copy and every sample then queues behind full copies.
    let (adaptive, best, used) = adaptive_vs_fixed(31.25, 0.004, 0.002, 4_096);
    let fixed_one = nic_run(31.25, 0.004, 0.002, 8, 4_096, |_, _| (1, 5)).0;
    assert!(fixed_one >= 0.99 * best, "one shard each should be the best fixed: {fixed_one} vs {best}");
    assert!(adaptive >= 0.9 * best, "adaptive {adaptive}/s vs best fixed {best}/s, used {used:?}");
    assert!(used.get(&1).copied().unwrap_or(0) > 9 * used.get(&3).copied().unwrap_or(0), "{used:?}");
    // 8 B: the bytes cost nothing, the tail of the slowest answer is all: the majority with
    // full copies, MultiPaxos's point, and no worse than the best fixed configuration.
    let (adaptive, best, used) = adaptive_vs_fixed(31.25, 0.004, 0.002, 8);
    assert!(adaptive >= 0.95 * best, "adaptive {adaptive}/s vs best fixed {best}/s, used {used:?}");
    assert_eq!(used.keys().copied().collect::<Vec<_>>(), vec![3], "{used:?}");
}

/// Models as a leader's NIC shows them: each probe sent to one follower alone, its answer
/// `delay + size / bandwidth` later.
fn trained_alone(links: &[(NodeId, f64, f64)]) -> Chooser {
    let mut ch = Chooser::default();
    let mut slot = 0;
    for round in 0..20u64 {
        for size in [1_000usize, 200_000] {
            for (p, delay, bw) in links {
                slot += 1;
                let at = ms(round * 50);
                ch.on_send(at, slot, size, vec![(*p, size)]);
                ch.on_ack(at + Duration::from_secs_f64(delay + size as f64 / bw), *p, slot);
            }
        }
    }
    ch
}

/// The chooser's estimate for `counts` and `q`: the pieces leave one after another in member
/// order, each follower's line taken at the bytes sent up to its piece.
fn estimate(ch: &Chooser, counts: &[usize], q: usize, shard: f64) -> f64 {
    let mut ahead = 0.0;
    let mut t: Vec<f64> = (1..5)
        .map(|p| {
            ahead += counts[p] as f64 * shard;
            ch.model(MEMBERS[p]).unwrap().estimate(ahead)
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[q - 2]
}

#[test]
fn unbalanced_chooser_beats_every_balanced_configuration_with_a_straggler_and_keeps_c2() {
    // Followers 2, 3, 4 at 10 MB/s, 5 a straggler at 0.1 MB/s; the leader 1 at position 0.
    // Balanced, the best is 200 ms (the full copy to 2 and 3, or two shards to 2, 3, 4).
    // Unbalanced, 4 takes one shard and the straggler, never waited for and sent to last,
    // takes the shards that keep C2: 2, 2, 1, 3 commits with 2, 3, 4 in ~167 ms.
    let links = [(2, 0.001, 10e6), (3, 0.001, 10e6), (4, 0.001, 10e6), (5, 0.001, 0.1e6)];
    let mut ch = trained_alone(&links);
    let (counts, q) = ch.choose_unbalanced(ms(1_000), 1_000_000, 3, &MEMBERS, 1).expect("models");
    let a = synod_core::erasure::Assignment::unbalanced(5, &counts);
    assert!(synod_core::erasure::c2_holds(&a, 2, 3, q), "{counts:?} q={q}");
    assert_eq!((counts.as_slice(), q), (&[5, 2, 2, 1, 3][..], 4));
    let shard = 1_000_000.0 / 3.0;
    let unbalanced = estimate(&ch, &counts, q, shard);
    for (c, bq) in synod_core::erasure::boundary_configs(5) {
        let balanced = estimate(&ch, &[5, c, c, c, c], bq, shard);
        assert!(unbalanced < 0.9 * balanced, "c={c} q={bq}: {balanced} vs {counts:?} q={q}: {unbalanced}");
    }
    // Symmetric followers: nothing to gain, a balanced configuration comes back.
    let even = [(2, 0.001, 10e6), (3, 0.001, 10e6), (4, 0.001, 10e6), (5, 0.001, 10e6)];
    let (counts, _) = trained_alone(&even).choose_unbalanced(ms(1_000), 1_000_000, 3, &MEMBERS, 1).unwrap();
    assert!(counts[1..].iter().all(|k| *k == counts[1]), "{counts:?}");
    // Small values: every follower a full copy, the majority.
    assert_eq!(ch.choose_unbalanced(ms(1_000), 8, 3, &MEMBERS, 1), Some((vec![5, 3, 3, 3, 3], 3)));
    // No models: nothing to choose from.
    assert_eq!(Chooser::default().choose_unbalanced(ms(0), 1_000_000, 3, &MEMBERS, 1), None);
}

// ----- §3.1–3.3, §3.6 the codec ---------------------------------------------------------------

fn pieces(p: &crate::layers::codec::Proposal) -> Vec<(NodeId, Value)> {
    match &p.pieces {
        Pieces::Each(e) => e.clone(),
        Pieces::Same(v) => MEMBERS.iter().map(|m| (*m, v.clone())).collect(),
    }
}

#[test]
fn each_acceptor_gets_its_round_robin_shards_and_the_boundary_quorum() {
    for c in 1..=3usize {
        let mut codec = codec(Scheme::Crossword, Mode::Fixed(c));
        let p = codec.encode(ms(1_000), 1, Ballot::new(1, 1), batch(3000, 7), &MEMBERS, 1);
        assert_eq!(p.quorum, 6 - c, "q + c = n + 1");
        assert!(codec.complete(&p.own));
        assert_eq!(codec.payload(&p.own).unwrap().into_owned(), batch(3000, 7));
        if c >= 3 {
            // The full copy: the batch itself, one broadcast, nothing coded.
            assert_eq!(p.pieces, Pieces::Same(batch(3000, 7)));
            assert_eq!(p.own, batch(3000, 7));
            continue;
        }
        for (to, v) in pieces(&p) {
            let Value::Coded(piece) = v else { panic!("coded") };
            let idx: Vec<u16> = piece.shards.iter().map(|(i, _)| *i).collect();
            let pos = (to - 1) as u16;
            let want: Vec<u16> = (0..c as u16).map(|k| (pos + k) % 5).collect();
            let mut sorted = want.clone();
            sorted.sort();
            assert_eq!(idx, sorted, "c={c} to={to}");
            // A resend derives the same piece.
            assert_eq!(codec.piece_for(&p.own, &MEMBERS, to), Value::Coded(piece));
        }
    }
    // RSPaxos: one shard each; commit 4 of 5 and elect with 4; 3 of 3 and 2 for n = 3.
    let mut rs = codec(Scheme::RsPaxos, Mode::Adaptive);
    assert_eq!(rs.encode(ms(1_000), 1, Ballot::new(1, 1), batch(100, 1), &MEMBERS, 1).quorum, 4);
    assert_eq!(rs.prepare_quorum(5), 4);
    assert_eq!(rs.encode(ms(1_000), 1, Ballot::new(1, 1), batch(100, 1), &[1, 2, 3], 1).quorum, 3);
    assert_eq!(rs.prepare_quorum(3), 2);
}

fn report(slot: u64, ballot: Ballot, value: Value, committed: bool) -> AcceptedSlot {
    AcceptedSlot { slot, ballot, value, committed, fast: false }
}

#[test]
fn a_new_leader_rebuilds_from_d_shards_and_frees_a_slot_with_fewer() {
    let mut codec = codec(Scheme::Crossword, Mode::Fixed(1));
    let b1 = Ballot::new(1, 1);
    let p = codec.encode(ms(1_000), 9, b1, batch(5000, 3), &MEMBERS, 1);
    let each = pieces(&p);
    // Committed on all five with one shard each; the leader (1) and follower 2 fail. The
    // new leader hears from 3, 4, 5: three distinct shards = d, so it rebuilds the value.
    let three: Vec<AcceptedSlot> = each[1..].iter().map(|(_, v)| report(9, b1, v.clone(), false)).collect();
    let Recovered::Propose(v) = codec.recover(&three) else { panic!("rebuildable") };
    assert_eq!(codec.payload(&v).unwrap().into_owned(), batch(5000, 3));
    // Re-proposed in a higher ballot, the payload keeps its identity (origin b1).
    let again = codec.encode(ms(1_001), 9, Ballot::new(2, 3), v, &MEMBERS, 3);
    let Value::Coded(c) = &again.own else { panic!() };
    assert_eq!(c.origin, b1);
    // Two shards only of the highest ballot's payload: it cannot have been chosen (ap′).
    let Recovered::Free = codec.recover(&three[..2]) else { panic!("free") };
    // ... unless an acceptor knows it is chosen: then wait for more promises.
    let mut known = three[..2].to_vec();
    known[0].committed = true;
    assert_eq!(codec.recover(&known), Recovered::Undecided);
    // Shards of a different payload (another origin) are never pooled with it.
    let other = codec.encode(ms(1_000), 9, Ballot::new(1, 2), batch(5000, 4), &MEMBERS, 2);
    let mut mixed = three[..2].to_vec();
    mixed.push(report(9, Ballot::new(1, 2), pieces(&other)[3].1.clone(), false));
    // The highest ballot is now the other payload's single shard: free.
    assert_eq!(codec.recover(&mixed), Recovered::Free);
}

#[test]
fn acceptors_pool_shards_of_one_payload_across_ballots() {
    // A value accepted with c = 1 in ballot 1, then re-proposed with c = 3 in ballot 2 and
    // taken by only one acceptor: that acceptor still holds its ballot-1 shard.
    let mut one = codec(Scheme::Crossword, Mode::Fixed(1));
    let p1 = one.encode(ms(1_000), 4, Ballot::new(1, 1), batch(2000, 9), &MEMBERS, 1);
    let piece1 = pieces(&p1)[2].1.clone(); // acceptor 4, shard 3
    let Recovered::Propose(full) = one.recover(&[report(4, Ballot::new(1, 1), p1.own.clone(), false)]) else {
        panic!()
    };
    let mut three = codec(Scheme::Crossword, Mode::Fixed(3));
    let p2 = three.encode(ms(1_000), 4, Ballot::new(2, 2), full, &MEMBERS, 2);
    let piece2 = pieces(&p2)[2].1.clone();
    let held = three.merge(Some(&piece1), piece2);
    let Value::Coded(h) = &held else { panic!() };
    let idx: Vec<u16> = h.shards.iter().map(|(i, _)| *i).collect();
    assert_eq!(idx, vec![0, 1, 2, 3]);
    // A different payload replaces what was held.
    let other = one.encode(ms(1_000), 4, Ballot::new(3, 1), batch(2000, 1), &MEMBERS, 1);
    assert_eq!(three.merge(Some(&held), pieces(&other)[2].1.clone()), pieces(&other)[2].1);
    assert_eq!(three.pool(&held, &pieces(&other)[2].1), None);
}

#[test]
fn unbalanced_pieces_follow_their_counts_and_rebuild_through_gossip() {
    // Trained on asymmetric links, a 300 KB batch gets an unbalanced assignment.
    // Trained on a straggler (follower 5), as a leader's NIC would show it: each piece
    // answered after the bytes sent up to it in this round.
    let mut codec = RsCodec::new(Scheme::Crossword, Mode::Adaptive, DEFAULT_GAP).with_unbalanced();
    let mut slot = 0;
    for round in 0..20u64 {
        for size in [1_000usize, 200_000] {
            slot += 1;
            let at = ms(round * 50);
            let p = codec.encode(at, slot, Ballot::new(1, 1), batch(size, 1), &MEMBERS, 1);
            assert!(p.quorum >= 3);
            let mut ahead = 0.0;
            for ((peer, v), bw) in pieces(&p).into_iter().filter(|(m, _)| *m != 1).zip([10e6, 10e6, 10e6, 0.1e6]) {
                ahead += match v {
                    Value::Coded(c) => c.bytes() as f64,
                    _ => size as f64,
                };
                codec.on_accepted(at + Duration::from_secs_f64(0.001 + ahead / bw), peer, slot);
            }
        }
    }
    let p = codec.encode(ms(1_000), 99, Ballot::new(1, 1), batch(300_000, 5), &MEMBERS, 1);
    let each = pieces(&p);
    let Value::Coded(first) = &each[0].1 else { panic!("coded") };
    assert!(!first.counts.is_empty(), "an unbalanced assignment was chosen");
    let counts: Vec<usize> = first.counts.iter().map(|k| *k as usize).collect();
    let a = synod_core::erasure::Assignment::unbalanced(5, &counts);
    assert!(synod_core::erasure::c2_holds(&a, 2, 3, p.quorum));
    for (to, v) in &each {
        let Value::Coded(piece) = v else { panic!("coded") };
        let idx: Vec<usize> = piece.shards.iter().map(|(i, _)| *i as usize).collect();
        let mut want = a.of((*to - 1) as usize).to_vec();
        want.sort();
        assert_eq!(idx, want, "to={to}");
        assert_eq!(codec.piece_for(&p.own, &MEMBERS, *to), v.clone());
    }
    // The slowest follower (5) completes its slot from the peers its plan names.
    let mine = each[3].1.clone();
    let plan = codec.fill_plan(&mine, &MEMBERS, 5, Some(1), 0, &|_| false);
    let mut held = mine;
    for ask in &plan {
        let theirs = &each[(ask.peer - 2) as usize].1;
        held = codec.pool(&held, &codec.share(theirs, &ask.parts).unwrap()).unwrap();
    }
    assert!(plan.iter().all(|a| a.peer != 1), "the leader is not asked: {plan:?}");
    assert_eq!(codec.payload(&held).unwrap().into_owned(), batch(300_000, 5));
    let mut extra = BTreeMap::new();
    codec.status(&mut extra);
    assert!(extra["coded_instances"].contains("unbalanced:"), "{extra:?}");
}

#[test]
fn gossip_asks_the_peers_assigned_the_missing_shards_leader_last() {
    let mut codec = codec(Scheme::Crossword, Mode::Fixed(1));
    let p = codec.encode(ms(1_000), 1, Ballot::new(1, 1), batch(900, 1), &MEMBERS, 1);
    let mine = pieces(&p)[1].1.clone(); // acceptor 3 holds shard 2
    let plan = codec.fill_plan(&mine, &MEMBERS, 3, Some(1), 0, &|_| false);
    let asked: Vec<(NodeId, Vec<u16>)> = plan.iter().map(|a| (a.peer, a.parts.clone())).collect();
    assert_eq!(asked, vec![(4, vec![3]), (5, vec![4])]);
    // Peer 4 silent: 5, then the leader for a data shard.
    let plan = codec.fill_plan(&mine, &MEMBERS, 3, Some(1), 0, &|p| p == 4);
    let asked: Vec<(NodeId, Vec<u16>)> = plan.iter().map(|a| (a.peer, a.parts.clone())).collect();
    assert_eq!(asked, vec![(5, vec![4]), (2, vec![1])]);
    // What a peer shares pools into a complete piece.
    let four = codec.share(&pieces(&p)[2].1, &[3]).unwrap();
    let five = codec.share(&pieces(&p)[3].1, &[4]).unwrap();
    let pooled = codec.pool(&codec.pool(&mine, &four).unwrap(), &five).unwrap();
    assert_eq!(codec.payload(&pooled).unwrap().into_owned(), batch(900, 1));
    // RSPaxos asks the leader.
    let rs = RsCodec::new(Scheme::RsPaxos, Mode::Adaptive, DEFAULT_GAP);
    let plan = rs.fill_plan(&mine, &MEMBERS, 3, Some(1), 0, &|_| false);
    assert_eq!(plan.len(), 1);
    assert_eq!(plan[0].peer, 1);
}

// ----- scenarios ------------------------------------------------------------------------------

fn elect(net: &mut Net) -> NodeId {
    net.run_for(Duration::from_secs(2));
    net.leader().expect("a leader within 2 s")
}

fn big(i: u64) -> String {
    format!("{i}:{}", "x".repeat(3000 + i as usize))
}

/// Puts `k1…k{count}` (values `value(i)`) through the elected leader, lets every replica
/// execute them all (through gossip or fetches), crashes the leader and reads `k{probe}` from
/// the next one.
fn put_execute_fail_over_get(net: &mut Net, count: u64, value_of: impl Fn(u64) -> String, probe: u64) {
    let l1 = elect(net);
    for i in 1..=count {
        net.request(l1, 1, i, put(&format!("k{i}"), &value_of(i)));
        assert_eq!(net.reply_for(1, i), Some(&DONE));
    }
    net.run_for(Duration::from_secs(1));
    for n in 1..=5 {
        assert_eq!(net.executed(n), net.executed(l1), "replica {n} executed every value");
    }
    net.crash(l1);
    let (l2, _) = net.await_leader(Duration::from_secs(5)).expect("a new leader");
    net.request(l2, 2, 1, get(&format!("k{probe}")));
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.reply_for(2, 1), Some(&value(&value_of(probe))));
    net.assert_agreement();
}

#[test]
fn followers_execute_through_gossip_and_a_new_leader_rebuilds_after_failover() {
    // c = 1, q = 5: every follower holds one shard of each value and must gossip.
    let mut net = Net::with_params(5, build, params(&[("config", "1"), ("gossip_gap", "0")]));
    let l1 = elect(&mut net);
    for i in 1..=10 {
        net.request(l1, 1, i, put(&format!("k{i}"), &big(i)));
        assert_eq!(net.reply_for(1, i), Some(&DONE));
    }
    net.run_for(Duration::from_millis(500));
    for n in 1..=5 {
        assert_eq!(net.executed(n), net.executed(l1), "replica {n} executed through gossip");
    }
    net.assert_agreement();
    // The leader fails: the next one rebuilds every value from the followers' shards.
    net.crash(l1);
    let (l2, _) = net.await_leader(Duration::from_secs(5)).expect("new leader");
    net.request(l2, 2, 1, get("k7"));
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.reply_for(2, 1), Some(&value(&big(7))));
    net.assert_agreement();
}

#[test]
fn unbalanced_assignments_commit_execute_and_survive_failover() {
    let mut net = Net::with_params(5, build, params(&[("assign", "unbalanced"), ("gossip_gap", "0")]));
    put_execute_fail_over_get(&mut net, 20, |i| big(i * 50), 17);
    // config=rotate cycles through unbalanced assignments (what the checks run): each one
    // keeps C2, and a network running them stays live through a failover.
    let mut rot = codec(Scheme::Crossword, Mode::Rotate).with_unbalanced();
    let mut seen = std::collections::BTreeSet::new();
    for slot in 0..12 {
        let p = rot.encode(ms(1_000), slot, Ballot::new(1, 1), batch(3000, 1), &MEMBERS, 1);
        if let Some((_, Value::Coded(c))) = pieces(&p).into_iter().find(|(m, _)| *m != 1) {
            let counts: Vec<usize> = c.counts.iter().map(|k| *k as usize).collect();
            if !counts.is_empty() {
                let a = synod_core::erasure::Assignment::unbalanced(5, &counts);
                assert!(synod_core::erasure::c2_holds(&a, 2, 3, p.quorum), "{counts:?} q={}", p.quorum);
                seen.insert((counts, p.quorum));
            }
        }
    }
    assert!(seen.len() >= 3, "several unbalanced assignments: {seen:?}");
    let rotating = params(&[("assign", "unbalanced"), ("config", "rotate"), ("gossip_gap", "0")]);
    put_execute_fail_over_get(&mut Net::with_params(5, build, rotating), 10, big, 9);
    let setup =
        |options: &[(&str, &str)]| crate::registry::Setup { id: 1, members: MEMBERS.to_vec(), params: params(options) };
    assert!(build(&setup(&[("assign", "unbalanced"), ("config", "1")])).is_err());
    assert!(build(&setup(&[("assign", "sideways")])).is_err());
    assert!(crate::rspaxos::build(&setup(&[("assign", "unbalanced")])).is_err());
}

#[test]
fn fig2_two_failures_after_a_one_shard_commit() {
    // Fig. 2: with n = 5 an instance committed on four servers with one shard each cannot
    // survive two failures. RSPaxos (q = 4, elect 4) tolerates one: after two failures it
    // elects no leader. Crossword with the chooser falls back to full copies and stays live.
    let mut rs = Net::new(5, crate::rspaxos::build);
    let l = elect(&mut rs);
    rs.request(l, 1, 1, put("a", &big(1)));
    assert_eq!(rs.reply_for(1, 1), Some(&DONE));
    let others: Vec<NodeId> = (1..=5).filter(|n| *n != l).collect();
    rs.crash(l);
    rs.crash(others[0]);
    assert!(rs.await_leader(Duration::from_secs(10)).is_none(), "RSPaxos cannot elect with 3 of 5");

    let mut cw = Net::new(5, build);
    let l = elect(&mut cw);
    for i in 1..=20 {
        cw.request(l, 1, i, put("a", &big(i)));
        assert_eq!(cw.reply_for(1, i), Some(&DONE));
    }
    let followers: Vec<NodeId> = (1..=5).filter(|n| *n != l).collect();
    cw.crash(followers[0]);
    cw.crash(followers[1]);
    // The leader keeps committing with the three live servers (in-flight instances that
    // needed the failed ones are re-proposed after a fresh phase 1).
    for i in 21..=25 {
        cw.request(l, 1, i, put("a", &big(i)));
    }
    cw.run_for(Duration::from_secs(10));
    let leader = cw.leader().expect("a leader");
    cw.request(leader, 2, 1, get("a"));
    cw.run_for(Duration::from_millis(500));
    assert_eq!(cw.reply_for(2, 1), Some(&value(&big(25))));
    cw.assert_agreement();
}

#[test]
fn rspaxos_followers_fetch_values_and_survive_one_failure() {
    // One failure is tolerated; the followers fetched every value from the leader.
    put_execute_fail_over_get(&mut Net::new(5, crate::rspaxos::build), 5, big, 3);
}

#[test]
fn a_fetch_is_not_asked_again_while_its_answer_is_out() {
    // RSPaxos followers fetch values from the leader. Behind a shaped NIC an answer can take
    // longer than a fetch cycle (20 ms); asked again every cycle, the leader queued copy
    // after copy of the same shards and its Accepts and heartbeats starved behind them (the
    // shaped Fig. 6 runs: every NIC at its cap, 0 ops/s, the leader lost again and again).
    // Here every answer is held back for 1 s: each follower asks once, then again only
    // after `RESEND_AFTER` cycles (before the fix: every cycle, ~40 requests each).
    use std::cell::RefCell;
    use std::rc::Rc;
    use synod_core::protocol::decode;
    let mut net = Net::new(5, crate::rspaxos::build);
    let l = elect(&mut net);
    let asked: Rc<RefCell<BTreeMap<NodeId, u32>>> = Rc::default();
    let counter = asked.clone();
    net.drop = Box::new(move |from, _, bytes| match decode::<crate::multipaxos::Msg>(bytes) {
        Ok(crate::multipaxos::Msg::FillReq { .. }) => {
            *counter.borrow_mut().entry(from).or_default() += 1;
            false
        }
        Ok(crate::multipaxos::Msg::Fill { .. }) => true,
        _ => false,
    });
    for i in 1..=5 {
        net.request(l, 1, i, put(&format!("k{i}"), &big(i)));
        assert_eq!(net.reply_for(1, i), Some(&DONE));
    }
    net.run_for(Duration::from_secs(1));
    let counts = asked.borrow().clone();
    assert_eq!(counts.len(), 4, "every follower fetches: {counts:?}");
    // One request, then one per 16 cycles (320 ms) of silence: at most 4 in 1 s.
    assert!(counts.values().all(|n| (1..=4).contains(n)), "{counts:?}");
    // The answers get through again: every follower completes and executes every value.
    net.drop = Box::new(|_, _, _| false);
    net.run_for(Duration::from_secs(1));
    for n in 1..=5 {
        assert_eq!(net.executed(n), net.executed(l), "replica {n} executed every value");
    }
    net.assert_agreement();
}

#[test]
fn restart_from_the_wal_keeps_shards() {
    let mut net = Net::with_params(3, build, params(&[("config", "rotate")]));
    let l = elect(&mut net);
    for i in 1..=6 {
        net.request(l, 1, i, put(&format!("k{i}"), &big(i)));
        assert_eq!(net.reply_for(1, i), Some(&DONE));
    }
    // Every replica crashes and restarts from its durable records.
    for n in 1..=3 {
        net.crash(n);
    }
    for n in 1..=3 {
        net.restart(n);
    }
    let (l2, _) = net.await_leader(Duration::from_secs(5)).expect("leader after restart");
    net.request(l2, 2, 1, get("k5"));
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.reply_for(2, 1), Some(&value(&big(5))));
    net.assert_agreement();
}
