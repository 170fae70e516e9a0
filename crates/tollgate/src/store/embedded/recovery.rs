//! The durable embedded store: a data directory with the log's segments
//! and snapshots, recovered at start, compacted in the background.
//!
//! Recovery: take the directory's lock (a second server on it is
//! refused), load the newest snapshot, then replay every log record from
//! the snapshot's `from` on that the state it changes does not already
//! hold (its LSN is above the state's). A record cut short or failing its
//! checksum at the very end of the last segment is a torn write from a
//! crash: it is cut off and reported. Anywhere else (a whole record
//! follows, or LSNs skip) the log is damaged: recovery refuses, naming the
//! file and the offset, rather than start from a state that never was.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant, SystemTime};

use crate::error::{Error, Result};
use crate::store::memory::durable::{
    DataCheck, Durable, DurableOptions, DurableStats, Recovery, SegmentCheck,
};
use crate::store::memory::journal::{Journal, io_error, put, segment_lsn};
use crate::store::memory::replay::{self, Code, Space};
use crate::store::memory::shelf::OnDrop;
use crate::store::memory::{MemoryOptions, Stamp};

use super::replay::apply;
use super::snapshot::{self, frame};
use super::state::MemoryStore;

const LOCK_FILE: &str = "LOCK";

/// Recovers `store` (new, empty) from `options.dir` and makes it durable:
/// from then on its changes are logged, and snapshots taken.
pub(crate) fn open(store: &Arc<MemoryStore>, options: &DurableOptions) -> Result<Recovery> {
    options.check()?;
    let dir = &options.dir;
    std::fs::create_dir_all(dir).map_err(|e| {
        Error::misconfigured(format!("cannot create the data directory {}: {e}", dir.display()))
    })?;
    let lock = take_lock(dir)?;
    let started = Instant::now();
    let mut recovery = Recovery::default();

    for e in std::fs::read_dir(dir).map_err(|e| io_error(dir, &e))?.flatten() {
        if e.file_name().to_str().is_some_and(|n| n.ends_with(".tmp")) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let (from, last, log_bytes) = load(store, dir, None, &mut recovery)?;
    store.gates.set_sweeping(true);
    store.queues.set_sweeping(true);

    let journal = Journal::start(dir, options.fsync, last.max(from - 1) + 1, log_bytes)?;
    for (shelf_code, drops) in [(Code::DropGate, true), (Code::DropQueue, false)] {
        let j = journal.clone();
        let hook: OnDrop = Box::new(move |name, fence, now| {
            j.append(now * 1000, 0, |b| {
                put(b, &(shelf_code.byte(), name.as_str()));
                put(b, &fence);
            });
        });
        if drops {
            store.gates.on_drop(hook);
        } else {
            store.queues.on_drop(hook);
        }
    }
    let _ = store.journal.set(journal);
    recovery.took = started.elapsed();
    let stop = Arc::new(AtomicBool::new(false));
    let durable = Durable {
        lock: Mutex::new(Some(lock)),
        stop: stop.clone(),
        snapshot_after: options.snapshot_after,
        rebuild_above: options.rebuild_above,
        stats: Mutex::new(DurableStats {
            dir: dir.clone(),
            fsync: Some(options.fsync),
            recovery: recovery.clone(),
            ..DurableStats::default()
        }),
        snapshotting: Mutex::new(()),
    };
    let _ = store.durable.set(durable);
    let weak = Arc::downgrade(store);
    std::thread::Builder::new()
        .name("tollgate-snapshot".into())
        .spawn(move || snapshot_loop(&weak, &stop))
        .map_err(|e| Error::unavailable(format!("could not start the snapshot thread: {e}")))?;
    Ok(recovery)
}

/// Locks `dir` for this process: a second server on it exits at start.
fn take_lock(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| Error::misconfigured(format!("cannot open {}: {e}", path.display())))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            return Err(Error::misconfigured(format!(
                "the data directory {} is in use by another tollgate (pid {}); one server per data directory",
                dir.display(),
                holder.trim()
            )));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(Error::misconfigured(format!(
                "cannot lock {}: {e}",
                path.display()
            )));
        }
    }
    let _ = file.set_len(0);
    let _ = std::io::Write::write_all(&mut &file, std::process::id().to_string().as_bytes());
    Ok(file)
}

/// Loads the newest snapshot of `dir` and replays the log after it into
/// `store` (new, empty; its idle sweep is left off): up to the end, for
/// recovery, or (`upto`) the records before that LSN only, from the
/// segments wholly before it, which a rotation closed. The snapshot's
/// `from`, the last LSN seen and the bytes of the segments kept.
fn load(
    store: &MemoryStore,
    dir: &Path,
    upto: Option<u64>,
    recovery: &mut Recovery,
) -> Result<(u64, u64, u64)> {
    store.gates.set_sweeping(false);
    store.queues.set_sweeping(false);
    let mut from = 1;
    if let Some((lsn, path)) = snapshot::list(dir)?.pop() {
        let loaded = snapshot::load(store, &path)?;
        debug_assert_eq!(loaded.from, lsn);
        from = loaded.from;
        recovery.snapshot = Some(path);
        recovery.snapshot_names = loaded.names;
    }
    let (last, log_bytes) = replay_log(store, dir, from, upto, recovery)?;
    store.pin(None);
    Ok((from, last, log_bytes))
}

/// The state the log of `dir` holds before record `upto` (a rotation's
/// first), rebuilt in a store of its own from the newest snapshot and the
/// closed segments: what a snapshot is written from, so the live store's
/// states are never locked to be written out.
fn rebuild(store: &MemoryStore, dir: &Path, upto: u64) -> Result<MemoryStore> {
    let copy = MemoryStore::new(MemoryOptions {
        idle: Duration::from_millis(store.idle_ms),
        clock: store.clock.clone(),
    });
    load(&copy, dir, Some(upto), &mut Recovery::default())?;
    Ok(copy)
}

/// The log segments in `dir`, by their first LSN.
fn segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .map_err(|e| io_error(dir, &e))?
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(segment_lsn)
                .map(|lsn| (lsn, e.path()))
        })
        .collect();
    found.sort();
    Ok(found)
}

/// Replays the segments of `dir` from `from` on (before `upto`, if given:
/// see `load`); the last LSN seen and the bytes of the segments kept.
fn replay_log(
    store: &MemoryStore,
    dir: &Path,
    from: u64,
    upto: Option<u64>,
    recovery: &mut Recovery,
) -> Result<(u64, u64)> {
    let mut segments = segments(dir)?;
    if let Some(upto) = upto {
        segments.retain(|(first, _)| *first < upto);
    }
    let mut last = 0;
    let mut bytes_kept = 0;
    // The newest segment holding records: only it can end torn (an empty
    // one after it is a start or a rotation that wrote nothing yet). A
    // rebuild reads closed segments only, which a rotation synced whole.
    let newest = newest_with_records(&segments).filter(|_| upto.is_none());
    for (i, (first, path)) in segments.into_iter().enumerate() {
        let is_last = Some(i) == newest;
        let bytes = std::fs::read(&path).map_err(|e| io_error(&path, &e))?;
        if bytes.is_empty() && upto.is_none() {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        let due = if last == 0 { from } else { last + 1 };
        if first > due {
            return Err(replay::corrupt(format!(
                "the log goes on at record {first} ({}) where record {due} was due: a segment is missing \
                 (or the snapshot that covered it); `tollgate data check --dir {}` says what is there",
                path.display(),
                dir.display()
            )));
        }
        let mut at = 0;
        let mut expect = first;
        while at < bytes.len() {
            let Some((payload, next)) = frame(&bytes, at) else {
                if is_last && !valid_after(&bytes, at, expect) {
                    cut(&path, at, bytes.len() - at)?;
                    recovery.torn = Some((path.clone(), (bytes.len() - at) as u64));
                    break;
                }
                return Err(damaged(
                    &path,
                    at,
                    "a record fails its checksum and whole records follow it",
                ));
            };
            let r = replay::parse(payload).map_err(|e| damaged(&path, at, &e.to_string()))?;
            if r.lsn != expect {
                return Err(damaged(
                    &path,
                    at,
                    &format!("record {} where {expect} was due", r.lsn),
                ));
            }
            if upto.is_some_and(|upto| r.lsn >= upto) {
                break;
            }
            expect += 1;
            last = r.lsn;
            if r.lsn >= from && r.lsn > state_lsn(store, &r) {
                store.pin(Some(Stamp {
                    us: r.time_us.max(1),
                    rnd: r.rnd,
                }));
                apply(store, &r).map_err(|e| damaged(&path, at, &e.to_string()))?;
                recovery.replayed += 1;
            }
            at = next;
        }
        if upto.is_some() {
            continue;
        }
        if expect <= from && !is_last {
            // Wholly before the snapshot: a crash came between the
            // snapshot and the removal of what it covers.
            let _ = std::fs::remove_file(&path);
        } else {
            bytes_kept += at as u64;
        }
    }
    Ok((last, bytes_kept))
}

/// The index of the newest of `segments` that is not empty.
fn newest_with_records(segments: &[(u64, PathBuf)]) -> Option<usize> {
    segments
        .iter()
        .rposition(|(_, path)| std::fs::metadata(path).is_ok_and(|m| m.len() > 0))
}

/// The LSN the state a record changes holds (0: no state).
fn state_lsn(store: &MemoryStore, r: &replay::Record<'_>) -> u64 {
    match r.code.space() {
        Space::Gate => store.gates.lsn(&r.name, |s| s.lsn).unwrap_or(0),
        Space::Queue => store.queues.lsn(&r.name, |s| s.lsn).unwrap_or(0),
        Space::Index => {
            store
                .schedule_index
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .lsn
        }
        Space::Limits => store.limits.lock().unwrap_or_else(PoisonError::into_inner).lsn,
    }
}

/// Whether a whole record with an LSN from `expect` on starts anywhere
/// after `at`: then the bad bytes at `at` are damage, not a torn end.
fn valid_after(bytes: &[u8], at: usize, expect: u64) -> bool {
    (at + 1..bytes.len()).any(|i| {
        frame(bytes, i)
            .and_then(|(payload, _)| postcard::take_from_bytes::<u64>(payload).ok())
            .is_some_and(|(lsn, _)| lsn >= expect)
    })
}

fn damaged(path: &Path, at: usize, what: &str) -> Error {
    replay::corrupt(format!(
        "the log {} is damaged at byte {at}: {what}. Nothing was changed; `tollgate data check --dir <dir>` says what can be kept",
        path.display()
    ))
}

/// Cuts a torn end off `path` at `at` (`len` bytes).
fn cut(path: &Path, at: usize, len: usize) -> Result<()> {
    tracing::warn!(file = %path.display(), offset = at, bytes = len,
        "the log ends in a torn record (a crash during a write): cut off");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| io_error(path, &e))?;
    f.set_len(at as u64).map_err(|e| io_error(path, &e))?;
    f.sync_all().map_err(|e| io_error(path, &e))
}

fn snapshot_loop(store: &Weak<MemoryStore>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
        let Some(store) = store.upgrade() else { return };
        let due = match (store.journal.get(), store.durable.get()) {
            (Some(j), Some(d)) => {
                let last = d
                    .stats
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .snapshot_bytes;
                j.segment_bytes() >= d.snapshot_after.max(last)
            }
            _ => false,
        };
        if due && let Err(e) = take_snapshot(&store) {
            tracing::error!(error = %e, "snapshot failed; the log keeps growing until one succeeds");
            std::thread::sleep(Duration::from_secs(5));
        }
    }
}

/// Takes a snapshot now: a new log segment, every state written (from the
/// live store, or rebuilt apart from it when a name is heavy: see
/// `DurableOptions::rebuild_above`), then the segments and snapshots it
/// covers removed.
pub(crate) fn take_snapshot(store: &MemoryStore) -> Result<()> {
    let (Some(journal), Some(durable)) = (store.journal.get(), store.durable.get()) else {
        return Ok(());
    };
    let _one = durable
        .snapshotting
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let started = Instant::now();
    let from = journal.rotate()?;
    let heaviest = store
        .gates
        .heaviest()
        .max(store.queues.heaviest())
        .max(store.limits.lock().unwrap_or_else(PoisonError::into_inner).len());
    let rebuilt = heaviest > durable.rebuild_above;
    let written = if rebuilt {
        let copy = rebuild(store, journal.dir(), from)?;
        snapshot::write(&copy, journal.dir(), from)?
    } else {
        snapshot::write(store, journal.dir(), from)?
    };
    for (lsn, path) in snapshot::list(journal.dir())? {
        if lsn < from {
            let _ = std::fs::remove_file(path);
        }
    }
    journal.forget_before(from);
    let took = started.elapsed();
    metrics::histogram!("tollgate_store_snapshot_seconds").record(took.as_secs_f64());
    let mut s = durable.stats.lock().unwrap_or_else(PoisonError::into_inner);
    s.snapshots += 1;
    s.snapshot_bytes = written.bytes;
    s.last_snapshot = Some(SystemTime::now());
    s.last_snapshot_took = took;
    tracing::info!(
        names = written.names,
        bytes = written.bytes,
        rebuilt,
        took_ms = took.as_millis() as u64,
        "snapshot taken"
    );
    Ok(())
}

impl MemoryStore {
    /// The durable store's figures (`None`: memory only).
    pub(crate) fn durable_stats(&self) -> Option<DurableStats> {
        let (journal, durable) = (self.journal.get()?, self.durable.get()?);
        let mut s = durable
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        s.log = journal.stats();
        Some(s)
    }

    /// Writes and syncs what is logged and stops the log: for a clean
    /// stop. Later changes are refused.
    pub(crate) fn close(&self) {
        if let Some(d) = self.durable.get() {
            d.stop.store(true, Ordering::Relaxed);
            let _one = d.snapshotting.lock().unwrap_or_else(PoisonError::into_inner);
        }
        if let Some(j) = self.journal.get() {
            j.close();
        }
        if let Some(d) = self.durable.get() {
            // Closed: another store may open the directory now.
            drop(d.lock.lock().unwrap_or_else(PoisonError::into_inner).take());
        }
    }
}

impl Drop for MemoryStore {
    fn drop(&mut self) {
        self.close();
    }
}

/// Reads a data directory without changing it (no lock taken: run it on a
/// stopped server's directory, or a copy): every record's checksum and
/// order, and the newest snapshot. `tollgate data check`.
pub fn check_data_dir(dir: &Path) -> Result<DataCheck> {
    let mut report = DataCheck::default();
    if let Some((_, path)) = snapshot::list(dir)?.pop() {
        let scratch = MemoryStore::new(MemoryOptions::default());
        let read = snapshot::load(&scratch, &path)
            .map(|l| l.from)
            .map_err(|e| e.to_string());
        report.snapshot = Some((path, read));
    }
    let segments = segments(dir)?;
    let newest = newest_with_records(&segments);
    let from = match &report.snapshot {
        Some((_, Ok(from))) => *from,
        _ => 1,
    };
    let mut expect_next = from;
    for (i, (first, path)) in segments.into_iter().enumerate() {
        let bytes = std::fs::read(&path).map_err(|e| io_error(&path, &e))?;
        let mut seg = SegmentCheck {
            path,
            bytes: bytes.len() as u64,
            first_lsn: first,
            last_lsn: first.saturating_sub(1),
            ..SegmentCheck::default()
        };
        if !bytes.is_empty() && first > expect_next {
            seg.bad = Some((
                0,
                format!(
                    "starts at record {first} where {expect_next} was due: a segment (or the snapshot that covered it) is missing"
                ),
            ));
        }
        let mut at = 0;
        let mut expect = first;
        while seg.bad.is_none() && at < bytes.len() {
            let Some((payload, next)) = frame(&bytes, at) else {
                seg.torn = Some(i) == newest && !valid_after(&bytes, at, expect);
                seg.bad = Some((at as u64, "a record is cut short or fails its checksum".into()));
                break;
            };
            match replay::parse(payload) {
                Ok(r) if r.lsn == expect => {}
                Ok(r) => {
                    seg.bad = Some((at as u64, format!("record {} where {expect} was due", r.lsn)));
                    break;
                }
                Err(e) => {
                    seg.bad = Some((at as u64, e.message().to_owned()));
                    break;
                }
            }
            expect += 1;
            seg.records += 1;
            seg.last_lsn = expect - 1;
            at = next;
        }
        if !bytes.is_empty() {
            expect_next = expect;
        }
        report.segments.push(seg);
    }
    Ok(report)
}

/// Makes a damaged directory recoverable by keeping what reads whole: the
/// log is cut at its first damage (the cut bytes, and any later segment,
/// are moved to `<name>.damaged` beside it, never deleted), and a damaged
/// newest snapshot is moved aside the same way (recovery then starts from
/// the log, which is only whole if no snapshot removed its start). Returns
/// the check after the repair. `tollgate data repair`; take the lock
/// first (a running server on it is refused).
pub fn repair_data_dir(dir: &Path) -> Result<DataCheck> {
    let _lock = take_lock(dir)?;
    let before = check_data_dir(dir)?;
    if let Some((path, Err(_))) = &before.snapshot {
        aside(path)?;
    }
    let mut cut_from: Option<usize> = None;
    for (i, seg) in before.segments.iter().enumerate() {
        if cut_from.is_some() {
            aside(&seg.path)?;
            continue;
        }
        if let Some((at, _)) = &seg.bad {
            let bytes = std::fs::read(&seg.path).map_err(|e| io_error(&seg.path, &e))?;
            let damaged = seg.path.with_extension("tgl.damaged");
            std::fs::write(&damaged, &bytes[*at as usize..]).map_err(|e| io_error(&damaged, &e))?;
            cut(&seg.path, *at as usize, bytes.len() - *at as usize)?;
            cut_from = Some(i);
        }
    }
    check_data_dir(dir)
}

/// Moves `path` aside as `<path>.damaged`.
fn aside(path: &Path) -> Result<()> {
    let mut to = path.as_os_str().to_owned();
    to.push(".damaged");
    std::fs::rename(path, &to).map_err(|e| io_error(path, &e))
}
