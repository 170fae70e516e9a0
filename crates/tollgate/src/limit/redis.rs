//! Rate limits on Redis: one script (`limit.lua`), one key per limited
//! key.

use std::sync::Arc;

use super::backend::LimitBackend;
use super::types::{Algorithm, Check, Decision, decision};
use crate::error::Result;
use crate::name::Name;
use crate::store::redis::{RedisStore, unexpected};

impl LimitBackend for Arc<RedisStore> {
    /// One rate-limit decision. GCRA keys are strings and window keys
    /// hashes, so they live under different names.
    async fn limit(&self, limiter: &Name, check: &Check<'_>) -> Result<Decision> {
        let Check { key, limit, cost } = *check;
        let (space, algo, a, b) = match limit.algorithm() {
            Algorithm::Gcra => ("g", "g", limit.interval_ns(), limit.burst()),
            Algorithm::FixedWindow => ("w", "f", limit.rate().count(), limit.period_us()),
            Algorithm::SlidingWindow => ("w", "s", limit.rate().count(), limit.period_us()),
        };
        let tagged = format!("{}:limit:{{{}}}:{space}:{key}", self.prefix, limiter.as_str());
        let r: Vec<i64> = self
            .invoke(
                &self.scripts.limit,
                std::slice::from_ref(&tagged),
                (algo, cost, a, b),
                &tagged,
            )
            .await?;
        match r.as_slice() {
            [allowed, remaining, retry, reset] => Ok(decision(
                limit,
                *allowed == 1,
                (*remaining).max(0) as u64,
                (*retry).max(0) as u64,
                (*reset).max(0) as u64,
            )),
            other => Err(unexpected("limit", other)),
        }
    }
}
