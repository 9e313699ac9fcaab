//! The one error type of the crate. Every variant that concerns a file names it.

use std::io;
use std::path::PathBuf;

/// Why a log operation failed.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// The operating system refused an operation on a file or directory.
    #[error("write-ahead log I/O error: cannot {op} {}: {source}", path.display())]
    Io {
        /// What was attempted, e.g. "write to" or "fdatasync".
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Damage that is not a torn tail: recovering past it would silently drop records that
    /// were acknowledged as durable, so the log refuses to open instead.
    #[error("write-ahead log is corrupt: {} at byte offset {offset}: {reason}", path.display())]
    Corrupt { path: PathBuf, offset: u64, reason: String },
    /// A record larger than [`crate::MAX_RECORD_BYTES`] was appended.
    #[error("record of {len} bytes exceeds the write-ahead log limit of {max} bytes")]
    RecordTooLarge { len: usize, max: usize },
    /// An earlier I/O failure left the on-disk state unknown (after a failed `fdatasync` the
    /// kernel may have dropped the dirty pages), so the log refuses further writes. Reopening
    /// runs recovery and yields a consistent log again.
    #[error("write-ahead log in {} is unusable after an earlier failure ({cause}); reopen it to recover", dir.display())]
    Poisoned { dir: PathBuf, cause: String },
}

impl WalError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> WalError {
        let path = path.into();
        move |source| WalError::Io { op, path, source }
    }
}
