//! `tollgate lock run` / `semaphore run` as separate processes against a real
//! redis-server: exclusion, exit codes, crashes, freezes and signals.

#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt;
use support::RedisServer;

#[path = "cli_run/election.rs"]
mod election;
#[path = "cli_run/fencing.rs"]
mod fencing;
#[path = "cli_run/postgres.rs"]
mod postgres;

fn tollgate() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    c.env_remove("TOLLGATE_REDIS_URL");
    c
}

fn run(args: &[&str]) -> Output {
    tollgate().args(args).output().expect("run tollgate")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `line` split into arguments at spaces, as a shell would for plain
/// words and '…' quotes (`''` is an empty argument), with `$URL`
/// replaced by `url`.
fn words(line: &str, url: &str) -> Vec<String> {
    let mut args = Vec::new();
    let (mut word, mut in_word, mut quoted) = (String::new(), false, false);
    for ch in line.chars() {
        match ch {
            '\'' => (quoted, in_word) = (!quoted, true),
            ' ' if !quoted => {
                if in_word {
                    args.push(std::mem::take(&mut word).replace("$URL", url));
                }
                in_word = false;
            }
            _ => {
                word.push(ch);
                in_word = true;
            }
        }
    }
    if in_word {
        args.push(word.replace("$URL", url));
    }
    args
}

/// Runs each case in order (its arguments as for [`words`], the exit code
/// it must end with, a piece of its stderr or "" for any) and checks it.
fn check(url: &str, cases: &[(&str, i32, &str)]) {
    for (line, code, says) in cases {
        let args = words(line, url);
        let o = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(o.status.code(), Some(*code), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

/// A redis-server of the test's own (bind it: dropping it stops the
/// server), its URL, and a temp dir for what the commands write.
fn redis_and_dir() -> (RedisServer, String, tempfile::TempDir) {
    let server = RedisServer::start();
    let url = server.url();
    (server, url, tempfile::tempdir().expect("dir"))
}

/// Spawns tollgate in a process group of its own, so the test can clean up
/// the command under it too.
fn spawn(args: &[&str]) -> Child {
    tollgate()
        .args(args)
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate")
}

struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.0.id() as i32), Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

fn wait_for_file(path: &Path, timeout: Duration) -> String {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && !s.trim().is_empty()
        {
            return s;
        }
        assert!(start.elapsed() < timeout, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_exit(child: &mut Child, timeout: Duration) -> i32 {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code().unwrap_or(-1);
        }
        assert!(start.elapsed() < timeout, "tollgate did not exit in {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `workers` threads each run `tollgate lock run counter <store> -- …`
/// `iterations` times; the command does a non-atomic read-modify-write of a
/// counter file and logs its fence. The count must be exact and the fences,
/// in the order the commands ran, strictly increasing.
fn exclusive_counter(store: &[&str], workers: usize, iterations: usize) {
    let dir = tempfile::tempdir().expect("dir");
    let count = dir.path().join("count");
    let fences = dir.path().join("fences");
    std::fs::write(&count, "0").expect("write");
    let script = format!(
        "n=$(cat {c}); sleep 0.01; echo $((n + 1)) > {c}; echo $TOLLGATE_FENCE >> {f}",
        c = count.display(),
        f = fences.display()
    );
    let store: Vec<String> = store.iter().map(|s| (*s).to_owned()).collect();
    let threads: Vec<_> = (0..workers)
        .map(|_| {
            let (store, script) = (store.clone(), script.clone());
            std::thread::spawn(move || {
                let mut args = vec!["lock", "run", "counter", "--wait", "60s"];
                args.extend(store.iter().map(String::as_str));
                args.extend(["--", "sh", "-c", &script]);
                for _ in 0..iterations {
                    let o = run(&args);
                    assert!(o.status.success(), "{:?}: {}", o.status, stderr(&o));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("worker");
    }
    let total = workers * iterations;
    assert_eq!(
        std::fs::read_to_string(&count).expect("count").trim(),
        total.to_string()
    );
    let fences: Vec<u64> = std::fs::read_to_string(&fences)
        .expect("fences")
        .lines()
        .map(|l| l.parse().expect("a number"))
        .collect();
    assert_eq!(fences.len(), total);
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences not strictly increasing"
    );
}

#[test]
fn eight_processes_share_one_lock_exactly() {
    let server = RedisServer::start();
    exclusive_counter(&["--redis", &server.url()], 8, 25);
}

/// The same on a 3-master Redis Cluster: the lock's keys share one slot,
/// hand-offs come by sharded pub/sub.
#[test]
fn eight_processes_share_one_lock_exactly_on_a_cluster() {
    let cluster = support::RedisCluster::start(3, 0);
    exclusive_counter(&["--redis", &cluster.url()], 8, 10);
}

#[test]
fn exit_codes() {
    let server = RedisServer::start();
    let url = server.url();
    // The command's own code, and 127 for a command that is not there.
    check(
        &url,
        &[
            ("lock run x --redis $URL -- sh -c 'exit 7'", 7, ""),
            ("lock run x --redis $URL -- /nonexistent/cmd", 127, ""),
        ],
    );
    let o = tollgate()
        .args(["lock", "run", "x", "--", "sh", "-c", "echo $TOLLGATE_FENCE"])
        .env("TOLLGATE_REDIS_URL", &url)
        .output()
        .expect("run");
    assert!(o.status.success(), "TOLLGATE_REDIS_URL is used: {}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).trim().parse::<u64>().is_ok());

    // Busy: another process holds it.
    let holder = Group(spawn(&[
        "lock", "run", "busy", "--wait", "20s", "--redis", &url, "--", "sleep", "30",
    ]));
    let start = Instant::now();
    loop {
        let o = run(&[
            "lock", "run", "busy", "--wait", "200ms", "--redis", &url, "--", "true",
        ]);
        if o.status.code() == Some(75) {
            assert!(stderr(&o).contains("busy"), "{}", stderr(&o));
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "holder never took the lock"
        );
    }
    drop(holder);
}

#[test]
fn bad_input_gets_a_message_and_exit_64() {
    let server = RedisServer::start();
    let url = server.url();
    // One case a line, however long: a table reads down its columns.
    #[rustfmt::skip]
    let cases: &[(&str, i32, &str)] = &[
        ("lock run x -- true", 64, "TOLLGATE_REDIS_URL"),
        ("lock run 'bad name' --redis $URL -- true", 64, "allowed"),
        ("lock run '' --redis $URL -- true", 64, "empty"),
        ("lock run x --ttl 0s --redis $URL -- true", 64, "--ttl"),
        ("lock run x --ttl 30d --redis $URL -- true", 64, "--ttl"),
        ("lock run x --ttl soon --redis $URL -- true", 64, "duration"),
        ("lock run x --ttl -1s --redis $URL -- true", 64, "cannot be negative"),
        ("lock run x --ttl 30 --redis $URL -- true", 64, "needs a unit: 30s"),
        ("lock run x --limit 2 --redis $URL -- true", 64, "--limit"),
        ("lock run x --redis $URL/99 -- true", 78, "no database"),
        ("semaphore run s --resize --redis $URL -- true", 64, "--limit"),
        ("lock run x --redis localhost:6379 -- true", 64, "Redis URL"),
        ("lock run x --redis redis://h:port -- true", 64, "URL"),
        ("lock run x --redis $URL", 64, "CMD"),
        ("semaphore run s --redis $URL -- true", 64, "give --limit N"),
        ("semaphore run s --limit 0 --redis $URL -- true", 64, "--limit"),
        ("semaphore run s --limit 2 --permits 3 --redis $URL -- true", 64, "--permits"),
        ("semaphore run s --limit 2 --permits 0 --redis $URL -- true", 64, "--permits"),
        ("semaphore run s --limit -2 --redis $URL -- true", 64, ""),
        ("lock run x --shared --exclusive --redis $URL -- true", 64, "--exclusive"),
        ("lock run x --max-hold 5ms --redis $URL -- true", 64, "--max-hold"),
        ("lock run x --max-hold 25h --redis $URL -- true", 64, "--max-hold"),
        ("lock run x --min-hold 2s --max-hold 1s --redis $URL -- true", 64, "--min-hold"),
        ("lock run x --redis redis://127.0.0.1:1 -- true", 69, "unavailable"),
    ];
    check(&url, cases);
    // A conflicting semaphore size is a usage error, not a hang.
    let holder = Group(spawn(&[
        "semaphore",
        "run",
        "sz",
        "--limit",
        "2",
        "--wait",
        "20s",
        "--redis",
        &url,
        "--",
        "sleep",
        "30",
    ]));
    std::thread::sleep(Duration::from_millis(500));
    check(
        &url,
        &[("semaphore run sz --limit 3 --redis $URL -- true", 64, "--resize")],
    );
    drop(holder);
}

/// A semaphore's capacity is stored: later runs may leave --limit out,
/// and --resize changes it; `status` shows the holders and the line.
#[test]
fn semaphore_runs_use_the_stored_capacity_and_status_shows_the_holders() {
    let (_server, url, _dir) = redis_and_dir();
    #[rustfmt::skip]
    check(&url, &[
        ("semaphore run s2 --limit 3 --redis $URL -- true", 0, ""),
        ("semaphore run s2 --redis $URL -- true", 0, ""),
        ("semaphore run s2 --permits 3 --redis $URL -- true", 0, ""),
        ("semaphore run s2 --permits 4 --redis $URL -- true", 64, "capacity is 3"),
        ("semaphore run s2 --limit 5 --redis $URL -- true", 64, "--resize"),
        ("semaphore run s2 --limit 5 --resize --permits 4 --redis $URL -- true", 0, ""),
        ("lock status 'bad name' --redis $URL", 64, "allowed"),
    ]);
    let status = |name: &str| -> serde_json::Value {
        let o = run(&["semaphore", "status", name, "--redis", &url]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).expect("JSON")
    };
    assert_eq!(status("s2")["capacity"], 5);
    assert_eq!(status("s2")["used"], 0);
    // A holder with a 30 s lease, and a second waiting in line behind it.
    let holder = Group(spawn(&[
        "lock", "run", "st", "--redis", &url, "--", "sleep", "30",
    ]));
    std::thread::sleep(Duration::from_millis(500));
    let waiter = Group(spawn(&[
        "lock", "run", "st", "--wait", "20s", "--redis", &url, "--", "true",
    ]));
    std::thread::sleep(Duration::from_millis(500));
    let s = status("st");
    assert_eq!(
        (s["capacity"].as_u64(), s["used"].as_u64(), s["waiting"].as_u64()),
        (Some(1), Some(1), Some(1)),
        "{s}"
    );
    assert!(s["fence"].as_u64().is_some_and(|f| f > 0), "{s}");
    let ttl = s["leases"][0]["ttl_ms"]
        .as_u64()
        .expect("a lease with its time left");
    assert!(ttl > 20_000 && ttl <= 30_000, "{s}");
    drop(waiter);
    drop(holder);
}

#[test]
fn semaphore_run_admits_at_most_the_limit() {
    let server = RedisServer::start();
    let url = server.url();
    let holders: Vec<Group> = (0..2)
        .map(|_| {
            Group(spawn(&[
                "semaphore",
                "run",
                "pool",
                "--limit",
                "2",
                "--wait",
                "5s",
                "--redis",
                &url,
                "--",
                "sleep",
                "30",
            ]))
        })
        .collect();
    let start = Instant::now();
    loop {
        let o = run(&[
            "semaphore",
            "run",
            "pool",
            "--limit",
            "2",
            "--redis",
            &url,
            "--",
            "true",
        ]);
        if o.status.code() == Some(75) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the two holders never filled the semaphore"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(holders);
}

#[test]
fn a_killed_holder_frees_the_lock_when_its_lease_ends() {
    let (_server, url, dir) = redis_and_dir();
    let started = dir.path().join("started");
    let script = format!("echo $TOLLGATE_FENCE > {}; sleep 30", started.display());
    let holder = Group(spawn(&[
        "lock", "run", "cron", "--ttl", "1s", "--redis", &url, "--", "sh", "-c", &script,
    ]));
    let fence: u64 = wait_for_file(&started, Duration::from_secs(10))
        .trim()
        .parse()
        .expect("fence");
    let o = run(&["lock", "run", "cron", "--redis", &url, "--", "true"]);
    assert_eq!(o.status.code(), Some(75), "held while the holder lives");

    kill(Pid::from_raw(holder.0.id() as i32), Signal::SIGKILL).expect("kill");
    let killed = Instant::now();
    let o = run(&[
        "lock",
        "run",
        "cron",
        "--wait",
        "10s",
        "--redis",
        &url,
        "--",
        "sh",
        "-c",
        "echo $TOLLGATE_FENCE",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(5), "freed {took:?} after the kill");
    let next: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().expect("fence");
    assert!(next > fence);
}

/// A holder (`lock run --ttl 1s <store> …`) is frozen with SIGSTOP past its
/// lease: a newcomer gets the lock with a higher fence, and on SIGCONT the
/// frozen one finds its lease lost, stops its command with SIGTERM and
/// exits 76. While it holds, a try-once newcomer is refused with 75.
fn frozen_holder_loses_the_lock(store: &[&str]) {
    let dir = tempfile::tempdir().expect("dir");
    let started = dir.path().join("started");
    let termed = dir.path().join("termed");
    let script = format!(
        "trap 'echo TERM > {t}; exit 0' TERM; echo $TOLLGATE_FENCE > {s}; sleep 30 & wait",
        t = termed.display(),
        s = started.display()
    );
    let with_store = |head: &[&'static str], tail: &[&str]| -> Vec<String> {
        head.iter()
            .chain(store)
            .chain(tail)
            .map(|s| (*s).to_owned())
            .collect()
    };
    let args = with_store(
        &["lock", "run", "frozen", "--ttl", "1s"],
        &["--", "sh", "-c", &script],
    );
    let mut holder = Group(spawn(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    let old: u64 = wait_for_file(&started, Duration::from_secs(10))
        .trim()
        .parse()
        .expect("fence");
    let busy = with_store(&["lock", "run", "frozen", "--wait", "200ms"], &["--", "true"]);
    let o = run(&busy.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(75), "busy: {}", stderr(&o));

    let pid = Pid::from_raw(holder.0.id() as i32);
    kill(pid, Signal::SIGSTOP).expect("stop");
    std::thread::sleep(Duration::from_millis(1500));
    let next = with_store(
        &["lock", "run", "frozen", "--wait", "5s"],
        &["--", "sh", "-c", "echo $TOLLGATE_FENCE"],
    );
    let o = run(&next.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        o.status.success(),
        "the lease of the frozen holder ended: {}",
        stderr(&o)
    );
    let new: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().expect("fence");
    assert!(new > old, "new holder's fence {new} > frozen holder's {old}");

    kill(pid, Signal::SIGCONT).expect("continue");
    let code = wait_exit(&mut holder.0, Duration::from_secs(15));
    assert_eq!(code, 76, "lease-lost exit code");
    assert_eq!(
        wait_for_file(&termed, Duration::from_secs(5)).trim(),
        "TERM",
        "the command got SIGTERM"
    );
}

#[test]
fn a_frozen_holder_loses_the_lock_and_its_command_is_stopped() {
    let server = RedisServer::start();
    frozen_holder_loses_the_lock(&["--redis", &server.url()]);
}

#[test]
fn sigterm_is_forwarded_and_the_lock_released() {
    let (_server, url, dir) = redis_and_dir();
    let started = dir.path().join("started");
    let script = format!(
        "trap 'exit 3' TERM; echo up > {}; sleep 30 & wait",
        started.display()
    );
    let mut holder = Group(spawn(&[
        "lock", "run", "sig", "--redis", &url, "--", "sh", "-c", &script,
    ]));
    wait_for_file(&started, Duration::from_secs(10));
    kill(Pid::from_raw(holder.0.id() as i32), Signal::SIGTERM).expect("term");
    assert_eq!(
        wait_exit(&mut holder.0, Duration::from_secs(10)),
        3,
        "the command's exit code"
    );
    let o = run(&["lock", "run", "sig", "--redis", &url, "--", "true"]);
    assert!(o.status.success(), "released at once: {}", stderr(&o));
}

#[test]
fn a_killed_waiter_leaves_the_line() {
    let (_server, url, dir) = redis_and_dir();
    let started = dir.path().join("started");
    let release = dir.path().join("release");
    let script = format!(
        "echo up > {s}; while [ ! -e {r} ]; do sleep 0.05; done",
        s = started.display(),
        r = release.display()
    );
    let mut holder = Group(spawn(&[
        "lock", "run", "line", "--wait", "10s", "--redis", &url, "--", "sh", "-c", &script,
    ]));
    wait_for_file(&started, Duration::from_secs(10));
    let waiter = Group(spawn(&[
        "lock",
        "run",
        "line",
        "--wait",
        "60s",
        "--heartbeat",
        "500ms",
        "--redis",
        &url,
        "--",
        "true",
    ]));
    std::thread::sleep(Duration::from_millis(500));
    kill(Pid::from_raw(waiter.0.id() as i32), Signal::SIGKILL).expect("kill");
    // After its heartbeat grace the dead waiter is gone from the line, so
    // when the holder finishes the lock goes to the next live waiter at once.
    std::thread::sleep(Duration::from_millis(800));
    let mut next = Group(spawn(&[
        "lock", "run", "line", "--wait", "60s", "--redis", &url, "--", "true",
    ]));
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&release, "go").expect("write");
    assert_eq!(wait_exit(&mut holder.0, Duration::from_secs(10)), 0);
    let freed = Instant::now();
    assert_eq!(wait_exit(&mut next.0, Duration::from_secs(10)), 0);
    assert!(
        freed.elapsed() < Duration::from_millis(400),
        "took {:?}",
        freed.elapsed()
    );
    drop(waiter);
}

#[test]
fn six_processes_never_exceed_a_semaphore_of_two() {
    let (_server, url, dir) = redis_and_dir();
    let inside = dir.path().join("inside");
    std::fs::create_dir(&inside).expect("mkdir");
    let seen = dir.path().join("seen");
    // Each holder marks itself inside, counts the marks (a late arrival
    // always sees every holder already in), holds briefly, and leaves.
    let script = format!(
        "touch {i}/$$; ls {i} | wc -l >> {s}; sleep 0.05; rm {i}/$$",
        i = inside.display(),
        s = seen.display()
    );
    let workers: Vec<_> = (0..6)
        .map(|_| {
            let (url, script) = (url.clone(), script.clone());
            std::thread::spawn(move || {
                for _ in 0..5 {
                    let o = run(&[
                        "semaphore",
                        "run",
                        "pool",
                        "--limit",
                        "2",
                        "--wait",
                        "60s",
                        "--redis",
                        &url,
                        "--",
                        "sh",
                        "-c",
                        &script,
                    ]);
                    assert!(o.status.success(), "{:?}: {}", o.status, stderr(&o));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    let counts: Vec<usize> = std::fs::read_to_string(&seen)
        .expect("seen")
        .lines()
        .map(|l| l.trim().parse().expect("a count"))
        .collect();
    assert_eq!(counts.len(), 30);
    assert!(
        counts.iter().all(|&c| c <= 2),
        "more than 2 holders at once: {counts:?}"
    );
    assert!(counts.contains(&2), "the limit was never reached: {counts:?}");
}

/// `lock run --shared` and `--exclusive` as separate processes on one
/// Redis: each marks itself inside, then looks for the other kind (so of
/// two that overlap, the later one sees the earlier). Readers overlap;
/// no reader ever sees a writer, no writer a reader or a second writer.
#[test]
fn shared_and_exclusive_runs_across_processes() {
    let (_server, url, dir) = redis_and_dir();
    let (readers, writers) = (dir.path().join("r"), dir.path().join("w"));
    for d in [&readers, &writers] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let (bad, seen) = (dir.path().join("bad"), dir.path().join("seen"));
    let read = format!(
        "touch {r}/$$; [ -z \"$(ls {w})\" ] || echo reader-with-writer >> {b}; \
         ls {r} | wc -l >> {s}; sleep 0.05; rm {r}/$$",
        r = readers.display(),
        w = writers.display(),
        b = bad.display(),
        s = seen.display()
    );
    let write = format!(
        "touch {w}/$$; [ -z \"$(ls {r})\" ] || echo writer-with-reader >> {b}; \
         [ \"$(ls {w} | wc -l)\" -eq 1 ] || echo two-writers >> {b}; sleep 0.03; rm {w}/$$",
        r = readers.display(),
        w = writers.display(),
        b = bad.display()
    );
    let workers: Vec<_> = (0..6)
        .map(|i| {
            let (url, script) = (url.clone(), if i % 3 == 0 { write.clone() } else { read.clone() });
            let mode = if i % 3 == 0 { "--exclusive" } else { "--shared" };
            std::thread::spawn(move || {
                for _ in 0..4 {
                    let o = run(&[
                        "lock", "run", "rw", mode, "--wait", "60s", "--redis", &url, "--", "sh", "-c",
                        &script,
                    ]);
                    assert!(o.status.success(), "{:?}: {}", o.status, stderr(&o));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    assert!(
        !bad.exists(),
        "{}",
        std::fs::read_to_string(&bad).unwrap_or_default()
    );
    let counts: Vec<usize> = std::fs::read_to_string(&seen)
        .expect("seen")
        .lines()
        .map(|l| l.trim().parse().expect("a count"))
        .collect();
    assert_eq!(counts.len(), 16, "every reader's run ran once");
    assert!(
        counts.iter().any(|&c| c >= 2),
        "readers never overlapped: {counts:?}"
    );
    // A plain lock of the same name is refused with words that say why.
    let o = run(&["lock", "run", "rw", "--redis", &url, "--", "true"]);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    assert!(stderr(&o).contains("read-write lock"), "{}", stderr(&o));
}

/// `--max-hold`: a command that outlives it is stopped and the run exits
/// 76 saying why, though its renewals went well; the lock is free at
/// once. The same through a server.
#[test]
fn max_hold_stops_the_command_and_exits_76() {
    let (_server, url, _dir) = redis_and_dir();
    let serve = Serve::start();
    for store in [["--redis", url.as_str()], ["--server", serve.1.as_str()]] {
        let started = Instant::now();
        let mut args = vec!["lock", "run", "capped", "--ttl", "300ms", "--max-hold", "1s"];
        args.extend(store);
        args.extend(["--", "sleep", "30"]);
        let o = run(&args);
        let took = started.elapsed();
        assert_eq!(o.status.code(), Some(76), "{}", stderr(&o));
        assert!(stderr(&o).contains("--max-hold 1s"), "{}", stderr(&o));
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(8),
            "ran {took:?}"
        );
        let mut args = vec!["lock", "run", "capped"];
        args.extend(store);
        args.extend(["--", "true"]);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(0), "the lock was not free: {}", stderr(&o));
    }
}

/// A `tollgate serve` on the embedded store, for `--server` runs.
struct Serve(Child, String);

impl Serve {
    /// A server on the memory store, on a free port.
    fn start() -> Serve {
        Serve::start_at("127.0.0.1:0", "none")
    }

    /// A server listening on `listen`, keeping its data in `data_dir`.
    fn start_at(listen: &str, data_dir: &str) -> Serve {
        use std::io::{BufRead, BufReader};
        let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["serve", "--listen", listen, "--data-dir", data_dir])
            .env("TOLLGATE_LOG", "warn")
            .env_remove("TOLLGATE_REDIS_URL")
            .stdout(Stdio::piped())
            .spawn()
            .expect("serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("line");
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .expect("address")
            .to_owned();
        Serve(child, url)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn processes_share_a_lock_through_a_server() {
    let serve = Serve::start();
    exclusive_counter(&["--server", &serve.1], 8, 10);
}

#[test]
fn through_a_server_busy_lost_and_bad_urls_have_their_exit_codes() {
    let serve = Serve::start();
    let url = serve.1.clone();
    frozen_holder_loses_the_lock(&["--server", &url]);
    // The last two: a capacity conflict through the server.
    check(
        &url,
        &[
            (
                "lock run x --server ftp://example.invalid -- true",
                64,
                "http:// or https://",
            ),
            // https is spoken; this host does not exist.
            (
                "lock run x --server https://example.invalid -- true",
                69,
                "cannot reach",
            ),
            ("lock run x --server http://127.0.0.1:1 -- true", 69, ""),
            ("semaphore run s --limit 2 --server $URL -- true", 0, ""),
            ("semaphore run s --limit 3 --server $URL -- true", 64, ""),
        ],
    );
}

/// `--version` names the commit the binary was built from.
#[test]
fn version_names_the_commit() {
    let out = run(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("git runs");
    let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    assert_eq!(head.len(), 12, "not in a git checkout?");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("tollgate {} (commit {head})", env!("CARGO_PKG_VERSION"))
    );
}

/// The crontab case: on each tick five machines start `lock run` 0 to
/// 600 ms apart; a 50 ms job must run once per tick, not once per
/// machine. `--min-hold 2s` keeps the lock taken past the late starters,
/// `--if-busy skip` makes them exit 0 with nothing printed.
fn once_per_tick(store: &[&str]) {
    let dir = tempfile::tempdir().expect("dir");
    let offsets_ms = [0u64, 150, 300, 450, 600];
    for tick in 0..4 {
        let runs = dir.path().join(format!("runs-{tick}"));
        let script = format!("echo run >> {}; sleep 0.05", runs.display());
        let started = Instant::now();
        let machines: Vec<_> = (0..offsets_ms.len())
            .map(|m| {
                // Each tick the machines start in another order.
                let delay = Duration::from_millis(offsets_ms[(m + tick) % offsets_ms.len()]);
                let mut args: Vec<String> =
                    ["lock", "run", "nightly", "--min-hold", "2s", "--if-busy", "skip"]
                        .map(str::to_owned)
                        .to_vec();
                args.extend(store.iter().map(|s| (*s).to_owned()));
                args.extend(["--", "sh", "-c", &script].map(str::to_owned));
                std::thread::spawn(move || {
                    std::thread::sleep(delay);
                    run(&args.iter().map(String::as_str).collect::<Vec<_>>())
                })
            })
            .collect();
        for m in machines {
            let o = m.join().expect("machine");
            assert_eq!(o.status.code(), Some(0), "tick {tick}: {}", stderr(&o));
            assert!(
                o.stdout.is_empty() && o.stderr.is_empty(),
                "tick {tick}: said {:?} / {}",
                o.stdout,
                stderr(&o)
            );
        }
        let ran = std::fs::read_to_string(&runs).unwrap_or_default().lines().count();
        assert_eq!(ran, 1, "tick {tick}: the job ran {ran} times");
        // The next tick comes once this one's hold has ended.
        std::thread::sleep(Duration::from_millis(3000).saturating_sub(started.elapsed()));
    }
}

#[test]
fn min_hold_and_if_busy_skip_run_a_job_once_per_tick_on_redis() {
    let server = RedisServer::start();
    once_per_tick(&["--redis", &server.url()]);
}

/// What --min-hold fixes: without it, a late starter finds the lock free
/// again and runs the job a second time; `--if-busy fail` (the default)
/// exits 75 with a message, and `-v` says why a skipper skipped.
#[test]
fn without_min_hold_a_late_machine_runs_again_and_busy_is_75_unless_skipped() {
    let (_server, url, dir) = redis_and_dir();
    let runs = dir.path().join("runs");
    let job = format!("echo run >> {}", runs.display());
    for _ in 0..2 {
        let o = run(&["lock", "run", "plain", "--redis", &url, "--", "sh", "-c", &job]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let ran = std::fs::read_to_string(&runs).expect("runs").lines().count();
    assert_eq!(ran, 2, "without --min-hold both machines run the job");
    // A hold of 5 s: a second runner is busy (75, with a message), or
    // skips (0, silent; -v says why); the holder shows in `lock status`.
    let o = run(&[
        "lock",
        "run",
        "held",
        "--min-hold",
        "5s",
        "--redis",
        &url,
        "--",
        "true",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    #[rustfmt::skip]
    check(&url, &[
        ("lock run held --redis $URL -- true", 75, "busy"),
        ("lock run held --if-busy skip --redis $URL -- true", 0, ""),
        ("lock run held --if-busy skip -v --redis $URL -- true", 0, "skipped"),
        ("lock run held --min-hold 25h --redis $URL -- true", 64, "--min-hold"),
        ("lock run held --if-busy never --redis $URL -- true", 64, "never"),
    ]);
    let quiet = run(&[
        "lock",
        "run",
        "held",
        "--if-busy",
        "skip",
        "--redis",
        &url,
        "--",
        "true",
    ]);
    assert!(quiet.stdout.is_empty() && quiet.stderr.is_empty());
    let o = run(&["lock", "status", "held", "--redis", &url]);
    let status: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let lease = &status["leases"][0];
    assert!(
        lease["label"]
            .as_str()
            .is_some_and(|l| l.contains(" pid ") && l.contains(" since ")),
        "{status}"
    );
    assert!(
        lease["ttl_ms"].as_u64().is_some_and(|t| t > 2_000 && t <= 5_000),
        "{status}"
    );
}

#[test]
fn min_hold_and_if_busy_skip_run_a_job_once_per_tick_through_a_server() {
    // The server on its embedded store: the memory model's lease clock.
    let serve = Serve::start();
    once_per_tick(&["--server", &serve.1]);
}

/// `tollgate bench lock|semaphore` measures after its warm-up: the figures
/// cover only pairs begun after it, exclusion holds, and a warm-up beyond
/// a minute is refused with exit 64.
#[test]
fn bench_locks_measure_after_the_warm_up() {
    let server = RedisServer::start();
    let url = server.url();
    for (target, limit) in [("lock", "1"), ("semaphore", "3")] {
        let args = format!(
            "bench {target} --contended --limit {limit} --redis {url} --workers 6 --seconds 400ms --warmup 300ms"
        );
        let out = run(&args.split(' ').collect::<Vec<_>>());
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let line: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
        let n = line["n"].as_u64().expect("n");
        assert!(n > 0, "{line}");
        assert_eq!(line["errors"], 0, "{line}");
        let max = line["max_concurrent_holders"].as_u64().expect("holders");
        assert!(max >= 1 && max <= limit.parse::<u64>().expect("limit"), "{line}");
        // The measured window is --seconds (plus the last pairs' tail), not
        // the warm-up too.
        let seconds = line["seconds"].as_f64().expect("seconds");
        assert!((0.4..0.65).contains(&seconds), "{line}");
        // The counters were read after the warm-up: scripts per pair stay
        // at the fair line's 2 (enter, leave with hand-off), not near 3.5
        // as they would with the warm-up's scripts counted.
        let scripts = line["redis_scripts_per_op"].as_f64().expect("scripts per op");
        assert!((1.5..2.6).contains(&scripts), "{line}");
    }
    let out = run(&["bench", "lock", "--warmup", "2m", "--seconds", "1s"]);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(stderr(&out).contains("--warmup"), "{}", stderr(&out));
}
