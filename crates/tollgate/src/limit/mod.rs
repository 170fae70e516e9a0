//! Rate limiting: GCRA by default, fixed and sliding windows on request
//! (docs/LIMITS.md).
//!
//! The facade is `limiter.rs` (`RateLimiter`, the store-error policy) and
//! `layer.rs` (the tower layer); both stand on the one operation in
//! `dispatch.rs`. `types.rs` says what a limit is and what a check
//! answers; `memory.rs` is the arithmetic, `limit.lua` (driven by
//! `redis.rs`) the same steps on Redis.

pub(crate) mod backend;
mod dispatch;
mod layer;
mod limiter;
pub(crate) mod memory;
mod redis;
pub(crate) mod types;

pub use self::layer::{
    KeyBy, KeyFn, PeerAddr, RateLimit, RateLimitLayer, RequestInfo, client_ip, ip_key, set_rate_limit_headers,
};
pub use self::limiter::{DEFAULT_TIMEOUT, MAX_KEY_LEN, OnStoreError, RateLimiter};
pub use self::types::{Algorithm, Decision, Limit, MAX_LIMIT, MAX_PERIOD, MAX_REFILL, MIN_PERIOD, Rate};
