//! The embedded store put together: the shared core (`store/memory/`) and
//! every primitive's state (`state.rs`), replaying a log record to its
//! primitive (`replay.rs`), snapshots of every state (`snapshot.rs`), and
//! recovery, the snapshot thread and the data directory's checks
//! (`recovery.rs`). The one place, with `store/mod.rs`'s `Backend`, that
//! names every primitive.

pub(crate) mod recovery;
mod replay;
mod snapshot;
pub(crate) mod state;
