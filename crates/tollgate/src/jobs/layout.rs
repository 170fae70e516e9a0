//! A queue's partition count: checked against the one the store keeps in
//! force (on a handle's first use and every 10 s after), and changed only
//! while the queue is empty (`repartition`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::jobs::types::Layout;
use crate::name::Name;
use crate::store::Store;

/// How often a handle asks the store again, by default, whether its
/// partition count is still the one in force.
pub(super) const RECHECK: Duration = Duration::from_secs(10);

/// A handle's record of the store's agreement to its partition count.
#[derive(Debug)]
pub(super) struct LayoutCheck {
    since: Instant,
    /// Milliseconds after `since` (+1) of the last agreement; 0: never.
    agreed_ms: AtomicU64,
    /// A re-check is under way (the others go on meanwhile).
    rechecking: AtomicBool,
}

pub(super) fn conflict(name: &Name, stored: u32, asked: usize) -> Error {
    Error::new(
        ErrorKind::PartitionConflict,
        format!(
            "queue {name} has {stored} partition(s) in the store, not {asked}: every producer and \
             consumer must use the same number (repartition the queue once it is empty to change it)"
        ),
    )
}

/// The most partitions a queue may have.
pub const MAX_PARTITIONS: usize = 256;

/// Checks a partition count: 1 to [`MAX_PARTITIONS`].
pub(super) fn check_partitions(partitions: usize) -> Result<u32> {
    if partitions == 0 || partitions > MAX_PARTITIONS {
        return Err(Error::invalid(format!(
            "a sharded queue has 1 to {MAX_PARTITIONS} partitions"
        )));
    }
    Ok(partitions as u32)
}

impl LayoutCheck {
    pub(super) fn new() -> LayoutCheck {
        LayoutCheck {
            since: Instant::now(),
            agreed_ms: AtomicU64::new(0),
            rechecking: AtomicBool::new(false),
        }
    }

    /// Forgets the store's last agreement: the next call asks again.
    pub(super) fn forget(&self) {
        self.agreed_ms.store(0, Ordering::Release);
    }

    /// Makes sure the store has this handle's partition count in force:
    /// asked on first use and again every `recheck`. `write`: the call
    /// will change the queue, so the count is stored if there is none (a
    /// read stores nothing). Once the store has agreed, a re-check that
    /// fails for another reason than an unreachable store does not stop
    /// the queue (the call itself will tell), and callers do not wait for a
    /// re-check another one is making.
    pub(super) async fn check(
        &self,
        store: &Store,
        name: &Name,
        asked: usize,
        recheck: Duration,
        write: bool,
    ) -> Result<()> {
        let layout = self;
        let now = layout.since.elapsed().as_millis() as u64 + 1;
        let agreed = layout.agreed_ms.load(Ordering::Acquire);
        if agreed != 0 {
            if now < agreed + recheck.as_millis() as u64 {
                return Ok(());
            }
            if layout.rechecking.swap(true, Ordering::AcqRel) {
                return Ok(());
            }
        }
        let ask = Layout {
            want: asked as u32,
            expect: None,
            store: write,
        };
        let answer = store.job_layout(name, &ask).await;
        if agreed != 0 {
            layout.rechecking.store(false, Ordering::Release);
        }
        match answer {
            Ok((n, stored)) if n as usize == asked => {
                if stored {
                    layout.agreed_ms.store(now, Ordering::Release);
                }
                Ok(())
            }
            Ok((n, _)) => {
                layout.agreed_ms.store(0, Ordering::Release);
                Err(conflict(name, n, asked))
            }
            // Unreachable: the call itself would fail the same way, after
            // another whole timeout (a push during a freeze took two).
            Err(e)
                if agreed != 0 && !matches!(e.kind(), ErrorKind::Misconfigured | ErrorKind::Unavailable) =>
            {
                tracing::debug!(queue = %name, error = %e, "could not re-check the partition count; going on");
                layout.agreed_ms.store(now, Ordering::Release);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}
