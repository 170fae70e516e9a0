//! The job-queue routes of the HTTP API: `/v1/queues/{queue}/…`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tollgate::{
    Cancelled, ErrorKind, Job, JobInfo, JobState, Nacked, OnDuplicate, PushOptions, PushResult, Pushed,
    Retry, ShardedJobQueue, Store,
};

use super::AppState;
use super::body::{BackoffBody, Json, JsonBody, compact, limited, parse};
use super::error::{ApiError, Query};

/// Largest push body: a 1 MiB payload, base64-encoded, plus options.
pub(crate) const PUSH_BODY_LIMIT: usize = 1_500_000;
/// Largest batch push body.
pub(crate) const BATCH_BODY_LIMIT: usize = 16 * 1024 * 1024;
/// Largest batch ack body: 1,000 deliveries whose ids have the longest
/// length (128 bytes), even with every character escaped, fit.
pub(crate) const ACK_BODY_LIMIT: usize = 512 * 1024;
/// Longest a claim may wait.
const MAX_WAIT_MS: u64 = 60_000;

/// A queue's settings in the config file: `[queues.NAME]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct QueueSettings {
    /// Spread the queue over this many partitions (1 to 256): each is a
    /// queue of its own under its own hash tag, so on Redis Cluster the
    /// queue's load spreads over the masters. Every server and worker of
    /// the queue must use the same number.
    pub(crate) partitions: usize,
}

/// How often a configured queue's handle asks the store whether the
/// partition count is still the one in force (one round trip, only while
/// the queue is used).
const CONFIGURED_RECHECK: Duration = Duration::from_secs(1);

/// Queues kept as handles (each checks the partition count with the store
/// on first use and every 10 s, a configured one every second); past this
/// many the cache starts again.
const HANDLES_KEPT: usize = 10_000;

/// The job queues of this server: the partition counts configured, and a
/// handle per queue used so far.
#[derive(Debug, Default)]
pub(crate) struct Queues {
    partitions: HashMap<String, usize>,
    /// Each handle and when it was last used: unused ones are dropped
    /// ([`Queues::forget_idle`]), so a flood of made-up queue names leaves
    /// nothing behind.
    handles: Mutex<HashMap<String, (ShardedJobQueue, std::time::Instant)>>,
}

impl Queues {
    /// The configured queues, checked: names and partition counts.
    pub(crate) fn new(settings: &HashMap<String, QueueSettings>) -> Result<Queues, String> {
        let mut partitions = HashMap::new();
        for (name, s) in settings {
            tollgate::Name::new(name).map_err(|e| format!("[queues.{name}]: {e}"))?;
            ShardedJobQueue::check_partitions(s.partitions)
                .map_err(|e| format!("[queues.{name}] partitions = {}: {e}", s.partitions))?;
            partitions.insert(name.clone(), s.partitions);
        }
        Ok(Queues {
            partitions,
            handles: Mutex::default(),
        })
    }

    /// The queues named in the config, with their partition counts.
    pub(crate) fn configured(&self) -> impl Iterator<Item = (&str, usize)> {
        self.partitions.iter().map(|(n, p)| (n.as_str(), *p))
    }

    /// The queue `name`: its configured partitions, else one (the plain
    /// queue).
    pub(crate) fn open(&self, store: &Store, name: &str) -> tollgate::Result<ShardedJobQueue> {
        let mut handles = self
            .handles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((q, used)) = handles.get_mut(name) {
            *used = std::time::Instant::now();
            return Ok(q.clone());
        }
        let q = match self.partitions.get(name) {
            // The store keeps the count; if it loses it (a restart without
            // persistence, FLUSHALL, a failover to an empty replica), the
            // next re-check stores it again: make that within a second.
            Some(&k) => ShardedJobQueue::new(store, name, k)?.recheck_every(CONFIGURED_RECHECK)?,
            None => ShardedJobQueue::new(store, name, 1)?,
        };
        if handles.len() >= HANDLES_KEPT {
            // Bounded: start again (each handle checks with the store once).
            handles.clear();
            handles.shrink_to_fit();
        }
        handles.insert(name.to_owned(), (q.clone(), std::time::Instant::now()));
        Ok(q)
    }

    /// Names of queues this server knows within two edits of `name`,
    /// closest first: where a misspelt name finds what was meant without
    /// a scan of the store. The configured names, and the handles' while
    /// there are few of them: an unknown name must not cost a pass over
    /// thousands (a flood of made-up names would pay it on every request).
    fn close_to(&self, name: &str) -> Vec<String> {
        let handles = self
            .handles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let used = (handles.len() <= SUGGEST_FROM_HANDLES).then(|| handles.keys());
        let mut close: Vec<(usize, String)> = self
            .partitions
            .keys()
            .chain(used.into_iter().flatten())
            .filter(|n| n.len().abs_diff(name.len()) <= 2 && n.as_str() != name)
            .map(|n| (strsim::levenshtein(n, name), n.clone()))
            .filter(|(d, _)| *d <= 2)
            .collect();
        close.sort();
        close.dedup();
        close.into_iter().map(|(_, n)| n).collect()
    }

    /// Drops the handles of queues not used for `idle` (a configured
    /// queue's too: the next use opens it again, with its count), and
    /// gives the map's spare room back.
    pub(crate) fn forget_idle(&self, idle: Duration) {
        let mut handles = self
            .handles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        handles.retain(|_, (_, used)| used.elapsed() < idle);
        if handles.capacity() > 64 && handles.len() * 4 < handles.capacity() {
            let len = handles.len();
            handles.shrink_to(len * 2);
        }
    }
}

/// The job-queue routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/queues/{queue}", get(stats))
        .route("/v1/queues/{queue}/jobs", limited(post(push), PUSH_BODY_LIMIT))
        .route(
            "/v1/queues/{queue}/batch",
            limited(post(push_batch), BATCH_BODY_LIMIT),
        )
        .route("/v1/queues/{queue}/claim", post(claim))
        .route("/v1/queues/{queue}/ack", limited(post(ack_batch), ACK_BODY_LIMIT))
        .route("/v1/queues/{queue}/completed", get(completed))
        .route("/v1/queues/{queue}/jobs/{id}", delete(cancel))
        .route("/v1/queues/{queue}/jobs/{id}", get(show))
        .route("/v1/queues/{queue}/jobs", get(list))
        .route("/v1/queues/{queue}/jobs/{id}/ack", post(ack))
        .route("/v1/queues/{queue}/jobs/{id}/nack", post(nack))
        .route("/v1/queues/{queue}/jobs/{id}/extend", post(extend))
        .route("/v1/queues/{queue}/jobs/{id}/reschedule", post(reschedule))
        .route("/v1/queues/{queue}/dead", get(dead))
        .route("/v1/queues/{queue}/dead/replay", post(replay))
        .route("/v1/queues/{queue}/dead/purge", post(purge))
        .route("/v1/queues/{queue}/pause", post(pause))
        .route("/v1/queues/{queue}/resume", post(resume))
}

fn queue(state: &AppState, name: &str, lease_ms: Option<u64>) -> Result<ShardedJobQueue, ApiError> {
    let mut q = state.queue_set.open(&state.store, name)?;
    if let Some(ms) = lease_ms {
        q = q.lease(Duration::from_millis(ms))?;
    }
    super::track(&state.queues, name);
    Ok(q)
}

/// The handles' names are looked at for a "did you mean" up to this many.
const SUGGEST_FROM_HANDLES: usize = 256;

/// Queues named to check whether they exist for one "did you mean".
const SUGGESTIONS_CHECKED: usize = 3;

/// Called when `q` answered as an empty queue does: 404
/// `queue_not_found` if it never held anything (naming close names of
/// queues that did), else nothing.
async fn known(state: &AppState, name: &str, q: &ShardedJobQueue) -> Result<(), ApiError> {
    if q.exists().await? {
        return Ok(());
    }
    let mut meant = Vec::new();
    for other in state
        .queue_set
        .close_to(name)
        .into_iter()
        .take(SUGGESTIONS_CHECKED)
    {
        let Ok(o) = state.queue_set.open(&state.store, &other) else {
            continue;
        };
        if o.exists().await.unwrap_or(false) {
            meant.push(format!("{other:?}"));
        }
    }
    let hint = if meant.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", meant.join(" or "))
    };
    Err(ApiError::new(
        StatusCode::NOT_FOUND,
        "queue_not_found",
        format!("no such queue {name:?} (nothing was ever pushed to it){hint}"),
    ))
}

fn ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn lease_lost(e: tollgate::Error) -> ApiError {
    if e.kind() == ErrorKind::LeaseLost {
        ApiError::new(StatusCode::CONFLICT, "lease_lost", e.to_string())
    } else {
        ApiError::from(e)
    }
}

/// One job as pushed. Read straight from the request's bytes: the payload
/// stays a slice of them (a `serde_json::Value` of a payload of many small
/// items took ~16 times its size).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PushBody<'a> {
    /// Any JSON value, stored as its JSON text (without the whitespace
    /// between tokens).
    #[serde(borrow)]
    payload: Option<&'a RawValue>,
    /// Or raw bytes, base64 (standard alphabet).
    #[serde(borrow)]
    payload_base64: Option<Cow<'a, str>>,
    id: Option<String>,
    delay_ms: Option<u64>,
    /// Due at this Unix time in ms (wins over `delay_ms`); at most a year
    /// ahead.
    at_ms: Option<u64>,
    #[serde(default)]
    priority: u8,
    max_attempts: Option<u32>,
    backoff: Option<BackoffBody>,
    /// `keep` (default) or `replace`.
    on_duplicate: Option<String>,
}

/// The payload and options of one pushed job.
fn push_of(body: PushBody<'_>) -> Result<(Cow<'_, [u8]>, PushOptions), ApiError> {
    let payload = match (body.payload, body.payload_base64) {
        (Some(v), None) => compact(v.get()),
        (None, Some(b)) => Cow::Owned(
            STANDARD
                .decode(b.as_bytes())
                .map_err(|_| ApiError::bad_request("payload_base64 is not valid base64"))?,
        ),
        (None, None) => return Err(ApiError::bad_request("give payload (JSON) or payload_base64")),
        (Some(_), Some(_)) => return Err(ApiError::bad_request("give payload or payload_base64, not both")),
    };
    let defaults = PushOptions::default();
    let backoff = match body.backoff {
        None => defaults.backoff,
        Some(b) => b.backoff().map_err(ApiError::bad_request)?,
    };
    let on_duplicate = match body.on_duplicate.as_deref() {
        None | Some("keep") => OnDuplicate::Keep,
        Some("replace") => OnDuplicate::Replace,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "on_duplicate {other:?}: use keep or replace"
            )));
        }
    };
    let at = match body.at_ms {
        None => None,
        Some(at) => Some(run_at(at)?),
    };
    let options = PushOptions {
        id: body.id,
        delay: body.delay_ms.map(Duration::from_millis),
        at,
        priority: body.priority,
        max_attempts: body.max_attempts.unwrap_or(defaults.max_attempts),
        backoff,
        on_duplicate,
    };
    Ok((payload, options))
}

/// `at_ms` as a time: at most a year ahead of now, the bound `delay_ms`
/// has (a time in the past is due at once).
fn run_at(at_ms: u64) -> Result<std::time::SystemTime, ApiError> {
    let latest = ms(std::time::SystemTime::now()).saturating_add(tollgate::MAX_JOB_DELAY.as_millis() as u64);
    if at_ms > latest {
        return Err(ApiError::bad_request(format!(
            "at_ms {at_ms} is more than a year ahead (at most {latest} now)"
        )));
    }
    Ok(UNIX_EPOCH + Duration::from_millis(at_ms))
}

/// A push's answer and its status: 201 for a created job, else 200.
fn pushed_json(p: &Pushed) -> (StatusCode, Value) {
    let (status, result) = match p.result {
        PushResult::Created => (StatusCode::CREATED, "created"),
        PushResult::Kept => (StatusCode::OK, "kept"),
        PushResult::Replaced => (StatusCode::OK, "replaced"),
        PushResult::Busy => (StatusCode::OK, "busy"),
    };
    (
        status,
        json!({"id": p.id, "result": result, "due_ms": p.due.map(ms)}),
    )
}

/// `POST /v1/queues/{queue}/jobs`.
pub(crate) async fn push(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let q = queue(&state, &name, None)?;
    let (payload, options) = push_of(parse(&body)?)?;
    let (status, answer) = pushed_json(&q.push(&payload, &options).await?);
    Ok((status, axum::Json(answer)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchBody<'a> {
    /// 1 to 1,000 jobs, each as the body of a single push.
    #[serde(borrow)]
    jobs: Vec<PushBody<'a>>,
}

/// `POST /v1/queues/{queue}/batch`: pushes up to 1,000 jobs, answering
/// per job, in order. Nothing is pushed if any job is invalid. A plain
/// queue takes them in one atomic step; a partitioned one in one step per
/// partition, so a failing partition fails only its jobs: those answer
/// `{"id", "error": {"code", "message"}}`, and `failed` counts them (when
/// every job failed, the answer is that error's status instead).
pub(crate) async fn push_batch(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<axum::Json<Value>, ApiError> {
    let q = queue(&state, &name, None)?;
    let body: BatchBody<'_> = parse(&body)?;
    let jobs = body
        .jobs
        .into_iter()
        .map(push_of)
        .collect::<Result<Vec<_>, _>>()?;
    let mut failed = 0;
    let mut answers = Vec::with_capacity(jobs.len());
    let mut last_error = None;
    for answer in q.push_each(&jobs).await? {
        match answer {
            Ok(p) => answers.push(pushed_json(&p).1),
            Err(f) => {
                failed += 1;
                answers.push(json!({"id": f.id, "error": ApiError::uncounted(&f.error).item()}));
                last_error = Some(f.error);
            }
        }
    }
    // Counted once per batch in the store-error metric.
    match last_error.map(ApiError::from) {
        Some(e) if failed == answers.len() => Err(e),
        _ => Ok(axum::Json(json!({"jobs": answers, "failed": failed}))),
    }
}

/// A job's `fields` and its payload twice: as JSON (null if it is not
/// JSON), written out as stored rather than parsed into a tree (a payload
/// of many small values would take many times its size in memory), and
/// as base64.
#[derive(Serialize)]
pub(crate) struct WithPayload<'a> {
    #[serde(flatten)]
    fields: Value,
    payload: Option<&'a RawValue>,
    payload_base64: String,
}

fn with_payload(fields: Value, payload: &[u8]) -> WithPayload<'_> {
    WithPayload {
        fields,
        payload: serde_json::from_slice(payload).ok(),
        payload_base64: STANDARD.encode(payload),
    }
}

fn job_json(job: &Job) -> WithPayload<'_> {
    with_payload(
        json!({"id": job.id, "attempt": job.attempt, "fence": job.fence, "lease_until_ms": ms(job.lease_until)}),
        &job.payload,
    )
}

/// A claim's answer: the first job and all of them.
#[derive(Serialize)]
struct Claimed<'a> {
    job: Option<&'a WithPayload<'a>>,
    jobs: &'a [WithPayload<'a>],
}

/// The answer of `GET /dead` and `GET /completed`: the jobs, and whether
/// the listing stopped at its byte bound ([`tollgate::JOB_LISTING_BYTES`])
/// before `limit`, so that more may follow.
#[derive(Serialize)]
struct Listing<'a> {
    jobs: Vec<WithPayload<'a>>,
    truncated: bool,
}

impl<'a> Listing<'a> {
    /// `jobs`, whose ids, errors and payloads took `bytes`, asked for with
    /// `limit`.
    fn new(jobs: Vec<WithPayload<'a>>, bytes: usize, limit: usize) -> Listing<'a> {
        let truncated = jobs.len() < limit && bytes >= tollgate::JOB_LISTING_BYTES;
        Listing { jobs, truncated }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClaimQuery {
    /// Wait up to this long for a due job (long-poll). Default 0, at most
    /// 60 000.
    #[serde(default)]
    wait_ms: u64,
    /// The visibility lease. Default 30 000.
    lease_ms: Option<u64>,
    /// Claim up to this many jobs (1 to 1,000). Default 1.
    #[serde(default = "one")]
    max: usize,
}

fn one() -> usize {
    1
}

/// `POST /v1/queues/{queue}/claim?wait_ms=&lease_ms=&max=`: `{"job": {…},
/// "jobs": [{…}, …]}` (`job` is the first), or `{"job": null, "jobs": []}`
/// when none came due within the wait.
pub(crate) async fn claim(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<ClaimQuery>,
) -> Result<Response, ApiError> {
    if query.wait_ms > MAX_WAIT_MS {
        return Err(ApiError::bad_request(format!(
            "wait_ms must be at most {MAX_WAIT_MS}"
        )));
    }
    let q = queue(&state, &name, query.lease_ms)?;
    let mut stopping = state.stopping.clone();
    let jobs = tokio::select! {
        jobs = q.next_many(query.max, Duration::from_millis(query.wait_ms)) => jobs?,
        // Shutting down: answer a pending long-poll at once, empty.
        _ = stopping.wait_for(|s| *s) => Vec::new(),
    };
    let jobs: Vec<WithPayload<'_>> = jobs.iter().map(job_json).collect();
    let answer = Claimed {
        job: jobs.first(),
        jobs: &jobs,
    };
    Ok(axum::Json(answer).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FenceBody {
    fence: u64,
    /// nack: retry after this long instead of the job's backoff.
    delay_ms: Option<u64>,
    /// extend: the new lease from now. Default 30 000.
    lease_ms: Option<u64>,
    /// ack: keep the job as completed instead of deleting it.
    keep: Option<KeepBody>,
    /// nack: why the job failed; kept with it (its first 4 KiB) if this
    /// nack makes it dead, and listed as its `last_error`.
    error: Option<String>,
}

/// Retention of acked jobs: the last `count` (1 to 1,000,000) acked with
/// this setting, none older than `max_age_ms`. Kept jobs still dedupe.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KeepBody {
    count: usize,
    max_age_ms: u64,
}

fn keeping(q: ShardedJobQueue, keep: Option<KeepBody>) -> Result<ShardedJobQueue, ApiError> {
    match keep {
        None => Ok(q),
        Some(k) => Ok(q.keep_completed(k.count, Duration::from_millis(k.max_age_ms))?),
    }
}

/// `POST /v1/queues/{queue}/jobs/{id}/ack`.
pub(crate) async fn ack(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    Json(body): Json<FenceBody>,
) -> Result<axum::Json<Value>, ApiError> {
    keeping(queue(&state, &name, None)?, body.keep)?
        .ack(&id, body.fence)
        .await
        .map_err(lease_lost)?;
    Ok(axum::Json(json!({"acked": true})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Delivery {
    id: String,
    fence: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AckBatchBody {
    /// 1 to 1,000 deliveries.
    deliveries: Vec<Delivery>,
    keep: Option<KeepBody>,
}

/// `POST /v1/queues/{queue}/ack`: acks deliveries in one step (one per
/// partition on a partitioned queue); `{"acked": [true, false, …],
/// "failed": 0}` in order (`false`: that delivery's lease had ended, or it
/// was named twice). A delivery whose partition failed answers `null`, and
/// `errors` lists `{"index", "error"}` for each (when all failed, the
/// answer is that error's status instead).
pub(crate) async fn ack_batch(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Json(body): Json<AckBatchBody>,
) -> Result<axum::Json<Value>, ApiError> {
    if body.deliveries.is_empty() {
        return Err(ApiError::bad_request("deliveries must name 1 to 1000 jobs"));
    }
    let q = keeping(queue(&state, &name, None)?, body.keep)?;
    let deliveries: Vec<(&str, u64)> = body.deliveries.iter().map(|d| (d.id.as_str(), d.fence)).collect();
    let mut acked = Vec::with_capacity(deliveries.len());
    let mut errors = Vec::new();
    let mut last_error = None;
    for (index, answer) in q.ack_each(&deliveries).await?.into_iter().enumerate() {
        match answer {
            Ok(flag) => acked.push(Value::Bool(flag)),
            Err(e) => {
                acked.push(Value::Null);
                errors.push(json!({"index": index, "error": ApiError::uncounted(&e).item()}));
                last_error = Some(e);
            }
        }
    }
    match last_error.map(ApiError::from) {
        Some(e) if errors.len() == acked.len() => Err(e),
        _ => {
            let failed = errors.len();
            let mut answer = json!({"acked": acked, "failed": failed});
            if failed > 0 {
                answer["errors"] = Value::Array(errors);
            }
            Ok(axum::Json(answer))
        }
    }
}

/// `GET /v1/queues/{queue}/completed?limit=100`: kept completed jobs, most
/// recent first, bounded in bytes as the library's listing is.
pub(crate) async fn completed(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<DeadQuery>,
) -> Result<Response, ApiError> {
    let q = queue(&state, &name, None)?;
    let limit = query.limit()?;
    let list = q.completed(limit).await?;
    if list.is_empty() {
        known(&state, &name, &q).await?;
    }
    let bytes = list.iter().map(|d| d.id.len() + d.payload.len()).sum();
    let jobs = list
        .iter()
        .map(|d| with_payload(json!({"id": d.id, "acked_ms": ms(d.acked)}), &d.payload))
        .collect();
    Ok(axum::Json(Listing::new(jobs, bytes, limit)).into_response())
}

/// `POST /v1/queues/{queue}/jobs/{id}/nack`.
pub(crate) async fn nack(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    Json(body): Json<FenceBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let retry = body
        .delay_ms
        .map_or(Retry::Backoff, |d| Retry::After(Duration::from_millis(d)));
    let q = queue(&state, &name, None)?;
    let nacked = match &body.error {
        Some(e) => q.nack_with_error(&id, body.fence, retry, e).await,
        None => q.nack(&id, body.fence, retry).await,
    };
    let answer = match nacked.map_err(lease_lost)? {
        Nacked::RetryAt(at) => json!({"result": "retry", "due_ms": ms(at)}),
        Nacked::Dead => json!({"result": "dead"}),
    };
    Ok(axum::Json(answer))
}

/// `POST /v1/queues/{queue}/jobs/{id}/extend`.
pub(crate) async fn extend(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    Json(body): Json<FenceBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let lease = Duration::from_millis(body.lease_ms.unwrap_or(30_000));
    let until = queue(&state, &name, None)?
        .extend(&id, body.fence, lease)
        .await
        .map_err(lease_lost)?;
    Ok(axum::Json(json!({"lease_until_ms": ms(until)})))
}

/// No job `id` (`what`: "job", "waiting job") in queue `name`.
fn not_found(what: &str, id: &str, name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "job_not_found",
        format!("no {what} {id:?} in queue {name:?}"),
    )
}

fn running() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "job_running",
        "the job is being run; it cannot be changed now",
    )
}

/// `DELETE /v1/queues/{queue}/jobs/{id}`: cancel a waiting job (or purge a
/// dead one).
pub(crate) async fn cancel(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<axum::Json<Value>, ApiError> {
    match queue(&state, &name, None)?.cancel(&id).await? {
        Cancelled::Cancelled => Ok(axum::Json(json!({"result": "cancelled"}))),
        Cancelled::Purged => Ok(axum::Json(json!({"result": "purged"}))),
        Cancelled::Running => Err(running()),
        Cancelled::Unknown => Err(not_found("job", &id, &name)),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RescheduleBody {
    delay_ms: u64,
}

/// `POST /v1/queues/{queue}/jobs/{id}/reschedule`.
pub(crate) async fn reschedule(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    Json(body): Json<RescheduleBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let q = queue(&state, &name, None)?;
    match q.reschedule(&id, Duration::from_millis(body.delay_ms)).await? {
        Some(at) => Ok(axum::Json(json!({"due_ms": ms(at)}))),
        None => Err(not_found("waiting job", &id, &name)),
    }
}

/// `GET /v1/queues/{queue}`.
pub(crate) async fn stats(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let q = queue(&state, &name, None)?;
    let s = q.stats().await?;
    if s.is_blank() {
        known(&state, &name, &q).await?;
    }
    let pick = |q: f64| s.recent_lateness_quantile(q).map(|d| d.as_millis() as u64);
    Ok(axum::Json(json!({
        "queue": name, "partitions": q.partitions(), "ready": s.ready, "delayed": s.delayed, "in_flight": s.in_flight, "dead": s.dead, "completed": s.completed,
        "pushed": s.pushed, "claimed": s.claimed, "acked": s.acked, "retried": s.retried,
        "dead_total": s.dead_total, "redelivered": s.redelivered, "paused": s.paused,
        "recent_lateness_p50_ms": pick(0.5), "recent_lateness_p99_ms": pick(0.99),
        "recent_lateness_max_ms": pick(1.0),
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeadQuery {
    #[serde(default = "hundred")]
    limit: usize,
}

fn hundred() -> usize {
    100
}

impl DeadQuery {
    fn limit(&self) -> Result<usize, ApiError> {
        if self.limit == 0 || self.limit > 10_000 {
            return Err(ApiError::bad_request("limit must be 1 to 10000"));
        }
        Ok(self.limit)
    }
}

/// `GET /v1/queues/{queue}/dead?limit=100`: bounded in bytes as the
/// library's listing is.
pub(crate) async fn dead(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<DeadQuery>,
) -> Result<Response, ApiError> {
    let q = queue(&state, &name, None)?;
    let limit = query.limit()?;
    let list = q.dead(limit).await?;
    if list.is_empty() {
        known(&state, &name, &q).await?;
    }
    let bytes = list
        .iter()
        .map(|d| d.id.len() + d.payload.len() + d.last_error.as_ref().map_or(0, String::len))
        .sum();
    let jobs = list
        .iter()
        .map(|d| {
            let fields = json!({"id": d.id, "died_ms": ms(d.died), "attempts": d.attempts,
                                "last_error": d.last_error});
            with_payload(fields, &d.payload)
        })
        .collect();
    Ok(axum::Json(Listing::new(jobs, bytes, limit)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeadBody {
    /// One dead job; every dead job if left out.
    id: Option<String>,
}

/// `POST /v1/queues/{queue}/dead/replay`.
pub(crate) async fn replay(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Json(body): Json<DeadBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let n = queue(&state, &name, None)?.replay(body.id.as_deref()).await?;
    Ok(axum::Json(json!({"replayed": n})))
}

/// `POST /v1/queues/{queue}/dead/purge`.
pub(crate) async fn purge(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Json(body): Json<DeadBody>,
) -> Result<axum::Json<Value>, ApiError> {
    let n = queue(&state, &name, None)?.purge(body.id.as_deref()).await?;
    Ok(axum::Json(json!({"purged": n})))
}

/// A job as `GET /v1/queues/{queue}/jobs/{id}` and the listing answer
/// it (the CLI prints the same): its state's time under that state's
/// word elsewhere in the API (due_ms, lease_until_ms, died_ms, acked_ms),
/// and a preview of the payload: its first bytes as text if they are
/// UTF-8 (a character cut at the end dropped), else as base64.
pub(crate) fn job_info_json(j: &JobInfo) -> Value {
    let preview = &j.payload_preview;
    let text = match std::str::from_utf8(preview) {
        Ok(t) => Some(t),
        // Only a character cut by the preview's end: the text before it.
        Err(e) if e.error_len().is_none() && (preview.len() as u64) < j.payload_size => {
            std::str::from_utf8(&preview[..e.valid_up_to()]).ok()
        }
        Err(_) => None,
    };
    let (encoding, shown) = match text {
        Some(t) => ("utf8", t.to_owned()),
        None => ("base64", STANDARD.encode(preview)),
    };
    let mut v = json!({
        "id": j.id, "state": j.state.as_str(), "attempts": j.attempts, "max_attempts": j.max_attempts,
        "priority": j.priority, "fence": j.fence, "last_error": j.last_error,
        "payload_size": j.payload_size, "payload_preview": shown, "payload_preview_encoding": encoding,
        "payload_truncated": (preview.len() as u64) < j.payload_size,
    });
    let at = match j.state {
        JobState::Delayed => Some("due_ms"),
        JobState::Running => Some("lease_until_ms"),
        JobState::Dead => Some("died_ms"),
        JobState::Completed => Some("acked_ms"),
        _ => None,
    };
    if let (Some(field), Some(t)) = (at, j.at) {
        v[field] = json!(ms(t));
    }
    v
}

/// `GET /v1/queues/{queue}/jobs/{id}`: one job as it stands (read only),
/// with its whole payload too (the listings carry a preview, or a bounded
/// number of payloads). 404 `job_not_found` for a job the store does not
/// hold (never pushed, cancelled, purged, or acked without being kept).
pub(crate) async fn show(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    match queue(&state, &name, None)?.get_with_payload(&id).await? {
        Some((j, payload)) => Ok(axum::Json(shown(&j, &payload)).into_response()),
        None => Err(not_found("job", &id, &name)),
    }
}

/// A job as `GET /v1/queues/{queue}/jobs/{id}` shows it (and the CLI's
/// `jobs show`): [`job_info_json`] and its whole `payload`.
pub(crate) fn shown<'a>(j: &JobInfo, payload: &'a [u8]) -> WithPayload<'a> {
    with_payload(job_info_json(j), payload)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// ready, delayed, running, dead or completed.
    state: String,
    /// A listing's `next`; the start if left out.
    cursor: Option<String>,
    /// 1 to 1,000. Default 100.
    #[serde(default = "hundred")]
    limit: usize,
}

/// `GET /v1/queues/{queue}/jobs?state=dead&cursor=…&limit=100`: a page of
/// the jobs in one state, and the cursor of the next (null at the end).
pub(crate) async fn list(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let job_state: JobState = query.state.parse()?;
    if query.limit == 0 || query.limit > tollgate::MAX_JOB_LIST {
        return Err(ApiError::bad_request(format!(
            "limit must be 1 to {}",
            tollgate::MAX_JOB_LIST
        )));
    }
    let q = queue(&state, &name, None)?;
    let page = q.list(job_state, query.cursor.as_deref(), query.limit).await?;
    if page.jobs.is_empty() && query.cursor.is_none() {
        known(&state, &name, &q).await?;
    }
    let jobs: Vec<Value> = page.jobs.iter().map(job_info_json).collect();
    Ok(axum::Json(json!({"jobs": jobs, "next": page.next})))
}

/// `POST /v1/queues/{queue}/pause`: the queue takes pushes but hands out
/// no jobs until resumed. A queue not yet pushed to may be paused (it then
/// exists).
pub(crate) async fn pause(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let changed = queue(&state, &name, None)?.pause().await?;
    Ok(axum::Json(json!({"paused": true, "changed": changed})))
}

/// `POST /v1/queues/{queue}/resume`: hands out jobs again, waking the
/// consumers waiting in a claim.
pub(crate) async fn resume(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let changed = queue(&state, &name, None)?.resume().await?;
    Ok(axum::Json(json!({"paused": false, "changed": changed})))
}

#[cfg(test)]
mod tests {
    use super::compact;

    #[test]
    fn compact_drops_whitespace_between_tokens_only() {
        let cases = [
            ("1", "1"),
            (r#"{"a":[1,2]}"#, r#"{"a":[1,2]}"#),
            ("{ \"a\" : [ 1 ,\n\t2 ] }", r#"{"a":[1,2]}"#),
            (
                r#"{"s": "x y \" z\\", "t" : "\\"}"#,
                r#"{"s":"x y \" z\\","t":"\\"}"#,
            ),
        ];
        for (json, want) in cases {
            assert_eq!(&*compact(json), want.as_bytes(), "{json}");
        }
        assert!(matches!(compact(r#"{"a":1}"#), std::borrow::Cow::Borrowed(_)));
    }
}
