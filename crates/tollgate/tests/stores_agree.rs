//! Random sequences of gate operations, run step by step on the memory store
//! and on a real redis-server: every answer must match. The memory store is
//! the reference model; this is what holds the Lua scripts (fast paths and
//! general path alike) to it. Time does not pass here (long TTLs), so the
//! answers are exact; expiry is covered by the conformance suite.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::RedisServer;
use tollgate::{Entered, Gate, GateOptions, Left, Store, TicketStatus};

const LONG: Duration = Duration::from_secs(600);

/// The opening a door waits for (`Op::SetDoor`), the same on both sides:
/// an hour ahead.
static OPENS_AT: std::sync::LazyLock<u64> = std::sync::LazyLock::new(|| {
    use tollgate::Clock;
    tollgate::SystemClock.now_ms() + 3_600_000
});

/// An answer with store-specific parts (ids, absolute fences, remaining
/// TTLs) taken out.
#[derive(Debug, PartialEq)]
enum Answer {
    Granted {
        fence: u64,
    },
    Queued {
        position: u64,
        waiting: u64,
        /// Whether the line's pace is known (the estimated wait's
        /// presence; its figure follows each store's clock).
        eta_known: bool,
    },
    Busy {
        used: u64,
        capacity: u32,
        waiting: u64,
    },
    Gone,
    Left(Left),
    /// A release that passes its permits on: what was left, and the
    /// fence of the pass's grant if it made one.
    Passed(Left, Option<u64>),
    Renewed,
    /// Labels, each handle as the name of the token it hashes, fences.
    Holders(Vec<(Option<String>, Option<String>, Option<u64>)>),
    /// (number, position, permits, label) of each ticket listed.
    Line(Vec<(u64, u64, u32, Option<String>)>),
    /// Tickets a reset of the line dropped.
    Cleared(u64),
    Stats {
        capacity: Option<u32>,
        used: u64,
        holders: u64,
        waiting: u64,
        grants: u64,
        door: tollgate::Door,
        random: bool,
    },
    Done,
    /// The last draw's tickets, by their shared names.
    Drawn(Vec<Option<String>>),
    /// What `watch_state` read, tokens named by who got them.
    Watch {
        has_epoch: bool,
        capacity: Option<u32>,
        door: tollgate::Door,
        revoked: Vec<String>,
    },
    Error(tollgate::ErrorKind),
}

/// One store's view: the gate and the tokens its actors hold.
struct Side {
    gate: Gate,
    tokens: Vec<Option<String>>,
    /// Every fence seen, ascending.
    fences: Vec<u64>,
    /// Every token handed out, by a name both stores share (the tokens
    /// themselves are random): "<actor>.<nth token of that actor>".
    names: HashMap<String, String>,
}

impl Side {
    fn name(&mut self, actor: usize, token: &str) {
        let nth = self.names.len();
        self.names.insert(token.to_owned(), format!("{actor}.{nth}"));
    }

    /// A fence as its rank among the fences this side has seen: fences
    /// follow the stores' clocks (each is above time x 1000), so their
    /// values differ between the two stores, their order must not. (A
    /// hand-off's fence may be seen after a later grant's: an answer
    /// notes all its fences before it ranks any.)
    fn fence(&mut self, f: u64) -> u64 {
        self.note(f);
        self.fences.partition_point(|&x| x < f) as u64
    }

    fn note(&mut self, f: u64) {
        let at = self.fences.partition_point(|&x| x < f);
        if self.fences.get(at) != Some(&f) {
            self.fences.insert(at, f);
        }
    }

    /// The shared name of the token whose handle is `handle`.
    fn handle_name(&self, handle: &str) -> Option<String> {
        self.names
            .iter()
            .find(|(token, _)| handle_of(token) == handle)
            .map(|(_, name)| name.clone())
    }

    /// An entry, in turn or (with a key) into a draw.
    async fn enter(
        &self,
        actor: usize,
        permits: u32,
        queue: bool,
        labelled: bool,
        key: Option<u64>,
    ) -> tollgate::Result<Entered> {
        let label = labelled.then(|| format!("actor-{actor}"));
        match key {
            None => self.gate.enter_as(permits, queue, label.as_deref()).await,
            Some(key) => self.gate.enter_drawn(permits, label.as_deref(), |_| key).await,
        }
    }

    async fn apply(&mut self, op: &Op) -> Answer {
        let result = match *op {
            Op::Holders => self.gate.holders(100).await.map(|v| {
                for f in v.iter().filter_map(|h| h.fence) {
                    self.note(f);
                }
                // Leases ending in the same millisecond are ordered by
                // their (random) ids: compare the set of labels.
                let mut labels: Vec<_> = v
                    .into_iter()
                    .map(|h| {
                        let fence = h.fence.map(|f| self.fence(f));
                        (h.label, self.handle_name(&h.handle), fence)
                    })
                    .collect();
                labels.sort();
                Answer::Holders(labels)
            }),
            Op::Enter {
                actor,
                permits,
                queue,
                labelled,
                key,
            } => match self.enter(actor, permits, queue, labelled, key).await {
                Ok(Entered::Granted(g)) => {
                    self.name(actor, &g.token);
                    self.tokens[actor] = Some(g.token);
                    Ok(Answer::Granted {
                        fence: self.fence(g.fence),
                    })
                }
                Ok(Entered::Queued { ticket, place }) => {
                    self.name(actor, &ticket);
                    self.tokens[actor] = Some(ticket);
                    Ok(Answer::Queued {
                        position: place.position,
                        waiting: place.waiting,
                        eta_known: place.eta.is_some(),
                    })
                }
                Ok(Entered::Busy(o)) => Ok(Answer::Busy {
                    used: o.used,
                    capacity: o.capacity,
                    waiting: o.waiting,
                }),
                Err(e) => Err(e),
            },
            Op::Status { actor } => match &self.tokens[actor] {
                None => Ok(Answer::Gone),
                Some(t) => match self.gate.status(t).await {
                    Ok(TicketStatus::Granted(g)) if g.fence > 0 => Ok(Answer::Granted {
                        fence: self.fence(g.fence),
                    }),
                    // An immediate grant asked about like a ticket: the
                    // memory store knows its fence, Redis reports 0.
                    Ok(TicketStatus::Granted(_)) => Ok(Answer::Granted { fence: 0 }),
                    Ok(TicketStatus::Queued(p)) => Ok(Answer::Queued {
                        position: p.position,
                        waiting: p.waiting,
                        eta_known: p.eta.is_some(),
                    }),
                    Ok(TicketStatus::Gone) => Ok(Answer::Gone),
                    Err(e) => Err(e),
                },
            },
            Op::Leave { actor } => match self.tokens[actor].take() {
                None => Ok(Answer::Left(Left::Unknown)),
                Some(t) => self.gate.leave(&t).await.map(Answer::Left),
            },
            Op::Pass { actor, to, permits } => match (self.tokens[actor].take(), &self.tokens[to]) {
                (None, _) => Ok(Answer::Left(Left::Unknown)),
                (Some(t), Some(_)) => {
                    // The receiver is busy: an ordinary release.
                    self.gate.leave(&t).await.map(Answer::Left)
                }
                (Some(t), None) => {
                    // The same new id on both stores (each its own).
                    let id = format!("pass{}x{to}", self.names.len());
                    match self.gate.leave_passing(&t, &id, permits).await {
                        Ok((left, Some(g))) => {
                            self.name(to, &id);
                            self.tokens[to] = Some(id);
                            Ok(Answer::Passed(left, Some(self.fence(g.fence))))
                        }
                        Ok((left, None)) => Ok(Answer::Passed(left, None)),
                        Err(e) => Err(e),
                    }
                }
            },
            Op::End { actor } => match self.tokens[actor].take() {
                None => Ok(Answer::Left(Left::Unknown)),
                Some(t) => self.gate.end(&t, LONG).await.map(Answer::Left),
            },
            Op::Watch => self.gate.watch_state(0).await.map(|w| {
                let mut revoked: Vec<String> = w.revoked.iter().map(|t| self.names[t].clone()).collect();
                revoked.sort();
                Answer::Watch {
                    has_epoch: w.epoch.is_some(),
                    capacity: w.capacity,
                    door: w.door,
                    revoked,
                }
            }),
            Op::Renew { actor } => match &self.tokens[actor] {
                None => Ok(Answer::Renewed),
                Some(t) => self.gate.renew(t, LONG).await.map(|_| Answer::Renewed),
            },
            Op::Line => self.gate.line(100).await.map(|v| {
                Answer::Line(
                    v.into_iter()
                        .map(|w| (w.number, w.position, w.permits, w.label))
                        .collect(),
                )
            }),
            // The actor's token is not taken: its next leave or renew must
            // find the lease gone on both stores alike.
            Op::Revoke { actor } => match &self.tokens[actor] {
                None => Ok(Answer::Left(Left::Unknown)),
                Some(t) => self.gate.revoke(&handle_of(t)).await.map(Answer::Left),
            },
            Op::RemoveWaiter(number) => self.gate.remove_waiter(number).await.map(Answer::Left),
            Op::ClearLine => self.gate.clear_line().await.map(Answer::Cleared),
            Op::LastDraw => self.gate.last_draw().await.map(|record| {
                let names = record.tickets.iter().map(|t| self.names.get(t).cloned());
                Answer::Drawn(names.collect())
            }),
            Op::SetDoor {
                closed,
                drop_line,
                opens,
            } => {
                let change = tollgate::DoorChange {
                    door: tollgate::Door {
                        closed,
                        note: if closed { "shut".into() } else { String::new() },
                        // An hour ahead: the opening never comes here, the
                        // draw ends when a later change lifts the hold.
                        opens_at_ms: opens.then(|| *OPENS_AT),
                        ..tollgate::Door::default()
                    },
                    paused: None,
                    drop_line,
                };
                self.gate.set_door(&change).await.map(Answer::Cleared)
            }
            Op::SetCapacity(n) => self.gate.set_capacity(n).await.map(|()| Answer::Done),
            Op::SetQueueing(seed) => {
                let queueing = seed.map_or(tollgate::Queueing::Fifo, |seed| tollgate::Queueing::Random {
                    seed,
                });
                self.gate.set_queueing(queueing).await.map(|()| Answer::Done)
            }
            Op::Stats => self.gate.stats().await.map(|s| Answer::Stats {
                capacity: s.capacity,
                used: s.used,
                holders: s.holders,
                waiting: s.waiting,
                grants: s.grants,
                door: s.door,
                random: s.random,
            }),
        };
        result.unwrap_or_else(|e| Answer::Error(e.kind()))
    }
}

#[derive(Debug, Clone)]
enum Op {
    Enter {
        actor: usize,
        permits: u32,
        queue: bool,
        labelled: bool,
        /// An order key: `Gate::enter_drawn` (which always queues).
        key: Option<u64>,
    },
    Status {
        actor: usize,
    },
    Leave {
        actor: usize,
    },
    End {
        actor: usize,
    },
    /// `actor` releases and passes its permits on to `to`.
    Pass {
        actor: usize,
        to: usize,
        permits: u32,
    },
    Renew {
        actor: usize,
    },
    SetCapacity(u32),
    Stats,
    Holders,
    Watch,
    Line,
    Revoke {
        actor: usize,
    },
    RemoveWaiter(u64),
    ClearLine,
    /// The door (`Gate::set_door`): closed, and the line dropped with it.
    SetDoor {
        closed: bool,
        drop_line: bool,
        /// An opening ahead: the gate holds, and drawn entries join a draw.
        opens: bool,
    },
    LastDraw,
    /// Random queueing from this seed, or (`None`) first come, first served.
    SetQueueing(Option<u64>),
}

/// A holder's handle, as the stores make it (see `Holding::handle`).
fn handle_of(token: &str) -> String {
    let mut hex = sha1_smol::Sha1::from(token).digest().to_string();
    hex.truncate(16);
    hex
}

const ACTORS: usize = 12;

/// With `labels`, even actors label their entries: labels take Redis's
/// general path, so seeds without them exercise its fast paths.
fn random_op(rng: &mut StdRng, labels: bool) -> Op {
    let actor = rng.random_range(0..ACTORS);
    match rng.random_range(0..135) {
        0..=34 => Op::Enter {
            actor,
            permits: if rng.random_bool(0.8) {
                1
            } else {
                rng.random_range(1..=3)
            },
            queue: rng.random_bool(0.8),
            labelled: labels && actor % 2 == 0,
            // Keys far apart, so ties (ordered by the random ids) are
            // too rare to meet here.
            key: rng
                .random_bool(0.3)
                .then(|| rng.random_range(0..tollgate::DRAW_SPAN)),
        },
        35..=57 => Op::Status { actor },
        58..=72 => Op::Leave { actor },
        73..=82 => Op::End { actor },
        83..=86 => Op::Renew { actor },
        // Across INLINE (8) too: Redis keeps the holders of a gate of up to
        // 8 inline in its meta hash, and moves them when that changes.
        87..=90 => Op::SetCapacity(if rng.random_bool(0.7) {
            rng.random_range(1..=4)
        } else {
            rng.random_range(7..=10)
        }),
        91..=93 => Op::Holders,
        94..=96 => Op::Watch,
        97..=99 => Op::Stats,
        100..=102 => Op::Line,
        103..=106 => Op::Revoke { actor },
        107..=109 => Op::RemoveWaiter(rng.random_range(1..=25)),
        110 => Op::ClearLine,
        111..=112 => Op::SetDoor {
            closed: rng.random_bool(0.3),
            drop_line: rng.random_bool(0.2),
            opens: rng.random_bool(0.5),
        },
        113 => Op::LastDraw,
        114 => Op::SetQueueing(rng.random_bool(0.7).then(|| rng.random())),
        _ => Op::Pass {
            actor,
            to: rng.random_range(0..ACTORS),
            permits: if rng.random_bool(0.8) {
                1
            } else {
                rng.random_range(1..=3)
            },
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_redis_answer_alike() {
    let server = RedisServer::start();
    let redis = Store::redis(&server.url()).await.expect("connect");
    let memory = Store::memory();
    let options = GateOptions {
        ttl: LONG,
        heartbeat: LONG,
        auto_renew: false,
        fair: true,
        max_hold: None,
    };
    for seed in 0..300u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let capacity = if seed % 5 == 4 {
            rng.random_range(8..=10)
        } else {
            rng.random_range(1..=3)
        };
        let name = format!("agree-{seed}");
        // Most handles use the stored capacity, so set_capacity does not
        // make later calls conflict. A third name it, as a Lock (capacity
        // 1) or Semaphore does: Redis then takes its one-permit paths
        // (enter_fast.lua, leave_fast.lua), and after a set_capacity to
        // another value both stores must refuse alike.
        let named = (seed % 3 == 0).then_some(capacity);
        let side = |store: &Store| Side {
            gate: Gate::new(store, &name, named, options.clone()).expect("gate"),
            tokens: vec![None; ACTORS],
            fences: Vec::new(),
            names: HashMap::new(),
        };
        let (mut m, mut r) = (side(&memory), side(&redis));
        for s in [&m, &r] {
            s.gate.set_capacity(capacity).await.expect("capacity");
        }
        let mut history = Vec::new();
        for step in 0..80 {
            let op = random_op(&mut rng, seed % 2 == 0);
            let (a, b) = (m.apply(&op).await, r.apply(&op).await);
            history.push(format!("{step}: {op:?} -> {a:?}"));
            assert_eq!(
                a,
                b,
                "seed {seed}, capacity {capacity}: memory and redis disagree at step {step} ({op:?});\nhistory:\n{}",
                history.join("\n")
            );
        }
    }
}

/// A read-write lock's operations (readers take one permit, writers
/// every one of `RW_PERMITS`, both queueing), on its gate's general path
/// on Redis: both stores must answer alike, grants, fences and places.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_answer_alike() {
    let server = RedisServer::start();
    let redis = Store::redis(&server.url()).await.expect("connect");
    let memory = Store::memory();
    let options = GateOptions {
        ttl: LONG,
        heartbeat: LONG,
        auto_renew: false,
        fair: true,
        max_hold: None,
    };
    for seed in 0..60u64 {
        let mut rng = StdRng::seed_from_u64(5000 + seed);
        let name = format!("rw-agree-{seed}");
        let side = |store: &Store| Side {
            gate: tollgate::RwLock::with_options(store, &name, options.clone())
                .expect("rwlock")
                .gate()
                .clone(),
            tokens: vec![None; ACTORS],
            fences: Vec::new(),
            names: HashMap::new(),
        };
        let (mut m, mut r) = (side(&memory), side(&redis));
        let mut history = Vec::new();
        for step in 0..80 {
            let actor = rng.random_range(0..ACTORS);
            let op = match rng.random_range(0..20) {
                0..=7 => Op::Enter {
                    actor,
                    permits: if rng.random_bool(0.8) {
                        1
                    } else {
                        tollgate::RW_PERMITS
                    },
                    queue: rng.random_bool(0.9),
                    labelled: false,
                    key: None,
                },
                8..=11 => Op::Status { actor },
                12..=15 => Op::Leave { actor },
                16 => Op::Renew { actor },
                17 => Op::Stats,
                18 => Op::Line,
                _ => Op::Holders,
            };
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

/// The durable embedded store against the memory store, the same random
/// operations, the durable one closed and recovered from its log (and,
/// now and then, a snapshot) at random steps: every answer must match,
/// so a recovered store is the one that never stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovered_store_answers_as_one_that_never_stopped() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The directory's lock is let go at close, but a process the other
    // tests of this binary spawn (redis-server) holds a copy of every
    // descriptor from its fork to its exec: a reopen at that moment finds
    // the lock held. Asked again for up to 2 s.
    let open = || {
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        loop {
            let opened = Store::open(tollgate::DurableOptions {
                fsync: tollgate::Fsync::No,
                ..tollgate::DurableOptions::new(dir.path())
            });
            match opened {
                Err(e) if e.message().contains("in use") && std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => break other.expect("open"),
            }
        }
    };
    let memory = Store::memory();
    let mut durable = open();
    let options = GateOptions {
        ttl: LONG,
        heartbeat: LONG,
        auto_renew: false,
        fair: true,
        max_hold: None,
    };
    let mut restarts = 0;
    for seed in 0..60u64 {
        let mut rng = StdRng::seed_from_u64(1000 + seed);
        let capacity = rng.random_range(1..=9);
        let name = format!("recover-{seed}");
        let named = (seed % 3 == 0).then_some(capacity);
        let side = |store: &Store| Side {
            gate: Gate::new(store, &name, named, options.clone()).expect("gate"),
            tokens: vec![None; ACTORS],
            fences: Vec::new(),
            names: HashMap::new(),
        };
        let (mut m, mut d) = (side(&memory), side(&durable));
        for s in [&m, &d] {
            s.gate.set_capacity(capacity).await.expect("capacity");
        }
        let mut history = Vec::new();
        for step in 0..60 {
            if rng.random_range(0..12) == 0 {
                if rng.random_bool(0.3) {
                    durable.snapshot_now().expect("snapshot");
                }
                durable.close();
                durable = open();
                d.gate = Gate::new(&durable, &name, named, options.clone()).expect("gate");
                restarts += 1;
                history.push(format!("{step}: restart"));
            }
            let op = random_op(&mut rng, seed % 2 == 0);
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
    assert!(restarts > 100, "only {restarts} restarts");
}
