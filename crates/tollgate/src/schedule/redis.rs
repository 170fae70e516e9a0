//! Schedules on Redis: each operation's arguments and the decoding of its
//! reply; `schedule.lua` on the queue's keys, `index.lua` on the index.

use std::sync::Arc;

use redis::Value;

use crate::error::{Error, ErrorKind, Result};
use crate::jobs::redis::{int_arg, value};
use crate::name::Name;
use crate::store::redis::{RedisStore, unexpected};

use super::backend::ScheduleBackend;
use super::types::{
    Due, Fire, FireOutcome, JobSpec, Next, Put, PutOutcome, RawSchedule, Refusal, TriggerOutcome,
};

/// The index of names is spread over this many small hashes, which
/// Redis keeps as compact listpacks while each holds at most 128 names
/// (up to about 30,000 schedules): a third of the memory of one big hash.
const INDEX_BUCKETS: u16 = 256;

fn bad(op: &str) -> Error {
    Error::new(ErrorKind::Store, format!("unexpected reply to schedule {op}"))
}

/// A stored record: "<rev>,<next>,<from>,<paused>\n<timing>\n<definition>\n<payload>".
fn decode(name: String, record: &[u8], history: &str) -> Option<RawSchedule> {
    let mut parts = record.splitn(4, |b| *b == b'\n');
    let head = std::str::from_utf8(parts.next()?).ok()?;
    let timing = String::from_utf8(parts.next()?.to_vec()).ok()?;
    let definition = String::from_utf8(parts.next()?.to_vec()).ok()?;
    let payload = parts.next()?.to_vec();
    let mut head = head.split(',');
    let rev = head.next()?.parse().ok()?;
    let next = Next::decode(head.next()?.parse().ok()?);
    let from_ms = head.next()?.parse().ok()?;
    let paused = head.next()? == "1";
    Some(RawSchedule {
        name,
        rev,
        next,
        from_ms,
        paused,
        timing,
        definition,
        payload,
        history: history
            .split(',')
            .filter(|e| !e.is_empty())
            .map(str::to_owned)
            .collect(),
    })
}

fn job_args(job: &JobSpec) -> [Vec<u8>; 6] {
    [
        int_arg(i64::from(job.priority)),
        int_arg(i64::from(job.max_attempts)),
        job.backoff.kind.to_string().into_bytes(),
        int_arg(job.backoff.base_ms as i64),
        int_arg(job.backoff.max_ms as i64),
        job.group.as_bytes().to_vec(),
    ]
}

impl RedisStore {
    async fn run_schedule<T: redis::FromRedisValue>(
        &self,
        q: &Name,
        op: &str,
        args: impl redis::ToRedisArgs,
    ) -> Result<T> {
        self.on_queue_keys(&self.scripts.schedules, q, op, args).await
    }

    /// Runs index.lua on the bucket of schedule `name` (any bucket when
    /// the operation names none).
    async fn run_index<T: redis::FromRedisValue>(
        &self,
        name: &str,
        args: impl redis::ToRedisArgs,
    ) -> Result<T> {
        let base = format!("{}:schedules:{{index}}", self.prefix);
        let bucket = crc16::State::<crc16::XMODEM>::calculate(name.as_bytes()) % INDEX_BUCKETS;
        let keys = [
            format!("{base}:n:{bucket}"),
            format!("{base}:q"),
            format!("{base}:c"),
        ];
        self.invoke(&self.scripts.schedule_index, &keys, args, &base)
            .await
    }
}

impl ScheduleBackend for Arc<RedisStore> {
    async fn schedule_index_set(&self, name: &str, queue: &Name) -> Result<Option<String>> {
        self.run_index(name, ("set", name, queue.as_str())).await
    }

    async fn schedule_index_get(&self, name: &str) -> Result<Option<String>> {
        self.run_index(name, ("get", name)).await
    }

    async fn schedule_index_drop(&self, name: &str, queue: &Name) -> Result<bool> {
        let n: i64 = self.run_index(name, ("drop", name, queue.as_str())).await?;
        Ok(n == 1)
    }

    async fn schedule_queues(&self) -> Result<Vec<String>> {
        self.run_index("", "queues").await
    }

    async fn schedule_index_prune(&self, queue: &Name) -> Result<bool> {
        let n: i64 = self.run_index("", ("prune", queue.as_str())).await?;
        Ok(n == 1)
    }

    async fn schedule_put(&self, q: &Name, put: &Put<'_>) -> Result<PutOutcome> {
        let args = (
            put.name,
            put.timing,
            put.definition,
            put.payload,
            if put.paused { "1" } else { "0" },
            put.start_ms,
        );
        let r: Vec<i64> = self.run_schedule(q, "put", args).await?;
        match r.as_slice() {
            [1, _] => Ok(PutOutcome::Created),
            [2, _] => Ok(PutOutcome::Changed),
            [3, _] => Ok(PutOutcome::Unchanged),
            [code] => Refusal::from_code(*code)
                .map(PutOutcome::Refused)
                .ok_or_else(|| unexpected("schedule put", &r)),
            _ => Err(unexpected("schedule put", &r)),
        }
    }

    async fn schedule_due(&self, q: &Name, limit: usize) -> Result<Due> {
        let v: Vec<Value> = self.run_schedule(q, "due", limit.max(1)).await?;
        let [now, soonest, rows @ ..] = v.as_slice() else {
            return Err(bad("due"));
        };
        let now_ms = value::<u64>(now).ok_or_else(|| bad("due"))?;
        let soonest = value::<i64>(soonest).ok_or_else(|| bad("due"))?;
        let schedules = rows
            .chunks(2)
            .map(|row| match row {
                [name, record] => decode(value(name)?, &value::<Vec<u8>>(record)?, ""),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("due"))?;
        Ok(Due {
            now_ms,
            soonest: (soonest >= 0).then(|| Next::decode(soonest)),
            none: soonest == -2,
            schedules,
        })
    }

    async fn schedule_fire(&self, q: &Name, fires: &[Fire<'_>]) -> Result<(u64, Vec<FireOutcome>)> {
        let mut args: Vec<Vec<u8>> = vec![int_arg(fires.len() as i64)];
        for fire in fires {
            args.extend([
                fire.name.as_bytes().to_vec(),
                int_arg(fire.rev as i64),
                int_arg(fire.expect.encode()),
                int_arg(fire.next.encode()),
            ]);
            args.extend(job_args(&fire.job));
            args.push(int_arg(fire.ticks.len() as i64));
            for (tick, run_at) in &fire.ticks {
                args.push(int_arg(*tick as i64));
                args.push(int_arg(*run_at as i64));
            }
        }
        let r: Vec<i64> = self.run_schedule(q, "fire", args).await?;
        let [now, rows @ ..] = r.as_slice() else {
            return Err(unexpected("schedule fire", &r));
        };
        if rows.len() != 2 * fires.len() {
            return Err(unexpected("schedule fire", &r));
        }
        let outcomes = rows
            .chunks(2)
            .map(|row| match row {
                [1, pushed] => Ok(FireOutcome::Fired {
                    pushed: *pushed as u32,
                }),
                [0, _] => Ok(FireOutcome::Stale),
                [code, _] => Refusal::from_code(*code)
                    .map(FireOutcome::Refused)
                    .ok_or_else(|| unexpected("schedule fire", &r)),
                _ => Err(unexpected("schedule fire", &r)),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((*now as u64, outcomes))
    }

    async fn schedule_pause(&self, q: &Name, name: &str, pause: bool) -> Result<bool> {
        let r: Vec<i64> = self
            .run_schedule(q, if pause { "pause" } else { "resume" }, name)
            .await?;
        Ok(r.first() == Some(&1))
    }

    async fn schedule_delete(&self, q: &Name, name: &str) -> Result<bool> {
        let n: i64 = self.run_schedule(q, "delete", name).await?;
        Ok(n == 1)
    }

    async fn schedule_get(&self, q: &Name, name: &str) -> Result<Option<RawSchedule>> {
        let v: Vec<Value> = self.run_schedule(q, "get", name).await?;
        match v.as_slice() {
            [] => Ok(None),
            [record, history] => {
                let row = decode(
                    name.to_owned(),
                    &value::<Vec<u8>>(record).ok_or_else(|| bad("get"))?,
                    &value::<String>(history).ok_or_else(|| bad("get"))?,
                );
                row.map(Some).ok_or_else(|| bad("get"))
            }
            _ => Err(bad("get")),
        }
    }

    /// Every schedule of queue `q` (HSCAN pages, all of them).
    async fn schedule_list(&self, q: &Name) -> Result<Vec<RawSchedule>> {
        let mut cursor = "0".to_owned();
        let mut out = Vec::new();
        loop {
            let v: Vec<Value> = self.run_schedule(q, "list", (cursor.as_str(), 200)).await?;
            let [next, rows @ ..] = v.as_slice() else {
                return Err(bad("list"));
            };
            for row in rows.chunks(3) {
                let [name, record, history] = row else {
                    return Err(bad("list"));
                };
                let decoded = (|| {
                    decode(
                        value(name)?,
                        &value::<Vec<u8>>(record)?,
                        &value::<String>(history)?,
                    )
                })();
                out.push(decoded.ok_or_else(|| bad("list"))?);
            }
            cursor = value(next).ok_or_else(|| bad("list"))?;
            if cursor == "0" {
                return Ok(out);
            }
        }
    }

    async fn schedule_trigger(
        &self,
        q: &Name,
        name: &str,
        rev: u64,
        job: &JobSpec,
    ) -> Result<TriggerOutcome> {
        let mut args = vec![name.as_bytes().to_vec(), int_arg(rev as i64)];
        args.extend(job_args(job));
        let v: Vec<Value> = self.run_schedule(q, "trigger", args).await?;
        match v.as_slice() {
            [code, id] if value::<i64>(code) == Some(1) => {
                Ok(TriggerOutcome::Pushed(value(id).ok_or_else(|| bad("trigger"))?))
            }
            [code] => match value::<i64>(code) {
                Some(0) => Ok(TriggerOutcome::Stale),
                Some(c) => Refusal::from_code(c)
                    .map(TriggerOutcome::Refused)
                    .ok_or_else(|| bad("trigger")),
                None => Err(bad("trigger")),
            },
            _ => Err(bad("trigger")),
        }
    }
}
