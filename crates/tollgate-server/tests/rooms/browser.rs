//! The waiting page in a real (headless) Chromium, driven through
//! chromedriver: the browser half of the room tests, apart because the
//! WebDriver client it needs is a page long (tests/browser_support). The
//! page is checked with axe-core in the light and the dark color scheme.

use super::*;
use crate::browser_support::{Driver, axe_check, axe_source};

/// The waiting page in a real (headless) Chromium: it announces its
/// figures politely (aria-live), updates the position and the estimate
/// (text and minutes) live without a reload, passes axe-core in light and
/// dark, and moves the visitor on to the site when admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_page_in_a_real_browser() {
    let axe = axe_source();
    // The waiters are silent while the browser works (they never poll),
    // so their grace outlasts the test, and the browser (slow to start on
    // a loaded machine: CI once took over 20 s) is up before they join.
    let (_room, proxy, c) = start_room(ONE_SLOT.set(&[LONG_SESSIONS, ("grace", r#""120s""#)])).await;
    let driver = Driver::start();
    let session = driver.session(&c).await;
    let mut holder = take_a_slot(&c, &proxy).await;
    let mut first = Visitor::new("first");
    assert_eq!(first.get(&c, &proxy, "/page", true).await.json()["position"], 1);
    let mut second = Visitor::new("second");
    assert_eq!(second.get(&c, &proxy, "/page", true).await.json()["position"], 2);

    let at = |p: &str| format!("/session/{session}{p}");
    driver.go(&c, &session, &format!("{proxy}/page")).await;
    // Position, estimate text and its minutes, as the page shows them.
    let figures = "var p = document.getElementById('position'), e = document.getElementById('eta');\
                   return [p.textContent, e.textContent, e.getAttribute('data-low-minutes'),\
                           e.getAttribute('data-high-minutes')];";
    let now = driver.execute(&c, &session, figures).await;
    assert_eq!(now, serde_json::json!(["3", "unknown", "", ""]));
    // Screen readers hear the figures change.
    let live = "return ['position', 'waiting', 'eta'].map(function (id) {\
                  var r = document.getElementById(id).closest('[aria-live]');\
                  return r ? r.getAttribute('aria-live') + ' ' + r.getAttribute('role') : null; });";
    assert_eq!(
        driver.execute(&c, &session, live).await,
        serde_json::json!(["polite status", "polite status", "polite status"])
    );
    axe_check(&driver, &c, &session, &axe, "light").await;
    // A mark that a reload would wipe.
    driver
        .execute(&c, &session, "window.tollgateMark = 42; return 1;")
        .await;
    // Two sessions end (the holder's, then the first waiter's, admitted in
    // its place): the page shows position 1 and, the line's pace
    // measured, an estimate in words and minutes, live.
    assert_eq!(holder.get(&c, &proxy, "/done", true).await.text, "bye");
    assert_eq!(first.get(&c, &proxy, "/done", true).await.text, "bye");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = driver.execute(&c, &session, figures).await;
        let minutes = |i: usize| now[i].as_str().and_then(|m| m.parse::<u64>().ok());
        if now[0] == "1" && now[1] != "unknown" && minutes(2).is_some() && minutes(3).is_some() {
            assert!(minutes(2) <= minutes(3), "{now}");
            break;
        }
        assert!(Instant::now() < deadline, "the figures never updated: {now}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mark = driver
        .execute(&c, &session, "return window.tollgateMark || null;")
        .await;
    assert_eq!(mark, 42, "the page reloaded instead of updating in place");
    // The dark color scheme: the page follows it, and passes axe too.
    driver.color_scheme(&c, &session, "dark").await;
    let background = "return getComputedStyle(document.body).backgroundColor;";
    assert_eq!(driver.execute(&c, &session, background).await, "rgb(18, 18, 18)");
    axe_check(&driver, &c, &session, &axe, "dark").await;
    // The visitor ahead leaves: the page moves the visitor on to the site.
    assert_eq!(second.get(&c, &proxy, "/done", true).await.text, "bye");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let source = driver.call(&c, reqwest::Method::GET, &at("/source"), None).await;
        if source
            .as_str()
            .is_some_and(|t| t.contains("upstream page for anonymous"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "never admitted: {source}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let url = driver.call(&c, reqwest::Method::GET, &at("/url"), None).await;
    assert_eq!(
        url,
        format!("{proxy}/page"),
        "the visitor lands on the page it asked for"
    );
    driver
        .call(&c, reqwest::Method::DELETE, &format!("/session/{session}"), None)
        .await;
}

/// A reset of the line seen from the waiting page in Chromium: the open
/// page learns of it by itself (its live feed says the place is gone; the
/// reload shows why), says the operator reset the line, passes axe-core
/// in light and dark, and its link joins the line again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_line_in_a_real_browser() {
    let axe = axe_source();
    let (room, proxy, c) = start_room(ONE_SLOT.set(&[LONG_SESSIONS, ("grace", r#""20s""#)])).await;
    let _holder = take_a_slot(&c, &proxy).await;
    let driver = Driver::start();
    let session = driver.session(&c).await;
    driver.go(&c, &session, &format!("{proxy}/page")).await;
    let position = "var p = document.getElementById('position'); return p ? p.textContent : null;";
    assert_eq!(driver.execute(&c, &session, position).await, "1");
    // (The browser's own favicon request may have queued too.)
    let reset = admin(&c, &room.s, reqwest::Method::POST, "/reset", None).await;
    assert!(reset["dropped"].as_u64() >= Some(1), "{reset}");
    let text = "return document.body ? document.body.innerText : '';";
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = driver.execute(&c, &session, text).await;
        if now
            .as_str()
            .is_some_and(|t| t.contains("The line was reset by the operator"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the page never said the line was reset: {now}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    axe_check(&driver, &c, &session, &axe, "light").await;
    driver.color_scheme(&c, &session, "dark").await;
    axe_check(&driver, &c, &session, &axe, "dark").await;
    driver
        .execute(
            &c,
            &session,
            "document.querySelector('main a').click(); return 1;",
        )
        .await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = driver.execute(&c, &session, position).await;
        if now.as_str().and_then(|p| p.parse::<u64>().ok()).is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "never back in line: {now}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    driver
        .call(&c, reqwest::Method::DELETE, &format!("/session/{session}"), None)
        .await;
}

/// Waits until the page's body text (in `session`) contains `want`.
async fn shows(driver: &Driver, c: &reqwest::Client, session: &str, want: &str) {
    let text = "return document.body ? document.body.innerText : '';";
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = driver.execute(c, session, text).await;
        if now.as_str().is_some_and(|t| t.contains(want)) {
            return;
        }
        assert!(Instant::now() < deadline, "the page never said {want:?}: {now}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A room's states in a real (headless) Chromium: a waiter's page says
/// the room closed to newcomers by itself (live, no reload), then, sold
/// out, turns into the sold-out page by itself; a newcomer to a closed
/// room gets the closed page. Each passes axe-core in light and dark. On
/// the embedded store and on Redis.
async fn closed_and_sold_out_in_a_real_browser(redis: Option<&str>) {
    let axe = axe_source();
    let (room, proxy, c) =
        start_room(ONE_SLOT.set(&[LONG_SESSIONS, ("grace", r#""20s""#)]).redis(redis)).await;
    let _holder = take_a_slot(&c, &proxy).await;
    let driver = Driver::start();
    let session = driver.session(&c).await;
    driver.go(&c, &session, &format!("{proxy}/page")).await;
    let position = "var p = document.getElementById('position'); return p ? p.textContent : null;";
    assert_eq!(driver.execute(&c, &session, position).await, "1");
    let state = "var s = document.getElementById('state'); return s ? s.getAttribute('data-state') : null;";
    assert_eq!(driver.execute(&c, &session, state).await, "open");

    // Closed: the waiter keeps its place, and its page says so live.
    let closed = admin(
        &c,
        &room.s,
        reqwest::Method::PUT,
        "/state",
        Some(serde_json::json!({"state": "closed"})),
    )
    .await;
    assert_eq!(closed["state"], "closed", "{closed}");
    shows(&driver, &c, &session, "The room is closed to newcomers").await;
    assert_eq!(driver.execute(&c, &session, position).await, "1");
    assert_eq!(driver.execute(&c, &session, state).await, "closed");
    axe_check(&driver, &c, &session, &axe, "light").await;

    // Sold out: the page learns its place is gone and shows why.
    let sold = admin(
        &c,
        &room.s,
        reqwest::Method::PUT,
        "/state",
        Some(serde_json::json!({"state": "sold_out"})),
    )
    .await;
    assert!(sold["dropped"].as_u64() >= Some(1), "{sold}");
    shows(
        &driver,
        &c,
        &session,
        "Everything is gone, so the line has closed.",
    )
    .await;
    axe_check(&driver, &c, &session, &axe, "light").await;
    driver.color_scheme(&c, &session, "dark").await;
    axe_check(&driver, &c, &session, &axe, "dark").await;

    // Closed again: a newcomer (this browser, its token cleared) gets
    // the closed page.
    admin(
        &c,
        &room.s,
        reqwest::Method::PUT,
        "/state",
        Some(serde_json::json!({"state": "closed"})),
    )
    .await;
    // (Once the server's view has the change: a sold-out room answers
    // newcomers from its view, within a watch period.)
    tokio::time::sleep(Duration::from_millis(300)).await;
    driver.go(&c, &session, &format!("{proxy}/other")).await;
    shows(&driver, &c, &session, "Nobody new can join the line now.").await;
    axe_check(&driver, &c, &session, &axe, "dark").await;
    driver
        .call(&c, reqwest::Method::DELETE, &format!("/session/{session}"), None)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_and_sold_out_in_a_real_browser_embedded() {
    closed_and_sold_out_in_a_real_browser(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_and_sold_out_in_a_real_browser_redis() {
    let redis = RedisServer::start();
    closed_and_sold_out_in_a_real_browser(Some(&redis.url())).await;
}

/// A scheduled room's pre-queue in a real (headless) Chromium: the page
/// counts down to the opening each second (the element is not announced
/// every second), shows no place but "in the draw" (the room draws its
/// pre-queue), passes axe-core, and at the opening moves the visitor on
/// to the site by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pre_queue_counts_down_in_a_real_browser() {
    let axe = axe_source();
    let (room, proxy, c) = start_room(ONE_SLOT.set(&[LONG_SESSIONS, ("grace", r#""30s""#)])).await;
    let driver = Driver::start();
    let session = driver.session(&c).await;
    let body = serde_json::json!({"opens_at": rfc3339_in(8_000), "prequeue": "1h"});
    admin(&c, &room.s, reqwest::Method::PUT, "/schedule", Some(body)).await;
    // (The server's view has the schedule within a watch period.)
    tokio::time::sleep(Duration::from_millis(200)).await;
    driver.go(&c, &session, &format!("{proxy}/page")).await;
    let countdown = "var o = document.getElementById('opens'); return o ? o.textContent : null;";
    let first = driver.execute(&c, &session, countdown).await;
    let first = first.as_str().unwrap_or_default().to_owned();
    assert!(
        first.starts_with("You are in the pre-queue. Admissions start in 0:0"),
        "{first}"
    );
    assert_eq!(
        driver
            .execute(
                &c,
                &session,
                "return document.getElementById('opens').getAttribute('aria-live');"
            )
            .await,
        serde_json::Value::Null,
        "a countdown is not read out every second"
    );
    // The room draws its pre-queue (the default): no place before the
    // opening, and the page says why.
    let place = "return [document.getElementById('position').textContent, \
                 document.getElementById('draw').textContent];";
    let shown = driver.execute(&c, &session, place).await;
    assert_eq!(shown[0], "in the draw", "{shown}");
    assert!(
        shown[1].as_str().is_some_and(|t| t.contains("drawn at random")),
        "{shown}"
    );
    axe_check(&driver, &c, &session, &axe, "light").await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let later = driver.execute(&c, &session, countdown).await;
    assert!(
        later
            .as_str()
            .is_some_and(|t| t != first && t.contains("Admissions start in 0:0")),
        "the countdown moved: {first} then {later}"
    );
    // The opening: the one in the pre-queue is let in, by the page alone.
    let text = "return document.body ? document.body.innerText : '';";
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = driver.execute(&c, &session, text).await;
        if now.as_str().is_some_and(|t| t.starts_with("upstream page for")) {
            break;
        }
        assert!(Instant::now() < deadline, "never let in at the opening: {now}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    driver
        .call(&c, reqwest::Method::DELETE, &format!("/session/{session}"), None)
        .await;
}

/// The arrival challenge in a real (headless) Chromium: the page's own
/// SHA-256 solves it and the browser comes back with the solution, takes
/// its place (here: straight to the site) and the pass cookie is cleared;
/// the page, while it works, passes axe-core in light and dark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_arrival_challenge_is_solved_in_a_real_browser() {
    let axe = axe_source();
    let (room, proxy, c) = start_room(ONE_SLOT.set(&[LONG_SESSIONS]).extra("challenge_bits = 16")).await;
    let driver = Driver::start();
    let session = driver.session(&c).await;
    driver.go(&c, &session, &format!("{proxy}/page")).await;
    let text = "return document.body ? document.body.innerText : '';";
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = driver.execute(&c, &session, text).await;
        if now.as_str().is_some_and(|t| t.starts_with("upstream page for")) {
            break;
        }
        assert!(Instant::now() < deadline, "the challenge was never solved: {now}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The browser's cookie store, through WebDriver (the page's own
    // `document.cookie` may trail the response that cleared one on a
    // loaded machine, by more than 2 s in one CI run); asked again for up
    // to 5 s.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let path = format!("/session/{session}/cookie");
        let cookies = driver.call(&c, reqwest::Method::GET, &path, None).await;
        let named = |name: &str| {
            cookies
                .as_array()
                .expect("the cookies")
                .iter()
                .any(|k| k["name"] == name)
        };
        // The visitor's own cookie is there: the list is the real one.
        assert!(named("tollgate_shop"), "{cookies}");
        if !named("tollgate_shop_pass") {
            break;
        }
        assert!(Instant::now() < deadline, "the spent pass is cleared: {cookies}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        room.seen.lock().expect("lock").challenge_leaks,
        0,
        "the site never sees the solution"
    );
    driver
        .call(&c, reqwest::Method::DELETE, &format!("/session/{session}"), None)
        .await;

    // A challenge too hard to finish while the page is checked.
    let (_hard, proxy, c) = start_room(ONE_SLOT.set(&[LONG_SESSIONS]).extra("challenge_bits = 26")).await;
    let session = driver.session(&c).await;
    driver.go(&c, &session, &format!("{proxy}/page")).await;
    let title = driver
        .execute(&c, &session, "return document.querySelector('h1').textContent;")
        .await;
    assert_eq!(title, "One moment");
    axe_check(&driver, &c, &session, &axe, "light").await;
    driver.color_scheme(&c, &session, "dark").await;
    axe_check(&driver, &c, &session, &axe, "dark").await;
    driver
        .call(&c, reqwest::Method::DELETE, &format!("/session/{session}"), None)
        .await;
}
