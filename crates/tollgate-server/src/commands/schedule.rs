//! `tollgate schedule add|list|show|rm|pause|resume|trigger|next`: the
//! library's `Schedules` on the store (--redis), or a `tollgate serve` over
//! HTTP (--server). Either way a schedule comes back as the HTTP API's view
//! of it (one JSON object), so both print the same way.

use std::time::{Duration, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use clap::{Args, Subcommand};
use reqwest::{Method, RequestBuilder};
use serde_json::{Value, json};
use tollgate::schedule::{MAX_CATCH_UP, check_schedule_name};
use tollgate::{ScheduleSpec, Schedules, Store, Upserted};

use super::StoreArgs;
use super::jobs::BackoffArgs;
use super::jobs::{backoff, read_payload};
use super::schedule_view::{
    describe, local, ms, next_text, parse_time, spec_json, table, utc, view, view_when, view_zone, when_of,
    zone_of,
};
use crate::args::duration;
use crate::client::{Failure, Server, Timeout, segment, usage};
use crate::exit;

/// The exit codes every `schedule` command shares, after its own.
macro_rules! schedule_exit_codes {
    ($own:literal) => {
        concat!(
            "Exit codes: ",
            $own,
            "64 bad arguments (the message names the field and what is allowed); \
             69 the store or server is unreachable; 70 an internal error; \
             78 the set-up is wrong (Redis credentials or ACL, --server-token, the URL's DB index)."
        )
    };
}

#[derive(Debug, Subcommand)]
pub(crate) enum ScheduleCommand {
    /// Create schedule NAME, or change it to exactly these settings
    /// (unnamed ones take their defaults). Prints created, changed or
    /// unchanged and the next tick. A changed timing (--when, --zone,
    /// --start, --end) fires from its first tick after now; --paused only
    /// applies to a new schedule (`pause` and `resume` change it).
    #[command(after_help = schedule_exit_codes!("0 created, changed or unchanged; "))]
    Add(ScheduleAddArgs),
    /// Every schedule: name, when, zone, queue, next tick, paused, last
    /// fired (a table; --json: one JSON object per line).
    #[command(after_help = schedule_exit_codes!("0 printed (none: an empty table); "))]
    List(ScheduleListArgs),
    /// Every setting of schedule NAME, its next tick and its recent ticks
    /// with their job ids.
    #[command(after_help = schedule_exit_codes!("0 printed; 65 no such schedule; "))]
    Show(ScheduleNameArgs),
    /// Delete schedule NAME; the jobs it pushed stay.
    #[command(after_help = schedule_exit_codes!("0 deleted; 65 no such schedule; "))]
    Rm(ScheduleNameArgs),
    /// Stop NAME firing until `resume`.
    #[command(after_help = schedule_exit_codes!("0 paused (or already paused); 65 no such schedule; "))]
    Pause(ScheduleNameArgs),
    /// Fire NAME again, from its first tick after now (the ticks of the
    /// pause are not fired later).
    #[command(after_help = schedule_exit_codes!("0 resumed (or not paused); 65 no such schedule; "))]
    Resume(ScheduleNameArgs),
    /// Push one extra job of NAME now (id NAME@manual-<ms>), paused or
    /// not; its ticks do not move. Prints the job id.
    #[command(after_help = schedule_exit_codes!("0 pushed; 65 no such schedule; "))]
    Trigger(ScheduleNameArgs),
    /// The next ticks of an expression, in its zone and in UTC, worked
    /// out here with no store (to check a DST day: --after); or, with
    /// --name, of a stored schedule (within its --start and --end).
    #[command(after_help = schedule_exit_codes!("0 printed; 65 no such schedule (--name); "))]
    Next(ScheduleNextArgs),
}

/// A schedule by name, on the store (--redis) or a `tollgate serve`.
#[derive(Debug, Args)]
pub(crate) struct ScheduleNameArgs {
    /// The schedule's name (letters, digits, _ - . : / @; at most 100 bytes).
    pub(crate) name: String,
    /// Print the schedule (or the answer) as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleListArgs {
    /// One JSON object per schedule and line instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleAddArgs {
    /// The schedule's name (letters, digits, _ - . : / @; at most 100 bytes).
    pub(crate) name: String,
    /// When it fires: cron with 5 fields (minute hour day-of-month month
    /// day-of-week) or 6 (seconds first), `TZ=Zone` before the fields, a
    /// macro (@hourly, @daily, @weekly, @monthly, @yearly), or an interval
    /// `every 30s` [`from <unix ms>`]. A time that a spring-forward skips
    /// fires when the gap ends; a repeated hour fires once (docs/JOBS.md).
    #[arg(long, value_name = "EXPR")]
    pub(crate) when: String,
    /// The IANA zone of a cron expression (e.g. Europe/Berlin) [default:
    /// UTC]; the same as `TZ=Zone` before the fields.
    #[arg(long, value_name = "ZONE")]
    pub(crate) zone: Option<String>,
    /// The queue each tick's job goes to (an unpartitioned one).
    #[arg(long, value_name = "QUEUE")]
    pub(crate) queue: String,
    /// Each job's payload [default: empty].
    #[arg(long, value_name = "TEXT", conflicts_with = "payload_file")]
    pub(crate) payload: Option<String>,
    /// Read the payload from this file (`-`: standard input).
    #[arg(long, value_name = "FILE")]
    pub(crate) payload_file: Option<std::path::PathBuf>,
    /// Higher runs first.
    #[arg(long, default_value_t = 0)]
    pub(crate) priority: u8,
    /// Deliveries of each job before it goes to the dead letters.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub(crate) max_attempts: u32,
    #[command(flatten)]
    pub(crate) backoff: BackoffArgs,
    /// Each job's group (a tenant, a customer): groups take turns at claim
    /// and may have limits of their own (`jobs limits`) [default: the
    /// default group].
    #[arg(long, value_name = "GROUP")]
    pub(crate) group: Option<String>,
    /// Ticks missed while nothing fired (downtime): skip (fire only a tick
    /// less than 60 s late), once (one job for all of them) or all (each,
    /// up to --max-catch-up, the newest).
    #[arg(long, value_parser = misfire, default_value = "skip", value_name = "POLICY")]
    pub(crate) misfire: tollgate::Misfire,
    /// With --misfire all: at most this many missed ticks (1 to 1000).
    #[arg(long, default_value_t = tollgate::schedule::MAX_CATCH_UP, value_name = "N")]
    pub(crate) max_catch_up: usize,
    /// No tick before this time (RFC 3339, e.g. 2026-12-01T00:00:00Z).
    #[arg(long, value_name = "TIME")]
    pub(crate) start: Option<String>,
    /// No tick after this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub(crate) end: Option<String>,
    /// Each job is due up to this long after its tick (a fixed spread per
    /// tick), so schedules sharing a tick do not all start at once.
    #[arg(long, value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) jitter: Option<Duration>,
    /// A new schedule starts paused.
    #[arg(long)]
    pub(crate) paused: bool,
    /// Print the schedule as JSON, with "result".
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleNextArgs {
    /// The expression, as `add --when` takes it.
    #[arg(
        value_name = "EXPR",
        required_unless_present = "name",
        conflicts_with = "name"
    )]
    pub(crate) when: Option<String>,
    /// The zone of the expression, as `add --zone`.
    #[arg(long, value_name = "ZONE", conflicts_with = "name")]
    pub(crate) zone: Option<String>,
    /// A stored schedule instead of an expression (needs --redis or
    /// --server).
    #[arg(long, value_name = "NAME")]
    pub(crate) name: Option<String>,
    /// How many ticks (1 to 1000).
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub(crate) count: usize,
    /// Ticks after this time (RFC 3339, e.g. 2026-03-28T00:00:00Z)
    /// [default: now].
    #[arg(long, value_name = "TIME")]
    pub(crate) after: Option<String>,
    /// JSON: {"zone", "ticks": [{"at_ms", "local", "utc"}]}.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

/// `--misfire`: the library's words and message.
fn misfire(s: &str) -> Result<tollgate::Misfire, String> {
    s.parse().map_err(|e: tollgate::Error| e.message().to_owned())
}

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
        group: args.group.clone(),
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
