//! A queue's groups and limits, as its callers see them: the limits
//! applied at claim ([`QueueLimits`], a group's own [`GroupLimits`]) and
//! the listing of its groups ([`GroupInfo`]). The steps are `fair.rs`'s
//! (memory) and queue.lua's fair steps (Redis); docs/JOBS.md, "Fair
//! queues", is the user's guide.
//!
//! On a partitioned queue a group's jobs all go to one partition (the
//! group's: see [`JobQueue::partition_of_group`]), so its limits hold
//! there, exactly; the queue's own concurrency and rate are split evenly
//! among the partitions (each gets its share, the shares add up to the
//! limit), so together they never exceed it.

use std::time::{Duration, SystemTime};

use futures_util::future::join_all;

use crate::error::{Error, Result};
use crate::limit::Rate;

use super::fair::HELD_FOR_SLOT;
use super::job::{PushOptions, check_group, to_time};
use super::queue::JobQueue;
use super::types::{RawGroup, RawGroupLimits, RawLimits, RawRate};

/// The most a concurrency limit may be.
pub const MAX_CONCURRENCY: u32 = 1_000_000;

/// The most groups one listing returns.
pub const MAX_GROUP_LIST: usize = 1000;

/// A queue's limits, applied when jobs are claimed: a job that a limit
/// holds back stays ready, and the next group's job goes instead.
/// `None`: no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueLimits {
    /// At most this many of the queue's jobs running at once, across
    /// every worker and server (1 to [`MAX_CONCURRENCY`]).
    pub concurrency: Option<u32>,
    /// At most this many jobs handed out in any window of one period, for
    /// the whole queue: a job goes while fewer went in the period up to
    /// now (so the whole count may go at once). A claim that finds
    /// nothing spends nothing. At most 100,000 per period.
    pub rate: Option<Rate>,
    /// The same per group, for every group without its own
    /// ([`JobQueue::set_group_limits`]); the default group too.
    pub group_concurrency: Option<u32>,
    pub group_rate: Option<Rate>,
}

/// One group's own limits, in place of the queue's group limits (`None`:
/// the queue's `group_concurrency` or `group_rate`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupLimits {
    pub concurrency: Option<u32>,
    pub rate: Option<Rate>,
}

/// Why a group's ready jobs wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupHold {
    /// As many of its jobs run as its concurrency allows: until one ends.
    Concurrency,
    /// Its rate lets the next job go at this time.
    Rate(SystemTime),
}

/// One group of a queue, as [`JobQueue::groups`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInfo {
    /// `None`: the default group (jobs pushed without one).
    pub group: Option<String>,
    pub ready: u64,
    pub running: u64,
    /// Held back by a limit, and why; `None` while it takes its turns.
    pub held: Option<GroupHold>,
    /// The limits in force for it (its own, else the queue's).
    pub concurrency: Option<u32>,
    pub rate: Option<Rate>,
}

/// A page of a queue's groups, most ready jobs first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPage {
    pub groups: Vec<GroupInfo>,
    /// Where the next page starts ([`JobQueue::groups`]'s `after`);
    /// `None` after the last.
    pub next: Option<String>,
}

fn check_concurrency(what: &str, n: Option<u32>) -> Result<()> {
    match n {
        Some(n) if n == 0 || n > MAX_CONCURRENCY => Err(Error::invalid(format!(
            "{what} must be 1 to {MAX_CONCURRENCY}, got {n} (pause the queue to run none)"
        ))),
        _ => Ok(()),
    }
}

/// A queue's or a group's rate keeps a log of the jobs it let go within
/// its period: at most [`MAX_RATE_COUNT`](super::fair::MAX_RATE_COUNT).
fn check_rate(what: &str, rate: Option<Rate>) -> Result<()> {
    let most = u64::from(super::fair::MAX_RATE_COUNT);
    match rate {
        Some(r) if r.count() > most => Err(Error::invalid(format!(
            "{what} lets at most {most} jobs go per period, got {r}: use a shorter period"
        ))),
        _ => Ok(()),
    }
}

fn raw_rate(rate: Option<Rate>) -> Option<RawRate> {
    rate.map(|r| RawRate {
        count: u32::try_from(r.count()).unwrap_or(u32::MAX),
        period_ms: r.period().as_millis() as u64,
    })
}

fn rate_of(raw: Option<RawRate>) -> Option<Rate> {
    raw.and_then(|r| Rate::new(u64::from(r.count), Duration::from_millis(r.period_ms)).ok())
}

/// Part `i` of `n` shares of `total` (the first `total % n` get one
/// more): the shares add up to `total`.
fn share(total: u64, n: usize, i: usize) -> u64 {
    let n = n as u64;
    total / n + u64::from((i as u64) < total % n)
}

/// A listing cursor: the group's ready count and name.
fn cursor_of(g: &RawGroup) -> String {
    format!("{}:{}", g.ready, g.group)
}

fn parse_cursor(after: &str) -> Result<(u64, &str)> {
    let bad = || Error::invalid(format!("{after:?} is not a cursor of a group listing"));
    let (n, g) = after.split_once(':').ok_or_else(bad)?;
    Ok((n.parse().map_err(|_| bad())?, g))
}

impl JobQueue {
    /// The partition that holds group `group`'s jobs (0 on a queue of one
    /// partition): CRC-16 of the group, modulo the number of partitions.
    pub fn partition_of_group(&self, group: &str) -> usize {
        self.partition_of(group)
    }

    /// The id to give a job of group `group` whose own key is `key`, on a
    /// partitioned queue (where a group's jobs must have ids of its
    /// partition): `key` itself if it is of that partition, else `key~N`
    /// for the smallest N that is. The same key and group always give the
    /// same id, so dedupe by it works. On a queue of one partition, `key`.
    pub fn group_job_id(&self, group: &str, key: &str) -> Result<String> {
        check_group(group)?;
        let want = self.partition_of_group(group);
        if self.partition_of(key) == want {
            return Ok(key.to_owned());
        }
        (0..)
            .map(|n| format!("{key}~{n}"))
            .find(|id| self.partition_of(id) == want)
            .ok_or_else(|| Error::invalid("no id found"))
    }

    /// The id a push gives the job `options` describe (storing it there):
    /// the one given, or a fresh one; on a partitioned queue, one of its
    /// group's partition if it has a group.
    pub(super) fn routed_id(&self, options: &mut PushOptions) -> Result<String> {
        let id = match &options.group {
            Some(group) if self.parts.len() > 1 => {
                check_group(group)?;
                self.id_in_group(options.id.as_deref(), group)?
            }
            _ => options.id.clone().unwrap_or_else(crate::name::new_id),
        };
        options.id = Some(id.clone());
        Ok(id)
    }

    /// Gives a job of a group on a partitioned queue an id in the group's
    /// partition (a fresh one if it has none); refuses one outside it.
    fn id_in_group(&self, id: Option<&str>, group: &str) -> Result<String> {
        let want = self.partition_of_group(group);
        match id {
            None => Ok(std::iter::repeat_with(crate::name::new_id)
                .find(|id| self.partition_of(id) == want)
                .unwrap_or_default()),
            Some(id) if self.partition_of(id) == want => Ok(id.to_owned()),
            Some(id) => Err(Error::invalid(format!(
                "on a partitioned queue a job of group {group} goes to the group's partition ({want}), \
                 and id {id} is of partition {}: leave the id out, or make one with group_job_id",
                self.partition_of(id)
            ))),
        }
    }

    /// Sets the queue's limits (replacing the ones set before); they
    /// apply from the next claim, on every worker and server. A queue
    /// with limits or groups takes jobs from its groups in turn.
    ///
    /// On a partitioned queue the queue's concurrency and rate are split
    /// among the partitions, so each must be at least the partition
    /// count.
    pub async fn set_limits(&self, limits: &QueueLimits) -> Result<()> {
        check_concurrency("concurrency", limits.concurrency)?;
        check_concurrency("group_concurrency", limits.group_concurrency)?;
        check_rate("rate", limits.rate)?;
        check_rate("group_rate", limits.group_rate)?;
        let k = self.parts.len();
        for (what, n) in [
            ("concurrency", limits.concurrency.map(u64::from)),
            ("rate's count", limits.rate.map(|r| r.count())),
        ] {
            if n.is_some_and(|n| (n as usize) < k) {
                return Err(Error::invalid(format!(
                    "the queue's {what} is split among its {k} partitions: it must be at least {k}"
                )));
            }
        }
        self.checked(true).await?;
        let raw = RawLimits {
            concurrency: limits.concurrency,
            rate: raw_rate(limits.rate),
            group_concurrency: limits.group_concurrency,
            group_rate: raw_rate(limits.group_rate),
        };
        if k > 1 {
            // The base queue keeps them as given (read back by `limits`).
            self.store.job_set_limits(&self.name, &raw).await?;
        }
        let steps = self.parts.iter().enumerate().map(|(i, part)| {
            let mine = RawLimits {
                concurrency: raw.concurrency.map(|c| share(u64::from(c), k, i) as u32),
                rate: raw.rate.map(|r| RawRate {
                    count: share(u64::from(r.count), k, i) as u32,
                    ..r
                }),
                ..raw
            };
            async move { self.store.job_set_limits(part.queue_name(), &mine).await }
        });
        join_all(steps).await.into_iter().collect()
    }

    /// The queue's limits, as set.
    pub async fn limits(&self) -> Result<QueueLimits> {
        self.checked(false).await?;
        // The base queue holds them as set (with one partition, it is the
        // partition).
        let (raw, _) = self.store.job_limits(&self.name, None).await?;
        Ok(QueueLimits {
            concurrency: raw.concurrency,
            rate: rate_of(raw.rate),
            group_concurrency: raw.group_concurrency,
            group_rate: rate_of(raw.group_rate),
        })
    }

    /// Sets group `group`'s own limits, in place of the queue's group
    /// limits (a paying tenant gets 10, the rest the queue's 2); with
    /// `None`, drops them. A queue keeps its own limits for at most
    /// 100,000 groups.
    pub async fn set_group_limits(&self, group: &str, limits: Option<&GroupLimits>) -> Result<()> {
        check_group(group)?;
        if let Some(l) = limits {
            check_concurrency("a group's concurrency", l.concurrency)?;
            check_rate("a group's rate", l.rate)?;
        }
        self.checked(true).await?;
        let raw = limits.map(|l| RawGroupLimits {
            concurrency: l.concurrency,
            rate: raw_rate(l.rate),
        });
        let part = &self.parts[self.partition_of_group(group)];
        self.store
            .job_set_group_limits(part.queue_name(), group, raw.as_ref())
            .await
    }

    /// Group `group`'s own limits, if it has any.
    pub async fn group_limits(&self, group: &str) -> Result<Option<GroupLimits>> {
        check_group(group)?;
        self.checked(false).await?;
        let part = &self.parts[self.partition_of_group(group)];
        let (_, own) = self.store.job_limits(part.queue_name(), Some(group)).await?;
        Ok(own.map(|o| GroupLimits {
            concurrency: o.concurrency,
            rate: rate_of(o.rate),
        }))
    }

    /// A page of the queue's groups with ready or running jobs, most
    /// ready jobs first (ties by name, descending): up to `limit` (1 to
    /// [`MAX_GROUP_LIST`]), after the cursor `after` of the page before.
    /// A group that stays while the listing pages is never skipped (one
    /// whose count changed may show twice).
    pub async fn groups(&self, after: Option<&str>, limit: usize) -> Result<GroupPage> {
        if limit == 0 || limit > MAX_GROUP_LIST {
            return Err(Error::invalid(format!(
                "a group listing takes 1 to {MAX_GROUP_LIST} groups"
            )));
        }
        let from = after.map(parse_cursor).transpose()?;
        self.checked(false).await?;
        // Each group is in one partition and each partition lists in the
        // same order from the same cursor: their pages merged are the
        // queue's.
        let pages = join_all(
            self.parts
                .iter()
                .map(|p| self.store.job_groups(p.queue_name(), from, limit + 1)),
        )
        .await;
        let mut rows = Vec::new();
        for page in pages {
            rows.extend(page?);
        }
        rows.sort_by(|a, b| (b.ready, &b.group).cmp(&(a.ready, &a.group)));
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = if more { rows.last().map(cursor_of) } else { None };
        let groups = rows
            .into_iter()
            .map(|g| GroupInfo {
                group: Some(g.group).filter(|g| !g.is_empty()),
                ready: g.ready,
                running: g.running,
                held: g.held_until.map(|t| {
                    if t >= HELD_FOR_SLOT {
                        GroupHold::Concurrency
                    } else {
                        GroupHold::Rate(to_time(t))
                    }
                }),
                concurrency: g.concurrency,
                rate: rate_of(g.rate),
            })
            .collect();
        Ok(GroupPage { groups, next })
    }
}
