//! The waiting page in a real (headless) Chromium, driven through
//! chromedriver: the browser half of the room tests, apart because the
//! WebDriver client it needs is a page long. The page is checked with
//! axe-core (from npm, pinned; installed here when missing), in the light
//! and the dark color scheme.

use super::*;

/// chromedriver on a free port, killed on drop.
struct Driver {
    child: std::process::Child,
    base: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let child = std::process::Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect(
                "chromedriver is installed (Debian: chromium chromium-driver; scripts/test installs them)",
            );
        Driver {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    async fn call(
        &self,
        c: &reqwest::Client,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Value {
        let mut req = c.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let v: Value = req.send().await.expect("webdriver").json().await.expect("json");
        v["value"].clone()
    }

    /// Runs `js` in `session`'s page; its answer.
    async fn execute(&self, c: &reqwest::Client, session: &str, js: &str) -> Value {
        let path = format!("/session/{session}/execute/sync");
        let body = serde_json::json!({"script": js, "args": []});
        self.call(c, reqwest::Method::POST, &path, Some(body)).await
    }

    /// Runs `js` in `session`'s page and waits for it to call its last
    /// argument back; what it passed.
    async fn execute_async(&self, c: &reqwest::Client, session: &str, js: &str) -> Value {
        let path = format!("/session/{session}/execute/async");
        let body = serde_json::json!({"script": js, "args": []});
        self.call(c, reqwest::Method::POST, &path, Some(body)).await
    }

    /// Sends a Chrome DevTools command to `session`'s page.
    async fn cdp(&self, c: &reqwest::Client, session: &str, cmd: &str, params: Value) -> Value {
        let path = format!("/session/{session}/goog/cdp/execute");
        let body = serde_json::json!({"cmd": cmd, "params": params});
        self.call(c, reqwest::Method::POST, &path, Some(body)).await
    }

    async fn session(&self, c: &reqwest::Client) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        while c.get(format!("{}/status", self.base)).send().await.is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let caps = serde_json::json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
            }
        }}});
        let v = self.call(c, reqwest::Method::POST, "/session", Some(caps)).await;
        v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {v}"))
            .to_owned()
    }
}

/// The axe-core release the page is checked with.
const AXE_VERSION: &str = "4.10.2";

/// axe.min.js, installed from npm under the target directory if missing:
/// the test installs what it needs, and fails if it cannot. Once per
/// process: two browser tests installing into one directory at once
/// would break each other's install.
fn axe_source() -> String {
    static AXE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    AXE.get_or_init(install_axe).clone()
}

fn install_axe() -> String {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("axe-core-{AXE_VERSION}"));
    let file = dir.join("node_modules/axe-core/axe.min.js");
    if !file.exists() {
        let out = std::process::Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(format!("axe-core@{AXE_VERSION}"))
            .output()
            .expect("npm is installed (Debian: npm; scripts/test installs it)");
        assert!(
            out.status.success() && file.exists(),
            "could not install axe-core@{AXE_VERSION} with npm: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::read_to_string(&file).expect("axe.min.js")
}

/// Runs axe-core on `session`'s page and fails on any violation of impact
/// moderate or above, listing them; `scheme` names the color scheme.
async fn axe_check(driver: &Driver, c: &reqwest::Client, session: &str, axe: &str, scheme: &str) {
    driver
        .execute(c, session, &format!("{axe}\n;return typeof axe;"))
        .await;
    let run = "var done = arguments[arguments.length - 1];\
               axe.run(document, {resultTypes: ['violations']})\
                 .then(function (r) { done(r.violations); })\
                 .catch(function (e) { done('axe failed: ' + e); });";
    let violations = driver.execute_async(c, session, run).await;
    let list = violations
        .as_array()
        .unwrap_or_else(|| panic!("axe did not run ({scheme}): {violations}"));
    let serious: Vec<&Value> = list
        .iter()
        .filter(|v| v["impact"] != "minor" && !v["impact"].is_null())
        .collect();
    let minor: Vec<&Value> = list.iter().filter(|v| !serious.contains(v)).collect();
    if !minor.is_empty() {
        eprintln!(
            "axe ({scheme}), minor: {}",
            Value::from(minor.into_iter().cloned().collect::<Vec<_>>())
        );
    }
    assert!(
        serious.is_empty(),
        "axe found violations above minor on the waiting page ({scheme}): {}",
        serde_json::to_string_pretty(&serious).unwrap_or_default()
    );
}

/// The waiting page in a real (headless) Chromium: it announces its
/// figures politely (aria-live), updates the position and the estimate
/// (text and minutes) live without a reload, passes axe-core in light and
/// dark, and moves the visitor on to the site when admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_page_in_a_real_browser() {
    let axe = axe_source();
    let (_room, proxy, c) = start_room(ONE_SLOT.set(&[LONG_SESSIONS, ("grace", r#""20s""#)])).await;
    let mut holder = take_a_slot(&c, &proxy).await;
    let mut first = Visitor::new("first");
    assert_eq!(first.get(&c, &proxy, "/page", true).await.json()["position"], 1);
    let mut second = Visitor::new("second");
    assert_eq!(second.get(&c, &proxy, "/page", true).await.json()["position"], 2);

    let driver = Driver::start();
    let session = driver.session(&c).await;
    let at = |p: &str| format!("/session/{session}{p}");
    driver
        .call(
            &c,
            reqwest::Method::POST,
            &at("/url"),
            Some(serde_json::json!({"url": format!("{proxy}/page")})),
        )
        .await;
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
    // its place): the page shows position 1 and, departures measured, an
    // estimate in words and minutes, live.
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
    driver
        .cdp(
            &c,
            &session,
            "Emulation.setEmulatedMedia",
            serde_json::json!({"features": [{"name": "prefers-color-scheme", "value": "dark"}]}),
        )
        .await;
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
    let at = |p: &str| format!("/session/{session}{p}");
    driver
        .call(
            &c,
            reqwest::Method::POST,
            &at("/url"),
            Some(serde_json::json!({"url": format!("{proxy}/page")})),
        )
        .await;
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
    driver
        .cdp(
            &c,
            &session,
            "Emulation.setEmulatedMedia",
            serde_json::json!({"features": [{"name": "prefers-color-scheme", "value": "dark"}]}),
        )
        .await;
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
