//! Opening an existing log: find the authoritative segments, check them, cut a torn tail, and
//! read every record back.

use crate::error::WalError;
use crate::format::{
    parse_name, scan_records, segment_name, valid_record_after, After, FileKind, Scan, SegmentHeader, HEADER_LEN,
};
use bytes::Bytes;
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};

/// What recovery found.
pub(crate) enum Recovered {
    /// No segment survived (new directory, or only a never-completed first segment): the
    /// caller starts a new log at `next_seq`.
    Fresh {
        next_seq: u64,
    },
    Existing(Existing),
}

pub(crate) struct Existing {
    /// The base segment, the oldest one still live.
    pub first_seq: u64,
    /// The newest segment, which appends continue.
    pub last_seq: u64,
    pub last_path: PathBuf,
    /// Bytes in the newest segment after any torn tail was cut.
    pub last_size: u64,
    /// Bytes in the live segments before the newest one.
    pub sealed_bytes: u64,
    pub segments: u64,
    /// Every record from the base segment's first one on, in order.
    pub records: Vec<Bytes>,
}

struct Segment {
    seq: u64,
    path: PathBuf,
}

/// fsync a directory, so that entries created, renamed or removed in it survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), WalError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(WalError::io("fsync directory", dir))
}

fn remove(path: &Path) -> Result<(), WalError> {
    fs::remove_file(path).map_err(WalError::io("remove", path))
}

fn read_all(path: &Path) -> Result<Bytes, WalError> {
    fs::read(path).map(Bytes::from).map_err(WalError::io("read", path))
}

/// The header bytes of a segment (fewer if the file is shorter) and the file's length.
fn read_header(path: &Path) -> Result<(Vec<u8>, u64), WalError> {
    let file = File::open(path).map_err(WalError::io("open", path))?;
    let len = file.metadata().map_err(WalError::io("stat", path))?.len();
    let mut buf = Vec::with_capacity(HEADER_LEN);
    file.take(HEADER_LEN as u64).read_to_end(&mut buf).map_err(WalError::io("read", path))?;
    Ok((buf, len))
}

fn corrupt(path: &Path, offset: usize, reason: impl Into<String>) -> WalError {
    WalError::Corrupt { path: path.to_path_buf(), offset: offset as u64, reason: reason.into() }
}

/// Create `dir` if needed (syncing its parent so the new directory itself survives a crash),
/// then list the segments in sequence order. Leftover temporary files are removed: they are
/// segments or rewrites that were never renamed into place, so they hold nothing durable.
fn list_segments(dir: &Path) -> Result<(Vec<Segment>, u64), WalError> {
    if !dir.is_dir() {
        fs::create_dir_all(dir).map_err(WalError::io("create directory", dir))?;
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        sync_dir(parent)?;
    }
    let mut segments = Vec::new();
    let mut max_seq = 0;
    let mut removed = false;
    for entry in fs::read_dir(dir).map_err(WalError::io("list directory", dir))? {
        let entry = entry.map_err(WalError::io("list directory", dir))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
        match parse_name(&name) {
            Some(FileKind::Segment(seq)) => {
                max_seq = max_seq.max(seq);
                segments.push(Segment { seq, path: entry.path() });
            }
            Some(FileKind::Temp(seq)) => {
                max_seq = max_seq.max(seq);
                tracing::warn!(path = %entry.path().display(),
                    "removing an unfinished segment file left by a crash (a rewrite or rotation that never completed)");
                remove(&entry.path())?;
                removed = true;
            }
            None => {}
        }
    }
    if removed {
        sync_dir(dir)?;
    }
    segments.sort_by_key(|s| s.seq);
    Ok((segments, max_seq))
}

pub(crate) fn recover(dir: &Path) -> Result<Recovered, WalError> {
    let (mut segs, max_seq) = list_segments(dir)?;
    let fresh = Recovered::Fresh { next_seq: max_seq + 1 };

    // A newest segment whose header is incomplete was being created when the machine crashed
    // (segments are created under a temporary name, so this needs a file system that does
    // not order the rename after the data; be lenient anyway). It holds no record: drop it.
    if let Some(last) = segs.last() {
        let (header, len) = read_header(&last.path)?;
        if let Err(e) = SegmentHeader::decode(&header) {
            if len > HEADER_LEN as u64 {
                return Err(corrupt(&last.path, 0, e.to_string()));
            }
            tracing::warn!(path = %last.path.display(), offset = 0, error = %e,
                "cutting off a write-ahead log segment whose header was never completely written");
            remove(&last.path)?;
            sync_dir(dir)?;
            segs.pop();
        }
    }

    // The newest complete base segment is authoritative; everything older is obsolete.
    let mut base: Option<(usize, Bytes, Scan)> = None;
    let mut i = segs.len();
    while i > 0 {
        i -= 1;
        let (header, _) = read_header(&segs[i].path)?;
        let header = match SegmentHeader::decode(&header) {
            Ok(h) if h.is_base() => h,
            _ => continue,
        };
        let data = read_all(&segs[i].path)?;
        let scan = scan_records(&data, HEADER_LEN);
        if scan.records.len() as u64 >= header.base_records {
            base = Some((i, data, scan));
            break;
        }
        // A base is fsynced before it is renamed into place, so an incomplete one means the
        // rewrite never finished from the disk's point of view: fall back to the older
        // content, which is only deleted once the new base is durable. Only if nothing
        // follows it, though; otherwise acknowledged appends would be dropped silently.
        let path = &segs[i].path;
        if i + 1 == segs.len() && !matches!(valid_record_after(&data, scan.end), After::Found(_)) {
            tracing::warn!(path = %path.display(), offset = scan.end,
                found = scan.records.len(), expected = header.base_records,
                "removing an incomplete base segment left by an interrupted rewrite; recovering the previous content");
            remove(path)?;
            sync_dir(dir)?;
            segs.pop();
            continue;
        }
        return Err(corrupt(
            path,
            scan.end,
            format!("base segment holds only {} of its {} records", scan.records.len(), header.base_records),
        ));
    }
    let Some((b, base_data, base_scan)) = base else {
        return match segs.first() {
            None => Ok(fresh),
            Some(first) => {
                Err(corrupt(&first.path, 0, "no complete base segment: the beginning of the log is missing"))
            }
        };
    };

    // Segments older than the base are left over from a rewrite that crashed before its
    // cleanup finished.
    if b > 0 {
        for s in &segs[..b] {
            tracing::info!(path = %s.path.display(), "removing a segment made obsolete by a newer base segment");
            remove(&s.path)?;
        }
        sync_dir(dir)?;
    }
    let segs = segs.split_off(b);
    for w in segs.windows(2) {
        if w[1].seq != w[0].seq + 1 {
            return Err(corrupt(&w[1].path, 0, format!("segment {} is missing before this one", w[0].seq + 1)));
        }
    }

    let n = segs.len();
    let mut records = Vec::new();
    let mut sealed_bytes = 0;
    let mut last_size = 0;
    let mut base_part = Some((base_data, base_scan));
    let mut prev_len = 0;
    for (k, seg) in segs.iter().enumerate() {
        let (data, scan) = match base_part.take() {
            Some(part) => part,
            None => {
                let data = read_all(&seg.path)?;
                let header = SegmentHeader::decode(&data).map_err(|e| corrupt(&seg.path, 0, e.to_string()))?;
                if header.is_base() {
                    return Err(corrupt(&seg.path, 0, "unexpected incomplete base segment"));
                }
                // A sealed segment cut at a record boundary scans as clean; the length it was
                // sealed at, recorded in its successor's header, tells.
                if let Some(sealed) = header.prev_len() {
                    if sealed != prev_len {
                        return Err(corrupt(
                            &segs[k - 1].path,
                            prev_len.min(sealed) as usize,
                            format!("sealed segment holds {prev_len} bytes but was sealed at {sealed}: records are missing from the middle of the log"),
                        ));
                    }
                }
                let scan = scan_records(&data, HEADER_LEN);
                (data, scan)
            }
        };
        let is_last = k + 1 == n;
        let mut len = data.len();
        if scan.end < data.len() {
            check_torn_tail(&seg.path, &data, scan.end, is_last)?;
            tracing::warn!(path = %seg.path.display(), offset = scan.end,
                dropped_bytes = data.len() - scan.end,
                "cutting off the torn tail of the write-ahead log (a write interrupted by a crash)");
            truncate(&seg.path, scan.end)?;
            len = scan.end;
        }
        prev_len = data.len() as u64;
        records.extend(scan.records.iter().map(|r| data.slice(r.clone())));
        if is_last {
            last_size = len as u64;
        } else {
            sealed_bytes += len as u64;
        }
    }
    let last = segs.last().expect("the base segment is live");
    Ok(Recovered::Existing(Existing {
        first_seq: segs[0].seq,
        last_seq: last.seq,
        last_path: last.path.clone(),
        last_size,
        sealed_bytes,
        segments: n as u64,
        records,
    }))
}

/// Decide whether the invalid bytes at `bad` are a torn tail (the end of the newest segment
/// with nothing valid after it) or damage that recovery must not paper over.
fn check_torn_tail(path: &Path, data: &[u8], bad: usize, is_last: bool) -> Result<(), WalError> {
    if !is_last {
        // Sealed segments are fsynced before the next one is created, whatever the fsync
        // mode, so a crash cannot tear them.
        return Err(corrupt(path, bad, "invalid or truncated record in a sealed (not the newest) segment"));
    }
    match valid_record_after(data, bad) {
        After::NotFound => Ok(()),
        After::Found(next) => Err(corrupt(
            path,
            bad,
            format!("invalid record followed by a valid record at offset {next}: damage in the middle of the log, not a torn tail"),
        )),
        After::GaveUp(at) => {
            tracing::error!(path = %path.display(), offset = bad, searched_to = at,
                "the bytes after an invalid record are too large to search exhaustively for valid records; treating them as a torn tail");
            Ok(())
        }
    }
}

fn truncate(path: &Path, len: usize) -> Result<(), WalError> {
    let file = OpenOptions::new().write(true).open(path).map_err(WalError::io("open", path))?;
    file.set_len(len as u64).map_err(WalError::io("truncate", path))?;
    file.sync_all().map_err(WalError::io("fsync", path))
}

/// Path of segment `seq` in `dir`.
pub(crate) fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(segment_name(seq))
}
