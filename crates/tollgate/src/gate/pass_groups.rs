//! The passes of a gate waiting to go out together as one pass_many.lua
//! call (see `RedisStore::pass` in `redis.rs`), kept per Redis store.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::oneshot;

use crate::error::Result;

use super::types::{Grant, Left};

/// Passes waiting to go out together, per gate (its meta key): see
/// `RedisStore::pass`.
#[derive(Debug, Default)]
pub(crate) struct PassGroups(pub(super) Mutex<HashMap<String, Vec<GroupedPass>>>);

#[derive(Debug)]
pub(crate) struct GroupedPass {
    pub(super) from: String,
    pub(super) to: String,
    pub(super) permits: u32,
    pub(super) ttl_ms: u64,
    pub(super) tx: oneshot::Sender<Result<(Left, Option<Grant>)>>,
}
