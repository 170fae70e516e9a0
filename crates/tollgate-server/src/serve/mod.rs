//! `tollgate serve`: the HTTP/JSON service, on the embedded store unless
//! `--redis` names one. [`run`] reads the settings, opens the store and
//! what lives on it (queues, schedules, rooms, limits), starts the
//! background tasks (the sweeper, the schedules' firing)
//! and hands the app to the [`listener`].

mod firing;
mod listener;
mod say;
pub(crate) mod settings;
mod tls;

use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tollgate::Store;

use self::listener::{App, Listeners};
use self::settings::{LogFormat, ServeArgs, Settings, settings};
use crate::api::auth::Tokens;
use crate::api::jobs::queues::Queues;
use crate::api::limiters::Limiters;
use crate::api::router;
use crate::api::tickets::TicketCaps;
use crate::exit;
use crate::room::Rooms;
use crate::state::AppState;

pub(crate) async fn run(args: ServeArgs) -> i32 {
    say::use_json(args.log_format == LogFormat::Json);
    match start(args).await {
        Ok(()) => 0,
        Err(code) => code,
    }
}

/// Prints why it failed and gives the usage exit code.
fn usage(msg: &str) -> i32 {
    say::failure(msg);
    exit::USAGE
}

async fn start(args: ServeArgs) -> Result<(), i32> {
    let args = settings(args).map_err(|msg| usage(&msg))?;
    settings::no_placeholder_secrets(&args).map_err(|msg| {
        say::failure(&msg);
        exit::CONFIG
    })?;
    let queue_set = Arc::new(Queues::new(&args.queues).map_err(|msg| usage(&msg))?);
    if args.redis.is_none() && args.durability.durable_replicas.is_some_and(|n| n > 0) {
        return Err(usage(
            "durable_replicas needs Redis (--redis): the embedded store has no replicas",
        ));
    }
    if let Some(url) = &args.redis {
        // A URL that cannot be used is refused before anything listens.
        crate::commands::redis_config(url, &args.prefix, None)
            .check()
            .map_err(|e| usage(&format!("--redis (TOLLGATE_REDIS_URL, redis): {e}")))?;
    }
    let room_names = check_config(&args)?;
    check_schedules(&args).await?;
    let tls = match &args.tls {
        Some((cert, key)) => Some(Arc::new(tls::Tls::new(cert, key).map_err(|msg| usage(&msg))?)),
        None => None,
    };
    let listeners = Listeners::bind(&args.listen, &args.proxy_listen, !room_names.is_empty(), tls).await?;
    let store_kind = if args.redis.is_some() { "redis" } else { "memory" };
    let open_api = listeners
        .api_addr()
        .filter(|a| args.tokens.is_empty() && args.read_tokens.is_empty() && !a.ip().is_loopback());
    // Before anything that registers metrics (rooms, limiters).
    let metrics = install_metrics()?;
    let (failed, connecting) = tokio::sync::watch::channel(None);
    let app = App::new(crate::api::starting_router(connecting.clone()));
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let opening = open(args, queue_set, metrics, stopping, failed);
    tokio::pin!(opening);
    // Nothing is accepted until the app is open, the store has failed
    // once, or a second has gone by without an answer (a host that drops
    // packets): a store that answers at once gets no request answered 503
    // (connections wait in the backlog meanwhile, as they always did).
    let waiting = tokio::select! {
        opened = &mut opening => {
            let (api, rooms) = opened?;
            app.open(api, rooms);
            false
        }
        _ = async { connecting.clone().wait_for(Option::is_some).await.is_ok() } => true,
        () = tokio::time::sleep(Duration::from_secs(1)) => true,
    };
    // Only now: a store that refuses the set-up (a password, a DB index)
    // has exited above, before a script waiting for this line took the
    // server for started.
    listeners.announce(&room_names, store_kind, !waiting);
    if let Some(addr) = open_api {
        tracing::warn!(
            %addr,
            "no tokens set: anyone who can reach {addr} may do everything through the API (set tokens, TOLLGATE_TOKENS)"
        );
    }
    let serving = listeners.serve(app.clone(), stop);
    tokio::pin!(serving);
    if waiting {
        tokio::select! {
            opened = &mut opening => {
                let (api, rooms) = opened?;
                app.open(api, rooms);
            }
            // Stopped (SIGTERM, SIGINT) before the store answered.
            () = &mut serving => return Ok(()),
        }
    }
    serving.await;
    // A clean stop: what the embedded store logged is written and synced
    // before the process goes (with `everysec`, the last second too).
    if let Some(store) = DURABLE.get() {
        store.close();
    }
    Ok(())
}

/// The durable embedded store's figures as metrics (docs/METRICS.md).
fn durable_metrics(d: &tollgate::DurableStats) {
    metrics::gauge!("tollgate_store_log_bytes").set(d.log.log_bytes as f64);
    metrics::counter!("tollgate_store_log_written_bytes_total").absolute(d.log.bytes_written);
    metrics::counter!("tollgate_store_log_records_total").absolute(d.log.records);
    metrics::gauge!("tollgate_store_snapshot_bytes").set(d.snapshot_bytes as f64);
    metrics::counter!("tollgate_store_snapshots_total").absolute(d.snapshots);
    let last = d
        .last_snapshot
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0.0, |t| t.as_secs_f64());
    metrics::gauge!("tollgate_store_last_snapshot_timestamp_seconds").set(last);
    metrics::gauge!("tollgate_store_disk_failing").set(if d.log.failing { 1.0 } else { 0.0 });
}

/// The durable embedded store this server opened, closed at a clean stop.
static DURABLE: std::sync::OnceLock<Store> = std::sync::OnceLock::new();

/// Says why the rooms could not be built, and gives the exit code.
fn room_failure(e: crate::room::RoomError) -> i32 {
    say::failure(&e.to_string());
    e.exit_code()
}

/// Checks the configuration that needs a store to be built (rooms,
/// limits, `[protect]`) on a scratch embedded store, before the metrics
/// recorder is installed (so nothing registers): a mistake is refused
/// before anything listens, not once Redis answers. The room names, in
/// matching order, for the listening line.
fn check_config(args: &Settings) -> Result<Vec<String>, i32> {
    let scratch = Store::memory();
    let subscribers = Arc::new(crate::api::streams::Subscribers::new(0));
    let rooms = Rooms::new(&args.rooms, &scratch, &subscribers).map_err(room_failure)?;
    let limits = Limiters::configure(&scratch, &args.limits).map_err(|msg| usage(&msg))?;
    if let Some(p) = &args.protect {
        limits.layer(p).map_err(|msg| usage(&msg))?;
        crate::api::limiters::trusted_proxies(p).map_err(|msg| usage(&msg))?;
    }
    Ok(rooms.all().iter().map(|r| r.name().to_owned()).collect())
}

/// Checks the configured schedules as the store will (on a scratch
/// embedded store), so a mistake is refused before anything listens.
async fn check_schedules(args: &Settings) -> Result<(), i32> {
    let scratch = tollgate::Schedules::new(&Store::memory());
    for (name, spec) in &args.schedules {
        if let Err(e) = scratch.upsert(name, spec).await {
            return Err(usage(&format!("schedules.{name}: {e}")));
        }
    }
    Ok(())
}

/// Creates or changes the configured schedules. One the config no longer
/// names is left alone: servers of several config versions may share a
/// store, and an older one must not delete what a newer one added.
async fn apply_schedules(
    args: &Settings,
    store: &Store,
    tracked: &crate::api::tracked::Tracked,
) -> Result<(), i32> {
    let schedules = tollgate::Schedules::new(store);
    for (name, spec) in &args.schedules {
        crate::api::tracked::track(tracked, name);
        match schedules.upsert(name, spec).await {
            Ok(done) => tracing::info!(schedule = name, result = ?done, "configured schedule applied"),
            // The store refused it: a partitioned queue, say.
            Err(e)
                if matches!(
                    e.kind(),
                    tollgate::ErrorKind::InvalidInput | tollgate::ErrorKind::PartitionConflict
                ) =>
            {
                say::failure(&format!("schedules.{name}: {e}"));
                return Err(exit::CONFIG);
            }
            Err(e) => {
                tracing::warn!(schedule = name, error = %e, "could not apply the configured schedule now; the stored one stays")
            }
        }
    }
    Ok(())
}

/// Opens the store (waiting for Redis as long as `wait_for_store` allows,
/// each failure sent to `failed`) and what lives on it, starts the
/// background tasks, and builds the app: its API and its rooms.
async fn open(
    mut args: Settings,
    queue_set: Arc<Queues>,
    metrics: PrometheusHandle,
    stopping: tokio::sync::watch::Receiver<bool>,
    failed: tokio::sync::watch::Sender<Option<String>>,
) -> Result<(axum::Router, Arc<Rooms>), i32> {
    let store = open_store(&args, &failed).await?;
    check_queues(&queue_set, &store).await?;
    let scheduled = crate::api::tracked::Tracked::default();
    apply_schedules(&args, &store, &scheduled).await?;
    // One count of event streams: the API's and the waiting visitors'.
    let subscribers = Arc::new(crate::api::streams::Subscribers::new(args.max_event_subscribers));
    let rooms = Arc::new(Rooms::new(&args.rooms, &store, &subscribers).map_err(room_failure)?);
    for room in rooms.all() {
        if let Err(e) = room.apply_config().await {
            tracing::warn!(room = room.name(), error = %e, "could not set the room's capacity and admission rate; the stored ones stay");
        }
    }
    // After the recorder: limiters register their metrics when made.
    let limits = Limiters::configure(&store, &args.limits);
    let protect = limits
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|l| args.protect.as_ref().map(|p| l.layer(p)).transpose());
    let (limits, protect) = match (limits, protect) {
        (Ok(l), Ok(p)) => (l, p),
        (Err(msg), _) | (_, Err(msg)) => return Err(usage(&msg)),
    };
    // A ticket's client is its IP unless tokens are configured: believe
    // the X-Forwarded-For of the proxies [protect] trusts.
    let trusted = match &args.protect {
        Some(p) => crate::api::limiters::trusted_proxies(p).map_err(|msg| usage(&msg))?,
        None => Vec::new(),
    };
    // Per room, this server's view of the store: ended sessions (so the
    // proxy's fast path refuses them), the room's settings (written back
    // if the store lost them) and, once a second, a light reap so gauges
    // and waiters' notifications stay fresh when no request comes.
    for room in rooms.all() {
        let (room, stopping) = (room.clone(), stopping.clone());
        tokio::spawn(async move { room.watch(stopping).await });
    }
    spawn_sweeper(&store, &queue_set, &metrics, args.memory_idle, stopping.clone());
    // Every server fires: the store gives each tick to one of them.
    firing::spawn(&store, scheduled.clone(), stopping.clone());
    // What the file configures comes back if the store loses it.
    firing::keep_configured(&store, args.schedules.clone(), stopping.clone());
    let tries = Arc::new(crate::api::auth::Tries::new(&store));
    let state = AppState {
        cors: Arc::new(std::mem::take(&mut args.cors)),
        tries,
        hosts: Arc::new(std::mem::take(&mut args.public_hosts)),
        store,
        metrics,
        lateness: Default::default(),
        gates: Default::default(),
        queues: Default::default(),
        schedules: scheduled,
        queue_set,
        limits: Arc::new(limits),
        rooms: rooms.clone(),
        protect,
        tokens: Arc::new(Tokens::new(&args.tokens, &args.read_tokens, args.api_session_ttl)),
        tickets: Arc::new(TicketCaps::new(args.max_tickets_per_client, trusted)),
        subscribers,
        elections: Default::default(),
        metrics_timeout: args.metrics_timeout,
        body_timeout: args.body_timeout,
        console: Default::default(),
        stopping: stopping.clone(),
    };
    crate::console::sample::spawn(state.clone(), stopping);
    let api = router(state);
    Ok((api, rooms))
}

/// The embedded store, or Redis at `redis` (durable as asked).
async fn open_store(
    args: &Settings,
    failed: &tokio::sync::watch::Sender<Option<String>>,
) -> Result<Store, i32> {
    let memory = tollgate::MemoryOptions {
        idle: args.memory_idle,
        ..tollgate::MemoryOptions::default()
    };
    match (&args.redis, &args.data_dir) {
        (None, None) => {
            say::notice(
                "the embedded store is memory only (--data-dir none): everything is lost when the server stops",
            );
            Store::memory_with(memory).map_err(|e| usage(&format!("memory_idle: {e}")))
        }
        (None, Some(dir)) => open_durable(args, memory, dir).await,
        (Some(url), _) => wait_for_redis(args, url, failed).await,
    }
}

/// The durable embedded store in `dir`, recovered; a damaged directory or
/// one another server holds exits 78 with what was found.
async fn open_durable(
    args: &Settings,
    memory: tollgate::MemoryOptions,
    dir: &std::path::Path,
) -> Result<Store, i32> {
    let options = tollgate::DurableOptions {
        fsync: args.fsync,
        snapshot_after: args.snapshot_after,
        ..tollgate::DurableOptions::new(dir)
    };
    // A file-size limit (`ulimit -f`) reached by the log must fail its
    // write (EFBIG: the store refuses changes until there is room), not
    // end the process, as SIGXFSZ does by default. Once a listener is set
    // for a signal, tokio keeps it for the life of the process.
    let xfsz = tokio::signal::unix::SignalKind::from_raw(nix::sys::signal::Signal::SIGXFSZ as i32);
    if let Err(e) = tokio::signal::unix::signal(xfsz) {
        tracing::warn!(error = %e, "could not take SIGXFSZ: a file-size limit would end the server");
    }
    let opened = tokio::task::spawn_blocking(move || Store::open_with(memory, options)).await;
    let (store, recovery) = match opened {
        Ok(Ok(opened)) => opened,
        Ok(Err(e)) => {
            say::failure(&e.to_string());
            return Err(exit::CONFIG);
        }
        Err(e) => {
            say::failure(&format!("recovery stopped: {e}"));
            return Err(exit::SOFTWARE);
        }
    };
    let shown = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
    tracing::info!(
        data_dir = %shown.display(),
        fsync = args.fsync.as_str(),
        snapshot = ?recovery.snapshot,
        snapshot_names = recovery.snapshot_names,
        replayed = recovery.replayed,
        took_ms = recovery.took.as_millis() as u64,
        "embedded store recovered"
    );
    if let Some((file, bytes)) = &recovery.torn {
        say::notice(&format!(
            "the log ended in a torn write (a crash mid-write): cut {bytes} bytes off {}",
            file.display()
        ));
    }
    say::notice(&format!(
        "embedded store in {} (fsync {}): {} names from the snapshot, {} log records replayed in {} ms",
        shown.display(),
        args.fsync.as_str(),
        recovery.snapshot_names,
        recovery.replayed,
        recovery.took.as_millis()
    ));
    let _ = DURABLE.set(store.clone());
    Ok(store)
}

/// Retries a Redis that does not answer (not started yet, restarting)
/// with backoff: 100 ms, doubling, at most 5 s apart; for at most
/// `wait_for_store` if set (then exit 69). What no retry mends (refused
/// credentials, a Cluster node named by a plain URL, a bad URL or DB
/// index) exits at once with its own code.
async fn wait_for_redis(
    args: &Settings,
    url: &str,
    failed: &tokio::sync::watch::Sender<Option<String>>,
) -> Result<Store, i32> {
    let config = crate::commands::redis_config(url, &args.prefix, None);
    let shown = config.redacted_url();
    let retrying = async {
        let mut pause = Duration::from_millis(100);
        let mut attempt = 1u64;
        loop {
            match crate::commands::open_redis(config.clone(), args.durability).await {
                Ok(store) => return Ok(store),
                Err(e) if unreachable(&e) => {
                    tracing::warn!(attempt, error = %e, retry_in_ms = pause.as_millis() as u64, "Redis does not answer yet; retrying");
                    failed.send_replace(Some(e.to_string()));
                }
                Err(e) => {
                    say::failure(&e.to_string());
                    return Err(match e.kind() {
                        // Redis answered the connection's set-up with an error.
                        tollgate::ErrorKind::Unavailable => exit::CONFIG,
                        _ => exit::for_error(&e),
                    });
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
            attempt += 1;
        }
    };
    let Some(limit) = args.wait_for_store else {
        return retrying.await;
    };
    tokio::time::timeout(limit, retrying).await.unwrap_or_else(|_| {
        let last = failed
            .borrow()
            .clone()
            .unwrap_or_else(|| "its first attempt had not finished".to_owned());
        say::failure(&format!(
            "Redis at {shown} did not answer within {limit:?} (--wait-for-store, \
             TOLLGATE_WAIT_FOR_STORE, wait_for_store): {last}"
        ));
        Err(exit::UNAVAILABLE)
    })
}

/// Whether Redis could not be reached, which waiting can mend, rather
/// than reached and refusing the connection's set-up (a SELECT of a DB
/// index it does not have): the library calls both unavailable, the
/// second with Redis's own error as the source.
fn unreachable(e: &tollgate::Error) -> bool {
    let answered = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<tollgate::Error>())
        .is_some_and(|s| s.kind() == tollgate::ErrorKind::Store);
    e.kind() == tollgate::ErrorKind::Unavailable && !answered
}

async fn check_queues(queue_set: &Queues, store: &Store) -> Result<(), i32> {
    // A queue configured with another partition count than the store has
    // in force would strand jobs: refuse to start.
    for (name, partitions) in queue_set.configured() {
        let checked = match queue_set.open(store, name) {
            Ok(q) => q.verify().await,
            Err(e) => Err(e),
        };
        match checked {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    tollgate::ErrorKind::PartitionConflict | tollgate::ErrorKind::Misconfigured
                ) =>
            {
                say::failure(&format!("[queues.{name}] partitions = {partitions}: {e}"));
                return Err(exit::CONFIG);
            }
            Err(e) => {
                tracing::warn!(queue = name, error = %e, "could not check the queue's partitions now; each request will")
            }
        }
    }
    // Limits in the config are the queues' limits from this start on (a
    // PUT /settings changes them until the next start).
    for (name, limits) in queue_set.configured_limits() {
        let set = match queue_set.open(store, name) {
            Ok(q) => q.set_limits(limits).await,
            Err(e) => Err(e),
        };
        match set {
            Ok(()) => {}
            Err(e) if e.kind() == tollgate::ErrorKind::InvalidInput => {
                say::failure(&format!("[queues.{name}]: {e}"));
                return Err(exit::CONFIG);
            }
            Err(e) => tracing::warn!(queue = name, error = %e, "could not set the queue's limits now"),
        }
    }
    Ok(())
}

/// The Prometheus recorder, installed for the whole process.
fn install_metrics() -> Result<PrometheusHandle, i32> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(&[
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        ])
        .and_then(|b| b.install_recorder())
        .inspect(|_| crate::api::families::register())
        .map_err(|e| {
            say::failure(&format!("cannot set up metrics: {e}"));
            exit::SOFTWARE
        })
}

/// The embedded store drops idle names a few per operation; this drops
/// them when no operation comes too (after a flood of names, say), a
/// bounded batch at a time so no operation waits long behind it.
/// Job-queue handles of queues gone idle are dropped the same way, and
/// the histograms' samples recorded since the last scrape are folded
/// into their buckets: the exporter keeps every sample until then, so a
/// server nobody scrapes would otherwise grow with every request.
fn spawn_sweeper(
    store: &Store,
    queue_set: &Arc<Queues>,
    exporter: &PrometheusHandle,
    idle: Duration,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    let (store, queue_set, exporter) = (store.clone(), queue_set.clone(), exporter.clone());
    tokio::spawn(async move {
        let mut ticks = 0u64;
        loop {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = stopping.changed() => return,
            }
            ticks += 1;
            if ticks.is_multiple_of(50) {
                queue_set.forget_idle(idle);
                exporter.run_upkeep();
            }
            store.sweep_idle(2_000);
            if let Some(f) = store.memory_footprint() {
                metrics::gauge!("tollgate_memory_gates").set(f.gates as f64);
                metrics::gauge!("tollgate_memory_queues").set(f.queues as f64);
                metrics::gauge!("tollgate_memory_limit_keys").set(f.limit_keys as f64);
            }
            if let Some(d) = store.durable_stats() {
                durable_metrics(&d);
            }
        }
    });
}
