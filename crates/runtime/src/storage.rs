//! Durable storage as the node loop sees it: append records, commit a batch, rewrite.
//!
//! A trait rather than the WAL type itself so that the group-commit logic of the node loop can
//! be tested with a recording fake, and so that `in_memory` replicas run with no log at all.

use bytes::Bytes;
use std::path::Path;
use synod_wal::{FsyncMode, Wal, WalOptions};

pub trait Storage: Send + 'static {
    /// Buffer records; not durable until [`Storage::commit`].
    fn append(&mut self, records: &[Bytes]) -> anyhow::Result<()>;
    /// Atomically replace everything persisted so far by `records` (log compaction).
    fn rewrite(&mut self, records: &[Bytes]) -> anyhow::Result<()>;
    /// [`Storage::rewrite`] in the background (`Action::CompactDurable`; each record is the
    /// concatenation of its parts): returns at once; the image is written elsewhere,
    /// `on_written` is called when it is ready to install, and [`Storage::finish_rewrite`]
    /// installs it and returns `id`. Appends and commits keep working meanwhile. A rewrite
    /// begun while another runs waits for it (see `synod_wal::Wal::begin_rewrite`).
    fn begin_rewrite(
        &mut self,
        id: u64,
        records: Vec<Vec<Bytes>>,
        on_written: Box<dyn FnOnce() + Send + Sync>,
    ) -> anyhow::Result<()>;
    /// Install the background rewrite if it is written: the id of the one installed. An
    /// error means it was not (the old records stay).
    fn finish_rewrite(&mut self) -> anyhow::Result<Option<u64>>;
    /// Make every appended record durable per the fsync mode. May block on the disk.
    fn commit(&mut self) -> anyhow::Result<()>;
    /// Force everything to stable storage (shutdown).
    fn sync(&mut self) -> anyhow::Result<()>;
    /// Whether `commit` may block long enough to matter (an fsync): then the node loop runs
    /// it off the async worker threads.
    fn commit_blocks(&self) -> bool;
}

/// The write-ahead log of `synod-wal`.
pub struct WalStorage {
    wal: Wal,
    fsync: FsyncMode,
}

impl WalStorage {
    /// Open (or create) the log in `dir`; returns the records persisted before a restart.
    pub fn open(dir: &Path, fsync: FsyncMode) -> anyhow::Result<(WalStorage, Vec<Bytes>)> {
        // Test only: emulate a power loss at every start (crates/synod/tests/crash_all.rs).
        let power_loss = std::env::var_os("SYNOD_WAL_POWER_LOSS").is_some_and(|v| v == "1");
        let (wal, records) = Wal::open(dir, WalOptions { fsync, power_loss, ..WalOptions::default() })?;
        Ok((WalStorage { wal, fsync }, records))
    }
}

impl Storage for WalStorage {
    fn append(&mut self, records: &[Bytes]) -> anyhow::Result<()> {
        self.wal.append(records).map(|_| ())?;
        Ok(())
    }

    fn rewrite(&mut self, records: &[Bytes]) -> anyhow::Result<()> {
        self.wal.rewrite(records).map(|_| ())?;
        Ok(())
    }

    fn begin_rewrite(
        &mut self,
        id: u64,
        records: Vec<Vec<Bytes>>,
        on_written: Box<dyn FnOnce() + Send + Sync>,
    ) -> anyhow::Result<()> {
        Ok(self.wal.begin_rewrite(id, records, on_written)?)
    }

    fn finish_rewrite(&mut self) -> anyhow::Result<Option<u64>> {
        Ok(self.wal.finish_rewrite(false)?)
    }

    fn commit(&mut self) -> anyhow::Result<()> {
        self.wal.commit().map(|_| ())?;
        Ok(())
    }

    fn sync(&mut self) -> anyhow::Result<()> {
        self.wal.sync().map(|_| ())?;
        Ok(())
    }

    fn commit_blocks(&self) -> bool {
        self.fsync == FsyncMode::Always
    }
}
