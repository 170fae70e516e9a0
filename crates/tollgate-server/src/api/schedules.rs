//! The schedule routes of the HTTP API: `/v1/schedules/…` (issue 17), and
//! the `[schedules.NAME]` tables of the config file, which take the same
//! fields. Firing is not here: every `tollgate serve` fires (serve/firing.rs).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tollgate::schedule::MAX_CATCH_UP;
use tollgate::{ScheduleInfo, ScheduleSpec, Schedules, Upserted, When, WhenPart};

use super::body::{BackoffBody, JsonBody, compact, limited, parse};
use super::error::{ApiError, ListQuery, Query};
use super::tracked::{track, untrack};
use crate::state::AppState;

/// Largest upsert body: a 1 MiB payload, base64-encoded, plus the rest
/// (as a push).
const SCHEDULE_BODY_LIMIT: usize = 1_500_000;
/// Most ticks `…/next` lists.
const MAX_NEXT: usize = 100;

/// The schedule routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/schedules", get(list))
        .route(
            "/v1/schedules/{name}",
            limited(get(show).put(upsert).delete(remove), SCHEDULE_BODY_LIMIT),
        )
        .route("/v1/schedules/{name}/pause", post(pause))
        .route("/v1/schedules/{name}/resume", post(resume))
        .route("/v1/schedules/{name}/trigger", post(trigger))
        .route("/v1/schedules/{name}/next", get(next))
}

/// A field that is wrong: its name (as the API spells it) and why.
#[derive(Debug)]
pub(crate) struct BadField {
    pub(crate) field: &'static str,
    pub(crate) message: String,
}

fn bad(field: &'static str, message: impl Into<String>) -> BadField {
    BadField {
        field,
        message: message.into(),
    }
}

impl From<BadField> for ApiError {
    fn from(b: BadField) -> ApiError {
        ApiError::bad_request(format!("{}: {}", b.field, b.message))
    }
}

/// A schedule's fields as the API and the config file give them.
#[derive(Debug, Default)]
pub(crate) struct Fields {
    pub(crate) when: String,
    pub(crate) zone: Option<String>,
    pub(crate) queue: String,
    pub(crate) payload: Vec<u8>,
    pub(crate) priority: Option<u8>,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) backoff: Option<BackoffBody>,
    pub(crate) group: Option<String>,
    pub(crate) misfire: Option<String>,
    pub(crate) max_catch_up: Option<usize>,
    pub(crate) start_ms: Option<u64>,
    pub(crate) end_ms: Option<u64>,
    pub(crate) jitter: Option<Duration>,
    pub(crate) paused: bool,
}

impl Fields {
    /// The schedule these fields describe, checked field by field (what
    /// the library checks besides, it names in its own words).
    pub(crate) fn spec(self) -> Result<ScheduleSpec, BadField> {
        let when = When::parse_in(&self.when, self.zone.as_deref()).map_err(|(part, e)| match part {
            WhenPart::When => bad("when", e.message()),
            WhenPart::Zone => bad("zone", e.message()),
        })?;
        tollgate::Name::new(&self.queue).map_err(|e| bad("queue", e.message()))?;
        let mut spec = ScheduleSpec::new(when, &self.queue);
        spec.payload = self.payload;
        if let Some(p) = self.priority {
            spec.priority = p;
        }
        if let Some(m) = self.max_attempts {
            if m == 0 || m > 1000 {
                return Err(bad("max_attempts", "must be 1 to 1000"));
            }
            spec.max_attempts = m;
        }
        if let Some(b) = &self.backoff {
            spec.backoff = b.backoff().map_err(|e| bad("backoff", e))?;
            if let tollgate::Backoff::Exponential { base, max } = spec.backoff
                && (base.is_zero() || max < base)
            {
                return Err(bad("backoff", "exponential backoff needs 0 < base_ms <= max_ms"));
            }
        }
        spec.group = self.group;
        if let Some(m) = &self.misfire {
            spec.misfire = m
                .parse()
                .map_err(|e: tollgate::Error| bad("misfire", e.message()))?;
        }
        if let Some(n) = self.max_catch_up {
            if n == 0 || n > MAX_CATCH_UP {
                return Err(bad("max_catch_up", format!("must be 1 to {MAX_CATCH_UP}")));
            }
            spec.max_catch_up = n;
        }
        for (field, at) in [("start_ms", self.start_ms), ("end_ms", self.end_ms)] {
            if at.is_some_and(|ms| ms < 1000) {
                return Err(bad(field, "must be a Unix time in ms after 1970"));
            }
        }
        if let (Some(start), Some(end)) = (self.start_ms, self.end_ms)
            && end <= start
        {
            return Err(bad("end_ms", "must be after start_ms"));
        }
        spec.start = self.start_ms.map(time);
        spec.end = self.end_ms.map(time);
        if let Some(j) = self.jitter {
            if j > tollgate::MAX_JOB_DELAY {
                return Err(bad("jitter_ms", "must be at most a year"));
            }
            spec.jitter = j;
        }
        spec.paused = self.paused;
        Ok(spec)
    }
}

fn time(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The fields a PUT body may have.
const BODY_FIELDS: [&str; 15] = [
    "when",
    "zone",
    "queue",
    "payload",
    "payload_base64",
    "priority",
    "max_attempts",
    "backoff",
    "group",
    "misfire",
    "max_catch_up",
    "start_ms",
    "end_ms",
    "jitter_ms",
    "paused",
];

/// Field `key` of `body` as a `T` (null: left out); the error names it.
fn field<'a, T: Deserialize<'a>>(
    body: &HashMap<String, &'a RawValue>,
    key: &'static str,
    what: &str,
) -> Result<Option<T>, BadField> {
    match body.get(key) {
        None => Ok(None),
        Some(raw) if raw.get() == "null" => Ok(None),
        Some(raw) => serde_json::from_str(raw.get())
            .map(Some)
            .map_err(|e| bad(key, format!("must be {what} ({e})"))),
    }
}

/// A PUT body's fields. Each one is read on its own so that an error
/// names it; an unknown field is refused, as push refuses one.
fn fields_of(bytes: &[u8]) -> Result<Fields, ApiError> {
    let body: HashMap<String, &RawValue> = parse(bytes)?;
    if let Some(unknown) = body.keys().find(|k| !BODY_FIELDS.contains(&k.as_str())) {
        return Err(ApiError::bad_request(format!(
            "unknown field {unknown:?}; allowed are {}",
            BODY_FIELDS.join(", ")
        )));
    }
    let payload = match (
        body.get("payload"),
        field::<String>(&body, "payload_base64", "a string")?,
    ) {
        (Some(v), None) => compact(v.get()).into_owned(),
        (None, Some(b)) => STANDARD
            .decode(b.as_bytes())
            .map_err(|_| bad("payload_base64", "is not valid base64"))?,
        (None, None) => Vec::new(),
        (Some(_), Some(_)) => return Err(bad("payload", "give payload or payload_base64, not both").into()),
    };
    Ok(Fields {
        when: field(&body, "when", "a string")?.ok_or_else(|| {
            bad(
                "when",
                "is required: a cron expression (\"30 2 * * *\", \"TZ=Europe/Berlin @daily\") or an interval (\"every 30s\")",
            )
        })?,
        zone: field(&body, "zone", "a string (an IANA zone)")?,
        queue: field(&body, "queue", "a string")?.ok_or_else(|| bad("queue", "is required"))?,
        payload,
        priority: field(&body, "priority", "an integer 0 to 255")?,
        max_attempts: field(&body, "max_attempts", "an integer 1 to 1000")?,
        backoff: field(
            &body,
            "backoff",
            "{\"kind\": \"fixed\"|\"exponential\", \"base_ms\", \"max_ms\"?}",
        )?,
        group: field(&body, "group", "a string (a group key)")?,
        misfire: field(&body, "misfire", "a string: skip, once or all")?,
        max_catch_up: field(&body, "max_catch_up", "an integer 1 to 1000")?,
        start_ms: field(&body, "start_ms", "a Unix time in ms")?,
        end_ms: field(&body, "end_ms", "a Unix time in ms")?,
        jitter: field::<u64>(&body, "jitter_ms", "a number of ms")?.map(Duration::from_millis),
        paused: field(&body, "paused", "true or false")?.unwrap_or(false),
    })
}

/// A schedule as the API shows it.
fn view(info: &ScheduleInfo) -> Value {
    let spec = &info.spec;
    let (when, zone) = match &spec.when {
        When::Cron(c) => (c.fields().to_owned(), c.zone().to_owned()),
        other => (other.to_string(), "UTC".to_owned()),
    };
    let recent: Vec<Value> = info
        .recent
        .iter()
        .map(|t| json!({"job_id": t.job_id, "at_ms": ms(t.at), "manual": t.manual}))
        .collect();
    let mut v = json!({
        "name": info.name, "when": when, "zone": zone, "queue": spec.queue,
        "priority": spec.priority, "max_attempts": spec.max_attempts,
        "backoff": BackoffBody::of(&spec.backoff), "group": spec.group, "misfire": spec.misfire.to_string(),
        "max_catch_up": spec.max_catch_up, "start_ms": spec.start.map(ms), "end_ms": spec.end.map(ms),
        "jitter_ms": spec.jitter.as_millis() as u64, "paused": info.paused,
        "next_ms": info.next.map(ms), "recent": recent,
    });
    match serde_json::from_slice::<Value>(&spec.payload) {
        Ok(payload) => v["payload"] = payload,
        Err(_) => v["payload_base64"] = Value::String(STANDARD.encode(&spec.payload)),
    }
    v
}

fn not_found(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "schedule_not_found",
        format!("no schedule {name:?}"),
    )
}

async fn found(state: &AppState, name: &str) -> Result<ScheduleInfo, ApiError> {
    let info = Schedules::new(&state.store)
        .get(name)
        .await?
        .ok_or_else(|| not_found(name))?;
    // Only a schedule that exists: made-up names must not take the
    // series' places.
    track(&state.schedules, name);
    Ok(info)
}

/// `PUT /v1/schedules/{name}`: creates (201) or changes (200) it.
async fn upsert(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    tollgate::schedule::check_schedule_name(&name)?;
    let spec = fields_of(&body)?.spec()?;
    let (status, result) = match Schedules::new(&state.store).upsert(&name, &spec).await? {
        Upserted::Created => (StatusCode::CREATED, "created"),
        Upserted::Changed => (StatusCode::OK, "changed"),
        Upserted::Unchanged => (StatusCode::OK, "unchanged"),
    };
    let mut answer = view(&found(&state, &name).await?);
    answer["result"] = Value::from(result);
    Ok((status, axum::Json(answer)).into_response())
}

/// `GET /v1/schedules`: every schedule, by name.
async fn list(
    State(state): State<AppState>,
    Query(q): Query<ListQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let q = q.checked()?;
    let mut all = Schedules::new(&state.store).list().await?;
    all.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    let (page, next) = q.page(all.iter().map(|s| s.name.as_str()));
    let items: Vec<Value> = all
        .iter()
        .filter(|s| page.binary_search(&s.name.as_str()).is_ok())
        .map(view)
        .collect();
    Ok(axum::Json(json!({"schedules": items, "next": next})))
}

/// `GET /v1/schedules/{name}`.
async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    Ok(axum::Json(view(&found(&state, &name).await?)))
}

/// `DELETE /v1/schedules/{name}`: the jobs it pushed stay.
async fn remove(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    if Schedules::new(&state.store).delete(&name).await? {
        untrack(&state.schedules, &name);
        Ok(axum::Json(json!({"deleted": true})))
    } else {
        Err(not_found(&name))
    }
}

/// `POST /v1/schedules/{name}/pause`.
async fn pause(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    if !Schedules::new(&state.store).pause(&name).await? {
        return Err(not_found(&name));
    }
    Ok(axum::Json(view(&found(&state, &name).await?)))
}

/// `POST /v1/schedules/{name}/resume`: from the first tick after now.
async fn resume(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    if !Schedules::new(&state.store).resume(&name).await? {
        return Err(not_found(&name));
    }
    Ok(axum::Json(view(&found(&state, &name).await?)))
}

/// `POST /v1/schedules/{name}/trigger`: one extra job now.
async fn trigger(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    match Schedules::new(&state.store).trigger(&name).await? {
        Some(id) => Ok(axum::Json(json!({"job_id": id}))),
        None => Err(not_found(&name)),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NextQuery {
    /// 1 to 100; default 5.
    count: Option<usize>,
}

/// `GET /v1/schedules/{name}/next?count=5`: the next ticks, from the
/// stored next one, within the schedule's end.
async fn next(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<NextQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let count = query.count.unwrap_or(5);
    if count == 0 || count > MAX_NEXT {
        return Err(bad("count", format!("must be 1 to {MAX_NEXT}")).into());
    }
    let info = found(&state, &name).await?;
    let end = info.spec.end.map_or(u64::MAX, ms);
    let mut ticks = Vec::with_capacity(count);
    let mut tick = info.next.map(ms);
    while let Some(t) = tick.filter(|t| *t <= end && ticks.len() < count) {
        ticks.push(t);
        tick = info.spec.when.next_after(t);
    }
    Ok(axum::Json(json!({"next_ms": ticks})))
}

/// A schedule in the config file: `[schedules.NAME]`, the fields of the
/// PUT body with times as text (`start`, `end`: RFC 3339; `jitter`: a
/// duration) and `payload` as a string, pushed as its bytes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScheduleSettings {
    pub(crate) when: String,
    pub(crate) zone: Option<String>,
    pub(crate) queue: String,
    pub(crate) payload: Option<String>,
    pub(crate) priority: Option<u8>,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) backoff: Option<BackoffBody>,
    pub(crate) group: Option<String>,
    pub(crate) misfire: Option<String>,
    pub(crate) max_catch_up: Option<usize>,
    pub(crate) start: Option<String>,
    pub(crate) end: Option<String>,
    pub(crate) jitter: Option<String>,
    pub(crate) paused: Option<bool>,
}

impl ScheduleSettings {
    /// The schedule `[schedules.NAME]` describes; the error names
    /// `schedules.NAME.field`.
    pub(crate) fn spec(&self, name: &str) -> Result<ScheduleSpec, String> {
        tollgate::schedule::check_schedule_name(name).map_err(|e| format!("schedules.{name}: {e}"))?;
        let at = |field: &str, why: String| format!("schedules.{name}.{field}: {why}");
        let instant = |field: &str, text: &Option<String>| -> Result<Option<u64>, String> {
            let Some(text) = text else { return Ok(None) };
            let t = chrono::DateTime::parse_from_rfc3339(text).map_err(|e| {
                at(
                    field,
                    format!("{text:?} is not an RFC 3339 time like \"2026-01-01T00:00:00Z\" ({e})"),
                )
            })?;
            u64::try_from(t.timestamp_millis())
                .map(Some)
                .map_err(|_| at(field, format!("{text:?} is before 1970")))
        };
        let fields = Fields {
            when: self.when.clone(),
            zone: self.zone.clone(),
            queue: self.queue.clone(),
            payload: self.payload.clone().unwrap_or_default().into_bytes(),
            priority: self.priority,
            max_attempts: self.max_attempts,
            backoff: self.backoff.clone(),
            group: self.group.clone(),
            misfire: self.misfire.clone(),
            max_catch_up: self.max_catch_up,
            start_ms: instant("start", &self.start)?,
            end_ms: instant("end", &self.end)?,
            jitter: match &self.jitter {
                None => None,
                Some(text) => Some(crate::args::duration(text).map_err(|e| at("jitter", e))?),
            },
            paused: self.paused.unwrap_or(false),
        };
        fields.spec().map_err(|b| {
            // The config file's names of the API's fields.
            let field = match b.field {
                "start_ms" => "start",
                "end_ms" => "end",
                "jitter_ms" => "jitter",
                other => other,
            };
            at(field, b.message)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(body: Value) -> Result<ScheduleSpec, String> {
        let bytes = serde_json::to_vec(&body).expect("json");
        fields_of(&bytes)
            .and_then(|f| f.spec().map_err(ApiError::from))
            .map_err(|e| e.item()["message"].as_str().unwrap_or_default().to_owned())
    }

    #[test]
    fn a_bad_field_is_named() {
        let cases = [
            (json!({"queue": "q"}), "when"),
            (json!({"when": "every 1s"}), "queue"),
            (json!({"when": "61 * * * *", "queue": "q"}), "when"),
            (json!({"when": "every 1s", "queue": "q", "zone": "UTC"}), "zone"),
            (
                json!({"when": "TZ=UTC @daily", "queue": "q", "zone": "UTC"}),
                "zone",
            ),
            (
                json!({"when": "@daily", "queue": "q", "zone": "Mars/Base"}),
                "zone",
            ),
            (json!({"when": "@daily", "queue": "bad queue"}), "queue"),
            (
                json!({"when": "@daily", "queue": "q", "priority": 256}),
                "priority",
            ),
            (
                json!({"when": "@daily", "queue": "q", "max_attempts": 0}),
                "max_attempts",
            ),
            (
                json!({"when": "@daily", "queue": "q", "backoff": {"kind": "x", "base_ms": 1}}),
                "backoff",
            ),
            (
                json!({"when": "@daily", "queue": "q", "misfire": "never"}),
                "misfire",
            ),
            (
                json!({"when": "@daily", "queue": "q", "max_catch_up": 1001}),
                "max_catch_up",
            ),
            (
                json!({"when": "@daily", "queue": "q", "start_ms": -1}),
                "start_ms",
            ),
            (
                json!({"when": "@daily", "queue": "q", "start_ms": 5000, "end_ms": 5000}),
                "end_ms",
            ),
            (
                json!({"when": "@daily", "queue": "q", "jitter_ms": "1s"}),
                "jitter_ms",
            ),
            (json!({"when": "@daily", "queue": "q", "paused": 1}), "paused"),
            (
                json!({"when": "@daily", "queue": "q", "payload_base64": "!"}),
                "payload_base64",
            ),
            (
                json!({"when": "@daily", "queue": "q", "payload": 1, "payload_base64": ""}),
                "payload",
            ),
            (json!({"when": "@daily", "queue": "q", "colour": "red"}), "colour"),
        ];
        for (body, field) in cases {
            let e = spec(body.clone()).expect_err(&body.to_string());
            assert!(e.contains(field), "{body}: {e}");
        }
    }

    #[test]
    fn a_zone_applies_to_the_fields() {
        let s = spec(json!({"when": "30 2 * * *", "zone": "Europe/Berlin", "queue": "q"})).expect("spec");
        assert_eq!(s.when.to_string(), "TZ=Europe/Berlin 30 2 * * *");
    }

    #[test]
    fn config_times_are_rfc_3339() {
        let s: ScheduleSettings = toml::from_str(
            "when = \"@daily\"\nqueue = \"q\"\nstart = \"2026-01-01T01:00:00+01:00\"\njitter = \"2s\"\npayload = \"hi\"",
        )
        .expect("toml");
        let spec = s.spec("nightly").expect("spec");
        assert_eq!(spec.start.map(ms), Some(1_767_225_600_000));
        assert_eq!(
            (spec.jitter, spec.payload.as_slice()),
            (Duration::from_secs(2), &b"hi"[..])
        );
        let s: ScheduleSettings =
            toml::from_str("when = \"@daily\"\nqueue = \"q\"\nend = \"tomorrow\"").expect("toml");
        let e = s.spec("nightly").expect_err("bad end");
        assert!(e.starts_with("schedules.nightly.end: "), "{e}");
        let s: ScheduleSettings =
            toml::from_str("when = \"@daily\"\nqueue = \"q\"\njitter = \"5\"").expect("toml");
        assert!(
            s.spec("n")
                .expect_err("bad jitter")
                .starts_with("schedules.n.jitter: ")
        );
    }
}
