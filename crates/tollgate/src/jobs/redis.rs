//! Job queues on Redis: each operation's arguments and the decoding of
//! its reply; one script (`jobs.lua`), the operation in ARGV[1].

use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};
use crate::name::Name;
use crate::store::redis::{Listening, RedisStore, unexpected};

use super::backend::JobBackend;
use super::events::{EventId, StreamRead};
use super::fair::MAX_OVERRIDES;
use super::types::{
    CancelOutcome, Claim, ClaimOutcome, Extend, LATENESS_BOUNDS_MS, LISTING_BYTES, Layout, ListFrom, Nack,
    NackOutcome, PushOutcome, PushReq, RawDead, RawDone, RawGroup, RawGroupLimits, RawInfo, RawJob,
    RawLimits, RawRate, RawState, RawStats, RescheduleOutcome, When,
};

impl RedisStore {
    fn jobs_base(&self, q: &Name) -> String {
        format!("{}:jobs:{{{}}}", self.prefix, q.as_str())
    }

    async fn run_jobs<T: redis::FromRedisValue>(
        &self,
        q: &Name,
        op: &str,
        args: impl redis::ToRedisArgs,
    ) -> Result<T> {
        self.on_queue_keys(&self.scripts.jobs, q, op, args).await
    }

    /// Runs `script` (one built on queue.lua) on queue `q`'s keys, the
    /// operation `op` first in its arguments.
    pub(crate) async fn on_queue_keys<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        q: &Name,
        op: &str,
        args: impl redis::ToRedisArgs,
    ) -> Result<T> {
        let base = self.jobs_base(q);
        let keys: Vec<String> = [":m", ":d", ":r", ":w", ":f", ":l", ":n", ":x", ":t", ":c"]
            .iter()
            .map(|s| format!("{base}{s}"))
            .collect();
        let all = (
            op,
            format!("{base}:n"),
            format!("!{}", super::types::wake_key(q)),
            args,
        );
        self.invoke(script, &keys, all, &base).await
    }

    pub(crate) async fn listen_jobs(&self, q: &Name) -> Result<Listening> {
        self.subscribe(&format!("{}:n", self.jobs_base(q)), tokio::time::Instant::now())
            .await
    }

    /// Pauses queue `q` (`pause`) or resumes it; whether that changed it.
    /// Reads queue `q`'s event stream: the entries after `after` (at most
    /// `count`), or with no `after` only its last id; marks the queue
    /// watched for `watch_ms` from now (0: leaves the mark alone).
    pub(crate) async fn job_events(
        &self,
        q: &Name,
        watch_ms: u64,
        after: Option<EventId>,
        count: usize,
    ) -> Result<StreamRead> {
        let after = after.map_or_else(String::new, |a| a.to_string());
        let r: redis::Value = self.run_jobs(q, "events", (watch_ms, after, count)).await?;
        StreamRead::decode(r).ok_or_else(|| Error::new(ErrorKind::Store, "unexpected reply to events"))
    }
}

/// A claim's reply: `{1, n, then id, payload, attempt, fence, deadline,
/// group per job}` or `{0, next due or -1, now}`.
fn claim_reply(items: &[redis::Value]) -> Result<ClaimOutcome> {
    let bad = || Error::new(ErrorKind::Store, "unexpected reply to claim");
    let int = value::<i64>;
    match items {
        [flag, next, now] if int(flag) == Some(0) => Ok(ClaimOutcome::Empty {
            next_due_ms: int(next).and_then(|n| u64::try_from(n).ok()),
            now_ms: int(now).ok_or_else(bad)? as u64,
        }),
        [flag, n, rows @ ..]
            if int(flag) == Some(1) && int(n).is_some_and(|n| n as usize * 6 == rows.len()) =>
        {
            let jobs = rows
                .chunks(6)
                .map(|row| {
                    let [id, payload, attempt, fence, deadline, group] = row else {
                        return Err(bad());
                    };
                    let fence: String = redis::from_redis_value_ref(fence).map_err(|_| bad())?;
                    let group: String = redis::from_redis_value_ref(group).map_err(|_| bad())?;
                    Ok(RawJob {
                        id: redis::from_redis_value_ref(id).map_err(|_| bad())?,
                        payload: redis::from_redis_value_ref(payload).map_err(|_| bad())?,
                        attempt: int(attempt).ok_or_else(bad)? as u32,
                        fence: fence.parse().map_err(|_| bad())?,
                        deadline_ms: int(deadline).ok_or_else(bad)? as u64,
                        group: Some(group).filter(|g| !g.is_empty()),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(ClaimOutcome::Jobs(jobs))
        }
        _ => Err(bad()),
    }
}

/// A listing's reply (the dead letters, the kept completed jobs): rows of
/// `width` values, each decoded by `row`; one that does not decode makes
/// the whole reply unexpected.
fn listing<T>(
    op: &str,
    v: &[redis::Value],
    width: usize,
    row: impl Fn(&[redis::Value]) -> Option<T>,
) -> Result<Vec<T>> {
    v.chunks(width)
        .map(|r| row(r).ok_or_else(|| Error::new(ErrorKind::Store, format!("unexpected reply to {op}"))))
        .collect()
}

/// One value of a reply, as `T`.
pub(crate) fn value<T: redis::FromRedisValue>(v: &redis::Value) -> Option<T> {
    redis::from_redis_value_ref(v).ok()
}

/// A sorted-set score in a reply (a decimal string), as whole ms.
fn score_ms(v: &redis::Value) -> Option<u64> {
    value::<String>(v)?.parse::<f64>().ok().map(|ms| ms as u64)
}

/// An integer script argument.
pub(crate) fn int_arg(n: i64) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// When a job is due, as jobs.lua takes it: a delay in ms (and 0), or -1
/// and a store time in ms.
fn when_args(when: When) -> (i64, i64) {
    match when {
        When::Delay(d) => (d as i64, 0),
        When::At(at) => (-1, at as i64),
    }
}

/// The values of one job's row in a `get` or `list` reply.
const INFO_WIDTH: usize = 11;

/// A state as jobs.lua numbers it (its LOOKUP_SETS).
fn state_code(state: RawState) -> i64 {
    match state {
        RawState::Ready => 1,
        RawState::Delayed => 2,
        RawState::Running => 3,
        RawState::Dead => 4,
        RawState::Completed => 5,
    }
}

/// One row of a `get` or `list` reply (`looked_up` in jobs.lua).
fn info_row(row: &[redis::Value]) -> Option<RawInfo> {
    let [
        id,
        state,
        score,
        prio,
        max,
        attempts,
        fence,
        error,
        size,
        preview,
        group,
    ] = row
    else {
        return None;
    };
    let state = match value::<i64>(state)? {
        1 => RawState::Ready,
        2 => RawState::Delayed,
        3 => RawState::Running,
        4 => RawState::Dead,
        5 => RawState::Completed,
        _ => return None,
    };
    let fence = value::<String>(fence)?;
    let error = value::<String>(error)?;
    Some(RawInfo {
        id: value(id)?,
        state,
        score: value::<String>(score)?.parse().ok()?,
        priority: u8::try_from(value::<i64>(prio)?).ok()?,
        max_attempts: u32::try_from(value::<i64>(max)?).ok()?,
        attempts: u32::try_from(value::<i64>(attempts)?).ok()?,
        fence: if fence.is_empty() {
            None
        } else {
            Some(fence.parse().ok()?)
        },
        last_error: Some(error).filter(|e| !e.is_empty()),
        payload_size: u64::try_from(value::<i64>(size)?).ok()?,
        preview: value(preview)?,
        group: Some(value::<String>(group)?).filter(|g| !g.is_empty()),
    })
}

/// A limit as jobs.lua takes it ('' for none).
fn opt_arg<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(String::new, |v| v.to_string())
}

/// A rate as jobs.lua takes it: count and period ms ('' for none).
fn rate_args(rate: Option<RawRate>) -> [String; 2] {
    [opt_arg(rate.map(|r| r.count)), opt_arg(rate.map(|r| r.period_ms))]
}

/// A limit in a reply ('' for none).
fn opt_value<T: std::str::FromStr>(v: &redis::Value) -> Option<Option<T>> {
    let s = value::<String>(v)?;
    if s.is_empty() {
        return Some(None);
    }
    s.parse().ok().map(Some)
}

/// A rate in a reply: count and period ('' for none).
fn rate_value(count: &redis::Value, period: &redis::Value) -> Option<Option<RawRate>> {
    Some(match (opt_value::<u32>(count)?, opt_value::<u64>(period)?) {
        (Some(count), Some(period_ms)) => Some(RawRate { count, period_ms }),
        _ => None,
    })
}

impl JobBackend for Arc<RedisStore> {
    async fn job_layout(&self, q: &Name, layout: &Layout) -> Result<(u32, bool)> {
        let expect = layout.expect.map_or_else(String::new, |e| e.to_string());
        let store = if layout.store { "1" } else { "0" };
        let r: Vec<i64> = self.run_jobs(q, "layout", (layout.want, expect, store)).await?;
        match r.as_slice() {
            [n, stored] if *n > 0 => Ok((*n as u32, *stored == 1)),
            _ => Err(unexpected("layout", &r)),
        }
    }

    /// Pushes a batch of jobs in one script call.
    async fn job_push(&self, q: &Name, reqs: &[PushReq<'_>]) -> Result<Vec<PushOutcome>> {
        let mut args: Vec<Vec<u8>> = Vec::with_capacity(1 + 11 * reqs.len());
        args.push(int_arg(reqs.len() as i64));
        for req in reqs {
            let (delay, at) = when_args(req.when);
            args.extend([
                req.id.as_bytes().to_vec(),
                req.payload.to_vec(),
                int_arg(delay),
                int_arg(at),
                int_arg(i64::from(req.priority)),
                int_arg(i64::from(req.max_attempts)),
                req.backoff.kind.to_string().into_bytes(),
                int_arg(req.backoff.base_ms as i64),
                int_arg(req.backoff.max_ms as i64),
                if req.replace {
                    b"replace".to_vec()
                } else {
                    b"keep".to_vec()
                },
                req.group.as_bytes().to_vec(),
            ]);
        }
        let r: Vec<i64> = self.run_jobs(q, "push", args).await?;
        if r.len() != 2 * reqs.len() {
            return Err(unexpected("push", &r));
        }
        r.chunks(2)
            .map(|pair| match pair {
                [1, at] => Ok(PushOutcome::New {
                    run_at_ms: *at as u64,
                }),
                [2, _] => Ok(PushOutcome::Kept),
                [3, at] => Ok(PushOutcome::Replaced {
                    run_at_ms: *at as u64,
                }),
                [4, _] => Ok(PushOutcome::Busy),
                other => Err(unexpected("push", other)),
            })
            .collect()
    }

    async fn job_retire(&self, q: &Name, close: bool) -> Result<(bool, [u64; 4])> {
        let r: Vec<i64> = self.run_jobs(q, "retire", if close { "1" } else { "0" }).await?;
        match r.as_slice() {
            [done, counts @ ..] if counts.len() == 4 => {
                Ok((*done == 1, [0, 1, 2, 3].map(|i| counts[i].max(0) as u64)))
            }
            _ => Err(unexpected("retire", &r)),
        }
    }

    /// Acks the deliveries `claim.acks` (whether each was that delivery's)
    /// and claims up to `claim.max` jobs (none with 0), in one script call.
    async fn job_claim(&self, q: &Name, claim: &Claim<'_>) -> Result<(Vec<bool>, ClaimOutcome)> {
        let (n, ms) = claim.keep.map_or((0, 0), |k| (k.count, k.ms));
        let mut args: Vec<Vec<u8>> = vec![
            int_arg(claim.lease_ms as i64),
            int_arg(claim.max as i64),
            int_arg(n as i64),
            int_arg(ms as i64),
        ];
        for (id, fence) in claim.acks {
            args.push(id.as_bytes().to_vec());
            args.push(int_arg(*fence as i64));
        }
        let v: redis::Value = self.run_jobs(q, "claim", args).await?;
        let bad = || Error::new(ErrorKind::Store, "unexpected reply to claim");
        let redis::Value::Array(items) = v else {
            return Err(bad());
        };
        let int = value::<i64>;
        let k = items.first().and_then(int).ok_or_else(bad)? as usize;
        let flags = items.get(1..1 + k).ok_or_else(bad)?;
        let acked = flags.iter().map(|f| int(f) == Some(1)).collect();
        Ok((acked, claim_reply(&items[1 + k..])?))
    }

    async fn job_done(&self, q: &Name, limit: usize) -> Result<Vec<RawDone>> {
        let v: Vec<redis::Value> = self.run_jobs(q, "done", (limit.max(1), LISTING_BYTES)).await?;
        listing("done", &v, 3, |row| {
            let [id, at, payload] = row else { return None };
            Some(RawDone {
                id: value(id)?,
                acked_ms: score_ms(at)?,
                payload: value(payload)?,
            })
        })
    }

    async fn job_nack(&self, q: &Name, nack: &Nack<'_>) -> Result<NackOutcome> {
        let delay = nack.delay_ms.map_or(-1, |d| d as i64);
        let jitter = format!("{:.6}", nack.jitter);
        let r: Vec<i64> = self
            .run_jobs(
                q,
                "nack",
                (
                    nack.id,
                    nack.fence.to_string(),
                    delay,
                    jitter,
                    nack.error.unwrap_or(""),
                ),
            )
            .await?;
        match r.as_slice() {
            [1, at] => Ok(NackOutcome::Retry {
                run_at_ms: *at as u64,
            }),
            [2] => Ok(NackOutcome::Dead),
            [0] => Ok(NackOutcome::NotHeld),
            other => Err(unexpected("nack", other)),
        }
    }

    async fn job_extend(&self, q: &Name, extend: &Extend<'_>) -> Result<Option<u64>> {
        let args = (extend.id, extend.fence.to_string(), extend.lease_ms);
        let r: Vec<i64> = self.run_jobs(q, "extend", args).await?;
        match r.as_slice() {
            [1, deadline] => Ok(Some(*deadline as u64)),
            [0] => Ok(None),
            other => Err(unexpected("extend", other)),
        }
    }

    async fn job_cancel(&self, q: &Name, id: &str) -> Result<CancelOutcome> {
        let r: Vec<i64> = self.run_jobs(q, "cancel", id).await?;
        match r.as_slice() {
            [1] => Ok(CancelOutcome::Cancelled),
            [2] => Ok(CancelOutcome::Running),
            [3] => Ok(CancelOutcome::Purged),
            [0] => Ok(CancelOutcome::Unknown),
            other => Err(unexpected("cancel", other)),
        }
    }

    async fn job_reschedule(&self, q: &Name, id: &str, when: When) -> Result<RescheduleOutcome> {
        let (delay, at) = when_args(when);
        let r: Vec<i64> = self.run_jobs(q, "reschedule", (id, delay, at)).await?;
        match r.as_slice() {
            [1, at] => Ok(RescheduleOutcome::Moved {
                run_at_ms: *at as u64,
            }),
            [2] => Ok(RescheduleOutcome::Running),
            [0] => Ok(RescheduleOutcome::Unknown),
            other => Err(unexpected("reschedule", other)),
        }
    }

    async fn job_dead(&self, q: &Name, limit: usize) -> Result<Vec<RawDead>> {
        let v: Vec<redis::Value> = self.run_jobs(q, "dead", (limit.max(1), LISTING_BYTES)).await?;
        listing("dead", &v, 5, |row| {
            let [id, died, attempts, error, payload] = row else {
                return None;
            };
            Some(RawDead {
                id: value(id)?,
                died_ms: score_ms(died)?,
                attempts: value::<i64>(attempts)? as u32,
                payload: value(payload)?,
                last_error: Some(value::<String>(error)?).filter(|e| !e.is_empty()),
            })
        })
    }

    /// Job `id` as it stands (`get` in jobs.lua: read only), with its
    /// preview, or its whole payload if `whole`.
    async fn job_get(&self, q: &Name, id: &str, whole: bool) -> Result<Option<RawInfo>> {
        let v: Vec<redis::Value> = self
            .run_jobs(q, "get", (id, if whole { "1" } else { "0" }))
            .await?;
        if v.is_empty() {
            return Ok(None);
        }
        listing("get", &v, INFO_WIDTH, info_row).map(|mut rows| rows.pop())
    }

    /// Up to `limit` jobs in `state`, in its sorted set's order, from
    /// `from` (`list` in jobs.lua: read only).
    async fn job_list(
        &self,
        q: &Name,
        state: RawState,
        from: Option<&ListFrom<'_>>,
        limit: usize,
    ) -> Result<Vec<RawInfo>> {
        let (score, id) = from.map_or((String::new(), ""), |f| (f.score.to_string(), f.id));
        let args = (state_code(state), limit.max(1), score, id);
        let v: Vec<redis::Value> = self.run_jobs(q, "list", args).await?;
        listing("list", &v, INFO_WIDTH, info_row)
    }

    async fn job_replay(&self, q: &Name, id: Option<&str>) -> Result<u64> {
        let r: Vec<i64> = self.run_jobs(q, "replay", id.unwrap_or("")).await?;
        Ok(r.first().copied().unwrap_or(0).max(0) as u64)
    }

    async fn job_purge(&self, q: &Name, id: Option<&str>) -> Result<u64> {
        let r: Vec<i64> = self.run_jobs(q, "purge", id.unwrap_or("")).await?;
        Ok(r.first().copied().unwrap_or(0).max(0) as u64)
    }

    async fn job_exists(&self, q: &Name) -> Result<bool> {
        let r: i64 = self.run_jobs(q, "exists", Vec::<String>::new()).await?;
        Ok(r == 1)
    }

    async fn job_pause(&self, q: &Name, pause: bool) -> Result<bool> {
        let r: i64 = self.run_jobs(q, "pause", if pause { "1" } else { "0" }).await?;
        Ok(r == 1)
    }

    async fn job_stats(&self, q: &Name) -> Result<RawStats> {
        let r: Vec<i64> = self.run_jobs(q, "stats", Vec::<String>::new()).await?;
        let buckets = LATENESS_BOUNDS_MS.len() + 1;
        if r.len() < 16 + buckets {
            return Err(unexpected("stats", &r));
        }
        let u = |i: usize| r[i].max(0) as u64;
        Ok(RawStats {
            ready: u(0),
            delayed: u(1),
            in_flight: u(2),
            dead: u(3),
            pushed: u(4),
            claimed: u(5),
            acked: u(6),
            retried: u(7),
            dead_total: u(8),
            redelivered: u(9),
            completed: u(10),
            paused: r[11] == 1,
            groups: u(12),
            groups_held: u(13),
            limited_claims: u(14),
            lateness_sum_ms: u(15),
            lateness_buckets: r[16..16 + buckets].iter().map(|v| (*v).max(0) as u64).collect(),
            lateness_ms: r[16 + buckets..].iter().map(|v| (*v).max(0) as u64).collect(),
        })
    }

    /// Sets queue `q`'s limits (see `fair.rs`).
    async fn job_set_limits(&self, q: &Name, limits: &RawLimits) -> Result<()> {
        let [rn, rp] = rate_args(limits.rate);
        let [gn, gp] = rate_args(limits.group_rate);
        let args = (
            opt_arg(limits.concurrency),
            rn,
            rp,
            opt_arg(limits.group_concurrency),
            gn,
            gp,
        );
        let _: i64 = self.run_jobs(q, "limits", args).await?;
        Ok(())
    }

    /// Sets or drops group `group`'s own limits.
    async fn job_set_group_limits(
        &self,
        q: &Name,
        group: &str,
        limits: Option<&RawGroupLimits>,
    ) -> Result<()> {
        let l = limits.copied().unwrap_or_default();
        let [n, p] = rate_args(l.rate);
        let args = (group, opt_arg(l.concurrency), n, p, MAX_OVERRIDES);
        let r: Vec<i64> = self.run_jobs(q, "group_limits", args).await?;
        match r.as_slice() {
            [1] => Ok(()),
            [0, most] => Err(Error::too_many_overrides(q.as_str(), *most as usize)),
            other => Err(unexpected("group_limits", other)),
        }
    }

    /// Queue `q`'s limits, and group `group`'s own (read only).
    async fn job_limits(&self, q: &Name, group: Option<&str>) -> Result<(RawLimits, Option<RawGroupLimits>)> {
        let v: Vec<redis::Value> = self.run_jobs(q, "limits_get", group.unwrap_or("")).await?;
        let decode = || -> Option<(RawLimits, Option<RawGroupLimits>)> {
            let [cc, rn, rp, gc, gn, gp, oc, on, op] = v.as_slice() else {
                return None;
            };
            let limits = RawLimits {
                concurrency: opt_value(cc)?,
                rate: rate_value(rn, rp)?,
                group_concurrency: opt_value(gc)?,
                group_rate: rate_value(gn, gp)?,
            };
            let own = RawGroupLimits {
                concurrency: opt_value(oc)?,
                rate: rate_value(on, op)?,
            };
            Some((limits, Some(own).filter(|o| *o != RawGroupLimits::default())))
        };
        decode().ok_or_else(|| Error::new(ErrorKind::Store, "unexpected reply to limits_get"))
    }

    /// A page of queue `q`'s groups (read only; see `Fair::list`).
    async fn job_groups(&self, q: &Name, from: Option<(u64, &str)>, limit: usize) -> Result<Vec<RawGroup>> {
        let (count, group) = from.map_or((String::new(), ""), |(n, g)| (n.to_string(), g));
        let v: Vec<redis::Value> = self.run_jobs(q, "groups", (limit.max(1), count, group)).await?;
        listing("groups", &v, 7, |row| {
            let [group, ready, running, held, c, n, p] = row else {
                return None;
            };
            Some(RawGroup {
                group: value(group)?,
                ready: value::<i64>(ready)?.max(0) as u64,
                running: value::<i64>(running)?.max(0) as u64,
                held_until: opt_value::<f64>(held)?.map(|t| t as u64),
                concurrency: opt_value(c)?,
                rate: rate_value(n, p)?,
            })
        })
    }
}
