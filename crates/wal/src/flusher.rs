//! The background thread of [`crate::FsyncMode::Batch`]: it calls `fdatasync` on the active
//! segment at most `batch_interval` after the first commit that is not yet synced, so many
//! commits share one sync without any of them waiting for it.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

struct State {
    /// The segment commits currently go to.
    file: Arc<File>,
    path: PathBuf,
    /// When the oldest unsynced commit was written; `None` if everything is synced.
    dirty_since: Option<Instant>,
    shutdown: bool,
    /// The first failed sync. Sticky: after a failed `fdatasync` the kernel may have dropped
    /// the dirty pages, so a later successful sync proves nothing.
    error: Option<String>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    interval: Duration,
    syncs: Arc<AtomicU64>,
    /// Note each sync's durable length (`crate::power_loss`).
    power_loss: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The flusher never panics while holding the lock; if something did, the state is
        // still meaningful (plain fields), so keep going rather than propagate the panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(crate) struct Flusher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    pub fn start(
        file: Arc<File>,
        path: PathBuf,
        interval: Duration,
        syncs: Arc<AtomicU64>,
        power_loss: bool,
    ) -> std::io::Result<Flusher> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State { file, path, dirty_since: None, shutdown: false, error: None }),
            wake: Condvar::new(),
            interval,
            syncs,
            power_loss,
        });
        let thread = std::thread::Builder::new().name("synod-wal-flusher".into()).spawn({
            let shared = shared.clone();
            move || run(&shared)
        })?;
        Ok(Flusher { shared, thread: Some(thread) })
    }

    /// Note that bytes were written to the active segment and need a sync.
    pub fn mark_dirty(&self) {
        let mut st = self.shared.lock();
        if st.dirty_since.is_none() {
            st.dirty_since = Some(Instant::now());
            self.shared.wake.notify_one();
        }
    }

    /// Everything written so far was synced by the caller.
    pub fn mark_clean(&self) {
        self.shared.lock().dirty_since = None;
    }

    /// Commits go to a new segment now; the caller has synced the previous one.
    pub fn switch_file(&self, file: Arc<File>, path: PathBuf) {
        let mut st = self.shared.lock();
        st.file = file;
        st.path = path;
        st.dirty_since = None;
    }

    /// The first failed background sync, if any.
    pub fn error(&self) -> Option<String> {
        self.shared.lock().error.clone()
    }
}

impl Drop for Flusher {
    /// Stop the thread; it syncs whatever is still dirty before exiting, so dropping a batch
    /// log keeps the "synced within the interval" promise.
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("write-ahead log flusher thread panicked");
            }
        }
    }
}

fn run(shared: &Shared) {
    let mut st = shared.lock();
    loop {
        match st.dirty_since {
            None if st.shutdown => return,
            None => st = shared.wake.wait(st).unwrap_or_else(|e| e.into_inner()),
            Some(since) => {
                let due = since + shared.interval;
                let now = Instant::now();
                if now < due && !st.shutdown {
                    st = shared.wake.wait_timeout(st, due - now).unwrap_or_else(|e| e.into_inner()).0;
                    continue;
                }
                // Everything written before this point is covered by the sync below; later
                // commits set `dirty_since` again.
                st.dirty_since = None;
                let (file, path) = (st.file.clone(), st.path.clone());
                drop(st);
                // The sync covers at least the bytes written before it starts.
                let covered = if shared.power_loss { file.metadata().map(|m| m.len()) } else { Ok(0) };
                let result = covered.and_then(|covered| {
                    file.sync_data()?;
                    if shared.power_loss {
                        crate::power_loss::note_durable(&path, covered, false).map_err(std::io::Error::other)?;
                    }
                    Ok(())
                });
                st = shared.lock();
                match result {
                    Ok(()) => {
                        shared.syncs.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        tracing::error!(path = %path.display(), error = %e, "write-ahead log fdatasync failed");
                        st.error.get_or_insert_with(|| format!("fdatasync {}: {e}", path.display()));
                    }
                }
            }
        }
    }
}
