//! `tollgate serve`'s listeners: the API's and, when rooms are configured,
//! the waiting rooms' proxy; the accept loop that serves both, and the
//! graceful shutdown on SIGTERM or SIGINT.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tollgate::PeerAddr;

use crate::api::conn::{JsonParseErrors, MAX_HEAD, MAX_HEADERS};
use crate::exit;
use crate::proxy_workers::ProxyWorkers;
use crate::room::Rooms;

use super::tls::{HANDSHAKE_TIMEOUT, Handshakes, Tls};

/// The bound listeners.
pub(super) struct Listeners {
    api: TcpListener,
    /// The waiting rooms' listener, when there are rooms.
    proxy: Option<TcpListener>,
    /// Both listeners speak TLS when `tls_cert` and `tls_key` are set.
    tls: Option<Arc<Tls>>,
    /// SIGHUP, watched from before the listening line (its default action
    /// would end the server): it reloads the TLS pair.
    hangups: Option<tokio::signal::unix::Signal>,
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
    pub(super) async fn bind(
        listen: &str,
        proxy_listen: &str,
        with_rooms: bool,
        tls: Option<Arc<Tls>>,
    ) -> Result<Self, i32> {
        let api = match TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                super::say::failure(&format!("cannot listen on {listen}: {e}"));
                return Err(exit::UNAVAILABLE);
            }
        };
        let proxy = if with_rooms {
            match TcpListener::bind(proxy_listen).await {
                Ok(l) => Some(l),
                Err(e) => {
                    super::say::failure(&format!(
                        "cannot listen on {proxy_listen} for the waiting rooms: {e}"
                    ));
                    return Err(exit::UNAVAILABLE);
                }
            }
        } else {
            None
        };
        let hangups = signal(SignalKind::hangup())
            .map_err(|e| tracing::warn!(error = %e, "cannot watch SIGHUP"))
            .ok();
        Ok(Listeners {
            api,
            proxy,
            tls,
            hangups,
        })
    }

    /// Where the API listens.
    pub(super) fn api_addr(&self) -> Option<SocketAddr> {
        self.api.local_addr().ok()
    }

    /// The one line a person (or a test) needs: where to send requests.
    /// Printed once the server will stay up: its store open, or (`connected`
    /// false) a Redis that does not answer yet, which the line names, and
    /// which /readyz reports until it answers.
    pub(super) fn announce(&self, rooms: &[String], store: &str, connected: bool) {
        let shown = |l: &TcpListener| {
            l.local_addr()
                .map_or_else(|e| format!("({e})"), |a| a.to_string())
        };
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let api = format!("{scheme}://{}", shown(&self.api));
        let proxy = self.proxy.as_ref().map(|p| format!("{scheme}://{}", shown(p)));
        let rooms_at = match &proxy {
            Some(p) => format!("; waiting rooms on {p} ({})", rooms.join(", ")),
            None => String::new(),
        };
        let waiting = if connected {
            ""
        } else {
            ", not connected yet: retrying; /readyz answers 503 until it is"
        };
        let mut fields = serde_json::Map::new();
        fields.insert("api".to_owned(), api.clone().into());
        fields.insert("store".to_owned(), store.into());
        fields.insert("store_connected".to_owned(), connected.into());
        if let Some(p) = proxy {
            fields.insert("rooms".to_owned(), p.into());
            fields.insert("room_names".to_owned(), rooms.into());
        }
        super::say::listening(
            &format!("listening on {api} (store: {store}{waiting}){rooms_at}"),
            fields,
        );
    }

    /// Serves both listeners until SIGTERM or SIGINT, then shuts down:
    /// `stop` tells long-polls, event streams ([`ends_at_stop`]) and proxy
    /// connections, and connections get up to 30 s to finish.
    ///
    /// Connections are served with hyper's HTTP/1 builder directly rather
    /// than axum's auto-detecting `serve`: it keeps an idle connection (and
    /// so an open long-poll) markedly smaller.
    pub(super) async fn serve(self, app: App, stop: watch::Sender<bool>) {
        let Listeners {
            api,
            proxy,
            tls,
            hangups,
        } = self;
        if let Some(hangups) = hangups {
            on_sighup(hangups, tls.clone());
        }
        // One pool each: connections to one listener never stop the
        // other's handshakes (a flood of the rooms' port leaves the API,
        // and its health check, reachable).
        let (api_handshakes, proxy_handshakes) = (Handshakes::new(), Handshakes::new());
        let graceful = GracefulShutdown::new();
        let (proxy_open, mut proxy_closed) = tokio::sync::mpsc::channel::<()>(1);
        // The rooms' connections live on the proxy threads (see
        // proxy_workers.rs); without them (a thread that cannot start),
        // here.
        let workers = match proxy.as_ref().map(|_| ProxyWorkers::start()) {
            Some(Ok(w)) => Some(w),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "cannot start the proxy threads; the rooms are served on the main runtime");
                None
            }
            None => None,
        };
        let signalled = shutdown();
        tokio::pin!(signalled);
        loop {
            tokio::select! {
                accepted = accept(proxy.as_ref()), if proxy.is_some() => {
                    let Some((stream, peer)) = or_back_off(accepted, "accept failed (waiting rooms)").await else {
                        continue;
                    };
                    let (app, stopping, open) = (app.clone(), stop.subscribe(), proxy_open.clone());
                    let (tls, handshakes) = (tls.clone(), proxy_handshakes.clone());
                    let serve = move |stream: TcpStream| {
                        let tls_stop = stopping.clone();
                        with_tls((stream, peer), tls.as_ref(), (&handshakes, tls_stop), move |io, secure| {
                            serve_proxy(io, peer, secure, app, stopping, open)
                        });
                    };
                    let Some(workers) = &workers else {
                        serve(stream);
                        continue;
                    };
                    // Registered anew with the proxy thread's runtime,
                    // which then drives it alone.
                    match stream.into_std() {
                        Ok(std) => {
                            workers.next().spawn(async move {
                                match TcpStream::from_std(std) {
                                    Ok(stream) => serve(stream),
                                    Err(e) => tracing::warn!(error = %e, "cannot hand a connection to a proxy thread"),
                                }
                            });
                        }
                        Err(e) => tracing::warn!(error = %e, "cannot take a connection off the accept loop"),
                    }
                }
                accepted = api.accept() => {
                    let Some((stream, peer)) = or_back_off(accepted, "accept failed").await else {
                        continue;
                    };
                    let (app, watcher, stopping) = (app.clone(), graceful.watcher(), stop.subscribe());
                    with_tls((stream, peer), tls.as_ref(), (&api_handshakes, stop.subscribe()), move |io, secure| {
                        serve_api(io, peer, secure, app, watcher, stopping)
                    });
                }
                () = &mut signalled => break,
            }
        }
        super::say::notice("shutting down; answering pending long-polls");
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
            super::say::notice("some connections did not finish within 30 s; closing them");
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

/// Watches SIGHUP for as long as the server runs: it reloads the TLS pair
/// (without TLS there is nothing to reload, and it is only logged).
fn on_sighup(mut hangups: tokio::signal::unix::Signal, tls: Option<Arc<Tls>>) {
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            match &tls {
                Some(tls) => tls.reload(),
                None => tracing::info!("SIGHUP: no TLS certificate to reload"),
            }
        }
    });
}

/// Serves `stream` through `serve`, after a TLS handshake if `tls` (a
/// handshake that fails, takes over HANDSHAKE_TIMEOUT, finds no place in
/// the listener's `handshakes` for `peer` or is still going at shutdown
/// drops the connection); `serve` hears whether it is TLS.
fn with_tls<F>(
    (stream, peer): (TcpStream, SocketAddr),
    tls: Option<&Arc<Tls>>,
    (handshakes, mut stopping): (&Arc<Handshakes>, watch::Receiver<bool>),
    serve: F,
) where
    F: FnOnce(Conn, bool) + Send + 'static,
{
    let _ = stream.set_nodelay(true);
    let Some(tls) = tls else {
        serve(Conn::Plain(stream), false);
        return;
    };
    let Some(permit) = handshakes.take(peer.ip()) else {
        tracing::debug!(peer = %peer.ip(), "too many TLS handshakes in progress (on this listener, or from this address); connection closed");
        return;
    };
    let acceptor = tls.acceptor.clone();
    tokio::spawn(async move {
        let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
        let shaken = tokio::select! {
            shaken = handshake => shaken,
            _ = stopping.wait_for(|s| *s) => return,
        };
        drop(permit);
        match shaken {
            Ok(Ok(tls_stream)) => serve(Conn::Tls(Box::new(tls_stream)), true),
            Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
            Err(_) => tracing::debug!("TLS handshake timed out"),
        }
    });
}

/// A connection's byte stream: plain TCP, or TLS over it (boxed: a TLS
/// session's state is large, and a plain connection, a parked long-poll
/// say, should not carry its room).
pub(super) enum Conn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl AsyncRead for Conn {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => std::pin::Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => std::pin::Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Serves one API connection, under the graceful shutdown's watch.
fn serve_api(
    stream: Conn,
    peer: SocketAddr,
    secure: bool,
    app: App,
    watcher: Watcher,
    stopping: watch::Receiver<bool>,
) {
    // The request head's limits (hyper answers past them itself;
    // JsonParseErrors gives those answers the JSON error body).
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .max_header_size(MAX_HEAD)
        .max_headers(MAX_HEADERS)
        .serve_connection(
            TokioIo::new(JsonParseErrors::new(stream)),
            TowerToHyperService::new(with_peer(app, peer, secure, stopping)),
        );
    let conn = watcher.watch(conn);
    tokio::spawn(async move {
        let _ = conn.await;
    });
}

/// Serves one waiting-room connection (upgrades included).
fn serve_proxy(
    stream: Conn,
    peer: SocketAddr,
    secure: bool,
    app: App,
    mut stopping: watch::Receiver<bool>,
    open: tokio::sync::mpsc::Sender<()>,
) {
    let until = stopping.clone();
    let service = hyper::service::service_fn(move |mut req: Incoming| {
        if secure {
            req.extensions_mut().insert(crate::room::ViaTls);
        }
        let (rooms, until) = (app.rooms().cloned(), until.clone());
        async move {
            let response = match rooms {
                Some(rooms) => rooms.handle(req, peer).await,
                // Closed, whatever on_store_error says, until the store
                // first answers: no room has its settings applied yet.
                None => crate::room::closed_at_start(req.headers()),
            };
            Ok::<_, std::convert::Infallible>(ends_at_stop(response, until))
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
/// (the rate-limit layer's client-IP key) who is connected; an event
/// stream it answers with ends when the server stops ([`ends_at_stop`]).
fn with_peer(
    app: App,
    peer: SocketAddr,
    secure: bool,
    stopping: watch::Receiver<bool>,
) -> impl tower::Service<
    Incoming,
    Response = Response,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<Response, std::convert::Infallible>> + Send,
> + Clone {
    tower::service_fn(move |mut req: Incoming| {
        req.extensions_mut().insert(PeerAddr(peer));
        if secure {
            mark_https(req.headers_mut());
        }
        let until = stopping.clone();
        let answer = tower::ServiceExt::oneshot(app.api(), req);
        async move { answer.await.map(|r| ends_at_stop(r, until)) }
    })
}

type Response = hyper::Response<axum::body::Body>;

/// The one stop signal every long-lived response honours: an event
/// stream (SSE), whoever makes it (the API's queue, ticket and room
/// streams, the console's live one, a waiting visitor's, an upstream's
/// through a room), ends between two of its frames once the server
/// stops, so a graceful shutdown never waits on a stream that has no
/// end of its own (a reader reconnects, to another server). Other
/// answers are left whole: one of known length must not be cut short,
/// and they end by themselves (long-polls answer at once on `stopping`).
fn ends_at_stop(response: Response, mut stopping: watch::Receiver<bool>) -> Response {
    let streaming = response
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|t| t.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"));
    if !streaming {
        return response;
    }
    response.map(|body| {
        let stopped = async move {
            let _ = stopping.wait_for(|s| *s).await;
        };
        let frames = futures_util::StreamExt::take_until(body.into_data_stream(), stopped);
        axum::body::Body::from_stream(frames)
    })
}

/// An API request that came over this server's own TLS says so the way a
/// TLS proxy in front would (`X-Forwarded-Proto: https`, replacing
/// whatever the client sent): the same-origin check and the console's
/// Secure cookie read it. (The rooms, which keep only a trusted proxy's
/// X-Forwarded-*, take [`crate::room::ViaTls`] instead.)
fn mark_https(headers: &mut hyper::HeaderMap) {
    headers.insert(
        "x-forwarded-proto",
        hyper::header::HeaderValue::from_static("https"),
    );
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
