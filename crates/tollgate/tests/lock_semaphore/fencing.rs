//! Fencing that reaches the resource: a holder frozen past its lease
//! comes back and writes with its old fence; the Redis guarded write, the
//! tower layer and the axum extractor refuse it, and keep what the newer
//! holder wrote.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tollgate::{FenceGuard, FenceKey, FenceLayer, FencedSet, GateOptions, Lease, Lock, Store, fenced_set};
use tower::{Layer, Service, ServiceExt};

use crate::support::RedisServer;

/// Holder A takes the lock and freezes (no renewal) past its lease;
/// holder B takes it after. Returns both leases, A's ended.
async fn frozen_then_newer(store: &Store, name: &str) -> (Lease, Lease) {
    let frozen = GateOptions {
        ttl: Duration::from_millis(200),
        auto_renew: false,
        ..GateOptions::default()
    };
    let a = Lock::with_options(store, name, frozen)
        .expect("lock")
        .try_acquire()
        .await
        .expect("store")
        .expect("free");
    let b = Lock::new(store, name)
        .expect("lock")
        .acquire(Duration::from_secs(10))
        .await
        .expect("store")
        .expect("granted when A's lease ended");
    assert!(a.is_lost(), "A's lease ended");
    assert!(b.fence() > a.fence());
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_guarded_write_refuses_a_frozen_holder() {
    let server = RedisServer::start();
    let store = Store::redis(&server.url()).await.expect("store");
    let (a, b) = frozen_then_newer(&store, "stock-42").await;
    let client = redis::Client::open(server.url()).expect("client");
    let mut conn = client.get_multiplexed_async_connection().await.expect("conn");
    let (key, mark) = ("{stock:42}", "{stock:42}:fence");

    let wrote = fenced_set(&mut conn, key, mark, b.fence(), b"7 left", None)
        .await
        .expect("B writes");
    assert_eq!(wrote, FencedSet::Written);
    // A wakes and writes what it computed before it froze.
    let late = fenced_set(&mut conn, key, mark, a.fence(), b"8 left", None)
        .await
        .expect("A's answer");
    assert_eq!(late, FencedSet::Stale { highest: b.fence() });
    let value: String = redis::cmd("GET")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(value, "7 left", "the newer holder's write is kept");
    // B again (the same fence) and a TTL: written.
    let again = fenced_set(
        &mut conn,
        key,
        mark,
        b.fence(),
        b"6 left",
        Some(Duration::from_secs(60)),
    )
    .await
    .expect("B again");
    assert_eq!(again, FencedSet::Written);
    let pttl: i64 = redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("PTTL");
    assert!(pttl > 0 && pttl <= 60_000, "{pttl}");
    // Fences are compared exactly past Lua's 2^53.
    let big = (1u64 << 60) + 1;
    let (k2, m2) = ("{big}", "{big}:fence");
    fenced_set(&mut conn, k2, m2, big, b"x", None).await.expect("big");
    assert_eq!(
        fenced_set(&mut conn, k2, m2, big - 1, b"y", None)
            .await
            .expect("big - 1"),
        FencedSet::Stale { highest: big }
    );
    // Bad arguments are errors, not writes.
    assert!(fenced_set(&mut conn, key, mark, 0, b"z", None).await.is_err());
    let bad: redis::RedisResult<redis::Value> = redis::Script::new(tollgate::FENCED_SET_LUA)
        .key(key)
        .key(mark)
        .arg("01")
        .arg("z")
        .invoke_async(&mut conn)
        .await;
    assert!(bad.is_err(), "{bad:?}");
    // Nothing is written before every argument is checked: a fence past
    // 2^64 - 1, a TTL too long, or one key for both, leave the mark.
    for (k, m, fence, ttl) in [
        (key, mark, "99999999999999999999", ""),
        (key, mark, "999999999999999999999", ""),
        (key, mark, "9999999999999999", "9999999999999999"),
        (key, key, "9999999999999999", ""),
    ] {
        let bad: redis::RedisResult<redis::Value> = redis::Script::new(tollgate::FENCED_SET_LUA)
            .key(k)
            .key(m)
            .arg(fence)
            .arg("z")
            .arg(ttl)
            .invoke_async(&mut conn)
            .await;
        assert!(bad.is_err(), "{fence} {ttl}: {bad:?}");
    }
    let still: String = redis::cmd("GET")
        .arg(mark)
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(still, b.fence().to_string(), "a refused call moved the mark");
    assert!(
        fenced_set(&mut conn, key, key, b.fence(), b"z", None)
            .await
            .is_err()
    );
    b.release().await.expect("release");
}

type Writes = Arc<Mutex<Vec<(String, u64)>>>;

fn service(
    guard: FenceGuard,
    writes: Writes,
) -> impl Service<Request<()>, Response = Response<String>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    FenceLayer::new(guard, FenceKey::Path).layer(tower::service_fn(move |req: Request<()>| {
        let writes = writes.clone();
        async move {
            let fence = req.headers()["tollgate-fence"]
                .to_str()
                .expect("ascii")
                .parse()
                .expect("u64");
            // The write takes a while: an older request admitted before a
            // newer one must not finish after it.
            tokio::task::yield_now().await;
            writes
                .lock()
                .expect("writes")
                .push((req.uri().path().to_owned(), fence));
            Ok::<_, Infallible>(Response::new("written".to_owned()))
        }
    }))
}

fn put(path: &str, fence: Option<&str>) -> Request<()> {
    let mut b = Request::builder().method("PUT").uri(path);
    if let Some(f) = fence {
        b = b.header("tollgate-fence", f);
    }
    b.body(()).expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tower_layer_refuses_a_frozen_holder_with_409() {
    let store = Store::memory();
    let (a, b) = frozen_then_newer(&store, "orders").await;
    let writes: Writes = Arc::default();
    let svc = service(FenceGuard::new(), writes.clone());
    let call = |req| svc.clone().oneshot(req);

    let ok = call(put("/orders/1", Some(&b.fence().to_string())))
        .await
        .expect("infallible");
    assert_eq!(ok.status(), StatusCode::OK);
    let stale = call(put("/orders/1", Some(&a.fence().to_string())))
        .await
        .expect("infallible");
    assert_eq!(stale.status(), StatusCode::CONFLICT);
    assert_eq!(stale.headers()["content-type"], "application/json");
    assert_eq!(
        stale.headers()["tollgate-fence-highest"],
        b.fence().to_string().as_str()
    );
    let body: serde_json::Value = serde_json::from_str(stale.body()).expect("json");
    assert_eq!(body["error"]["code"], "stale_fence");
    // Another resource has its own mark; A's old fence is fine there.
    let other = call(put("/orders/2", Some(&a.fence().to_string())))
        .await
        .expect("infallible");
    assert_eq!(other.status(), StatusCode::OK);
    for (fence, status, code) in [
        (None, StatusCode::PRECONDITION_REQUIRED, "fence_required"),
        (Some("soon"), StatusCode::BAD_REQUEST, "bad_fence"),
        (Some("0"), StatusCode::BAD_REQUEST, "bad_fence"),
    ] {
        let r = call(put("/orders/1", fence)).await.expect("infallible");
        assert_eq!(r.status(), status, "{fence:?}");
        let body: serde_json::Value = serde_json::from_str(r.body()).expect("json");
        assert_eq!(body["error"]["code"], code);
    }
    assert_eq!(
        *writes.lock().expect("writes"),
        [
            ("/orders/1".to_owned(), b.fence()),
            ("/orders/2".to_owned(), a.fence())
        ],
        "only the admitted requests reached the service"
    );
    b.release().await.expect("release");
}

/// Many requests with random fences at one resource: the service sees
/// them one at a time, each fence at least every fence before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admitted_requests_reach_the_service_in_fence_order() {
    let writes: Writes = Arc::default();
    let svc = service(FenceGuard::new(), writes.clone());
    let tasks: Vec<_> = (0..200u64)
        .map(|i| {
            let svc = svc.clone();
            tokio::spawn(async move {
                let fence = (i * 7919) % 97 + 1;
                svc.oneshot(put("/stock", Some(&fence.to_string())))
                    .await
                    .expect("infallible")
                    .status()
            })
        })
        .collect();
    let mut refused = 0;
    for t in tasks {
        match t.await.expect("task") {
            StatusCode::OK => {}
            StatusCode::CONFLICT => refused += 1,
            other => panic!("{other}"),
        }
    }
    let seen: Vec<u64> = writes.lock().expect("writes").iter().map(|(_, f)| *f).collect();
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "a lower fence ran after a higher one: {seen:?}"
    );
    assert_eq!(seen.len() + refused, 200);
    assert!(refused > 0, "no stale request among 200 random fences");
}

#[cfg(feature = "axum")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_axum_extractor_reads_the_fence_and_the_guard_refuses_a_stale_one() {
    use axum::extract::State;
    use tollgate::{FenceHeader, FenceRejection};

    async fn write(
        State(guard): State<FenceGuard>,
        FenceHeader(fence): FenceHeader,
    ) -> Result<String, FenceRejection> {
        let _turn = guard.admit("prices", fence).await?;
        Ok(format!("written with {fence}"))
    }
    let app = axum::Router::new()
        .route("/prices", axum::routing::put(write))
        .with_state(FenceGuard::new());
    let send = |fence: Option<&str>| {
        let mut b = Request::builder().method("PUT").uri("/prices");
        if let Some(f) = fence {
            b = b.header("tollgate-fence", f);
        }
        app.clone()
            .oneshot(b.body(axum::body::Body::empty()).expect("request"))
    };
    assert_eq!(send(Some("20")).await.expect("answer").status(), StatusCode::OK);
    let stale = send(Some("19")).await.expect("answer");
    assert_eq!(stale.status(), StatusCode::CONFLICT);
    assert_eq!(stale.headers()["tollgate-fence-highest"], "20");
    assert_eq!(
        send(None).await.expect("answer").status(),
        StatusCode::PRECONDITION_REQUIRED
    );
    assert_eq!(
        send(Some("x")).await.expect("answer").status(),
        StatusCode::BAD_REQUEST
    );
}
