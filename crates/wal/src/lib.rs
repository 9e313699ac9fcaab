//! Durable write-ahead log of synod replicas.
//!
//! The runtime persists the records of [`Action::Persist`] and [`Action::RewriteDurable`]
//! (synod-core's `protocol` module) here, and hands every record back to the protocol's
//! `recover` after a restart. The log knows nothing about what records mean.
//!
//! # On-disk format
//!
//! A log is a directory of *segments*, `wal-<seq:016>.log`, with consecutive sequence numbers.
//! Every segment starts with a 24-byte header
//!
//! ```text
//! magic "SYNODWAL" | version u16 | flags u16 | count u64 | crc32c u32 (of the 20 bytes before)
//! ```
//!
//! followed by records, each framed as
//!
//! ```text
//! len u32 LE | crc32c u32 LE (over the 4 length bytes, then the payload) | payload (len bytes)
//! ```
//!
//! Integers are little endian, records at most [`MAX_RECORD_BYTES`] long. Commits append to
//! the newest segment; once it holds at least [`WalOptions::segment_bytes`], the next commit
//! first *seals* it (fdatasync) and starts a new one.
//!
//! Header flag 1 marks a **base** segment: its first `count` records are a complete
//! image of the durable content, so every older segment is obsolete. [`Wal::rewrite`] writes
//! one (log compaction), and a brand-new log starts with an empty one. The oldest live segment
//! is therefore always a base. Header flag 2 marks a plain segment whose `count` is the byte
//! length its predecessor was sealed at: a sealed segment that lost whole records at its end
//! would scan as clean, and recovery refuses it instead (segments from before the flag are
//! read without that check).
//!
//! New segments, bases included, are written as `wal-<seq>.log.tmp`, fsynced, renamed into
//! place and the directory fsynced; so a `.log` file never has a half-written header, and a
//! `.tmp` file found at open is an operation that never completed and is removed.
//!
//! # Durability contract
//!
//! * [`Wal::append`] only buffers; [`Wal::commit`] writes the buffer with one `write` (group
//!   commit) and then, per [`FsyncMode`]:
//!   - `Always`: `fdatasync` before returning. A committed record survives any crash.
//!   - `Batch`: a background flusher thread calls `fdatasync` at most
//!     [`WalOptions::batch_interval`] (plus the sync's own duration) after the first commit
//!     that is not yet synced. A machine crash loses at most that window; commit never waits.
//!   - `Never`: write only; the kernel decides when the page cache reaches the disk.
//!
//!   In every mode a crash of the process alone loses nothing committed.
//! * [`Wal::sync`] commits what is buffered and fsyncs now (clean shutdown). Dropping a `Wal`
//!   discards uncommitted appends; in `Batch` mode it syncs what was committed.
//! * [`Wal::rewrite`] is atomic: after a crash at any point, [`Wal::open`] returns either the
//!   old records or exactly the new ones. It is durable when it returns, in every mode.
//! * [`Wal::begin_rewrite`] + [`Wal::finish_rewrite`] is the same without blocking the caller
//!   while a large image is written: the image goes to the next segment's `.tmp` file on a
//!   background thread while commits continue in the old segments (no rotation meanwhile);
//!   the install appends the records committed since the begin, fsyncs and renames. A crash
//!   before the rename recovers the old segments (every commit); after it, the image and the
//!   records committed since.
//! * After any I/O error the `Wal` is *poisoned* and every later call fails with
//!   [`WalError::Poisoned`] (after a failed `fdatasync` Linux may have dropped the dirty pages,
//!   so retrying would claim durability that does not exist). Reopening runs recovery.
//! * One process owns a directory at a time; the log does not lock it.
//!
//! # Recovery
//!
//! [`Wal::open`] removes `.tmp` files, picks the newest *complete* base segment (one with all
//! of its `count`), removes the segments older than it (left by a rewrite that crashed
//! before its cleanup) and reads every record from the base on. Then:
//!
//! * A **torn tail** (the newest segment ends in a truncated record, a record with a bad CRC
//!   or an impossible length, with no valid record after it) is what a crash during a write
//!   leaves behind: it is truncated away with a `tracing` warning naming the file and offset.
//!   Appends continue at the cut. (Looking for valid records after the damage tries every
//!   later offset; it is bounded to about 1 GiB of checksumming, and a tail too large to
//!   search is cut as torn with an error-level log line.)
//! * **Damage anywhere else** (an invalid record followed by a valid one, damage in a sealed
//!   segment, a missing segment, a bad header on a non-empty segment) is refused with
//!   [`WalError::Corrupt`] naming the file and offset: cutting there would silently drop
//!   records that were acknowledged as durable.
//!
//! Caveat: with `Batch` or `Never`, a machine crash may let the disk keep a later page of the
//! unsynced window but not an earlier one. Recovery then sees a valid record after damage and
//! reports corruption; those records were never promised durable, so removing the tail by
//! hand (truncating at the reported offset) is safe.
//!
//! [`Action::Persist`]: https://docs.rs/synod-core
//! [`Action::RewriteDurable`]: https://docs.rs/synod-core

mod error;
mod flusher;
mod format;
mod log;
mod options;
mod power_loss;
mod recover;

pub use error::WalError;
pub use format::MAX_RECORD_BYTES;
pub use options::{FsyncMode, ParseFsyncModeError, WalOptions};

use bytes::Bytes;
use log::Disk;
use std::path::Path;

/// Counters for metrics. Counts are since the log was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Bytes in the live segments (headers included).
    pub bytes_on_disk: u64,
    /// Live segments.
    pub segments: u64,
    /// Records passed to [`Wal::append`].
    pub records_appended: u64,
    /// Calls of [`Wal::commit`] (or [`Wal::sync`]) that wrote at least one record.
    pub commits: u64,
    /// `fdatasync`/`fsync` calls on segment data (commits in `Always` mode, flusher syncs,
    /// explicit syncs, segment seals). Directory syncs are not counted.
    pub syncs: u64,
    /// Rewrites installed ([`Wal::rewrite`] and [`Wal::finish_rewrite`]).
    pub rewrites: u64,
}

/// A write-ahead log: a directory of segments, or nothing at all ([`Wal::in_memory`]).
pub struct Wal {
    disk: Option<Disk>,
    /// Appended since the last commit, to count commits that did something.
    uncommitted: u64,
    records_appended: u64,
    commits: u64,
    rewrites: u64,
    /// In-memory logs: the background rewrite to report as installed.
    finished_in_memory: Option<u64>,
}

impl Wal {
    /// Open the log in `dir` (creating the directory if needed) and recover: returns the log
    /// and every record persisted before, in order, starting with the records of the latest
    /// rewrite. A torn tail is cut off; other damage is a [`WalError::Corrupt`].
    pub fn open(dir: &Path, opts: WalOptions) -> Result<(Wal, Vec<Bytes>), WalError> {
        let (disk, records) = Disk::open(dir, opts)?;
        Ok((Wal::with_disk(Some(disk)), records))
    }

    /// A log that keeps nothing (the runtime's `--in-memory` mode): appends, commits, syncs
    /// and rewrites succeed without touching any file.
    pub fn in_memory() -> Wal {
        Wal::with_disk(None)
    }

    fn with_disk(disk: Option<Disk>) -> Wal {
        Wal { disk, uncommitted: 0, records_appended: 0, commits: 0, rewrites: 0, finished_in_memory: None }
    }

    /// Whether this log keeps nothing.
    pub fn is_in_memory(&self) -> bool {
        self.disk.is_none()
    }

    /// The directory of the log (`None` for [`Wal::in_memory`]).
    pub fn dir(&self) -> Option<&Path> {
        self.disk.as_ref().map(Disk::dir)
    }

    /// Buffer records for writing (group commit: many appends, then one [`Wal::commit`]).
    /// A record over [`MAX_RECORD_BYTES`] is refused and nothing of this call is buffered.
    pub fn append(&mut self, records: &[Bytes]) -> Result<(), WalError> {
        check_sizes(records)?;
        if let Some(d) = &mut self.disk {
            d.append(records)?;
        }
        self.uncommitted += records.len() as u64;
        self.records_appended += records.len() as u64;
        Ok(())
    }

    /// Write the buffered records to the active segment and make them durable per the
    /// [`FsyncMode`]: `Always` syncs before returning, `Batch` leaves the sync to the
    /// background flusher thread (at most `batch_interval` later), `Never` only writes.
    pub fn commit(&mut self) -> Result<(), WalError> {
        if let Some(d) = &mut self.disk {
            d.commit()?;
        }
        self.count_commit();
        Ok(())
    }

    /// Commit what is buffered and force everything written so far to disk now (used at
    /// clean shutdown, and by callers that need durability in `Batch`/`Never` mode).
    pub fn sync(&mut self) -> Result<(), WalError> {
        if let Some(d) = &mut self.disk {
            d.sync()?;
        }
        self.count_commit();
        Ok(())
    }

    fn count_commit(&mut self) {
        if self.uncommitted > 0 {
            self.commits += 1;
            self.uncommitted = 0;
        }
    }

    /// Atomically replace the whole durable content by `records` (log compaction): after a
    /// crash at any point, [`Wal::open`] returns either the old records or exactly these.
    /// Records appended but not committed are dropped with the rest of the old content. The
    /// new content is durable when this returns, whatever the fsync mode.
    pub fn rewrite(&mut self, records: &[Bytes]) -> Result<(), WalError> {
        check_sizes(records)?;
        if let Some(d) = &mut self.disk {
            d.rewrite(records)?;
        }
        self.uncommitted = 0;
        self.rewrites += 1;
        Ok(())
    }

    /// [`Wal::rewrite`] without stopping the caller (log compaction with a large image, e.g.
    /// a state-machine snapshot): a background thread frames `records` and writes and fsyncs
    /// the new base segment, then calls `on_written` (e.g. to wake an event loop), and the
    /// caller installs it with [`Wal::finish_rewrite`], which returns `id`. Meanwhile appends
    /// and commits work as usual and stay durable in the old segments; the install copies
    /// them after the image. Until it, a crash recovers the old content with every commit;
    /// after it, the image followed by every record committed since this call. Uncommitted
    /// appends are committed first (they precede the image).
    ///
    /// Each record is given as the parts it is the concatenation of, so that a large payload
    /// (a snapshot behind a small header) is never copied by the caller: the thread frames it.
    ///
    /// If a background rewrite is running, this one waits and starts when that one has been
    /// installed (replacing, never installing, one that was already waiting): the caller
    /// never waits for a disk.
    pub fn begin_rewrite(
        &mut self,
        id: u64,
        records: Vec<Vec<Bytes>>,
        on_written: impl FnOnce() + Send + Sync + 'static,
    ) -> Result<(), WalError> {
        if let Some(len) =
            records.iter().map(|r| r.iter().map(|p| p.len()).sum::<usize>()).find(|l| *l > MAX_RECORD_BYTES)
        {
            return Err(WalError::RecordTooLarge { len, max: MAX_RECORD_BYTES });
        }
        match &mut self.disk {
            Some(d) => d.begin_rewrite(id, records, Box::new(on_written))?,
            None => {
                self.finished_in_memory = Some(id);
                on_written();
            }
        }
        self.count_commit();
        Ok(())
    }

    /// Install the background rewrite begun by [`Wal::begin_rewrite`] if its image is written
    /// (with `wait`: wait for it), and start the one waiting for it. Returns the installed
    /// rewrite's id (an in-memory log "installs" at once). Writing the image may have failed
    /// (e.g. disk full): then the error is returned, the old content stays and the log remains
    /// usable.
    pub fn finish_rewrite(&mut self, wait: bool) -> Result<Option<u64>, WalError> {
        let installed = match &mut self.disk {
            Some(d) => d.finish_rewrite(wait)?,
            None => self.finished_in_memory.take(),
        };
        if installed.is_some() {
            self.rewrites += 1;
        }
        Ok(installed)
    }

    /// Whether a background rewrite is running or waiting to be installed.
    pub fn rewrite_in_progress(&self) -> bool {
        self.disk.as_ref().is_some_and(Disk::rewrite_in_progress)
    }

    /// Counters for metrics.
    pub fn stats(&self) -> WalStats {
        let (bytes_on_disk, segments, syncs) = match &self.disk {
            Some(d) => (d.bytes_on_disk(), d.segments(), d.syncs()),
            None => (0, 0, 0),
        };
        WalStats {
            bytes_on_disk,
            segments,
            records_appended: self.records_appended,
            commits: self.commits,
            syncs,
            rewrites: self.rewrites,
        }
    }
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal").field("dir", &self.dir()).field("stats", &self.stats()).finish()
    }
}

fn check_sizes(records: &[Bytes]) -> Result<(), WalError> {
    match records.iter().find(|r| r.len() > MAX_RECORD_BYTES) {
        Some(r) => Err(WalError::RecordTooLarge { len: r.len(), max: MAX_RECORD_BYTES }),
        None => Ok(()),
    }
}
