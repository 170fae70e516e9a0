//! The job queue as the `jobs` commands see it: the library on a store
//! (Redis), or a `tollgate serve` over HTTP (`--server`), for machines that
//! cannot reach Redis. Both answer the same way, so the commands do not
//! care which it is.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use clap::Args;
use reqwest::{Method, RequestBuilder};
use serde_json::{Value, json};
use tollgate::{Backoff, Cancelled, Job, JobQueue, Nacked, OnDuplicate, PushOptions, PushResult, Retry};

use super::StoreArgs;
use crate::client::{Failure, Server, Timeout, segment, usage};
use crate::exit;

/// Which queue, and where.
#[derive(Debug, Args)]
pub(crate) struct QueueTarget {
    /// The queue's name.
    pub(crate) queue: String,
    /// The queue is spread over this many partitions (1 to 256): every
    /// producer and worker must give the same number. Not with --server,
    /// whose [queues.NAME] decides.
    #[arg(long, value_name = "K")]
    pub(crate) partitions: Option<usize>,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

/// Longest one claim long-poll asks the server to wait (its limit is 60 s).
const POLL_SLICE: Duration = Duration::from_secs(25);

/// A queue on a `tollgate serve`.
#[derive(Debug, Clone)]
pub(crate) struct RemoteQueue {
    server: Server,
    /// `/v1/queues/<name>`.
    path: String,
    name: String,
    lease: Duration,
    keep: Option<(usize, Duration)>,
}

/// A job queue, local (library on a store) or remote (HTTP).
#[derive(Debug, Clone)]
pub(crate) enum Queue {
    Local(JobQueue),
    Remote(RemoteQueue),
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Queue {
    /// The queue on `--server` if given, else on the store. `writes`: the
    /// command will change the queue, so its partition count is checked
    /// (and stored if the queue has none) now.
    pub(crate) async fn open(target: &QueueTarget, writes: bool) -> Result<Queue, Failure> {
        let (name, store) = (target.queue.as_str(), &target.store);
        // Check the name and partitions before connecting, so bad input
        // never waits on the network.
        tollgate::Name::new(name).map_err(|e| usage(e.to_string()))?;
        if let Some(k) = target.partitions {
            JobQueue::check_partitions(k).map_err(|e| usage(format!("--partitions {k}: {e}")))?;
        }
        let Some(server) = &store.server else {
            let store = store.connect().await.map_err(|code| Failure {
                code,
                message: String::new(),
            })?;
            let partitions = target.partitions.unwrap_or(1);
            let q = JobQueue::partitioned(&store, name, partitions)?;
            // A count the store does not have fails here, at once, rather
            // than in a worker's loop.
            if writes {
                q.verify().await?;
            }
            return Ok(Queue::Local(q));
        };
        if target.partitions.is_some() {
            return Err(usage(
                "--partitions does not go with --server: the server's [queues.NAME] partitions decides",
            ));
        }
        Ok(Queue::Remote(RemoteQueue {
            server: Server::new(server, store.server_token.clone(), Timeout::Connect)?,
            path: format!("/v1/queues/{}", segment(name)),
            name: name.to_owned(),
            lease: Duration::from_secs(30),
            keep: None,
        }))
    }

    pub(crate) fn name(&self) -> &str {
        match self {
            Queue::Local(q) => q.name(),
            Queue::Remote(r) => &r.name,
        }
    }

    pub(crate) fn lease(self, lease: Duration) -> Result<Queue, Failure> {
        match self {
            Queue::Local(q) => Ok(Queue::Local(q.lease(lease)?)),
            Queue::Remote(mut r) => {
                if lease < Duration::from_millis(10) || lease > tollgate::MAX_JOB_DELAY {
                    return Err(usage("a lease must be 10 ms to a year"));
                }
                r.lease = lease;
                Ok(Queue::Remote(r))
            }
        }
    }

    pub(crate) fn keep_completed(self, count: usize, max_age: Duration) -> Result<Queue, Failure> {
        match self {
            Queue::Local(q) => Ok(Queue::Local(q.keep_completed(count, max_age)?)),
            Queue::Remote(mut r) => {
                if count == 0 || count > 1_000_000 {
                    return Err(usage("keep_completed: count must be 1 to 1000000"));
                }
                r.keep = Some((count, max_age));
                Ok(Queue::Remote(r))
            }
        }
    }

    /// Pushes one job; answers `{"id", "result", "due_ms"}`.
    pub(crate) async fn push(&self, payload: &[u8], o: &PushOptions) -> Result<Value, Failure> {
        match self {
            Queue::Local(q) => {
                let p = q.push(payload, o).await?;
                let result = match p.result {
                    PushResult::Created => "created",
                    PushResult::Kept => "kept",
                    PushResult::Replaced => "replaced",
                    PushResult::Busy => "busy",
                };
                Ok(json!({"id": p.id, "result": result, "due_ms": p.due.map(ms)}))
            }
            Queue::Remote(r) => {
                let mut body = json!({
                    "payload_base64": STANDARD.encode(payload),
                    "priority": o.priority,
                    "max_attempts": o.max_attempts,
                    "on_duplicate": if o.on_duplicate == OnDuplicate::Replace { "replace" } else { "keep" },
                });
                if let Some(id) = &o.id {
                    body["id"] = json!(id);
                }
                if let Some(group) = &o.group {
                    body["group"] = json!(group);
                }
                if let Some(d) = o.delay {
                    body["delay_ms"] = json!(d.as_millis() as u64);
                }
                if let Some(at) = o.at {
                    body["at_ms"] = json!(ms(at));
                }
                body["backoff"] = match o.backoff {
                    Backoff::Fixed(d) => json!({"kind": "fixed", "base_ms": d.as_millis() as u64}),
                    Backoff::Exponential { base, max } => json!({"kind": "exponential",
                        "base_ms": base.as_millis() as u64, "max_ms": max.as_millis() as u64}),
                };
                let (_, v) = r.call(r.request(Method::POST, "/jobs").json(&body)).await?;
                Ok(json!({"id": v["id"], "result": v["result"], "due_ms": v["due_ms"]}))
            }
        }
    }

    /// Claims the next due job, waiting up to `wait`.
    pub(crate) async fn next(&self, wait: Duration) -> Result<Option<Job>, Failure> {
        match self {
            Queue::Local(q) => Ok(q.next(wait).await?),
            Queue::Remote(r) => {
                let url = format!(
                    "/claim?wait_ms={}&lease_ms={}",
                    wait.min(POLL_SLICE).as_millis(),
                    r.lease.as_millis()
                );
                let (_, v) = r
                    .call(r.request(Method::POST, &url).timeout(POLL_SLICE * 2))
                    .await?;
                let job = &v["job"];
                if job.is_null() {
                    return Ok(None);
                }
                let bad = || Failure {
                    code: exit::SOFTWARE,
                    message: format!("the server answered a claim with {v}"),
                };
                let payload = STANDARD
                    .decode(job["payload_base64"].as_str().ok_or_else(bad)?)
                    .map_err(|_| bad())?;
                Ok(Some(Job {
                    id: job["id"].as_str().ok_or_else(bad)?.to_owned(),
                    payload,
                    attempt: job["attempt"].as_u64().ok_or_else(bad)? as u32,
                    fence: job["fence"].as_u64().ok_or_else(bad)?,
                    lease_until: UNIX_EPOCH
                        + Duration::from_millis(job["lease_until_ms"].as_u64().unwrap_or(0)),
                    group: job["group"].as_str().map(str::to_owned),
                }))
            }
        }
    }

    pub(crate) async fn ack(&self, id: &str, fence: u64) -> Result<(), Failure> {
        match self {
            Queue::Local(q) => Ok(q.ack(id, fence).await?),
            Queue::Remote(r) => {
                let mut body = json!({"fence": fence});
                if let Some((count, age)) = r.keep {
                    body["keep"] = json!({"count": count, "max_age_ms": age.as_millis() as u64});
                }
                r.call(r.request(Method::POST, &r.job_path(id, "/ack")).json(&body))
                    .await?;
                Ok(())
            }
        }
    }

    /// Gives a job back: retried (when) or dead (keeping `error`, if
    /// given, as why).
    pub(crate) async fn nack(
        &self,
        id: &str,
        fence: u64,
        retry: Retry,
        error: Option<&str>,
    ) -> Result<Nacked, Failure> {
        match self {
            Queue::Local(q) => Ok(match error {
                Some(e) => q.nack_with_error(id, fence, retry, e).await?,
                None => q.nack(id, fence, retry).await?,
            }),
            Queue::Remote(r) => {
                let mut body = json!({"fence": fence, "error": error});
                if let Retry::After(d) = retry {
                    body["delay_ms"] = json!(d.as_millis() as u64);
                }
                let (_, v) = r
                    .call(r.request(Method::POST, &r.job_path(id, "/nack")).json(&body))
                    .await?;
                Ok(match v["result"].as_str() {
                    Some("dead") => Nacked::Dead,
                    _ => {
                        Nacked::RetryAt(UNIX_EPOCH + Duration::from_millis(v["due_ms"].as_u64().unwrap_or(0)))
                    }
                })
            }
        }
    }

    pub(crate) async fn extend(&self, id: &str, fence: u64, lease: Duration) -> Result<(), Failure> {
        match self {
            Queue::Local(q) => q
                .extend(id, fence, lease)
                .await
                .map(|_| ())
                .map_err(Failure::from),
            Queue::Remote(r) => {
                let body = json!({"fence": fence, "lease_ms": lease.as_millis() as u64});
                r.call(r.request(Method::POST, &r.job_path(id, "/extend")).json(&body))
                    .await?;
                Ok(())
            }
        }
    }

    /// The queue's counts, as JSON.
    pub(crate) async fn stats(&self) -> Result<Value, Failure> {
        match self {
            Queue::Local(q) => {
                let s = q.stats().await?;
                if s.is_blank() {
                    known(q).await?;
                }
                let pick = |q: f64| s.recent_lateness_quantile(q).map(|d| d.as_millis() as u64);
                Ok(json!({
                    "queue": q.name(), "partitions": q.partitions(), "ready": s.ready, "delayed": s.delayed, "in_flight": s.in_flight,
                    "dead": s.dead, "completed": s.completed, "pushed": s.pushed, "claimed": s.claimed,
                    "acked": s.acked, "retried": s.retried, "dead_total": s.dead_total,
                    "redelivered": s.redelivered, "paused": s.paused, "groups": s.groups,
                    "groups_held": s.groups_held, "limited_claims": s.limited_claims, "recent_lateness_p50_ms": pick(0.5),
                    "recent_lateness_p99_ms": pick(0.99), "recent_lateness_max_ms": pick(1.0),
                }))
            }
            Queue::Remote(r) => Ok(r.call(r.request(Method::GET, "")).await?.1),
        }
    }

    /// The dead letters, oldest first, one JSON object each.
    pub(crate) async fn dead(&self) -> Result<Vec<Value>, Failure> {
        match self {
            Queue::Local(q) => {
                let dead = q.dead(10_000).await?;
                if dead.is_empty() {
                    known(q).await?;
                }
                Ok(dead
                    .into_iter()
                    .map(|d| {
                        json!({"id": d.id, "died_ms": ms(d.died), "attempts": d.attempts,
                               "last_error": d.last_error, "payload": String::from_utf8_lossy(&d.payload)})
                    })
                    .collect())
            }
            Queue::Remote(r) => {
                let (_, v) = r.call(r.request(Method::GET, "/dead?limit=10000")).await?;
                Ok(listed(
                    &v,
                    |d| json!({"id": d["id"], "died_ms": d["died_ms"], "attempts": d["attempts"], "last_error": d["last_error"]}),
                ))
            }
        }
    }

    /// Replays one dead job, or all; returns how many.
    pub(crate) async fn replay(&self, id: Option<&str>) -> Result<u64, Failure> {
        match self {
            Queue::Local(q) => Ok(q.replay(id).await?),
            Queue::Remote(r) => {
                let body = json!({"id": id});
                let (_, v) = r
                    .call(r.request(Method::POST, "/dead/replay").json(&body))
                    .await?;
                Ok(v["replayed"].as_u64().unwrap_or(0))
            }
        }
    }
}

impl Queue {
    /// Pauses the queue (`pause`) or resumes it; whether that changed it.
    pub(crate) async fn set_paused(&self, pause: bool) -> Result<bool, Failure> {
        match self {
            Queue::Local(q) if pause => Ok(q.pause().await?),
            Queue::Local(q) => Ok(q.resume().await?),
            Queue::Remote(r) => {
                let path = if pause { "/pause" } else { "/resume" };
                let (_, v) = r.call(r.request(Method::POST, path)).await?;
                Ok(v["changed"].as_bool().unwrap_or(false))
            }
        }
    }
}

impl Queue {
    /// Cancels a waiting job (purges a dead one): `{"id", "result"}`; a
    /// job being run, or none, is a failure (75, 65).
    pub(crate) async fn cancel(&self, id: &str) -> Result<Value, Failure> {
        let result = match self {
            Queue::Local(q) => match q.cancel(id).await? {
                Cancelled::Cancelled => "cancelled",
                Cancelled::Purged => "purged",
                Cancelled::Running => return Err(running(id)),
                Cancelled::Unknown => return Err(no_such(format!("no job {id:?} in queue {:?}", q.name()))),
            },
            Queue::Remote(r) => {
                let (_, v) = r.call(r.request(Method::DELETE, &r.job_path(id, ""))).await?;
                return Ok(json!({"id": id, "result": v["result"]}));
            }
        };
        Ok(json!({"id": id, "result": result}))
    }

    /// Moves a waiting job's due time to `delay` from now: `{"id", "due_ms"}`.
    pub(crate) async fn reschedule(&self, id: &str, delay: Duration) -> Result<Value, Failure> {
        match self {
            Queue::Local(q) => match q.reschedule(id, delay).await {
                Ok(Some(at)) => Ok(json!({"id": id, "due_ms": ms(at)})),
                Ok(None) => Err(no_such(format!("no waiting job {id:?} in queue {:?}", q.name()))),
                Err(e) if e.kind() == tollgate::ErrorKind::JobRunning => Err(running(id)),
                Err(e) => Err(e.into()),
            },
            Queue::Remote(r) => {
                let body = json!({"delay_ms": delay.as_millis() as u64});
                let (_, v) = r
                    .call(
                        r.request(Method::POST, &r.job_path(id, "/reschedule"))
                            .json(&body),
                    )
                    .await?;
                Ok(json!({"id": id, "due_ms": v["due_ms"]}))
            }
        }
    }

    /// Deletes one dead job, or all; returns how many.
    pub(crate) async fn purge(&self, id: Option<&str>) -> Result<u64, Failure> {
        match self {
            Queue::Local(q) => Ok(q.purge(id).await?),
            Queue::Remote(r) => {
                let body = json!({"id": id});
                let (_, v) = r.call(r.request(Method::POST, "/dead/purge").json(&body)).await?;
                Ok(v["purged"].as_u64().unwrap_or(0))
            }
        }
    }

    /// Kept completed jobs, most recent first, one JSON object each.
    pub(crate) async fn completed(&self, limit: usize) -> Result<Vec<Value>, Failure> {
        match self {
            Queue::Local(q) => {
                let done = q.completed(limit).await?;
                if done.is_empty() {
                    known(q).await?;
                }
                Ok(done
                    .into_iter()
                    .map(|c| json!({"id": c.id, "acked_ms": ms(c.acked), "payload": String::from_utf8_lossy(&c.payload)}))
                    .collect())
            }
            Queue::Remote(r) => {
                let (_, v) = r
                    .call(r.request(Method::GET, &format!("/completed?limit={limit}")))
                    .await?;
                Ok(listed(&v, |c| json!({"id": c["id"], "acked_ms": c["acked_ms"]})))
            }
        }
    }
}

/// Looking jobs up: printed as the API shows them (`job_info_json`).
impl Queue {
    /// One job as JSON; an unknown one is a failure (65).
    pub(crate) async fn show(&self, id: &str) -> Result<Value, Failure> {
        match self {
            Queue::Local(q) => match q.get_with_payload(id).await? {
                Some((j, payload)) => Ok(json!(crate::api::jobs::reads::shown(&j, &payload))),
                None => Err(no_such(format!("no job {id:?} in queue {:?}", q.name()))),
            },
            Queue::Remote(r) => Ok(r.call(r.request(Method::GET, &r.job_path(id, ""))).await?.1),
        }
    }

    /// One page of the jobs in `state`, and the cursor of the next.
    pub(crate) async fn list(
        &self,
        state: tollgate::JobState,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Value>, Option<String>), Failure> {
        match self {
            Queue::Local(q) => {
                let page = q.list(state, cursor, limit).await?;
                if page.jobs.is_empty() && cursor.is_none() {
                    known(q).await?;
                }
                let jobs = page
                    .jobs
                    .iter()
                    .map(crate::api::jobs::reads::job_info_json)
                    .collect();
                Ok((jobs, page.next))
            }
            Queue::Remote(r) => {
                let after = cursor.map_or(String::new(), |c| format!("&cursor={}", segment(c)));
                let path = format!("/jobs?state={state}&limit={limit}{after}");
                let (_, v) = r.call(r.request(Method::GET, &path)).await?;
                let jobs = v["jobs"].as_array().cloned().unwrap_or_default();
                Ok((jobs, v["next"].as_str().map(str::to_owned)))
            }
        }
    }
}

/// The jobs of a server's listing (`{"jobs": [...]}`): `fields` of each,
/// and its payload as text.
fn listed(v: &Value, fields: impl Fn(&Value) -> Value) -> Vec<Value> {
    v["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|j| {
            let payload = j["payload_base64"]
                .as_str()
                .and_then(|b| STANDARD.decode(b).ok())
                .unwrap_or_default();
            let mut out = fields(j);
            out["payload"] = json!(String::from_utf8_lossy(&payload));
            out
        })
        .collect()
}

/// Called when `q` answered as an empty queue does: exit 65 if it never
/// held anything. (No "did you mean" here: on Redis that would take a
/// scan of the keyspace; a `tollgate serve` names the queues it knows.)
async fn known(q: &JobQueue) -> Result<(), Failure> {
    if q.exists().await? {
        return Ok(());
    }
    Err(no_such(format!(
        "no such queue {:?} (nothing was ever pushed to it)",
        q.name()
    )))
}

fn no_such(message: String) -> Failure {
    Failure {
        code: exit::NO_SUCH,
        message,
    }
}

fn running(id: &str) -> Failure {
    Failure {
        code: exit::BUSY,
        message: format!("job {id:?} is being run; it cannot be changed now (try again later)"),
    }
}

impl RemoteQueue {
    /// A request to `path` under the queue's own.
    pub(super) fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.server.request(method, &format!("{}{path}", self.path))
    }

    fn job_path(&self, id: &str, action: &str) -> String {
        format!("/jobs/{}{action}", segment(id))
    }

    /// Sends `req`; a 2xx answer's JSON, else the failure the server named.
    pub(super) async fn call(&self, req: RequestBuilder) -> Result<(u16, Value), Failure> {
        let answer = self.server.send(req).await?;
        if (200..300).contains(&answer.status) {
            return Ok((answer.status, answer.body));
        }
        Err(self.server.failure(&answer))
    }
}
