//! `tollgate serve`'s listeners: the API's and, when rooms are configured,
//! the waiting rooms' proxy; the accept loop that serves both, and the
//! graceful shutdown on SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::sync::Arc;
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

impl Listeners {
    /// Binds the API's address and, if there are rooms, the proxy's; a
    /// failure is printed and becomes the exit code.
    pub(super) async fn bind(
        listen: SocketAddr,
        proxy_listen: SocketAddr,
        rooms: &Rooms,
    ) -> Result<Self, i32> {
        let api = match TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("tollgate: cannot listen on {listen}: {e}");
                return Err(exit::UNAVAILABLE);
            }
        };
        let proxy = if rooms.is_empty() {
            None
        } else {
            match TcpListener::bind(proxy_listen).await {
                Ok(l) => Some(l),
                Err(e) => {
                    eprintln!("tollgate: cannot listen on {proxy_listen} for the waiting rooms: {e}");
                    return Err(exit::UNAVAILABLE);
                }
            }
        };
        Ok(Listeners { api, proxy })
    }

    /// The one line a person (or a test) needs: where to send requests.
    pub(super) fn announce(&self, listen: SocketAddr, proxy_listen: SocketAddr, rooms: &Rooms, store: &str) {
        let addr: SocketAddr = self.api.local_addr().unwrap_or(listen);
        let rooms_at = match &self.proxy {
            Some(p) => {
                let names: Vec<&str> = rooms.all().iter().map(|r| r.name()).collect();
                format!(
                    "; waiting rooms on http://{} ({})",
                    p.local_addr().unwrap_or(proxy_listen),
                    names.join(", ")
                )
            }
            None => String::new(),
        };
        println!("tollgate serve: listening on http://{addr} (store: {store}){rooms_at}");
    }

    /// Serves both listeners until SIGTERM or SIGINT, then shuts down:
    /// `stop` tells long-polls and proxy connections, and connections get
    /// up to 30 s to finish.
    ///
    /// Connections are served with hyper's HTTP/1 builder directly rather
    /// than axum's auto-detecting `serve`: it keeps an idle connection (and
    /// so an open long-poll) markedly smaller.
    pub(super) async fn serve(self, app: axum::Router, rooms: Arc<Rooms>, stop: watch::Sender<bool>) {
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
                    serve_proxy(stream, peer, rooms.clone(), stop.subscribe(), proxy_open.clone());
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
fn serve_api(stream: TcpStream, peer: SocketAddr, app: &axum::Router, graceful: &GracefulShutdown) {
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
    rooms: Arc<Rooms>,
    mut stopping: watch::Receiver<bool>,
    open: tokio::sync::mpsc::Sender<()>,
) {
    let _ = stream.set_nodelay(true);
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
