//! Looking jobs up (`JobQueue::get`, `list`): a job's state and its
//! details, and pages of jobs with a cursor. Read only.

use std::time::SystemTime;

use crate::error::{Error, Result};
use crate::jobs::types::{ListFrom, RawInfo, RawState};

use super::job::{check_job_id, to_time};
use super::partition::Partition;
use super::queue::JobQueue;
/// Where a job is, as [`JobQueue::get`] and [`JobQueue::list`] see it. A
/// cancelled job is gone: it reads as unknown (`None`), like one that never
/// was, or a completed one that was not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobState {
    /// Due, waiting for a consumer.
    Ready,
    /// Waiting for its due time (a first run or a retry).
    Delayed,
    /// Claimed, under a lease.
    Running,
    /// In the dead letters.
    Dead,
    /// Acked and kept ([`JobQueue::keep_completed`]).
    Completed,
}

impl JobState {
    /// Every state, in the order the words are listed.
    pub const ALL: [JobState; 5] = [
        JobState::Ready,
        JobState::Delayed,
        JobState::Running,
        JobState::Dead,
        JobState::Completed,
    ];

    /// The state's word: `ready`, `delayed`, `running`, `dead`, `completed`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Ready => "ready",
            JobState::Delayed => "delayed",
            JobState::Running => "running",
            JobState::Dead => "dead",
            JobState::Completed => "completed",
        }
    }

    fn raw(self) -> RawState {
        match self {
            JobState::Ready => RawState::Ready,
            JobState::Delayed => RawState::Delayed,
            JobState::Running => RawState::Running,
            JobState::Dead => RawState::Dead,
            JobState::Completed => RawState::Completed,
        }
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for JobState {
    type Err = Error;

    fn from_str(s: &str) -> Result<JobState> {
        JobState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "unknown job state {s:?}: use ready, delayed, running, dead or completed"
                ))
            })
    }
}

/// The most payload bytes a [`JobInfo`] carries (its `payload_preview`).
pub const JOB_PREVIEW_BYTES: usize = crate::jobs::types::PREVIEW_BYTES;

/// About the most bytes (ids, errors, payloads) one [`JobQueue::dead`] or
/// [`JobQueue::completed`] listing holds: it ends before the first job
/// whose bytes before it reach this (so at most this plus one job).
pub const JOB_LISTING_BYTES: usize = crate::jobs::types::LISTING_BYTES;

/// The most jobs one [`JobQueue::list`] page holds.
pub const MAX_JOB_LIST: usize = 1000;

/// What the store knows of one job, read in one atomic step. The store
/// does not keep when a job was pushed, so that is not here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    pub id: String,
    pub state: JobState,
    /// Deliveries so far (0 once completed: an ack forgets them).
    pub attempts: u32,
    pub max_attempts: u32,
    pub priority: u8,
    /// Running: the fence of the current delivery.
    pub fence: Option<u64>,
    /// Delayed: when it becomes due. Running: when its lease ends. Dead:
    /// when it died. Completed: when it was acked. Ready: `None`.
    pub at: Option<SystemTime>,
    /// Dead: the error of the nack that made it dead, if one was given.
    pub last_error: Option<String>,
    /// The payload's size in bytes.
    pub payload_size: u64,
    /// The payload's first [`JOB_PREVIEW_BYTES`] bytes.
    pub payload_preview: Vec<u8>,
    /// Its group, unless the default.
    pub group: Option<String>,
}

impl JobInfo {
    fn of(raw: RawInfo) -> JobInfo {
        let state = match raw.state {
            RawState::Ready => JobState::Ready,
            RawState::Delayed => JobState::Delayed,
            RawState::Running => JobState::Running,
            RawState::Dead => JobState::Dead,
            RawState::Completed => JobState::Completed,
        };
        JobInfo {
            id: raw.id,
            state,
            attempts: raw.attempts,
            max_attempts: raw.max_attempts,
            priority: raw.priority,
            fence: raw.fence,
            at: (state != JobState::Ready).then(|| to_time(raw.score)),
            last_error: raw.last_error,
            payload_size: raw.payload_size,
            payload_preview: raw.preview,
            group: raw.group,
        }
    }
}

/// One page of [`JobQueue::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPage {
    pub jobs: Vec<JobInfo>,
    /// Where the next page starts; `None` once this one was not full.
    pub next: Option<String>,
}

/// A listing cursor: `<score>.<id>`, the last job of a page and its score
/// in the state's order.
pub(crate) fn parse_cursor(cursor: &str) -> Result<ListFrom<'_>> {
    let bad = || Error::invalid(format!("bad cursor {cursor:?}: pass the `next` of a listing"));
    let (score, id) = cursor.split_once('.').ok_or_else(bad)?;
    let score = score.parse().map_err(|_| bad())?;
    check_job_id(id).map_err(|_| bad())?;
    Ok(ListFrom { score, id })
}

/// Looking jobs up: read only, nothing is moved (a delayed job past its
/// due time reads as delayed until a claim or stats promotes it).
impl Partition {
    /// Job `id` as it stands, or `None` if unknown (never pushed, acked
    /// without being kept, cancelled or purged). O(1) on both stores.
    pub(crate) async fn get(&self, id: &str) -> Result<Option<JobInfo>> {
        check_job_id(id)?;
        Ok(self.store.job_get(&self.name, id, false).await?.map(JobInfo::of))
    }

    /// Job `id` as [`JobQueue::get`] reads it, and its whole payload, in
    /// the same read; `None` if unknown.
    pub(crate) async fn get_with_payload(&self, id: &str) -> Result<Option<(JobInfo, Vec<u8>)>> {
        check_job_id(id)?;
        let Some(mut raw) = self.store.job_get(&self.name, id, true).await? else {
            return Ok(None);
        };
        let payload = std::mem::take(&mut raw.preview);
        raw.preview = payload[..payload.len().min(JOB_PREVIEW_BYTES)].to_vec();
        Ok(Some((JobInfo::of(raw), payload)))
    }

    /// Up to `limit` (1 to [`MAX_JOB_LIST`]) jobs in `state`, in the state's
    /// order (ready: the claim order; delayed: due time; running: lease
    /// end; dead: death; completed: ack, oldest first), from `cursor` (a
    /// page's `next`; `None`: the start). Each page is one atomic read,
    /// O(log n + limit). Under changes between pages: a job that stays in
    /// the state at the same place for the whole walk is listed exactly
    /// once; one that moves may be missed or listed twice; if the last job
    /// of a page left, the next page starts at the first job with its
    /// score or more, so jobs sharing that score may be listed again.
    pub(crate) async fn list(&self, state: JobState, cursor: Option<&str>, limit: usize) -> Result<JobPage> {
        if limit == 0 || limit > MAX_JOB_LIST {
            return Err(Error::invalid(format!(
                "a listing takes 1 to {MAX_JOB_LIST} jobs"
            )));
        }
        let from = cursor.map(parse_cursor).transpose()?;
        let rows = self
            .store
            .job_list(&self.name, state.raw(), from.as_ref(), limit)
            .await?;
        let next = (rows.len() == limit)
            .then(|| rows.last().map(|r| format!("{}.{}", r.score, r.id)))
            .flatten();
        Ok(JobPage {
            jobs: rows.into_iter().map(JobInfo::of).collect(),
            next,
        })
    }
}

/// Looking jobs up (see [`JobQueue::get`] and [`JobQueue::list`]).
impl JobQueue {
    /// Job `id` as it stands, or `None` if unknown (never pushed, acked
    /// without being kept, cancelled or purged). O(1) on both stores.
    pub async fn get(&self, id: &str) -> Result<Option<JobInfo>> {
        self.checked(false).await?;
        self.part(id).get(id).await
    }

    /// Job `id` as [`JobQueue::get`] reads it, and its whole payload, in
    /// the same read; `None` if unknown.
    pub async fn get_with_payload(&self, id: &str) -> Result<Option<(JobInfo, Vec<u8>)>> {
        self.checked(false).await?;
        self.part(id).get_with_payload(id).await
    }

    /// Up to `limit` (1 to [`MAX_JOB_LIST`]) jobs in `state`, in the state's
    /// order (ready: the claim order; delayed: due time; running: lease
    /// end; dead: death; completed: ack, oldest first), from `cursor` (a
    /// page's `next`; `None`: the start). Each page is one atomic read,
    /// O(log n + limit). Under changes between pages: a job that stays in
    /// the state at the same place for the whole walk is listed exactly
    /// once; one that moves may be missed or listed twice; if the last job
    /// of a page left, the next page starts at the first job with its
    /// score or more, so jobs sharing that score may be listed again.
    ///
    /// On a partitioned queue: partition 0's jobs in their order, then
    /// partition 1's, and so on (one atomic read per partition a page
    /// touches; no order across partitions). The cursor is
    /// `<partition>.<the partition's cursor>`, and gives the same
    /// guarantee as one queue's within each partition.
    pub async fn list(&self, state: JobState, cursor: Option<&str>, limit: usize) -> Result<JobPage> {
        if let Some(only) = self.plain() {
            return only.list(state, cursor, limit).await;
        }
        if limit == 0 || limit > MAX_JOB_LIST {
            return Err(Error::invalid(format!(
                "a listing takes 1 to {MAX_JOB_LIST} jobs"
            )));
        }
        let (mut i, mut inner) = match cursor {
            None => (0, None),
            Some(c) => {
                let bad = || Error::invalid(format!("bad cursor {c:?}: pass the `next` of a listing"));
                let (i, rest) = c.split_once('.').ok_or_else(bad)?;
                let i: usize = i.parse().map_err(|_| bad())?;
                if i >= self.parts.len() {
                    return Err(bad());
                }
                (i, Some(rest).filter(|r| !r.is_empty()))
            }
        };
        self.checked(false).await?;
        let mut jobs = Vec::new();
        while i < self.parts.len() {
            let page = self.parts[i].list(state, inner, limit - jobs.len()).await?;
            jobs.extend(page.jobs);
            if let Some(next) = page.next {
                return Ok(JobPage {
                    jobs,
                    next: Some(format!("{i}.{next}")),
                });
            }
            i += 1;
            inner = None;
        }
        Ok(JobPage { jobs, next: None })
    }
}
