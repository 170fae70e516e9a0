//! The contract a backend keeps for rate limits.
//!
//! One method per atomic operation. The embedded store implements it on
//! its view of the limit state (`memory.rs`), Redis on its store
//! (`redis.rs`); a backend implements it to carry the limit.

use crate::error::Result;
use crate::name::Name;

use super::types::{Check, Decision};

pub(crate) trait LimitBackend {
    /// One rate-limit decision for `check.key` of `limiter`: spends
    /// `check.cost` if it fits.
    async fn limit(&self, limiter: &Name, check: &Check<'_>) -> Result<Decision>;
}
