//! The Rust linearizability checker and the independent Go oracle (Porcupine, in
//! `tools/porcupine`) must agree on every history of the saved corpus, and both must match
//! the verdict recorded in the file.
//!
//! Requires `go` on PATH (CI has it). Without it this test FAILS: the cross-check is the
//! point of the corpus and must never be skipped silently.

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
