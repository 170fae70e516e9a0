//! Opt-in CORS (`--cors-origin`, `cors_origins`): a listed origin's
//! preflight is answered before authentication, its answers (errors
//! included) carry `Access-Control-Allow-Origin` and may make changes;
//! any other origin gets no CORS header and its changes stay refused;
//! without the setting nothing changes. Over HTTP, then in a real
//! headless Chromium calling one server from a page on another.

mod browser_support;
mod serve_support;

use reqwest::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE, VARY,
};
use serde_json::{Value, json};
use serve_support::{Server, send};

const ADMIN: &str = "admin-token-0123456789abcdef";
const APP: &str = "http://app.example:5173";

fn header(r: &reqwest::Response, name: reqwest::header::HeaderName) -> Option<String> {
    r.headers()
        .get(name)
        .map(|v| v.to_str().expect("ascii").to_owned())
}

fn preflight(c: &reqwest::Client, s: &Server, origin: &str) -> reqwest::RequestBuilder {
    c.request(reqwest::Method::OPTIONS, s.url("/v1/queues/q1/jobs"))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "authorization,content-type")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_origin_may_call_the_api_and_no_other() {
    let s = Server::start_with(None, &["--token", ADMIN, "--cors-origin", APP]);
    let c = reqwest::Client::new();

    // The preflight: answered without a token, for the listed origin only.
    let r = preflight(&c, &s, APP).send().await.expect("preflight");
    assert_eq!(r.status(), 204);
    assert_eq!(header(&r, ACCESS_CONTROL_ALLOW_ORIGIN).as_deref(), Some(APP));
    let allowed = header(&r, ACCESS_CONTROL_ALLOW_HEADERS).unwrap_or_default();
    assert!(
        allowed.contains("authorization") && allowed.contains("content-type"),
        "{allowed}"
    );
    assert!(
        header(&r, ACCESS_CONTROL_ALLOW_METHODS)
            .unwrap_or_default()
            .contains("POST")
    );
    assert_eq!(header(&r, ACCESS_CONTROL_MAX_AGE).as_deref(), Some("600"));
    assert_eq!(header(&r, VARY).as_deref(), Some("origin"));
    // Never credentials: cookies stay with the console.
    assert_eq!(header(&r, ACCESS_CONTROL_ALLOW_CREDENTIALS), None);
    // Browsers send the origin in lower case without a default port; a
    // listed origin matches however the list spelled it.
    let r = preflight(&c, &s, "http://evil.example")
        .send()
        .await
        .expect("preflight");
    assert_eq!(header(&r, ACCESS_CONTROL_ALLOW_ORIGIN), None);
    assert_ne!(r.status(), 204);
    let r = preflight(&c, &s, "http://app.example:5174")
        .send()
        .await
        .expect("preflight");
    assert_eq!(header(&r, ACCESS_CONTROL_ALLOW_ORIGIN), None);

    // A change from the listed origin, as a browser sends it.
    let push = |origin: &str| {
        c.post(s.url("/v1/queues/q1/jobs"))
            .header("origin", origin)
            .header("sec-fetch-site", "cross-site")
            .bearer_auth(ADMIN)
            .json(&json!({"payload": 1}))
    };
    let r = push(APP).send().await.expect("push");
    assert_eq!(r.status(), 201);
    assert_eq!(header(&r, ACCESS_CONTROL_ALLOW_ORIGIN).as_deref(), Some(APP));
    let exposed = header(&r, ACCESS_CONTROL_EXPOSE_HEADERS).unwrap_or_default();
    for h in ["retry-after", "ratelimit-remaining", "www-authenticate"] {
        assert!(exposed.contains(h), "{h} in {exposed}");
    }
    assert!(header(&r, VARY).unwrap_or_default().contains("origin"));
    // From any other origin: still refused, and unreadable to its page.
    let r = push("http://evil.example").send().await.expect("push");
    assert_eq!(r.status(), 403);
    assert_eq!(header(&r, ACCESS_CONTROL_ALLOW_ORIGIN), None);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error"]["code"], "cross_origin");
    assert_eq!(
        send(c.get(s.url("/v1/queues/q1")).bearer_auth(ADMIN)).await.1["ready"],
        1
    );

    // Errors reach the listed origin's page too (so it can tell a missing
    // token from a network failure).
    let r = c
        .get(s.url("/v1/queues/q1"))
        .header("origin", APP)
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 401);
    assert_eq!(header(&r, ACCESS_CONTROL_ALLOW_ORIGIN).as_deref(), Some(APP));
    // Not asked from a browser: no CORS headers.
    let r = c
        .get(s.url("/v1/queues/q1"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("get");
    assert_eq!(header(&r, ACCESS_CONTROL_ALLOW_ORIGIN), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_setting_no_origin_is_allowed() {
    let s = Server::start(None);
    let c = reqwest::Client::new();
    let r = preflight(&c, &s, APP).send().await.expect("preflight");
    assert_eq!(header(&r, ACCESS_CONTROL_ALLOW_ORIGIN), None);
    let r = c
        .post(s.url("/v1/queues/q1/jobs"))
        .header("origin", APP)
        .json(&json!({"payload": 1}))
        .send()
        .await
        .expect("push");
    assert_eq!(r.status(), 403);
    assert_eq!(header(&r, ACCESS_CONTROL_ALLOW_ORIGIN), None);
}

#[test]
fn a_bad_origin_is_refused_at_start() {
    for (args, says) in [
        (vec!["--cors-origin", "*"], "\"*\" is not an origin"),
        (
            vec!["--cors-origin", "https://app.example.com/"],
            "is not an origin",
        ),
    ] {
        let out = Server::command(None, &args).output().expect("run serve");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // The environment variable takes a list.
    let mut cmd = Server::command(None, &[]);
    cmd.env("TOLLGATE_CORS_ORIGINS", "https://a.example,ftp://b.example");
    let out = cmd.output().expect("run serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("\"ftp://b.example\" is not an origin"),
        "{stderr}"
    );
}

/// What `fetch` in the page answers for `url` with `init`: the status and
/// body, or the error it threw.
async fn page_fetch(
    driver: &browser_support::Driver,
    c: &reqwest::Client,
    session: &str,
    url: &str,
    init: Value,
) -> Value {
    let js = format!(
        "const done = arguments[arguments.length - 1];
         fetch({url}, {init})
           .then(async r => done({{status: r.status, body: await r.json()}}))
           .catch(e => done({{error: e.name}}));",
        url = json!(url),
        init = init,
    );
    driver.execute_async(c, session, &js).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_on_a_listed_origin_calls_the_api_in_chromium() {
    // The pages' origins: two servers whose own pages load in the browser.
    let listed_page = Server::start(None);
    let other_page = Server::start(None);
    let api = Server::start_with(None, &["--token", ADMIN, "--cors-origin", &listed_page.base]);
    let driver = browser_support::Driver::start();
    let c = reqwest::Client::new();
    let session = driver.session(&c).await;
    let push = json!({
        "method": "POST",
        "headers": {"authorization": format!("Bearer {ADMIN}"), "content-type": "application/json"},
        "body": "{\"payload\": {\"from\": \"the page\"}}",
    });
    let url = api.url("/v1/queues/browser/jobs");

    driver.go(&c, &session, &listed_page.url("/healthz")).await;
    let answer = page_fetch(&driver, &c, &session, &url, push.clone()).await;
    assert_eq!(answer["status"], 201, "{answer}");
    assert!(answer["body"]["id"].is_string(), "{answer}");
    // An error is readable too.
    let answer = page_fetch(&driver, &c, &session, &api.url("/v1/queues/browser"), json!({})).await;
    assert_eq!(answer["status"], 401, "{answer}");
    assert_eq!(answer["body"]["error"]["code"], "unauthorized", "{answer}");

    // A page on an origin not listed: the browser refuses to send the
    // change (the preflight fails), so nothing is pushed.
    driver.go(&c, &session, &other_page.url("/healthz")).await;
    let answer = page_fetch(&driver, &c, &session, &url, push).await;
    assert_eq!(answer["error"], "TypeError", "{answer}");
    let (_, queue) = send(c.get(api.url("/v1/queues/browser")).bearer_auth(ADMIN)).await;
    assert_eq!(queue["ready"], 1, "{queue}");
    let _ = driver
        .call(&c, reqwest::Method::DELETE, &format!("/session/{session}"), None)
        .await;
}
