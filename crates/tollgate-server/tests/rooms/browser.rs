//! The waiting page in a real (headless) Chromium, driven through
//! chromedriver: the browser half of the room tests, apart because the
//! WebDriver client it needs is a page long.

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

/// The waiting page in a real (headless) Chromium: it shows the position,
/// updates it live without a reload, and moves the visitor on to the site
/// when admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_page_in_a_real_browser() {
    let (_room, proxy, c) = start_room(ONE_SLOT.set(&[LONG_SESSIONS, ("grace", r#""20s""#)])).await;
    let mut holder = take_a_slot(&c, &proxy).await;
    let mut ahead = Visitor::new("ahead");
    assert_eq!(ahead.get(&c, &proxy, "/page", true).await.json()["position"], 1);

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
    let position = "var e = document.getElementById('position'); return e ? e.textContent : null;";
    assert_eq!(driver.execute(&c, &session, position).await, "2");
    // A mark that a reload would wipe.
    driver
        .execute(&c, &session, "window.tollgateMark = 42; return 1;")
        .await;
    // The visitor ahead leaves: the page shows position 1, live.
    let leave = send_as(&ahead, c.post(format!("{proxy}/.tollgate/shop/leave")), "leave").await;
    assert_eq!(leave.status().as_u16(), 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = driver.execute(&c, &session, position).await;
        if now == "1" {
            break;
        }
        assert!(Instant::now() < deadline, "the position never updated: {now}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mark = driver
        .execute(&c, &session, "return window.tollgateMark || null;")
        .await;
    assert_eq!(mark, 42, "the page reloaded instead of updating in place");
    // The holder leaves: the page moves the visitor on to the site.
    assert_eq!(holder.get(&c, &proxy, "/done", true).await.text, "bye");
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
