//! The Rust linearizability checker and the independent Go oracle (Porcupine, in
//! `tools/porcupine`) must agree on every history of the saved corpus, and both must match
//! the verdict recorded in the file.
//!
//! Requires `go` on PATH (CI has it). Without it this test FAILS: the cross-check is the
//! point of the corpus and must never be skipped silently.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use synod_sim::{linearizability, History};

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/histories");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

/// Build tools/porcupine once into the target directory.
fn porcupine_binary(name: &str) -> PathBuf {
    let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/porcupine");
    let out = std::env::temp_dir().join(format!("synod-porcupine-{name}-{}", std::process::id()));
    let status = Command::new("go").arg("build").arg("-o").arg(&out).arg(".").current_dir(&tool).status();
    match status {
        Ok(s) if s.success() => out,
        Ok(s) => panic!("`go build` of {} failed ({s})", tool.display()),
        Err(e) => panic!(
            "the corpus cross-check needs the Go toolchain: running `go` failed ({e}). Install Go \
             (https://go.dev/dl) and put it on PATH; this test must not be skipped."
        ),
    }
}

#[test]
fn rust_checker_and_porcupine_agree_on_the_corpus() {
    let files = corpus();
    assert!(files.len() >= 20, "corpus too small: {} files", files.len());
    let porcupine = porcupine_binary("corpus");
    let (mut lin, mut nonlin) = (0, 0);
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let history = History::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let expect = history.expect.unwrap_or_else(|| panic!("{}: corpus files must record `expect`", path.display()));
        let rust = linearizability::check(&history);
        assert_eq!(rust.is_ok(), expect, "{}: Rust checker disagrees with `expect`: {rust:?}", path.display());
        let out = Command::new(&porcupine).arg(path).output().expect("run porcupine");
        let go = match out.status.code() {
            Some(0) => true,
            Some(1) => false,
            _ => panic!("porcupine failed on {}: {}", path.display(), String::from_utf8_lossy(&out.stderr)),
        };
        assert_eq!(go, expect, "{}: Porcupine disagrees with the Rust checker", path.display());
        if expect {
            lin += 1;
        } else {
            nonlin += 1;
        }
    }
    let _ = std::fs::remove_file(&porcupine);
    assert!(lin >= 5 && nonlin >= 5, "need both kinds: {lin} linearizable, {nonlin} not");
}

#[test]
fn porcupine_rejects_malformed_input() {
    let porcupine = porcupine_binary("malformed");
    let bad = std::env::temp_dir().join(format!("synod-bad-history-{}.json", std::process::id()));
    std::fs::write(&bad, r#"{"format":"synod-history-v1","ops":[{"client":1,"kind":"scan","key":"k","call":0,"return":null,"output":null}]}"#).unwrap();
    let out = Command::new(&porcupine).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown kind"));
    // The Rust reader refuses it too, with a clear error.
    let err = History::from_json(&std::fs::read_to_string(&bad).unwrap()).unwrap_err();
    assert!(err.contains("unknown kind"), "{err}");
    let _ = std::fs::remove_file(&bad);
    let _ = std::fs::remove_file(&porcupine);
}

/// The overloaded-IDEM history of the corpus (28 of 50 operations on k2 indeterminate) is
/// checked in well under a second, and the same history with one stale read appended is
/// still refused, with the violation on k2. (Before the search's reductions the first took
/// more than 10 s and the second did not finish; Porcupine still times out on the second,
/// whose proof needs the exhaustive search, so the mutant is checked here, not in the corpus.)
#[test]
fn many_indeterminate_ops_check_fast_and_a_stale_read_among_them_is_caught() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/histories/idem-rt2-seed2434.json");
    let mut history = History::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let start = std::time::Instant::now();
    assert!(linearizability::check(&history).is_ok());
    // The first completed put on k2 is overwritten by later completed writes; read it at the end.
    let first = history
        .ops
        .iter()
        .filter(|o| o.ret.is_some() && matches!(&o.op, synod_sim::KvOp::Put { key, .. } if key == "k2"))
        .min_by_key(|o| o.ret)
        .cloned()
        .unwrap();
    let synod_sim::KvOp::Put { value, .. } = &first.op else { unreachable!() };
    let end = history.ops.iter().map(|o| o.ret.unwrap_or(o.call).max(o.call)).max().unwrap();
    history.ops.push(synod_sim::Operation {
        client: 999,
        op: synod_sim::KvOp::Get { key: "k2".into() },
        call: end + 1000,
        ret: Some(end + 2000),
        output: Some(synod_sim::KvOutput::Value(Some(value.clone()))),
    });
    let v = linearizability::check(&history).unwrap_err();
    assert_eq!(v.key, "k2");
    assert!(v.slice.iter().any(|o| o.client == 999), "{v}");
    assert!(start.elapsed().as_secs() < 10, "took {:?}", start.elapsed());
}

/// Rich histories (`--workload rich`: lists, INCR, APPEND, multi-key operations, scans,
/// MULTI/EXEC with WATCH): Porcupine's rich model (`tools/porcupine/rich.go`, an independent
/// Go implementation of the state machine's semantics) and the Rust checker agree on the
/// histories of several protocols, and on every mutant made by changing one recorded result
/// (a counter, a list, a popped or read value, a scan, a multi-get, a MULTI's results).
#[test]
fn rust_checker_and_porcupine_agree_on_rich_histories_and_their_mutants() {
    use synod_core::OpResult;
    use synod_sim::{KvOp, KvOutput, SimConfig};
    let porcupine = porcupine_binary("rich");
    let dir = std::env::temp_dir().join(format!("synod-rich-histories-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let verdict = |h: &History, name: &str| -> (bool, bool) {
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, h.to_json()).unwrap();
        let out = Command::new(&porcupine).arg(&path).output().expect("run porcupine");
        let go = match out.status.code() {
            Some(0) => true,
            Some(1) => false,
            _ => panic!("porcupine failed on {}: {}", path.display(), String::from_utf8_lossy(&out.stderr)),
        };
        (linearizability::check(h).is_ok(), go)
    };
    let mutate = |r: &OpResult| -> Option<OpResult> {
        Some(match r {
            OpResult::Int(n) => OpResult::Int(n + 7),
            OpResult::Items(Some(v)) if !v.is_empty() => OpResult::Items(Some(v[..v.len() - 1].to_vec())),
            OpResult::Value(Some(b)) => OpResult::Value(Some(bytes::Bytes::from([&b[..], b"x"].concat()))),
            OpResult::Scan(v) if !v.is_empty() => OpResult::Scan(v[..v.len() - 1].to_vec()),
            OpResult::Values(v) if v.iter().any(Option::is_some) => OpResult::Values(vec![None; v.len()]),
            OpResult::Multi(Some(rs)) if rs.iter().any(|r| matches!(r, OpResult::Int(_))) => OpResult::Multi(Some(
                rs.iter().map(|r| if let OpResult::Int(n) = r { OpResult::Int(n + 7) } else { r.clone() }).collect(),
            )),
            _ => return None,
        })
    };
    let (mut histories, mut mutants, mut caught) = (0, 0, 0);
    for protocol in ["multipaxos", "raft", "epaxos"] {
        let info = synod_protocols::registry::find(protocol).unwrap();
        for seed in 0..6 {
            let report = synod_sim::run(&SimConfig { rich: true, keys: 16, ..SimConfig::new(info, seed) });
            let h = report.history;
            let (rust, go) = verdict(&h, &format!("{protocol}-{seed}"));
            assert_eq!(rust, go, "{protocol} seed {seed}: the checkers disagree (Rust {rust}, Porcupine {go})");
            assert!(rust, "{protocol} seed {seed}: not linearizable: {:?}", report.failure);
            histories += 1;
            // One mutant per operation kind that has a result to change.
            let mut kinds = BTreeSet::new();
            for i in 0..h.ops.len() {
                let (KvOp::Rich { op, .. }, Some(KvOutput::Result(r))) = (&h.ops[i].op, &h.ops[i].output) else {
                    continue;
                };
                let kind = format!("{op:?}").split([' ', '{', '(']).next().unwrap_or("").to_string();
                let Some(bad) = mutate(r) else { continue };
                if !kinds.insert(kind.clone()) {
                    continue;
                }
                let mut m = h.clone();
                m.ops[i].output = Some(KvOutput::Result(bad));
                let (rust, go) = verdict(&m, &format!("{protocol}-{seed}-{kind}"));
                assert_eq!(rust, go, "{protocol} seed {seed}, {kind} result changed: Rust {rust}, Porcupine {go}");
                mutants += 1;
                caught += usize::from(!rust);
            }
        }
    }
    println!("rich: {histories} histories agree; {mutants} mutants agree, {caught} of them not linearizable");
    assert!(caught * 10 >= mutants * 8, "only {caught} of {mutants} mutants were caught");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&porcupine);
}
