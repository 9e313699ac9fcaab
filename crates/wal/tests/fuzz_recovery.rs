//! Recovery on arbitrary segment bytes (a fuzz harness run as a test): real logs (several
//! segments, sometimes after a rewrite) are written, one or two of their files are damaged,
//! and the log is opened again. Opening may refuse the log with an error that names what is
//! wrong, or recover records; it must never panic or allocate what a damaged length announces.
//! Damage that cannot forge a record (bit flips, boundary bytes, truncation, random bytes
//! inserted: a forged record would need a matching CRC-32C) must recover a prefix of what was
//! written, and a recovered log must take new records and give them back after a reopen.
//! Budget: `SYNOD_FUZZ_ITERS` (CI default below); the long run is in docs/testing.md.

use bytes::Bytes;
use rand::Rng as _;
use std::fs;
use std::path::Path;
use synod_core::fuzz::{iterations, mutate};
use synod_core::Rng;
use synod_wal::{FsyncMode, Wal, WalOptions};

fn opts() -> WalOptions {
    WalOptions { fsync: FsyncMode::Never, segment_bytes: 200, ..WalOptions::default() }
}

/// A log written in a few commits, sometimes rewritten half-way: its files and the records
/// a reopen returns.
fn write_log(rng: &mut Rng, dir: &Path) -> (Vec<(String, Vec<u8>)>, Vec<Bytes>) {
    let (mut wal, _) = Wal::open(dir, opts()).unwrap();
    let mut want = Vec::new();
    for b in 0..rng.gen_range(1..8) {
        let batch: Vec<Bytes> = (0..rng.gen_range(1..6))
            .map(|i| Bytes::from(format!("r{b}.{i}{}", "x".repeat(rng.gen_range(0..40)))))
            .collect();
        wal.append(&batch).unwrap();
        wal.commit().unwrap();
        want.extend(batch);
        if rng.gen_bool(0.15) {
            want.drain(..want.len() / 2);
            wal.rewrite(&want).unwrap();
        }
    }
    drop(wal);
    let mut files: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().into_string().unwrap(), fs::read(e.path()).unwrap())
        })
        .collect();
    files.sort();
    (files, want)
}

/// Damage that cannot make a valid record out of nothing.
fn damage(rng: &mut Rng, bytes: &[u8]) -> Vec<u8> {
    let mut m = bytes.to_vec();
    match rng.gen_range(0..4) {
        0 if !m.is_empty() => {
            let i = rng.gen_range(0..m.len());
            m[i] ^= 1 << rng.gen_range(0..8);
        }
        1 if !m.is_empty() => {
            let i = rng.gen_range(0..m.len());
            m[i] = [0x00, 0xff, 0x7f, 0x80][rng.gen_range(0..4)];
        }
        2 => m.truncate(rng.gen_range(0..=m.len())),
        _ => {
            let i = rng.gen_range(0..=m.len());
            let extra: Vec<u8> = (0..rng.gen_range(1..12)).map(|_| rng.gen()).collect();
            m.splice(i..i, extra);
        }
    }
    m
}

fn clear(dir: &Path) {
    for e in fs::read_dir(dir).unwrap() {
        fs::remove_file(e.unwrap().path()).unwrap();
    }
}

#[test]
fn damaged_segments_are_refused_or_recovered_never_a_panic() {
    let root = if Path::new("/dev/shm").is_dir() { tempfile::tempdir_in("/dev/shm") } else { tempfile::tempdir() };
    let root = root.unwrap();
    let dir = root.path().join("wal");
    let mut rng = synod_core::rng_from_seed(0x3a1);
    let iters = iterations(400);
    let (mut recovered, mut refused, mut shorter) = (0u64, 0u64, 0u64);
    for it in 0..iters {
        if dir.exists() {
            clear(&dir);
        } else {
            fs::create_dir(&dir).unwrap();
        }
        let (files, want) = write_log(&mut rng, &dir);
        clear(&dir);
        // Damage one file (now and then two); `forgeable` when the damage could splice valid
        // records from elsewhere (the generic mutations copy and move ranges).
        let forgeable = it % 2 == 1;
        let hit: Vec<usize> =
            (0..if rng.gen_bool(0.2) { 2 } else { 1 }).map(|_| rng.gen_range(0..files.len())).collect();
        for (i, (name, bytes)) in files.iter().enumerate() {
            let bytes = if !hit.contains(&i) {
                bytes.clone()
            } else if forgeable {
                let other = &files[rng.gen_range(0..files.len())].1;
                mutate(&mut rng, bytes, other)
            } else {
                damage(&mut rng, bytes)
            };
            fs::write(dir.join(name), bytes).unwrap();
        }
        match Wal::open(&dir, opts()) {
            Err(e) => {
                assert!(!e.to_string().is_empty());
                refused += 1;
            }
            Ok((mut wal, got)) => {
                recovered += 1;
                if !forgeable {
                    assert!(
                        got.len() <= want.len() && got[..] == want[..got.len()],
                        "damage that cannot forge a record recovered something that was not written: \
                         {} records of {}: files {:?} damaged {hit:?}\nwant {want:?}\ngot {got:?}",
                        got.len(),
                        want.len(),
                        files.iter().map(|(n, b)| (n, b.len())).collect::<Vec<_>>()
                    );
                }
                shorter += (got.len() < want.len()) as u64;
                // The recovered log goes on: a new record after what was recovered.
                let extra = Bytes::from_static(b"after recovery");
                wal.append(std::slice::from_ref(&extra)).unwrap();
                wal.commit().unwrap();
                drop(wal);
                let (_, again) = Wal::open(&dir, opts()).expect("a recovered log reopens");
                let mut expect = got.clone();
                expect.push(extra);
                assert_eq!(again, expect, "the recovered log lost or changed records on reopen");
            }
        }
    }
    assert!(refused > 0 && recovered > 0, "refused {refused}, recovered {recovered}");
    eprintln!(
        "wal recovery: {iters} damaged logs, {recovered} recovered ({shorter} shorter), {refused} refused, no panic"
    );
}
