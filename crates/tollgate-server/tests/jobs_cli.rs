//! `tollgate jobs` as separate processes against a real redis-server (and
//! through a `tollgate serve` with `--server`): push and work, retries to
//! the dead letters, a worker killed mid-job, and no job lost while
//! workers are killed at random and Redis restarts.

mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use support::RedisServer;
use tollgate::{ErrorKind, JobQueue, PushOptions, Store};

fn tollgate() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    c.env_remove("TOLLGATE_REDIS_URL").env("TOLLGATE_LOG", "warn");
    c
}

/// `--server URL` for an http:// URL (a `tollgate serve`), else `--redis URL`.
fn at(url: &str) -> [&str; 2] {
    if url.starts_with("http://") {
        ["--server", url]
    } else {
        ["--redis", url]
    }
}

fn push(url: &str, queue: &str, payload: &str, extra: &[&str]) -> Output {
    let mut child = tollgate()
        .args(["jobs", "push", queue])
        .args(at(url))
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn push");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(payload.as_bytes())
        .expect("payload");
    child.wait_with_output().expect("push")
}

/// A worker in its own process group, killed (with its commands) on drop.
struct Worker(Child);

impl Worker {
    fn start(url: &str, queue: &str, extra: &[&str], cmd: &[&str]) -> Worker {
        let child = tollgate()
            .args(["jobs", "work", queue])
            .args(at(url))
            .args(extra)
            .arg("--")
            .args(cmd)
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn worker");
        Worker(child)
    }

    fn kill(&mut self) {
        let _ = killpg(Pid::from_raw(self.0.id() as i32), Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < timeout,
            "{what} did not happen within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn push_work_retry_and_dead_letters_on_redis() {
    let redis = RedisServer::start();
    push_work_retry_and_dead_letters(&redis.url());
}

/// The same through a `tollgate serve` on its embedded store (`--server`).
#[test]
fn push_work_retry_and_dead_letters_through_a_server() {
    let server = serve_support::Server::start(None);
    push_work_retry_and_dead_letters(&server.base);
}

fn push_work_retry_and_dead_letters(url: &str) {
    let url = url.to_owned();
    let dir = tempfile::tempdir().expect("dir");
    for i in 0..10 {
        let out = push(&url, "mail", &format!("message {i}\n"), &[]);
        assert!(out.status.success(), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(v["result"], "created");
    }
    // A job that always fails, with two attempts.
    let out = push(
        &url,
        "mail",
        "poison\n",
        &["--id", "poison", "--max-attempts", "2"],
    );
    assert!(out.status.success());
    assert_eq!(
        push(&url, "mail", "again\n", &["--id", "poison"]).status.code(),
        Some(0)
    );
    let log = dir.path().join("log");
    let script = format!(
        r#"read line; case "$line" in poison) exit 3;; esac; echo "$TOLLGATE_JOB_ID $TOLLGATE_ATTEMPT $line" >> {}"#,
        log.display()
    );
    let mut w = Worker::start(
        &url,
        "mail",
        &["--concurrency", "3", "--idle-exit", "3s"],
        &["sh", "-c", &script],
    );
    let status = w.0.wait().expect("worker");
    assert!(status.success(), "{status}");
    let lines = std::fs::read_to_string(&log).expect("log");
    assert_eq!(lines.lines().count(), 10, "{lines}");
    for i in 0..10 {
        assert!(lines.contains(&format!(" 1 message {i}")), "{lines}");
    }
    let stats: serde_json::Value = serde_json::from_slice(
        &tollgate()
            .args(["jobs", "stats", "mail"])
            .args(at(&url))
            .output()
            .expect("stats")
            .stdout,
    )
    .expect("json");
    assert_eq!(
        (
            stats["acked"].as_u64(),
            stats["dead"].as_u64(),
            stats["retried"].as_u64()
        ),
        (Some(10), Some(1), Some(1)),
        "{stats}"
    );
    let dead = tollgate()
        .args(["jobs", "dead", "mail"])
        .args(at(&url))
        .output()
        .expect("dead");
    let dead = String::from_utf8_lossy(&dead.stdout).into_owned();
    assert!(
        dead.contains(r#""id":"poison""#) && dead.contains(r#""attempts":2"#),
        "{dead}"
    );
    let out = tollgate()
        .args(["jobs", "replay", "mail"])
        .args(at(&url))
        .output()
        .expect("replay");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), r#"{"replayed":1}"#);
    // Bad input: clear messages, exit 64.
    let flag = at(&url)[0];
    for args in [
        vec!["jobs", "push", "", flag, url.as_str()],
        vec!["jobs", "push", "q", "--delay", "-5s", flag, url.as_str()],
        vec!["jobs", "push", "q", "--at", "yesterday", flag, url.as_str()],
        vec!["jobs", "push", "q", "--max-attempts", "0", flag, url.as_str()],
        vec![
            "jobs",
            "work",
            "q",
            "--concurrency",
            "0",
            flag,
            url.as_str(),
            "--",
            "true",
        ],
        vec!["jobs", "stats", "q"],
        vec!["jobs", "stats", "q", "--server", "ftp://example.org"],
    ] {
        let out = tollgate().args(&args).stdin(Stdio::null()).output().expect("run");
        assert_eq!(
            out.status.code(),
            Some(64),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stderr.is_empty());
    }
    // A server that is not there: exit 69 (unavailable).
    let out = tollgate()
        .args(["jobs", "stats", "q", "--server", "http://127.0.0.1:1"])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A worker killed with SIGKILL in the middle of a job: the job comes back
/// after its lease, to another worker, with a higher fence; the first
/// delivery's fence can no longer ack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_job_is_delivered_again() {
    let redis = RedisServer::start();
    let url = redis.url();
    let store = Store::redis(&url).await.expect("connect");
    let q = JobQueue::new(&store, "crashy").expect("queue");
    let id = q.push("work", &PushOptions::default()).await.expect("push").id;
    let dir = tempfile::tempdir().expect("dir");
    let record = |name: &str| {
        format!(
            r#"echo "$TOLLGATE_FENCE $TOLLGATE_ATTEMPT" > {}; sleep 30"#,
            dir.path().join(name).display()
        )
    };
    let mut first = Worker::start(
        &url,
        "crashy",
        &["--lease", "1s"],
        &["sh", "-c", &record("first")],
    );
    let path = dir.path().join("first");
    wait_for(
        "the first worker to start the job",
        Duration::from_secs(10),
        || path.exists(),
    );
    std::thread::sleep(Duration::from_millis(100));
    first.kill();
    let (fence1, attempt1) = read_pair(&std::fs::read_to_string(&path).expect("first"));
    assert_eq!(attempt1, 1);
    let killed = Instant::now();
    let _second = Worker::start(
        &url,
        "crashy",
        &["--lease", "5s"],
        &["sh", "-c", &record("second")],
    );
    let path = dir.path().join("second");
    wait_for("another worker to get the job", Duration::from_secs(10), || {
        std::fs::read_to_string(&path).is_ok_and(|s| s.ends_with('\n'))
    });
    let (fence2, attempt2) = read_pair(&std::fs::read_to_string(&path).expect("second"));
    assert!(
        killed.elapsed() >= Duration::from_millis(700),
        "redelivered before the lease ended"
    );
    assert_eq!(attempt2, 2);
    assert!(fence2 > fence1, "{fence2} after {fence1}");
    let err = q.ack(&id, fence1).await.expect_err("the dead worker's fence");
    assert_eq!(err.kind(), ErrorKind::LeaseLost);
    assert_eq!(q.stats().await.expect("stats").redelivered, 1);
}

fn read_pair(s: &str) -> (u64, u32) {
    let mut parts = s.split_whitespace();
    (
        parts.next().and_then(|p| p.parse().ok()).expect("fence"),
        parts.next().and_then(|p| p.parse().ok()).expect("attempt"),
    )
}

/// 20,000 jobs; workers killed at random 50 times while they run; Redis
/// restarted once (AOF, appendfsync always). Every job is acked, none is
/// lost; runs beyond one per job only come from redelivery, and are
/// counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_job_is_lost_through_kills_and_a_redis_restart() {
    let mut redis = RedisServer::start_aof();
    let url = redis.url();
    let store = Store::redis(&url).await.expect("connect");
    let q = JobQueue::new(&store, "durable").expect("queue");
    const JOBS: usize = 20_000;
    let pushers: Vec<_> = (0..10)
        .map(|p| {
            let q = q.clone();
            tokio::spawn(async move {
                for i in (p..JOBS).step_by(10) {
                    q.push(format!("{i}"), &PushOptions::default())
                        .await
                        .expect("push");
                }
            })
        })
        .collect();
    for p in pushers {
        p.await.expect("pusher");
    }
    let args = ["--concurrency", "8", "--lease", "1s"];
    let mut workers: Vec<Worker> = (0..3)
        .map(|_| Worker::start(&url, "durable", &args, &["true"]))
        .collect();
    let started = Instant::now();
    let mut kills = 0;
    let mut restarted = false;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    while kills < 50 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let victim = (rng % workers.len() as u64) as usize;
        workers[victim].kill();
        workers[victim] = Worker::start(&url, "durable", &args, &["true"]);
        kills += 1;
        if kills == 25 && !restarted {
            redis.kill();
            redis.restart();
            restarted = true;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "took too long");
    }
    // Let the workers finish what is left.
    let deadline = Instant::now() + Duration::from_secs(120);
    let stats = loop {
        match q.stats().await {
            Ok(s) if s.ready + s.delayed + s.in_flight == 0 => break s,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "the queue never drained: {:?}",
            q.stats().await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(stats.acked, JOBS as u64, "{stats:?}");
    assert_eq!((stats.dead, stats.pushed), (0, JOBS as u64), "{stats:?}");
    assert!(stats.claimed >= JOBS as u64);
    assert_eq!(
        stats.claimed - JOBS as u64,
        stats.redelivered,
        "runs beyond one per job are redeliveries: {stats:?}"
    );
    eprintln!(
        "{JOBS} jobs, 50 kills, 1 Redis restart: {} redelivered",
        stats.redelivered
    );
}

fn jobs(args: &[&str]) -> Output {
    tollgate().arg("jobs").args(args).output().expect("tollgate jobs")
}

/// `--partitions` on every jobs command, the store's check of it, and
/// `jobs repartition`; a refused password exits 78, not 69.
#[test]
fn partitioned_queues_from_the_cli() {
    let redis = RedisServer::start();
    let url = redis.url();
    let pushed = push(&url, "parts", "hello", &["--partitions", "4", "--id", "a"]);
    assert!(pushed.status.success(), "{pushed:?}");

    let plain = jobs(&["stats", "parts", "--redis", &url]);
    assert_eq!(plain.status.code(), Some(78), "{plain:?}");
    assert!(
        String::from_utf8_lossy(&plain.stderr).contains("4 partition(s)"),
        "{plain:?}"
    );
    let stats = jobs(&["stats", "parts", "--partitions", "4", "--redis", &url]);
    let v: serde_json::Value = serde_json::from_slice(&stats.stdout).expect("stats JSON");
    assert_eq!(
        (&v["partitions"], &v["ready"]),
        (&serde_json::json!(4), &serde_json::json!(1)),
        "{v}"
    );
    for bad in [
        &["stats", "parts", "--partitions", "0", "--redis", &url][..],
        &[
            "stats",
            "parts",
            "--partitions",
            "4",
            "--server",
            "http://127.0.0.1:1",
        ][..],
        &[
            "repartition",
            "parts",
            "--partitions",
            "2",
            "--server",
            "http://127.0.0.1:1",
        ][..],
    ] {
        assert_eq!(jobs(bad).status.code(), Some(64), "{bad:?}");
    }
    // Not while the job waits.
    let busy = jobs(&["repartition", "parts", "--partitions", "2", "--redis", &url]);
    assert_eq!(busy.status.code(), Some(64), "{busy:?}");
    assert!(
        String::from_utf8_lossy(&busy.stderr).contains("1 ready"),
        "{busy:?}"
    );
    let worked = tollgate()
        .args([
            "jobs",
            "work",
            "parts",
            "--partitions",
            "4",
            "--idle-exit",
            "1s",
            "--redis",
            &url,
        ])
        .args(["--", "true"])
        .output()
        .expect("work");
    assert!(worked.status.success(), "{worked:?}");
    let moved = jobs(&["repartition", "parts", "--partitions", "2", "--redis", &url]);
    assert!(moved.status.success(), "{moved:?}");
    assert!(
        String::from_utf8_lossy(&moved.stdout).contains("\"partitions\":2"),
        "{moved:?}"
    );
    let old = jobs(&["stats", "parts", "--partitions", "4", "--redis", &url]);
    assert_eq!(old.status.code(), Some(78), "{old:?}");
    let new = jobs(&["stats", "parts", "--partitions", "2", "--redis", &url]);
    assert!(new.status.success(), "{new:?}");

    // A worker whose count is changed under it stops with 78 at its next
    // re-check (every 10 s) instead of retrying forever.
    let mut worker = tollgate()
        .args([
            "jobs",
            "work",
            "parts",
            "--partitions",
            "2",
            "--idle-exit",
            "60s",
            "--redis",
            &url,
        ])
        .args(["--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("worker");
    std::thread::sleep(Duration::from_millis(500));
    let moved = jobs(&["repartition", "parts", "--partitions", "3", "--redis", &url]);
    assert!(moved.status.success(), "{moved:?}");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = worker.try_wait().expect("worker status") {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(25), "the worker kept going");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut worker.stderr.take().expect("stderr"), &mut err).expect("stderr");
    assert_eq!(status.code(), Some(78), "{err}");
    assert!(err.contains("3 partition(s)"), "{err}");

    let refused = jobs(&[
        "stats",
        "parts",
        "--redis",
        &format!("redis://nobody:s3cr3t-wrong@127.0.0.1:{}", redis.port),
    ]);
    assert_eq!(refused.status.code(), Some(78), "{refused:?}");
    assert!(
        !String::from_utf8_lossy(&refused.stderr).contains("s3cr3t-wrong"),
        "{refused:?}"
    );
}

/// A worker whose command cannot be started (mistyped, not executable)
/// stops at once with the shell's exit code, 127 or 126, before claiming
/// anything: every job stays ready, its attempts untouched. A run-at time
/// more than a year ahead is refused (64), as a delay that long is.
#[test]
fn a_command_that_cannot_start_claims_nothing() {
    let redis = RedisServer::start();
    let url = redis.url();
    for i in 0..3 {
        let out = push(&url, "typo", &format!("job {i}"), &["--max-attempts", "1"]);
        assert!(out.status.success(), "{out:?}");
    }
    let dir = tempfile::tempdir().expect("dir");
    let not_executable = dir.path().join("script.sh");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").expect("write");
    let (missing, plain, folder) = (
        dir.path().join("mistyped-command"),
        not_executable.to_string_lossy().into_owned(),
        dir.path().to_string_lossy().into_owned(),
    );
    for (cmd, code) in [
        (missing.to_string_lossy().into_owned(), 127),
        ("no-such-command-anywhere-7b1".to_owned(), 127),
        (plain, 126),
        (folder, 126),
    ] {
        let started = Instant::now();
        let out = tollgate()
            .args([
                "jobs",
                "work",
                "typo",
                "--redis",
                &url,
                "--idle-exit",
                "10s",
                "--",
            ])
            .arg(&cmd)
            .output()
            .expect("work");
        assert_eq!(
            out.status.code(),
            Some(code),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{cmd}: did not fail fast"
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("cannot run"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = jobs(&["stats", "typo", "--redis", &url]);
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stats");
    assert_eq!(
        (
            stats["ready"].as_u64(),
            stats["in_flight"].as_u64(),
            stats["dead"].as_u64(),
            stats["claimed"].as_u64()
        ),
        (Some(3), Some(0), Some(0), Some(0)),
        "{stats}"
    );
    let out = push(&url, "typo", "later", &["--at", "2999-01-01T00:00:00Z"]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("more than a year ahead"));
}

/// `jobs work` at TOLLGATE_LOG=info says what became of each job: claimed,
/// done, failed with the exit code and a retry, dead-lettered.
#[test]
fn the_worker_logs_each_job() {
    let redis = RedisServer::start();
    let url = redis.url();
    assert!(push(&url, "told", "fine\n", &["--id", "fine"]).status.success());
    let out = push(
        &url,
        "told",
        "poison\n",
        &["--id", "poison", "--max-attempts", "2"],
    );
    assert!(out.status.success(), "{out:?}");
    let out = tollgate()
        .env("TOLLGATE_LOG", "info")
        .args(["jobs", "work", "told", "--redis", &url, "--idle-exit", "3s", "--"])
        .args([
            "sh",
            "-c",
            r#"read line; [ "$line" = poison ] && { echo "boom $TOLLGATE_ATTEMPT" >&2; exit 3; }; exit 0"#,
        ])
        .stdin(Stdio::null())
        .output()
        .expect("worker");
    assert!(out.status.success(), "{out:?}");
    let log = String::from_utf8_lossy(&out.stderr);
    let line = |words: &[&str]| {
        assert!(
            log.lines().any(|l| words.iter().all(|w| l.contains(w))),
            "no line with {words:?} in:\n{log}"
        );
    };
    line(&[
        "tollgate::worker",
        "claimed",
        "queue=\"told\"",
        "job=\"fine\"",
        "attempt=1",
    ]);
    line(&["done", "job=\"fine\"", "ms="]);
    line(&[
        "failed (exit code 3); will be retried",
        "job=\"poison\"",
        "attempt=1",
        "retry_in_ms=",
    ]);
    line(&["claimed", "job=\"poison\"", "attempt=2"]);
    line(&[
        "failed (exit code 3) on its last attempt: dead-lettered",
        "job=\"poison\"",
        "attempt=2",
    ]);
    // The command's standard error still reaches the worker's, and the
    // dead job keeps why it died.
    line(&["boom 1"]);
    let dead = &ok_lines(&jobs(&["dead", "told", "--redis", &url]))[0];
    assert_eq!(dead["last_error"], "exit code 3\nboom 2\n", "{dead}");
}

#[test]
fn cancel_reschedule_purge_completed_and_backoff_on_redis() {
    let redis = RedisServer::start();
    cancel_reschedule_purge_completed_and_backoff(&redis.url());
}

#[test]
fn cancel_reschedule_purge_completed_and_backoff_through_a_server() {
    let server = serve_support::Server::start(None);
    cancel_reschedule_purge_completed_and_backoff(&server.base);
}

/// The output of a jobs command that must succeed, as JSON lines.
fn ok_lines(out: &Output) -> Vec<serde_json::Value> {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// A jobs command that must fail with `code`, its message naming `says`.
fn fails(args: &[&str], code: i32, says: &str) {
    let out = tollgate()
        .arg("jobs")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err:?} does not say {says:?}");
}

fn cancel_reschedule_purge_completed_and_backoff(url: &str) {
    let [flag, url] = at(url);
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("payload");
    std::fs::write(&file, "from a file").expect("write");
    let file = file.to_str().expect("utf-8");

    // Push from a file, later; move it, then cancel it.
    let out = push(
        url,
        "verbs",
        "ignored",
        &["--id", "later", "--delay", "1h", "--payload-file", file],
    );
    assert_eq!(ok_lines(&out)[0]["result"], "created");
    let moved = &ok_lines(&jobs(&[
        "reschedule",
        "verbs",
        "later",
        "--delay",
        "10m",
        flag,
        url,
    ]))[0];
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_millis() as u64;
    let due = moved["due_ms"].as_u64().expect("due_ms");
    assert!(due > now_ms + 500_000 && due < now_ms + 700_000, "{moved}");
    let at = humantime::format_rfc3339_seconds(std::time::SystemTime::now() + Duration::from_secs(7200));
    let moved = &ok_lines(&jobs(&[
        "reschedule",
        "verbs",
        "later",
        "--at",
        &at.to_string(),
        flag,
        url,
    ]))[0];
    assert!(
        moved["due_ms"].as_u64().expect("due_ms") > now_ms + 7_000_000,
        "{moved}"
    );
    let cancelled = &ok_lines(&jobs(&["cancel", "verbs", "later", flag, url]))[0];
    assert_eq!(
        (cancelled["id"].as_str(), cancelled["result"].as_str()),
        (Some("later"), Some("cancelled"))
    );
    fails(&["cancel", "verbs", "later", flag, url], 65, "\"later\"");
    fails(
        &["reschedule", "verbs", "nope", "--delay", "1s", flag, url],
        65,
        "\"nope\"",
    );
    fails(&["reschedule", "verbs", "later", flag, url], 64, "--delay");
    fails(
        &[
            "reschedule",
            "verbs",
            "later",
            "--delay",
            "1s",
            "--at",
            &at.to_string(),
            flag,
            url,
        ],
        64,
        "--at",
    );

    // A job that dies at once, one that waits out a fixed hour after its
    // failure, one that succeeds and is kept.
    for (id, extra) in [
        ("dies", vec!["--max-attempts", "1"]),
        (
            "waits",
            vec![
                "--max-attempts",
                "2",
                "--backoff",
                "fixed",
                "--backoff-base",
                "1h",
            ],
        ),
        ("ok", vec![]),
    ] {
        let mut args = vec!["--id", id];
        args.extend(extra);
        assert!(push(url, "verbs", id, &args).status.success());
    }
    let worker = tollgate()
        .args([
            "jobs",
            "work",
            "verbs",
            flag,
            url,
            "--idle-exit",
            "1s",
            "--keep-completed",
            "10",
            "--",
        ])
        .args(["sh", "-c", r#"read l; [ "$l" = ok ]"#])
        .stdin(Stdio::null())
        .output()
        .expect("worker");
    assert!(worker.status.success(), "{worker:?}");
    let stats = &ok_lines(&jobs(&["stats", "verbs", flag, url]))[0];
    assert_eq!(
        (
            stats["dead"].as_u64(),
            stats["delayed"].as_u64(),
            stats["completed"].as_u64()
        ),
        (Some(1), Some(1), Some(1)),
        "{stats}"
    );
    let done = ok_lines(&jobs(&["completed", "verbs", "--limit", "5", flag, url]));
    assert_eq!(done.len(), 1);
    assert_eq!(
        (done[0]["id"].as_str(), done[0]["payload"].as_str()),
        (Some("ok"), Some("ok"))
    );
    assert!(done[0]["acked_ms"].as_u64().is_some(), "{}", done[0]);
    fails(&["completed", "verbs", "--limit", "0", flag, url], 64, "--limit");

    let dead = ok_lines(&jobs(&["dead", "verbs", flag, url]));
    assert_eq!(
        (dead[0]["id"].as_str(), dead[0]["last_error"].as_str()),
        (Some("dies"), Some("exit code 1")),
        "{dead:?}"
    );
    fails(
        &["purge", "verbs", "--id", "waits", flag, url],
        65,
        "no dead job \"waits\"",
    );
    assert_eq!(
        ok_lines(&jobs(&["purge", "verbs", "--id", "dies", flag, url]))[0]["purged"],
        1
    );
    assert_eq!(ok_lines(&jobs(&["purge", "verbs", flag, url]))[0]["purged"], 0);

    // Bad backoffs and payload files: exit 64, saying why.
    fails(
        &["push", "verbs", "--backoff-base", "1s", flag, url],
        64,
        "--backoff",
    );
    fails(
        &["push", "verbs", "--backoff", "fixed", flag, url],
        64,
        "--backoff-base",
    );
    fails(
        &[
            "push",
            "verbs",
            "--backoff",
            "fixed",
            "--backoff-base",
            "1s",
            "--backoff-max",
            "2s",
            flag,
            url,
        ],
        64,
        "--backoff-max",
    );
    fails(
        &[
            "push",
            "verbs",
            "--backoff",
            "exponential",
            "--backoff-base",
            "1m",
            "--backoff-max",
            "1s",
            flag,
            url,
        ],
        64,
        "backoff",
    );
    fails(
        &[
            "push",
            "verbs",
            "--backoff",
            "linear",
            "--backoff-base",
            "1s",
            flag,
            url,
        ],
        64,
        "linear",
    );
    fails(
        &["push", "verbs", "--payload-file", "/nonexistent/p", flag, url],
        64,
        "/nonexistent/p",
    );

    // A job being run is neither cancelled nor moved: exit 75, try later.
    assert!(push(url, "busy", "x", &["--id", "running"]).status.success());
    let _worker = Worker::start(url, "busy", &[], &["sleep", "30"]);
    wait_for("the claim", Duration::from_secs(10), || {
        ok_lines(&jobs(&["stats", "busy", flag, url]))[0]["in_flight"] == 1
    });
    fails(&["cancel", "busy", "running", flag, url], 75, "being run");
    fails(
        &["reschedule", "busy", "running", "--delay", "1s", flag, url],
        75,
        "being run",
    );
}

#[test]
fn a_queue_that_never_existed_on_redis() {
    let redis = RedisServer::start();
    a_queue_that_never_existed(&redis.url());
}

#[test]
fn a_queue_that_never_existed_through_a_server() {
    let server = serve_support::Server::start(None);
    a_queue_that_never_existed(&server.base);
    // The server names queues it knows that are close.
    fails(
        &["stats", "mial", "--server", &server.base],
        65,
        "did you mean \"mail\"?",
    );
}

/// `stats`, `dead` and `completed` of a queue nothing was pushed to: exit
/// 65, "no such queue"; of a drained one: its zeros and empty lists.
fn a_queue_that_never_existed(url: &str) {
    let [flag, url] = at(url);
    for verb in ["stats", "dead", "completed"] {
        fails(&[verb, "never", flag, url], 65, "no such queue \"never\"");
    }
    assert!(push(url, "mail", "hi", &[]).status.success());
    let worker = tollgate()
        .args([
            "jobs",
            "work",
            "mail",
            flag,
            url,
            "--idle-exit",
            "500ms",
            "--",
            "true",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("worker");
    assert!(worker.status.success(), "{worker:?}");
    let stats = &ok_lines(&jobs(&["stats", "mail", flag, url]))[0];
    assert_eq!(
        (stats["ready"].as_u64(), stats["acked"].as_u64()),
        (Some(0), Some(1)),
        "{stats}"
    );
    assert!(ok_lines(&jobs(&["dead", "mail", flag, url])).is_empty());
    assert!(ok_lines(&jobs(&["completed", "mail", flag, url])).is_empty());
}
