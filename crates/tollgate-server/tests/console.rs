//! The operator console in a real (headless) Chromium: `tollgate serve`
//! (a separate process, the embedded store, a waiting room in front of a
//! real upstream run by the test) with data made over the API; one
//! browser session visits every page. Every page renders its data and
//! passes axe-core in light and dark with nothing above minor, fits 390
//! px without horizontal scrolling; figures change live without a reload;
//! pausing the room and replaying a dead job from the console do what
//! they say, seen from outside the browser (a visitor through the room's
//! proxy, a claim over the API); a reset empties the room's line. With
//! tokens, a read token's console has every action disabled and an admin
//! token's works, with the CSRF header; a change from another site is
//! refused. With TOLLGATE_CONSOLE_SCREENSHOTS=1 it writes
//! docs/console/*.png.

mod browser_support;
mod room_support;
mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use browser_support::{Driver, axe_check, axe_source};
use room_support::{KEY, Visitor, is_admitted, upstream};
use serde_json::{Value, json};
use serve_support::{Server, send};
use support::RedisServer;

/// The browser's session and what it needs at hand.
struct Browser<'a> {
    driver: &'a Driver,
    c: &'a reqwest::Client,
    session: String,
    base: String,
    /// Whether this run writes the screenshots (when they are asked for).
    shots: bool,
}

impl Browser<'_> {
    async fn js(&self, script: &str) -> Value {
        self.driver.execute(self.c, &self.session, script).await
    }

    /// Polls `script` until it returns something truthy (not null, false,
    /// "" or 0); that value. Fails after a generous deadline, saying `what`.
    async fn until(&self, script: &str, what: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let v = self.js(script).await;
            let truthy = !(v.is_null() || v == false || v == "" || v == 0);
            if truthy {
                return v;
            }
            assert!(Instant::now() < deadline, "{what}: never happened (last {v})");
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    /// Opens `#<route>` and waits until the page says it is drawn.
    async fn open(&self, route: &str, ready: &str) {
        // A route drawn before must not pass for the new one; the same
        // route again is drawn again.
        let same_page = format!(
            "var m = document.getElementById('main');\
             if (!m || location.origin + location.pathname !== {ui}) return false;\
             delete m.dataset.ready;\
             if (location.hash === {hash}) window.dispatchEvent(new HashChangeEvent('hashchange'));\
             else location.hash = {hash};\
             return true;",
            hash = json!(format!("#{route}")),
            ui = json!(format!("{}/ui", self.base))
        );
        if self.js(&same_page).await != true {
            let url = format!("{}/ui#{route}", self.base);
            self.driver.go(self.c, &self.session, &url).await;
        }
        let check = format!(
            "var m = document.getElementById('main'); return m && m.dataset.ready === {};",
            json!(ready)
        );
        self.until(&check, &format!("page {route} drawn")).await;
    }

    /// Clicks the first button (in `scope`) whose text is `text`.
    async fn click(&self, scope: &str, text: &str) {
        let script = format!(
            "var b = Array.from(document.querySelectorAll({scope} + ' button')).find(function (b) {{ return b.textContent === {text}; }});\
             if (!b || b.disabled) return false; b.click(); return true;",
            scope = json!(scope),
            text = json!(text)
        );
        self.until(&script, &format!("a button {text:?} to click in {scope}"))
            .await;
    }

    /// Presses and releases one key (a WebDriver key code) in the page.
    async fn key(&self, key: &str) {
        let path = format!("/session/{}/actions", self.session);
        let actions = json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
            {"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}
        ]}]});
        self.driver
            .call(self.c, reqwest::Method::POST, &path, Some(actions))
            .await;
    }

    async fn scheme(&self, dark: bool) {
        let value = if dark { "dark" } else { "light" };
        self.driver.color_scheme(self.c, &self.session, value).await;
    }

    async fn width(&self, width: u32, height: u32) {
        self.driver
            .cdp(
                self.c,
                &self.session,
                "Emulation.setDeviceMetricsOverride",
                json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600}),
            )
            .await;
    }

    /// Writes the page as docs/console/<name>.png when screenshots are asked for.
    async fn screenshot(&self, name: &str) {
        if !(self.shots && screenshots()) {
            return;
        }
        use base64::Engine;
        let path = format!("/session/{}/screenshot", self.session);
        let png = self.driver.call(self.c, reqwest::Method::GET, &path, None).await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().expect("screenshot"))
            .expect("base64");
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/console");
        std::fs::create_dir_all(dir).expect("docs/console");
        std::fs::write(format!("{dir}/{name}.png"), bytes).expect("write screenshot");
    }
}

/// Whether to write docs/console/*.png.
fn screenshots() -> bool {
    std::env::var_os("TOLLGATE_CONSOLE_SCREENSHOTS").is_some()
}

fn config(upstream: std::net::SocketAddr) -> String {
    format!(
        r#"
listen = "127.0.0.1:0"
proxy_listen = "127.0.0.1:0"

[limits.api]
rate = "60/min"
burst = 2

[rooms.shop]
upstream = "http://{upstream}"
capacity = 2
cookie_keys = ["{KEY}"]
session_ttl = "60s"
grace = "20s"
status_rate = "50/s"
"#
    )
}

/// Data for every page, made over the API: a held gate with one in line,
/// a queue with ready jobs and a dead one, a schedule that has fired, a
/// limit that has decided. The dead job's id.
async fn make_data(c: &reqwest::Client, s: &Server) -> String {
    let (st, b) = send(
        c.post(s.url("/v1/gates/door/enter"))
            .json(&json!({"capacity": 1, "label": "build-7", "ttl_ms": 600000})),
    )
    .await;
    assert_eq!((st, b["status"].as_str()), (200, Some("granted")), "{b}");
    let (_, b) = send(
        c.post(s.url("/v1/gates/door/enter"))
            .json(&json!({"capacity": 1, "label": "build-8", "heartbeat_ms": 600000})),
    )
    .await;
    assert_eq!(b["status"], "queued", "{b}");
    for i in 0..3 {
        let (st, b) = send(
            c.post(s.url("/v1/queues/mail/jobs"))
                .json(&json!({"payload": {"to": format!("user{i}@example.org")}})),
        )
        .await;
        assert_eq!(st, 201, "{b}");
    }
    let (st, b) = send(
        c.post(s.url("/v1/queues/mail/jobs"))
            .json(&json!({"id": "bounce-1", "payload": {"to": "nobody"}, "max_attempts": 1, "priority": 9})),
    )
    .await;
    assert_eq!(st, 201, "{b}");
    let (_, claimed) = send(c.post(s.url("/v1/queues/mail/claim"))).await;
    assert_eq!(claimed["job"]["id"], "bounce-1", "{claimed}");
    let (_, b) = send(
        c.post(s.url("/v1/queues/mail/jobs/bounce-1/nack"))
            .json(&json!({"fence": claimed["job"]["fence"], "error": "550 mailbox unavailable"})),
    )
    .await;
    assert_eq!(b["result"], "dead", "{b}");
    let (st, b) = send(
        c.put(s.url("/v1/schedules/nightly"))
            .json(&json!({"when": "30 2 * * *", "zone": "Europe/Berlin", "queue": "reports"})),
    )
    .await;
    assert_eq!(st, 201, "{b}");
    let (st, b) = send(c.post(s.url("/v1/schedules/nightly/trigger"))).await;
    assert_eq!(st, 200, "{b}");
    for _ in 0..4 {
        send(c.post(s.url("/v1/limits/api/check")).json(&json!({"key": "k"}))).await;
    }
    "bounce-1".to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_a_real_browser() {
    let axe = axe_source();
    serve_support::install_tls_provider();
    let c = reqwest::Client::new();
    let driver = Driver::start();
    let session = driver.session(&c).await;
    // One browser for both: the embedded store (and the screenshots),
    // then a real redis-server.
    exercise(&driver, &c, &session, &axe, None).await;
    let redis = RedisServer::start();
    exercise(&driver, &c, &session, &axe, Some(&redis.url())).await;
    driver
        .call(&c, reqwest::Method::DELETE, &format!("/session/{session}"), None)
        .await;
}

async fn exercise(driver: &Driver, c: &reqwest::Client, session: &str, axe: &str, redis: Option<&str>) {
    let up = upstream(Default::default()).await;
    let dir = tempfile::tempdir().expect("dir");
    let s = room_support::start(&dir, &config(up), redis);
    let proxy = s.proxy.clone().expect("proxy");
    let dead = make_data(c, &s).await;
    let b = Browser {
        driver,
        c,
        session: session.to_owned(),
        base: s.base.clone(),
        shots: redis.is_none(),
    };
    b.width(1200, 1000).await;

    // Every page: its data drawn, axe in light and dark, 390 px wide.
    let pages: &[(&str, &str, &str, &str)] = &[
        (
            "overview",
            "/",
            "overview",
            "return document.querySelectorAll('.card').length === 5 && document.body.textContent.includes('shop');",
        ),
        (
            "gates",
            "/gates",
            "gates",
            "return document.body.textContent.includes('door');",
        ),
        (
            "gate",
            "/gates/door",
            "gates/door",
            "return document.body.textContent.includes('build-7') && document.body.textContent.includes('build-8');",
        ),
        (
            "elections",
            "/elections",
            "elections",
            "return document.body.textContent.includes('door') && document.body.textContent.includes('build-7');",
        ),
        (
            "election",
            "/elections/door",
            "elections/door",
            "return document.body.textContent.includes('build-7');",
        ),
        (
            "queues",
            "/queues",
            "queues",
            "return document.body.textContent.includes('mail');",
        ),
        (
            "queue",
            &format!("/queues/mail?state=dead&job={dead}") as &str,
            "queues/mail",
            "return document.body.textContent.includes('550 mailbox unavailable');",
        ),
        (
            "schedules",
            "/schedules",
            "schedules",
            "return document.body.textContent.includes('nightly');",
        ),
        (
            "schedule",
            "/schedules/nightly",
            "schedules/nightly",
            // Its runs are shown in its own zone, labelled (not the browser's, unlabelled).
            "const runs = [...document.querySelectorAll('#main ol li')]; return runs.length === 5 && runs.every((r) => /GMT[+-]\\d/.test(r.textContent) && r.textContent.endsWith(' Europe/Berlin')) && document.body.textContent.includes('nightly@manual-');",
        ),
        (
            "rooms",
            "/rooms",
            "rooms",
            "return document.body.textContent.includes('shop');",
        ),
        (
            "room",
            "/rooms/shop",
            "rooms/shop",
            "return document.body.textContent.includes('Admissions per minute');",
        ),
        (
            "limits",
            "/limits",
            "limits",
            "return document.body.textContent.includes('api');",
        ),
        (
            "limit",
            "/limits/api",
            "limits/api",
            "return document.body.textContent.includes('60/min') || document.body.textContent.includes('1/s');",
        ),
    ];
    let fits = "var e = document.documentElement; return e.scrollWidth <= e.clientWidth ? true : 'scrollWidth ' + e.scrollWidth + ' > ' + e.clientWidth;";
    for (name, route, ready, shows) in pages {
        b.open(route, ready).await;
        b.until(shows, &format!("the {name} page shows its data")).await;
        // A sample or two, so charts have a line.
        b.until(
            "return document.querySelectorAll('svg path.line').length === 0 || Array.from(document.querySelectorAll('svg path.line')).some(function (p) { return p.getAttribute('d').length > 6; });",
            &format!("the {name} page's charts drawn"),
        )
        .await;
        axe_check(b.driver, b.c, &b.session, axe, &format!("{name}, light")).await;
        // One live region, for the outcome of actions: the figures that
        // tick every second are not announced.
        assert_eq!(
            b.js("return Array.from(document.querySelectorAll('[aria-live]')).map(function (e) { return e.id; });").await,
            json!(["status"]),
            "{name}"
        );
        if b.shots && screenshots() {
            // Some seconds of samples, so the charts show a line.
            b.until(
                "return Array.from(document.querySelectorAll('svg path.line')).every(function (p) { var d = p.getAttribute('d'); return d === 'M0,0' || d.split('L').length > 8; });",
                "eight seconds of samples",
            )
            .await;
        }
        b.screenshot(name).await;
        b.scheme(true).await;
        let bg = b
            .js("return getComputedStyle(document.body).backgroundColor;")
            .await;
        assert_eq!(bg, "rgb(18, 18, 18)", "{name}: dark scheme not followed");
        axe_check(b.driver, b.c, &b.session, axe, &format!("{name}, dark")).await;
        if *name == "queue" {
            b.screenshot("queue-dark").await;
        }
        b.scheme(false).await;
        b.width(390, 844).await;
        assert_eq!(b.js(fits).await, true, "{name} at 390 px");
        if *name == "room" {
            b.screenshot("room-390").await;
        }
        b.width(1200, 1000).await;
    }

    // The election's page follows its leader: build-7's lease revoked,
    // build-8 (next in line) leads, and the page says so from the stream.
    b.open("/elections/door", "elections/door").await;
    b.until(
        "return document.body.textContent.includes('build-7');",
        "build-7 leads",
    )
    .await;
    let (_, now) = send(c.get(s.url("/v1/elections/door"))).await;
    let handle = now["leader"]["handle"].as_str().expect("handle").to_owned();
    let (st, _) = send(c.delete(s.url(&format!("/v1/gates/door/holders/{handle}")))).await;
    assert_eq!(st, 200);
    b.until(
        "return document.querySelector('#main dl') && document.querySelector('#main dl').textContent.includes('build-8') && document.body.textContent.includes('Changes seen');",
        "the page shows the new leader",
    )
    .await;

    // Keyboard alone: on a fresh load the first Tab reaches the skip link,
    // with a visible focus ring; Enter takes focus to the content (not to
    // a page named "main"); the next Tab lands inside it.
    driver.go(c, &b.session, &format!("{}/ui", s.base)).await;
    b.until(
        "var m = document.getElementById('main'); return m && m.dataset.ready === 'overview';",
        "the overview on a fresh load",
    )
    .await;
    b.key("\u{E004}").await;
    let focused = "var a = document.activeElement; return [a.tagName, a.textContent, getComputedStyle(a).outlineStyle];";
    assert_eq!(b.js(focused).await, json!(["A", "Skip to content", "solid"]));
    b.key("\u{E007}").await;
    b.until(
        "return document.activeElement.id === 'main';",
        "focus on the content",
    )
    .await;
    assert_eq!(
        b.js("return document.getElementById('main').dataset.ready;")
            .await,
        "overview"
    );
    b.key("\u{E004}").await;
    assert_eq!(
        b.js("return document.getElementById('main').contains(document.activeElement) && document.activeElement.tagName;").await,
        "A"
    );

    // A figure changes live when a job is pushed, without a reload.
    b.open("/queues/mail", "queues/mail").await;
    let before: u64 = b.until("var d = document.querySelector('dd[data-field=\"ready\"]'); return d && /^[0-9]+$/.test(d.textContent) ? d.textContent : null;", "the ready figure").await.as_str().and_then(|t| t.parse().ok()).expect("ready");
    b.js("window.consoleMark = 42; return 1;").await;
    let (st, body) = send(
        c.post(s.url("/v1/queues/mail/jobs"))
            .json(&json!({"payload": "live"})),
    )
    .await;
    assert_eq!(st, 201, "{body}");
    let want = (before + 1).to_string();
    b.until(
        &format!(
            "return document.querySelector('dd[data-field=\"ready\"]').textContent === {};",
            json!(want)
        ),
        "the ready figure follows a push",
    )
    .await;
    assert_eq!(
        b.js("return window.consoleMark || null;").await,
        42,
        "the page reloaded"
    );

    // Replaying the dead job from the console delivers it.
    b.open(&format!("/queues/mail?state=dead&job={dead}"), "queues/mail")
        .await;
    b.click("#job-detail", "Replay").await;
    b.click("#job-detail", "Yes, replay").await;
    b.until(
        "return document.getElementById('status').textContent.includes('replayed');",
        "the replay's outcome announced",
    )
    .await;
    // It is the most urgent job (priority 9): the next claim gets it.
    let (_, claimed) = send(c.post(s.url("/v1/queues/mail/claim"))).await;
    assert_eq!(claimed["job"]["id"], dead, "{claimed}");

    // A fair queue's groups are listed, and its limits set from the page
    // apply at once.
    for group in ["tenant-a", "tenant-a", "tenant-b"] {
        let (st, body) = send(
            c.post(s.url("/v1/queues/fair/jobs"))
                .json(&json!({"payload": "x", "group": group})),
        )
        .await;
        assert_eq!(st, 201, "{body}");
    }
    b.open("/queues/fair", "queues/fair").await;
    b.until(
        "var t = [...document.querySelectorAll('table')].find(t => t.caption && t.caption.textContent.includes('Groups')); return t && t.textContent.includes('tenant-a') && t.textContent.includes('tenant-b');",
        "the groups table",
    )
    .await;
    b.js("var f = [...document.querySelectorAll('form')].find(f => f.textContent.includes('Set limits')); f.querySelector('input[name=group_concurrency]').value = '1'; f.querySelector('input[name=group_rate]').value = '5/s'; return 1;").await;
    b.click("main", "Set limits").await;
    b.until(
        "return document.getElementById('status').textContent.includes('limits set');",
        "the limits' outcome announced",
    )
    .await;
    let (_, limits) = send(c.get(s.url("/v1/queues/fair/settings"))).await;
    assert_eq!(
        (
            &limits["group_concurrency"],
            &limits["group_rate"],
            &limits["concurrency"]
        ),
        (&json!(1), &json!("5/s"), &json!(null)),
        "{limits}"
    );
    let (_, got) = send(c.post(s.url("/v1/queues/fair/claim?max=10"))).await;
    assert_eq!(
        got["jobs"].as_array().map(Vec::len),
        Some(2),
        "one per tenant: {got}"
    );

    // The room: a visitor admitted shows live; paused from the console,
    // the next visitor waits.
    b.open("/rooms/shop", "rooms/shop").await;
    b.until(
        "return document.querySelector('dd[data-field=\"active\"]').textContent === '0';",
        "no one active",
    )
    .await;
    let mut first_visitor = Visitor::new("first");
    assert!(is_admitted(
        &first_visitor.get(c, &proxy, "/page", true).await,
        "first"
    ));
    b.until(
        "return document.querySelector('dd[data-field=\"active\"]').textContent === '1';",
        "the admitted visitor shows",
    )
    .await;
    // One admission reads 1 in the figure and its chart, for the minute
    // after it (not 60 per minute for one second, then 0).
    let admitted = "return document.querySelector('dd[data-field=\"admitted_last_minute\"]').textContent === '1' \
        && document.body.textContent.includes('Admitted in the minute up to each moment');";
    b.until(admitted, "the admission counted").await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        b.js(admitted).await,
        json!(true),
        "the admission still counted seconds later"
    );
    let chart = b
        .js("return [...document.querySelectorAll('svg.chart')].map((c) => c.getAttribute('aria-label')).find((l) => l.startsWith('Admitted in the minute'));")
        .await;
    assert!(
        chart
            .as_str()
            .is_some_and(|l| l.ends_with("admitted last minute now 1, highest 1")),
        "the chart says the same as the figure: {chart}"
    );
    b.click("#main", "Pause").await;
    b.until(
        "return document.getElementById('status').textContent.includes('paused');",
        "the pause's outcome announced",
    )
    .await;
    b.until(
        "return document.querySelector('dd[data-field=\"paused\"]').textContent === 'yes';",
        "the room shows paused",
    )
    .await;
    let mut second = Visitor::new("second");
    let answer = second.get(c, &proxy, "/page", true).await;
    assert!(
        !is_admitted(&answer, "second"),
        "a paused room admitted a newcomer"
    );
    assert_eq!(answer.json()["position"], 1, "{}", answer.text);
    b.until(
        "return document.querySelector('dd[data-field=\"waiting\"]').textContent === '1';",
        "the waiter shows",
    )
    .await;
    let (_, stats) = send(c.get(s.url("/v1/rooms/shop"))).await;
    assert_eq!(stats["paused"], true, "{stats}");

    // The head of the line shows the waiter; a reset (confirmed) drops it.
    b.click("#main", "Refresh the line").await;
    b.until(
        "return Array.from(document.querySelectorAll('#main caption')).some(function (c) { return c.textContent === 'Head of the line' && c.closest('table').querySelectorAll('tbody tr').length === 1; });",
        "the waiter in the head of the line",
    )
    .await;
    b.click("#main", "Reset").await;
    b.click("#main", "Yes, reset").await;
    b.until(
        "return document.getElementById('status').textContent.includes('1 waiting visitors dropped');",
        "the reset's outcome announced",
    )
    .await;
    b.until(
        "return document.querySelector('dd[data-field=\"waiting\"]').textContent === '0';",
        "nobody waits",
    )
    .await;
    b.until(
        "return document.body.textContent.includes('Nobody waits.');",
        "the line emptied",
    )
    .await;
    let (_, stats) = send(c.get(s.url("/v1/rooms/shop"))).await;
    assert_eq!(stats["waiting"], 0, "{stats}");

    // A failing action shows the API's message: a capacity over the maximum is refused.
    b.js("var i = document.querySelector('input[name=\"capacity\"]'); i.value = '2000000'; return 1;")
        .await;
    b.click("#main form", "Set capacity").await;
    b.until(
        "var s = document.getElementById('status'); return s.classList.contains('error') && s.textContent.includes('bad_request');",
        "the refusal shown",
    )
    .await;

    // The room's states: closed, then sold out (confirmed), turn a
    // newcomer away; open takes the line again.
    let state_is = |state: &str| {
        format!(
            "return document.getElementById('room-state') && document.getElementById('room-state').textContent === '{state}';"
        )
    };
    b.until(&state_is("paused"), "the state shows paused").await;
    b.click("#main", "Close").await;
    b.until(&state_is("closed"), "the state shows closed").await;
    let mut turned = Visitor::new("turned");
    let answer = turned.get(c, &proxy, "/page", true).await;
    assert_eq!(
        (answer.status, answer.json()["status"].clone()),
        (503, json!("closed")),
        "{}",
        answer.text
    );
    b.click("#main", "Sold out").await;
    b.click("#main", "Yes, sold out").await;
    b.until(
        "return document.getElementById('status').textContent.includes('sold out: 0 waiting visitors let go');",
        "the sale's end announced",
    )
    .await;
    b.until(&state_is("sold_out"), "the state shows sold out").await;
    let answer = turned.get(c, &proxy, "/page", true).await;
    assert_eq!(answer.status, 410, "{}", answer.text);
    b.click("#main", "Open").await;
    b.until(&state_is("open"), "the state shows open").await;
    let (_, stats) = send(c.get(s.url("/v1/rooms/shop"))).await;
    assert_eq!(stats["state"], "open", "{stats}");

    // A schedule set from the console shows, and is in the store; cleared
    // again, the room is open at once.
    b.js(
        "document.querySelector('input[name=\"opens_at\"]').value = '2099-12-01T10:00:00Z'; \
          document.querySelector('input[name=\"prequeue\"]').value = '15m'; return 1;",
    )
    .await;
    b.click("#main form", "Set schedule").await;
    b.until(
        "var p = document.getElementById('room-schedule'); return p && p.textContent.includes('Opens at 2099-12-01T10:00:00Z (pre-queue from 900 s before)');",
        "the schedule shows",
    )
    .await;
    let (_, stats) = send(c.get(s.url("/v1/rooms/shop"))).await;
    assert_eq!(
        (&stats["opens_at"], &stats["prequeue_seconds"]),
        (&json!("2099-12-01T10:00:00Z"), &json!(900)),
        "{stats}"
    );
    b.js("document.querySelector('input[name=\"opens_at\"]').value = ''; return 1;")
        .await;
    b.click("#main form", "Set schedule").await;
    b.until(
        "var p = document.getElementById('room-schedule'); return p && p.textContent.includes('No opening scheduled');",
        "the schedule cleared",
    )
    .await;

    // Never on a room's listener: there /ui goes to the upstream (last: a
    // visit takes a place in the room).
    let mut third = Visitor::new("third");
    let on_proxy = third.get(c, &proxy, "/ui", false).await;
    assert!(on_proxy.headers.get("content-security-policy").is_none());
    assert!(!on_proxy.text.contains("/ui/app.js"), "{}", on_proxy.text);
}

const ADMIN: &str = "console-admin-token-0123456789";
const READ: &str = "console-read-token-0123456789";

/// Signs in through the page's form with `token`; waits for the page it
/// was on to be drawn again.
async fn sign_in(b: &Browser<'_>, token: &str, role: &str) {
    b.until(
        "var m = document.getElementById('main'); return m && m.dataset.ready === 'login';",
        "the sign-in form",
    )
    .await;
    b.js(&format!(
        "document.querySelector('input[name=\"token\"]').value = {}; return 1;",
        json!(token)
    ))
    .await;
    b.click("#main form", "Sign in").await;
    b.until(
        &format!(
            "var m = document.getElementById('main'); return m.dataset.ready && m.dataset.ready !== 'login' && document.getElementById('who').textContent.includes({});",
            json!(role)
        ),
        &format!("signed in as {role}"),
    )
    .await;
}

/// What a change sent from the page itself answers: `[status, code]`.
async fn change_from_page(b: &Browser<'_>, path: &str, with_csrf: bool) -> Value {
    let script = format!(
        "var done = arguments[arguments.length - 1];\
         fetch('/v1/session', {{credentials: 'same-origin'}}).then(function (r) {{ return r.json(); }}).then(function (s) {{\
           var headers = {{}}; if ({with_csrf}) headers['X-CSRF-Token'] = s.csrf;\
           return fetch({path}, {{method: 'POST', credentials: 'same-origin', headers: headers}});\
         }}).then(function (r) {{ return r.json().then(function (j) {{ done([r.status, j.error ? j.error.code : null]); }}); }})\
         .catch(function (e) {{ done(['failed', String(e)]); }});",
        path = json!(path)
    );
    b.driver.execute_async(b.c, &b.session, &script).await
}

/// With tokens: the console asks for one. A read token sees the pages with
/// every action disabled (and the API refuses a change anyway); an admin
/// token's actions work, with the CSRF header the page sends; a change
/// with the session cookie from another site, or without the CSRF
/// header, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_with_read_and_admin_tokens() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(
        &path,
        format!("listen = \"127.0.0.1:0\"\ntokens = [\"{ADMIN}\"]\nread_tokens = [\"{READ}\"]\n"),
    )
    .expect("config");
    let s = Server::start_with(None, &["--config", path.to_str().expect("path")]);
    serve_support::install_tls_provider();
    let c = reqwest::Client::new();
    let (st, body) = send(
        c.post(s.url("/v1/queues/mail/jobs"))
            .bearer_auth(ADMIN)
            .json(&json!({"payload": 1})),
    )
    .await;
    assert_eq!(st, 201, "{body}");

    let driver = Driver::start();
    let b = Browser {
        driver: &driver,
        c: &c,
        session: driver.session(&c).await,
        base: s.base.clone(),
        shots: false,
    };
    b.width(1200, 1000).await;
    driver.go(&c, &b.session, &format!("{}/ui", s.base)).await;

    // Read: every action disabled, said why; the API refuses anyway.
    sign_in(&b, READ, "read").await;
    b.open("/queues/mail", "queues/mail").await;
    let buttons = "return Array.from(document.querySelectorAll('#main button')).filter(function (b) {\
                     return ['Pause', 'Replay all dead', 'Purge all dead'].indexOf(b.textContent) >= 0; })\
                   .map(function (b) { return [b.textContent, b.disabled, b.getAttribute('aria-describedby')]; });";
    assert_eq!(
        b.until(buttons, "the queue's actions").await,
        json!([
            ["Pause", true, "read-only-note"],
            ["Replay all dead", true, "read-only-note"],
            ["Purge all dead", true, "read-only-note"]
        ])
    );
    assert_eq!(
        b.js("return document.getElementById('read-only-note').hidden;")
            .await,
        false
    );
    axe_check(b.driver, b.c, &b.session, &axe_source(), "queue, read role").await;
    assert_eq!(
        change_from_page(&b, "/v1/queues/mail/pause", true).await,
        json!([403, "forbidden"])
    );

    // Sign out, then in as an admin: the action works.
    b.click("#who", "Sign out").await;
    sign_in(&b, ADMIN, "admin").await;
    b.open("/queues/mail", "queues/mail").await;
    b.click("#main", "Pause").await;
    b.until(
        "return document.getElementById('status').textContent.includes('paused');",
        "the pause's outcome announced",
    )
    .await;
    let (_, stats) = send(c.get(s.url("/v1/queues/mail")).bearer_auth(READ)).await;
    assert_eq!(stats["paused"], true, "{stats}");

    // Without the CSRF header the session's change is refused, from the
    // page itself too.
    assert_eq!(
        change_from_page(&b, "/v1/queues/mail/resume", false).await,
        json!([403, "csrf"])
    );
    // The cookie sent from another site: refused, CSRF value or not.
    let cookie = driver
        .call(
            &c,
            reqwest::Method::GET,
            &format!("/session/{}/cookie/tollgate_session", b.session),
            None,
        )
        .await;
    let value = cookie["value"].as_str().expect("the session cookie").to_owned();
    let (_, who) = send(
        c.get(s.url("/v1/session"))
            .header("cookie", format!("tollgate_session={value}")),
    )
    .await;
    let csrf = who["csrf"].as_str().expect("csrf").to_owned();
    for (name, header) in [
        ("origin", "http://evil.example"),
        ("sec-fetch-site", "cross-site"),
    ] {
        let (st, body) = send(
            c.post(s.url("/v1/queues/mail/resume"))
                .header("cookie", format!("tollgate_session={value}"))
                .header("x-csrf-token", &csrf)
                .header(name, header),
        )
        .await;
        assert_eq!(
            (st, body["error"]["code"].as_str()),
            (403, Some("cross_origin")),
            "{name}: {body}"
        );
    }
    let (_, stats) = send(c.get(s.url("/v1/queues/mail")).bearer_auth(READ)).await;
    assert_eq!(
        stats["paused"], true,
        "a refused change changed something: {stats}"
    );

    driver
        .call(
            &c,
            reqwest::Method::DELETE,
            &format!("/session/{}", b.session),
            None,
        )
        .await;
}
