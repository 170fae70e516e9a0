//! Gates on Redis: each operation's arguments and the decoding of its
//! script's reply (scripts in `lua/`, each composed from the fragments
//! its entry file includes: see `scripts.rs`).
//!
//! How a gate lives on Redis:
//!
//! - **Holders on Redis.** A gate of capacity up to 8 keeps its holders inline
//!   in the meta hash (field `h`), so acquire and release are each one script
//!   of three Redis calls (`TIME`, `HMGET`, `HSET`) on one key; a larger gate
//!   keeps them in a sorted set. The layout is picked when a gate has no
//!   holder; raising the capacity past 8 moves the (at most 8) inline holders.
//!   The memory store has one layout; `stores_agree.rs` checks both Redis
//!   layouts and the switch against it.
//! - **The lone lease (Redis).** A free gate of capacity 1 (an epoch
//!   already, no line, no barging waiter, nothing for the general path, m
//!   outliving the lease by `idle`) grants a one-permit, non-barging request
//!   in its own key `H` (`SET NX PX`: `"<id> <gap>"`, expiring with m, where
//!   `gap` is how long `H` outlives the lease) plus an `HSET` of the fence
//!   (and `b`), after an `HMGET` and a `PTTL` of m; the
//!   holder's plain release is
//!   `GET`, `PTTL` and `DEL` of `H` (live while `H`'s `PTTL` exceeds `gap`),
//!   its renewal `GET` and `PTTL` of `H`, `PTTL` of m and a `SET`. None of
//!   them calls `TIME`: the grant takes server time (for the fence's floor,
//!   and for a gate that had a barging waiter, `N` set) as m's expiry
//!   (its field `G`, set with it in the same step everywhere; `PEXPIRETIME`
//!   without one) less its `PTTL`. (`H` may outlive m by the moment
//!   between the grant's `PTTL` and `SET`, a millisecond at most as
//!   measured, `idle` after the lease ended; a call in that moment sees the
//!   ended lease on fresh state and counts it as an expiry.) The end is kept relative to `H`'s own expiry,
//!   not to the reader's `idle`, so callers configured with different
//!   `idle` periods read the same end; and `H` lives as long as m, so an
//!   ended lone lease is seen and counted exactly as long as an inline
//!   holder would be. The release has nothing else to do because the
//!   estimated wait counts grants from the line only (below) and a barging
//!   waiter that came since the grant would have moved the lease into `h`.
//!   These paths run before meta.lua builds its functions (each Lua closure
//!   costs Redis time on every call). Any other call on a gate of capacity 1
//!   first moves the lease
//!   into `h` as an inline holder granted at once, so the lone lease is a
//!   second representation of one state, not a state of its own: every
//!   other path, and the memory store, see an inline holder. A Lock's enter
//!   comes in a short form (id, ttl, heartbeat, queue: every argument costs
//!   Redis time). Non-barging only, since a barging holder's release passes
//!   its lease on, which needs it in `h`. Like every gate key, `H` must not
//!   be evicted: run Redis with `maxmemory-policy noeviction` (README).
//! - **The line's paths (Redis).** A Lock's handle (`GateName`, shared by
//!   its clones) remembers whether its last enter was queued or its last
//!   release handed the gate on (`lined`). While it is set, its enter adds
//!   `'L'` to the short form and its release sends `'L'` in place of the
//!   one-permit hint (the scripts read it as that hint too), and the
//!   scripts try enter_line.lua and leave_line.lua first, before the lone
//!   lease's paths and before meta.lua builds its functions: queueing
//!   behind a live holder that has a line (`TIME`, one `HMGET`, `ZADD`, the
//!   ticket's deadline into `p`, `HSET`), and the only holder handing the
//!   gate to the line's head (`TIME`, one `HMGET`, `ZPOPMIN`, the head's
//!   deadline out of `p`, `PUBLISH`, `HSET`). Each does what enter_fast.lua
//!   and leave_fast.lua would do for that state and falls through, having
//!   done nothing, for any other (no line yet, a stale ticket due, an ended
//!   lease, a first fence, anything for the general path), where the call
//!   goes on exactly as without the hint. What they save is in
//!   docs/BENCHMARKS.md (`scripts/bench-redis-floor`, `handoff`). The flag picks the path
//!   only, so a stale one costs a failed check and nothing else;
//!   `the_lines_paths_agree_with_the_general_ones` drives one contended
//!   gate through the same steps with and without it and compares every
//!   answer, fence and field, and a review replayed ~40 edge states and
//!   ~4,500 random steps on copies of one state with both forms. A request
//!   that may queue also reads the line's fields (`s`, `U`, `V`) with the
//!   head's, in the short form's second read and in the general read of
//!   `read_meta`.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use redis::{Script, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::{Error, ErrorKind, Result};
use crate::store::redis::{Listening, RedisStore, ready_ones_first, unexpected};

use super::backend::GateBackend;
use super::pass_groups::{GroupedPass, PassGroups};
use super::types::{
    Admission, Door, DoorChange, DrawRecord, EnterRequest, Entry, GateName, GateStats, GateWatch, Grant,
    Holding, Left, Occupancy, Pass, Place, Poll, Waiting, capacity_conflict, no_capacity, permits_exceed,
};

/// Whether `req` is a Lock's (one permit of a gate of one, no label, not
/// barging), which goes in the short form lone_enter.lua reads.
fn lone(req: &EnterRequest<'_>) -> bool {
    req.permits == 1
        && req.capacity == Some(1)
        && req.label.is_none()
        && !req.barge
        && req.order_key.is_none()
}

/// Whether `req` comes with 'L' for enter_line.lua: a Lock's request that
/// would queue, on a handle of one permit that saw a line last. (Taken to
/// gates of up to `INLINE` permits, the line's paths cost a fair semaphore
/// of 5 Redis 5 µs less per hand-over but ran no more of them, and the
/// mutex's ~1 µs more, for finding the releaser among several holders:
/// docs/BENCHMARKS.md.)
fn line_hint(gate: &GateName, req: &EnterRequest<'_>) -> bool {
    lone(req) && req.queue && gate.lined() && gate.one_permit()
}

impl RedisStore {
    async fn run(&self, script: &Script, gate: &GateName, args: impl redis::ToRedisArgs) -> Result<Vec<i64>> {
        self.run_as(script, gate, args).await
    }

    async fn run_as<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        gate: &GateName,
        args: impl redis::ToRedisArgs,
    ) -> Result<T> {
        let k = gate.redis_keys(&self.prefix);
        self.invoke(script, &k.keys, args, &k.base).await
    }

    /// Sends the passes grouped under `key` (see `pass`) and answers each,
    /// within one response timeout for them all. A pass whose caller has
    /// gone is not sent (its permits stay with the releaser, whose lease
    /// the dropped release gives back).
    async fn send_passes(&self, gate: &GateName, key: &str) {
        /// The group's place in the map: taken out once, by `take`, or on
        /// drop if the task is dropped before (so the gate's next pass
        /// starts a new group; once taken, the key may name a later one).
        struct Place<'a> {
            groups: &'a PassGroups,
            key: &'a str,
            taken: bool,
        }
        impl Place<'_> {
            fn take(&mut self) -> Vec<GroupedPass> {
                self.taken = true;
                let mut groups = self.groups.0.lock().unwrap_or_else(PoisonError::into_inner);
                groups.remove(self.key).unwrap_or_default()
            }
        }
        impl Drop for Place<'_> {
            fn drop(&mut self) {
                if !self.taken {
                    self.take();
                }
            }
        }
        let mut place = Place {
            groups: &self.passes,
            key,
            taken: false,
        };
        ready_ones_first().await;
        let deadline = Instant::now() + self.timeout;
        let group: Vec<GroupedPass> = place.take().into_iter().filter(|p| !p.tx.is_closed()).collect();
        let made = match group.len() {
            0 | 1 => Ok(Vec::new()),
            _ => {
                let mut args: Vec<String> = Vec::with_capacity(4 * group.len());
                for p in &group {
                    args.extend([
                        p.from.clone(),
                        p.to.clone(),
                        p.permits.to_string(),
                        p.ttl_ms.to_string(),
                    ]);
                }
                self.run(&self.scripts.gate.pass_many, gate, args).await
            }
        };
        let made = match made {
            Ok(made) => made,
            Err(e) => {
                for p in group {
                    let _ = p.tx.send(Err(Error::new(e.kind(), e.message())));
                }
                return;
            }
        };
        let mut group = group.into_iter();
        // (The fences first: zip takes from its first iterator before it
        // finds the second one done.)
        for (fence, p) in made.chunks_exact(2).zip(group.by_ref()) {
            let _ = p.tx.send(Ok((Left::Released, Some(grant(fence[0], fence[1])))));
        }
        // The rest (the script stopped at the first of them) alone, all
        // at once.
        let alone = group.filter(|p| !p.tx.is_closed()).map(|p| async move {
            let to = Pass {
                id: &p.to,
                permits: p.permits,
                ttl_ms: p.ttl_ms,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = self.within(left, self.pass_alone(gate, &p.from, &to)).await;
            let _ = p.tx.send(answer);
        });
        futures_util::future::join_all(alone).await;
    }

    async fn pass_alone(&self, gate: &GateName, id: &str, to: &Pass<'_>) -> Result<(Left, Option<Grant>)> {
        let hint = if gate.one_permit() { "1" } else { "" };
        let r: Vec<Value> = self
            .run_as(
                &self.scripts.gate.leave,
                gate,
                (id, "", hint, to.id, to.permits, to.ttl_ms),
            )
            .await?;
        self.left("leave", &r)
    }

    /// Decodes leave.lua's reply: the outcome (and a pass's grant), then
    /// the hand-offs it made, which wake their waiters in this process at
    /// once (the published message wakes them too, later, and those in
    /// other processes).
    fn left(&self, op: &str, r: &[Value]) -> Result<(Left, Option<Grant>)> {
        let (left, passed, rest) = match r {
            [Value::Int(1), rest @ ..] => (Left::Released, None, rest),
            [Value::Int(2), rest @ ..] => (Left::Cancelled, None, rest),
            [Value::Int(0), rest @ ..] => (Left::Unknown, None, rest),
            [Value::Int(3), Value::Int(fence), Value::Int(ttl), rest @ ..] => {
                (Left::Released, Some(grant(*fence, *ttl)), rest)
            }
            _ => return Err(unexpected(op, r)),
        };
        for handed in rest {
            let Value::BulkString(entry) = handed else {
                return Err(unexpected(op, r));
            };
            if let Some((id, fence)) = std::str::from_utf8(entry).ok().and_then(|e| e.split_once(':'))
                && let Ok(fence) = fence.parse()
            {
                self.wakers().hand_off(id, fence);
            }
        }
        Ok((left, passed))
    }

    /// The key barging waiters of `gate` watch: the wake-up the scripts
    /// publish names the gate's meta hash (meta.lua, `wake_barging`).
    pub(crate) fn barge_key(&self, gate: &GateName) -> String {
        gate.redis_keys(&self.prefix).keys[0].clone()
    }

    pub(crate) async fn listen(&self, gate: &GateName, asked: Instant) -> Result<Listening> {
        self.subscribe(&gate.redis_keys(&self.prefix).channel, asked)
            .await
    }
}

fn grant(fence: i64, ttl: i64) -> Grant {
    Grant {
        fence: fence.max(0) as u64,
        ttl_ms: ttl.max(0) as u64,
    }
}

fn place(position: i64, waiting: i64, eta_ms: i64) -> Place {
    Place {
        position: position.max(0) as u64,
        waiting: waiting.max(0) as u64,
        eta: u64::try_from(eta_ms).ok().map(Duration::from_millis),
    }
}

impl GateBackend for Arc<RedisStore> {
    async fn enter(&self, gate: &GateName, req: &EnterRequest<'_>) -> Result<Entry> {
        // A Lock's request in the short form, with 'L' when its handle saw
        // a line; any other in enter.lua's.
        let r = if line_hint(gate, req) {
            let args = (req.id, req.ttl_ms, req.heartbeat_ms, u8::from(req.queue), "L");
            self.run(&self.scripts.gate.enter, gate, args).await?
        } else if lone(req) {
            let args = (req.id, req.ttl_ms, req.heartbeat_ms, u8::from(req.queue));
            self.run(&self.scripts.gate.enter, gate, args).await?
        } else {
            self.run(
                &self.scripts.gate.enter,
                gate,
                (
                    req.id,
                    req.permits,
                    req.capacity.unwrap_or(0),
                    req.ttl_ms,
                    req.heartbeat_ms,
                    u8::from(req.queue),
                    req.label.unwrap_or(""),
                    u8::from(req.barge),
                    req.order_key.map_or(String::new(), |k| k.to_string()),
                ),
            )
            .await?
        };
        match r.as_slice() {
            [1, fence, ttl] => {
                gate.set_lined(false);
                Ok(Entry::Granted(grant(*fence, *ttl)))
            }
            [2, position, waiting, eta] => {
                gate.set_lined(true);
                Ok(Entry::Queued(place(*position, *waiting, *eta)))
            }
            [3, used, capacity, waiting] => Ok(Entry::Busy(Occupancy {
                used: *used as u64,
                capacity: *capacity as u32,
                waiting: *waiting as u64,
            })),
            [-1, have] => Err(capacity_conflict(have, req.capacity.unwrap_or(0))),
            [-2, capacity] => Err(permits_exceed(req.permits, capacity)),
            [-3] => Err(no_capacity()),
            [-4] => Err(Error::closed()),
            other => Err(unexpected("enter", other)),
        }
    }

    async fn set_admission(&self, gate: &GateName, admission: &Admission) -> Result<()> {
        let paused = match admission.paused {
            Some(true) => "1".to_owned(),
            Some(false) => "0".to_owned(),
            None => String::new(),
        };
        let every = admission.every_ms.map(|e| e.to_string()).unwrap_or_default();
        let r = self
            .run(&self.scripts.gate.set_admission, gate, (paused, every))
            .await?;
        match r.as_slice() {
            [1, _] => Ok(()),
            other => Err(unexpected("set_admission", other)),
        }
    }

    async fn set_door(&self, gate: &GateName, change: &DoorChange) -> Result<u64> {
        let paused = match change.paused {
            Some(true) => "1",
            Some(false) => "0",
            None => "",
        };
        let args = (
            paused,
            "",
            u8::from(change.door.closed),
            change.door.note.as_str(),
            u8::from(change.drop_line),
            change.door.opens_at_ms.map(|t| t.to_string()).unwrap_or_default(),
            change
                .door
                .closes_at_ms
                .map(|t| t.to_string())
                .unwrap_or_default(),
        );
        let r = self.run(&self.scripts.gate.set_admission, gate, args).await?;
        match r.as_slice() {
            [1, dropped] => Ok((*dropped).max(0) as u64),
            other => Err(unexpected("set_door", other)),
        }
    }

    async fn set_queueing(&self, gate: &GateName, pick: u64) -> Result<()> {
        // (No pause, interval or door: those are left as they are.)
        let args = ("", "", "", "", "", "", "", pick);
        match self
            .run(&self.scripts.gate.set_admission, gate, args)
            .await?
            .as_slice()
        {
            [1, _] => Ok(()),
            other => Err(unexpected("set_queueing", other)),
        }
    }

    async fn poll(&self, gate: &GateName, id: &str, ttl_ms: u64, hb_ms: u64) -> Result<Poll> {
        let r = self
            .run(&self.scripts.gate.poll, gate, (id, ttl_ms, hb_ms))
            .await?;
        match r.as_slice() {
            [1, fence, ttl] => Ok(Poll::Granted(grant(*fence, *ttl))),
            [2, position, waiting, eta] => Ok(Poll::Queued(place(*position, *waiting, *eta))),
            [0] => Ok(Poll::Unknown),
            [3] => Ok(Poll::Removed),
            other => Err(unexpected("poll", other)),
        }
    }

    async fn renew(&self, gate: &GateName, id: &str, ttl_ms: u64) -> Result<Option<Grant>> {
        let r = self.run(&self.scripts.gate.renew, gate, (id, ttl_ms)).await?;
        match r.as_slice() {
            [1, ttl] => Ok(Some(grant(0, *ttl))),
            [0] => Ok(None),
            other => Err(unexpected("renew", other)),
        }
    }

    /// A plain release of `id` that passes its permits on to `to`, an
    /// acquire waiting in this process, in the same step if they are free
    /// for it then (leave.lua). On a gate whose handle names a capacity of
    /// 2 to `INLINE` (a semaphore's, its holders inline), the passes of the
    /// gate that are ready together go out as one call (pass_many.lua): the
    /// first joins a group and sends it from a task of its own once the
    /// tasks ready now have run (and added theirs); a pass the group's
    /// script did not make (it left it to the general path) is then sent
    /// alone. Five holders passing on in turn came to Redis ~3.7 at a time,
    /// each waiting for the others' scripts before its reply was written.
    async fn pass(&self, gate: &GateName, id: &str, to: &Pass<'_>) -> Result<(Left, Option<Grant>)> {
        if !gate.inline_sized() || self.is_durable() {
            return self.pass_alone(gate, id, to).await;
        }
        let key = gate.redis_keys(&self.prefix).keys[0].clone();
        let (tx, rx) = oneshot::channel();
        let grouped = GroupedPass {
            from: id.to_owned(),
            to: to.id.to_owned(),
            permits: to.permits,
            ttl_ms: to.ttl_ms,
            tx,
        };
        let lead = {
            let mut groups = self.passes.0.lock().unwrap_or_else(PoisonError::into_inner);
            let group = groups.entry(key.clone()).or_default();
            group.push(grouped);
            group.len() == 1
        };
        if lead {
            let store = Arc::clone(self);
            let gate = gate.clone();
            tokio::spawn(async move { store.send_passes(&gate, &key).await });
        }
        // The task answers every pass of its group, or drops it (and so
        // this sender) if it is dropped itself (its runtime shut down).
        rx.await.unwrap_or_else(|_| {
            Err(Error::new(
                ErrorKind::Unavailable,
                "a pass was dropped before it was sent",
            ))
        })
    }

    async fn set_capacity(&self, gate: &GateName, capacity: u32) -> Result<()> {
        let r = self.run(&self.scripts.gate.set_capacity, gate, capacity).await?;
        match r.as_slice() {
            [1] => Ok(()),
            other => Err(unexpected("set_capacity", other)),
        }
    }

    async fn holders(&self, gate: &GateName, limit: u32) -> Result<Vec<Holding>> {
        let r: Vec<redis::Value> = self.run_as(&self.scripts.gate.holders, gate, limit).await?;
        let mut out = Vec::with_capacity(r.len() / 2);
        for pair in r.chunks(4) {
            let [
                redis::Value::Int(ttl),
                label,
                redis::Value::BulkString(handle),
                redis::Value::Int(fence),
            ] = pair
            else {
                return Err(Error::new(ErrorKind::Store, "unexpected reply to holders"));
            };
            let label = match label {
                redis::Value::BulkString(b) if !b.is_empty() => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            };
            out.push(Holding {
                handle: String::from_utf8_lossy(handle).into_owned(),
                fence: (*fence > 0).then_some(*fence as u64),
                label,
                ttl: Duration::from_millis((*ttl).max(0) as u64),
            });
        }
        Ok(out)
    }

    /// The first `limit` tickets of the line (line.lua).
    async fn last_draw(&self, gate: &GateName) -> Result<DrawRecord> {
        let mut r: Vec<String> = self
            .run_as(&self.scripts.gate.draw, gate, Vec::<String>::new())
            .await?;
        if r.is_empty() {
            return Ok(DrawRecord::default());
        }
        let ended_at_ms = r[0]
            .strip_prefix('#')
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| Error::new(ErrorKind::Store, "unexpected reply to draw"))?;
        r.remove(0);
        Ok(DrawRecord {
            ended_at_ms,
            tickets: r,
        })
    }

    async fn line(&self, gate: &GateName, limit: u32) -> Result<Vec<Waiting>> {
        let r: Vec<redis::Value> = self.run_as(&self.scripts.gate.line, gate, limit).await?;
        let mut out = Vec::with_capacity(r.len() / 3);
        for (i, t) in r.chunks(3).enumerate() {
            let [redis::Value::Int(number), redis::Value::Int(permits), label] = t else {
                return Err(Error::new(ErrorKind::Store, "unexpected reply to line"));
            };
            let label = match label {
                redis::Value::BulkString(b) if !b.is_empty() => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            };
            out.push(Waiting {
                number: (*number).max(0) as u64,
                position: i as u64 + 1,
                permits: (*permits).max(0) as u32,
                label,
            });
        }
        Ok(out)
    }

    /// Revokes the holder named by `handle` (admin.lua, then leave.lua's
    /// end).
    async fn revoke(&self, gate: &GateName, handle: &str, keep_ms: u64) -> Result<Left> {
        let r: Vec<Value> = self
            .run_as(&self.scripts.gate.admin, gate, (handle, keep_ms, "h"))
            .await?;
        self.left("revoke", &r).map(|(left, _)| left)
    }

    /// Takes ticket `number` out of the line (admin.lua, then leave.lua).
    async fn remove_waiter(&self, gate: &GateName, number: u64) -> Result<Left> {
        let r: Vec<Value> = self
            .run_as(&self.scripts.gate.admin, gate, (number, "", "q"))
            .await?;
        self.left("remove_waiter", &r).map(|(left, _)| left)
    }

    /// Drops every ticket in line (admin.lua alone: it answers before
    /// leave.lua's part).
    async fn clear_line(&self, gate: &GateName) -> Result<u64> {
        let r = self.run(&self.scripts.gate.admin, gate, ("", "", "c")).await?;
        match r.as_slice() {
            [3, n] => Ok((*n).max(0) as u64),
            other => Err(unexpected("clear_line", other)),
        }
    }

    async fn stats(&self, gate: &GateName) -> Result<GateStats> {
        let (r, note): (Vec<i64>, String) = self
            .run_as(&self.scripts.gate.stats, gate, Vec::<String>::new())
            .await?;
        match r.as_slice() {
            [
                capacity,
                used,
                holders,
                waiting,
                grants,
                expiries,
                fence,
                paused,
                every,
                reset,
                closed,
                opens,
                closes,
                random,
            ] => Ok(GateStats {
                capacity: u32::try_from(*capacity).ok(),
                used: *used as u64,
                holders: *holders as u64,
                waiting: *waiting as u64,
                grants: *grants as u64,
                expiries: *expiries as u64,
                fence: *fence as u64,
                paused: *paused == 1,
                admission_interval: (*every > 0).then(|| Duration::from_millis(*every as u64)),
                line_reset_ms: (*reset > 0).then_some(*reset as u64),
                door: Door {
                    closed: *closed == 1,
                    note,
                    opens_at_ms: u64::try_from(*opens).ok().filter(|t| *t > 0),
                    closes_at_ms: u64::try_from(*closes).ok().filter(|t| *t > 0),
                },
                random: *random == 1,
            }),
            other => Err(unexpected("stats", other)),
        }
    }

    /// Releases or cancels `id`; with `keep_ms` (an end), a released
    /// holder is recorded in the revocation log in the same script.
    async fn leave(&self, gate: &GateName, id: &str, keep_ms: Option<u64>) -> Result<Left> {
        let r: Vec<Value> = match keep_ms {
            // (No keep: a Lock's handle that saw a line tries leave_line.lua,
            // any other the one-permit hint, see leave_fast.lua.)
            None if gate.one_permit() && gate.lined() => {
                self.run_as(&self.scripts.gate.leave, gate, (id, "", "L")).await?
            }
            None if gate.one_permit() => self.run_as(&self.scripts.gate.leave, gate, (id, "", 1)).await?,
            None => self.run_as(&self.scripts.gate.leave, gate, id).await?,
            Some(keep) => self.run_as(&self.scripts.gate.leave, gate, (id, keep)).await?,
        };
        // A release: after the outcome, the hand-offs it made, if any.
        if matches!(r.first(), Some(Value::Int(1))) {
            gate.set_lined(r.len() > 1);
        }
        self.left("leave", &r).map(|(left, _)| left)
    }

    /// The gate's epoch, stored settings and the revocation log from
    /// `since` on, read without writing (a no-writes script).
    async fn watch_state(&self, gate: &GateName, since: u64, max: usize) -> Result<GateWatch> {
        let k = gate.redis_keys(&self.prefix);
        let v: Vec<Value> = self
            .invoke_plain(&self.scripts.gate.watch, &k.keys, (since, max))
            .await?;
        let bad = || Error::new(ErrorKind::Store, "unexpected reply to watch_state");
        let int = |v: &Value| -> Result<i64> { redis::from_redis_value_ref(v).map_err(|_| bad()) };
        let [
            epoch,
            capacity,
            paused,
            every,
            closed,
            note,
            opens,
            closes,
            random,
            cursor,
            ids @ ..,
        ] = v.as_slice()
        else {
            return Err(bad());
        };
        let epoch: String = redis::from_redis_value_ref(epoch).map_err(|_| bad())?;
        Ok(GateWatch {
            epoch: if epoch.is_empty() {
                None
            } else {
                Some(epoch.parse().map_err(|_| bad())?)
            },
            capacity: u32::try_from(int(capacity)?).ok(),
            paused: int(paused)? == 1,
            admission_interval: u64::try_from(int(every)?)
                .ok()
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
            door: Door {
                closed: int(closed)? == 1,
                note: redis::from_redis_value_ref(note).map_err(|_| bad())?,
                opens_at_ms: u64::try_from(int(opens)?).ok().filter(|t| *t > 0),
                closes_at_ms: u64::try_from(int(closes)?).ok().filter(|t| *t > 0),
            },
            random: int(random)? == 1,
            cursor: int(cursor)?.max(0) as u64,
            revoked: ids
                .iter()
                .map(|id| redis::from_redis_value_ref(id).map_err(|_| bad()))
                .collect::<Result<_>>()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::process::{Child, Command, Stdio};
    use std::time::Duration;

    use crate::gate::types::{EnterRequest, Entry, GateName, Left, Pass};
    use crate::name::Name;
    use crate::store::Store;

    use crate::gate::keys::INLINE;

    /// A redis-server of this test's own on a free port, killed on drop.
    struct Server(Child);

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn start() -> (Server, String) {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/test installs it)");
        (Server(child), format!("redis://127.0.0.1:{port}"))
    }

    fn request(id: &str) -> EnterRequest<'_> {
        EnterRequest {
            id,
            permits: 1,
            capacity: Some(1),
            ttl_ms: 60_000,
            heartbeat_ms: 60_000,
            queue: true,
            label: None,
            barge: false,
            order_key: None,
        }
    }

    /// A store on the server at `url`, once it accepts connections.
    async fn connect(url: &str) -> Store {
        loop {
            match Store::redis(url).await {
                Ok(s) => return s,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// The server's `INFO commandstats`.
    async fn commandstats(url: &str) -> String {
        let client = redis::Client::open(url).expect("url");
        let mut con = client.get_multiplexed_async_connection().await.expect("connect");
        redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut con)
            .await
            .expect("info")
    }

    /// EVALSHA calls the server has run, not counting those it failed (a
    /// script's first call, NOSCRIPT, before the client loads it).
    async fn evalsha_calls(url: &str) -> u64 {
        let info = commandstats(url).await;
        let Some(stats) = info.lines().find_map(|l| l.strip_prefix("cmdstat_evalsha:")) else {
            return 0;
        };
        let field = |name: &str| -> u64 {
            stats
                .split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .map_or(0, |n| n.trim().parse().expect("a count"))
        };
        field("calls") - field("failed_calls") - field("rejected_calls")
    }

    /// Passes on one gate that are ready together go out as one call
    /// (pass_many.lua), each made as it would be alone; one the group's
    /// script does not make (its releaser holds nothing) is sent alone,
    /// and so is every pass after it.
    #[tokio::test]
    async fn passes_ready_together_go_out_as_one_call() {
        let (_server, url) = start();
        let store = connect(&url).await;
        let gate = held_gate(&store, "passes", 5, &["h0", "h1", "h2", "h3", "h4"]).await;
        let pass_all = async |from: &[&str], to: &[&str]| {
            let passes: Vec<Pass> = to
                .iter()
                .map(|id| Pass {
                    id,
                    permits: 1,
                    ttl_ms: 60_000,
                })
                .collect();
            let before = evalsha_calls(&url).await;
            let answers = futures_util::future::join_all(
                from.iter().zip(&passes).map(|(f, p)| store.pass(&gate, f, p)),
            )
            .await;
            let answers: Vec<_> = answers.into_iter().map(|a| a.expect("pass")).collect();
            (answers, evalsha_calls(&url).await - before)
        };

        let (answers, calls) = pass_all(&["h0", "h1", "h2", "h3"], &["n0", "n1", "n2", "n3"]).await;
        assert_eq!(calls, 1, "four passes in one call");
        let mut fences: Vec<u64> = answers
            .iter()
            .map(|a| match a {
                (Left::Released, Some(g)) => {
                    assert_eq!(g.ttl_ms, 60_000);
                    g.fence
                }
                other => panic!("not passed: {other:?}"),
            })
            .collect();
        assert!(
            fences.windows(2).all(|w| w[1] == w[0] + 1),
            "in order, one fence each: {fences:?}"
        );

        let (answers, calls) = pass_all(&["n0", "ghost", "n1"], &["m0", "m1", "m2"]).await;
        assert_eq!(calls, 3, "the group's call, then the two after it alone");
        assert!(matches!(answers[0], (Left::Released, Some(_))), "{answers:?}");
        assert_eq!(
            answers[1],
            (Left::Unknown, None),
            "a releaser holding nothing passes nothing"
        );
        assert!(matches!(answers[2], (Left::Released, Some(_))), "{answers:?}");
        fences.extend(
            [answers[0].1, answers[2].1]
                .iter()
                .map(|g| g.expect("granted").fence),
        );
        assert!(
            fences.windows(2).all(|w| w[1] > w[0]),
            "fences only grow: {fences:?}"
        );

        // Exactly the passes made hold the permits now.
        for id in ["m0", "m2", "n2", "n3", "h4"] {
            assert_eq!(
                store.leave(&gate, id).await.expect("leave"),
                Left::Released,
                "{id}"
            );
        }
        for id in ["h0", "n0", "n1", "m1", "ghost"] {
            assert_eq!(
                store.leave(&gate, id).await.expect("leave"),
                Left::Unknown,
                "{id}"
            );
        }
    }

    /// Calls of `command` the server has run.
    async fn calls(url: &str, command: &str) -> u64 {
        commandstats(url)
            .await
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }

    /// A mutex's handle that saw a line takes the line's paths
    /// (enter_line.lua, leave_line.lua): one HMGET to queue and one to
    /// hand the gate on, rather than two (and one for the lone lease) and
    /// two (and a GET). The hint only picks the path: wrong either way, the
    /// outcome is the same (a lone lease released on the lined path, a
    /// line handed on without it).
    #[tokio::test]
    async fn a_handle_that_saw_a_line_reads_it_at_once() {
        let (_server, url) = start();
        let store = connect(&url).await;
        let gate = GateName::with_capacity(Name::new("lined").expect("name"), Some(1));
        let enter = async |id| store.enter(&gate, &request(id)).await.expect("enter");

        assert!(matches!(enter("a").await, Entry::Granted(_)));
        assert!(!gate.lined(), "granted");
        let queue = async |id| {
            let before = calls(&url, "hmget").await;
            assert!(matches!(enter(id).await, Entry::Queued(_)));
            calls(&url, "hmget").await - before
        };
        assert_eq!(
            queue("b").await,
            2,
            "the lone lease's read, then the rest with the line's"
        );
        assert!(gate.lined(), "queued");
        assert_eq!(queue("c").await, 1, "all at once");

        let before = (calls(&url, "hmget").await, calls(&url, "get").await);
        assert_eq!(store.leave(&gate, "a").await.expect("leave"), Left::Released);
        let after = (calls(&url, "hmget").await, calls(&url, "get").await);
        assert_eq!(
            (after.0 - before.0, after.1 - before.1),
            (1, 0),
            "one read to hand on"
        );
        assert!(gate.lined(), "handed on");

        // Without the hint, the line is handed on all the same.
        gate.set_lined(false);
        assert_eq!(store.leave(&gate, "b").await.expect("leave"), Left::Released);
        assert_eq!(store.leave(&gate, "c").await.expect("leave"), Left::Released);
        assert!(!gate.lined(), "nobody left to hand on to");

        // A lone lease (granted on a handle without the hint) released on
        // a handle with it; the gate is free again after.
        assert!(matches!(enter("d").await, Entry::Granted(_)));
        let hinted = gate.clone();
        hinted.set_lined(true);
        assert_eq!(store.leave(&hinted, "d").await.expect("leave"), Left::Released);
        assert_eq!(store.leave(&hinted, "d").await.expect("leave"), Left::Unknown);
        hinted.set_lined(true);
        assert!(matches!(enter("e").await, Entry::Granted(_)), "free again");
        assert!(!gate.lined());
    }

    /// The line's paths give the answers the general paths give and leave
    /// the same state: a contended mutex driven through the same steps
    /// twice, its handle with the hint and
    /// without (each step sets it, so the hint never follows the answers),
    /// down to who is handed the permit with which fence, a waiter that
    /// gave up, one whose heartbeat ran out (a stale ticket due: the line's
    /// paths leave it to the general path), and a release by a holder that
    /// is not one.
    #[tokio::test]
    async fn the_lines_paths_agree_with_the_general_ones() {
        let (_server, url) = start();
        let store = connect(&url).await;
        let mut runs = Vec::new();
        for hinted in [true, false] {
            runs.push(agree_run(&store, &url, hinted).await);
        }
        let (hinted, general) = (&runs[0], &runs[1]);
        assert!(
            hinted.1.iter().any(|(k, v)| k == "h" && v.contains(" -T 1")),
            "a hand-off holds: {:?}",
            hinted.1
        );
        assert_eq!(hinted.0, general.0, "the same answers");
        assert_eq!(hinted.1, general.1, "the same state");
        assert!(
            hinted.2 + 6 <= general.2,
            "the line's paths ran: {} HMGETs against {}",
            hinted.2,
            general.2
        );
    }

    /// A call that hands the last waiter the gate and queues a newcomer
    /// leaves p with a TTL: the hand-off emptied it (Redis deleted it, and
    /// its TTL) and the queueing made it again.
    #[tokio::test]
    async fn side_data_made_again_in_one_call_keeps_a_ttl() {
        let (_server, url) = start();
        let store = connect(&url).await;
        let gate = GateName::with_capacity(Name::new("side").expect("name"), Some(1));
        let enter = async |req| store.enter(&gate, &req).await.expect("enter");
        let a = enter(EnterRequest {
            ttl_ms: 50,
            ..request("a")
        })
        .await;
        assert!(matches!(a, Entry::Granted(_)), "{a:?}");
        assert!(matches!(enter(request("b")).await, Entry::Queued(_)));
        tokio::time::sleep(Duration::from_millis(150)).await;
        // a's lease has ended: this call hands the gate to b, then queues c.
        let c = enter(request("c")).await;
        assert!(matches!(c, Entry::Queued(p) if p.position == 1), "{c:?}");
        let client = redis::Client::open(url.as_str()).expect("url");
        let mut con = client.get_multiplexed_async_connection().await.expect("connect");
        let p = format!("{}:p", gate.redis_keys("tollgate").base);
        let (len, pttl): (u64, i64) = redis::pipe()
            .hlen(&p)
            .pttl(&p)
            .query_async(&mut con)
            .await
            .expect("p");
        assert_eq!(len, 1, "c's deadline");
        assert!(pttl > 0, "p keeps a TTL: {pttl}");
    }

    /// The line's paths are asked for by a handle of one permit that saw
    /// a line, for a Lock's request that would queue; by nothing else.
    #[test]
    fn the_line_hint_goes_with_small_gates_and_plain_requests() {
        let name = |c| GateName::with_capacity(Name::new("hint").expect("name"), Some(c));
        let plain = request("x");
        for (capacity, want) in [(1, true), (3, false), (INLINE + 1, false)] {
            let gate = name(capacity);
            let req = EnterRequest {
                capacity: Some(capacity),
                ..plain
            };
            assert!(!super::line_hint(&gate, &req), "{capacity}: no line seen yet");
            gate.set_lined(true);
            assert_eq!(super::line_hint(&gate, &req), want, "{capacity}");
            for other in [
                EnterRequest { permits: 2, ..req },
                EnterRequest {
                    label: Some("l"),
                    ..req
                },
                EnterRequest { barge: true, ..req },
                EnterRequest { queue: false, ..req },
            ] {
                assert!(!super::line_hint(&gate, &other), "{capacity}: {other:?}");
            }
        }
        let unnamed = GateName::new(Name::new("hint").expect("name"));
        unnamed.set_lined(true);
        assert!(
            !super::line_hint(&unnamed, &plain),
            "a handle that names no capacity"
        );
    }

    /// One run of `the_lines_paths_agree_with_the_general_ones`: its log of
    /// answers, m's fields (times, fences and the pace masked) and the
    /// HMGETs it took.
    async fn agree_run(store: &Store, url: &str, hinted: bool) -> (Vec<String>, Vec<(String, String)>, u64) {
        let gate = GateName::with_capacity(Name::new(&format!("agree-{hinted}")).expect("name"), Some(1));
        let hmgets = calls(url, "hmget").await;
        // (Each id a prefix of the next: an entry is found by its whole id.)
        let ids: Vec<String> = (1..=8).map(|i| format!("t{}", "1".repeat(i))).collect();
        let watches: Vec<_> = ids.iter().map(|id| store.watch(id)).collect();
        let (cancelled, stale) = (1, 3);
        let mut log = Vec::new();
        // Fences follow the clock: the log has each hand-off's place in
        // the order of fences, which must go up.
        let mut fences: Vec<u64> = Vec::new();
        let mut holders: Vec<usize> = Vec::new();
        let enter = async |i: usize, heartbeat_ms| {
            gate.set_lined(hinted);
            let entry = store
                .enter(
                    &gate,
                    &EnterRequest {
                        heartbeat_ms,
                        ..request(&ids[i])
                    },
                )
                .await
                .expect("enter");
            match entry {
                Entry::Granted(g) => format!("{} granted {}", ids[i], g.ttl_ms),
                Entry::Queued(p) => format!("{} queued {} of {}", ids[i], p.position, p.waiting),
                Entry::Busy(o) => format!("{} busy {o:?}", ids[i]),
            }
        };
        let leave = async |id: &str| {
            gate.set_lined(hinted);
            store.leave(&gate, id).await.expect("leave")
        };
        for i in 0..ids.len() {
            let answer = enter(i, if i == stale { 200 } else { 60_000 }).await;
            if answer.contains("granted") {
                holders.push(i);
            }
            log.push(answer);
        }
        log.push(format!("{:?}", leave(&ids[cancelled]).await));
        log.push(format!("{:?}", leave("zz").await));
        for round in 0..5 {
            if round == 2 {
                // The stale ticket's heartbeat runs out.
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            let holder = holders.remove(0);
            log.push(format!("{} {:?}", ids[holder], leave(&ids[holder]).await));
            // Whoever was handed the permit, with its fence.
            for (i, watch) in watches.iter().enumerate() {
                if let Some(fence) = watch.wait(Duration::ZERO).await {
                    assert!(
                        fences.last().is_none_or(|&last| fence > last),
                        "fence {fence} after {fences:?}"
                    );
                    fences.push(fence);
                    log.push(format!("{} handed #{}", ids[i], fences.len()));
                    holders.push(i);
                }
            }
            if round < 2 {
                log.push(enter(holder, 60_000).await);
            }
        }
        log.push(format!("{:?}", leave(&ids[stale]).await));
        // m's fields, with every run of digits that is a time or a fence (9
        // or more) masked, and the line's pace (r: ms between grants, which
        // the two runs' timing sets).
        let client = redis::Client::open(url).expect("url");
        let mut con = client.get_multiplexed_async_connection().await.expect("connect");
        let state: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(&*gate.redis_keys("tollgate").keys[0])
            .query_async(&mut con)
            .await
            .expect("hgetall");
        let mask = |v: &str| {
            v.split(|c: char| !c.is_ascii_digit())
                .filter(|d| d.len() >= 9)
                .fold(v.to_owned(), |v, d| v.replacen(d, "T", 1))
        };
        let mut state: Vec<(String, String)> = state
            .into_iter()
            .map(|(k, v)| {
                let v = if k == "r" { "R".to_owned() } else { mask(&v) };
                (k, v)
            })
            .collect();
        state.sort();
        (log, state, calls(url, "hmget").await - hmgets)
    }

    /// `INLINE` here is keys.lua's.
    #[test]
    fn inline_is_the_scripts() {
        let keys = include_str!("lua/keys.lua");
        assert!(
            keys.contains(&format!("\nlocal INLINE = {INLINE}\n")),
            "keys.lua's INLINE differs"
        );
    }

    /// A gate of `capacity` with holders `ids`, on a handle that names the
    /// capacity.
    async fn held_gate(store: &Store, name: &str, capacity: u32, ids: &[&str]) -> GateName {
        let gate = GateName::with_capacity(Name::new(name).expect("name"), Some(capacity));
        for id in ids {
            let entry = store
                .enter(
                    &gate,
                    &EnterRequest {
                        capacity: Some(capacity),
                        ..request(id)
                    },
                )
                .await
                .expect("enter");
            assert!(matches!(entry, Entry::Granted(_)), "{entry:?}");
        }
        gate
    }

    /// What a group cannot make goes out alone: every pass on a handle of
    /// more than `INLINE` permits (no group), and a group's passes once
    /// its script stops (here at the first: someone waits in line, who
    /// comes first, so none is made). A caller that leaves before its
    /// group is sent has its pass dropped: the releaser still holds.
    #[tokio::test]
    async fn passes_a_group_cannot_make_go_out_alone() {
        let (_server, url) = start();
        let store = connect(&url).await;
        let pass = |id| Pass {
            id,
            permits: 1,
            ttl_ms: 60_000,
        };

        let big = held_gate(&store, "big", INLINE + 1, &["b0", "b1", "b2"]).await;
        let before = evalsha_calls(&url).await;
        let (p0, p1) = (pass("c0"), pass("c1"));
        let (a0, a1) = tokio::join!(store.pass(&big, "b0", &p0), store.pass(&big, "b1", &p1));
        assert_eq!(evalsha_calls(&url).await - before, 2, "one call each");
        for a in [a0, a1] {
            assert!(matches!(a.expect("pass"), (Left::Released, Some(_))));
        }

        let lined = held_gate(&store, "lined", 2, &["l0", "l1"]).await;
        let queued = store
            .enter(
                &lined,
                &EnterRequest {
                    capacity: Some(2),
                    queue: true,
                    ..request("fair")
                },
            )
            .await
            .expect("enter");
        assert!(matches!(queued, Entry::Queued(_)), "{queued:?}");
        let before = evalsha_calls(&url).await;
        let (p0, p1) = (pass("x0"), pass("x1"));
        let (a0, a1) = tokio::join!(store.pass(&lined, "l0", &p0), store.pass(&lined, "l1", &p1));
        assert_eq!(
            evalsha_calls(&url).await - before,
            3,
            "the group's call, then each alone"
        );
        // Each released; the line's ticket took the first freed permit.
        for a in [a0, a1] {
            assert_eq!(a.expect("pass").0, Left::Released);
        }
        assert_eq!(store.leave(&lined, "fair").await.expect("leave"), Left::Released);

        let dropped = held_gate(&store, "dropped", 3, &["d0", "d1", "d2"]).await;
        let before = evalsha_calls(&url).await;
        let (p0, p1, p2) = (pass("e0"), pass("e1"), pass("e2"));
        let mut gone = Box::pin(store.pass(&dropped, "d1", &p1));
        assert!(
            futures_util::poll!(gone.as_mut()).is_pending(),
            "in its group, not sent"
        );
        drop(gone);
        let (a0, a2) = tokio::join!(store.pass(&dropped, "d0", &p0), store.pass(&dropped, "d2", &p2));
        assert_eq!(evalsha_calls(&url).await - before, 1, "one call for the two left");
        for a in [a0, a2] {
            assert!(matches!(a.expect("pass"), (Left::Released, Some(_))));
        }
        assert_eq!(
            store.leave(&dropped, "d1").await.expect("leave"),
            Left::Released,
            "still held"
        );
        assert_eq!(
            store.leave(&dropped, "e1").await.expect("leave"),
            Left::Unknown,
            "never passed"
        );
    }

    /// The release's reply names the hand-off, so a waiter in the releasing
    /// process is woken by it: here nothing subscribed to the gate's
    /// channel, so the published message reaches nobody.
    #[tokio::test]
    async fn a_release_wakes_a_waiter_of_its_own_process_without_pubsub() {
        let (_server, url) = start();
        let store = connect(&url).await;
        let gate = GateName::new(Name::new("local-wake").expect("name"));
        // Both the fast path (an inline holder, a plain line) and the
        // general path (a labelled waiter) hand off in the reply.
        for label in [None, Some("waiter")] {
            let Entry::Granted(_) = store.enter(&gate, &request("holder")).await.expect("enter") else {
                panic!("the gate is free");
            };
            let watch = store.watch("waiter");
            let queued = store
                .enter(
                    &gate,
                    &EnterRequest {
                        label,
                        ..request("waiter")
                    },
                )
                .await
                .expect("enter");
            assert!(matches!(queued, Entry::Queued(_)), "{queued:?}");
            assert!(watch.wait(Duration::ZERO).await.is_none(), "not handed yet");
            assert_eq!(store.leave(&gate, "holder").await.expect("leave"), Left::Released);
            let fence = watch.wait(Duration::ZERO).await.expect("woken by the reply");
            assert!(fence > 0);
            assert_eq!(store.leave(&gate, "waiter").await.expect("leave"), Left::Released);
        }
    }

    #[test]
    fn a_gate_name_keeps_its_keys_per_prefix() {
        let gate = GateName::new(Name::new("orders").expect("name"));
        let k = gate.redis_keys("tg");
        assert_eq!(k.base, "tg:gate:{orders}");
        assert_eq!(k.keys, ["tg:gate:{orders}:m"]);
        assert_eq!(k.channel, "tg:gate:{orders}:n");
        assert!(matches!(
            gate.clone().redis_keys("tg"),
            std::borrow::Cow::Borrowed(_)
        ));
        // Another store's prefix is answered right, just not cached.
        assert_eq!(gate.redis_keys("other").keys[0], "other:gate:{orders}:m");
        assert_eq!(gate.redis_keys("tg").keys[0], "tg:gate:{orders}:m");
    }
}
