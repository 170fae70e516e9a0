//! `tollgate serve`'s listeners: the API's and, when rooms are configured,
//! the waiting rooms' proxy; the accept loop that serves both, and the
//! graceful shutdown on SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tollgate::PeerAddr;

use crate::api::conn::{JsonParseErrors, MAX_HEAD, MAX_HEADERS};
use crate::exit;
use crate::room::Rooms;

/// The bound listeners.
pub(super) struct Listeners {
    api: TcpListener,
    /// The waiting rooms' listener, when there are rooms.
    proxy: Option<TcpListener>,
}

/// What the listeners serve: the whole app once the store is open, until
/// then the starting one (probes, and 503 for the rest) and closed rooms.
/// Chosen per request, so a connection opened while starting (a client's
/// pooled one) is served in full once the store is up; the handlers
/// themselves always get a store.
#[derive(Clone)]
pub(super) struct App {
    ready: Arc<OnceLock<(axum::Router, Arc<Rooms>)>>,
    starting: axum::Router,
}

impl App {
    pub(super) fn new(starting: axum::Router) -> App {
        App {
            ready: Arc::default(),
            starting,
        }
    }

    /// From now on, `api` and `rooms` answer.
    pub(super) fn open(&self, api: axum::Router, rooms: Arc<Rooms>) {
        let _ = self.ready.set((api, rooms));
    }

    fn api(&self) -> axum::Router {
        match self.ready.get() {
            Some((api, _)) => api.clone(),
            None => self.starting.clone(),
        }
    }

    fn rooms(&self) -> Option<&Arc<Rooms>> {
        self.ready.get().map(|(_, rooms)| rooms)
    }
}

impl Listeners {
    /// Binds the API's address and, if there are rooms, the proxy's: the
    /// first address a host name resolves to that can be bound. A failure
    /// is printed and becomes the exit code.
    pub(super) async fn bind(listen: &str, proxy_listen: &str, with_rooms: bool) -> Result<Self, i32> {
        let api = match TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("tollgate: cannot listen on {listen}: {e}");
                return Err(exit::UNAVAILABLE);
            }
        };
        let proxy = if with_rooms {
            match TcpListener::bind(proxy_listen).await {
                Ok(l) => Some(l),
                Err(e) => {
                    eprintln!("tollgate: cannot listen on {proxy_listen} for the waiting rooms: {e}");
                    return Err(exit::UNAVAILABLE);
                }
            }
        } else {
            None
        };
        Ok(Listeners { api, proxy })
    }

    /// The one line a person (or a test) needs: where to send requests.
    pub(super) fn announce(&self, rooms: &[String], store: &str) {
        let shown = |l: &TcpListener| {
            l.local_addr()
                .map_or_else(|e| format!("({e})"), |a| a.to_string())
        };
        let rooms_at = match &self.proxy {
            Some(p) => format!("; waiting rooms on http://{} ({})", shown(p), rooms.join(", ")),
            None => String::new(),
        };
        println!(
            "tollgate serve: listening on http://{} (store: {store}){rooms_at}",
            shown(&self.api)
        );
    }

    /// Serves both listeners until SIGTERM or SIGINT, then shuts down:
    /// `stop` tells long-polls and proxy connections, and connections get
    /// up to 30 s to finish.
    ///
    /// Connections are served with hyper's HTTP/1 builder directly rather
    /// than axum's auto-detecting `serve`: it keeps an idle connection (and
    /// so an open long-poll) markedly smaller.
    pub(super) async fn serve(self, app: App, stop: watch::Sender<bool>) {
        let Listeners { api, proxy } = self;
        let graceful = GracefulShutdown::new();
        let (proxy_open, mut proxy_closed) = tokio::sync::mpsc::channel::<()>(1);
        let signalled = shutdown();
        tokio::pin!(signalled);
        loop {
            tokio::select! {
                accepted = accept(proxy.as_ref()), if proxy.is_some() => {
                    let Some((stream, peer)) = or_back_off(accepted, "accept failed (waiting rooms)").await else {
                        continue;
                    };
                    serve_proxy(stream, peer, app.clone(), stop.subscribe(), proxy_open.clone());
                }
                accepted = api.accept() => {
                    let Some((stream, peer)) = or_back_off(accepted, "accept failed").await else {
                        continue;
                    };
                    serve_api(stream, peer, &app, &graceful);
                }
                () = &mut signalled => break,
            }
        }
        eprintln!("tollgate serve: shutting down; answering pending long-polls");
        drop(api);
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
    }
}

/// The accepted connection, or after a failed accept (out of file
/// descriptors, say) a warning and a short pause: back off, keep serving.
async fn or_back_off(
    accepted: std::io::Result<(TcpStream, SocketAddr)>,
    failed: &'static str,
) -> Option<(TcpStream, SocketAddr)> {
    match accepted {
        Ok(accepted) => Some(accepted),
        Err(e) => {
            tracing::warn!(error = %e, "{failed}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

/// Serves one API connection, under the graceful shutdown's watch.
fn serve_api(stream: TcpStream, peer: SocketAddr, app: &App, graceful: &GracefulShutdown) {
    let _ = stream.set_nodelay(true);
    // The request head's limits (hyper answers past them itself;
    // JsonParseErrors gives those answers the JSON error body).
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .max_header_size(MAX_HEAD)
        .max_headers(MAX_HEADERS)
        .serve_connection(
            TokioIo::new(JsonParseErrors::new(stream)),
            TowerToHyperService::new(with_peer(app.clone(), peer)),
        );
    let conn = graceful.watch(conn);
    tokio::spawn(async move {
        let _ = conn.await;
    });
}

/// Serves one waiting-room connection (upgrades included).
fn serve_proxy(
    stream: TcpStream,
    peer: SocketAddr,
    app: App,
    mut stopping: watch::Receiver<bool>,
    open: tokio::sync::mpsc::Sender<()>,
) {
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |req| {
        let rooms = app.rooms().cloned();
        async move {
            Ok::<_, std::convert::Infallible>(match rooms {
                Some(rooms) => rooms.handle(req, peer).await,
                // Closed, whatever on_store_error says, until the store
                // first answers: no room has its settings applied yet.
                None => crate::room::closed_at_start(req.headers()),
            })
        }
    });
    // The same head limits as the API's, so a head past them is always a
    // 431 (without max_header_size, hyper's own limit is its read buffer,
    // which one large read can overshoot: a 500 KB head then passed).
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .max_header_size(MAX_HEAD)
        .max_headers(MAX_HEADERS)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    // hyper-util's GracefulShutdown does not take upgradeable
    // connections: watch the stop signal here, and hold a
    // sender so shutdown can wait for the last one.
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

/// Accepts on the waiting rooms' listener (only polled when there is one).
async fn accept(listener: Option<&TcpListener>) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

type Incoming = hyper::Request<hyper::body::Incoming>;

/// Sends each request to the app of the moment ([`App::api`]), telling it
/// (the rate-limit layer's client-IP key) who is connected.
fn with_peer(
    app: App,
    peer: SocketAddr,
) -> tower::util::ServiceFn<impl FnMut(Incoming) -> tower::util::Oneshot<axum::Router, Incoming> + Clone> {
    tower::service_fn(move |mut req: Incoming| {
        req.extensions_mut().insert(PeerAddr(peer));
        tower::ServiceExt::oneshot(app.api(), req)
    })
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
