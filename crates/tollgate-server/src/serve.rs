//! `tollgate serve`: the HTTP/JSON service, on the embedded store unless
//! `--redis` names one.

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tollgate::{RedisConfig, Store};

use crate::cli::ServeArgs;
use crate::exit;
use crate::http::{AppState, router};

pub(crate) async fn run(args: ServeArgs) -> i32 {
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
    let store = match &args.redis {
        None => Store::memory(),
        Some(url) => {
            let mut config = RedisConfig::new(url.clone());
            config.prefix = args.prefix.clone();
            match Store::connect(config).await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("tollgate: {e}");
                    return exit::for_error(&e);
                }
            }
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
    // The one line a person (or a test) needs: where to send requests.
    println!(
        "tollgate serve: listening on http://{addr} (store: {})",
        store.kind()
    );
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let app = router(AppState {
        store,
        tokens: std::sync::Arc::new(args.tokens),
        stopping,
    });
    let signalled = async move {
        shutdown().await;
        eprintln!("tollgate serve: shutting down; answering pending long-polls");
        let _ = stop.send(true);
    };
    match axum::serve(listener, app).with_graceful_shutdown(signalled).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tollgate: server failed: {e}");
            exit::SOFTWARE
        }
    }
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
