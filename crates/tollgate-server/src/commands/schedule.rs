//! `tollgate schedule add|list|show|rm|pause|resume|trigger|next`: the
//! library's `Schedules` on the store (--redis), or a `tollgate serve` over
//! HTTP (--server). Either way a schedule comes back as the HTTP API's view
//! of it (one JSON object), so both print the same way.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::DateTime;
use chrono_tz::Tz;
use reqwest::{Method, RequestBuilder};
use serde_json::{Value, json};
use tollgate::schedule::{MAX_CATCH_UP, check_schedule_name};
use tollgate::{Backoff, ScheduleInfo, ScheduleSpec, Schedules, Store, Upserted, When, WhenPart};

use super::jobs::{backoff, read_payload};
use crate::cli::{
    ScheduleAddArgs, ScheduleCommand, ScheduleListArgs, ScheduleNameArgs, ScheduleNextArgs, StoreArgs,
};
use crate::client::{Failure, Server, Timeout, segment, usage};
use crate::exit;

pub(crate) async fn run(command: ScheduleCommand) -> i32 {
    let done = match command {
        ScheduleCommand::Add(a) => add(a).await,
        ScheduleCommand::List(a) => list(a).await,
        ScheduleCommand::Show(a) => show(a).await,
        ScheduleCommand::Rm(a) => rm(a).await,
        ScheduleCommand::Pause(a) => set_paused(a, true).await,
        ScheduleCommand::Resume(a) => set_paused(a, false).await,
        ScheduleCommand::Trigger(a) => trigger(a).await,
        ScheduleCommand::Next(a) => next(a).await,
    };
    match done {
        Ok(()) => 0,
        Err(f) => {
            // A store that cannot be reached was told where it happened.
            if !f.message.is_empty() {
                eprintln!("tollgate: {}", f.message);
            }
            f.code
        }
    }
}

/// Where the schedules are.
enum Place {
    Local(Schedules),
    Remote(Server),
}

fn no_such(name: &str) -> Failure {
    Failure {
        code: exit::NO_SUCH,
        message: format!("no such schedule {name:?}"),
    }
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Place {
    /// The schedules on `--server` if given, else on the store.
    async fn open(store: &StoreArgs) -> Result<Place, Failure> {
        match &store.server {
            Some(server) => Ok(Place::Remote(Server::new(
                server,
                store.server_token.clone(),
                Timeout::Total(Duration::from_secs(30)),
            )?)),
            None => {
                let store = store.connect().await.map_err(|code| Failure {
                    code,
                    message: String::new(),
                })?;
                Ok(Place::Local(Schedules::new(&store)))
            }
        }
    }

    /// Sends `req` to the server; a 2xx answer's JSON, else the failure
    /// the server named (`schedule_not_found`: exit 65).
    async fn call(server: &Server, req: RequestBuilder) -> Result<(u16, Value), Failure> {
        let answer = server.send(req).await?;
        if (200..300).contains(&answer.status) {
            return Ok((answer.status, answer.body));
        }
        Err(server.failure(&answer))
    }

    fn path(name: &str, action: &str) -> String {
        format!("/v1/schedules/{}{action}", segment(name))
    }

    /// Creates or changes `name`: what it did and the schedule's view.
    /// `text`: the payload as given by --payload (sent as JSON when it is).
    async fn upsert(
        &self,
        name: &str,
        spec: &ScheduleSpec,
        text: Option<&str>,
    ) -> Result<(String, Value), Failure> {
        match self {
            Place::Local(s) => {
                let result = match s.upsert(name, spec).await? {
                    Upserted::Created => "created",
                    Upserted::Changed => "changed",
                    Upserted::Unchanged => "unchanged",
                };
                Ok((result.to_owned(), self.get(name).await?))
            }
            Place::Remote(server) => {
                let mut body = spec_json(spec);
                // An interval has no zone: the field is left out.
                if body["zone"].is_null()
                    && let Some(fields) = body.as_object_mut()
                {
                    fields.remove("zone");
                }
                match text.and_then(|t| serde_json::from_str::<Value>(t).ok()) {
                    Some(v) => body["payload"] = v,
                    None => body["payload_base64"] = json!(STANDARD.encode(&spec.payload)),
                }
                let req = server.request(Method::PUT, &Self::path(name, "")).json(&body);
                let (status, view) = Self::call(server, req).await?;
                let result = match view["result"].as_str() {
                    Some(r) => r.to_owned(),
                    None if status == 201 => "created".to_owned(),
                    None => "changed".to_owned(),
                };
                Ok((result, view))
            }
        }
    }

    /// The view of schedule `name`; exit 65 if there is none.
    async fn get(&self, name: &str) -> Result<Value, Failure> {
        match self {
            Place::Local(s) => match s.get(name).await? {
                Some(info) => Ok(view(&info)),
                None => Err(no_such(name)),
            },
            Place::Remote(server) => {
                let req = server.request(Method::GET, &Self::path(name, ""));
                Ok(Self::call(server, req).await?.1)
            }
        }
    }

    /// Every schedule's view, by name.
    async fn list(&self) -> Result<Vec<Value>, Failure> {
        match self {
            Place::Local(s) => Ok(s.list().await?.iter().map(view).collect()),
            Place::Remote(server) => {
                // The server answers a page at a time: follow `next`.
                let mut all = Vec::new();
                let mut path = "/v1/schedules?limit=1000".to_owned();
                loop {
                    let req = server.request(Method::GET, &path);
                    let (_, v) = Self::call(server, req).await?;
                    all.extend(v["schedules"].as_array().cloned().unwrap_or_default());
                    match v["next"].as_str() {
                        Some(next) => path = format!("/v1/schedules?limit=1000&cursor={}", segment(next)),
                        None => return Ok(all),
                    }
                }
            }
        }
    }

    async fn delete(&self, name: &str) -> Result<(), Failure> {
        match self {
            Place::Local(s) => match s.delete(name).await? {
                true => Ok(()),
                false => Err(no_such(name)),
            },
            Place::Remote(server) => {
                let req = server.request(Method::DELETE, &Self::path(name, ""));
                Self::call(server, req).await.map(|_| ())
            }
        }
    }

    /// Pauses or resumes `name`; its view after.
    async fn set_paused(&self, name: &str, pause: bool) -> Result<Value, Failure> {
        match self {
            Place::Local(s) => {
                let found = if pause {
                    s.pause(name).await?
                } else {
                    s.resume(name).await?
                };
                if !found {
                    return Err(no_such(name));
                }
                self.get(name).await
            }
            Place::Remote(server) => {
                let action = if pause { "/pause" } else { "/resume" };
                let req = server.request(Method::POST, &Self::path(name, action));
                Ok(Self::call(server, req).await?.1)
            }
        }
    }

    /// Pushes one extra job of `name`: its id.
    async fn trigger(&self, name: &str) -> Result<String, Failure> {
        match self {
            Place::Local(s) => s.trigger(name).await?.ok_or_else(|| no_such(name)),
            Place::Remote(server) => {
                let req = server.request(Method::POST, &Self::path(name, "/trigger"));
                let (_, v) = Self::call(server, req).await?;
                v["job_id"].as_str().map(str::to_owned).ok_or_else(|| Failure {
                    code: exit::SOFTWARE,
                    message: format!("the server answered a trigger with {v}"),
                })
            }
        }
    }
}

/// The API's `when` (without `TZ=`) and `zone` (none for an interval).
fn when_and_zone(when: &When) -> (String, Option<String>) {
    match when {
        When::Cron(c) => (c.fields().to_owned(), Some(c.zone().to_owned())),
        When::Every(_) => (when.to_string(), None),
    }
}

fn backoff_json(b: &Backoff) -> Value {
    match b {
        Backoff::Fixed(d) => json!({"kind": "fixed", "base_ms": d.as_millis() as u64}),
        Backoff::Exponential { base, max } => json!({"kind": "exponential",
            "base_ms": base.as_millis() as u64, "max_ms": max.as_millis() as u64}),
    }
}

/// A spec's fields as the HTTP API takes and shows them (no payload).
fn spec_json(spec: &ScheduleSpec) -> Value {
    let (when, zone) = when_and_zone(&spec.when);
    json!({
        "when": when,
        "zone": zone,
        "queue": spec.queue,
        "priority": spec.priority,
        "max_attempts": spec.max_attempts,
        "backoff": backoff_json(&spec.backoff),
        "misfire": spec.misfire.to_string(),
        "max_catch_up": spec.max_catch_up,
        "start_ms": spec.start.map(ms),
        "end_ms": spec.end.map(ms),
        "jitter_ms": spec.jitter.as_millis() as u64,
        "paused": spec.paused,
    })
}

/// A stored schedule as the HTTP API shows it.
fn view(info: &ScheduleInfo) -> Value {
    let spec = &info.spec;
    let mut v = spec_json(spec);
    v["name"] = json!(info.name);
    v["paused"] = json!(info.paused);
    v["next_ms"] = json!(info.next.map(ms));
    v["recent"] = info
        .recent
        .iter()
        .map(|t| json!({"job_id": t.job_id, "at_ms": ms(t.at), "manual": t.manual}))
        .collect();
    // The payload as JSON when it is JSON, else its bytes in base64 (the
    // API's two forms).
    match serde_json::from_slice::<Value>(&spec.payload) {
        Ok(p) => v["payload"] = p,
        Err(_) => v["payload_base64"] = json!(STANDARD.encode(&spec.payload)),
    }
    v
}

/// An expression (`add --when`, or `next`'s EXPR: `what` names it) and
/// `--zone` as one `When`; bad input names the argument and what is
/// allowed.
fn when_of(what: &str, expr: &str, zone: Option<&str>) -> Result<When, Failure> {
    When::parse_in(expr, zone).map_err(|(part, e)| {
        let flag = match part {
            WhenPart::When => what,
            WhenPart::Zone => "--zone",
        };
        usage(format!("{flag}: {}", e.message()))
    })
}

/// The `When` of a view: its `when` in its `zone` (a cron expression's;
/// an interval's zone, if a server names one, is UTC whatever it says).
fn view_when(name: &str, v: &Value) -> Result<When, Failure> {
    let expr = v["when"].as_str().unwrap_or_default().trim();
    let zone = v["zone"].as_str();
    let is_cron = !expr.get(..6).is_some_and(|w| w.eq_ignore_ascii_case("every "))
        && !expr.split_whitespace().next().is_some_and(|w| w.contains('='));
    let parsed = match zone {
        Some(zone) if is_cron => When::cron(expr, zone),
        _ => When::parse(expr),
    };
    parsed.map_err(|e| Failure {
        code: exit::SOFTWARE,
        message: format!(
            "schedule {name:?} has a `when` this version cannot read ({expr:?}, zone {zone:?}): {}",
            e.message()
        ),
    })
}

/// An RFC 3339 time given to `flag`.
fn parse_time(flag: &str, t: &str) -> Result<SystemTime, Failure> {
    let bad = |why: String| {
        usage(format!(
            "{flag} {t:?}: {why}; allowed is an RFC 3339 time after 1970, e.g. 2026-12-01T00:00:00Z or 2026-12-01T01:00:00+01:00"
        ))
    };
    let parsed = DateTime::parse_from_rfc3339(t.trim()).map_err(|e| bad(e.to_string()))?;
    let ms = u64::try_from(parsed.timestamp_millis()).map_err(|_| bad("before 1970".to_owned()))?;
    Ok(UNIX_EPOCH + Duration::from_millis(ms))
}

/// The zone ticks are shown in: a cron expression's, else UTC.
fn zone_of(when: &When) -> Tz {
    match when {
        When::Cron(c) => c.zone().parse().unwrap_or(Tz::UTC),
        When::Every(_) => Tz::UTC,
    }
}

/// `ms` as wall-clock time in `zone`, with its offset and abbreviation:
/// `2026-03-29T03:00:00+02:00 CEST`.
fn local(ms: u64, zone: Tz) -> String {
    match DateTime::from_timestamp_millis(ms as i64) {
        Some(t) => t
            .with_timezone(&zone)
            .format("%Y-%m-%dT%H:%M:%S%:z %Z")
            .to_string(),
        None => format!("{ms} ms"),
    }
}

/// `ms` in UTC: `2026-03-29T01:00:00Z`.
fn utc(ms: u64) -> String {
    match DateTime::from_timestamp_millis(ms as i64) {
        Some(t) => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => format!("{ms} ms"),
    }
}

/// The zone of a view (`null` for an interval: UTC).
fn view_zone(v: &Value) -> Tz {
    v["zone"].as_str().and_then(|z| z.parse().ok()).unwrap_or(Tz::UTC)
}

/// A tick of a view, in its zone and in UTC; `none` when there is none.
fn tick_text(ms: Option<u64>, zone: Tz, none: &str) -> String {
    match ms {
        Some(ms) => format!("{} ({})", local(ms, zone), utc(ms)),
        None => none.to_owned(),
    }
}

/// What the next tick of a view is, in words.
fn next_text(v: &Value) -> String {
    let none = if v["paused"].as_bool() == Some(true) {
        "none (paused)"
    } else {
        "none (no tick left)"
    };
    tick_text(v["next_ms"].as_u64(), view_zone(v), none)
}

async fn add(args: ScheduleAddArgs) -> Result<(), Failure> {
    // Bad input is refused before any connection, with the flag's name.
    check_schedule_name(&args.name).map_err(|e| usage(e.message().to_owned()))?;
    let when = when_of("--when", &args.when, args.zone.as_deref())?;
    if args.max_catch_up == 0 || args.max_catch_up > MAX_CATCH_UP {
        return Err(usage(format!(
            "--max-catch-up {}: allowed is 1 to {MAX_CATCH_UP}",
            args.max_catch_up
        )));
    }
    let start = args
        .start
        .as_deref()
        .map(|t| parse_time("--start", t))
        .transpose()?;
    let end = args.end.as_deref().map(|t| parse_time("--end", t)).transpose()?;
    if let (Some(s), Some(e)) = (start, end)
        && e <= s
    {
        return Err(usage("--end must be after --start"));
    }
    let payload = match (&args.payload, &args.payload_file) {
        (Some(text), _) => text.clone().into_bytes(),
        (None, Some(file)) => read_payload(Some(file.clone())).await?,
        (None, None) => Vec::new(),
    };
    let spec = ScheduleSpec {
        when,
        queue: args.queue.clone(),
        payload,
        priority: args.priority,
        max_attempts: args.max_attempts,
        backoff: backoff(&args.backoff)?,
        misfire: args.misfire,
        max_catch_up: args.max_catch_up,
        start,
        end,
        jitter: args.jitter.unwrap_or(Duration::ZERO),
        paused: args.paused,
    };
    let place = Place::open(&args.store).await?;
    if let Place::Remote(_) = place {
        // The library's own checks (queue name, attempts, payload size,
        // jitter) on a scratch embedded store, so bad input through a
        // server reads as it does on Redis and never waits on the network.
        Schedules::new(&Store::memory())
            .upsert(&args.name, &spec)
            .await
            .map_err(Failure::from)?;
    }
    let (result, mut v) = place.upsert(&args.name, &spec, args.payload.as_deref()).await?;
    if args.json {
        v["result"] = json!(result);
        println!("{v}");
    } else {
        println!("{result} schedule {:?}; next tick {}", args.name, next_text(&v));
    }
    Ok(())
}

/// Checks a name given to a command, before any connection.
fn checked(name: &str) -> Result<(), Failure> {
    check_schedule_name(name)
        .map(|_| ())
        .map_err(|e| usage(e.message().to_owned()))
}

async fn show(args: ScheduleNameArgs) -> Result<(), Failure> {
    checked(&args.name)?;
    let v = Place::open(&args.store).await?.get(&args.name).await?;
    if args.json {
        println!("{v}");
    } else {
        print!("{}", describe(&v));
    }
    Ok(())
}

async fn rm(args: ScheduleNameArgs) -> Result<(), Failure> {
    checked(&args.name)?;
    Place::open(&args.store).await?.delete(&args.name).await?;
    if args.json {
        println!("{}", json!({"deleted": true}));
    } else {
        println!("deleted schedule {:?}", args.name);
    }
    Ok(())
}

async fn set_paused(args: ScheduleNameArgs, pause: bool) -> Result<(), Failure> {
    checked(&args.name)?;
    let v = Place::open(&args.store)
        .await?
        .set_paused(&args.name, pause)
        .await?;
    if args.json {
        println!("{v}");
    } else if pause {
        println!("paused schedule {:?}", args.name);
    } else {
        println!("resumed schedule {:?}; next tick {}", args.name, next_text(&v));
    }
    Ok(())
}

async fn trigger(args: ScheduleNameArgs) -> Result<(), Failure> {
    checked(&args.name)?;
    let id = Place::open(&args.store).await?.trigger(&args.name).await?;
    if args.json {
        println!("{}", json!({"job_id": id}));
    } else {
        println!("{id}");
    }
    Ok(())
}

async fn list(args: ScheduleListArgs) -> Result<(), Failure> {
    let views = Place::open(&args.store).await?.list().await?;
    if args.json {
        for v in &views {
            println!("{v}");
        }
        return Ok(());
    }
    let mut rows = vec![["NAME", "WHEN", "ZONE", "QUEUE", "NEXT", "PAUSED", "LAST FIRED"].map(str::to_owned)];
    for v in &views {
        let zone = view_zone(v);
        let text = |key: &str| v[key].as_str().unwrap_or("-").to_owned();
        let last = v["recent"]
            .as_array()
            .and_then(|r| r.last())
            .and_then(|t| t["at_ms"].as_u64());
        rows.push([
            text("name"),
            text("when"),
            zone.name().to_owned(),
            text("queue"),
            v["next_ms"].as_u64().map_or("-".to_owned(), |t| local(t, zone)),
            if v["paused"].as_bool() == Some(true) {
                "yes"
            } else {
                "no"
            }
            .to_owned(),
            last.map_or("-".to_owned(), |t| local(t, zone)),
        ]);
    }
    print!("{}", table(&rows));
    Ok(())
}

/// Rows as columns padded to their widest cell, two spaces apart.
fn table(rows: &[[String; 7]]) -> String {
    let mut widths = [0; 7];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// A duration in ms, as `30s` or `1h 30m`.
fn span(ms: u64) -> String {
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}

/// Every field of a view, one per line, and its recent ticks.
fn describe(v: &Value) -> String {
    let zone = view_zone(v);
    let num = |key: &str| v[key].as_u64().map_or("-".to_owned(), |n| n.to_string());
    let at = |key: &str| tick_text(v[key].as_u64(), zone, "-");
    let payload = match (&v["payload"], v["payload_base64"].as_str()) {
        (Value::Null, Some(b)) => match STANDARD.decode(b) {
            Ok(bytes) if bytes.is_empty() => "(empty)".to_owned(),
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => format!("{text:?} (text)"),
                Err(e) => format!("{} bytes, not UTF-8", e.as_bytes().len()),
            },
            Err(_) => format!("base64 {b}"),
        },
        (p, _) => format!("{p} (JSON)"),
    };
    let b = &v["backoff"];
    let backoff = match (b["kind"].as_str(), b["base_ms"].as_u64(), b["max_ms"].as_u64()) {
        (Some("fixed"), Some(base), _) => format!("fixed {}", span(base)),
        (Some(kind), Some(base), Some(max)) => format!("{kind} {} to {}", span(base), span(max)),
        _ => b.to_string(),
    };
    let fields = [
        ("name", v["name"].as_str().unwrap_or("-").to_owned()),
        ("when", v["when"].as_str().unwrap_or("-").to_owned()),
        ("zone", zone.name().to_owned()),
        ("queue", v["queue"].as_str().unwrap_or("-").to_owned()),
        ("payload", payload),
        ("priority", num("priority")),
        ("max attempts", num("max_attempts")),
        ("backoff", backoff),
        ("misfire", v["misfire"].as_str().unwrap_or("-").to_owned()),
        ("max catch-up", num("max_catch_up")),
        ("start", at("start_ms")),
        ("end", at("end_ms")),
        ("jitter", v["jitter_ms"].as_u64().map_or("-".to_owned(), span)),
        (
            "paused",
            if v["paused"].as_bool() == Some(true) {
                "yes"
            } else {
                "no"
            }
            .to_owned(),
        ),
        ("next tick", next_text(v)),
    ];
    let mut out = String::new();
    for (label, value) in fields {
        out.push_str(&format!("{:<14}{value}\n", format!("{label}:")));
    }
    let recent = v["recent"].as_array().cloned().unwrap_or_default();
    if recent.is_empty() {
        out.push_str("recent ticks: none\n");
    } else {
        out.push_str("recent ticks (oldest first):\n");
        for t in recent {
            let manual = if t["manual"].as_bool() == Some(true) {
                "  (trigger)"
            } else {
                ""
            };
            out.push_str(&format!(
                "  {}  {}{manual}\n",
                tick_text(t["at_ms"].as_u64(), zone, "-"),
                t["job_id"].as_str().unwrap_or("-"),
            ));
        }
    }
    out
}

async fn next(args: ScheduleNextArgs) -> Result<(), Failure> {
    if args.count == 0 || args.count > 1000 {
        return Err(usage(format!("--count {}: allowed is 1 to 1000", args.count)));
    }
    let after = match &args.after {
        Some(t) => ms(parse_time("--after", t)?),
        None => ms(SystemTime::now()),
    };
    // The expression, and the bounds of a stored schedule.
    let (when, start, end) = match (&args.name, &args.when) {
        (Some(name), _) => {
            checked(name)?;
            let v = Place::open(&args.store).await?.get(name).await?;
            (view_when(name, &v)?, v["start_ms"].as_u64(), v["end_ms"].as_u64())
        }
        (None, Some(expr)) => (when_of("EXPR", expr, args.zone.as_deref())?, None, None),
        (None, None) => return Err(usage("give an expression, or --name NAME of a stored schedule")),
    };
    let zone = zone_of(&when);
    let mut ticks = Vec::new();
    // Strictly after --after, and not before the start.
    let mut t = start.map_or(after, |s| after.max(s.saturating_sub(1)));
    while ticks.len() < args.count {
        match when.next_after(t) {
            Some(tick) if end.is_none_or(|e| tick <= e) => {
                ticks.push(tick);
                t = tick;
            }
            _ => break,
        }
    }
    if args.json {
        let ticks: Vec<Value> = ticks
            .iter()
            .map(|&t| json!({"at_ms": t, "local": local(t, zone), "utc": utc(t)}))
            .collect();
        println!("{}", json!({"zone": zone.name(), "ticks": ticks}));
        return Ok(());
    }
    for t in &ticks {
        println!("{}  {}", local(*t, zone), utc(*t));
    }
    if ticks.len() < args.count {
        eprintln!("tollgate: no tick after these (the expression's or the schedule's end)");
    }
    Ok(())
}
