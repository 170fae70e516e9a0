//! A room's calls to its store, each bounded by the room's
//! `store_timeout` (a timeout is `Unavailable`), which errors count as the
//! store's, and this server's clock in ms.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tollgate::ErrorKind;

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A store call bounded by the room's timeout; a timeout is `Unavailable`.
pub(super) async fn bounded<T>(
    timeout: Duration,
    f: impl std::future::Future<Output = tollgate::Result<T>>,
) -> tollgate::Result<T> {
    match tokio::time::timeout(timeout, f).await {
        Ok(r) => r,
        Err(_) => Err(tollgate::Error::unavailable(format!(
            "the store did not answer within {timeout:?}"
        ))),
    }
}

/// A ticket's status, [`bounded`]. A ticket an admin took out of the
/// line is gone for a room like any ticket that left it: its visitor
/// arrives anew.
pub(super) async fn ticket_status(
    timeout: Duration,
    f: impl std::future::Future<Output = tollgate::Result<tollgate::TicketStatus>>,
) -> tollgate::Result<tollgate::TicketStatus> {
    match bounded(timeout, f).await {
        Err(e) if e.is_removed() => Ok(tollgate::TicketStatus::Gone),
        other => other,
    }
}

pub(super) fn is_store_error(e: &tollgate::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Unavailable | ErrorKind::Store | ErrorKind::Misconfigured
    )
}
