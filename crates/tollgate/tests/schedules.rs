//! Schedules: the same assertions on the memory store (on a hand-moved
//! clock) and on a real redis-server, a 3-master cluster and Sentinel
//! (in real time, on every-second schedules). The time rules themselves
//! (cron, zones, DST) are tested without a store in `schedule_when.rs`.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::TestStore;
use tollgate::Clock;
use tollgate::schedule::MAX_FIRE_SLEEP;
use tollgate::{
    Backoff, ErrorKind, FireReport, JobQueue, Misfire, PushOptions, QueueLimits, ScheduleSpec, Schedules,
    Upserted, When,
};

fn every_second(queue: &str) -> ScheduleSpec {
    ScheduleSpec::new(When::parse("every 1s").expect("when"), queue)
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).expect("after 1970").as_millis() as u64
}

/// Every job pushed to `queue`, claimed: id -> payload. Lets a second
/// and a bit pass first (firing nothing), so that the jobs of ticks fired
/// ahead (up to a second before they are due) are due.
async fn drain(ts: &TestStore, queue: &str) -> BTreeMap<String, Vec<u8>> {
    ts.advance(Duration::from_millis(1100)).await;
    let q = JobQueue::new(&ts.store, queue).expect("queue");
    let mut out = BTreeMap::new();
    loop {
        let jobs = q.claim_many(1000).await.expect("claim");
        if jobs.is_empty() {
            return out;
        }
        for job in jobs {
            assert!(
                out.insert(job.id.clone(), job.payload.clone()).is_none(),
                "{} twice",
                job.id
            );
            q.ack(&job.id, job.fence).await.expect("ack");
        }
    }
}

/// The tick of each job id `<schedule>@<tick>` of `schedule`, ascending.
fn ticks_of(jobs: &BTreeMap<String, Vec<u8>>, schedule: &str) -> Vec<u64> {
    let mut ticks: Vec<u64> = jobs
        .keys()
        .filter_map(|id| id.strip_prefix(&format!("{schedule}@")))
        .filter_map(|t| t.parse().ok())
        .collect();
    ticks.sort_unstable();
    ticks
}

/// Lets `total` of store time pass in steps of 200 ms, running one firing
/// pass on every handle of `firers` at once after each step.
async fn fire_for(ts: &TestStore, firers: &[Schedules], total: Duration) -> Vec<FireReport> {
    let mut reports = Vec::new();
    let mut passed = Duration::ZERO;
    while passed < total {
        ts.advance(Duration::from_millis(200)).await;
        passed += Duration::from_millis(200);
        let passes = firers.iter().map(|s| s.fire_due());
        for r in futures_util::future::join_all(passes).await {
            reports.push(r.expect("fire"));
        }
    }
    reports
}

/// Starts each test 100 ms after a whole second of store time (moving the
/// hand-moved clock, or waiting for the real one), so that every-second
/// ticks fall between the 200 ms steps the same way on every store.
async fn align(ts: &TestStore) {
    match &ts.clock {
        Some(clock) => clock.advance(Duration::from_millis(100)),
        None => {
            let into = ms(SystemTime::now()) % 1000;
            tokio::time::sleep(Duration::from_millis((1100 - into) % 1000)).await;
        }
    }
}

/// The store's now (ms): the hand-moved clock, or this machine's (the
/// same as the local Redis's).
fn store_now(ts: &TestStore) -> u64 {
    match &ts.clock {
        Some(c) => c.now_us() / 1000,
        None => ms(SystemTime::now()),
    }
}

async fn upsert_get_list_and_delete(ts: TestStore) {
    align(&ts).await;
    let s = Schedules::new(&ts.store);
    let mut spec = every_second("reports");
    spec.payload = b"v1".to_vec();
    spec.priority = 7;
    assert_eq!(
        s.upsert("nightly", &spec).await.expect("create"),
        Upserted::Created
    );
    assert_eq!(
        s.upsert("nightly", &spec).await.expect("again"),
        Upserted::Unchanged
    );

    let info = s.get("nightly").await.expect("get").expect("exists");
    assert_eq!(info.spec, spec);
    assert!(!info.paused);
    let next = ms(info.next.expect("a next tick"));
    assert_eq!(next % 1000, 0, "every-second ticks are whole seconds: {next}");
    assert!(info.recent.is_empty());

    spec.payload = b"v2".to_vec();
    assert_eq!(
        s.upsert("nightly", &spec).await.expect("change"),
        Upserted::Changed
    );
    assert_eq!(
        s.get("nightly").await.expect("get").expect("exists").spec.payload,
        b"v2"
    );

    let mut other = every_second("other-queue");
    other.misfire = Misfire::All;
    s.upsert("hourly", &other).await.expect("second");
    let names: Vec<String> = s
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|i| i.name)
        .collect();
    assert_eq!(names, ["hourly", "nightly"]);

    // Every field round-trips (only what differs from the defaults is
    // stored).
    let full = ScheduleSpec {
        payload: b"\n{\"binary\": \"\xff\"}\n".to_vec(),
        priority: 200,
        max_attempts: 3,
        backoff: Backoff::Fixed(Duration::from_secs(2)),
        misfire: Misfire::All,
        max_catch_up: 50,
        start: Some(UNIX_EPOCH + Duration::from_secs(1_800_000_000)),
        end: Some(UNIX_EPOCH + Duration::from_secs(1_900_000_000)),
        jitter: Duration::from_millis(1500),
        ..ScheduleSpec::new(
            When::parse("TZ=Europe/Berlin 30 2 * * 1-5").expect("when"),
            "full",
        )
    };
    s.upsert("full", &full).await.expect("full");
    let got = s.get("full").await.expect("get").expect("exists");
    assert_eq!(got.spec, full);
    assert_eq!(
        got.next,
        full.start
            .map(|_| UNIX_EPOCH + Duration::from_secs(1_800_235_800))
    );
    assert!(s.delete("full").await.expect("delete"));

    assert!(s.delete("nightly").await.expect("delete"));
    assert!(!s.delete("nightly").await.expect("delete again"));
    assert!(s.get("nightly").await.expect("get").is_none());
    assert!(!s.pause("nightly").await.expect("pause a gone one"));
    assert!(s.trigger("nightly").await.expect("trigger a gone one").is_none());
    assert_eq!(s.list().await.expect("list").len(), 1);
}

/// Four firing handles at once (each with its own cache, as four processes
/// would be): every tick is pushed exactly once, none is missed, and the
/// job carries the schedule's payload and options.
async fn each_tick_fires_once_among_many_firers(ts: TestStore) {
    align(&ts).await;
    let firers: Vec<Schedules> = (0..4).map(|_| Schedules::new(&ts.store)).collect();
    let mut spec = every_second("ticks");
    spec.payload = b"tick".to_vec();
    firers[0].upsert("beat", &spec).await.expect("create");
    let created = store_now(&ts);
    let reports = fire_for(&ts, &firers, Duration::from_millis(3400)).await;

    let jobs = drain(&ts, "ticks").await;
    let ticks = ticks_of(&jobs, "beat");
    assert!(
        ticks.len() >= 3,
        "three seconds fire at least three ticks: {ticks:?}"
    );
    for pair in ticks.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            1000,
            "consecutive, none missed, none twice: {ticks:?}"
        );
    }
    assert!(jobs.values().all(|p| p == b"tick"));
    let fired: Vec<u64> = reports
        .iter()
        .flat_map(|r| r.fired.iter().map(|f| f.tick_ms))
        .collect();
    assert_eq!(
        fired.len(),
        ticks.len(),
        "each tick reported by the one handle that fired it"
    );
    assert!(
        ticks[0] >= created - created % 1000,
        "no tick before the schedule existed"
    );
    let info = firers[1].get("beat").await.expect("get").expect("exists");
    let recent: Vec<u64> = info.recent.iter().map(|t| ms(t.at)).collect();
    assert_eq!(recent, ticks, "the history names the ticks fired");
    assert_eq!(info.recent[0].job_id, format!("beat@{}", ticks[0]));
    assert!(ms(info.next.expect("next")) > *ticks.last().expect("a tick"));
    assert!(reports.iter().all(|r| r.sleep <= MAX_FIRE_SLEEP));
}

/// Ticks missed while nothing fired: `all` pushes each (up to its
/// catch-up), `once` the newest only, and so does `skip` when the newest
/// is within the grace period (as an every-second schedule's always is).
/// On the hand-moved clock, an hourly schedule 30 minutes past its missed
/// tick shows `skip` and `once` apart.
async fn missed_ticks_follow_the_misfire_policy(ts: TestStore) {
    align(&ts).await;
    let s = Schedules::new(&ts.store);
    for (name, policy) in [
        ("all", Misfire::All),
        ("once", Misfire::Once),
        ("skip", Misfire::Skip),
    ] {
        let mut spec = every_second("late");
        spec.misfire = policy;
        s.upsert(name, &spec).await.expect("create");
    }
    let mut capped = every_second("late");
    capped.misfire = Misfire::All;
    capped.max_catch_up = 2;
    s.upsert("capped", &capped).await.expect("create");
    // One pass stores each first tick (and fires the one due within the
    // second ahead); then nothing fires for a while.
    let first = s.fire_due().await.expect("first pass");
    let before: Vec<u64> = first.fired.iter().map(|f| f.tick_ms).collect();
    let gap = if ts.clock.is_some() { 90_000 } else { 3_300 };
    ts.advance(Duration::from_millis(gap)).await;
    let report = s.fire_due().await.expect("after the gap");
    let now = store_now(&ts);

    // The ticks that came due in the gap, and those fired ahead after it.
    let jobs = drain(&ts, "late").await;
    let late = |name: &str| -> (Vec<u64>, Vec<u64>) {
        ticks_of(&jobs, name)
            .into_iter()
            .filter(|t| !before.contains(t))
            .partition(|t| *t <= now)
    };
    let (all, ahead) = late("all");
    // Every second of the gap but the first, fired ahead before it.
    let due = (gap / 1000) as usize - 1;
    assert_eq!(all.len(), due, "all pushes every missed tick");
    for pair in all.windows(2) {
        assert_eq!(pair[1] - pair[0], 1000);
    }
    let newest = *all.last().expect("a tick");
    assert_eq!(ahead, [newest + 1000], "the tick within the second ahead");
    assert_eq!(
        late("once"),
        (vec![newest], ahead.clone()),
        "once pushes the newest"
    );
    assert_eq!(
        late("capped"),
        (all[all.len() - 2..].to_vec(), ahead.clone()),
        "capped at two"
    );
    assert_eq!(
        late("skip"),
        (vec![newest], ahead.clone()),
        "a tick within the grace still fires"
    );
    let missed: BTreeMap<&str, u64> = report.missed.iter().map(|(n, c)| (n.as_str(), *c)).collect();
    assert_eq!(missed.get("all"), None, "all missed nothing");
    assert_eq!(missed.get("once").copied().unwrap_or(0), all.len() as u64 - 1);
    assert_eq!(missed.get("capped").copied().unwrap_or(0), all.len() as u64 - 2);

    if ts.clock.is_some() {
        for (name, policy) in [("hourly-once", Misfire::Once), ("hourly-skip", Misfire::Skip)] {
            let mut spec = ScheduleSpec::new(When::parse("@hourly").expect("when"), "hourly");
            spec.misfire = policy;
            s.upsert(name, &spec).await.expect("create");
        }
        s.fire_due().await.expect("first pass");
        // To 30 minutes past the hour's tick.
        ts.advance(Duration::from_secs(90 * 60)).await;
        s.fire_due().await.expect("after the gap");
        let jobs = drain(&ts, "hourly").await;
        assert_eq!(
            ticks_of(&jobs, "hourly-once").len(),
            1,
            "once: the newest missed tick"
        );
        assert!(
            ticks_of(&jobs, "hourly-skip").is_empty(),
            "skip: a tick 30 min late is dropped"
        );
    }
}

async fn pause_resume_and_trigger(ts: TestStore) {
    align(&ts).await;
    let s = Schedules::new(&ts.store);
    let mut spec = every_second("paused");
    spec.payload = b"p".to_vec();
    spec.paused = true;
    s.upsert("quiet", &spec).await.expect("create paused");
    let info = s.get("quiet").await.expect("get").expect("exists");
    assert!(info.paused && info.next.is_none());
    fire_for(&ts, std::slice::from_ref(&s), Duration::from_millis(1400)).await;
    assert!(
        drain(&ts, "paused").await.is_empty(),
        "a paused schedule fires nothing"
    );

    // An upsert keeps it paused; a trigger still pushes one job.
    spec.paused = false;
    assert_eq!(
        s.upsert("quiet", &spec).await.expect("upsert"),
        Upserted::Unchanged
    );
    assert!(s.get("quiet").await.expect("get").expect("exists").paused);
    let id = s.trigger("quiet").await.expect("trigger").expect("exists");
    assert!(id.starts_with("quiet@manual-"), "{id}");
    let jobs = drain(&ts, "paused").await;
    assert_eq!(jobs.keys().collect::<Vec<_>>(), [&id]);
    assert_eq!(jobs[&id], b"p");
    let recent = s.get("quiet").await.expect("get").expect("exists").recent;
    assert!(recent.len() == 1 && recent[0].manual && recent[0].job_id == id);

    assert!(s.resume("quiet").await.expect("resume"));
    let resumed = store_now(&ts);
    fire_for(&ts, std::slice::from_ref(&s), Duration::from_millis(2400)).await;
    let ticks = ticks_of(&drain(&ts, "paused").await, "quiet");
    assert!(ticks.len() >= 2, "fires again once resumed: {ticks:?}");
    assert!(ticks[0] > resumed, "the pause's ticks are not fired later");
    // A pass fires the tick due within the second ahead; a pause takes
    // its job back, and its place in the history.
    let ahead: Vec<String> = s
        .fire_due()
        .await
        .expect("fire")
        .fired
        .into_iter()
        .map(|f| f.job_id)
        .collect();
    assert!(!ahead.is_empty(), "a tick within the second ahead is fired ahead");
    assert!(s.pause("quiet").await.expect("pause"));
    let recent = s.get("quiet").await.expect("get").expect("exists").recent;
    assert!(
        recent.iter().all(|t| !ahead.contains(&t.job_id)),
        "{recent:?} still has {ahead:?}"
    );
    fire_for(&ts, std::slice::from_ref(&s), Duration::from_millis(1400)).await;
    let left = drain(&ts, "paused").await;
    assert!(left.keys().all(|id| !ahead.contains(id)), "taken back: {left:?}");
    let paused_at = store_now(&ts);
    fire_for(&ts, std::slice::from_ref(&s), Duration::from_millis(1400)).await;
    assert!(drain(&ts, "paused").await.is_empty(), "nothing after {paused_at}");
}

/// A changed expression takes effect from its next tick; a change of the
/// queue moves the schedule (it fires only to the new queue).
async fn changes_take_effect_from_the_next_tick(ts: TestStore) {
    align(&ts).await;
    let s = Schedules::new(&ts.store);
    s.upsert("moving", &every_second("first")).await.expect("create");
    fire_for(&ts, std::slice::from_ref(&s), Duration::from_millis(1400)).await;
    assert!(!drain(&ts, "first").await.is_empty());

    let mut slower = ScheduleSpec::new(When::parse("every 2s").expect("when"), "first");
    assert_eq!(
        s.upsert("moving", &slower).await.expect("change"),
        Upserted::Changed
    );
    fire_for(&ts, std::slice::from_ref(&s), Duration::from_millis(4400)).await;
    let ticks = ticks_of(&drain(&ts, "first").await, "moving");
    assert!(
        !ticks.is_empty() && ticks.iter().all(|t| t % 2000 == 0),
        "every 2 s now: {ticks:?}"
    );

    // A new payload: the job of a tick already fired ahead is pushed
    // again with it.
    let mut ahead = Vec::new();
    while ahead.is_empty() {
        ts.advance(Duration::from_millis(200)).await;
        let report = s.fire_due().await.expect("fire");
        let now = store_now(&ts);
        ahead = report
            .fired
            .iter()
            .map(|f| f.tick_ms)
            .filter(|t| *t > now + 50)
            .collect();
    }
    slower.payload = b"new".to_vec();
    assert_eq!(
        s.upsert("moving", &slower).await.expect("change"),
        Upserted::Changed
    );
    s.fire_due().await.expect("fire again");
    let jobs = drain(&ts, "first").await;
    for t in &ahead {
        assert_eq!(
            jobs.get(&format!("moving@{t}")).map(Vec::as_slice),
            Some(&b"new"[..]),
            "{t}"
        );
    }

    slower.queue = "second".into();
    assert_eq!(
        s.upsert("moving", &slower).await.expect("move"),
        Upserted::Changed
    );
    fire_for(&ts, std::slice::from_ref(&s), Duration::from_millis(2400)).await;
    assert!(drain(&ts, "first").await.is_empty(), "the old queue gets nothing");
    assert!(
        !drain(&ts, "second").await.is_empty(),
        "the new queue gets the ticks"
    );
    assert_eq!(s.list().await.expect("list").len(), 1);
}

/// A start in the future: nothing before it. An end: nothing after it,
/// and then no next tick.
async fn start_and_end_bound_the_ticks(ts: TestStore) {
    align(&ts).await;
    let s = Schedules::new(&ts.store);
    let now = store_now(&ts);
    let mut spec = every_second("bounded");
    spec.start = Some(UNIX_EPOCH + Duration::from_millis(now - now % 1000 + 2000));
    spec.end = Some(UNIX_EPOCH + Duration::from_millis(now - now % 1000 + 3000));
    s.upsert("window", &spec).await.expect("create");
    let info = s.get("window").await.expect("get").expect("exists");
    assert_eq!(info.next, spec.start, "the first tick is the start");
    fire_for(&ts, std::slice::from_ref(&s), Duration::from_millis(5000)).await;
    let ticks = ticks_of(&drain(&ts, "bounded").await, "window");
    let (start, end) = (ms(spec.start.expect("start")), ms(spec.end.expect("end")));
    assert_eq!(ticks, [start, end], "only the ticks from start to end");
    assert!(
        s.get("window")
            .await
            .expect("get")
            .expect("exists")
            .next
            .is_none()
    );
}

async fn bad_input_is_refused_with_the_field(ts: TestStore) {
    let s = Schedules::new(&ts.store);
    let good = every_second("q");
    let refused = |spec: ScheduleSpec, name: &'static str, says: &'static str| {
        let s = s.clone();
        async move {
            let e = s.upsert(name, &spec).await.expect_err(says);
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
            assert!(e.message().contains(says), "{e} should say {says}");
        }
    };
    refused(good.clone(), "has space", "schedule name").await;
    refused(good.clone(), &*"x".repeat(101).leak(), "schedule name").await;
    let mut bad = good.clone();
    bad.queue = "no spaces".into();
    refused(bad, "ok", "queue").await;
    let mut bad = good.clone();
    bad.max_attempts = 0;
    refused(bad, "ok", "max_attempts").await;
    let mut bad = good.clone();
    bad.max_catch_up = 0;
    refused(bad, "ok", "max_catch_up").await;
    let mut bad = good.clone();
    bad.start = Some(UNIX_EPOCH + Duration::from_secs(2_000_000_000));
    bad.end = Some(UNIX_EPOCH + Duration::from_secs(1_000_000_000));
    refused(bad, "ok", "end").await;
    let mut bad = good.clone();
    bad.payload = vec![0; 2 << 20];
    refused(bad, "ok", "payload").await;
    for (text, says) in [
        ("every 0s", "interval"),
        ("61 * * * *", "minute"),
        ("TZ=Mars/Olympus 0 * * * *", "zone"),
        ("* * *", "fields"),
    ] {
        let e = When::parse(text).expect_err(text);
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.message().contains(says), "{text}: {e} should say {says}");
    }

    // A partitioned queue's jobs live in its partitions: refused, and
    // nothing is left behind.
    let sharded = JobQueue::partitioned(&ts.store, "wide", 4).expect("sharded");
    sharded.push(b"x", &PushOptions::default()).await.expect("push");
    let e = s
        .upsert("to-wide", &every_second("wide"))
        .await
        .expect_err("partitioned");
    assert!(e.message().contains("partitioned"), "{e}");
    assert!(s.get("to-wide").await.expect("get").is_none());
    assert!(s.list().await.expect("list").is_empty());
}

/// A schedule's job may name a group: each tick's job and a trigger's
/// carry it, the queue turns fair, and the group's limits hold for them
/// as for pushed jobs (a schedule without one feeds the default group).
async fn its_jobs_carry_the_group(ts: TestStore) {
    align(&ts).await;
    let s = Schedules::new(&ts.store);
    let q = JobQueue::new(&ts.store, "tenants").expect("queue");
    let one_each = QueueLimits {
        group_concurrency: Some(1),
        ..QueueLimits::default()
    };
    q.set_limits(&one_each).await.expect("limits");
    let mut spec = every_second("tenants");
    spec.group = Some("tenant-a".to_owned());
    s.upsert("a-report", &spec).await.expect("create");
    s.upsert("plain", &every_second("tenants"))
        .await
        .expect("create plain");
    let info = s.get("a-report").await.expect("get").expect("exists");
    assert_eq!(info.spec.group.as_deref(), Some("tenant-a"));
    assert_eq!(
        s.upsert("a-report", &spec).await.expect("again"),
        Upserted::Unchanged
    );
    fire_for(&ts, std::slice::from_ref(&s), Duration::from_millis(2400)).await;
    ts.advance(Duration::from_millis(1100)).await;
    let stats = q.stats().await.expect("stats");
    assert!(stats.ready >= 4 && stats.groups == 2, "{stats:?}");

    // Two ticks of each are ready; one of each group may run at once.
    let got = q.claim_many(10).await.expect("claim");
    let mut seen: Vec<(Option<&str>, bool)> = got
        .iter()
        .map(|j| (j.group.as_deref(), j.id.starts_with("a-report@")))
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, [(None, false), (Some("tenant-a"), true)], "{got:?}");

    let id = s.trigger("a-report").await.expect("trigger").expect("exists");
    let job = q.get(&id).await.expect("get").expect("the triggered job");
    assert_eq!(job.group.as_deref(), Some("tenant-a"));
    assert!(
        q.claim_many(10).await.expect("claim").is_empty(),
        "both groups are at their limit"
    );
    for j in &got {
        q.ack(&j.id, j.fence).await.expect("ack");
    }
    // Taken back by the pause: no tick fires while the rest drains.
    for name in ["a-report", "plain"] {
        assert!(s.pause(name).await.expect("pause"));
    }
    let rest = drain(&ts, "tenants").await;
    assert!(rest.contains_key(&id), "{rest:?}");
    assert!(rest.keys().any(|k| k.starts_with("plain@")), "{rest:?}");

    // A group key is checked as a push checks it.
    spec.group = Some("two words".to_owned());
    let e = s.upsert("a-report", &spec).await.expect_err("a bad group");
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(e.message().contains("group"), "{e}");
}

on_both_stores!(manual_clock:
    upsert_get_list_and_delete,
    each_tick_fires_once_among_many_firers,
    missed_ticks_follow_the_misfire_policy,
    pause_resume_and_trigger,
    changes_take_effect_from_the_next_tick,
    start_and_end_bound_the_ticks,
    bad_input_is_refused_with_the_field,
    its_jobs_carry_the_group,
);

/// DST nights end to end on the memory store's hand-moved clock (no
/// sleeps): schedules in Berlin (a zone with DST), Kolkata (none) and UTC
/// fired minute by minute through the night, then every job counted. The
/// rules themselves are tested without a store in `schedule_when.rs`.
mod dst {
    use super::*;
    use tollgate::ManualClock;

    /// Fires every schedule of `specs` through the 6 hours from `from_ms`
    /// (both ends included), a pass every 60 s, and returns each
    /// schedule's ticks.
    async fn night(from_ms: u64, specs: &[(&str, &str)]) -> BTreeMap<String, Vec<u64>> {
        let clock = ManualClock::new(from_ms);
        let ts = TestStore {
            store: tollgate::Store::memory_with_clock(std::sync::Arc::new(clock.clone())),
            clock: Some(clock.clone()),
            server: None,
            cluster: None,
            sentinel: None,
            dir: None,
        };
        let s = Schedules::new(&ts.store);
        for (name, when) in specs {
            let spec = ScheduleSpec::new(When::parse(when).expect("when"), "night");
            s.upsert(name, &spec).await.expect("create");
        }
        for minute in 0..=6 * 60 {
            if minute > 0 {
                clock.advance(Duration::from_secs(60));
            }
            let report = s.fire_due().await.expect("fire");
            assert!(
                report.missed.is_empty(),
                "fired every minute, nothing missed: {report:?}"
            );
        }
        let jobs = drain(&ts, "night").await;
        specs
            .iter()
            .map(|(name, _)| (name.to_string(), ticks_of(&jobs, name)))
            .collect()
    }

    const MIN: u64 = 60_000;

    fn every(ticks: &[u64], step: u64) -> bool {
        ticks.windows(2).all(|w| w[1] - w[0] == step)
    }

    #[tokio::test]
    async fn spring_forward() {
        // 2026-03-28T22:00Z (23:00 CET) to 04:00Z (06:00 CEST); Berlin
        // jumps from 02:00 to 03:00 CEST at 01:00Z.
        let start = 1_774_735_200_000;
        let t = night(
            start,
            &[
                ("berlin-0230", "TZ=Europe/Berlin 30 2 * * *"),
                ("berlin-15m", "TZ=Europe/Berlin */15 * * * *"),
                ("kolkata-0530", "TZ=Asia/Kolkata 30 5 * * *"),
                ("utc-0230", "30 2 * * *"),
                ("every-30m", "every 30m"),
            ],
        )
        .await;
        // 02:30 does not exist: once, when the gap ends (03:00 CEST).
        assert_eq!(t["berlin-0230"], [1_774_746_000_000]);
        // Every quarter hour of elapsed time, the jump changes nothing.
        assert_eq!(t["berlin-15m"].len(), 25);
        assert!(every(&t["berlin-15m"], 15 * MIN), "{:?}", t["berlin-15m"]);
        // 05:30 IST is 00:00Z; 02:30 UTC is 02:30Z.
        assert_eq!(t["kolkata-0530"], [1_774_742_400_000]);
        assert_eq!(t["utc-0230"], [1_774_751_400_000]);
        assert_eq!(t["every-30m"].len(), 13);
        assert!(every(&t["every-30m"], 30 * MIN));
    }

    #[tokio::test]
    async fn fall_back() {
        // 2026-10-24T22:00Z (00:00 CEST) to 04:00Z (05:00 CET); Berlin
        // goes back from 03:00 CEST to 02:00 CET at 01:00Z, so 02:00 to
        // 03:00 comes twice.
        let start = 1_792_879_200_000;
        let t = night(
            start,
            &[
                ("berlin-0230", "TZ=Europe/Berlin 30 2 * * *"),
                ("berlin-15m", "TZ=Europe/Berlin */15 * * * *"),
                ("berlin-hourly", "TZ=Europe/Berlin @hourly"),
            ],
        )
        .await;
        // 02:30 comes twice: fired once, at its first pass (CEST, 00:30Z).
        assert_eq!(t["berlin-0230"], [1_792_888_200_000]);
        // Both passes of the repeated hour fire for wildcard hours.
        assert_eq!(t["berlin-15m"].len(), 25);
        assert!(every(&t["berlin-15m"], 15 * MIN));
        assert_eq!(t["berlin-hourly"].len(), 7);
        assert!(every(&t["berlin-hourly"], 60 * MIN));
    }
}

/// The index of queues with schedules on Redis (issue 35): firing costs in
/// proportion to the schedules that exist, not to every queue that ever
/// had one.
mod index {
    use super::*;
    use futures_util::StreamExt;
    use support::RedisServer;

    fn daily(queue: &str) -> ScheduleSpec {
        ScheduleSpec::new(When::parse("0 3 * * *").expect("when"), queue)
    }

    fn text(v: &::redis::Value) -> String {
        match v {
            ::redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            ::redis::Value::VerbatimString { text, .. } => text.clone(),
            other => panic!("not text: {other:?}"),
        }
    }

    /// Commands Redis processed per second over `window`, the INFO calls
    /// that measure it left out.
    async fn commands_per_second(server: &RedisServer, window: Duration) -> f64 {
        let total = |server: &RedisServer| -> u64 {
            let info = text(&server.command(&["INFO", "stats"]));
            info.lines()
                .find_map(|l| l.strip_prefix("total_commands_processed:"))
                .and_then(|n| n.trim().parse().ok())
                .expect("total_commands_processed")
        };
        let first = total(server);
        tokio::time::sleep(window).await;
        (total(server) - first).saturating_sub(1) as f64 / window.as_secs_f64()
    }

    fn listed(server: &RedisServer) -> usize {
        match server.command(&["SCARD", "tollgate:schedules:{index}:q"]) {
            ::redis::Value::Int(n) => n as usize,
            other => panic!("SCARD answered {other:?}"),
        }
    }

    #[tokio::test]
    async fn deleted_schedules_leave_idle_firing_as_cheap_as_before() {
        let ts = TestStore::redis().await;
        let server = ts.server.as_ref().expect("redis");
        let s = Schedules::new(&ts.store);
        for i in 0..3 {
            s.upsert(&format!("stay-{i}"), &daily(&format!("stay-{i}")))
                .await
                .expect("create");
        }
        let firing = tokio::spawn({
            let s = s.clone();
            async move { s.fire_forever(|_| {}).await }
        });
        let window = Duration::from_secs(2);
        let before = commands_per_second(server, window).await;
        // Each on a queue of its own: every queue it names gets listed.
        futures_util::stream::iter(0..10_000)
            .for_each_concurrent(64, |i| {
                let s = s.clone();
                async move {
                    let name = format!("gone-{i}");
                    s.upsert(&name, &daily(&name)).await.expect("create");
                    assert!(s.delete(&name).await.expect("delete"));
                }
            })
            .await;
        assert_eq!(listed(server), 3, "only the queues with schedules are listed");
        let after = commands_per_second(server, window).await;
        firing.abort();
        // (Before the fix: 46 -> 10,539 commands/s. The slack is for a
        // busy machine, where the idle rate itself moves.)
        assert!(
            after <= before * 2.0 + 200.0,
            "idle firing went from {before:.0} to {after:.0} commands/s"
        );
        assert_eq!(s.list().await.expect("list").len(), 3);
    }

    /// An index written before the counts: its stale queues are dropped by
    /// firing when it finds them empty, and a queue that still has
    /// schedules keeps its place when one of them goes.
    #[tokio::test]
    async fn an_index_from_before_the_counts_is_mended() {
        let ts = TestStore::redis().await;
        let server = ts.server.as_ref().expect("redis");
        let s = Schedules::new(&ts.store);
        for name in ["a", "b"] {
            s.upsert(name, &daily("both")).await.expect("create");
        }
        // As the old index left it: no counts, and queues listed whose
        // schedules are long gone.
        server.command(&["DEL", "tollgate:schedules:{index}:c"]);
        for i in 0..500 {
            server.command(&["SADD", "tollgate:schedules:{index}:q", &format!("stale-{i}")]);
        }
        assert_eq!(listed(server), 501);
        // Counted afresh: "both" keeps its place while "b" is there.
        assert!(s.delete("a").await.expect("delete"));
        s.fire_due().await.expect("fire");
        assert_eq!(listed(server), 1, "firing drops the queues it finds empty");
        assert_eq!(s.list().await.expect("list").len(), 1);
        assert!(s.delete("b").await.expect("delete"));
        assert_eq!(listed(server), 0);
    }
}
