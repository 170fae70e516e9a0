//! `GET /v1/queues/{queue}/events` (Server-Sent Events) over real HTTP:
//! events caused by another server and by a `tollgate jobs work` process
//! on one Redis, a lease that ran out, two subscribers, a resume with
//! Last-Event-ID, the subscriber limit, bad input, and a client that never
//! reads being dropped while another one gets everything.

mod room_support;
mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use serve_support::{Server, send};
use support::RedisServer;

/// One parsed SSE event.
#[derive(Debug, Clone)]
struct Sse {
    event: String,
    id: Option<String>,
    data: Value,
}

/// An open event stream, parsed as it arrives.
struct Stream {
    resp: reqwest::Response,
    buf: String,
}

impl Stream {
    async fn open(c: &reqwest::Client, url: &str, last: Option<&str>) -> Stream {
        Stream::open_with(c.get(url), url, last).await
    }

    async fn open_with(mut req: reqwest::RequestBuilder, url: &str, last: Option<&str>) -> Stream {
        if let Some(last) = last {
            req = req.header("Last-Event-ID", last);
        }
        let resp = req.send().await.expect("open the stream");
        assert_eq!(resp.status().as_u16(), 200, "{url}");
        assert_eq!(
            resp.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Stream {
            resp,
            buf: String::new(),
        }
    }

    /// The next event (comments skipped), or `None` at the end; panics
    /// after 30 s.
    async fn next(&mut self) -> Option<Sse> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let (mut event, mut id, mut data) = (String::from("message"), None, String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    continue; // a heartbeat comment
                }
                let data = serde_json::from_str(&data).expect("JSON data");
                return Some(Sse { event, id, data });
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.resp.chunk())
                .await
                .expect("an event within 30 s")
                .expect("read");
            match chunk {
                Some(bytes) => self.buf.push_str(std::str::from_utf8(&bytes).expect("utf-8")),
                None => return None,
            }
        }
    }

    async fn take(&mut self, n: usize) -> Vec<Sse> {
        let mut got = Vec::with_capacity(n);
        while got.len() < n {
            got.push(self.next().await.unwrap_or_else(|| panic!("ended after {got:?}")));
        }
        got
    }
}

fn kinds(events: &[Sse]) -> Vec<(String, Option<String>)> {
    events
        .iter()
        .map(|e| (e.event.clone(), e.data["job"].as_str().map(str::to_owned)))
        .collect()
}

fn pair(kind: &str, job: &str) -> (String, Option<String>) {
    (kind.to_owned(), Some(job.to_owned()))
}

async fn push(c: &reqwest::Client, s: &Server, queue: &str, id: &str, extra: Value) {
    let mut body = json!({"payload": "x", "id": id});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let (st, p) = send(c.post(s.url(&format!("/v1/queues/{queue}/jobs"))).json(&body)).await;
    assert_eq!(st, 201, "{p}");
}

async fn claim(c: &reqwest::Client, s: &Server, queue: &str, query: &str) -> Value {
    let (st, p) = send(c.post(s.url(&format!("/v1/queues/{queue}/claim{query}")))).await;
    assert_eq!(st, 200, "{p}");
    p["job"].clone()
}

/// Two servers and a worker process on one Redis: a subscriber on A sees
/// pushes, claims, acks, nacks, a death and a replay made through B, a
/// lease that ran out (found inside a later step), and the acks of a
/// `tollgate jobs work` process talking to Redis directly, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_from_another_server_and_a_worker() {
    let redis = RedisServer::start();
    let a = Server::start(Some(&redis.url()));
    let b = Server::start(Some(&redis.url()));
    let c = reqwest::Client::new();
    let mut feed = Stream::open(&c, &a.url("/v1/queues/ev/events"), None).await;
    let hello = feed.next().await.unwrap();
    assert_eq!(hello.event, "hello");
    assert_eq!(
        (&hello.data["queue"], &hello.data["ready"], &hello.data["gap"]),
        (&json!("ev"), &json!(0), &json!(false))
    );

    push(&c, &b, "ev", "a", json!({"max_attempts": 2})).await;
    let job = claim(&c, &b, "ev", "").await;
    let fence = job["fence"].clone();
    let (st, _) = send(
        c.post(b.url("/v1/queues/ev/jobs/a/ack"))
            .json(&json!({"fence": fence})),
    )
    .await;
    assert_eq!(st, 200);
    push(&c, &b, "ev", "b", json!({"max_attempts": 1})).await;
    let job = claim(&c, &b, "ev", "").await;
    let nack = json!({"fence": job["fence"], "delay_ms": 0, "error": "boom"});
    let (st, p) = send(c.post(b.url("/v1/queues/ev/jobs/b/nack")).json(&nack)).await;
    assert_eq!(st, 200, "{p}");
    let (st, p) = send(
        c.post(b.url("/v1/queues/ev/dead/replay"))
            .json(&json!({"id": "b"})),
    )
    .await;
    assert_eq!(st, 200, "{p}");
    // Claimed with a 100 ms lease and never acked: a later step (the
    // stats read) finds the lease ended.
    claim(&c, &b, "ev", "?lease_ms=100").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    send(c.get(b.url("/v1/queues/ev"))).await;

    // b had one attempt: the lease that ran out made it dead.
    let got = feed.take(10).await;
    assert_eq!(
        kinds(&got),
        [
            pair("pushed", "a"),
            pair("claimed", "a"),
            pair("acked", "a"),
            pair("pushed", "b"),
            pair("claimed", "b"),
            pair("dead", "b"),
            pair("replayed", "b"),
            pair("claimed", "b"),
            pair("expired", "b"),
            pair("dead", "b"),
        ]
    );
    assert_eq!(got[1].data["fence"], fence);
    assert_eq!(
        (&got[5].data["error"], &got[5].data["attempt"]),
        (&json!("boom"), &json!(1))
    );
    assert!(
        got.iter()
            .all(|e| e.id.is_some() && e.data["at_ms"].as_u64().is_some())
    );

    push(&c, &b, "ev", "w", json!({})).await;
    assert_eq!(kinds(&feed.take(1).await), [pair("pushed", "w")]);
    // A worker process acks through Redis directly.
    let worker = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .env_remove("TOLLGATE_REDIS_URL")
        .env("TOLLGATE_LOG", "warn")
        .args(["jobs", "work", "ev", "--redis", &redis.url(), "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn worker");
    let mut worker = Killed(worker);
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|e: &Sse| e.event == "acked" && e.data["job"] == "w")
    {
        seen.push(feed.next().await.expect("stream open"));
    }
    let at = |k: &str| seen.iter().position(|e| e.event == k && e.data["job"] == "w");
    assert!(at("claimed") < at("acked"), "{seen:?}");
    worker.kill();
}

/// Kills the child on drop.
struct Killed(std::process::Child);

impl Killed {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn two_subscribers_and_a_resume(s: &Server) {
    let c = reqwest::Client::new();
    let url = s.url("/v1/queues/two/events");
    let mut first = Stream::open(&c, &url, None).await;
    let mut second = Stream::open(&c, &url, None).await;
    assert_eq!(first.next().await.unwrap().event, "hello");
    assert_eq!(second.next().await.unwrap().event, "hello");
    for i in 0..5 {
        push(&c, s, "two", &format!("j{i}"), json!({})).await;
    }
    let a = first.take(5).await;
    let b = second.take(5).await;
    assert_eq!(kinds(&a), kinds(&b));
    assert_eq!(
        kinds(&a),
        (0..5)
            .map(|i| pair("pushed", &format!("j{i}")))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        a.iter().map(|e| e.id.clone()).collect::<Vec<_>>(),
        b.iter().map(|e| e.id.clone()).collect::<Vec<_>>()
    );
    // Resumed after the third: the fourth and fifth again, then live.
    let mut resumed = Stream::open(&c, &url, a[2].id.as_deref()).await;
    let hello = resumed.next().await.unwrap();
    assert_eq!(
        (&hello.data["resumed"], &hello.data["gap"]),
        (&json!(true), &json!(false))
    );
    let again = resumed.take(2).await;
    assert_eq!(kinds(&again), [pair("pushed", "j3"), pair("pushed", "j4")]);
    push(&c, s, "two", "j5", json!({})).await;
    assert_eq!(kinds(&resumed.take(1).await), [pair("pushed", "j5")]);
}

async fn bad_input_and_the_limit(s: &Server) {
    let c = reqwest::Client::new();
    let url = s.url("/v1/queues/lim/events");
    for bad in ["nonsense", "1-x", "-1", "1700000000000"] {
        let (st, p) = send(c.get(&url).header("Last-Event-ID", bad)).await;
        assert_eq!(
            (st, &p["error"]["code"]),
            (400, &json!("bad_request")),
            "{bad}: {p}"
        );
    }
    let (st, p) = send(c.get(s.url("/v1/queues/bad%20name/events"))).await;
    assert_eq!((st, &p["error"]["code"]), (400, &json!("bad_request")), "{p}");
    // The server was started with max_event_subscribers = 2.
    let one = Stream::open(&c, &url, None).await;
    let _two = Stream::open(&c, &url, None).await;
    let (st, p) = send(c.get(&url)).await;
    assert_eq!(
        (st, &p["error"]["code"]),
        (503, &json!("too_many_subscribers")),
        "{p}"
    );
    drop(one);
    // The place comes free once the server sees the client gone.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let resp = c.get(&url).send().await.unwrap();
        if resp.status().as_u16() == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no place freed in 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_two_subscribers_resume_limit_and_bad_input() {
    two_subscribers_and_a_resume(&Server::start(None)).await;
    bad_input_and_the_limit(&Server::start_with(None, &["--max-event-subscribers", "2"])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_two_subscribers_resume_limit_and_bad_input() {
    let redis = RedisServer::start();
    two_subscribers_and_a_resume(&Server::start(Some(&redis.url()))).await;
    let limited = Server::start_with(Some(&redis.url()), &["--max-event-subscribers", "2"]);
    bad_input_and_the_limit(&limited).await;
}

/// The value of an unlabelled (or fully labelled) series in a scrape.
fn series(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A client that never reads is dropped (its place and feed freed, the
/// drop counted) while another one reads every event and pushes go on;
/// when it finally reads, its stream ends with `dropped`.
async fn a_client_that_never_reads_is_dropped(s: &Server) {
    let c = reqwest::Client::new();
    let url = s.url("/v1/queues/flood/events");
    let mut reader = Stream::open(&c, &url, None).await;
    let mut sleeper = Stream::open(&c, &url, None).await;
    assert_eq!(reader.next().await.unwrap().event, "hello");
    // Pushed a batch at a time, each read in full by the reader before
    // the next (a reader slower than the pushes would be dropped too).
    const BATCHES: usize = 60;
    let batch_url = s.url("/v1/queues/flood/batch");
    for b in 0..BATCHES {
        let jobs: Vec<_> = (0..1000)
            .map(|i| json!({"payload": "x", "id": format!("{b}-{i}")}))
            .collect();
        let (st, p) = send(c.post(&batch_url).json(&json!({"jobs": jobs}))).await;
        assert_eq!(st, 200, "{p}");
        for n in 0..1000 {
            let e = reader.next().await.expect("the reader's stream stays open");
            assert_eq!(e.event, "pushed", "batch {b}, event {n}: {e:?}");
            assert_eq!(e.data["job"], format!("{b}-{n}"));
        }
    }
    // Dropped: only the reader still counts.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let text = s.metrics(None).await;
        if series(&text, "tollgate_event_subscribers") == Some(1.0) {
            assert!(
                text.contains("tollgate_event_subscribers_dropped_total{reason="),
                "{text}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sleeper was not dropped in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // It reads at last: what was buffered, then `dropped`, then the end.
    let mut last = None;
    while let Some(e) = sleeper.next().await {
        last = Some(e);
    }
    let last = last.expect("some events");
    assert_eq!(last.event, "dropped", "{last:?}");
    assert!(
        ["lagged", "slow_reader"].contains(&last.data["reason"].as_str().unwrap()),
        "{last:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_client_that_never_reads_is_dropped() {
    let s = Server::start(None);
    a_client_that_never_reads_is_dropped(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_client_that_never_reads_is_dropped() {
    let redis = RedisServer::start();
    let s = Server::start(Some(&redis.url()));
    a_client_that_never_reads_is_dropped(&s).await;
}

const ADMIN: &str = "admin-token-0123456789";

/// The room's stream: admitted, left (a visitor's leave), capacity,
/// paused, resumed, reset, timed out (a session past its TTL), as counts per
/// interval read from the store; 404 for a room not configured.
async fn room_changes(redis: Option<&str>) {
    let (_seen, up, dir) = room_support::site().await;
    let s = room_support::start(&dir, &room_support::room_config(up, 1, ""), redis);
    let proxy = s.proxy.clone().expect("proxy");
    let c = reqwest::Client::new();
    let url = s.url("/v1/rooms/shop/events");
    let (st, p) = send(c.get(s.url("/v1/rooms/nope/events")).bearer_auth(ADMIN)).await;
    assert_eq!((st, &p["error"]["code"]), (404, &json!("room_not_found")), "{p}");
    let mut feed = Stream::open_with(c.get(&url).bearer_auth(ADMIN), &url, None).await;
    let hello = feed.next().await.unwrap();
    assert_eq!(
        (hello.event.as_str(), &hello.data["capacity"]),
        ("hello", &json!(1)),
        "{hello:?}"
    );

    let mut a = room_support::Visitor::new("a");
    assert!(room_support::is_admitted(
        &a.get(&c, &proxy, "/page", true).await,
        "a"
    ));
    let e = feed.next().await.unwrap();
    assert_eq!(
        (e.event.as_str(), &e.data["count"], &e.data["active"]),
        ("admitted", &json!(1), &json!(1)),
        "{e:?}"
    );
    let r = c
        .post(format!("{proxy}/.tollgate/shop/leave"))
        .header("cookie", format!("tollgate_shop={}", a.cookie.clone().unwrap()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let e = feed.next().await.unwrap();
    assert_eq!((e.event.as_str(), &e.data["count"]), ("left", &json!(1)), "{e:?}");

    let (st, p) = send(
        c.put(s.url("/v1/rooms/shop/capacity"))
            .bearer_auth(ADMIN)
            .json(&json!({"capacity": 2})),
    )
    .await;
    assert_eq!(st, 200, "{p}");
    let e = feed.next().await.unwrap();
    assert_eq!(
        (e.event.as_str(), &e.data["capacity"], &e.data["was"]),
        ("capacity", &json!(2), &json!(1)),
        "{e:?}"
    );
    let (st, _) = send(c.post(s.url("/v1/rooms/shop/pause")).bearer_auth(ADMIN)).await;
    assert_eq!(st, 200);
    assert_eq!(feed.next().await.unwrap().event, "paused");
    let (st, _) = send(c.post(s.url("/v1/rooms/shop/resume")).bearer_auth(ADMIN)).await;
    assert_eq!(st, 200);
    assert_eq!(feed.next().await.unwrap().event, "resumed");
    let (st, p) = send(c.post(s.url("/v1/rooms/shop/reset")).bearer_auth(ADMIN)).await;
    assert_eq!(st, 200, "{p}");
    let e = feed.next().await.unwrap();
    assert_eq!(
        (e.event.as_str(), &e.data["waiting"]),
        ("reset", &json!(0)),
        "{e:?}"
    );
    assert!(e.data["reset_ms"].as_u64().is_some(), "{e:?}");

    // b's session (1.5 s TTL) runs out unused.
    let mut b = room_support::Visitor::new("b");
    assert!(room_support::is_admitted(
        &b.get(&c, &proxy, "/page", true).await,
        "b"
    ));
    assert_eq!(feed.next().await.unwrap().event, "admitted");
    let e = feed.next().await.unwrap();
    assert_eq!(
        (e.event.as_str(), &e.data["count"], &e.data["active"]),
        ("timed_out", &json!(1), &json!(0)),
        "{e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_room_changes() {
    room_changes(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_room_changes() {
    let redis = RedisServer::start();
    room_changes(Some(&redis.url())).await;
}

/// Open streams do not hold up a graceful shutdown: on SIGTERM they end
/// at once and the server exits (its connections get up to 30 s; here
/// well under that).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_end_when_the_server_stops() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let mut s = Server::start(None);
    let c = reqwest::Client::new();
    let mut feed = Stream::open(&c, &s.url("/v1/queues/stop/events"), None).await;
    assert_eq!(feed.next().await.unwrap().event, "hello");
    let asked = std::time::Instant::now();
    kill(Pid::from_raw(s.child.id() as i32), Signal::SIGTERM).expect("SIGTERM");
    assert!(feed.next().await.is_none(), "the stream ended");
    let deadline = asked + Duration::from_secs(20);
    while s.child.try_wait().expect("wait").is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not exit in 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads `resp` to its end: whether it ended within `limit`.
async fn ends_within(mut resp: reqwest::Response, limit: Duration) -> bool {
    tokio::time::timeout(limit, async { while let Ok(Some(_)) = resp.chunk().await {} })
        .await
        .is_ok()
}

/// Every long-lived response honours the one stop signal: with a console
/// live stream, a waiting visitor's event stream, a queue's event stream
/// and a gate long-poll all open, SIGTERM ends each of them and the
/// server exits 0, well within the 30 s its connections are given (and
/// within the 10 s `podman stop` allows).
async fn sigterm_ends_every_open_stream(redis: Option<&str>) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let (_seen, up, dir) = room_support::site().await;
    // The holder's session and the waiter's place outlast the test.
    let config = room_support::room_config(up, 1, "")
        .replace("session_ttl = \"1500ms\"", "session_ttl = \"60s\"")
        .replace("grace = \"3s\"", "grace = \"60s\"");
    let (mut s, proxy, c, _holder) =
        room_support::take_the_slot(room_support::start(&dir, &config, redis)).await;
    let mut waiter = room_support::Visitor::new("waiter");
    assert_eq!(waiter.get(&c, &proxy, "/page", true).await.status, 503);
    let cookie = format!("tollgate_shop={}", waiter.cookie.as_deref().expect("a ticket"));
    let url = format!("{proxy}/.tollgate/shop/events");
    let visitor = Stream::open_with(c.get(&url).header("cookie", cookie), &url, None).await;
    let url = s.url("/v1/console/live?kind=overview");
    let console = Stream::open_with(c.get(&url).bearer_auth(ADMIN), &url, None).await;
    let url = s.url("/v1/queues/stop/events");
    let queue = Stream::open_with(c.get(&url).bearer_auth(ADMIN), &url, None).await;
    let enter = |c: &reqwest::Client| {
        c.post(s.url("/v1/gates/stop/enter"))
            .bearer_auth(ADMIN)
            .json(&json!({"capacity": 1, "ttl_ms": 60_000, "heartbeat_ms": 60_000}))
    };
    let (_, held) = send(enter(&c)).await;
    assert_eq!(held["status"], "granted", "{held}");
    let (_, queued) = send(enter(&c)).await;
    let ticket = queued["ticket"].as_str().expect("a ticket").to_owned();
    let poll = tokio::spawn(send(
        c.get(s.url(&format!("/v1/gates/stop/tickets/{ticket}?wait_ms=60000")))
            .bearer_auth(ADMIN),
    ));
    // Each stream has started (a first event or the console's first
    // sample), and the long-poll is parked.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!poll.is_finished(), "the long-poll waits");
    let asked = std::time::Instant::now();
    kill(Pid::from_raw(s.child.id() as i32), Signal::SIGTERM).expect("SIGTERM");
    let limit = Duration::from_secs(10);
    let ended = futures_util::future::join3(
        ends_within(visitor.resp, limit),
        ends_within(console.resp, limit),
        ends_within(queue.resp, limit),
    )
    .await;
    assert_eq!(
        ended,
        (true, true, true),
        "(visitor, console, queue) streams ended"
    );
    let (st, answer) = tokio::time::timeout(limit, poll)
        .await
        .expect("the long-poll answered")
        .expect("poll task");
    assert_eq!((st, &answer["status"]), (200, &json!("queued")), "{answer}");
    let code = loop {
        if let Some(status) = s.child.try_wait().expect("wait") {
            break status.code();
        }
        assert!(
            asked.elapsed() < limit,
            "the server did not exit within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(code, Some(0), "exit code");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_sigterm_ends_every_open_stream() {
    sigterm_ends_every_open_stream(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sigterm_ends_every_open_stream() {
    let redis = RedisServer::start();
    sigterm_ends_every_open_stream(Some(&redis.url())).await;
}

/// `GET /v1/elections/{name}` and its event stream: candidates campaign
/// through the gates routes; two streams see every change in order (a
/// leader, the next on resign, none), with ids that grow; a stream
/// reopened with its last id hears nothing new, one reopened with an
/// older id is told the leader changed while it was away.
async fn election_over_http(s: &Server) {
    let c = reqwest::Client::new();
    let (status, now) = send(c.get(s.url("/v1/elections/vote"))).await;
    assert_eq!((status, &now["leader"]), (200, &Value::Null));
    let url = s.url("/v1/elections/vote/events");
    let mut first = Stream::open(&c, &url, None).await;
    let mut second = Stream::open(&c, &url, None).await;
    for st in [&mut first, &mut second] {
        let hello = st.next().await.expect("hello");
        assert_eq!(
            (hello.event.as_str(), &hello.data["leader"]),
            ("hello", &Value::Null)
        );
    }
    let enter = |label: &str| {
        c.post(s.url("/v1/gates/vote/enter"))
            .json(&json!({"capacity": 1, "label": label, "ttl_ms": 60_000}))
    };
    let (_, a) = send(enter("a")).await;
    assert_eq!(a["status"], "granted", "{a}");
    let (_, b) = send(enter("b")).await;
    assert_eq!(b["status"], "queued", "{b}");
    let (status, now) = send(c.get(s.url("/v1/elections/vote"))).await;
    assert_eq!((status, &now["leader"]["label"]), (200, &json!("a")));
    assert_eq!(now["leader"]["fence"], a["fence"]);
    // Leaderships shorter than the server's reads (every 50 ms) may go
    // unseen: hold this one past a few.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A resigns: B leads; B leaves: nobody.
    let token = a["token"].as_str().expect("token");
    let (status, _) = send(c.delete(s.url(&format!("/v1/gates/vote/leases/{token}")))).await;
    assert_eq!(status, 200);
    let ticket = b["ticket"].as_str().expect("ticket");
    let (_, granted) = send(c.get(s.url(&format!("/v1/gates/vote/tickets/{ticket}?wait_ms=5000")))).await;
    assert_eq!(granted["status"], "granted", "{granted}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b_token = granted["token"].as_str().expect("token");
    let (status, _) = send(c.delete(s.url(&format!("/v1/gates/vote/leases/{b_token}")))).await;
    assert_eq!(status, 200);
    let a_seen = first.take(3).await;
    let b_seen = second.take(3).await;
    let labels = |e: &[Sse]| {
        e.iter()
            .map(|e| e.data["leader"]["label"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(labels(&a_seen), [json!("a"), json!("b"), Value::Null]);
    assert_eq!(labels(&b_seen), labels(&a_seen));
    let ids: Vec<u64> = a_seen
        .iter()
        .map(|e| e.id.as_deref().expect("id").parse().expect("number"))
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    assert!(a_seen.iter().all(|e| e.event == "leader"));
    assert_eq!(a_seen[1].data["leader"]["fence"], granted["fence"]);
    // Reconnecting with the last id: nothing changed meanwhile.
    let last = a_seen[2].id.as_deref();
    let hello = Stream::open(&c, &url, last).await.next().await.expect("hello");
    assert_eq!(
        (&hello.data["changed"], &hello.data["leader"]),
        (&json!(false), &Value::Null)
    );
    // With an older one: it changed.
    let older = a_seen[0].id.as_deref();
    let hello = Stream::open(&c, &url, older).await.next().await.expect("hello");
    assert_eq!(hello.data["changed"], json!(true));
    // A semaphore's name is not an election.
    let (status, _) = send(
        c.post(s.url("/v1/gates/pool/enter"))
            .json(&json!({"capacity": 3})),
    )
    .await;
    assert_eq!(status, 200);
    let (status, err) = send(c.get(s.url("/v1/elections/pool"))).await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (400, &json!("bad_request")),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_election_over_http() {
    election_over_http(&Server::start(None)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_election_over_http() {
    let redis = RedisServer::start();
    election_over_http(&Server::start(Some(&redis.url()))).await;
}
