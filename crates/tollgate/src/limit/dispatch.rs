//! The rate limiter's operations of a [`Store`]: each one atomic step, one
//! critical section on the embedded store and one script on Redis, sent to
//! the backend the store has (the Redis arms box their futures: see
//! `store::Backend`).

use crate::error::Result;
use crate::name::Name;
use crate::store::{Backend, Store};

use super::types::{Check, Decision};

impl Store {
    /// One rate-limit decision for `check.key` of `limiter`: spends
    /// `check.cost` if it fits.
    pub(crate) async fn limit(&self, limiter: &Name, check: &Check<'_>) -> Result<Decision> {
        match &self.backend {
            Backend::Memory(s) => s.write(|| s.limits().limit(limiter, check)).await,
            Backend::Redis(s) => Box::pin(s.limit(limiter, check)).await,
        }
    }
}
