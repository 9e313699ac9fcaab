//! End-to-end tests of the log against real files: round trips, rotation, torn tails at every
//! offset, corruption, rewrite and interrupted rewrites.

use bytes::Bytes;
use proptest::prelude::*;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::Duration;
use synod_wal::{FsyncMode, Wal, WalError, WalOptions, MAX_RECORD_BYTES};
use tempfile::TempDir;

const HEADER_LEN: u64 = 24;

fn opts(fsync: FsyncMode) -> WalOptions {
    WalOptions { fsync, ..WalOptions::default() }
}

fn rec(i: usize) -> Bytes {
    Bytes::from(format!("record-{i}-{}", "x".repeat(i % 7)))
}

fn recs(range: std::ops::Range<usize>) -> Vec<Bytes> {
    range.map(rec).collect()
}

/// Segment files in sequence order.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    v.sort();
    v
}

fn file_len(p: &Path) -> u64 {
    fs::metadata(p).unwrap().len()
}

fn set_len(p: &Path, len: u64) {
    OpenOptions::new().write(true).open(p).unwrap().set_len(len).unwrap();
}

fn flip_byte(p: &Path, offset: u64) {
    let mut data = fs::read(p).unwrap();
    data[offset as usize] ^= 0x5A;
    fs::write(p, data).unwrap();
}

/// Open, write each batch with one commit, close; returns the segment size before each batch.
fn write_batches(dir: &Path, o: WalOptions, batches: &[Vec<Bytes>]) -> Vec<u64> {
    let (mut wal, _) = Wal::open(dir, o).unwrap();
    let mut sizes = Vec::new();
    for b in batches {
        sizes.push(wal.stats().bytes_on_disk);
        wal.append(b).unwrap();
        wal.commit().unwrap();
    }
    sizes
}

fn reopen(dir: &Path) -> (Wal, Vec<Bytes>) {
    Wal::open(dir, opts(FsyncMode::Never)).unwrap()
}

fn expect_corrupt(dir: &Path) -> (PathBuf, u64, String) {
    match Wal::open(dir, opts(FsyncMode::Never)) {
        Err(e @ WalError::Corrupt { .. }) => {
            let msg = e.to_string();
            let WalError::Corrupt { path, offset, .. } = e else { unreachable!() };
            assert!(msg.contains(&path.display().to_string()), "message names the file: {msg}");
            assert!(msg.contains(&offset.to_string()), "message names the offset: {msg}");
            (path, offset, msg)
        }
        Err(e) => panic!("expected corruption, got {e}"),
        Ok((_, r)) => panic!("expected corruption, opened with {} records", r.len()),
    }
}

#[test]
fn round_trip_in_every_mode() {
    for mode in FsyncMode::ALL {
        let tmp = TempDir::new().unwrap();
        let dir = tmp.path().join("wal");
        let (mut wal, old) = Wal::open(&dir, opts(mode)).unwrap();
        assert!(old.is_empty());
        assert_eq!(segments(&dir).len(), 1, "a new log starts with one segment");
        wal.append(&recs(0..3)).unwrap();
        wal.append(&[Bytes::new()]).unwrap();
        wal.commit().unwrap();
        wal.append(&recs(3..5)).unwrap();
        wal.commit().unwrap();
        wal.commit().unwrap(); // nothing buffered: not counted
        let st = wal.stats();
        assert_eq!(st.records_appended, 6);
        assert_eq!(st.commits, 2);
        assert_eq!(st.segments, 1);
        assert_eq!(st.bytes_on_disk, file_len(&segments(&dir)[0]));
        if mode == FsyncMode::Always {
            assert!(st.syncs >= 2, "{mode}: {st:?}");
        }
        drop(wal);
        let (_, got) = reopen(&dir);
        let mut want = recs(0..3);
        want.push(Bytes::new());
        want.extend(recs(3..5));
        assert_eq!(got, want, "{mode}");
    }
}

#[test]
fn reopen_and_append_more() {
    let tmp = TempDir::new().unwrap();
    write_batches(tmp.path(), opts(FsyncMode::Always), &[recs(0..2)]);
    for round in 1..4 {
        let (mut wal, got) = reopen(tmp.path());
        assert_eq!(got, recs(0..2 * round));
        wal.append(&recs(2 * round..2 * round + 2)).unwrap();
        wal.sync().unwrap();
        assert_eq!(wal.stats().commits, 1, "sync commits what is buffered");
    }
    assert_eq!(reopen(tmp.path()).1, recs(0..8));
    assert_eq!(segments(tmp.path()).len(), 1);
}

#[test]
fn uncommitted_appends_are_not_persisted() {
    let tmp = TempDir::new().unwrap();
    let (mut wal, _) = Wal::open(tmp.path(), opts(FsyncMode::Always)).unwrap();
    wal.append(&recs(0..2)).unwrap();
    wal.commit().unwrap();
    wal.append(&recs(2..4)).unwrap();
    drop(wal);
    assert_eq!(reopen(tmp.path()).1, recs(0..2));
}

#[test]
fn rotation_across_several_segments() {
    let tmp = TempDir::new().unwrap();
    let o = WalOptions { segment_bytes: 200, ..opts(FsyncMode::Batch) };
    let (mut wal, _) = Wal::open(tmp.path(), o.clone()).unwrap();
    for i in (0..90).step_by(3) {
        wal.append(&recs(i..i + 3)).unwrap();
        wal.commit().unwrap();
    }
    let st = wal.stats();
    let segs = segments(tmp.path());
    assert!(segs.len() >= 5, "expected several segments, got {}", segs.len());
    assert_eq!(st.segments, segs.len() as u64);
    assert_eq!(st.bytes_on_disk, segs.iter().map(|p| file_len(p)).sum::<u64>());
    assert!(st.syncs >= segs.len() as u64 - 1, "every sealed segment was synced: {st:?}");
    for p in &segs[..segs.len() - 1] {
        assert!(file_len(p) >= 200, "{} sealed early", p.display());
    }
    drop(wal);

    let (mut wal, got) = Wal::open(tmp.path(), o.clone()).unwrap();
    assert_eq!(got, recs(0..90));
    assert_eq!(wal.stats().segments, segs.len() as u64);
    wal.append(&recs(90..120)).unwrap();
    wal.commit().unwrap();
    drop(wal);
    assert_eq!(Wal::open(tmp.path(), o).unwrap().1, recs(0..120));
}

#[test]
fn torn_tail_at_every_offset_of_the_last_record() {
    let batches: Vec<Vec<Bytes>> = (0..5).map(|i| vec![rec(i)]).collect();
    let last_len = 8 + rec(4).len() as u64;
    for cut in 0..last_len {
        let tmp = TempDir::new().unwrap();
        let sizes = write_batches(tmp.path(), opts(FsyncMode::Never), &batches);
        let seg = &segments(tmp.path())[0];
        assert_eq!(file_len(seg), sizes[4] + last_len);
        set_len(seg, sizes[4] + cut);

        let (mut wal, got) = reopen(tmp.path());
        assert_eq!(got, recs(0..4), "cut after {cut} bytes of the last record");
        assert_eq!(file_len(seg), sizes[4], "torn bytes are truncated away");
        wal.append(&[Bytes::from_static(b"after the cut")]).unwrap();
        wal.commit().unwrap();
        drop(wal);

        let mut want = recs(0..4);
        want.push(Bytes::from_static(b"after the cut"));
        assert_eq!(reopen(tmp.path()).1, want, "cut {cut}");
    }
}

#[test]
fn torn_tail_of_a_multi_record_batch_keeps_the_complete_records() {
    let tmp = TempDir::new().unwrap();
    let sizes = write_batches(tmp.path(), opts(FsyncMode::Never), &[recs(0..2), recs(2..6)]);
    let seg = &segments(tmp.path())[0];
    set_len(seg, file_len(seg) - 3);
    assert_eq!(reopen(tmp.path()).1, recs(0..5));
    set_len(seg, sizes[1] + 5);
    assert_eq!(reopen(tmp.path()).1, recs(0..2));
}

#[test]
fn bad_crc_or_insane_length_in_the_last_record_is_cut() {
    let batches: Vec<Vec<Bytes>> = (0..4).map(|i| vec![rec(i)]).collect();
    // offsets inside the last record: length field, CRC field, payload
    for (what, delta) in [("length", 1u64), ("crc", 5), ("payload", 9)] {
        let tmp = TempDir::new().unwrap();
        let sizes = write_batches(tmp.path(), opts(FsyncMode::Never), &batches);
        let seg = &segments(tmp.path())[0];
        flip_byte(seg, sizes[3] + delta);
        let (mut wal, got) = reopen(tmp.path());
        assert_eq!(got, recs(0..3), "damaged {what}");
        assert_eq!(file_len(seg), sizes[3]);
        wal.append(&recs(10..11)).unwrap();
        wal.commit().unwrap();
        drop(wal);
        let mut want = recs(0..3);
        want.push(rec(10));
        assert_eq!(reopen(tmp.path()).1, want);
    }

    // A length field of ~4 GiB at the tail is corruption, not an allocation.
    let tmp = TempDir::new().unwrap();
    let sizes = write_batches(tmp.path(), opts(FsyncMode::Never), &batches);
    let seg = &segments(tmp.path())[0];
    let mut data = fs::read(seg).unwrap();
    data[sizes[3] as usize..sizes[3] as usize + 4].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    fs::write(seg, data).unwrap();
    assert_eq!(reopen(tmp.path()).1, recs(0..3));
}

#[test]
fn corruption_in_the_middle_is_an_error() {
    let batches: Vec<Vec<Bytes>> = (0..5).map(|i| vec![rec(i)]).collect();
    for delta in [0u64, 4, 10] {
        let tmp = TempDir::new().unwrap();
        let sizes = write_batches(tmp.path(), opts(FsyncMode::Never), &batches);
        let seg = segments(tmp.path())[0].clone();
        flip_byte(&seg, sizes[2] + delta);
        let before = fs::read(&seg).unwrap();
        let (path, offset, _) = expect_corrupt(tmp.path());
        assert_eq!(path, seg);
        assert_eq!(offset, sizes[2], "offset of the damaged record");
        assert_eq!(fs::read(&seg).unwrap(), before, "a refused log is left untouched");
    }

    // Zeroed bytes in the middle (a lost page) followed by valid records.
    let tmp = TempDir::new().unwrap();
    let sizes = write_batches(tmp.path(), opts(FsyncMode::Never), &batches);
    let seg = segments(tmp.path())[0].clone();
    let mut data = fs::read(&seg).unwrap();
    data[sizes[1] as usize..sizes[3] as usize].fill(0);
    fs::write(&seg, data).unwrap();
    assert_eq!(expect_corrupt(tmp.path()).1, sizes[1]);
}

#[test]
fn damage_in_a_sealed_segment_or_a_missing_segment_is_an_error() {
    let o = WalOptions { segment_bytes: 100, ..opts(FsyncMode::Never) };
    let batches: Vec<Vec<Bytes>> = (0..30).map(|i| vec![rec(i)]).collect();

    // The last record of a sealed segment: not a torn tail, because sealed segments are synced.
    let tmp = TempDir::new().unwrap();
    write_batches(tmp.path(), o.clone(), &batches);
    let segs = segments(tmp.path());
    assert!(segs.len() >= 3);
    set_len(&segs[1], file_len(&segs[1]) - 1);
    let (path, offset, _) = expect_corrupt(tmp.path());
    assert_eq!(path, segs[1]);
    assert!(offset > HEADER_LEN && offset < file_len(&segs[1]));

    // A sealed segment that lost its last whole record scans as clean: the length it was
    // sealed at, kept in the next segment's header, tells (found by tests/fuzz_recovery.rs).
    let tmp = TempDir::new().unwrap();
    write_batches(tmp.path(), o.clone(), &batches);
    let segs = segments(tmp.path());
    let (_, records) = reopen(tmp.path());
    let sealed = file_len(&segs[1]);
    // Cut segment 1 right after its second-to-last record (walk its record frames).
    let data = fs::read(&segs[1]).unwrap();
    let mut off = HEADER_LEN as usize;
    let mut boundaries = vec![off];
    while off < data.len() {
        let len = u32::from_le_bytes(data[off..off + 4].try_into().unwrap()) as usize;
        off += 8 + len;
        boundaries.push(off);
    }
    assert_eq!(off as u64, sealed);
    assert!(boundaries.len() >= 3, "segment 1 holds at least two records");
    set_len(&segs[1], boundaries[boundaries.len() - 2] as u64);
    let (path, _, msg) = expect_corrupt(tmp.path());
    assert_eq!(path, segs[1]);
    assert!(msg.contains("sealed at"), "{msg}");
    assert_eq!(records.len(), batches.len());

    // A segment missing between others.
    let tmp = TempDir::new().unwrap();
    write_batches(tmp.path(), o.clone(), &batches);
    let segs = segments(tmp.path());
    fs::remove_file(&segs[1]).unwrap();
    let (path, _, msg) = expect_corrupt(tmp.path());
    assert_eq!(path, segs[2]);
    assert!(msg.contains("missing"), "{msg}");

    // The first segment (the base) is gone.
    let tmp = TempDir::new().unwrap();
    write_batches(tmp.path(), o.clone(), &batches);
    let segs = segments(tmp.path());
    fs::remove_file(&segs[0]).unwrap();
    let (path, _, msg) = expect_corrupt(tmp.path());
    assert_eq!(path, segs[1]);
    assert!(msg.contains("base"), "{msg}");

    // A damaged header on a segment that holds records.
    let tmp = TempDir::new().unwrap();
    write_batches(tmp.path(), o, &batches);
    let segs = segments(tmp.path());
    flip_byte(segs.last().unwrap(), 3);
    let (path, offset, msg) = expect_corrupt(tmp.path());
    assert_eq!((path, offset), (segs.last().unwrap().clone(), 0));
    assert!(msg.contains("magic"), "{msg}");
}

#[test]
fn partially_written_segment_header_is_cut() {
    for cut in [0u64, 1, 10, HEADER_LEN - 1] {
        let tmp = TempDir::new().unwrap();
        let o = WalOptions { segment_bytes: 60, ..opts(FsyncMode::Never) };
        let (mut wal, _) = Wal::open(tmp.path(), o.clone()).unwrap();
        wal.append(&recs(0..4)).unwrap();
        wal.commit().unwrap();
        wal.append(&recs(4..6)).unwrap();
        wal.commit().unwrap(); // rotates first: lands in segment 2
        drop(wal);
        let segs = segments(tmp.path());
        assert_eq!(segs.len(), 2);
        // Replace segment 2 by a torn copy of its header alone.
        let header = fs::read(&segs[1]).unwrap()[..cut as usize].to_vec();
        fs::write(&segs[1], header).unwrap();

        let (mut wal, got) = Wal::open(tmp.path(), o.clone()).unwrap();
        assert_eq!(got, recs(0..4), "header cut at {cut}");
        assert_eq!(segments(tmp.path()), segs[..1].to_vec());
        wal.append(&recs(6..7)).unwrap();
        wal.commit().unwrap();
        drop(wal);
        let mut want = recs(0..4);
        want.push(rec(6));
        assert_eq!(Wal::open(tmp.path(), o).unwrap().1, want);
    }
}

#[test]
fn rewrite_then_reopen_returns_only_the_new_records() {
    let tmp = TempDir::new().unwrap();
    let o = WalOptions { segment_bytes: 150, ..opts(FsyncMode::Batch) };
    let (mut wal, _) = Wal::open(tmp.path(), o.clone()).unwrap();
    for i in 0..20 {
        wal.append(&recs(i..i + 1)).unwrap();
        wal.commit().unwrap();
    }
    assert!(segments(tmp.path()).len() > 2);
    wal.append(&recs(100..101)).unwrap(); // uncommitted: replaced too
    let new = vec![Bytes::from_static(b"snapshot"), Bytes::new(), Bytes::from_static(b"suffix")];
    wal.rewrite(&new).unwrap();
    let segs = segments(tmp.path());
    assert_eq!(segs.len(), 1, "older segments are deleted");
    let st = wal.stats();
    assert_eq!((st.segments, st.rewrites), (1, 1));
    assert_eq!(st.bytes_on_disk, file_len(&segs[0]));
    assert_eq!(reopen_copy(tmp.path()), new, "durable right after rewrite");

    wal.append(&recs(200..202)).unwrap();
    wal.commit().unwrap();
    drop(wal);
    let (mut wal, got) = Wal::open(tmp.path(), o.clone()).unwrap();
    let mut want = new.clone();
    want.extend(recs(200..202));
    assert_eq!(got, want);

    // Rewriting to nothing, twice, keeps working.
    wal.rewrite(&[]).unwrap();
    wal.rewrite(&recs(0..1)).unwrap();
    drop(wal);
    assert_eq!(Wal::open(tmp.path(), o).unwrap().1, recs(0..1));
}

/// Open a copy of the directory, as a crash right now would find it (without closing `dir`).
fn reopen_copy(dir: &Path) -> Vec<Bytes> {
    let copy = TempDir::new().unwrap();
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        // A background rewrite's cleanup thread may unlink an obsolete segment meanwhile: a
        // crash at that moment would not find it either.
        match fs::copy(e.path(), copy.path().join(e.file_name())) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            r => {
                r.unwrap();
            }
        }
    }
    reopen(copy.path()).1
}

/// A complete base segment holding `records`, as rewrite writes it, and its file name.
fn base_segment_bytes(records: &[Bytes]) -> Vec<u8> {
    let tmp = TempDir::new().unwrap();
    let (mut wal, _) = Wal::open(tmp.path(), opts(FsyncMode::Never)).unwrap();
    wal.rewrite(records).unwrap();
    drop(wal);
    let segs = segments(tmp.path());
    assert_eq!(segs.len(), 1);
    fs::read(&segs[0]).unwrap()
}

#[test]
fn crash_during_rewrite_recovers_the_old_records() {
    let new = recs(50..56);
    let base = base_segment_bytes(&new);

    // The temporary file of the rewrite, at every stage of being written.
    for cut in [0, 10, HEADER_LEN as usize, base.len() / 2, base.len()] {
        let tmp = TempDir::new().unwrap();
        write_batches(tmp.path(), opts(FsyncMode::Never), &[recs(0..3)]);
        let tmp_file = tmp.path().join("wal-0000000000000002.log.tmp");
        fs::write(&tmp_file, &base[..cut]).unwrap();
        let (_, got) = reopen(tmp.path());
        assert_eq!(got, recs(0..3), "temp file of {cut} bytes");
        assert!(!tmp_file.exists(), "leftover temp file is removed");
    }

    // The base renamed into place but incomplete (e.g. the rename reached the disk before
    // its data): the old records, and the incomplete base is removed.
    let whole_records = base.len() as u64 - HEADER_LEN;
    for cut in [HEADER_LEN, HEADER_LEN + whole_records / 2, base.len() as u64 - 1] {
        let tmp = TempDir::new().unwrap();
        write_batches(tmp.path(), opts(FsyncMode::Never), &[recs(0..3)]);
        let base_path = tmp.path().join("wal-0000000000000002.log");
        fs::write(&base_path, &base[..cut as usize]).unwrap();
        let (mut wal, got) = reopen(tmp.path());
        assert_eq!(got, recs(0..3), "base of {cut} bytes");
        assert!(!base_path.exists());
        wal.append(&recs(3..4)).unwrap();
        wal.commit().unwrap();
        drop(wal);
        assert_eq!(reopen(tmp.path()).1, recs(0..4));
    }

    // Crash after the rename, before the old segments were deleted: the new records.
    let tmp = TempDir::new().unwrap();
    write_batches(tmp.path(), opts(FsyncMode::Never), &[recs(0..3)]);
    fs::write(tmp.path().join("wal-0000000000000002.log"), &base).unwrap();
    let (mut wal, got) = reopen(tmp.path());
    assert_eq!(got, new);
    assert_eq!(segments(tmp.path()).len(), 1, "obsolete segment removed");
    wal.append(&recs(3..4)).unwrap();
    wal.commit().unwrap();
    drop(wal);
    let mut want = new.clone();
    want.push(rec(3));
    assert_eq!(reopen(tmp.path()).1, want);
}

#[test]
fn in_memory_keeps_nothing() {
    let mut wal = Wal::in_memory();
    assert!(wal.is_in_memory());
    assert_eq!(wal.dir(), None);
    wal.append(&recs(0..3)).unwrap();
    wal.commit().unwrap();
    wal.rewrite(&recs(0..1)).unwrap();
    wal.sync().unwrap();
    let st = wal.stats();
    assert_eq!((st.bytes_on_disk, st.segments, st.syncs), (0, 0, 0));
    assert_eq!((st.records_appended, st.commits, st.rewrites), (3, 1, 1));
}

#[test]
fn oversized_record_is_refused() {
    let tmp = TempDir::new().unwrap();
    let (mut wal, _) = Wal::open(tmp.path(), opts(FsyncMode::Never)).unwrap();
    // Zeroed allocations are lazily backed, so this does not touch a GiB of memory.
    let huge = Bytes::from(vec![0u8; MAX_RECORD_BYTES + 1]);
    let err = wal.append(&[rec(0), huge]).unwrap_err();
    assert!(matches!(err, WalError::RecordTooLarge { len, .. } if len == MAX_RECORD_BYTES + 1));
    // Nothing of the refused call was buffered, and the log still works.
    wal.append(&recs(1..2)).unwrap();
    wal.commit().unwrap();
    drop(wal);
    assert_eq!(reopen(tmp.path()).1, recs(1..2));
}

#[test]
fn batch_mode_syncs_in_the_background() {
    let tmp = TempDir::new().unwrap();
    let o = WalOptions { batch_interval: Duration::from_millis(5), ..opts(FsyncMode::Batch) };
    let (mut wal, _) = Wal::open(tmp.path(), o).unwrap();
    wal.append(&recs(0..1)).unwrap();
    wal.commit().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while wal.stats().syncs == 0 {
        assert!(std::time::Instant::now() < deadline, "the flusher never synced");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Quiet log: no further syncs.
    let n = wal.stats().syncs;
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(wal.stats().syncs, n);

    let (_, never) = {
        let t = TempDir::new().unwrap();
        let (mut w, _) = Wal::open(t.path(), opts(FsyncMode::Never)).unwrap();
        w.append(&recs(0..1)).unwrap();
        w.commit().unwrap();
        std::thread::sleep(Duration::from_millis(10));
        (t, w.stats().syncs)
    };
    assert_eq!(never, 0, "Never mode does not sync on commit");
}

#[test]
fn fsync_mode_serde_is_lowercase() {
    assert_eq!(serde_json::to_string(&FsyncMode::Always).unwrap(), "\"always\"");
    assert_eq!(serde_json::from_str::<FsyncMode>("\"never\"").unwrap(), FsyncMode::Never);
    assert!(serde_json::from_str::<FsyncMode>("\"Batch\"").is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random batches, random segment sizes, random reopen points: everything committed comes
    /// back, in order.
    #[test]
    fn random_batches_round_trip(
        batches in prop::collection::vec(
            (prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..8), any::<bool>()),
            1..25,
        ),
        segment_bytes in 32u64..2048,
    ) {
        let tmp = TempDir::new().unwrap();
        let o = WalOptions { segment_bytes, ..opts(FsyncMode::Never) };
        let (mut wal, _) = Wal::open(tmp.path(), o.clone()).unwrap();
        let mut want: Vec<Bytes> = Vec::new();
        for (batch, reopen_after) in batches {
            let batch: Vec<Bytes> = batch.into_iter().map(Bytes::from).collect();
            wal.append(&batch).unwrap();
            wal.commit().unwrap();
            want.extend(batch);
            if reopen_after {
                drop(wal);
                let (w, got) = Wal::open(tmp.path(), o.clone()).unwrap();
                prop_assert_eq!(&got, &want);
                wal = w;
            }
        }
        let on_disk: u64 = segments(tmp.path()).iter().map(|p| file_len(p)).sum();
        prop_assert_eq!(wal.stats().bytes_on_disk, on_disk);
        drop(wal);
        prop_assert_eq!(Wal::open(tmp.path(), o).unwrap().1, want);
    }
}

#[test]
fn wal_can_move_to_another_thread() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Wal>();
    let tmp = TempDir::new().unwrap();
    let (mut wal, _) = Wal::open(tmp.path(), opts(FsyncMode::Batch)).unwrap();
    let handle = std::thread::spawn(move || {
        wal.append(&recs(0..2)).unwrap();
        wal.commit().unwrap();
        wal
    });
    drop(handle.join().unwrap());
    assert_eq!(reopen(tmp.path()).1, recs(0..2));
}

#[test]
fn io_errors_name_the_path() {
    let tmp = TempDir::new().unwrap();
    let file = tmp.path().join("not-a-dir");
    fs::write(&file, b"x").unwrap();
    let err = Wal::open(&file, opts(FsyncMode::Never)).unwrap_err();
    assert!(matches!(err, WalError::Io { .. }), "{err}");
    assert!(err.to_string().contains("not-a-dir"), "{err}");
}

// ---------------------------------------------------------------------------------------
// Background rewrite (begin_rewrite / finish_rewrite)

fn image(records: Vec<Bytes>) -> Vec<Vec<Bytes>> {
    records.into_iter().map(|r| vec![r]).collect()
}

/// Begin background rewrite `id` and return a receiver that fires when its image is written.
fn begin(wal: &mut Wal, id: u64, records: Vec<Bytes>) -> std::sync::mpsc::Receiver<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    wal.begin_rewrite(id, image(records), move || tx.send(()).unwrap()).unwrap();
    rx
}

fn written(rx: &std::sync::mpsc::Receiver<()>) {
    rx.recv_timeout(Duration::from_secs(30)).expect("the rewrite thread reports");
}

#[test]
fn background_rewrite_keeps_the_commits_made_while_it_ran() {
    for mode in [FsyncMode::Never, FsyncMode::Batch, FsyncMode::Always] {
        let dir = TempDir::new().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), opts(mode)).unwrap();
        wal.append(&recs(0..20)).unwrap();
        wal.commit().unwrap();
        // Appended, not committed: begin_rewrite commits it before the image.
        wal.append(&recs(20..22)).unwrap();
        written(&begin(&mut wal, 7, recs(100..103)));
        assert!(wal.rewrite_in_progress());
        // Commits while the image is pending go to the old segments...
        wal.append(&recs(22..25)).unwrap();
        wal.commit().unwrap();
        assert_eq!(reopen_copy(dir.path()), recs(0..25), "{mode:?}: before the install the old content is durable");
        // ...and follow the image after the install.
        assert_eq!(wal.finish_rewrite(false).unwrap(), Some(7));
        assert!(!wal.rewrite_in_progress());
        assert_eq!(wal.finish_rewrite(false).unwrap(), None, "nothing left to install");
        wal.append(&recs(25..27)).unwrap();
        wal.commit().unwrap();
        let want: Vec<Bytes> = recs(100..103).into_iter().chain(recs(22..27)).collect();
        assert_eq!(reopen_copy(dir.path()), want, "{mode:?}");
        assert_eq!(wal.stats().rewrites, 1);
        drop(wal);
        assert_eq!(segments(dir.path()).len(), 1, "{mode:?}: old segments removed");
        let (_, got) = reopen(dir.path());
        assert_eq!(got, want, "{mode:?}");
    }
}

#[test]
fn background_rewrite_not_installed_before_a_crash_recovers_the_old_content() {
    let dir = TempDir::new().unwrap();
    let (mut wal, _) = Wal::open(dir.path(), opts(FsyncMode::Always)).unwrap();
    wal.append(&recs(0..10)).unwrap();
    wal.commit().unwrap();
    written(&begin(&mut wal, 1, recs(50..52)));
    wal.append(&recs(10..12)).unwrap();
    wal.commit().unwrap();
    // The process dies before the install: the temporary base is never renamed.
    drop(wal);
    let (mut wal, got) = reopen(dir.path());
    assert_eq!(got, recs(0..12));
    assert!(
        fs::read_dir(dir.path()).unwrap().all(|e| !e.unwrap().path().to_string_lossy().ends_with(".tmp")),
        "no temporary file left behind"
    );
    wal.append(&recs(12..13)).unwrap();
    wal.commit().unwrap();
    drop(wal);
    assert_eq!(reopen(dir.path()).1, recs(0..13));
}

#[test]
fn background_rewrite_suspends_rotation_and_queues_the_next_one() {
    let dir = TempDir::new().unwrap();
    let small = WalOptions { segment_bytes: 256, ..opts(FsyncMode::Never) };
    let (mut wal, _) = Wal::open(dir.path(), small.clone()).unwrap();
    for i in 0..10 {
        wal.append(&recs(i * 10..i * 10 + 10)).unwrap();
        wal.commit().unwrap();
    }
    let before = segments(dir.path()).len();
    assert!(before > 2);
    let first = begin(&mut wal, 1, vec![Bytes::from(vec![7u8; 1 << 20])]);
    for i in 10..20 {
        wal.append(&recs(i * 10..i * 10 + 10)).unwrap();
        wal.commit().unwrap();
    }
    assert_eq!(segments(dir.path()).len(), before, "no rotation while the base's number is reserved");
    // Two more begin while the first runs: the second waits and is replaced by the third,
    // which starts once the first is installed; nobody blocks.
    let second = begin(&mut wal, 2, recs(400..401));
    wal.append(&recs(200..201)).unwrap();
    wal.commit().unwrap();
    let third = begin(&mut wal, 3, recs(500..501));
    wal.append(&recs(201..202)).unwrap();
    wal.commit().unwrap();
    written(&first);
    assert_eq!(wal.finish_rewrite(false).unwrap(), Some(1));
    assert!(wal.rewrite_in_progress(), "the waiting rewrite started");
    wal.append(&recs(202..203)).unwrap();
    wal.commit().unwrap();
    written(&third);
    assert!(second.recv_timeout(Duration::from_millis(100)).is_err(), "the replaced rewrite never ran");
    assert_eq!(wal.finish_rewrite(false).unwrap(), Some(3));
    // The third image, then everything committed since it was begun.
    let want: Vec<Bytes> = recs(500..501).into_iter().chain(recs(201..203)).collect();
    assert_eq!(reopen_copy(dir.path()), want);
    // Rotation resumes afterwards.
    for i in 30..40 {
        wal.append(&recs(i * 10..i * 10 + 10)).unwrap();
        wal.commit().unwrap();
    }
    assert!(segments(dir.path()).len() > 1);
    drop(wal);
    let (_, got) = Wal::open(dir.path(), small).unwrap();
    assert_eq!(got.len(), 3 + 100);
}

#[test]
fn synchronous_rewrite_supersedes_a_background_one() {
    let dir = TempDir::new().unwrap();
    let (mut wal, _) = Wal::open(dir.path(), opts(FsyncMode::Never)).unwrap();
    wal.append(&recs(0..5)).unwrap();
    wal.commit().unwrap();
    written(&begin(&mut wal, 1, recs(50..52)));
    wal.rewrite(&recs(60..61)).unwrap();
    assert!(!wal.rewrite_in_progress());
    assert_eq!(wal.finish_rewrite(true).unwrap(), None);
    drop(wal);
    assert_eq!(reopen(dir.path()).1, recs(60..61));
}

#[test]
fn in_memory_background_rewrite_completes_at_once() {
    let mut wal = Wal::in_memory();
    written(&begin(&mut wal, 4, recs(0..2)));
    assert_eq!(wal.finish_rewrite(false).unwrap(), Some(4));
    assert_eq!(wal.finish_rewrite(false).unwrap(), None);
}

#[test]
fn background_rewrite_concatenates_record_parts() {
    let dir = TempDir::new().unwrap();
    let (mut wal, _) = Wal::open(dir.path(), opts(FsyncMode::Never)).unwrap();
    let big = Bytes::from(vec![9u8; 100_000]);
    let parts =
        vec![vec![Bytes::from_static(b"head:"), big.clone(), Bytes::new(), Bytes::from_static(b":tail")], vec![]];
    let (tx, rx) = std::sync::mpsc::channel();
    wal.begin_rewrite(1, parts, move || tx.send(()).unwrap()).unwrap();
    written(&rx);
    assert_eq!(wal.finish_rewrite(true).unwrap(), Some(1));
    drop(wal);
    let mut want = b"head:".to_vec();
    want.extend_from_slice(&big);
    want.extend_from_slice(b":tail");
    assert_eq!(reopen(dir.path()).1, vec![Bytes::from(want), Bytes::new()]);
}

/// Power-loss emulation (`WalOptions::power_loss`): a reopen keeps only what an fsync covered.
/// `mem::forget` stands for the process dying (no destructor runs; the page cache keeps every
/// byte written, as after a SIGKILL).
#[test]
fn power_loss_emulation_keeps_only_fsynced_records() {
    let lossy = |fsync| WalOptions { power_loss: true, ..opts(fsync) };

    // fsync=always: every committed record survives.
    let dir = TempDir::new().unwrap();
    let (mut wal, _) = Wal::open(dir.path(), lossy(FsyncMode::Always)).unwrap();
    for r in recs(0..20) {
        wal.append(&[r]).unwrap();
        wal.commit().unwrap();
    }
    std::mem::forget(wal);
    let (wal, got) = Wal::open(dir.path(), lossy(FsyncMode::Always)).unwrap();
    assert_eq!(got, recs(0..20));
    drop(wal);

    // fsync=never: what was committed after the last sync is gone; an explicit sync keeps
    // what precedes it.
    let dir = TempDir::new().unwrap();
    let (mut wal, _) = Wal::open(dir.path(), lossy(FsyncMode::Never)).unwrap();
    wal.append(&recs(0..5)).unwrap();
    wal.sync().unwrap();
    wal.append(&recs(5..10)).unwrap();
    wal.commit().unwrap();
    std::mem::forget(wal);
    // Without the emulation the page cache still has them all...
    let copy = TempDir::new().unwrap();
    for f in fs::read_dir(dir.path()).unwrap() {
        let f = f.unwrap();
        fs::copy(f.path(), copy.path().join(f.file_name())).unwrap();
    }
    let (_, all) = Wal::open(copy.path(), opts(FsyncMode::Never)).unwrap();
    assert_eq!(all, recs(0..10));
    // ... with it, the unsynced five are lost, and the log goes on after the synced ones.
    let (mut wal, got) = Wal::open(dir.path(), lossy(FsyncMode::Never)).unwrap();
    assert_eq!(got, recs(0..5));
    wal.append(&recs(10..12)).unwrap();
    wal.sync().unwrap();
    std::mem::forget(wal);
    let (_, got) = Wal::open(dir.path(), lossy(FsyncMode::Never)).unwrap();
    assert_eq!(got, [recs(0..5), recs(10..12)].concat());

    // A rewrite is durable (its base segment is fsynced), and so are rotations' sealed
    // segments; batch mode's flusher marks what it synced.
    let dir = TempDir::new().unwrap();
    let o = WalOptions { segment_bytes: 100, batch_interval: Duration::from_millis(1), ..lossy(FsyncMode::Batch) };
    let (mut wal, _) = Wal::open(dir.path(), o.clone()).unwrap();
    wal.rewrite(&recs(0..3)).unwrap();
    for r in recs(3..30) {
        wal.append(&[r]).unwrap();
        wal.commit().unwrap();
    }
    std::thread::sleep(Duration::from_millis(100)); // the flusher syncs the last commits
    std::mem::forget(wal);
    let (_, got) = Wal::open(dir.path(), o).unwrap();
    assert_eq!(got, recs(0..30));
}
