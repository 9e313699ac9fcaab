//! Test-only power-loss emulation ([`crate::WalOptions::power_loss`]; synod's runtime turns it
//! on with `SYNOD_WAL_POWER_LOSS=1`).
//!
//! A process killed with SIGKILL loses nothing it wrote: the bytes are in the kernel's page
//! cache, so a crash test with real processes passes whether or not the log ever fsyncs. A
//! power loss keeps only what an fsync covered. In this mode the log notes, next to each
//! segment `wal-<seq>.log`, how many of its bytes an fsync has covered (`wal-<seq>.durable`),
//! and opening the log first cuts every segment back to that length (removing the segments no
//! fsync ever covered): every restart behaves as if the machine had lost power the moment the
//! process died.

use crate::error::WalError;
use crate::format::{parse_name, FileKind};
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Serializes marker updates (the flusher thread and the log's owner both write them).
static MARKERS: Mutex<()> = Mutex::new(());

/// The marker file of a segment.
pub(crate) fn marker_path(segment: &Path) -> PathBuf {
    segment.with_extension("durable")
}

fn read_marker(marker: &Path) -> Option<u64> {
    fs::read_to_string(marker).ok()?.trim().parse().ok()
}

/// Note that an fsync covered the first `len` bytes of `segment`. The mark only grows, unless
/// `exact` (after recovery cut the segment to `len`).
pub(crate) fn note_durable(segment: &Path, len: u64, exact: bool) -> Result<(), WalError> {
    let _serial = MARKERS.lock().unwrap_or_else(|e| e.into_inner());
    let marker = marker_path(segment);
    if !exact && read_marker(&marker).is_some_and(|old| old >= len) {
        return Ok(());
    }
    // Written under another name and renamed: a process killed meanwhile leaves the old mark.
    let tmp = segment.with_extension("durable.tmp");
    fs::write(&tmp, len.to_string()).and_then(|()| fs::rename(&tmp, &marker)).map_err(WalError::io("write", &marker))
}

/// Forget the marker of a removed segment.
pub(crate) fn remove_marker(segment: &Path) {
    let _serial = MARKERS.lock().unwrap_or_else(|e| e.into_inner());
    let _ = fs::remove_file(marker_path(segment));
}

/// The power loss: cut every segment in `dir` back to its durable length; a segment without a
/// marker was never covered by an fsync and goes entirely. Returns the bytes dropped.
pub(crate) fn lose_unsynced(dir: &Path) -> Result<u64, WalError> {
    if !dir.is_dir() {
        return Ok(0);
    }
    let mut dropped = 0;
    for entry in fs::read_dir(dir).map_err(WalError::io("list directory", dir))? {
        let entry = entry.map_err(WalError::io("list directory", dir))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
        if !matches!(parse_name(&name), Some(FileKind::Segment(_))) {
            continue;
        }
        let path = entry.path();
        let len = entry.metadata().map_err(WalError::io("stat", &path))?.len();
        match read_marker(&marker_path(&path)) {
            None => {
                tracing::warn!(path = %path.display(), bytes = len,
                    "power-loss emulation: removing a segment no fsync covered");
                fs::remove_file(&path).map_err(WalError::io("remove", &path))?;
                dropped += len;
            }
            Some(durable) if durable < len => {
                tracing::warn!(path = %path.display(), bytes = len - durable, durable,
                    "power-loss emulation: dropping the bytes of a segment no fsync covered");
                let f = OpenOptions::new().write(true).open(&path).map_err(WalError::io("open", &path))?;
                f.set_len(durable).map_err(WalError::io("truncate", &path))?;
                dropped += len - durable;
            }
            Some(_) => {}
        }
    }
    Ok(dropped)
}
