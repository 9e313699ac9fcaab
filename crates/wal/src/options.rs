//! Tuning knobs of the log: when commits reach the disk and how large segments grow.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// When a [`crate::Wal::commit`] reaches stable storage.
///
/// The modes trade latency for the size of the window in which a machine crash (power loss,
/// kernel panic) can lose committed records. A crash of the *process* alone never loses a
/// committed record in any mode: committed bytes are in the kernel's page cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncMode {
    /// Write only; the OS flushes the page cache when it likes. Fastest, for benchmarks that
    /// measure the protocol rather than the disk.
    Never,
    /// Write at commit; a background flusher thread calls `fdatasync` at most
    /// [`WalOptions::batch_interval`] after the first unsynced commit. A machine crash loses at
    /// most that window of commits.
    #[default]
    Batch,
    /// `fdatasync` before `commit` returns: nothing acknowledged is ever lost.
    Always,
}

impl FsyncMode {
    /// Every mode, in the order of increasing durability.
    pub const ALL: [FsyncMode; 3] = [FsyncMode::Never, FsyncMode::Batch, FsyncMode::Always];

    /// The lowercase name used in configuration files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            FsyncMode::Never => "never",
            FsyncMode::Batch => "batch",
            FsyncMode::Always => "always",
        }
    }
}

impl fmt::Display for FsyncMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no [`FsyncMode`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown fsync mode `{0}` (expected never, batch or always)")]
pub struct ParseFsyncModeError(pub String);

impl FromStr for FsyncMode {
    type Err = ParseFsyncModeError;

    /// Accepts the lowercase names (`never`, `batch`, `always`), ignoring ASCII case and
    /// surrounding whitespace.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        FsyncMode::ALL
            .into_iter()
            .find(|m| m.as_str().eq_ignore_ascii_case(t))
            .ok_or_else(|| ParseFsyncModeError(s.to_string()))
    }
}

/// Options of [`crate::Wal::open`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalOptions {
    /// When commits reach the disk.
    pub fsync: FsyncMode,
    /// A segment is sealed and a new one started once it holds at least this many bytes. A
    /// commit's batch is never split, so a segment may exceed this by one batch.
    pub segment_bytes: u64,
    /// In [`FsyncMode::Batch`], the longest time a committed record waits for `fdatasync`.
    pub batch_interval: Duration,
    /// Test only: emulate a power loss at every open (see `power_loss.rs`): each segment keeps
    /// only the bytes an fsync covered before, so a crash test with real processes (whose
    /// SIGKILL keeps the page cache) sees what a machine crash would lose.
    pub power_loss: bool,
}

impl WalOptions {
    /// Default segment size: 64 MiB.
    pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;
    /// Default batch interval: 2 ms.
    pub const DEFAULT_BATCH_INTERVAL: Duration = Duration::from_millis(2);
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            fsync: FsyncMode::default(),
            segment_bytes: Self::DEFAULT_SEGMENT_BYTES,
            batch_interval: Self::DEFAULT_BATCH_INTERVAL,
            power_loss: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsync_mode_names_round_trip() {
        for mode in FsyncMode::ALL {
            assert_eq!(mode.to_string().parse::<FsyncMode>(), Ok(mode));
        }
        assert_eq!(" Always ".parse::<FsyncMode>(), Ok(FsyncMode::Always));
        let err = "sometimes".parse::<FsyncMode>().unwrap_err();
        assert!(err.to_string().contains("sometimes"), "{err}");
        assert_eq!(FsyncMode::default(), FsyncMode::Batch);
    }

    #[test]
    fn defaults() {
        let o = WalOptions::default();
        assert_eq!(o.fsync, FsyncMode::Batch);
        assert_eq!(o.segment_bytes, 64 * 1024 * 1024);
        assert_eq!(o.batch_interval, Duration::from_millis(2));
    }
}
