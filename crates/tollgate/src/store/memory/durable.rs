//! The durable embedded store's settings and figures: `DurableOptions`,
//! what recovery found, the running store's figures, what a check of a
//! data directory found, and the snapshot thread's handle. Recovery, the
//! snapshot thread and the checks themselves are `store/embedded/recovery.rs`.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::error::{Error, Result};

use super::journal::Fsync;

/// The smallest log (bytes since the last snapshot) that starts a new
/// snapshot by default.
pub const DEFAULT_SNAPSHOT_AFTER: u64 = 64 << 20;

/// The most entries a name may hold for a snapshot to be written from
/// the live store by default (about 5 ms of its lock, at 0.5 µs an entry
/// measured); above, the snapshot is rebuilt from the log.
pub const DEFAULT_REBUILD_ABOVE: usize = 10_000;

/// Where and how the embedded store keeps its state on disk
/// ([`Store::open`](crate::Store::open)).
#[derive(Debug, Clone)]
pub struct DurableOptions {
    /// The data directory (created if missing). One server at a time.
    pub dir: PathBuf,
    /// When the log is synced. Default [`Fsync::EverySec`].
    pub fsync: Fsync,
    /// A snapshot is taken once the log since the last one is this many
    /// bytes and at least as large as that snapshot. Default 64 MiB;
    /// at least 4 KiB.
    pub snapshot_after: u64,
    /// How a snapshot is made. While no name holds more than this many
    /// entries (a queue's jobs; a gate's holders, tickets and kept ends;
    /// the rate-limit keys together), it is written from the live store,
    /// each name under its own lock for as long as its state takes to
    /// write (cheap, and brief for small states). Above, it is rebuilt
    /// apart from the live store from the last snapshot and the log (no
    /// request waits for it; it costs a replay of the log since the last
    /// snapshot, and memory for a second copy of the state while it runs).
    /// Default [`DEFAULT_REBUILD_ABOVE`]; 0 rebuilds every snapshot.
    pub rebuild_above: usize,
}

impl DurableOptions {
    /// The defaults in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> DurableOptions {
        DurableOptions {
            dir: dir.into(),
            fsync: Fsync::default(),
            snapshot_after: DEFAULT_SNAPSHOT_AFTER,
            rebuild_above: DEFAULT_REBUILD_ABOVE,
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.snapshot_after < 4096 {
            return Err(Error::invalid("snapshot_after must be at least 4096 bytes"));
        }
        Ok(())
    }
}

/// What recovery found, for the server's start-up line and metrics.
#[derive(Debug, Clone, Default)]
pub struct Recovery {
    /// The snapshot loaded (its path), if any, and the names in it.
    pub snapshot: Option<PathBuf>,
    pub snapshot_names: u64,
    /// Log records replayed after it.
    pub replayed: u64,
    /// A torn last record cut off: the segment and how many bytes.
    pub torn: Option<(PathBuf, u64)>,
    /// How long recovery took.
    pub took: Duration,
}

/// The durable store's own state and figures.
#[derive(Debug, Clone, Default)]
pub struct DurableStats {
    pub dir: PathBuf,
    pub fsync: Option<Fsync>,
    pub log: super::journal::JournalStats,
    /// Snapshots taken since start, the bytes of the last one, when it was
    /// finished, and how long it took.
    pub snapshots: u64,
    pub snapshot_bytes: u64,
    pub last_snapshot: Option<SystemTime>,
    pub last_snapshot_took: Duration,
    /// How recovery went at start.
    pub recovery: Recovery,
}

#[derive(Debug)]
pub(crate) struct Durable {
    /// Held open until the store is closed: its lock keeps a second server
    /// out.
    pub(crate) lock: Mutex<Option<File>>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) snapshot_after: u64,
    pub(crate) rebuild_above: usize,
    pub(crate) stats: Mutex<DurableStats>,
    /// One snapshot at a time.
    pub(crate) snapshotting: Mutex<()>,
}

/// What `check` found in a data directory.
#[derive(Debug, Clone, Default)]
pub struct DataCheck {
    /// The newest snapshot, whether it reads whole, and its first LSN.
    pub snapshot: Option<(PathBuf, std::result::Result<u64, String>)>,
    /// Each log segment: its path, its whole records, the LSNs they span,
    /// and where it is damaged or torn (offset, what).
    pub segments: Vec<SegmentCheck>,
}

/// One log segment's check.
#[derive(Debug, Clone, Default)]
pub struct SegmentCheck {
    pub path: PathBuf,
    pub bytes: u64,
    pub records: u64,
    pub first_lsn: u64,
    pub last_lsn: u64,
    /// The first bad byte and what is wrong there (`None`: all whole).
    pub bad: Option<(u64, String)>,
    /// The bad bytes are a torn end (a crash mid-write), which recovery
    /// cuts off by itself; otherwise recovery refuses to start.
    pub torn: bool,
}

impl DataCheck {
    /// Whether the server would start on the directory as it is.
    pub fn recoverable(&self) -> bool {
        self.snapshot.as_ref().is_none_or(|(_, r)| r.is_ok())
            && self.segments.iter().all(|s| s.bad.is_none() || s.torn)
    }
}
