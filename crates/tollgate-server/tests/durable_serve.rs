//! `tollgate serve` on the durable embedded store, as users run it: the
//! README's first command restarted keeps a delayed job, a schedule, a
//! held lease and a waiting ticket; `kill -9` under load (jobs pushed,
//! claimed, acked and nacked, a gate's permits, a schedule firing, a
//! waiting room's visitors), many times, loses nothing that was answered;
//! a second server on one directory and a damaged log exit 78; a server
//! whose disk refuses its log (a file-size limit set at its start) answers
//! changes 507 `not_persisted`, goes on answering reads, and a restart
//! finds every answered change. (The disk coming back while the store
//! runs: tests/disk_full.rs in the library, which owns its process's
//! limit.)

mod room_support;
mod serve_support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use room_support::{Visitor, is_admitted};
use serde_json::{Value, json};
use serve_support::{Server, send};

/// `tollgate serve` as the README's first command runs it: no store
/// flags, in `cwd`, so the data lands in `cwd/tollgate-data`.
fn readme_serve(cwd: &std::path::Path) -> Server {
    let mut cmd = Server::command(None, &["--data-dir", "tollgate-data"]);
    cmd.current_dir(cwd);
    Server::spawn(cmd, Stdio::inherit())
}

/// The README's first command, stopped and started again (an upgrade, a
/// reboot, `systemctl restart`): the delayed job, the schedule made over
/// the API, the held lease with its fence and the waiting ticket with its
/// place are all there, and the data went to `./tollgate-data`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_command_restarted_keeps_everything() {
    let cwd = tempfile::tempdir().expect("tempdir");
    let s = readme_serve(cwd.path());
    let c = reqwest::Client::new();
    let (st, _) = send(
        c.post(s.url("/v1/queues/emails/jobs"))
            .json(&json!({"payload": "hello", "id": "welcome", "delay_ms": 600_000})),
    )
    .await;
    assert_eq!(st, 201);
    let (st, _) = send(
        c.put(s.url("/v1/schedules/nightly"))
            .json(&json!({"when": "0 3 * * *", "queue": "reports"})),
    )
    .await;
    assert_eq!(st, 201);
    let enter = json!({"capacity": 1, "ttl_ms": 600_000, "heartbeat_ms": 600_000});
    let (st, held) = send(c.post(s.url("/v1/gates/printer/enter")).json(&enter)).await;
    assert_eq!((st, held["status"].as_str()), (200, Some("granted")), "{held}");
    let (_, waiting) = send(c.post(s.url("/v1/gates/printer/enter")).json(&enter)).await;
    assert_eq!(waiting["status"], "queued", "{waiting}");
    s.terminate();
    assert!(
        cwd.path().join("tollgate-data").is_dir(),
        "the data lives in ./tollgate-data"
    );

    let s = readme_serve(cwd.path());
    let (st, store) = send(c.get(s.url("/v1/store"))).await;
    assert_eq!((st, store["kind"].as_str()), (200, Some("memory")), "{store}");
    let durable = &store["durable"];
    assert!(
        durable["data_dir"]
            .as_str()
            .is_some_and(|d| d.ends_with("/tollgate-data")),
        "{store}"
    );
    assert_eq!(durable["fsync"], "everysec", "{store}");
    assert!(durable["recovered"]["replayed"].as_u64() > Some(0), "{store}");
    assert_eq!(durable["disk_failing"], false, "{store}");
    let (st, job) = send(c.get(s.url("/v1/queues/emails/jobs/welcome"))).await;
    assert_eq!((st, job["state"].as_str()), (200, Some("delayed")), "{job}");
    let (st, sched) = send(c.get(s.url("/v1/schedules/nightly"))).await;
    assert_eq!((st, sched["queue"].as_str()), (200, Some("reports")), "{sched}");
    let (_, gate) = send(c.get(s.url("/v1/gates/printer"))).await;
    assert_eq!(
        (gate["used"].as_u64(), gate["waiting"].as_u64()),
        (Some(1), Some(1)),
        "{gate}"
    );
    assert_eq!(gate["fence"], held["fence"], "{gate}");
    let ticket = waiting["ticket"].as_str().expect("ticket");
    let (st, place) = send(c.get(s.url(&format!("/v1/gates/printer/tickets/{ticket}")))).await;
    assert_eq!((st, place["position"].as_u64()), (200, Some(1)), "{place}");
    // The held lease is still the holder's: its release hands over.
    let token = held["token"].as_str().expect("token");
    let (st, _) = send(c.delete(s.url(&format!("/v1/gates/printer/leases/{token}")))).await;
    assert_eq!(st, 200);
    let (_, now) = send(c.get(s.url(&format!("/v1/gates/printer/tickets/{ticket}")))).await;
    assert_eq!(now["status"], "granted", "{now}");
    assert!(now["fence"].as_u64() > held["fence"].as_u64());
}

/// What clients were told, across every run of the server.
#[derive(Default, Clone)]
struct Told {
    /// Pushes answered 201.
    pushed: BTreeSet<String>,
    /// Acks answered 200.
    acked: BTreeSet<String>,
    /// Acks sent, answered or not: such a job may be gone.
    acking: BTreeSet<String>,
    /// Every fence a grant answered, with the run it came in.
    fences: Vec<(usize, u64)>,
    /// Nacks answered "retry": the job and the fence of the delivery.
    nacked: BTreeMap<String, u64>,
    /// The room's visitors it let in.
    admitted: BTreeSet<String>,
    /// The room's visitors told to wait: cookie, place, and the run.
    waiting: BTreeMap<String, (String, u64, usize)>,
    /// The schedule's tick jobs a restarted server had.
    ticks: BTreeSet<String>,
}

/// The room's capacity in the kill test; its sessions and grace outlast
/// the test, so nobody leaves and the line never moves.
const ROOM_CAPACITY: usize = 3;

/// A visitor after another arrives at the room until the server dies,
/// noting who was let in and who was told to wait where.
async fn visitors(proxy: String, run: usize, told: Arc<Mutex<Told>>) {
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    for i in 0.. {
        let name = format!("v{run}-{i}");
        let mut v = Visitor::new(&name);
        let Some(a) = v.try_get(&c, &proxy, "/page", true).await else {
            return;
        };
        if is_admitted(&a, &name) {
            told.lock().expect("lock").admitted.insert(name);
        } else {
            let j = a.json();
            assert_eq!(j["status"], "queued", "{name}: {} {}", a.status, a.text);
            let place = j["position"].as_u64().expect("position");
            let cookie = v.cookie.expect("a waiting visitor's cookie");
            told.lock()
                .expect("lock")
                .waiting
                .insert(name, (cookie, place, run));
        }
        // (A few a run: each is asked for its place at the end.)
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One client's work until the server dies: push a job, claim one and
/// ack it, take the gate's permit and give it back; note every answer.
async fn load(base: String, worker: usize, run: usize, told: Arc<Mutex<Told>>) {
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    // Half the workers take and give back the gate's permits only. (A
    // lease held when the server is killed stays held after the restart,
    // as it must: the gate is wide enough for all of those.)
    if worker % 2 == 1 {
        while gate_round(&c, &base, run, &told).await {}
        return;
    }
    for i in 0.. {
        let id = format!("r{run}-w{worker}-{i}");
        let push = c
            .post(format!("{base}/v1/queues/work/jobs"))
            .json(&json!({"payload": 1, "id": id}))
            .send()
            .await;
        match push {
            Ok(r) if r.status() == 201 => {
                told.lock().expect("lock").pushed.insert(id);
            }
            _ => return,
        }
        let Ok(r) = c.post(format!("{base}/v1/queues/work/claim")).send().await else {
            return;
        };
        let Ok(claimed) = r.json::<Value>().await else {
            return;
        };
        if let Some(job) = claimed["jobs"].get(0) {
            let (id, fence) = (
                job["id"].as_str().unwrap_or_default().to_owned(),
                job["fence"].clone(),
            );
            // Every other delivery fails: nacked, to be run again.
            if i % 2 == 1 {
                let nack = c
                    .post(format!("{base}/v1/queues/work/jobs/{id}/nack"))
                    .json(&json!({"fence": fence, "delay_ms": 0}))
                    .send()
                    .await;
                let Ok(r) = nack else { return };
                let Ok(said) = r.json::<Value>().await else {
                    return;
                };
                if said["result"] == "retry" {
                    let fence = fence.as_u64().expect("fence");
                    told.lock().expect("lock").nacked.insert(id, fence);
                }
            } else {
                told.lock().expect("lock").acking.insert(id.clone());
                let ack = c
                    .post(format!("{base}/v1/queues/work/jobs/{id}/ack"))
                    .json(&json!({"fence": fence}))
                    .send()
                    .await;
                match ack {
                    Ok(r) if r.status() == 200 => {
                        told.lock().expect("lock").acked.insert(id);
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
        }
        if !gate_round(&c, &base, run, &told).await {
            return;
        }
    }
}

/// Takes one of the gate's permits and gives it back, noting the fence
/// of a grant; `false` once the server is gone.
async fn gate_round(c: &reqwest::Client, base: &str, run: usize, told: &Mutex<Told>) -> bool {
    let enter = c
        .post(format!("{base}/v1/gates/pool/enter"))
        .json(&json!({"capacity": 1000, "queue": false, "ttl_ms": 600_000}))
        .send()
        .await;
    let Ok(r) = enter else { return false };
    let Ok(e) = r.json::<Value>().await else {
        return false;
    };
    if e["status"] == "granted" {
        told.lock()
            .expect("lock")
            .fences
            .push((run, e["fence"].as_u64().expect("fence")));
        let token = e["token"].as_str().unwrap_or_default();
        return c
            .delete(format!("{base}/v1/gates/pool/leases/{token}"))
            .send()
            .await
            .is_ok();
    }
    true
}

/// 50 times: start the server on one data directory (`always` and
/// `everysec` in turn, snapshots every MiB), put it under load (jobs
/// pushed, claimed, acked and nacked, a gate's permits taken and given
/// back, a schedule firing every second, visitors arriving at a waiting
/// room), `kill -9` it at a random moment, and check what a new server on
/// the directory holds against what the clients were told: every
/// answered push is there unless it was acked, no acked job is back, no
/// answered nack is undone, no fence was handed out twice and the first
/// fence after a restart is above every earlier one, the gate holds at
/// most its capacity, the schedule and every tick it pushed are there,
/// the room never let in more than its capacity and every visitor told to
/// wait still waits at the place it was told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_nothing_answered() {
    let (_seen, up, dir) = room_support::site().await;
    let config = room_support::room_config(up, ROOM_CAPACITY as u32, r#"arrival_rate = "off""#)
        .replace("tokens = [\"admin-token-0123456789\"]\n", "")
        .replace("session_ttl = \"1500ms\"", "session_ttl = \"600s\"")
        .replace("grace = \"3s\"", "grace = \"600s\"");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, &config).expect("config");
    let config = path.to_str().expect("path").to_owned();
    let data = dir.path().join("data").to_str().expect("path").to_owned();
    let told = Arc::new(Mutex::new(Told::default()));
    serve_support::install_tls_provider();
    let c = reqwest::Client::new();
    let mut rng = rand::rng();
    for run in 0..50 {
        let fsync = if run % 2 == 0 { "always" } else { "everysec" };
        let args = [
            "--config",
            &config,
            "--data-dir",
            &data,
            "--fsync",
            fsync,
            "--snapshot-after-mb",
            "1",
        ];
        let mut s = Server::start_with(None, &args);
        let so_far = told.lock().expect("lock").clone();
        check(&c, &s, &so_far, run, |r| r + 1 == run).await;
        told.lock().expect("lock").ticks = so_far_ticks(&c, &s, so_far.ticks).await;
        if run == 0 {
            let (st, e) = send(
                c.put(s.url("/v1/schedules/tick"))
                    .json(&json!({"when": "every 1s", "queue": "ticks", "payload": 1})),
            )
            .await;
            assert_eq!(st, 201, "{e}");
        }
        let mut workers: Vec<_> = (0..8)
            .map(|w| tokio::spawn(load(s.base.clone(), w, run, told.clone())))
            .collect();
        let proxy = s.proxy.clone().expect("the room's address");
        workers.push(tokio::spawn(visitors(proxy, run, told.clone())));
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..500))).await;
        s.child.kill().expect("kill -9");
        s.child.wait().expect("wait");
        for w in workers {
            w.await.expect("worker");
        }
    }
    let s = Server::start_with(None, &["--config", &config, "--data-dir", &data]);
    let told = told.lock().expect("lock").clone();
    check(&c, &s, &told, 50, |_| true).await;
    let ticks = so_far_ticks(&c, &s, told.ticks.clone()).await;
    eprintln!(
        "kill -9 x50: {} pushes, {} acks, {} nacks, {} grants, {} visitors waiting, {} ticks",
        told.pushed.len(),
        told.acked.len(),
        told.nacked.len(),
        told.fences.len(),
        told.waiting.len(),
        ticks.len()
    );
    assert!(
        told.pushed.len() > 300,
        "the load did little: {} pushes",
        told.pushed.len()
    );
    assert!(told.fences.len() > 300, "few grants: {}", told.fences.len());
    assert!(told.nacked.len() > 50, "few nacks: {}", told.nacked.len());
    assert!(
        told.waiting.len() > 50,
        "few waiting visitors: {}",
        told.waiting.len()
    );
    // (A kill may eat the answer to an admission.)
    assert!(!told.admitted.is_empty(), "nobody was let in");
    assert!(ticks.len() > 5, "the schedule fired little: {ticks:?}");
    // The schedule goes on firing after the last restart.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (_, tick) = send(c.get(s.url("/v1/schedules/tick"))).await;
        let recent = tick["recent"].as_array().cloned().unwrap_or_default();
        if recent
            .iter()
            .any(|t| !ticks.contains(t["job_id"].as_str().unwrap_or_default()))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the schedule stopped firing: {tick}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The schedule's tick jobs a (re)started server holds: every one a
/// server held before (`before`) is still in its queue (nothing consumes
/// it), plus the ticks the schedule says it fired last.
async fn so_far_ticks(c: &reqwest::Client, s: &Server, before: BTreeSet<String>) -> BTreeSet<String> {
    let (st, tick) = send(c.get(s.url("/v1/schedules/tick"))).await;
    if before.is_empty() && st == 404 {
        return before;
    }
    assert_eq!(st, 200, "the schedule is gone: {tick}");
    let lost = absent(c, s, "ticks", &before).await;
    assert!(lost.is_empty(), "ticks lost: {lost:?}");
    let mut ticks = before;
    for t in tick["recent"].as_array().expect("recent") {
        ticks.insert(t["job_id"].as_str().expect("job_id").to_owned());
    }
    ticks
}

/// Which of the jobs `ids` queue `queue` of `s` does not have.
async fn absent<'a>(
    c: &reqwest::Client,
    s: &Server,
    queue: &str,
    ids: impl IntoIterator<Item = &'a String>,
) -> Vec<String> {
    let mut missing = Vec::new();
    for id in ids {
        let (st, _) = send(c.get(s.url(&format!("/v1/queues/{queue}/jobs/{id}")))).await;
        if st != 200 {
            missing.push(id.clone());
        }
    }
    missing
}

/// What a restarted server holds against what clients were told, for the
/// jobs and waiting visitors of the runs `recheck` picks (the last one
/// after each kill, to keep it quick; all of them at the end).
async fn check(c: &reqwest::Client, s: &Server, told: &Told, run: usize, recheck: impl Fn(usize) -> bool) {
    // Jobs are named `r<run>-…`.
    let picked = |id: &&String| {
        let of = id[1..].split('-').next().and_then(|r| r.parse().ok());
        recheck(of.expect("a job of the load"))
    };
    // (An ack sent but not answered may have happened: such a job may be
    // gone or not.)
    let unacked: Vec<_> = told.pushed.difference(&told.acking).filter(picked).collect();
    let missing = absent(c, s, "work", unacked).await;
    // An answered ack's job is gone for good.
    let mut back = Vec::new();
    for id in told.acked.iter().filter(picked) {
        let (st, _) = send(c.get(s.url(&format!("/v1/queues/work/jobs/{id}")))).await;
        if st == 200 {
            back.push(id.clone());
        }
    }
    assert!(missing.is_empty(), "run {run}: answered pushes lost: {missing:?}");
    assert!(back.is_empty(), "run {run}: acked jobs came back: {back:?}");
    // An answered nack's delivery is over: the job waits to run again (or
    // died of its attempts), or runs in a later delivery.
    for (id, fence) in told.nacked.iter().filter(|(id, _)| picked(id)) {
        let (_, job) = send(c.get(s.url(&format!("/v1/queues/work/jobs/{id}")))).await;
        if job["state"] == "running" {
            assert!(
                job["fence"].as_u64() > Some(*fence),
                "run {run}: a nack undone: {job}"
            );
        }
    }
    let mut seen = BTreeMap::new();
    for (r, f) in &told.fences {
        if let Some(other) = seen.insert(*f, *r) {
            panic!("fence {f} handed out twice (runs {other} and {r})");
        }
    }
    let (_, gate) = send(c.get(s.url("/v1/gates/pool"))).await;
    if gate["capacity"].is_u64() {
        assert!(gate["used"].as_u64() <= gate["capacity"].as_u64(), "{gate}");
    }
    let (st, e) = send(
        c.post(s.url("/v1/gates/pool/enter"))
            .json(&json!({"capacity": 1000, "queue": false, "ttl_ms": 600_000})),
    )
    .await;
    assert_eq!(st, 200, "{e}");
    if e["status"] == "granted" {
        let f = e["fence"].as_u64().expect("fence");
        let top = told.fences.iter().map(|(_, f)| *f).max().unwrap_or(0);
        assert!(f > top, "run {run}: fence {f} after a restart is not above {top}");
        let token = e["token"].as_str().expect("token");
        send(c.delete(s.url(&format!("/v1/gates/pool/leases/{token}")))).await;
    }
    // The room: never more let in than its capacity (nobody ever left),
    // and a waiting visitor keeps its place (nobody ahead ever left).
    assert!(
        told.admitted.len() <= ROOM_CAPACITY,
        "run {run}: let in: {:?}",
        told.admitted
    );
    let proxy = s.proxy.clone().expect("the room's address");
    for (name, (cookie, place, _)) in told.waiting.iter().filter(|(_, (_, _, r))| recheck(*r)) {
        let mut v = Visitor::new(name);
        v.cookie = Some(cookie.clone());
        let a = v.get(c, &proxy, "/page", true).await.json();
        assert_eq!(
            (&a["status"], a["position"].as_u64()),
            (&json!("queued"), Some(*place)),
            "run {run}: {name} was told to wait at {place}: {a}"
        );
    }
}

/// A second server on a directory another holds exits 78 and says who
/// has it; a damaged log exits 78 naming the file and the offset, and
/// `tollgate data check` / `repair` say what is there and keep what reads
/// whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_or_damaged_directory_exits_78() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().to_str().expect("path").to_owned();
    let s = Server::start_with(None, &["--data-dir", &data, "--fsync", "always"]);
    let out = Server::command(None, &["--data-dir", &data])
        .output()
        .expect("second");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(stderr.contains("in use by another tollgate"), "{stderr}");

    let c = reqwest::Client::new();
    for i in 0..30 {
        let (st, _) = send(
            c.post(s.url("/v1/queues/q/jobs"))
                .json(&json!({"payload": i, "id": format!("j{i}")})),
        )
        .await;
        assert_eq!(st, 201);
    }
    s.terminate();
    let segment = std::fs::read_dir(dir.path())
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "tgl") && std::fs::metadata(p).is_ok_and(|m| m.len() > 0)
        })
        .max()
        .expect("a segment");
    let mut bytes = std::fs::read(&segment).expect("read");
    let at = bytes.len() / 3;
    bytes[at] ^= 0x5a;
    std::fs::write(&segment, bytes).expect("write");

    let out = Server::command(None, &["--data-dir", &data])
        .output()
        .expect("damaged");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains("damaged at byte") && stderr.contains(segment.to_str().expect("p")),
        "{stderr}"
    );

    let tollgate = env!("CARGO_BIN_EXE_tollgate");
    let check = Command::new(tollgate)
        .args(["data", "check", "--dir", &data])
        .output()
        .expect("check");
    assert_eq!(check.status.code(), Some(78));
    let report: Value = serde_json::from_slice(&check.stdout).expect("json");
    assert_eq!(report["recoverable"], false, "{report}");
    let repair = Command::new(tollgate)
        .args(["data", "repair", "--dir", &data])
        .output()
        .expect("repair");
    assert_eq!(
        repair.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&repair.stderr)
    );

    let s = Server::start_with(None, &["--data-dir", &data]);
    let (_, stats) = send(c.get(s.url("/v1/queues/q"))).await;
    let ready = stats["ready"].as_u64().expect("ready");
    assert!(ready > 0 && ready < 30, "a prefix of the pushes is kept: {stats}");
}

/// A disk that refuses the log's writes, as a full one does: the server
/// starts under a file-size limit (`prlimit --fsize`), and once its log
/// reaches it a push is answered 507 `not_persisted` (and again on the
/// next try) while reads go on and `/metrics` says the disk fails; a
/// restart without the limit finds every push answered 201, and takes new
/// ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_disk_answers_507_and_loses_nothing_answered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().to_str().expect("path").to_owned();
    let args = ["--data-dir", data.as_str(), "--fsync", "always"];
    let inner = Server::command(None, &args);
    let mut cmd = Command::new("prlimit");
    cmd.arg("--fsize=262144")
        .arg("--")
        .arg(inner.get_program())
        .args(inner.get_args());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let s = Server::spawn(cmd, Stdio::inherit());
    let c = reqwest::Client::new();
    let payload = "x".repeat(1000);
    let mut answered = Vec::new();
    let refused = loop {
        assert!(answered.len() < 1000, "256 KiB of log never filled");
        let id = format!("p{}", answered.len());
        let (st, body) = send(
            c.post(s.url("/v1/queues/q/jobs"))
                .json(&json!({"payload": payload, "id": id})),
        )
        .await;
        match st {
            201 => answered.push(id),
            _ => break (st, body),
        }
    };
    assert_eq!(refused.0, 507, "{}", refused.1);
    assert_eq!(refused.1["error"]["code"], "not_persisted", "{}", refused.1);
    assert!(answered.len() > 100, "only {} pushes fit", answered.len());
    let (st, again) = send(
        c.post(s.url("/v1/queues/q/jobs"))
            .json(&json!({"payload": payload, "id": "late"})),
    )
    .await;
    assert_eq!(
        (st, &again["error"]["code"]),
        (507, &json!("not_persisted")),
        "{again}"
    );
    let (st, job) = send(c.get(s.url(&format!("/v1/queues/q/jobs/{}", answered[0])))).await;
    assert_eq!(st, 200, "reads go on: {job}");
    let metrics = s.metrics(None).await;
    assert!(
        metrics.lines().any(|l| l == "tollgate_store_disk_failing 1"),
        "{metrics}"
    );
    drop(s);

    let s = Server::start_with(None, &args);
    let missing = absent(&c, &s, "q", &answered).await;
    assert!(missing.is_empty(), "answered pushes lost: {missing:?}");
    let (st, _) = send(c.get(s.url("/v1/queues/q/jobs/late"))).await;
    assert_eq!(st, 404, "a push answered 507 was kept");
    let (st, body) = send(
        c.post(s.url("/v1/queues/q/jobs"))
            .json(&json!({"payload": payload, "id": "after"})),
    )
    .await;
    assert_eq!(st, 201, "{body}");
}
