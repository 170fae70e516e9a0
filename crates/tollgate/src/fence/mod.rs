//! Fencing that reaches the resource: what a service or a store does with
//! the fencing token a lease carries, so that a holder who lost its lease
//! without knowing it (frozen, partitioned, slow) is refused when it
//! writes late. docs/FENCING.md has the recipes and what each guarantees.
//!
//! - [`FenceGuard`]: the highest fence seen per resource key, in this
//!   process, with a turn per key so that a check and the work it guards
//!   are one step for every fenced request of this process.
//! - [`FenceLayer`]: a tower layer that reads `Tollgate-Fence` and refuses a
//!   stale request with 409 before it reaches the service; with the `axum`
//!   feature, [`FenceHeader`] is the same check as an extractor.
//! - [`fenced_set`]: a guarded write on Redis, `FENCED_SET_LUA`, a script
//!   that sets a key only if the fence given is at least the highest seen
//!   for it.

mod guard;
mod layer;
mod redis;

pub use self::guard::{DEFAULT_MAX_KEYS, FenceGuard, FenceTurn, StaleFence};
pub use self::layer::{FENCE_HEADER, FenceKey, FenceKeyFn, FenceLayer, FenceService, HIGHEST_HEADER};
#[cfg(feature = "axum")]
pub use self::layer::{FenceHeader, FenceRejection};
pub use self::redis::{FENCED_SET_LUA, FencedSet, fenced_set};
