use super::*;
use std::collections::HashMap;

const DRAWS: usize = 100_000;

fn spec(letter: &str) -> WorkloadSpec {
    WorkloadSpec::preset(letter).unwrap()
}

fn kind(op: &BenchOp) -> &'static str {
    match op {
        BenchOp::Read { .. } => "read",
        BenchOp::Update { .. } => "update",
        BenchOp::Insert { .. } => "insert",
        BenchOp::Scan { .. } => "scan",
        BenchOp::ReadModifyWrite { .. } => "rmw",
    }
}

fn mix_of(spec: WorkloadSpec) -> HashMap<&'static str, f64> {
    let mut w = Workload::new(spec).unwrap();
    let mut counts: HashMap<&'static str, f64> = HashMap::new();
    for _ in 0..DRAWS {
        *counts.entry(kind(&w.next_op())).or_default() += 1.0 / DRAWS as f64;
    }
    counts
}

#[test]
fn presets_have_the_ycsb_operation_mix() {
    let expect: &[(&str, &[(&str, f64)])] = &[
        ("a", &[("read", 0.5), ("update", 0.5)]),
        ("b", &[("read", 0.95), ("update", 0.05)]),
        ("c", &[("read", 1.0)]),
        ("d", &[("read", 0.95), ("insert", 0.05)]),
        ("e", &[("scan", 0.95), ("insert", 0.05)]),
        ("f", &[("read", 0.5), ("rmw", 0.5)]),
    ];
    for (letter, want) in expect {
        let got = mix_of(spec(letter));
        for (k, p) in *want {
            let g = got.get(k).copied().unwrap_or(0.0);
            assert!((g - p).abs() < 0.01, "workload {letter}: {k} share {g:.4}, expected {p}");
        }
        let other: f64 = got.iter().filter(|(k, _)| !want.iter().any(|(w, _)| w == *k)).map(|(_, v)| v).sum();
        assert_eq!(other, 0.0, "workload {letter} issued unexpected operations: {got:?}");
    }
    assert_eq!(spec("d").key_dist, KeyDist::Latest { theta: 0.99 });
    assert_eq!(spec("a").key_dist, KeyDist::Zipfian { theta: 0.99 });
}

#[test]
fn custom_mix_is_normalized() {
    let mut s = spec("a");
    s.mix = Mix::parse("read=3,scan=1").unwrap();
    let got = mix_of(s);
    assert!((got["read"] - 0.75).abs() < 0.01, "{got:?}");
    assert!((got["scan"] - 0.25).abs() < 0.01, "{got:?}");
}

fn zeta_n(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

#[test]
fn zipfian_ranks_follow_the_power_law() {
    let n = 1000;
    let theta = 0.99;
    let z = Zipfian::new(n, theta);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut freq = vec![0u64; n as usize];
    let draws = 400_000;
    for _ in 0..draws {
        freq[z.next(&mut rng) as usize] += 1;
    }
    // Top item share is 1/ζ(n) exactly in the Gray et al. generator.
    let top = freq[0] as f64 / draws as f64;
    let want = 1.0 / zeta_n(n, theta);
    assert!((top - want).abs() / want < 0.03, "top share {top:.4}, theory {want:.4}");
    // Rank-frequency slope on log-log over ranks 1..=100 (least squares): ≈ -θ.
    let pts: Vec<(f64, f64)> = (0..100).map(|r| (((r + 1) as f64).ln(), (freq[r] as f64).ln())).collect();
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / pts.len() as f64;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / pts.len() as f64;
    let slope =
        pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / pts.iter().map(|p| (p.0 - mx).powi(2)).sum::<f64>();
    assert!((slope + theta).abs() < 0.1, "log-log slope {slope:.3}, expected {}", -theta);
    // Every rank stays in range and frequencies are non-increasing at the head.
    assert!(freq[0] > freq[1] && freq[1] > freq[5] && freq[5] > freq[50]);
}

#[test]
fn zipfian_with_smaller_theta_is_flatter() {
    let n = 1000;
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let z = Zipfian::new(n, 0.5);
    let draws = 200_000;
    let top = (0..draws).filter(|_| z.next(&mut rng) == 0).count() as f64 / draws as f64;
    let want = 1.0 / zeta_n(n, 0.5);
    assert!((top - want).abs() / want < 0.1, "θ=0.5 top share {top:.4}, theory {want:.4}");
}

#[test]
fn scrambled_zipfian_keeps_skew_but_moves_the_hot_record() {
    let mut s = spec("c");
    s.record_count = 1000;
    let mut w = Workload::new(s).unwrap();
    let mut freq: HashMap<u64, u64> = HashMap::new();
    for _ in 0..DRAWS {
        *freq.entry(w.existing_record()).or_default() += 1;
    }
    let (&hottest, &count) = freq.iter().max_by_key(|(_, c)| **c).unwrap();
    let share = count as f64 / DRAWS as f64;
    let want = 1.0 / zeta_n(1000, 0.99);
    // Hash collisions may fold a second rank onto the hottest record, so allow some excess.
    assert!(share > want * 0.95 && share < want * 1.5, "hottest share {share:.4}, theory {want:.4}");
    assert_eq!(hottest, fnv64(0) % 1000, "rank 0 is the hottest before scrambling");
    assert_ne!(hottest, 0, "scrambling moves the hot record away from record 0");
    assert!(freq.keys().all(|&r| r < 1000));
}

#[test]
fn uniform_keys_pass_a_chi_square_check() {
    let mut s = spec("c");
    s.record_count = 100;
    s.key_dist = KeyDist::Uniform;
    let mut w = Workload::new(s).unwrap();
    let mut freq = [0f64; 100];
    for _ in 0..DRAWS {
        freq[w.existing_record() as usize] += 1.0;
    }
    let e = DRAWS as f64 / 100.0;
    let chi2: f64 = freq.iter().map(|o| (o - e).powi(2) / e).sum();
    // 99 degrees of freedom: mean 99, sd ≈ 14; 99.9th percentile ≈ 148.
    assert!(chi2 < 148.0, "chi-square {chi2:.1} with 99 dof");
    assert!(freq.iter().all(|&f| f > 0.0));
}

#[test]
fn latest_favours_recent_inserts() {
    let mut s = spec("d");
    s.record_count = 1000;
    let mut w = Workload::new(s).unwrap();
    let mut recent = 0u64;
    let mut reads = 0u64;
    let mut newest_read = 0u64;
    for _ in 0..DRAWS {
        let before = w.records();
        match w.next_op() {
            BenchOp::Read { key } => {
                reads += 1;
                // Which record is it? Compare with the last 10 records' keys.
                let last = before - 1;
                if key == key_for(last, 23) {
                    newest_read += 1;
                }
                if (before.saturating_sub(10)..before).any(|n| key_for(n, 23) == key) {
                    recent += 1;
                }
            }
            BenchOp::Insert { key, .. } => assert_eq!(key, key_for(before, 23), "inserts take the next record number"),
            other => panic!("workload D issued {other:?}"),
        }
    }
    assert_eq!(w.records(), 1000 + (DRAWS as u64 - reads));
    // The newest record alone gets 1/ζ(n) of the reads (n ≈ 3500 here: ≈ 0.12).
    let newest = newest_read as f64 / reads as f64;
    assert!(newest > 0.10, "newest record got {newest:.3} of reads");
    let share = recent as f64 / reads as f64;
    assert!(share > 0.30, "the 10 newest records got only {share:.3} of reads");
}

#[test]
fn normal_value_sizes_have_the_requested_mean_and_sd() {
    let mut s = spec("a");
    s.value_size = ValueSize::parse("normal:1000").unwrap();
    let mut w = Workload::new(s).unwrap();
    let xs: Vec<f64> = (0..DRAWS).map(|_| w.value().len() as f64).collect();
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64).sqrt();
    assert!((mean - 1000.0).abs() < 2.0, "mean {mean:.1}");
    assert!((sd - 100.0).abs() < 3.0, "sd {sd:.1}");
}

#[test]
fn mixed_value_sizes_follow_their_probabilities() {
    let mut s = spec("a");
    s.value_size = ValueSize::parse("mix:8@0.5,131072@0.5").unwrap();
    let mut w = Workload::new(s).unwrap();
    let n = 20_000;
    let mut small = 0;
    for _ in 0..n {
        match w.value().len() {
            8 => small += 1,
            131072 => {}
            other => panic!("unexpected size {other}"),
        }
    }
    let share = small as f64 / n as f64;
    assert!((share - 0.5).abs() < 0.02, "small share {share}");
}

#[test]
fn conflict_percentage_sends_that_share_of_writes_to_the_hot_key() {
    let mut s = spec("a");
    s.conflict_pct = 20.0;
    let mut w = Workload::new(s).unwrap();
    let hot = w.hot_key().clone();
    let (mut writes, mut hot_writes, mut hot_reads) = (0, 0, 0);
    for _ in 0..DRAWS {
        match w.next_op() {
            BenchOp::Update { key, .. } => {
                writes += 1;
                hot_writes += (key == hot) as u64;
            }
            BenchOp::Read { key } => hot_reads += (key == hot) as u64,
            _ => {}
        }
    }
    let share = hot_writes as f64 / writes as f64;
    assert!((share - 0.20).abs() < 0.01, "hot share of writes {share:.4}");
    assert_eq!(hot_reads, 0, "reads are not redirected to the hot key");
    assert_eq!(hot.len(), 23);
}

#[test]
fn same_seed_same_stream_different_seed_different_stream() {
    let stream = |seed| {
        let mut s = spec("e");
        s.seed = seed;
        let mut w = Workload::new(s).unwrap();
        (0..1000).map(|_| w.next_op()).collect::<Vec<_>>()
    };
    assert_eq!(stream(5), stream(5));
    assert_ne!(stream(5), stream(6));
}

#[test]
fn keys_are_ycsb_style_and_sized() {
    for size in [8, 16, 23, 40] {
        let k = key_for(12345, size);
        assert_eq!(k.len(), size, "{k:?}");
        assert!(k.starts_with(b"user"));
        assert!(k[4..].iter().all(u8::is_ascii_digit));
    }
    assert_ne!(key_for(1, 23), key_for(2, 23));
    // Distinct records give distinct keys at the default size.
    let keys: std::collections::HashSet<_> = (0..100_000).map(|n| key_for(n, 23)).collect();
    assert_eq!(keys.len(), 100_000);
}

#[test]
fn scans_have_lengths_within_bounds() {
    let mut w = Workload::new(spec("e")).unwrap();
    let mut max_seen = 0;
    for _ in 0..10_000 {
        if let BenchOp::Scan { start, record, count } = w.next_op() {
            assert!((1..=100).contains(&count));
            assert_eq!(start, key_for(record, 23));
            max_seen = max_seen.max(count);
        }
    }
    assert!(max_seen > 90);
}

#[test]
fn bad_parameters_are_clear_errors() {
    let e = |r: Result<ValueSize, SpecError>| r.unwrap_err().to_string();
    assert!(e(ValueSize::parse("normal:abc")).contains("mean is not a number"));
    assert!(e(ValueSize::parse("mix:8")).contains("BYTES@PROBABILITY"));
    assert!(e(ValueSize::parse("gauss:5")).contains("unknown value size kind"));
    assert_eq!(ValueSize::parse("500").unwrap(), ValueSize::Fixed { bytes: 500 });
    assert_eq!(ValueSize::parse("normal:500").unwrap(), ValueSize::Normal { mean: 500.0, sd: 50.0 });
    assert!(KeyDist::parse("zipfian:1.5").unwrap_err().to_string().contains("theta must be in (0, 1)"));
    assert!(KeyDist::parse("pareto").unwrap_err().to_string().contains("unknown key distribution"));
    assert_eq!(KeyDist::parse("zipfian:0.8").unwrap(), KeyDist::Zipfian { theta: 0.8 });
    assert!(Mix::parse("read=x").unwrap_err().to_string().contains("not a number"));
    assert!(Mix::parse("delete=1").unwrap_err().to_string().contains("unknown operation"));
    assert!(WorkloadSpec::preset("g").unwrap_err().to_string().contains("unknown YCSB workload"));
    let mut s = spec("a");
    s.key_size = 5;
    assert!(s.validate().unwrap_err().to_string().contains("too small"));
    s.key_size = 23;
    s.conflict_pct = 120.0;
    assert!(s.validate().unwrap_err().to_string().contains("not in 0..=100"));
}
