//! The rate limiter's operations of a [`Store`]: each one atomic step, one
//! critical section on the embedded store and one script on Redis, sent to
//! the backend the store has (the Redis arms box their futures: see
//! `store::Backend`).

use crate::error::Result;
use crate::name::Name;
use crate::store::{Store, on_backend};

use super::backend::LimitBackend;
use super::types::{Check, Decision};

impl Store {
    /// One rate-limit decision for `check.key` of `limiter`: spends
    /// `check.cost` if it fits.
    pub(crate) async fn limit(&self, limiter: &Name, check: &Check<'_>) -> Result<Decision> {
        on_backend!(self, limits, b => LimitBackend::limit(b, limiter, check))
    }
}
