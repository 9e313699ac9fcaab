//! The on-disk log behind a [`crate::Wal`]: the active segment, the group-commit buffer,
//! rotation and rewrite.

use crate::error::WalError;
use crate::flusher::Flusher;
use crate::format::{encode_record, temp_name, write_record_parts, SegmentHeader, HEADER_LEN};
use crate::options::{FsyncMode, WalOptions};
use crate::power_loss;
use crate::recover::{recover, segment_path, sync_dir, Recovered};
use bytes::Bytes;
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A bigger commit buffer than this is released after the commit, so one huge batch does not
/// pin its memory for the life of the log.
const KEEP_BUFFER_BYTES: usize = 4 << 20;
/// Buffer of the writer that frames a new segment's records into its file.
const WRITE_BUFFER_BYTES: usize = 256 << 10;

pub(crate) struct Disk {
    dir: PathBuf,
    opts: WalOptions,
    /// The oldest live segment; always a base segment.
    first_seq: u64,
    /// The active segment, which commits append to.
    seq: u64,
    path: PathBuf,
    file: Arc<File>,
    size: u64,
    /// Bytes in the live segments before the active one.
    sealed_bytes: u64,
    segments: u64,
    /// Framed records appended but not committed yet.
    pending: Vec<u8>,
    syncs: Arc<AtomicU64>,
    /// Present in [`FsyncMode::Batch`] only.
    flusher: Option<Flusher>,
    /// Set by the first I/O failure; see [`WalError::Poisoned`].
    poisoned: Option<String>,
    /// A rewrite whose image is being written by a background thread.
    rewrite: Option<Rewrite>,
    /// A rewrite begun while another one was running; it starts when that one is installed.
    queued: Option<Queued>,
    /// Removes the segments a background rewrite made obsolete (off the caller's thread).
    cleanup: Option<std::thread::JoinHandle<()>>,
}

/// A background rewrite ([`Disk::begin_rewrite`]). Segment `seq` (one after the active one)
/// is reserved for the new base: the active segment does not rotate meanwhile. Commits keep
/// going to the old segments, which stay the durable content, and are copied into `tail`;
/// [`Disk::finish_rewrite`] appends the tail after the image and only then renames the new
/// base into place, so the switch loses nothing and a crash before it recovers the old
/// segments (every commit included).
struct Rewrite {
    /// The caller's name for it, returned by [`Disk::finish_rewrite`].
    id: u64,
    seq: u64,
    /// Framed records committed since the rewrite began.
    tail: Vec<u8>,
    /// Writes and fsyncs `wal-<seq>.log.tmp` (header + image); returns it open and its size.
    worker: Option<std::thread::JoinHandle<Result<(File, u64), WalError>>>,
    /// Set by the thread when it is done, just before it calls `on_written` (so a caller woken
    /// by that callback finds the rewrite ready even if the thread has not quite exited).
    done: Arc<std::sync::atomic::AtomicBool>,
}

/// A rewrite waiting for the running one. Its tail starts at its own begin: the records
/// committed after it must follow its image, wherever the running rewrite puts them.
struct Queued {
    id: u64,
    records: Vec<Vec<Bytes>>,
    on_written: Box<dyn FnOnce() + Send + Sync>,
    tail: Vec<u8>,
}

impl Disk {
    pub fn open(dir: &Path, opts: WalOptions) -> Result<(Disk, Vec<Bytes>), WalError> {
        if opts.power_loss {
            let dropped = power_loss::lose_unsynced(dir)?;
            tracing::info!(dir = %dir.display(), dropped, "power-loss emulation: the log keeps only what was fsynced");
        }
        let (first_seq, seq, path, file, size, sealed_bytes, segments, records) = match recover(dir)? {
            Recovered::Fresh { next_seq } => {
                // A new log starts with an empty base segment, so that "the oldest live
                // segment is a base" always holds and a lost first segment is detectable.
                let (file, path, size) = create_segment(dir, next_seq, SegmentHeader::base(0), &[], opts.power_loss)?;
                (next_seq, next_seq, path, file, size, 0, 1, Vec::new())
            }
            Recovered::Existing(e) => {
                let file =
                    OpenOptions::new().append(true).open(&e.last_path).map_err(WalError::io("open", &e.last_path))?;
                if opts.power_loss {
                    // Recovery may have cut a torn tail: what is left is what survived.
                    power_loss::note_durable(&e.last_path, e.last_size, true)?;
                }
                (
                    e.first_seq,
                    e.last_seq,
                    e.last_path,
                    Arc::new(file),
                    e.last_size,
                    e.sealed_bytes,
                    e.segments,
                    e.records,
                )
            }
        };
        let syncs = Arc::new(AtomicU64::new(0));
        let flusher = match opts.fsync {
            FsyncMode::Batch => Some(
                Flusher::start(file.clone(), path.clone(), opts.batch_interval, syncs.clone(), opts.power_loss)
                    .map_err(WalError::io("start the flusher thread for", dir))?,
            ),
            FsyncMode::Never | FsyncMode::Always => None,
        };
        let disk = Disk {
            dir: dir.to_path_buf(),
            opts,
            first_seq,
            seq,
            path,
            file,
            size,
            sealed_bytes,
            segments,
            pending: Vec::new(),
            syncs,
            flusher,
            poisoned: None,
            rewrite: None,
            queued: None,
            cleanup: None,
        };
        Ok((disk, records))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn bytes_on_disk(&self) -> u64 {
        self.sealed_bytes + self.size
    }

    pub fn segments(&self) -> u64 {
        self.segments
    }

    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Refuse to touch the files after an I/O failure (ours or the flusher's).
    pub fn check_usable(&mut self) -> Result<(), WalError> {
        if self.poisoned.is_none() {
            if let Some(e) = self.flusher.as_ref().and_then(Flusher::error) {
                self.poisoned = Some(e);
            }
        }
        match &self.poisoned {
            None => Ok(()),
            Some(cause) => Err(WalError::Poisoned { dir: self.dir.clone(), cause: cause.clone() }),
        }
    }

    fn poison_on_err<T>(&mut self, r: Result<T, WalError>) -> Result<T, WalError> {
        if let Err(e) = &r {
            self.poisoned.get_or_insert_with(|| e.to_string());
        }
        r
    }

    /// Frame records into the commit buffer. The caller has checked their sizes.
    pub fn append(&mut self, records: &[Bytes]) -> Result<(), WalError> {
        self.check_usable()?;
        for r in records {
            encode_record(&mut self.pending, r);
        }
        Ok(())
    }

    pub fn commit(&mut self) -> Result<(), WalError> {
        self.check_usable()?;
        if self.pending.is_empty() {
            return Ok(());
        }
        let r = self.write_pending();
        self.poison_on_err(r)
    }

    fn write_pending(&mut self) -> Result<(), WalError> {
        // No rotation during a background rewrite: the next sequence number is its base's.
        if self.size >= self.opts.segment_bytes && self.size > HEADER_LEN as u64 && self.rewrite.is_none() {
            self.rotate()?;
        }
        (&*self.file).write_all(&self.pending).map_err(WalError::io("write to", &self.path))?;
        self.size += self.pending.len() as u64;
        if let Some(rw) = &mut self.rewrite {
            rw.tail.extend_from_slice(&self.pending);
        }
        if let Some(q) = &mut self.queued {
            q.tail.extend_from_slice(&self.pending);
        }
        self.pending.clear();
        if self.pending.capacity() > KEEP_BUFFER_BYTES {
            self.pending = Vec::new();
        }
        match self.opts.fsync {
            FsyncMode::Always => self.sync_data(),
            FsyncMode::Batch => {
                if let Some(f) = &self.flusher {
                    f.mark_dirty();
                }
                Ok(())
            }
            FsyncMode::Never => Ok(()),
        }
    }

    /// Write what is buffered, then `fdatasync` the active segment.
    pub fn sync(&mut self) -> Result<(), WalError> {
        self.commit()?;
        let r = self.sync_data();
        self.poison_on_err(r)
    }

    fn sync_data(&mut self) -> Result<(), WalError> {
        self.file.sync_data().map_err(WalError::io("fdatasync", &self.path))?;
        if self.opts.power_loss {
            power_loss::note_durable(&self.path, self.size, false)?;
        }
        self.syncs.fetch_add(1, Ordering::Relaxed);
        if let Some(f) = &self.flusher {
            f.mark_clean();
        }
        Ok(())
    }

    /// Seal the active segment and continue in a new one.
    fn rotate(&mut self) -> Result<(), WalError> {
        // Synced in every mode (one sync per segment is cheap): recovery may then treat any
        // damage in a sealed segment as corruption rather than as a torn write.
        self.sync_data()?;
        let seq = self.seq + 1;
        let (file, path, size) =
            create_segment(&self.dir, seq, SegmentHeader::plain(self.size), &[], self.opts.power_loss)?;
        tracing::debug!(path = %path.display(), "write-ahead log rotated to a new segment");
        self.sealed_bytes += self.size;
        self.segments += 1;
        self.activate(seq, file, path, size);
        Ok(())
    }

    fn activate(&mut self, seq: u64, file: Arc<File>, path: PathBuf, size: u64) {
        if let Some(f) = &self.flusher {
            f.switch_file(file.clone(), path.clone());
        }
        self.seq = seq;
        self.file = file;
        self.path = path;
        self.size = size;
    }

    /// Replace the whole content by `records`. The caller has checked their sizes.
    pub fn rewrite(&mut self, records: &[Bytes]) -> Result<(), WalError> {
        self.check_usable()?;
        // This image supersedes one still being written in the background.
        self.abandon_rewrite();
        // Uncommitted appends are part of the content being replaced.
        self.pending.clear();
        let mut body = Vec::with_capacity(records.iter().map(|r| r.len() + 8).sum());
        for r in records {
            encode_record(&mut body, r);
        }
        let r = self.install_base(records.len() as u64, &body);
        self.poison_on_err(r)
    }

    fn install_base(&mut self, count: u64, body: &[u8]) -> Result<(), WalError> {
        let seq = self.seq + 1;
        // Once this returns, the new base is durable under its final name and is what open()
        // recovers; before that, the old segments are untouched.
        let (file, path, size) =
            create_segment(&self.dir, seq, SegmentHeader::base(count), body, self.opts.power_loss)?;
        self.switch_to_base(seq, file, path, size, false);
        Ok(())
    }

    /// Make the (durable, renamed) base segment `seq` the active one and remove the segments
    /// it made obsolete, on a thread if `background` (unlinking a large image takes time).
    fn switch_to_base(&mut self, seq: u64, file: Arc<File>, path: PathBuf, size: u64, background: bool) {
        let obsolete = self.first_seq..=self.seq;
        self.first_seq = seq;
        self.sealed_bytes = 0;
        self.segments = 1;
        self.activate(seq, file, path, size);
        if let Some(c) = self.cleanup.take() {
            let _ = c.join();
        }
        let dir = self.dir.clone();
        let remove = move || remove_segments(&dir, obsolete);
        if background {
            match std::thread::Builder::new().name("synod-wal-cleanup".into()).spawn(remove) {
                Ok(h) => self.cleanup = Some(h),
                Err(e) => tracing::warn!(error = %e, "cannot start a thread to remove obsolete segments; open() will"),
            }
        } else {
            remove();
        }
    }
}

impl Disk {
    /// Start replacing the content by `records` (each the concatenation of its parts) without
    /// blocking: a thread frames them and writes and fsyncs the new base under a temporary
    /// name, then calls `on_written`; the caller then calls [`Disk::finish_rewrite`].
    /// Uncommitted appends are committed first (they precede the image). If a rewrite is
    /// running, this one waits for it (replacing one that was already waiting, which is then
    /// never installed) and starts when it is installed.
    pub fn begin_rewrite(
        &mut self,
        id: u64,
        records: Vec<Vec<Bytes>>,
        on_written: Box<dyn FnOnce() + Send + Sync>,
    ) -> Result<(), WalError> {
        self.check_usable()?;
        self.commit()?;
        if self.rewrite.is_some() {
            self.queued = Some(Queued { id, records, on_written, tail: Vec::new() });
            return Ok(());
        }
        self.start_rewrite(id, records, on_written, Vec::new())
    }

    fn start_rewrite(
        &mut self,
        id: u64,
        records: Vec<Vec<Bytes>>,
        on_written: Box<dyn FnOnce() + Send + Sync>,
        tail: Vec<u8>,
    ) -> Result<(), WalError> {
        let seq = self.seq + 1;
        let dir = self.dir.clone();
        let count = records.len() as u64;
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let finished = done.clone();
        let worker = std::thread::Builder::new()
            .name("synod-wal-rewrite".into())
            .spawn(move || {
                // Framed straight into the file through a small buffer: an image of several
                // MB assembled in memory first cost a fresh allocation (page faults) and a
                // copy per rewrite (docs/performance.md).
                let written = write_temp_segment(&dir, seq, SegmentHeader::base(count), |w| {
                    let mut n = 0;
                    for r in &records {
                        n += write_record_parts(w, r)?;
                    }
                    Ok(n)
                });
                drop(records);
                finished.store(true, Ordering::Release);
                on_written();
                written
            })
            .map_err(WalError::io("start the rewrite thread for", &self.dir))?;
        self.rewrite = Some(Rewrite { id, seq, tail, worker: Some(worker), done });
        Ok(())
    }

    /// Whether a background rewrite is running or waiting for [`Disk::finish_rewrite`].
    pub fn rewrite_in_progress(&self) -> bool {
        self.rewrite.is_some()
    }

    /// Install the background rewrite if its image is written (with `wait`, wait for it):
    /// append the records committed meanwhile, fsync, rename the base into place and drop the
    /// old segments; then start the rewrite waiting for it, if any. Returns the id of the
    /// rewrite installed. If writing the image failed, the old content stays (nothing is lost)
    /// and the error is returned; the log stays usable.
    pub fn finish_rewrite(&mut self, wait: bool) -> Result<Option<u64>, WalError> {
        self.check_usable()?;
        let Some(rw) = self.rewrite.as_mut() else { return Ok(None) };
        let ready = wait || rw.done.load(Ordering::Acquire);
        let Some(worker) = rw.worker.take_if(|_| ready) else { return Ok(None) };
        let mut rw = self.rewrite.take().expect("checked above");
        let installed = self.install(&mut rw, worker);
        // Whatever became of that one, a waiting rewrite starts now (its tail holds every
        // record committed since it was begun, so it loses nothing either way).
        if let Some(q) = self.queued.take() {
            if self.poisoned.is_none() {
                self.start_rewrite(q.id, q.records, q.on_written, q.tail)?;
            }
        }
        installed.map(|()| Some(rw.id))
    }

    fn install(
        &mut self,
        rw: &mut Rewrite,
        worker: std::thread::JoinHandle<Result<(File, u64), WalError>>,
    ) -> Result<(), WalError> {
        let tmp = self.dir.join(temp_name(rw.seq));
        let written = worker.join().unwrap_or_else(|_| {
            Err(WalError::io("write (the rewrite thread panicked)", &tmp)(std::io::Error::other("panic")))
        });
        let (file, size) = written?;
        let tail = std::mem::take(&mut rw.tail);
        let appended = (&file)
            .write_all(&tail)
            .and_then(|()| file.sync_data())
            .map_err(WalError::io("write the records committed during the rewrite to", &tmp));
        if let Err(e) = appended {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        let path = segment_path(&self.dir, rw.seq);
        if let Err(e) = fs::rename(&tmp, &path) {
            let _ = fs::remove_file(&tmp);
            return Err(WalError::io("rename a new segment into", &path)(e));
        }
        // From here on the new base is what open() recovers (once the directory is synced).
        let r = sync_dir(&self.dir);
        self.poison_on_err(r)?;
        if self.opts.power_loss {
            let r = power_loss::note_durable(&path, size + tail.len() as u64, false);
            self.poison_on_err(r)?;
        }
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.switch_to_base(rw.seq, Arc::new(file), path, size + tail.len() as u64, true);
        Ok(())
    }

    /// Forget a background rewrite (its thread is waited for and its file removed): the old
    /// segments stay the content.
    fn abandon_rewrite(&mut self) {
        self.queued = None;
        if let Some(mut rw) = self.rewrite.take() {
            if let Some(w) = rw.worker.take() {
                let _ = w.join();
            }
            let _ = fs::remove_file(self.dir.join(temp_name(rw.seq)));
        }
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        // The threads must not touch the directory after a reopen.
        self.abandon_rewrite();
        if let Some(c) = self.cleanup.take() {
            let _ = c.join();
        }
    }
}

/// Remove obsolete segments. A crash before they are gone is harmless (open() removes segments
/// older than the newest base), so failures here are only logged.
fn remove_segments(dir: &Path, obsolete: std::ops::RangeInclusive<u64>) {
    for s in obsolete {
        let p = segment_path(dir, s);
        power_loss::remove_marker(&p);
        if let Err(e) = fs::remove_file(&p) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %p.display(), error = %e, "cannot remove an obsolete write-ahead log segment; open() will retry");
            }
        }
    }
    if let Err(e) = sync_dir(dir) {
        tracing::warn!(error = %e, "cannot sync the directory after removing obsolete segments; open() will finish the cleanup");
    }
}

/// Create segment `seq` holding `header` and `body` atomically: write it under a temporary
/// name, fsync it, rename it into place and fsync the directory. Returns the open file (for
/// further appends), its path and its size. `power_loss`: note it durable (see `power_loss.rs`).
fn create_segment(
    dir: &Path,
    seq: u64,
    header: SegmentHeader,
    body: &[u8],
    power_loss: bool,
) -> Result<(Arc<File>, PathBuf, u64), WalError> {
    let (file, size) = write_temp_segment(dir, seq, header, |w| w.write_all(body).map(|()| body.len() as u64))?;
    let tmp = dir.join(temp_name(seq));
    let path = segment_path(dir, seq);
    if let Err(e) = fs::rename(&tmp, &path) {
        let _ = fs::remove_file(&tmp);
        return Err(WalError::io("rename a new segment into", &path)(e));
    }
    sync_dir(dir)?;
    if power_loss {
        power_loss::note_durable(&path, size, false)?;
    }
    Ok((Arc::new(file), path, size))
}

/// Write `wal-<seq>.log.tmp` with `header` and the body `write_body` writes (returning its
/// length), and fsync it; returns the open file (positioned at its end) and its size. A
/// failure removes the file.
fn write_temp_segment(
    dir: &Path,
    seq: u64,
    header: SegmentHeader,
    write_body: impl FnOnce(&mut BufWriter<&File>) -> std::io::Result<u64>,
) -> Result<(File, u64), WalError> {
    let tmp = dir.join(temp_name(seq));
    let written = (|| {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(WalError::io("create", &tmp))?;
        // Writes larger than the buffer bypass it (a snapshot payload goes to the file as is).
        let mut w = BufWriter::with_capacity(WRITE_BUFFER_BYTES, &f);
        let body_len = w
            .write_all(&header.encode())
            .and_then(|()| write_body(&mut w))
            .and_then(|n| w.flush().map(|()| n))
            .map_err(WalError::io("write to", &tmp))?;
        drop(w);
        f.sync_all().map_err(WalError::io("fsync", &tmp))?;
        Ok((f, body_len))
    })();
    match written {
        Ok((f, body_len)) => Ok((f, HEADER_LEN as u64 + body_len)),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}
