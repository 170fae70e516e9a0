//! `tollgate serve`: the HTTP/JSON service, on the embedded store unless
//! `--redis` names one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tollgate::{PeerAddr, RedisConfig, Store};

use crate::cli::ServeArgs;
use crate::exit;
use crate::http::{AppState, router};
use crate::limits::{LimitSettings, Limiters, ProtectSettings};
use crate::room::{RoomSettings, Rooms};

/// What a TOML config file may set.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    listen: Option<SocketAddr>,
    redis: Option<String>,
    prefix: Option<String>,
    #[serde(default)]
    tokens: Vec<String>,
    /// Named rate limits: `[limits.NAME]`.
    #[serde(default)]
    limits: HashMap<String, LimitSettings>,
    /// Rate-limit tollgate's own /v1 API.
    protect: Option<ProtectSettings>,
    /// Where the waiting rooms listen.
    proxy_listen: Option<SocketAddr>,
    /// Waiting rooms: `[rooms.NAME]`.
    #[serde(default)]
    rooms: HashMap<String, RoomSettings>,
    /// Wait for this many replicas after each change.
    durable_replicas: Option<u32>,
    /// How long to wait for them, e.g. "500ms".
    durable_timeout: Option<String>,
    /// Job queues' settings: `[queues.NAME]`.
    #[serde(default)]
    queues: HashMap<String, crate::jobs_http::QueueSettings>,
    /// Waiting tickets one client may hold at once; 0: no cap.
    max_tickets_per_client: Option<usize>,
    /// How long /metrics may spend reading the store, e.g. "1s".
    metrics_timeout: Option<String>,
    /// How long a request body may take to arrive, e.g. "30s".
    body_timeout: Option<String>,
    /// The embedded store: how long an idle name's state is kept, e.g. "10m".
    memory_idle: Option<String>,
}

/// The settings `serve` runs with.
struct Settings {
    listen: SocketAddr,
    redis: Option<String>,
    prefix: String,
    tokens: Vec<String>,
    limits: HashMap<String, LimitSettings>,
    protect: Option<ProtectSettings>,
    proxy_listen: SocketAddr,
    rooms: HashMap<String, RoomSettings>,
    durability: crate::cli::DurabilityArgs,
    queues: HashMap<String, crate::jobs_http::QueueSettings>,
    max_tickets_per_client: usize,
    metrics_timeout: Duration,
    body_timeout: Duration,
    memory_idle: Duration,
}

/// A duration from a flag, else from the file's `key`, else `default`;
/// `min` to `max`.
fn duration_setting(
    key: &str,
    flag: Option<Duration>,
    file: Option<&str>,
    default: Duration,
    (min, max): (Duration, Duration),
) -> Result<Duration, String> {
    let d = match (flag, file) {
        (Some(d), _) => d,
        (None, Some(text)) => crate::cli::duration(text).map_err(|e| format!("{key}: {e}"))?,
        (None, None) => default,
    };
    if d < min || d > max {
        return Err(format!("{key} must be {min:?} to {max:?}, not {d:?}"));
    }
    Ok(d)
}

/// Merges the config file, the environment and the flags: flags and
/// environment (which clap has already merged) win over the file.
fn settings(args: ServeArgs) -> Result<Settings, String> {
    let file = match &args.config {
        None => FileSettings::default(),
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?
        }
    };
    Ok(Settings {
        listen: args
            .listen
            .or(file.listen)
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 7700))),
        redis: args.redis.or(file.redis),
        prefix: args
            .prefix
            .or(file.prefix)
            .unwrap_or_else(|| "tollgate".to_owned()),
        tokens: if args.tokens.is_empty() {
            file.tokens
        } else {
            args.tokens
        },
        limits: file.limits,
        protect: file.protect,
        proxy_listen: args
            .proxy_listen
            .or(file.proxy_listen)
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 7780))),
        rooms: file.rooms,
        queues: file.queues,
        max_tickets_per_client: args
            .max_tickets_per_client
            .or(file.max_tickets_per_client)
            .unwrap_or(crate::tickets::DEFAULT_PER_CLIENT),
        metrics_timeout: duration_setting(
            "metrics_timeout",
            args.metrics_timeout,
            file.metrics_timeout.as_deref(),
            crate::scrape::METRICS_TIMEOUT,
            (Duration::from_millis(10), Duration::from_secs(60)),
        )?,
        body_timeout: duration_setting(
            "body_timeout",
            args.body_timeout,
            file.body_timeout.as_deref(),
            crate::body::BODY_TIMEOUT,
            (Duration::from_millis(100), Duration::from_secs(3600)),
        )?,
        memory_idle: duration_setting(
            "memory_idle",
            None,
            file.memory_idle.as_deref(),
            tollgate::MemoryOptions::default().idle,
            (Duration::from_secs(1), Duration::from_secs(30 * 24 * 3600)),
        )?,
        durability: crate::cli::DurabilityArgs {
            durable_replicas: args.durability.durable_replicas.or(file.durable_replicas),
            durable_timeout: match (args.durability.durable_timeout, file.durable_timeout) {
                (Some(t), _) => Some(t),
                (None, Some(text)) => {
                    Some(crate::cli::duration(&text).map_err(|e| format!("durable_timeout: {e}"))?)
                }
                (None, None) => None,
            },
        },
    })
}

pub(crate) async fn run(args: ServeArgs) -> i32 {
    let args = match settings(args) {
        Ok(s) => s,
        Err(msg) => {
            eprintln!("tollgate: {msg}");
            return exit::USAGE;
        }
    };
    if let Some(bad) = args
        .tokens
        .iter()
        .find(|t| t.len() < 16 || t.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        let shown: String = bad.chars().take(4).collect();
        eprintln!(
            "tollgate: --token {shown}… is too weak or malformed: use at least 16 printable characters without spaces"
        );
        return exit::USAGE;
    }
    let queue_set = match crate::jobs_http::Queues::new(&args.queues) {
        Ok(q) => Arc::new(q),
        Err(msg) => {
            eprintln!("tollgate: {msg}");
            return exit::USAGE;
        }
    };
    let store = match &args.redis {
        None => match Store::memory_with(tollgate::MemoryOptions {
            idle: args.memory_idle,
            ..tollgate::MemoryOptions::default()
        }) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("tollgate: memory_idle: {e}");
                return exit::USAGE;
            }
        },
        Some(url) => {
            let mut config = RedisConfig::new(url.clone());
            config.prefix = args.prefix.clone();
            let connected = match Store::connect(config).await {
                Ok(s) => args.durability.apply(s).await,
                Err(e) => Err(e),
            };
            match connected {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("tollgate: {e}");
                    return exit::for_error(&e);
                }
            }
        }
    };
    if args.redis.is_none() && args.durability.durable_replicas.is_some_and(|n| n > 0) {
        eprintln!("tollgate: durable_replicas needs Redis (--redis): the embedded store has no replicas");
        return exit::USAGE;
    }
    // A queue configured with another partition count than the store has
    // in force would strand jobs: refuse to start.
    for (name, partitions) in queue_set.configured() {
        let checked = match queue_set.open(&store, name) {
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
                eprintln!("tollgate: [queues.{name}] partitions = {partitions}: {e}");
                return exit::CONFIG;
            }
            Err(e) => {
                tracing::warn!(queue = name, error = %e, "could not check the queue's partitions now; each request will")
            }
        }
    }
    // Before anything that registers metrics (rooms, limiters).
    let metrics = match metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(&[
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        ])
        .and_then(|b| b.install_recorder())
    {
        Ok(handle) => handle,
        Err(e) => {
            eprintln!("tollgate: cannot set up metrics: {e}");
            return exit::SOFTWARE;
        }
    };
    let rooms = match Rooms::new(&args.rooms, &store) {
        Ok(r) => Arc::new(r),
        Err(msg) => {
            eprintln!("tollgate: {msg}");
            return exit::USAGE;
        }
    };
    let listener = match TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tollgate: cannot listen on {}: {e}", args.listen);
            return exit::UNAVAILABLE;
        }
    };
    let addr: SocketAddr = listener.local_addr().unwrap_or(args.listen);
    let proxy = if rooms.is_empty() {
        None
    } else {
        match TcpListener::bind(args.proxy_listen).await {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!(
                    "tollgate: cannot listen on {} for the waiting rooms: {e}",
                    args.proxy_listen
                );
                return exit::UNAVAILABLE;
            }
        }
    };
    // The one line a person (or a test) needs: where to send requests.
    let rooms_at = match &proxy {
        Some(p) => {
            let names: Vec<&str> = rooms.all().iter().map(|r| r.name()).collect();
            format!(
                "; waiting rooms on http://{} ({})",
                p.local_addr().unwrap_or(args.proxy_listen),
                names.join(", ")
            )
        }
        None => String::new(),
    };
    println!(
        "tollgate serve: listening on http://{addr} (store: {}){rooms_at}",
        store.kind()
    );
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
        (Err(msg), _) | (_, Err(msg)) => {
            eprintln!("tollgate: {msg}");
            return exit::USAGE;
        }
    };
    // A ticket's client is its IP unless tokens are configured: believe
    // the X-Forwarded-For of the proxies [protect] trusts.
    let trusted = match &args.protect {
        Some(p) => match crate::limits::trusted_proxies(p) {
            Ok(t) => t,
            Err(msg) => {
                eprintln!("tollgate: {msg}");
                return exit::USAGE;
            }
        },
        None => Vec::new(),
    };
    let (stop, stopping) = tokio::sync::watch::channel(false);
    // Per room, this server's view of the store: ended sessions (so the
    // proxy's fast path refuses them), the room's settings (written back
    // if the store lost them) and, once a second, a light reap so gauges
    // and waiters' notifications stay fresh when no request comes.
    for room in rooms.all() {
        let (room, stopping) = (room.clone(), stopping.clone());
        tokio::spawn(async move { room.watch(stopping).await });
    }
    // The embedded store drops idle names a few per operation; this drops
    // them when no operation comes too (after a flood of names, say), a
    // bounded batch at a time so no operation waits long behind it.
    // Job-queue handles of queues gone idle are dropped the same way, and
    // the histograms' samples recorded since the last scrape are folded
    // into their buckets: the exporter keeps every sample until then, so a
    // server nobody scrapes would otherwise grow with every request.
    {
        let (store, queue_set, mut stopping) = (store.clone(), queue_set.clone(), stopping.clone());
        let exporter = metrics.clone();
        let idle = args.memory_idle;
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
            }
        });
    }
    let app = router(AppState {
        store,
        metrics,
        gates: Default::default(),
        queues: Default::default(),
        queue_set,
        limits: std::sync::Arc::new(limits),
        rooms: rooms.clone(),
        protect,
        tokens: std::sync::Arc::new(crate::http::Tokens::new(&args.tokens)),
        tickets: std::sync::Arc::new(crate::tickets::TicketCaps::new(
            args.max_tickets_per_client,
            trusted,
        )),
        metrics_timeout: args.metrics_timeout,
        body_timeout: args.body_timeout,
        stopping,
    });
    // Connections are served with hyper's HTTP/1 builder directly rather
    // than axum's auto-detecting `serve`: it keeps an idle connection (and
    // so an open long-poll) markedly smaller.
    let graceful = GracefulShutdown::new();
    let (proxy_open, mut proxy_closed) = tokio::sync::mpsc::channel::<()>(1);
    let signalled = shutdown();
    tokio::pin!(signalled);
    loop {
        tokio::select! {
            accepted = accept(proxy.as_ref()), if proxy.is_some() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed (waiting rooms)");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let rooms = rooms.clone();
                let service = hyper::service::service_fn(move |req| {
                    let rooms = rooms.clone();
                    async move { Ok::<_, std::convert::Infallible>(rooms.handle(req, peer).await) }
                });
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(30))
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades();
                // hyper-util's GracefulShutdown does not take upgradeable
                // connections: watch the stop signal here, and hold a
                // sender so shutdown can wait for the last one.
                let (mut stopping, open) = (stop.subscribe(), proxy_open.clone());
                tokio::spawn(async move {
                    let _open = open;
                    tokio::pin!(conn);
                    tokio::select! {
                        _ = conn.as_mut() => return,
                        _ = stopping.wait_for(|s| *s) => {}
                    }
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                });
            }
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors, say: back off, keep serving.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                // The request head's limits (hyper answers past them itself;
                // JsonParseErrors gives those answers the JSON error body).
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(30))
                    .max_header_size(crate::conn::MAX_HEAD)
                    .max_headers(crate::conn::MAX_HEADERS)
                    .serve_connection(
                        TokioIo::new(crate::conn::JsonParseErrors::new(stream)),
                        TowerToHyperService::new(with_peer(app.clone(), peer)),
                    );
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
            () = &mut signalled => break,
        }
    }
    eprintln!("tollgate serve: shutting down; answering pending long-polls");
    drop(listener);
    let _ = stop.send(true);
    drop(proxy);
    drop(proxy_open);
    let all_closed = async {
        graceful.shutdown().await;
        // Every proxy connection holds a sender: recv() ends with the last.
        let _ = proxy_closed.recv().await;
    };
    if tokio::time::timeout(Duration::from_secs(30), all_closed)
        .await
        .is_err()
    {
        eprintln!("tollgate serve: some connections did not finish within 30 s; closing them");
    }
    0
}

/// Accepts on the waiting rooms' listener (only polled when there is one).
async fn accept(listener: Option<&TcpListener>) -> std::io::Result<(tokio::net::TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// Tells the app (the rate-limit layer's client-IP key) who is connected.
type Incoming = hyper::Request<hyper::body::Incoming>;

fn with_peer(
    app: axum::Router,
    peer: SocketAddr,
) -> tower::util::MapRequest<axum::Router, impl FnMut(Incoming) -> Incoming + Clone> {
    tower::ServiceBuilder::new()
        .map_request(move |mut req: Incoming| {
            req.extensions_mut().insert(PeerAddr(peer));
            req
        })
        .service(app)
}

/// Resolves on SIGTERM or SIGINT: in-flight requests finish (long-polls
/// answer at once), new connections are refused.
async fn shutdown() {
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
