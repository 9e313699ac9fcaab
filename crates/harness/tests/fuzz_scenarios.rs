//! Scenario files are user input: every shipped scenario parses, and mutated copies of them
//! are refused with an error or parsed, never a panic (a fuzz harness run as a test; budget
//! `SYNOD_FUZZ_ITERS`, long run in docs/testing.md).

use synod_core::fuzz::{iterations, mutate};
use synod_harness::scenario::Scenario;

#[test]
fn mutated_scenarios_are_refused_with_an_error_never_a_panic() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios");
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| (p.display().to_string(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "only {} scenarios found in {dir}", files.len());
    for (origin, text) in &files {
        Scenario::parse(text, origin, 1.0).unwrap_or_else(|e| panic!("{origin}: {e:#}"));
    }
    let mut rng = synod_core::rng_from_seed(0x5ce);
    let iters = iterations(2_000);
    let mut refused = 0u64;
    for i in 0..iters {
        let (origin, text) = &files[i % files.len()];
        let other = &files[(i * 7 + 1) % files.len()].1;
        let bad = mutate(&mut rng, text.as_bytes(), other.as_bytes());
        let scale = [1.0, 0.5, 0.0, -1.0, f64::NAN, 1e-9, 1e9][i % 7];
        if let Err(e) = Scenario::parse(&String::from_utf8_lossy(&bad), origin, scale) {
            assert!(!format!("{e:#}").is_empty());
            refused += 1;
        }
    }
    assert!(refused > 0, "no mutated scenario was refused");
    eprintln!("scenarios: {iters} mutated ({refused} refused with an error), no panic");
}
