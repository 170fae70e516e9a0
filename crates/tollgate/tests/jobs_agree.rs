//! Random sequences of job-queue operations with groups and limits, run
//! step by step on the memory store and on a real redis-server (and on
//! the durable store, closed and recovered at random steps): every answer
//! must match. The memory store is the reference model; this holds
//! jobs.lua's fair steps to it. Time plays no part: leases and delays are
//! an hour, rates a few per hour (the first job goes, the next waits).

mod support;

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::RedisServer;
use tollgate::{GroupHold, GroupLimits, JobQueue, OnDuplicate, PushOptions, QueueLimits, Rate, Retry, Store};

const HOUR: Duration = Duration::from_secs(3600);
const GROUPS: [Option<&str>; 5] = [None, Some("a"), Some("b"), Some("c"), Some("tenant:42")];
const IDS: usize = 24;

#[derive(Debug, Clone)]
enum Op {
    Push {
        id: usize,
        group: usize,
        priority: u8,
        later: bool,
        replace: bool,
    },
    PushMany(Vec<(usize, usize)>),
    Claim(usize),
    Ack(usize),
    Nack {
        which: usize,
        later: bool,
    },
    Cancel(usize),
    Reschedule {
        id: usize,
        later: bool,
    },
    Replay,
    SetLimits(QueueLimits),
    SetGroupLimits(usize, Option<GroupLimits>),
    Stats,
    Groups(usize),
    Get(usize),
}

/// A listed group: name, ready, running, why held, concurrency.
type GroupRow = (Option<String>, u64, u64, &'static str, Option<u32>);

/// An answer with store-specific parts (fences, times) taken out.
#[derive(Debug, PartialEq)]
enum Answer {
    Pushed(Vec<String>),
    Claimed(Vec<(String, Option<String>, u32)>),
    Done(String),
    Stats([u64; 8]),
    Groups(Vec<GroupRow>),
    Job(Option<(String, Option<String>, u32)>),
    Error(tollgate::ErrorKind),
}

struct Side {
    q: JobQueue,
    running: Vec<(String, u64)>,
}

fn id(i: usize) -> String {
    format!("job-{i}")
}

fn options(id_: usize, group: usize, priority: u8, later: bool, replace: bool) -> PushOptions {
    PushOptions {
        id: Some(id(id_)),
        group: GROUPS[group].map(str::to_owned),
        priority,
        delay: later.then_some(HOUR),
        max_attempts: 2,
        backoff: tollgate::Backoff::Fixed(Duration::ZERO),
        on_duplicate: if replace {
            OnDuplicate::Replace
        } else {
            OnDuplicate::Keep
        },
        ..PushOptions::default()
    }
}

impl Side {
    async fn apply(&mut self, op: &Op) -> Answer {
        let q = &self.q;
        let result: tollgate::Result<Answer> = match op {
            Op::Push {
                id,
                group,
                priority,
                later,
                replace,
            } => q
                .push("x", &options(*id, *group, *priority, *later, *replace))
                .await
                .map(|p| Answer::Pushed(vec![format!("{:?}", p.result)])),
            Op::PushMany(jobs) => {
                let batch: Vec<_> = jobs
                    .iter()
                    .map(|(i, g)| ("y", options(*i, *g, 0, false, false)))
                    .collect();
                q.push_many(&batch)
                    .await
                    .map(|v| Answer::Pushed(v.iter().map(|p| format!("{:?}", p.result)).collect()))
            }
            Op::Claim(max) => q.claim_many(*max).await.map(|jobs| {
                let out = jobs
                    .iter()
                    .map(|j| (j.id.clone(), j.group.clone(), j.attempt))
                    .collect();
                self.running.extend(jobs.into_iter().map(|j| (j.id, j.fence)));
                Answer::Claimed(out)
            }),
            Op::Ack(which) if self.running.is_empty() => Ok(Answer::Done(format!("none {which}"))),
            Op::Ack(which) => {
                let (id, fence) = self.running.remove(which % self.running.len());
                q.ack(&id, fence).await.map(|()| Answer::Done(id))
            }
            Op::Nack { which, .. } if self.running.is_empty() => Ok(Answer::Done(format!("none {which}"))),
            Op::Nack { which, later } => {
                let (id, fence) = self.running.remove(which % self.running.len());
                let retry = Retry::After(if *later { HOUR } else { Duration::ZERO });
                q.nack(&id, fence, retry).await.map(|n| {
                    Answer::Done(match n {
                        tollgate::Nacked::Dead => "dead".into(),
                        tollgate::Nacked::RetryAt(_) => "retry".into(),
                    })
                })
            }
            Op::Cancel(i) => q.cancel(&id(*i)).await.map(|c| Answer::Done(format!("{c:?}"))),
            Op::Reschedule { id: i, later } => q
                .reschedule(&id(*i), if *later { HOUR } else { Duration::ZERO })
                .await
                .map(|r| Answer::Done(format!("{}", r.is_some()))),
            Op::Replay => q.replay(None).await.map(|n| Answer::Done(n.to_string())),
            Op::SetLimits(l) => q.set_limits(l).await.map(|()| Answer::Done("limits".into())),
            Op::SetGroupLimits(g, l) => match GROUPS[*g] {
                Some(g) => q
                    .set_group_limits(g, l.as_ref())
                    .await
                    .map(|()| Answer::Done("own limits".into())),
                None => Ok(Answer::Done("default".into())),
            },
            Op::Stats => q.stats().await.map(|s| {
                Answer::Stats([
                    s.ready,
                    s.delayed,
                    s.in_flight,
                    s.dead,
                    s.claimed,
                    s.groups,
                    s.groups_held,
                    s.limited_claims,
                ])
            }),
            // Every page, `limit` at a time.
            Op::Groups(limit) => {
                let mut rows = Vec::new();
                let mut after: Option<String> = None;
                loop {
                    match q.groups(after.as_deref(), *limit).await {
                        Ok(page) => {
                            rows.extend(page.groups.into_iter().map(|g| {
                                let held = match g.held {
                                    None => "",
                                    Some(GroupHold::Concurrency) => "concurrency",
                                    Some(GroupHold::Rate(_)) => "rate",
                                };
                                (g.group, g.ready, g.running, held, g.concurrency)
                            }));
                            after = page.next;
                            if after.is_none() || rows.len() > 50 {
                                break Ok(Answer::Groups(rows));
                            }
                        }
                        Err(e) => break Err(e),
                    }
                }
            }
            Op::Get(i) => q
                .get(&id(*i))
                .await
                .map(|info| Answer::Job(info.map(|i| (format!("{:?}", i.state), i.group, i.attempts)))),
        };
        result.unwrap_or_else(|e| Answer::Error(e.kind()))
    }
}

fn some_rate(rng: &mut StdRng) -> Option<Rate> {
    rng.random_bool(0.3)
        .then(|| Rate::new(rng.random_range(1..=3), HOUR).expect("rate"))
}

fn some_count(rng: &mut StdRng) -> Option<u32> {
    rng.random_bool(0.6).then(|| rng.random_range(1..=4))
}

fn random_op(rng: &mut StdRng) -> Op {
    let group = rng.random_range(0..GROUPS.len());
    match rng.random_range(0..100) {
        0..=24 => Op::Push {
            id: rng.random_range(0..IDS),
            group,
            priority: if rng.random_bool(0.2) { 5 } else { 0 },
            later: rng.random_bool(0.15),
            replace: rng.random_bool(0.15),
        },
        25..=29 => Op::PushMany(
            (0..rng.random_range(1..6))
                .map(|_| (rng.random_range(0..IDS), rng.random_range(0..GROUPS.len())))
                .collect(),
        ),
        30..=49 => Op::Claim(rng.random_range(1..=4)),
        50..=59 => Op::Ack(rng.random_range(0..100)),
        60..=64 => Op::Nack {
            which: rng.random_range(0..100),
            later: rng.random_bool(0.5),
        },
        65..=67 => Op::Cancel(rng.random_range(0..IDS)),
        68..=70 => Op::Reschedule {
            id: rng.random_range(0..IDS),
            later: rng.random_bool(0.5),
        },
        71 => Op::Replay,
        72..=76 => Op::SetLimits(QueueLimits {
            concurrency: rng.random_bool(0.3).then(|| rng.random_range(1..=6)),
            rate: rng
                .random_bool(0.15)
                .then(|| Rate::new(rng.random_range(2..=6), HOUR).unwrap()),
            group_concurrency: some_count(rng),
            group_rate: some_rate(rng),
        }),
        77..=80 => Op::SetGroupLimits(
            group,
            rng.random_bool(0.7).then(|| GroupLimits {
                concurrency: some_count(rng),
                rate: some_rate(rng),
            }),
        ),
        81..=86 => Op::Stats,
        87..=92 => Op::Groups(rng.random_range(1..=3)),
        _ => Op::Get(rng.random_range(0..IDS)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_redis_answer_alike() {
    let server = RedisServer::start();
    let redis = Store::redis(&server.url()).await.expect("connect");
    let memory = Store::memory();
    for seed in 0..150u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let name = format!("agree-{seed}");
        let side = |store: &Store| Side {
            q: JobQueue::new(store, &name).unwrap().lease(HOUR).unwrap(),
            running: Vec::new(),
        };
        let (mut m, mut r) = (side(&memory), side(&redis));
        let mut history = Vec::new();
        for step in 0..120 {
            let op = random_op(&mut rng);
            let (a, b) = (m.apply(&op).await, r.apply(&op).await);
            history.push(format!("{step}: {op:?} -> {a:?}"));
            assert_eq!(
                a,
                b,
                "seed {seed}: memory and redis disagree at step {step} ({op:?});\nhistory:\n{}",
                history.join("\n")
            );
        }
    }
}

/// The durable store against the memory store, closed and recovered
/// (now and then from a snapshot) at random steps: a recovered fair queue
/// answers as one that never stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovered_fair_queue_answers_as_one_that_never_stopped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let open = || {
        Store::open(tollgate::DurableOptions {
            fsync: tollgate::Fsync::No,
            ..tollgate::DurableOptions::new(dir.path())
        })
        .expect("open")
    };
    let memory = Store::memory();
    let mut durable = open();
    let mut restarts = 0;
    for seed in 0..40u64 {
        let mut rng = StdRng::seed_from_u64(5000 + seed);
        let name = format!("recover-{seed}");
        let handle = |store: &Store| JobQueue::new(store, &name).unwrap().lease(HOUR).unwrap();
        let mut m = Side {
            q: handle(&memory),
            running: Vec::new(),
        };
        let mut d = Side {
            q: handle(&durable),
            running: Vec::new(),
        };
        let mut history = Vec::new();
        for step in 0..100 {
            if rng.random_range(0..10) == 0 {
                if rng.random_bool(0.4) {
                    durable.snapshot_now().expect("snapshot");
                }
                durable.close();
                durable = open();
                d.q = handle(&durable);
                restarts += 1;
                history.push(format!("{step}: restart"));
            }
            let op = random_op(&mut rng);
            let (a, b) = (m.apply(&op).await, d.apply(&op).await);
            history.push(format!("{step}: {op:?} -> {a:?}"));
            assert_eq!(
                a,
                b,
                "seed {seed}: the memory store and the recovered one disagree at step {step} ({op:?});\nhistory:\n{}",
                history.join("\n")
            );
        }
    }
    assert!(restarts > 200, "only {restarts} restarts");
}
