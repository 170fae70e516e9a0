//! The embedded store's append-only log: every operation that changed
//! state, written before its answer is sent.
//!
//! A record is `[length u32 LE][crc32 u32 LE][payload]`; the payload is
//! postcard: `(lsn, time_us, rnd, code)` then the operation's arguments
//! (`replay.rs`). Records are appended while the changed name's lock is
//! held, so one name's records are in the log in the order they were
//! applied; names are independent, so that order is all replay needs.
//!
//! Appending only copies the record into a buffer under a short lock. One
//! writer thread takes the whole buffer at a time, writes it to the
//! current segment file and, with `fsync = always`, syncs it: every answer
//! waiting for its record then goes together (group commit). An answer
//! waits for the write (`everysec`, `no`: a crash of the process loses
//! nothing, it is in the kernel) or for the sync (`always`: a crash of the
//! machine loses nothing either). With `everysec` a second thread syncs
//! once a second.
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
pub(super) const HEADER: usize = 8;
/// The largest payload a record may have (a batch of 1,000 pushes of
/// 1 MiB payloads is far below).
pub(super) const MAX_RECORD: usize = 1 << 30;
/// How long an answer waits for a disk that refuses writes before it is
/// told its change is not on disk yet.
const STALLED_ANSWER: Duration = Duration::from_secs(2);
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
    /// Records appended since start.
    pub records: u64,
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
    /// A rotation asked for: the segment after the next write starts
    /// here, and the caller is told through this slot.
    rotate: Option<Arc<(Mutex<Option<u64>>, Condvar)>>,
}

#[derive(Debug)]
pub(crate) struct Journal {
    dir: PathBuf,
    policy: Fsync,
    pending: Mutex<Pending>,
    /// Wakes the writer.
    work: Condvar,
    /// The last record appended, written to the kernel, synced.
    appended: AtomicU64,
    written: AtomicU64,
    synced: AtomicU64,
    /// Wakes answers waiting for `written` or `synced` to move.
    moved: tokio::sync::Notify,
    failing: AtomicBool,
    stop: AtomicBool,
    stats: Mutex<JournalStats>,
    /// The segment being written, for the `everysec` syncer.
    current: Mutex<Option<Arc<File>>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// A segment's file name: its first record's LSN, zero-padded so names
/// sort as numbers.
pub(super) fn segment_name(first_lsn: u64) -> String {
    format!("log-{first_lsn:020}.tgl")
}

/// The first LSN of a segment named `name`, if it is one.
pub(super) fn segment_lsn(name: &str) -> Option<u64> {
    name.strip_prefix("log-")?.strip_suffix(".tgl")?.parse().ok()
}

/// Frames `payload` (already written after `start + HEADER`) in place.
pub(super) fn seal(buf: &mut [u8], start: usize) {
    let len = (buf.len() - start - HEADER) as u32;
    let crc = crc32fast::hash(&buf[start + HEADER..]);
    buf[start..start + 4].copy_from_slice(&len.to_le_bytes());
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Syncs directory `dir`, so a file created or renamed in it stays.
pub(super) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

impl Journal {
    /// Starts a log in `dir` whose next record is `next_lsn`, in a new
    /// segment, with its writer (and with `everysec` its syncer) thread.
    pub(crate) fn start(dir: &Path, policy: Fsync, next_lsn: u64, old_bytes: u64) -> Result<Arc<Journal>> {
        let file = new_segment(dir, next_lsn)?;
        let journal = Arc::new(Journal {
            dir: dir.to_owned(),
            policy,
            pending: Mutex::new(Pending {
                buf: Vec::with_capacity(1 << 16),
                next_lsn,
                segment_bytes: 0,
                rotate: None,
            }),
            work: Condvar::new(),
            appended: AtomicU64::new(next_lsn - 1),
            written: AtomicU64::new(next_lsn - 1),
            synced: AtomicU64::new(next_lsn - 1),
            moved: tokio::sync::Notify::new(),
            failing: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            stats: Mutex::new(JournalStats {
                log_bytes: old_bytes,
                ..JournalStats::default()
            }),
            current: Mutex::new(Some(Arc::new(file.try_clone().map_err(|e| io_error(dir, &e))?))),
            threads: Mutex::new(Vec::new()),
        });
        let writer = {
            let j = journal.clone();
            std::thread::Builder::new()
                .name("tollgate-log".into())
                .spawn(move || j.write_loop(file, next_lsn))
                .map_err(|e| Error::unavailable(format!("could not start the log writer: {e}")))?
        };
        let mut threads = vec![writer];
        if policy == Fsync::EverySec {
            let j = journal.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("tollgate-fsync".into())
                    .spawn(move || j.sync_loop())
                    .map_err(|e| Error::unavailable(format!("could not start the log syncer: {e}")))?,
            );
        }
        *journal.threads.lock().unwrap_or_else(PoisonError::into_inner) = threads;
        Ok(journal)
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether changes are refused now (the disk refuses writes).
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
        let was_empty = p.buf.is_empty();
        let start = p.buf.len();
        p.buf.extend_from_slice(&[0; HEADER]);
        put(&mut p.buf, &(lsn, time_us, rnd));
        encode(&mut p.buf);
        seal(&mut p.buf, start);
        p.segment_bytes += (p.buf.len() - start) as u64;
        self.appended.store(lsn, Ordering::Release);
        drop(p);
        if was_empty {
            self.work.notify_one();
        }
        lsn
    }

    /// Waits until every record appended so far is as safe as the policy
    /// makes it: written to the kernel, or with `always`, synced.
    pub(crate) async fn settle(&self) -> Result<()> {
        let target = self.appended.load(Ordering::Acquire);
        let mark = match self.policy {
            Fsync::Always => &self.synced,
            Fsync::EverySec | Fsync::No => &self.written,
        };
        if mark.load(Ordering::Acquire) >= target {
            return Ok(());
        }
        let since = Instant::now();
        loop {
            let moved = self.moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            if mark.load(Ordering::Acquire) >= target {
                return Ok(());
            }
            if self.stop.load(Ordering::Relaxed) {
                return Err(Error::unavailable("the embedded store is closing"));
            }
            if self.failing.load(Ordering::Relaxed) && since.elapsed() >= STALLED_ANSWER {
                return Err(Error::not_persisted(
                    "the embedded store's disk refuses writes: this change is applied but not yet on disk, and is lost if the server stops before the disk takes it",
                ));
            }
            // A failing disk moves nothing: look again now and then.
            let _ = tokio::time::timeout(RETRY, moved).await;
        }
    }

    /// Starts a new segment after the records appended so far, and
    /// returns its first LSN once every record before it is written and
    /// synced: a snapshot taken from then on covers the old segments.
    pub(crate) fn rotate(&self) -> Result<u64> {
        let slot = Arc::new((Mutex::new(None), Condvar::new()));
        {
            let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            p.rotate = Some(slot.clone());
        }
        self.work.notify_one();
        let (m, cv) = &*slot;
        let mut got = m.lock().unwrap_or_else(PoisonError::into_inner);
        while got.is_none() {
            if self.stop.load(Ordering::Relaxed) {
                return Err(Error::unavailable("the store is closing"));
            }
            got = cv
                .wait_timeout(got, Duration::from_millis(100))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        Ok(got.unwrap_or_default())
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

    /// Writes what is left, syncs it and stops the threads.
    pub(crate) fn close(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.work.notify_all();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        for t in threads {
            let _ = t.join();
        }
    }

    fn write_loop(&self, mut file: File, mut first_lsn: u64) {
        let mut out = Vec::with_capacity(1 << 16);
        loop {
            let rotate;
            let last;
            {
                let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
                while p.buf.is_empty() && p.rotate.is_none() && !self.stop.load(Ordering::Relaxed) {
                    p = self.work.wait(p).unwrap_or_else(PoisonError::into_inner);
                }
                std::mem::swap(&mut p.buf, &mut out);
                last = p.next_lsn - 1;
                rotate = p.rotate.take();
                if rotate.is_some() {
                    p.segment_bytes = 0;
                }
            }
            let stopping = self.stop.load(Ordering::Relaxed);
            if !out.is_empty() {
                self.write_all(&mut file, &out);
                out.clear();
                self.written.store(last, Ordering::Release);
                if self.policy == Fsync::Always || stopping || rotate.is_some() {
                    self.sync(&file, last);
                }
                self.moved.notify_waiters();
            }
            if let Some(slot) = rotate {
                match new_segment(&self.dir, last + 1) {
                    Ok(f) => {
                        if let Err(e) = sync_dir(&self.dir) {
                            tracing::error!(error = %e, "could not sync the data directory after a new segment");
                        }
                        first_lsn = last + 1;
                        if let Ok(clone) = f.try_clone() {
                            *self.current.lock().unwrap_or_else(PoisonError::into_inner) =
                                Some(Arc::new(clone));
                        }
                        file = f;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "could not start a new log segment; keeping the current one")
                    }
                }
                let (m, cv) = &*slot;
                *m.lock().unwrap_or_else(PoisonError::into_inner) = Some(first_lsn);
                cv.notify_all();
            }
            if stopping
                && self
                    .pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .buf
                    .is_empty()
            {
                let written = self.written.load(Ordering::Acquire);
                if self.synced.load(Ordering::Acquire) < written {
                    self.sync(&file, written);
                }
                return;
            }
        }
    }

    /// Writes `bytes` to the end of `file`, trying again while the disk
    /// refuses (full, failing). A short write leaves a torn record only
    /// until the retry completes it: the file's end is where the write
    /// began plus what it took, and the retry goes on from there.
    fn write_all(&self, file: &mut File, bytes: &[u8]) {
        let mut done = 0;
        let mut warned = false;
        while done < bytes.len() {
            match file.write(&bytes[done..]) {
                Ok(0) => self.refused(&mut warned, "the disk took no bytes"),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => self.refused(&mut warned, &e.to_string()),
            }
            if self.stop.load(Ordering::Relaxed) && self.failing.load(Ordering::Relaxed) {
                tracing::error!(
                    unwritten = bytes.len() - done,
                    "stopping with log records the disk did not take: they are lost"
                );
                return;
            }
        }
        if warned {
            self.failing.store(false, Ordering::Relaxed);
            tracing::warn!("the disk takes the log's writes again; changes are accepted again");
        }
        let mut s = self.stats.lock().unwrap_or_else(PoisonError::into_inner);
        s.bytes_written += bytes.len() as u64;
        s.log_bytes += bytes.len() as u64;
        s.records = self.written.load(Ordering::Relaxed);
    }

    fn refused(&self, warned: &mut bool, why: &str) {
        if !*warned {
            *warned = true;
            self.failing.store(true, Ordering::Relaxed);
            tracing::error!(dir = %self.dir.display(), error = why,
                "the disk refuses the log's writes; changes are refused until it takes them");
            self.moved.notify_waiters();
        }
        std::thread::sleep(RETRY);
    }

    fn sync(&self, file: &File, upto: u64) {
        let t = Instant::now();
        if let Err(e) = file.sync_data() {
            // A failed fsync may have dropped the dirty pages (Linux
            // clears the error once reported): what it covered cannot be
            // trusted to be on disk. Stop accepting changes, loudly.
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
    }

    fn sync_loop(&self) {
        let mut last = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            if last.elapsed() < Duration::from_secs(1) {
                continue;
            }
            last = Instant::now();
            let written = self.written.load(Ordering::Acquire);
            if self.synced.load(Ordering::Acquire) >= written {
                continue;
            }
            let file = self
                .current
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            if let Some(f) = file {
                self.sync(&f, written);
            }
        }
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

pub(super) fn io_error(path: &Path, e: &std::io::Error) -> Error {
    Error::not_persisted(format!("{}: {e}", path.display()))
}

/// Appends `value` to `buf` in postcard.
pub(crate) fn put<T: serde::Serialize + ?Sized>(buf: &mut Vec<u8>, value: &T) {
    // Writing to a Vec cannot fail, and every type logged serializes.
    let _ = postcard::to_io(value, buf);
}
