//! `tollgate schedule` as separate processes against a real redis-server:
//! the round trip of every command, `next` on DST days with no store, bad
//! input (exit 64) and unknown schedules (exit 65), three `jobs work
//! --schedules` firing one every-second schedule (each tick's job runs
//! once), and `--server` against a stub that answers as the HTTP contract
//! says (the real routes are tested with the server).

#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use support::RedisServer;

fn tollgate() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    c.env_remove("TOLLGATE_REDIS_URL")
        .env_remove("TOLLGATE_SERVER")
        .env("TOLLGATE_LOG", "warn");
    c
}

/// `tollgate <args>` to completion.
fn run(args: &[&str]) -> Output {
    tollgate().args(args).output().expect("run tollgate")
}

/// `tollgate schedule <args> --redis <url>`.
fn schedule(url: &str, args: &[&str]) -> Output {
    tollgate()
        .arg("schedule")
        .args(args)
        .args(["--redis", url])
        .output()
        .expect("run tollgate schedule")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

#[test]
fn add_list_show_pause_resume_trigger_rm_on_redis() {
    let redis = RedisServer::start();
    let url = redis.url();
    let add = [
        "add",
        "nightly",
        "--when",
        "30 2 * * *",
        "--zone",
        "Europe/Berlin",
        "--queue",
        "reports",
        "--payload",
        r#"{"kind":"nightly"}"#,
        "--max-attempts",
        "3",
    ];
    let out = schedule(&url, &add);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.starts_with(r#"created schedule "nightly"; next tick "#),
        "{text}"
    );
    // 02:30 in Berlin: +01:00 or +02:00, whatever the day.
    assert!(text.contains("T02:30:00+0"), "{text}");
    assert!(stdout(&schedule(&url, &add)).starts_with("unchanged"));
    let mut changed = add.to_vec();
    changed.extend(["--priority", "7", "--group", "tenant-a", "--json"]);
    let v = json_of(&schedule(&url, &changed));
    assert_eq!(v["result"], "changed", "{v}");
    assert_eq!(v["priority"], 7);
    assert_eq!(v["group"], "tenant-a", "{v}");

    let out = schedule(
        &url,
        &[
            "add",
            "beat",
            "--when",
            "every 1h",
            "--queue",
            "pings",
            "--payload",
            "plain text",
            "--misfire",
            "all",
            "--max-catch-up",
            "10",
            "--start",
            "2030-01-01T00:00:00Z",
            "--end",
            "2030-01-02T00:00:00+01:00",
            "--jitter",
            "5s",
            "--backoff",
            "fixed",
            "--backoff-base",
            "10s",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout(&out).contains("next tick 2030-01-01T00:00:00+00:00 UTC (2030-01-01T00:00:00Z)"),
        "{out:?}"
    );

    // The table: a header and one row each, by name.
    let table = stdout(&schedule(&url, &["list"]));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    for word in ["NAME", "WHEN", "ZONE", "QUEUE", "NEXT", "PAUSED", "LAST FIRED"] {
        assert!(lines[0].contains(word), "{table}");
    }
    assert!(
        lines[1].starts_with("beat ") && lines[1].contains("every 1h"),
        "{table}"
    );
    assert!(
        lines[2].starts_with("nightly ")
            && lines[2].contains("Europe/Berlin")
            && lines[2].contains("reports"),
        "{table}"
    );
    let listed: Vec<Value> = stdout(&schedule(&url, &["list", "--json"]))
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(listed.len(), 2);

    // Every field, as the HTTP API's view.
    let v = json_of(&schedule(&url, &["show", "beat", "--json"]));
    assert_eq!(v["when"], "every 1h");
    assert_eq!(v["zone"], Value::Null);
    assert_eq!(v["queue"], "pings");
    assert_eq!(v["payload_base64"], STANDARD.encode("plain text"));
    assert_eq!(v["misfire"], "all");
    assert_eq!(v["max_catch_up"], 10);
    assert_eq!(v["start_ms"], 1_893_456_000_000_u64);
    assert_eq!(v["end_ms"], 1_893_538_800_000_u64);
    assert_eq!(v["jitter_ms"], 5000);
    assert_eq!(v["backoff"], json!({"kind": "fixed", "base_ms": 10_000}));
    assert_eq!(v["next_ms"], 1_893_456_000_000_u64);
    let v = json_of(&schedule(&url, &["show", "nightly", "--json"]));
    assert_eq!(
        (v["when"].as_str(), v["zone"].as_str()),
        (Some("30 2 * * *"), Some("Europe/Berlin"))
    );
    assert_eq!(v["payload"], json!({"kind": "nightly"}));
    assert_eq!(
        (v["max_attempts"].as_u64(), v["paused"].as_bool()),
        (Some(3), Some(false))
    );

    let out = schedule(&url, &["pause", "nightly"]);
    assert_eq!(stdout(&out).trim(), r#"paused schedule "nightly""#, "{out:?}");
    let v = json_of(&schedule(&url, &["show", "nightly", "--json"]));
    assert_eq!((v["paused"].as_bool(), v["next_ms"].as_u64()), (Some(true), None));
    assert!(stdout(&schedule(&url, &["show", "nightly"])).contains("next tick:    none (paused)"));

    // A trigger pushes a job even while paused; its id is printed, and it
    // is in the schedule's recent ticks and in the queue.
    let out = schedule(&url, &["trigger", "nightly"]);
    assert!(out.status.success(), "{out:?}");
    let id = stdout(&out).trim().to_owned();
    assert!(id.starts_with("nightly@manual-"), "{id}");
    let shown = stdout(&schedule(&url, &["show", "nightly"]));
    assert!(shown.contains(&format!("{id}  (trigger)")), "{shown}");
    assert!(
        shown.contains(r#"payload:      {"kind":"nightly"} (JSON)"#),
        "{shown}"
    );
    assert!(shown.contains("group:        tenant-a\n"), "{shown}");
    let stats = json_of(&run(&["jobs", "stats", "reports", "--redis", &url]));
    assert_eq!(
        (&stats["ready"], &stats["groups"]),
        (&json!(1), &json!(1)),
        "{stats}"
    );
    let job = json_of(&run(&["jobs", "show", "reports", &id, "--redis", &url]));
    assert_eq!(job["group"], "tenant-a", "{job}");

    let out = schedule(&url, &["resume", "nightly"]);
    assert!(
        stdout(&out).starts_with(r#"resumed schedule "nightly"; next tick 20"#),
        "{out:?}"
    );
    let v = json_of(&schedule(&url, &["show", "nightly", "--json"]));
    assert!(v["next_ms"].as_u64().is_some(), "{v}");

    // The next ticks of a stored schedule: within its start and end.
    let out = schedule(&url, &["next", "--name", "beat", "--count", "30"]);
    assert!(out.status.success(), "{out:?}");
    let ticks = stdout(&out);
    assert_eq!(ticks.lines().count(), 24, "{ticks}");
    assert!(
        ticks.starts_with("2030-01-01T00:00:00+00:00 UTC  2030-01-01T00:00:00Z\n"),
        "{ticks}"
    );
    assert!(
        ticks.ends_with("2030-01-01T23:00:00+00:00 UTC  2030-01-01T23:00:00Z\n"),
        "{ticks}"
    );

    let out = schedule(&url, &["rm", "nightly"]);
    assert_eq!(stdout(&out).trim(), r#"deleted schedule "nightly""#);
    assert_eq!(schedule(&url, &["show", "nightly"]).status.code(), Some(65));
    assert_eq!(stdout(&schedule(&url, &["list"])).lines().count(), 2);

    // A payload from a file, kept byte for byte.
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("payload");
    std::fs::write(&file, b"\xff\x00raw").expect("payload file");
    let file = file.to_str().expect("path");
    let args = [
        "add",
        "filed",
        "--when",
        "@daily",
        "--queue",
        "q",
        "--payload-file",
        file,
    ];
    assert!(schedule(&url, &args).status.success());
    let v = json_of(&schedule(&url, &["show", "filed", "--json"]));
    assert_eq!(v["payload_base64"], STANDARD.encode(b"\xff\x00raw"), "{v}");
    assert!(stdout(&schedule(&url, &["show", "filed"])).contains("payload:      5 bytes, not UTF-8"));
}

/// `next` on DST days, with no store: a time in Berlin's spring-forward
/// gap fires when the gap ends, and New York's repeated 01:30 fires once.
#[test]
fn next_shows_dst_days_in_the_zone_and_in_utc() {
    let out = run(&[
        "schedule",
        "next",
        "30 2 * * *",
        "--zone",
        "Europe/Berlin",
        "--after",
        "2026-03-28T00:00:00Z",
        "--count",
        "3",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout(&out),
        "2026-03-28T02:30:00+01:00 CET  2026-03-28T01:30:00Z\n\
         2026-03-29T03:00:00+02:00 CEST  2026-03-29T01:00:00Z\n\
         2026-03-30T02:30:00+02:00 CEST  2026-03-30T00:30:00Z\n"
    );
    // The same with TZ= in the expression, as JSON.
    let v = json_of(&run(&[
        "schedule",
        "next",
        "TZ=Europe/Berlin 30 2 * * *",
        "--after",
        "2026-03-28T12:00:00Z",
        "--count",
        "1",
        "--json",
    ]));
    assert_eq!(
        v,
        json!({"zone": "Europe/Berlin", "ticks": [{"at_ms": 1_774_746_000_000_u64,
            "local": "2026-03-29T03:00:00+02:00 CEST", "utc": "2026-03-29T01:00:00Z"}]})
    );
    let out = run(&[
        "schedule",
        "next",
        "30 1 * * *",
        "--zone",
        "America/New_York",
        "--after",
        "2026-10-31T12:00:00Z",
        "--count",
        "3",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout(&out),
        "2026-11-01T01:30:00-04:00 EDT  2026-11-01T05:30:00Z\n\
         2026-11-02T01:30:00-05:00 EST  2026-11-02T06:30:00Z\n\
         2026-11-03T01:30:00-05:00 EST  2026-11-03T06:30:00Z\n"
    );
    // Wildcard hours follow elapsed time: both passes of the repeated hour.
    let out = run(&[
        "schedule",
        "next",
        "30 * * * *",
        "--zone",
        "America/New_York",
        "--after",
        "2026-11-01T04:00:00Z",
        "--count",
        "3",
    ]);
    assert_eq!(
        stdout(&out),
        "2026-11-01T00:30:00-04:00 EDT  2026-11-01T04:30:00Z\n\
         2026-11-01T01:30:00-04:00 EDT  2026-11-01T05:30:00Z\n\
         2026-11-01T01:30:00-05:00 EST  2026-11-01T06:30:00Z\n"
    );
}

#[test]
fn bad_input_exits_64_naming_the_field() {
    let redis = RedisServer::start();
    let url = redis.url();
    let add = |extra: &[&str]| {
        let mut args = vec!["schedule", "add", "s"];
        if !extra.contains(&"--when") {
            args.extend(["--when", "every 1s"]);
        }
        if !extra.contains(&"--queue") {
            args.extend(["--queue", "q"]);
        }
        args.extend(extra);
        args.extend(["--redis", url.as_str()]);
        run(&args)
    };
    for (extra, says) in [
        (vec!["--when", "61 2 * * *"], "cron minute field"),
        (vec!["--when", "* * *"], "fields"),
        (vec!["--when", "30 2 * * *", "--zone", "Mars/Olympus"], "--zone"),
        (vec!["--when", "TZ=Mars/Olympus 30 2 * * *"], "zone"),
        (vec!["--when", "every 0s"], "interval"),
        (vec!["--when", "every 1s", "--zone", "Europe/Berlin"], "UTC"),
        (vec!["--queue", "no spaces"], "queue"),
        (vec!["--misfire", "sometimes"], "skip, once, all"),
        (vec!["--max-catch-up", "0"], "--max-catch-up"),
        (vec!["--max-attempts", "0"], "max_attempts"),
        (
            vec!["--start", "2026-12-02T00:00:00Z", "--end", "2026-12-01T00:00:00Z"],
            "--end must be after --start",
        ),
        (vec!["--start", "tomorrow"], "RFC 3339"),
        (vec!["--jitter", "5"], "needs a unit"),
        (vec!["--group", "two words"], "group key"),
    ] {
        let out = add(&extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{extra:?}: {out:?}");
        assert!(err.contains(says), "{extra:?}: {err} should say {says}");
    }
    for (args, says) in [
        (
            vec!["schedule", "show", "no spaces", "--redis", &url],
            "schedule name",
        ),
        (vec!["schedule", "next", "every 0s"], "interval"),
        (vec!["schedule", "next", "@daily", "--count", "0"], "--count"),
        (vec!["schedule", "next", "@daily", "--after", "noon"], "RFC 3339"),
        (vec!["schedule", "list"], "no store given"),
    ] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {out:?}");
        assert!(err.contains(says), "{args:?}: {err} should say {says}");
    }
    // `next` takes its expression as an argument, not --when; a bare
    // number is suggested seconds (schedules take no milliseconds).
    let out = run(&["schedule", "next", "every 30"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(err.contains("tollgate: EXPR: "), "{err}");
    assert!(!err.contains("--when") && !err.contains("30ms"), "{err}");
    assert!(err.contains("30s"), "{err}");
    let out = add(&["--when", "every 30"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--when: ") && !err.contains("30ms"), "{err}");
    // Nothing was stored.
    assert_eq!(stdout(&run(&["schedule", "list", "--json", "--redis", &url])), "");
}

#[test]
fn an_unknown_schedule_exits_65() {
    let redis = RedisServer::start();
    let url = redis.url();
    for command in ["show", "rm", "pause", "resume", "trigger"] {
        let out = schedule(&url, &[command, "nope"]);
        assert_eq!(out.status.code(), Some(65), "{command}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(r#"no such schedule "nope""#),
            "{out:?}"
        );
    }
    assert_eq!(
        schedule(&url, &["next", "--name", "nope"]).status.code(),
        Some(65)
    );
}

/// A worker in its own process group, killed (with its commands) on drop.
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.0.id() as i32), Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < timeout,
            "{what} did not happen within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Three workers fire one every-second schedule for 8 s: each tick's job
/// is pushed by one of them and run once.
#[test]
fn three_workers_with_schedules_run_each_tick_once() {
    let redis = RedisServer::start();
    let url = redis.url();
    let dir = tempfile::tempdir().expect("dir");
    let ran = dir.path().join("ran");
    let script = format!(r#"echo "$TOLLGATE_JOB_ID" >> {}"#, ran.display());
    let logs: Vec<_> = (0..3)
        .map(|i| dir.path().join(format!("worker{i}.log")))
        .collect();
    let workers: Vec<Worker> = logs
        .iter()
        .map(|log| {
            let child = tollgate()
                .env("TOLLGATE_LOG", "warn,tollgate::worker=info")
                .args(["jobs", "work", "ticks", "--schedules", "--redis", &url])
                .args(["--", "sh", "-c", &script])
                .process_group(0)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(log).expect("log"))
                .spawn()
                .expect("spawn worker");
            Worker(child)
        })
        .collect();
    // The workers fire from their start; the schedule comes after. Every
    // tick is fired even if a loaded machine makes it late (--misfire all).
    std::thread::sleep(Duration::from_secs(1));
    let out = schedule(
        &url,
        &[
            "add",
            "beat",
            "--when",
            "every 1s",
            "--queue",
            "ticks",
            "--misfire",
            "all",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    std::thread::sleep(Duration::from_secs(8));
    let out = schedule(&url, &["pause", "beat"]);
    assert!(out.status.success(), "{out:?}");
    let stats = || json_of(&run(&["jobs", "stats", "ticks", "--redis", &url]));
    wait_for("the queue drained", Duration::from_secs(10), || {
        let s = stats();
        s["ready"] == 0 && s["delayed"] == 0 && s["in_flight"] == 0
    });
    // SIGTERM: each stops firing and claiming, and exits 0.
    let mut workers = workers;
    for w in &workers {
        kill(Pid::from_raw(w.0.id() as i32), Signal::SIGTERM).expect("SIGTERM");
    }
    for w in &mut workers {
        let mut status = None;
        wait_for("a worker's exit after SIGTERM", Duration::from_secs(10), || {
            status = w.0.try_wait().expect("try_wait");
            status.is_some()
        });
        assert!(status.is_some_and(|s| s.success()), "{status:?}");
    }

    let lines = std::fs::read_to_string(&ran).expect("ran");
    let mut ticks: Vec<u64> = lines
        .lines()
        .map(|id| {
            id.strip_prefix("beat@")
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("job id {id:?}"))
        })
        .collect();
    let count = ticks.len();
    ticks.sort_unstable();
    ticks.dedup();
    assert_eq!(ticks.len(), count, "a tick ran twice: {lines}");
    assert!((6..=10).contains(&count), "{count} ticks in 8 s: {lines}");
    assert!(ticks.iter().all(|t| t % 1000 == 0), "{ticks:?}");
    assert!(
        ticks.windows(2).all(|w| w[1] - w[0] == 1000),
        "not consecutive: {ticks:?}"
    );
    assert_eq!(stats()["acked"].as_u64(), Some(count as u64));
    // Each push was logged once, by whichever worker made it; the tick
    // fired ahead (up to a second before it was due) when the pause came
    // was logged and then taken back by the pause, so never ran.
    let fired: usize = logs
        .iter()
        .map(|log| {
            std::fs::read_to_string(log)
                .expect("log")
                .lines()
                .filter(|l| l.contains("schedule fired") && l.contains("schedule=beat"))
                .count()
        })
        .sum();
    assert!(
        fired == count || fired == count + 1,
        "{fired} fired, {count} ran: {logs:?}"
    );
}

/// What a stub server saw: method, path and body of each request.
type Seen = Arc<Mutex<Vec<(String, String, Value)>>>;

/// An HTTP/1.1 stub on a free port answering each request with
/// `answer(method, path)`: (status, JSON body). One connection at a time.
fn stub(answer: fn(&str, &str) -> (u16, Value)) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let seen: Seen = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().expect("clone"));
            let mut head = String::new();
            let _ = reader.read_line(&mut head);
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((k, v)) = line.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let mut words = head.split_whitespace();
            let (method, path) = (
                words.next().unwrap_or("").to_owned(),
                words.next().unwrap_or("").to_owned(),
            );
            let (status, reply) = answer(&method, &path);
            log.lock().expect("seen").push((
                method,
                path,
                serde_json::from_slice(&body).unwrap_or(Value::Null),
            ));
            let reply = reply.to_string();
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    (base, seen)
}

fn stub_view() -> Value {
    json!({"name": "nightly", "when": "30 2 * * *", "zone": "Europe/Berlin", "queue": "reports",
        "payload": {"a": 1}, "priority": 0, "max_attempts": 5,
        "backoff": {"kind": "exponential", "base_ms": 1000, "max_ms": 300_000},
        "misfire": "skip", "max_catch_up": 1000, "start_ms": null, "end_ms": null, "jitter_ms": 0,
        "paused": false, "next_ms": 1_774_746_000_000_u64,
        "recent": [{"job_id": "nightly@1774661400000", "at_ms": 1_774_661_400_000_u64, "manual": false}]})
}

fn stub_answer(method: &str, path: &str) -> (u16, Value) {
    match (method, path) {
        ("PUT", "/v1/schedules/nightly") => {
            let mut v = stub_view();
            v["result"] = json!("created");
            (201, v)
        }
        ("GET", "/v1/schedules" | "/v1/schedules?limit=1000") => {
            (200, json!({"schedules": [stub_view()], "next": null}))
        }
        ("GET", "/v1/schedules/nightly") | ("POST", "/v1/schedules/nightly/resume") => (200, stub_view()),
        // An interval whose zone the server names anyway.
        ("GET", "/v1/schedules/beat") => {
            let mut v = stub_view();
            (v["name"], v["when"], v["zone"]) = (json!("beat"), json!("every 1h"), json!("UTC"));
            (200, v)
        }
        ("POST", "/v1/schedules/nightly/trigger") => (200, json!({"job_id": "nightly@manual-1"})),
        ("DELETE", "/v1/schedules/nightly") => (200, json!({"deleted": true})),
        _ => (
            404,
            json!({"error": {"code": "schedule_not_found", "message": "no schedule named so"}}),
        ),
    }
}

/// `--server`: what the commands send and how they read the answers, as
/// the HTTP contract of /v1/schedules says (against a stub).
#[test]
fn through_a_server_the_commands_speak_the_http_contract() {
    let (base, seen) = stub(stub_answer);
    let server = |args: &[&str]| {
        tollgate()
            .arg("schedule")
            .args(args)
            .args(["--server", &base])
            .output()
            .expect("run")
    };
    let add = |payload: &str| {
        server(&[
            "add",
            "nightly",
            "--when",
            "30 2 * * *",
            "--zone",
            "Europe/Berlin",
            "--queue",
            "reports",
            "--payload",
            payload,
            "--start",
            "2026-01-01T00:00:00Z",
        ])
    };
    let out = add(r#"{"a": 1}"#);
    assert_eq!(
        stdout(&out),
        "created schedule \"nightly\"; next tick 2026-03-29T03:00:00+02:00 CEST (2026-03-29T01:00:00Z)\n",
        "{out:?}"
    );
    let (method, path, body) = seen.lock().expect("seen").pop().expect("a request");
    assert_eq!((method.as_str(), path.as_str()), ("PUT", "/v1/schedules/nightly"));
    assert_eq!(
        body,
        json!({"when": "30 2 * * *", "zone": "Europe/Berlin", "queue": "reports", "payload": {"a": 1},
            "priority": 0, "max_attempts": 5,
            "backoff": {"kind": "exponential", "base_ms": 1000, "max_ms": 300_000}, "group": null,
            "misfire": "skip", "max_catch_up": 1000, "start_ms": 1_767_225_600_000_u64, "end_ms": null,
            "jitter_ms": 0, "paused": false})
    );
    // Not JSON: its bytes, in base64.
    assert!(add("plain text").status.success());
    let (_, _, body) = seen.lock().expect("seen").pop().expect("a request");
    assert_eq!(body["payload_base64"], STANDARD.encode("plain text"));
    assert!(body.get("payload").is_none(), "{body}");

    let table = stdout(&server(&["list"]));
    assert!(
        table.lines().nth(1).is_some_and(|l| l.starts_with("nightly ")),
        "{table}"
    );
    let shown = stdout(&server(&["show", "nightly"]));
    assert!(shown.contains("nightly@1774661400000"), "{shown}");
    assert!(shown.contains(r#"payload:      {"a":1} (JSON)"#), "{shown}");
    assert_eq!(stdout(&server(&["trigger", "nightly"])), "nightly@manual-1\n");
    assert!(stdout(&server(&["resume", "nightly"])).starts_with("resumed schedule"));
    assert!(server(&["rm", "nightly"]).status.success());
    let ticks = stdout(&server(&[
        "next",
        "--name",
        "nightly",
        "--after",
        "2026-03-28T12:00:00Z",
        "--count",
        "1",
    ]));
    assert_eq!(ticks, "2026-03-29T03:00:00+02:00 CEST  2026-03-29T01:00:00Z\n");
    let ticks = stdout(&server(&[
        "next",
        "--name",
        "beat",
        "--after",
        "2026-01-01T00:30:00Z",
        "--count",
        "2",
    ]));
    assert_eq!(
        ticks,
        "2026-01-01T01:00:00+00:00 UTC  2026-01-01T01:00:00Z\n2026-01-01T02:00:00+00:00 UTC  2026-01-01T02:00:00Z\n"
    );
    // schedule_not_found is exit 65, with the server's message.
    for args in [
        &["show", "other"][..],
        &["rm", "other"],
        &["pause", "other"],
        &["trigger", "other"],
    ] {
        let out = server(args);
        assert_eq!(out.status.code(), Some(65), "{args:?}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("no schedule named so (404)"));
    }
    // Bad input never reaches the server.
    let before = seen.lock().expect("seen").len();
    let out = server(&["add", "x", "--when", "every 1s", "--queue", "no spaces"]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert_eq!(seen.lock().expect("seen").len(), before);
}

#[test]
fn work_schedules_refuses_a_server() {
    let out = run(&[
        "jobs",
        "work",
        "q",
        "--schedules",
        "--server",
        "http://127.0.0.1:9",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--schedules"));
}

/// Every `schedule` command's --help ends with its exit codes.
#[test]
fn every_schedule_help_lists_its_exit_codes() {
    for command in ["add", "list", "show", "rm", "pause", "resume", "trigger", "next"] {
        let help = stdout(&run(&["schedule", command, "--help"]));
        assert!(help.contains("Exit codes: 0 "), "{command}: {help}");
        assert!(
            help.contains("64 bad arguments") && help.contains("69 "),
            "{command}: {help}"
        );
        if command != "add" && command != "list" {
            assert!(help.contains("65 no such schedule"), "{command}: {help}");
        }
    }
    let help = stdout(&run(&["jobs", "work", "--help"]));
    assert!(help.contains("--schedules"), "{help}");
}
