//! Random sequences of schedule operations, run step by step on the memory
//! store and on a real redis-server: every answer must match. The memory
//! model (`schedule/memory.rs`) is the reference; this holds
//! `schedule.lua` and `index.lua` to it. The schedules tick hourly or less
//! often, so no tick comes due while a sequence runs and every answer is
//! exact; firing itself is covered by `schedules.rs` on every store.

mod support;

use std::time::{Duration, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::RedisServer;
use tollgate::{Backoff, JobQueue, Misfire, ScheduleInfo, ScheduleSpec, Schedules, Store, Upserted, When};

const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];
const QUEUES: [&str; 3] = ["q1", "q2", "wide"];
const WHENS: [&str; 5] = [
    "every 1h",
    "0 3 * * *",
    "@daily",
    "TZ=Europe/Berlin 30 2 * * *",
    "every 2h from 1800000000000",
];

#[derive(Debug)]
enum Op {
    Upsert(usize, Box<ScheduleSpec>),
    Get(usize),
    List,
    Delete(usize),
    Pause(usize),
    Resume(usize),
    Trigger(usize),
    Fire,
    /// Claims (and acks) a job of queue q1 or q2: a trigger's job, with
    /// its schedule's group.
    Claim(usize),
}

/// An answer with what differs by store taken out (the millisecond in a
/// trigger's job id, which is the store's now).
#[derive(Debug, PartialEq)]
enum Answer {
    Upserted(Upserted),
    Info(Option<Box<ScheduleInfo>>),
    List(Vec<ScheduleInfo>),
    Flag(bool),
    Triggered(Option<String>),
    /// A claimed job's id (as unmanual) and group, and the queue's groups.
    Claimed(Option<(String, Option<String>)>, u64),
    Fired {
        fired: usize,
        missed: usize,
        refused: usize,
    },
    Error(tollgate::ErrorKind),
}

fn random_spec(rng: &mut StdRng) -> ScheduleSpec {
    let mut spec = ScheduleSpec::new(
        When::parse(WHENS[rng.random_range(0..WHENS.len())]).expect("when"),
        QUEUES[rng.random_range(0..QUEUES.len())],
    );
    spec.payload = [b"".as_slice(), b"p1", b"{\"k\":2}"][rng.random_range(0..3)].to_vec();
    spec.priority = [0, 9][rng.random_range(0..2)];
    spec.misfire = [Misfire::Skip, Misfire::Once, Misfire::All][rng.random_range(0..3)];
    if rng.random_bool(0.2) {
        spec.backoff = Backoff::Fixed(Duration::from_secs(3));
    }
    if rng.random_bool(0.2) {
        spec.end = Some(UNIX_EPOCH + Duration::from_secs(4_000_000_000));
    }
    if rng.random_bool(0.3) {
        spec.group = Some(["tenant-a", "tenant-b"][rng.random_range(0..2)].to_owned());
    }
    spec.paused = rng.random_bool(0.2);
    spec
}

fn random_op(rng: &mut StdRng) -> Op {
    let n = rng.random_range(0..NAMES.len());
    match rng.random_range(0..11) {
        10 => Op::Claim(rng.random_range(0..2)),
        0..=2 => Op::Upsert(n, Box::new(random_spec(rng))),
        3 => Op::Get(n),
        4 => Op::List,
        5 => Op::Delete(n),
        6 => Op::Pause(n),
        7 => Op::Resume(n),
        8 => Op::Trigger(n),
        _ => Op::Fire,
    }
}

/// Job ids `<name>@manual-<ms>` with the ms taken out.
fn unmanual(id: &str) -> String {
    match id.split_once("@manual-") {
        Some((name, _)) => format!("{name}@manual"),
        None => id.to_owned(),
    }
}

fn normal(mut info: ScheduleInfo) -> ScheduleInfo {
    for t in &mut info.recent {
        if t.manual {
            t.job_id = unmanual(&t.job_id);
            t.at = UNIX_EPOCH;
        }
    }
    info
}

async fn claim(store: &Store, queue: &str) -> tollgate::Result<Answer> {
    let q = JobQueue::new(store, queue)?;
    let job = q.claim().await?;
    if let Some(j) = &job {
        q.ack(&j.id, j.fence).await?;
    }
    let groups = q.stats().await?.groups;
    Ok(Answer::Claimed(job.map(|j| (unmanual(&j.id), j.group)), groups))
}

async fn apply(store: &Store, s: &Schedules, op: &Op) -> Answer {
    let answer = match op {
        Op::Claim(q) => claim(store, QUEUES[*q]).await,
        Op::Upsert(n, spec) => s.upsert(NAMES[*n], spec).await.map(Answer::Upserted),
        Op::Get(n) => s
            .get(NAMES[*n])
            .await
            .map(|i| Answer::Info(i.map(|i| Box::new(normal(i))))),
        Op::List => s
            .list()
            .await
            .map(|l| Answer::List(l.into_iter().map(normal).collect())),
        Op::Delete(n) => s.delete(NAMES[*n]).await.map(Answer::Flag),
        Op::Pause(n) => s.pause(NAMES[*n]).await.map(Answer::Flag),
        Op::Resume(n) => s.resume(NAMES[*n]).await.map(Answer::Flag),
        Op::Trigger(n) => s
            .trigger(NAMES[*n])
            .await
            .map(|id| Answer::Triggered(id.as_deref().map(unmanual))),
        Op::Fire => s.fire_due().await.map(|r| Answer::Fired {
            fired: r.fired.len(),
            missed: r.missed.len(),
            refused: r.refused.len(),
        }),
    };
    answer.unwrap_or_else(|e| Answer::Error(e.kind()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_redis_answer_alike() {
    let server = RedisServer::start();
    let mut grouped_claims = 0;
    for seed in 0..8u64 {
        server.command(&["FLUSHALL"]);
        let memory = Store::memory();
        let redis = Store::redis(&server.url()).await.expect("redis");
        // The queue "wide" is partitioned on both: a schedule to it is
        // refused the same way.
        for store in [&memory, &redis] {
            let wide = JobQueue::partitioned(store, "wide", 4).expect("sharded");
            wide.push(b"x", &Default::default()).await.expect("push");
        }
        let (m, r) = (Schedules::new(&memory), Schedules::new(&redis));
        let mut rng = StdRng::seed_from_u64(seed);
        for step in 0..150 {
            let op = random_op(&mut rng);
            let (a, b) = (apply(&memory, &m, &op).await, apply(&redis, &r, &op).await);
            assert_eq!(a, b, "seed {seed} step {step}: {op:?}");
            if let Answer::Claimed(Some((_, Some(_))), _) = a {
                grouped_claims += 1;
            }
        }
    }
    assert!(
        grouped_claims >= 5,
        "only {grouped_claims} claims of a grouped job"
    );
}
