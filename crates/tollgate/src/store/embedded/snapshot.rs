//! Snapshots of the embedded store: every name's state as of one point
//! of the log, so the log before it can go.
//!
//! A snapshot starts with a rotation: the log moves to a new segment,
//! whose first LSN is the snapshot's `from`; every record before `from`
//! is in the states it then reads. Those are either the live store's,
//! each name read under its own lock in turn, with the LSN of the last
//! record applied to it, so records from `from` on that a state already
//! holds are skipped at recovery and the others replayed; or, when a name
//! is too heavy to hold its lock that long, a copy of the state as of
//! `from` rebuilt in a store of its own from the previous snapshot and
//! the closed segments (`durable::rebuild`). `write` takes either.
//!
//! The file is `snapshot-<from>.tgs`: a magic line, then records framed
//! like the log's (length, CRC-32, postcard payload): the meta first, a
//! record per gate and per queue, the rate-limit keys, the schedule index,
//! and an end record with the count. A queue with groups or limits has a
//! record of its own kind (`QUEUE_FAIR`: the queue as before, then its
//! `Fair`); a plain queue's record is as it was before groups, so
//! snapshots of either age load, and one of plain queues loads in an
//! older build too. A gate whose door is set (`Gate::set_door`) likewise
//! has `GATE_DOOR`: the gate as before, then its door; and one with a
//! draw under way or a last draw's record has `GATE_DRAW`: the gate, its
//! door, then the draw (`gate::model::DrawState`); and one with random
//! queueing (`Gate::set_queueing`) has `GATE_MORE`: the gate, its door,
//! its draw if any, then its picks' state. It is written as `.tmp`, synced and
//! renamed: a snapshot file is whole or absent.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::PoisonError;

use crate::error::{Error, Result};
use crate::gate::model::{DrawState, GateState};
use crate::gate::types::Door;
use crate::jobs::fair::Fair;
use crate::jobs::model::Queue;
use crate::limit::memory::Limits;
use crate::name::Name;
use crate::schedule::state::Index;

use crate::store::memory::journal::{HEADER, MAX_RECORD, io_error, put, seal, sync_dir};
use crate::store::memory::replay::corrupt;

use super::state::MemoryStore;

const MAGIC: &[u8; 8] = b"TGSNAP1\n";

const META: u8 = 0;
const GATE: u8 = 1;
const QUEUE: u8 = 2;
const QUEUE_FAIR: u8 = 5;
const GATE_DOOR: u8 = 6;
const GATE_DRAW: u8 = 7;
const GATE_MORE: u8 = 8;
const LIMITS: u8 = 3;
const INDEX: u8 = 4;
const END: u8 = 9;

pub(super) fn file_name(from: u64) -> String {
    format!("snapshot-{from:020}.tgs")
}

pub(super) fn file_lsn(name: &str) -> Option<u64> {
    name.strip_prefix("snapshot-")?.strip_suffix(".tgs")?.parse().ok()
}

/// What a snapshot wrote.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Written {
    pub(super) bytes: u64,
    pub(super) names: u64,
}

/// Writes the snapshot of `store` whose log resumes at `from` into `dir`.
pub(super) fn write(store: &MemoryStore, dir: &Path, from: u64) -> Result<Written> {
    let path = dir.join(file_name(from));
    let tmp = path.with_extension("tgs.tmp");
    let file = File::create(&tmp).map_err(|e| io_error(&tmp, &e))?;
    let mut out = Out {
        w: BufWriter::with_capacity(1 << 20, file),
        buf: Vec::with_capacity(1 << 12),
        error: None,
        written: Written::default(),
    };
    out.raw(MAGIC);
    out.record(&(META, from, store.gates.floor(), store.queues.floor()));
    store.gates.each(|name, state: &GateState, touched| {
        if state.pick > 0 {
            let more = (state.draw_state(), state.pick);
            out.record(&(GATE_MORE, name, touched, state, &state.door, more));
        } else if let Some(draw) = state.draw_state() {
            out.record(&(GATE_DRAW, name, touched, state, &state.door, draw));
        } else if state.door.is_blank() {
            out.record(&(GATE, name, touched, state));
        } else {
            out.record(&(GATE_DOOR, name, touched, state, &state.door));
        }
        out.written.names += 1;
    });
    store.queues.each(|name, state: &Queue, touched| {
        if state.fair.is_blank() {
            out.record(&(QUEUE, name, touched, state));
        } else {
            out.record(&(QUEUE_FAIR, name, touched, state, &state.fair));
        }
        out.written.names += 1;
    });
    {
        let limits = store.limits.lock().unwrap_or_else(PoisonError::into_inner);
        out.record(&(LIMITS, &*limits));
    }
    {
        let index = store
            .schedule_index
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        out.record(&(INDEX, &*index));
    }
    let names = out.written.names;
    out.record(&(END, names));
    if let Some(e) = out.error {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_error(&tmp, &e));
    }
    let written = out.written;
    let file = out.w.into_inner().map_err(|e| io_error(&tmp, e.error()))?;
    file.sync_all().map_err(|e| io_error(&tmp, &e))?;
    drop(file);
    std::fs::rename(&tmp, &path).map_err(|e| io_error(&path, &e))?;
    sync_dir(dir).map_err(|e| io_error(dir, &e))?;
    Ok(written)
}

struct Out {
    w: BufWriter<File>,
    buf: Vec<u8>,
    error: Option<std::io::Error>,
    written: Written,
}

impl Out {
    fn raw(&mut self, bytes: &[u8]) {
        if self.error.is_none() {
            match self.w.write_all(bytes) {
                Ok(()) => self.written.bytes += bytes.len() as u64,
                Err(e) => self.error = Some(e),
            }
        }
    }

    fn record<T: serde::Serialize + ?Sized>(&mut self, value: &T) {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        buf.extend_from_slice(&[0; HEADER]);
        put(&mut buf, value);
        seal(&mut buf, 0);
        self.raw(&buf);
        self.buf = buf;
    }
}

/// A loaded snapshot's summary.
#[derive(Debug, Clone, Default)]
pub(super) struct Loaded {
    pub(super) from: u64,
    pub(super) names: u64,
}

/// Loads snapshot `path` into `store` (empty, not yet live).
pub(super) fn load(store: &MemoryStore, path: &Path) -> Result<Loaded> {
    let bytes = std::fs::read(path).map_err(|e| io_error(path, &e))?;
    let fail = |offset: usize, what: &str| -> Error {
        corrupt(format!(
            "snapshot {} is damaged at byte {offset}: {what}; move it away to recover from the log alone if the log still covers it (see `tollgate data check`)",
            path.display()
        ))
    };
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(fail(0, "not a tollgate snapshot"));
    }
    let mut at = MAGIC.len();
    let mut loaded = Loaded::default();
    let mut names = 0;
    loop {
        let Some((payload, next)) = frame(&bytes, at) else {
            return Err(fail(at, "a record is cut short or its checksum does not match"));
        };
        let (kind, rest) = postcard::take_from_bytes::<u8>(payload).map_err(|e| fail(at, &e.to_string()))?;
        let bad = |e: postcard::Error| fail(at, &e.to_string());
        match kind {
            META => {
                let (from, gate_floor, queue_floor): (u64, u64, u64) =
                    postcard::from_bytes(rest).map_err(bad)?;
                loaded.from = from;
                store.gates.raise_floor(gate_floor);
                store.queues.raise_floor(queue_floor);
            }
            GATE => {
                let (name, touched, state): (Name, u64, GateState) =
                    postcard::from_bytes(rest).map_err(bad)?;
                store.gates.restore(&name, state, touched, store.idle_ms);
                names += 1;
            }
            GATE_DOOR => {
                let (name, touched, mut state, door): (Name, u64, GateState, Door) =
                    postcard::from_bytes(rest).map_err(bad)?;
                state.door = door;
                store.gates.restore(&name, state, touched, store.idle_ms);
                names += 1;
            }
            GATE_DRAW => {
                let (name, touched, mut state, door, draw): (Name, u64, GateState, Door, DrawState) =
                    postcard::from_bytes(rest).map_err(bad)?;
                state.door = door;
                state.restore_draw(draw);
                store.gates.restore(&name, state, touched, store.idle_ms);
                names += 1;
            }
            GATE_MORE => {
                let (name, touched, mut state, door, (draw, pick)): (
                    Name,
                    u64,
                    GateState,
                    Door,
                    (Option<DrawState>, u64),
                ) = postcard::from_bytes(rest).map_err(bad)?;
                state.door = door;
                if let Some(draw) = draw {
                    state.restore_draw(draw);
                }
                state.pick = pick;
                store.gates.restore(&name, state, touched, store.idle_ms);
                names += 1;
            }
            QUEUE => {
                let (name, touched, state): (Name, u64, Queue) = postcard::from_bytes(rest).map_err(bad)?;
                store.queues.restore(&name, state, touched, store.idle_ms);
                names += 1;
            }
            QUEUE_FAIR => {
                let (name, touched, mut state, fair): (Name, u64, Queue, Fair) =
                    postcard::from_bytes(rest).map_err(bad)?;
                state.fair = fair;
                store.queues.restore(&name, state, touched, store.idle_ms);
                names += 1;
            }
            LIMITS => {
                let limits: Limits = postcard::from_bytes(rest).map_err(bad)?;
                *store.limits.lock().unwrap_or_else(PoisonError::into_inner) = limits;
            }
            INDEX => {
                let index: Index = postcard::from_bytes(rest).map_err(bad)?;
                *store
                    .schedule_index
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = index;
            }
            END => {
                let count: u64 = postcard::from_bytes(rest).map_err(bad)?;
                if count != names {
                    return Err(fail(
                        at,
                        &format!("it ends after {names} names, not the {count} it says"),
                    ));
                }
                loaded.names = names;
                return Ok(loaded);
            }
            other => return Err(fail(at, &format!("unknown record kind {other}"))),
        }
        at = next;
    }
}

/// The payload of the record at `at` and where the next one starts, if
/// the record is whole and its checksum matches.
pub(super) fn frame(bytes: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let header = bytes.get(at..at + HEADER)?;
    let len = u32::from_le_bytes(header[..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().ok()?);
    if len > MAX_RECORD {
        return None;
    }
    let payload = bytes.get(at + HEADER..at + HEADER + len)?;
    (crc32fast::hash(payload) == crc).then_some((payload, at + HEADER + len))
}

/// The snapshots in `dir`, oldest first.
pub(super) fn list(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| io_error(dir, &e))?.flatten() {
        if let Some(lsn) = e.file_name().to_str().and_then(file_lsn) {
            found.push((lsn, e.path()));
        }
    }
    found.sort();
    Ok(found)
}
