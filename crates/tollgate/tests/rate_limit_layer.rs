//! The tower layer around a plain service: keys, trusted proxies, the 429
//! answer and its headers, and what a dead store turns into.

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use support::RedisServer;
use tollgate::{KeyBy, Limit, OnStoreError, PeerAddr, Rate, RateLimitLayer, RateLimiter, Store};
use tower::{Layer, Service, ServiceExt};

fn limiter(store: &Store) -> RateLimiter {
    let limit = Limit::gcra(Rate::per_minute(60).expect("rate"), 2).expect("limit");
    RateLimiter::new(store, "web", limit).expect("limiter")
}

fn app(
    layer: RateLimitLayer,
) -> impl Service<Request<()>, Response = Response<String>, Error = Infallible> + Clone {
    layer.layer(tower::service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new("hello".to_owned()))
    }))
}

fn request(peer: &str, xff: Option<&str>, api_key: Option<&str>) -> Request<()> {
    let mut b = Request::builder().uri("/things/1");
    if let Some(x) = xff {
        b = b.header("x-forwarded-for", x);
    }
    if let Some(k) = api_key {
        b = b.header("x-api-key", k);
    }
    let mut req = b.body(()).expect("request");
    let addr: SocketAddr = peer.parse().expect("peer");
    req.extensions_mut().insert(PeerAddr(addr));
    req
}

async fn status(
    svc: &(impl Service<Request<()>, Response = Response<String>, Error = Infallible> + Clone),
    req: Request<()>,
) -> Response<String> {
    svc.clone().oneshot(req).await.expect("infallible")
}

#[tokio::test]
async fn limits_by_client_ip_and_answers_429_with_headers() {
    let trusted = vec!["10.0.0.0/8".parse().expect("net")];
    let svc = app(RateLimitLayer::new(
        limiter(&Store::memory()),
        KeyBy::ClientIp {
            trusted_proxies: trusted,
        },
    ));
    let ok = status(&svc, request("203.0.113.1:5000", None, None)).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(ok.body(), "hello");
    assert_eq!(ok.headers()["ratelimit-limit"], "2");
    assert_eq!(ok.headers()["ratelimit-remaining"], "1");
    assert_eq!(
        status(&svc, request("203.0.113.1:5001", None, None))
            .await
            .status(),
        StatusCode::OK
    );
    // A spoofed X-Forwarded-For from an untrusted peer changes nothing.
    let refused = status(&svc, request("203.0.113.1:5002", Some("198.51.100.1"), None)).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_eq!(refused.headers()["ratelimit-remaining"], "0");
    assert!(refused.headers().contains_key("ratelimit-reset"));
    let body: serde_json::Value = serde_json::from_str(refused.body()).expect("json body");
    assert_eq!(body["error"]["code"], "rate_limited");
    // Another client has its own budget.
    assert_eq!(
        status(&svc, request("203.0.113.2:5000", None, None))
            .await
            .status(),
        StatusCode::OK
    );
    // Behind a trusted proxy, the forwarded client is the key.
    for _ in 0..2 {
        let r = status(
            &svc,
            request("10.0.0.9:4000", Some("6.6.6.6, 198.51.100.3"), None),
        )
        .await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    let r = status(&svc, request("10.0.0.9:4000", Some("198.51.100.3"), None)).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let r = status(&svc, request("10.0.0.9:4000", Some("198.51.100.4"), None)).await;
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn limits_by_header_and_lets_keyless_requests_through() {
    let header = http::HeaderName::from_static("x-api-key");
    let svc = app(RateLimitLayer::new(
        limiter(&Store::memory()),
        KeyBy::Header(header),
    ));
    for _ in 0..2 {
        assert_eq!(
            status(&svc, request("192.0.2.1:1", None, Some("key-a")))
                .await
                .status(),
            StatusCode::OK
        );
    }
    assert_eq!(
        status(&svc, request("192.0.2.2:1", None, Some("key-a")))
            .await
            .status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        status(&svc, request("192.0.2.1:1", None, Some("key-b")))
            .await
            .status(),
        StatusCode::OK
    );
    for _ in 0..5 {
        let r = status(&svc, request("192.0.2.1:1", None, None)).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert!(!r.headers().contains_key("ratelimit-limit"));
    }
    // Header keys are hashed: any value works (say "Bearer x") and the
    // secret never becomes part of a Redis key.
    let r = status(&svc, request("192.0.2.1:1", None, Some("Bearer has space"))).await;
    assert_eq!(r.status(), StatusCode::OK);
    // A cost the limit can never allow is refused when the layer is made.
    let l = limiter(&Store::memory());
    assert!(RateLimitLayer::new(l.clone(), KeyBy::Path).cost(0).is_err());
    assert!(RateLimitLayer::new(l.clone(), KeyBy::Path).cost(3).is_err());
    assert!(RateLimitLayer::new(l, KeyBy::Path).cost(2).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_store_follows_the_policy() {
    let mut server = RedisServer::start();
    let store = Store::redis(&server.url()).await.expect("connect");
    server.kill();
    for (policy, want) in [
        (OnStoreError::Open, StatusCode::OK),
        (OnStoreError::Closed, StatusCode::TOO_MANY_REQUESTS),
        (OnStoreError::Error, StatusCode::SERVICE_UNAVAILABLE),
    ] {
        let l = limiter(&store)
            .on_store_error(policy)
            .timeout(Duration::from_millis(50));
        let svc = app(RateLimitLayer::new(l, KeyBy::Path));
        let started = std::time::Instant::now();
        let r = status(&svc, request("192.0.2.1:1", None, None)).await;
        assert_eq!(r.status(), want, "{policy:?}");
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{policy:?} took {:?}",
            started.elapsed()
        );
        if want == StatusCode::SERVICE_UNAVAILABLE {
            assert_eq!(r.headers()["retry-after"], "1");
        }
    }
}
