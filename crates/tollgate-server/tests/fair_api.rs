//! Fair queues over HTTP and the CLI (docs/JOBS.md, "Fair queues"): the
//! settings and group routes, bad input, several `tollgate serve`
//! processes holding the limits together on one Redis (proved from the
//! workers' fences and lease times, and sampled), and a SIGKILLed
//! worker's slot coming back after its lease.

mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use serve_support::{Server, send};
use support::RedisServer;

async fn settings_and_groups(s: &Server) {
    let c = reqwest::Client::new();
    let url = |p: &str| s.url(&format!("/v1/queues/mail{p}"));
    let (st, v) = send(c.put(url("/settings")).json(&json!({"group_concurrency": 1}))).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v,
        json!({"concurrency": null, "rate": null, "group_concurrency": 1, "group_rate": null})
    );
    assert_eq!(send(c.get(url("/settings"))).await.1, v);
    for (id, group) in [
        ("a1", "tenant-a"),
        ("a2", "tenant-a"),
        ("a3", "tenant-a"),
        ("b1", "tenant-b"),
    ] {
        let (st, p) = send(
            c.post(url("/jobs"))
                .json(&json!({"payload": id, "id": id, "group": group})),
        )
        .await;
        assert_eq!(st, 201, "{p}");
    }
    let (st, got) = send(c.post(url("/claim?max=10&lease_ms=60000"))).await;
    assert_eq!(st, 200, "{got}");
    let groups: Vec<&str> = got["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["group"].as_str().unwrap())
        .collect();
    assert_eq!(groups, ["tenant-a", "tenant-b"], "{got}");
    let (_, stats) = send(c.get(url(""))).await;
    assert_eq!(
        (&stats["groups"], &stats["groups_held"], &stats["limited_claims"]),
        (&json!(2), &json!(1), &json!(1)),
        "{stats}"
    );
    let (st, page) = send(c.get(url("/groups?limit=1"))).await;
    assert_eq!(st, 200, "{page}");
    assert_eq!(page["groups"][0]["group"], "tenant-a");
    assert_eq!(page["groups"][0]["held"], "concurrency");
    assert_eq!(page["groups"][0]["ready"], 2);
    let next = page["next"].as_str().expect("a next page").to_owned();
    let (_, rest) = send(c.get(url(&format!("/groups?limit=1&after={next}")))).await;
    assert_eq!(rest["groups"][0]["group"], "tenant-b", "{rest}");
    // tenant-a gets 2 of its own: one more goes.
    let limits = url("/groups/tenant-a/limits");
    let (st, v) = send(c.put(&limits).json(&json!({"concurrency": 2}))).await;
    assert_eq!((st, &v), (200, &json!({"concurrency": 2, "rate": null})));
    assert_eq!(send(c.get(&limits)).await.1, v);
    let (_, more) = send(c.post(url("/claim?max=10"))).await;
    assert_eq!(more["jobs"].as_array().unwrap().len(), 1, "{more}");
    let (st, v) = send(c.delete(&limits)).await;
    assert_eq!((st, v), (200, json!({"result": "dropped"})));
    let (st, e) = send(c.get(&limits)).await;
    assert_eq!((st, e["error"]["code"].as_str()), (404, Some("limits_not_found")));
    // Bad input: 400 with the JSON error body.
    for body in [
        json!({"concurrency": 0}),
        json!({"rate": "fast"}),
        json!({"group_rate": "0/s"}),
        json!({"concurrency": -1}),
        json!({"limit": 3}),
    ] {
        let (st, e) = send(c.put(url("/settings")).json(&body)).await;
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{body}: {e}"
        );
    }
    for (route, body) in [
        ("/jobs", json!({"payload": 1, "group": "a b"})),
        ("/jobs", json!({"payload": 1, "group": ""})),
        ("/jobs", json!({"payload": 1, "group": "g".repeat(129)})),
    ] {
        let (st, e) = send(c.post(url(route)).json(&body)).await;
        assert_eq!(st, 400, "{body}: {e}");
    }
    let (st, _) = send(c.put(url("/groups/tenant-a/limits")).json(&json!({}))).await;
    assert_eq!(st, 400, "neither limit");
    for q in ["/groups?limit=0", "/groups?limit=1001", "/groups?after=nope"] {
        assert_eq!(send(c.get(url(q))).await.0, 400, "{q}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_and_groups_on_the_embedded_store() {
    let s = Server::start(None);
    settings_and_groups(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_and_groups_on_redis() {
    let redis = RedisServer::start();
    let s = Server::start(Some(&redis.url()));
    settings_and_groups(&s).await;
}

/// One delivery as a worker saw it: its group, its fence, and the store
/// times (ms) it was claimed at and still held at (an extend's answer,
/// made right before the ack).
#[derive(Debug, Clone)]
struct Ran {
    group: String,
    fence: u64,
    from: u64,
    to: u64,
}

/// The most intervals [from, to) of `runs` that hold at one instant.
fn most_at_once<'a>(runs: impl Iterator<Item = &'a Ran>) -> usize {
    let mut edges: Vec<(u64, i32)> = runs.flat_map(|r| [(r.from, 1), (r.to, -1)]).collect();
    // Ends before starts at the same ms: [from, to) is half-open.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

/// Three servers on one Redis, four workers on each: 12 groups of jobs,
/// group concurrency 2 and queue concurrency 5. Never more running, by a
/// sampler while it runs and by the workers' own records after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_servers_hold_the_limits_together() {
    let redis = RedisServer::start();
    let servers: Vec<Server> = (0..3).map(|_| Server::start(Some(&redis.url()))).collect();
    let c = reqwest::Client::new();
    let url = |s: &Server, p: &str| s.url(&format!("/v1/queues/work{p}"));
    let (st, _) = send(
        c.put(url(&servers[0], "/settings"))
            .json(&json!({"concurrency": 5, "group_concurrency": 2})),
    )
    .await;
    assert_eq!(st, 200);
    let jobs: Vec<Value> = (0..120)
        .map(|i| json!({"payload": i, "group": format!("g{}", i % 12)}))
        .collect();
    let (st, v) = send(c.post(url(&servers[1], "/batch")).json(&json!({"jobs": jobs}))).await;
    assert_eq!((st, &v["failed"]), (200, &json!(0)), "{v}");
    let ran = Arc::new(Mutex::new(Vec::<Ran>::new()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for s in &servers {
        for _ in 0..4 {
            let (c, ran, base) = (c.clone(), ran.clone(), url(s, ""));
            workers.push(tokio::spawn(async move {
                let lease = 10_000;
                let deadline = Instant::now() + Duration::from_secs(60);
                while Instant::now() < deadline {
                    let (st, v) = send(c.post(format!("{base}/claim?wait_ms=300&lease_ms={lease}"))).await;
                    assert_eq!(st, 200, "{v}");
                    let job = &v["job"];
                    if job.is_null() {
                        if ran.lock().unwrap().len() >= 120 {
                            return;
                        }
                        continue;
                    }
                    let (id, fence) = (job["id"].as_str().unwrap(), job["fence"].as_u64().unwrap());
                    let from = job["lease_until_ms"].as_u64().unwrap() - lease;
                    tokio::time::sleep(Duration::from_millis(15)).await;
                    let (st, e) = send(
                        c.post(format!("{base}/jobs/{id}/extend"))
                            .json(&json!({"fence": fence, "lease_ms": lease})),
                    )
                    .await;
                    assert_eq!(st, 200, "{e}");
                    let to = e["lease_until_ms"].as_u64().unwrap() - lease;
                    let (st, a) = send(
                        c.post(format!("{base}/jobs/{id}/ack"))
                            .json(&json!({"fence": fence})),
                    )
                    .await;
                    assert_eq!(st, 200, "{a}");
                    ran.lock().unwrap().push(Ran {
                        group: job["group"].as_str().unwrap().to_owned(),
                        fence,
                        from,
                        to,
                    });
                }
            }));
        }
    }
    // The sampler: the store's own counts while the workers run.
    let sampler = {
        let (c, done, base) = (c.clone(), done.clone(), url(&servers[2], ""));
        tokio::spawn(async move {
            let mut samples = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let (_, stats) = send(c.get(base.clone())).await;
                assert!(stats["in_flight"].as_u64().unwrap() <= 5, "{stats}");
                let (_, page) = send(c.get(format!("{base}/groups?limit=100"))).await;
                for g in page["groups"].as_array().unwrap() {
                    assert!(g["running"].as_u64().unwrap() <= 2, "{g}");
                }
                samples += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            samples
        })
    };
    for w in workers {
        w.await.unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let samples = sampler.await.unwrap();
    assert!(samples > 20, "only {samples} samples");
    let ran = ran.lock().unwrap().clone();
    assert_eq!(ran.len(), 120);
    let mut fences: Vec<u64> = ran.iter().map(|r| r.fence).collect();
    fences.sort();
    fences.dedup();
    assert_eq!(fences.len(), 120, "every delivery its own fence");
    assert!(most_at_once(ran.iter()) <= 5, "the queue's 5");
    let mut per_group: HashMap<&str, Vec<&Ran>> = HashMap::new();
    for r in &ran {
        per_group.entry(&r.group).or_default().push(r);
    }
    for (g, runs) in per_group {
        assert!(most_at_once(runs.into_iter()) <= 2, "group {g}'s 2");
    }
    // And the limits bit: with 12 workers, 5 ran at once at some point.
    assert!(most_at_once(ran.iter()) >= 3, "the workers barely overlapped");
}

/// A worker killed with SIGKILL mid-job holds its group's slot until its
/// lease ends; then the group's next job goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_slot_comes_back_after_its_lease() {
    let redis = RedisServer::start();
    let store = tollgate::Store::redis(&redis.url()).await.unwrap();
    let q = tollgate::JobQueue::new(&store, "killed").unwrap();
    q.set_limits(&tollgate::QueueLimits {
        group_concurrency: Some(1),
        ..Default::default()
    })
    .await
    .unwrap();
    for i in 0..2 {
        let o = tollgate::PushOptions {
            id: Some(format!("j{i}")),
            group: Some("solo".into()),
            ..Default::default()
        };
        q.push("x", &o).await.unwrap();
    }
    let mut worker = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "jobs",
            "work",
            "killed",
            "--redis",
            &redis.url(),
            "--lease",
            "2s",
            "--",
            "sleep",
            "60",
        ])
        .env_remove("TOLLGATE_REDIS_URL")
        .env("TOLLGATE_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("worker");
    let started = Instant::now();
    while q.stats().await.unwrap().in_flight == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the worker took no job"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    worker.wait().unwrap();
    let killed_at = Instant::now();
    // The lease (2 s, extended while the command ran) still holds the slot.
    assert!(q.claim().await.unwrap().is_none(), "the group's slot is taken");
    let job = q
        .next(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the slot comes back");
    assert!(
        killed_at.elapsed() >= Duration::from_millis(500),
        "{:?}",
        killed_at.elapsed()
    );
    assert_eq!(job.group.as_deref(), Some("solo"));
}

/// The CLI: `jobs limits`, `jobs group-limits`, `jobs groups`, `jobs push
/// --group`, on the store and through a server; bad input exits 64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_sets_and_reads_limits_and_groups() {
    let redis = RedisServer::start();
    let server = Server::start(Some(&redis.url()));
    let run = |args: &[&str], stdin: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(args)
            .env_remove("TOLLGATE_REDIS_URL")
            .env("TOLLGATE_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tollgate");
        use std::io::Write;
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let redis_url = redis.url();
    let api = server.url("");
    for at in [["--redis", redis_url.as_str()], ["--server", api.as_str()]] {
        let (code, out, err) = run(
            &[
                &[
                    "jobs",
                    "limits",
                    "cli",
                    "--group-concurrency",
                    "2",
                    "--rate",
                    "100/s",
                ][..],
                &at[..],
            ]
            .concat(),
            "",
        );
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(
            (&v["group_concurrency"], &v["rate"]),
            (&json!(2), &json!("100/s")),
            "{v}"
        );
        let (code, _, err) = run(
            &[&["jobs", "push", "cli", "--group", "t1"][..], &at[..]].concat(),
            "{}",
        );
        assert_eq!(code, 0, "{err}");
        let (code, out, err) = run(&[&["jobs", "groups", "cli"][..], &at[..]].concat(), "");
        assert_eq!(code, 0, "{err}");
        let row: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        assert_eq!(row["group"], "t1", "{out}");
        let (code, out, err) = run(
            &[
                &[
                    "jobs",
                    "group-limits",
                    "cli",
                    "--group",
                    "t1",
                    "--concurrency",
                    "3",
                ][..],
                &at[..],
            ]
            .concat(),
            "",
        );
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            serde_json::from_str::<Value>(out.trim()).unwrap()["concurrency"],
            3
        );
        let (code, out, err) = run(
            &[
                &["jobs", "group-limits", "cli", "--group", "t1", "--drop"][..],
                &at[..],
            ]
            .concat(),
            "",
        );
        assert_eq!((code, out.trim()), (0, "null"), "{err}");
        let (code, out, _) = run(&[&["jobs", "limits", "cli", "--none"][..], &at[..]].concat(), "");
        assert_eq!(code, 0);
        assert_eq!(
            serde_json::from_str::<Value>(out.trim()).unwrap()["rate"],
            Value::Null
        );
        for bad in [
            &["jobs", "limits", "cli", "--concurrency", "0"][..],
            &["jobs", "limits", "cli", "--rate", "fast"][..],
            &["jobs", "push", "cli", "--group", "a b"][..],
            &["jobs", "groups", "cli", "--limit", "0"][..],
            &[
                "jobs",
                "group-limits",
                "cli",
                "--group",
                "x y",
                "--concurrency",
                "1",
            ][..],
        ] {
            let (code, _, err) = run(&[bad, &at[..]].concat(), "{}");
            assert_eq!(code, 64, "{bad:?} {at:?}: {err}");
        }
    }
}

/// The groups of a claim's jobs (null: the default group), sorted.
fn groups_of(claimed: &Value) -> Vec<String> {
    let mut groups: Vec<String> = claimed["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["group"].as_str().unwrap_or("-").to_owned())
        .collect();
    groups.sort_unstable();
    groups
}

/// A fair queue on the embedded store through `kill -9`: the queue's
/// limits, a group's own, a schedule's group, the running jobs' slots and
/// the ready jobs' groups are all there after the restart, and the limits
/// hold on the next claims as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_queue_and_its_schedule_survive_kill_9() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let args = ["--data-dir", data.to_str().expect("path"), "--fsync", "always"];
    let mut s = Server::start_with(None, &args);
    let c = reqwest::Client::new();
    let url = |s: &Server, p: &str| s.url(&format!("/v1/queues/mail{p}"));
    let settings = json!({"concurrency": 3, "rate": null, "group_concurrency": 1, "group_rate": null});
    let (st, v) = send(c.put(url(&s, "/settings")).json(&settings)).await;
    assert_eq!((st, &v), (200, &settings));
    let own = json!({"concurrency": 2, "rate": null});
    let (st, v) = send(c.put(url(&s, "/groups/tenant-b/limits")).json(&own)).await;
    assert_eq!((st, &v), (200, &own));
    let schedule = s.url("/v1/schedules/digest");
    let body = json!({"when": "0 3 * * *", "queue": "mail", "payload": "digest", "group": "tenant-a"});
    let (st, v) = send(c.put(&schedule).json(&body)).await;
    assert_eq!((st, v["group"].as_str()), (201, Some("tenant-a")), "{v}");
    for bad in [json!("two words"), json!(""), json!(7)] {
        let mut b = body.clone();
        b["group"] = bad;
        let (st, e) = send(c.put(&schedule).json(&b)).await;
        assert_eq!(st, 400, "{b}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("group"), "{e}");
    }
    let (st, t) = send(c.post(s.url("/v1/schedules/digest/trigger"))).await;
    assert_eq!(st, 200, "{t}");
    let triggered = t["job_id"].as_str().expect("job id").to_owned();
    for (id, group) in [
        ("a2", "tenant-a"),
        ("b1", "tenant-b"),
        ("b2", "tenant-b"),
        ("b3", "tenant-b"),
    ] {
        let (st, p) = send(
            c.post(url(&s, "/jobs"))
                .json(&json!({"payload": id, "id": id, "group": group})),
        )
        .await;
        assert_eq!(st, 201, "{p}");
    }
    let (st, got) = send(c.post(url(&s, "/claim?max=10&lease_ms=600000"))).await;
    assert_eq!(st, 200, "{got}");
    assert_eq!(groups_of(&got), ["tenant-a", "tenant-b", "tenant-b"], "{got}");
    let mine = got["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["group"] == "tenant-a")
        .expect("tenant-a's job")
        .clone();
    assert_eq!(mine["id"].as_str(), Some(triggered.as_str()), "pushed first");

    s.child.kill().expect("kill -9");
    s.child.wait().expect("wait");
    let s = Server::start_with(None, &args);
    assert_eq!(send(c.get(url(&s, "/settings"))).await.1, settings);
    assert_eq!(send(c.get(url(&s, "/groups/tenant-b/limits"))).await.1, own);
    let (_, v) = send(c.get(s.url("/v1/schedules/digest"))).await;
    assert_eq!(v["group"], "tenant-a", "{v}");
    let (_, none) = send(c.post(url(&s, "/claim?max=10"))).await;
    assert_eq!(
        groups_of(&none),
        Vec::<String>::new(),
        "every group is at its limit"
    );
    let (_, page) = send(c.get(url(&s, "/groups"))).await;
    let counts: Vec<(String, u64, u64)> = page["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| {
            (
                g["group"].as_str().unwrap_or("-").to_owned(),
                g["running"].as_u64().unwrap(),
                g["ready"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(counts.contains(&("tenant-a".into(), 1, 1)), "{page}");
    assert!(counts.contains(&("tenant-b".into(), 2, 1)), "{page}");
    // The running job's fence still holds: its ack frees tenant-a's slot.
    let (st, a) = send(
        c.post(url(&s, &format!("/jobs/{triggered}/ack")))
            .json(&json!({"fence": mine["fence"]})),
    )
    .await;
    assert_eq!(st, 200, "{a}");
    let (_, next) = send(c.post(url(&s, "/claim?max=10"))).await;
    assert_eq!(next["jobs"][0]["id"], "a2", "{next}");
    assert_eq!(next["jobs"].as_array().unwrap().len(), 1, "{next}");
}
