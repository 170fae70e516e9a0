//! The embedded store's append-only log: every operation that changed
//! state, written before its answer is sent.
//!
//! A record is `[length u32 LE][crc32 u32 LE][payload]`; the payload is
//! postcard: `(lsn, time_us, rnd, code)` then the operation's arguments
//! (`replay.rs`). Records are appended while the changed name's lock is
//! held, so one name's records are in the log in the order they were
//! applied; names are independent, so that order is all replay needs.
//!
//! Appending only copies the record into a buffer under a short lock.
//! Whoever writes takes the whole buffer at a time and writes it to the
//! current segment with one `write`: with `everysec` and `no`, the first
//! answer that finds its record unwritten does it on its own task, for
//! itself and every record appended meanwhile (a crash of the process
//! then loses nothing: it is in the kernel); with `always`, the log's
//! thread writes and syncs, and every answer waiting goes together (group
//! commit: a crash of the machine loses nothing either). With `everysec`
//! the thread syncs once a second, outside the writer's lock so writes go
//! on meanwhile.
//!
//! An answer waits for every record appended before it, not just its own:
//! what it saw may rest on them. So a recovered store is a prefix of the
//! answered history, never a mix.
//!
//! When the disk refuses a write (full, or failing), the writer keeps the
//! bytes and tries again every 100 ms; meanwhile changes are refused
//! before they are applied (`Error::not_persisted`), reads go on, and the
//! answers already waiting get that error after `STALLED_ANSWER` (their
//! change is applied and is written once the disk takes it).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A record's header: length and checksum of its payload.
pub(crate) const HEADER: usize = 8;
/// The largest payload a record may have (a batch of 1,000 pushes of
/// 1 MiB payloads is far below).
pub(crate) const MAX_RECORD: usize = 1 << 30;
/// How long an answer waits for a disk that refuses writes before it is
/// told its change is not on disk yet.
const STALLED_ANSWER: Duration = Duration::from_secs(2);
/// How many times an answer looks again, letting others run, for a write
/// another task is making before it parks.
const SPINS: usize = 64;
/// How often the writer tries a refused write again.
const RETRY: Duration = Duration::from_millis(100);

/// When the log is synced to the disk (`appendfsync` in Redis).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fsync {
    /// Before every answer (answers that arrive together share one sync).
    /// A crash of the machine loses nothing that was answered.
    Always,
    /// Once a second. A crash of the process loses nothing that was
    /// answered; a crash of the machine loses at most about a second.
    #[default]
    EverySec,
    /// When the kernel sees fit. A crash of the process loses nothing; a
    /// crash of the machine loses what the kernel had not written (on
    /// Linux, usually up to 30 s).
    No,
}

impl Fsync {
    /// Its name in the config (`always`, `everysec`, `no`).
    pub fn as_str(self) -> &'static str {
        match self {
            Fsync::Always => "always",
            Fsync::EverySec => "everysec",
            Fsync::No => "no",
        }
    }
}

impl std::str::FromStr for Fsync {
    type Err = Error;
    fn from_str(s: &str) -> Result<Fsync> {
        match s {
            "always" => Ok(Fsync::Always),
            "everysec" => Ok(Fsync::EverySec),
            "no" => Ok(Fsync::No),
            _ => Err(Error::invalid(format!(
                "fsync must be always, everysec or no, got {s:?}"
            ))),
        }
    }
}

/// What the log has done, for metrics and the console.
#[derive(Debug, Clone, Default)]
pub struct JournalStats {
    /// Bytes written to log segments since start.
    pub bytes_written: u64,
    /// Records written since start (the last LSN written).
    pub records: u64,
    /// `write` calls that carried them (each carries every record
    /// appended since the one before).
    pub writes: u64,
    /// Syncs of the log since start, and their total time (µs) and the
    /// longest (µs).
    pub fsyncs: u64,
    pub fsync_us_total: u64,
    pub fsync_us_max: u64,
    /// Bytes of the log segments on disk now.
    pub log_bytes: u64,
    /// Whether the disk refuses writes now.
    pub failing: bool,
}

#[derive(Debug)]
struct Pending {
    buf: Vec<u8>,
    next_lsn: u64,
    /// Bytes appended since the segment now being written began.
    segment_bytes: u64,
}

/// The segment being written and what is on its way into it. Whoever
/// holds it writes: an answer's own task (`everysec`, `no`: one
/// `write` carries every record appended meanwhile, so concurrent
/// answers share it) or the log's thread (`always`, and retries).
#[derive(Debug)]
struct Writer {
    file: Arc<File>,
    /// Bytes taken from `Pending` and not yet in the file (kept while the
    /// disk refuses them), and the last LSN among them.
    out: Vec<u8>,
    out_last: u64,
}

#[derive(Debug)]
pub(crate) struct Journal {
    dir: PathBuf,
    policy: Fsync,
    pending: Mutex<Pending>,
    writer: Mutex<Writer>,
    /// Wakes the log's thread (`always`: records to sync; a retry).
    kick: (Mutex<bool>, Condvar),
    /// The last record appended, written to the kernel, synced.
    appended: AtomicU64,
    written: AtomicU64,
    synced: AtomicU64,
    /// Wakes answers waiting for `written` or `synced` to move.
    moved: tokio::sync::Notify,
    failing: AtomicBool,
    stop: AtomicBool,
    /// An answer's task is about to write for everyone (`Flushing`).
    flushing: AtomicBool,
    stats: Mutex<JournalStats>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Held by the task that writes for everyone; let go (even if that task
/// is dropped halfway), the next waiter takes over.
struct Flushing<'a>(&'a Journal);

impl Drop for Flushing<'_> {
    fn drop(&mut self) {
        self.0.flushing.store(false, Ordering::Release);
        self.0.moved.notify_waiters();
    }
}

/// A segment's file name: its first record's LSN, zero-padded so names
/// sort as numbers.
pub(super) fn segment_name(first_lsn: u64) -> String {
    format!("log-{first_lsn:020}.tgl")
}

/// The first LSN of a segment named `name`, if it is one.
pub(crate) fn segment_lsn(name: &str) -> Option<u64> {
    name.strip_prefix("log-")?.strip_suffix(".tgl")?.parse().ok()
}

/// Frames `payload` (already written after `start + HEADER`) in place.
pub(crate) fn seal(buf: &mut [u8], start: usize) {
    let len = (buf.len() - start - HEADER) as u32;
    let crc = crc32fast::hash(&buf[start + HEADER..]);
    buf[start..start + 4].copy_from_slice(&len.to_le_bytes());
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Syncs directory `dir`, so a file created or renamed in it stays.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

impl Journal {
    /// Starts a log in `dir` whose next record is `next_lsn`, in a new
    /// segment, with its thread (syncs, retries).
    pub(crate) fn start(dir: &Path, policy: Fsync, next_lsn: u64, old_bytes: u64) -> Result<Arc<Journal>> {
        let file = new_segment(dir, next_lsn)?;
        let journal = Arc::new(Journal {
            dir: dir.to_owned(),
            policy,
            pending: Mutex::new(Pending {
                buf: Vec::with_capacity(1 << 16),
                next_lsn,
                segment_bytes: 0,
            }),
            writer: Mutex::new(Writer {
                file: Arc::new(file),
                out: Vec::with_capacity(1 << 16),
                out_last: 0,
            }),
            kick: (Mutex::new(false), Condvar::new()),
            appended: AtomicU64::new(next_lsn - 1),
            written: AtomicU64::new(next_lsn - 1),
            synced: AtomicU64::new(next_lsn - 1),
            moved: tokio::sync::Notify::new(),
            failing: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            flushing: AtomicBool::new(false),
            stats: Mutex::new(JournalStats {
                log_bytes: old_bytes,
                ..JournalStats::default()
            }),
            thread: Mutex::new(None),
        });
        let j = journal.clone();
        let thread = std::thread::Builder::new()
            .name("tollgate-log".into())
            .spawn(move || j.run())
            .map_err(|e| Error::unavailable(format!("could not start the log's thread: {e}")))?;
        *journal.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(thread);
        Ok(journal)
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Fails if changes are refused now: the store is closed, or the disk
    /// refuses writes.
    pub(crate) fn refusing(&self) -> Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(Error::unavailable("the embedded store is closed"));
        }
        if self.failing.load(Ordering::Relaxed) {
            return Err(Error::not_persisted(
                "the embedded store's disk refuses writes (full or failing); changes are refused until it takes them again",
            ));
        }
        Ok(())
    }

    /// Whether the disk refuses the log's writes now.
    pub(crate) fn is_failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }

    /// Appends one record: its header fields, then what `encode` writes.
    /// Returns its LSN. Call it while holding the changed name's lock.
    pub(crate) fn append(&self, time_us: u64, rnd: u16, encode: impl FnOnce(&mut Vec<u8>)) -> u64 {
        let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let lsn = p.next_lsn;
        p.next_lsn += 1;
        let start = p.buf.len();
        p.buf.extend_from_slice(&[0; HEADER]);
        put(&mut p.buf, &(lsn, time_us, rnd));
        encode(&mut p.buf);
        seal(&mut p.buf, start);
        p.segment_bytes += (p.buf.len() - start) as u64;
        self.appended.store(lsn, Ordering::Release);
        lsn
    }

    /// Waits until every record appended so far is as safe as the policy
    /// makes it: written to the kernel (by this task if no one else is
    /// writing), or with `always`, synced by the log's thread.
    ///
    /// The waiting is boxed: every store call's future holds this one, and
    /// the wait's state (a notification, a timer) would make each of them,
    /// on every store, that much larger for as long as it lives.
    pub(crate) async fn settle(&self) -> Result<()> {
        let target = self.appended.load(Ordering::Acquire);
        if self.mark().load(Ordering::Acquire) >= target {
            return Ok(());
        }
        Box::pin(self.wait_for(target)).await
    }

    /// What an answer waits for under this policy: the last record written
    /// to the kernel, or synced.
    fn mark(&self) -> &AtomicU64 {
        match self.policy {
            Fsync::Always => &self.synced,
            Fsync::EverySec | Fsync::No => &self.written,
        }
    }

    async fn wait_for(&self, target: u64) -> Result<()> {
        let mark = self.mark();
        if self.policy == Fsync::Always {
            self.wake();
        }
        let since = Instant::now();
        let mut spins = 0;
        loop {
            if mark.load(Ordering::Acquire) >= target {
                return Ok(());
            }
            if self.stop.load(Ordering::Relaxed) {
                return Err(Error::unavailable("the embedded store is closing"));
            }
            let failing = self.failing.load(Ordering::Relaxed);
            if failing && since.elapsed() >= STALLED_ANSWER {
                return Err(Error::not_persisted(
                    "the embedded store's disk refuses writes: this change is applied but not yet on disk, and is lost if the server stops before the disk takes it",
                ));
            }
            if self.policy != Fsync::Always && !failing && !self.flushing.swap(true, Ordering::AcqRel) {
                // This task writes for everyone: first it lets the other
                // tasks ready to run append theirs (they wait for it
                // meanwhile), so one write carries them all.
                let _flushing = Flushing(self);
                tokio::task::yield_now().await;
                if let Ok(mut w) = self.writer.try_lock() {
                    self.flush(&mut w);
                }
                continue;
            }
            // Someone else writes: let it (and the tasks it waits for)
            // run, and look again; parked only if that takes long (or the
            // disk refuses, and the log's thread retries), so a write
            // wakes no task on another thread.
            if self.policy != Fsync::Always && !failing && spins < SPINS {
                spins += 1;
                tokio::task::yield_now().await;
                continue;
            }
            // Parked: registered for the next move before looking again,
            // so a move in between is not missed. (Only here: registering
            // takes the notifier's lock, which the spins above avoid.)
            let moved = self.moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            if mark.load(Ordering::Acquire) >= target {
                return Ok(());
            }
            let _ = tokio::time::timeout(RETRY, moved).await;
        }
    }

    /// Writes what is pending (after what the disk refused before, if
    /// anything). Returns whether all of it is in the file now.
    fn flush(&self, w: &mut Writer) -> bool {
        if w.out.is_empty() {
            let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            if p.buf.is_empty() {
                return true;
            }
            std::mem::swap(&mut p.buf, &mut w.out);
            w.out_last = p.next_lsn - 1;
        }
        let mut done = 0;
        while done < w.out.len() {
            match (&*w.file).write(&w.out[done..]) {
                Ok(0) => return self.refused(w, done, "the disk took no bytes"),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return self.refused(w, done, &e.to_string()),
            }
        }
        let bytes = w.out.len() as u64;
        w.out.clear();
        self.written.store(w.out_last, Ordering::Release);
        if self.failing.swap(false, Ordering::Relaxed) {
            tracing::warn!("the disk takes the log's writes again; changes are accepted again");
        }
        let mut s = self.stats.lock().unwrap_or_else(PoisonError::into_inner);
        s.bytes_written += bytes;
        s.log_bytes += bytes;
        s.writes += 1;
        s.records = w.out_last;
        drop(s);
        self.moved.notify_waiters();
        true
    }

    /// The disk took `done` bytes of `w.out` and refused the rest: keep
    /// the rest for a retry (a record cut short in the file stays torn
    /// until the retry completes it).
    fn refused(&self, w: &mut Writer, done: usize, why: &str) -> bool {
        w.out.drain(..done);
        if !self.failing.swap(true, Ordering::Relaxed) {
            tracing::error!(dir = %self.dir.display(), error = why,
                "the disk refuses the log's writes; changes are refused until it takes them");
            self.moved.notify_waiters();
        }
        // The log's thread tries again every RETRY (not at once: a disk
        // that refuses would have it spin).
        false
    }

    /// Syncs what is written now; `synced` moves to it.
    fn sync(&self) {
        let (file, upto) = {
            let w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
            (w.file.clone(), self.written.load(Ordering::Acquire))
        };
        if self.synced.load(Ordering::Acquire) >= upto {
            return;
        }
        // Not under the writer's lock: writes go on while the disk syncs.
        let t = Instant::now();
        if let Err(e) = file.sync_data() {
            // A failed fsync may have dropped the dirty pages (Linux
            // clears the error once reported): what it covered cannot be
            // trusted to be on disk. Refuse changes, loudly.
            tracing::error!(error = %e, "fsync of the log failed; changes are refused");
            self.failing.store(true, Ordering::Relaxed);
            self.moved.notify_waiters();
            return;
        }
        let us = t.elapsed().as_micros() as u64;
        metrics::histogram!("tollgate_store_fsync_seconds").record(us as f64 / 1e6);
        let mut s = self.stats.lock().unwrap_or_else(PoisonError::into_inner);
        s.fsyncs += 1;
        s.fsync_us_total += us;
        s.fsync_us_max = s.fsync_us_max.max(us);
        drop(s);
        self.synced.fetch_max(upto, Ordering::AcqRel);
        self.moved.notify_waiters();
    }

    fn wake(&self) {
        let (m, cv) = &self.kick;
        *m.lock().unwrap_or_else(PoisonError::into_inner) = true;
        cv.notify_one();
    }

    /// The log's thread: with `always`, writes and syncs whatever is
    /// appended (one sync for all the answers waiting); with `everysec`,
    /// syncs once a second; with any policy, tries a refused write again
    /// every 100 ms. At the stop, writes and syncs the rest.
    fn run(&self) {
        let mut last_sync = Instant::now();
        loop {
            {
                let (m, cv) = &self.kick;
                let mut kicked = m.lock().unwrap_or_else(PoisonError::into_inner);
                if !*kicked && !self.stop.load(Ordering::Relaxed) {
                    kicked = cv
                        .wait_timeout(kicked, RETRY)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                *kicked = false;
            }
            let stopping = self.stop.load(Ordering::Relaxed);
            let failing = self.failing.load(Ordering::Relaxed);
            if self.policy == Fsync::Always || failing || stopping {
                let all = {
                    let mut w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
                    self.flush(&mut w)
                };
                if all && (self.policy == Fsync::Always || stopping) {
                    self.sync();
                }
                if self.policy == Fsync::Always
                    && !self.failing.load(Ordering::Relaxed)
                    && self.pending_len() > 0
                {
                    // More came while syncing: go again at once.
                    self.wake();
                }
            }
            if self.policy == Fsync::EverySec && last_sync.elapsed() >= Duration::from_secs(1) {
                last_sync = Instant::now();
                {
                    let mut w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
                    self.flush(&mut w);
                }
                self.sync();
            }
            if stopping {
                let w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
                if !w.out.is_empty() || self.pending_len() > 0 {
                    tracing::error!("stopping with log records the disk did not take: they are lost");
                }
                return;
            }
        }
    }

    fn pending_len(&self) -> usize {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .buf
            .len()
    }

    /// Starts a new segment after the records appended so far, once they
    /// are written and synced, and returns its first LSN: a snapshot taken
    /// from then on covers the segments before it.
    ///
    /// The old segment is synced before anything is written to the new
    /// one (under the writer's lock: one sync's wait per snapshot), so a
    /// crash of the machine can tear only the newest segment holding
    /// records, which recovery cuts.
    pub(crate) fn rotate(&self) -> Result<u64> {
        let mut w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        if !self.flush(&mut w) {
            return Err(Error::not_persisted(
                "the disk refuses the log's writes; no snapshot now",
            ));
        }
        let last = self.written.load(Ordering::Acquire);
        w.file.sync_data().map_err(|e| io_error(&self.dir, &e))?;
        self.synced.fetch_max(last, Ordering::AcqRel);
        let file = new_segment(&self.dir, last + 1)?;
        sync_dir(&self.dir).map_err(|e| io_error(&self.dir, &e))?;
        w.file = Arc::new(file);
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .segment_bytes = 0;
        Ok(last + 1)
    }

    /// Bytes appended to the current segment.
    pub(crate) fn segment_bytes(&self) -> u64 {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .segment_bytes
    }

    pub(crate) fn stats(&self) -> JournalStats {
        let mut s = self.stats.lock().unwrap_or_else(PoisonError::into_inner).clone();
        s.failing = self.failing.load(Ordering::Relaxed);
        s
    }

    /// Segments older than `first_lsn` are covered by a snapshot: gone.
    pub(crate) fn forget_before(&self, first_lsn: u64) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut freed = 0;
        for e in entries.flatten() {
            let name = e.file_name();
            if let Some(lsn) = name.to_str().and_then(segment_lsn)
                && lsn < first_lsn
            {
                let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                if std::fs::remove_file(e.path()).is_ok() {
                    freed += len;
                }
            }
        }
        let mut s = self.stats.lock().unwrap_or_else(PoisonError::into_inner);
        s.log_bytes = s.log_bytes.saturating_sub(freed);
    }

    /// Writes and syncs what is left and stops the thread.
    pub(crate) fn close(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.wake();
        let thread = self.thread.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
        self.moved.notify_waiters();
    }
}

/// A new empty segment whose first record is `first_lsn`.
fn new_segment(dir: &Path, first_lsn: u64) -> Result<File> {
    let path = dir.join(segment_name(first_lsn));
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| io_error(&path, &e))?;
    Ok(file)
}

pub(crate) fn io_error(path: &Path, e: &std::io::Error) -> Error {
    Error::not_persisted(format!("{}: {e}", path.display()))
}

/// Appends `value` to `buf` in postcard.
pub(crate) fn put<T: serde::Serialize + ?Sized>(buf: &mut Vec<u8>, value: &T) {
    // Writing to a Vec cannot fail, and every type logged serializes.
    let _ = postcard::to_io(value, buf);
}
