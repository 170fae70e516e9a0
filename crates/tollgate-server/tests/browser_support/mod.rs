//! A real (headless) Chromium for the browser tests, driven through
//! chromedriver by a small WebDriver client, and axe-core (from npm,
//! pinned; installed under the target directory when missing) to check
//! pages for accessibility. Shared by the waiting page's tests and the
//! console's.
#![allow(dead_code, unreachable_pub)]

use std::time::{Duration, Instant};

use serde_json::Value;

/// chromedriver on a free port, killed on drop.
pub struct Driver {
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
    /// chromedriver, answering on its port. On a loaded machine the free
    /// port picked here can be taken before chromedriver binds it, or
    /// chromedriver can exit at start: then it is started again on another
    /// port, and a failure says what chromedriver printed.
    pub fn start() -> Driver {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = String::new();
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("free port")
                .port();
            let log =
                std::env::temp_dir().join(format!("tollgate-chromedriver-{}-{port}.log", std::process::id()));
            let mut child = std::process::Command::new("chromedriver")
                .arg(format!("--port={port}"))
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(&log).expect("chromedriver log file"))
                .spawn()
                .expect(
                    "chromedriver is installed (Debian: chromium chromium-driver; scripts/test installs them)",
                );
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            loop {
                if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    let _ = std::fs::remove_file(&log);
                    return Driver {
                        child,
                        base: format!("http://127.0.0.1:{port}"),
                    };
                }
                let exited = child.try_wait().ok().flatten();
                if exited.is_some() || Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    last = format!(
                        "chromedriver on port {port} ({}): {}",
                        exited.map_or("did not answer".to_owned(), |s| s.to_string()),
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                    let _ = std::fs::remove_file(&log);
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if Instant::now() >= deadline {
                break;
            }
        }
        panic!("chromedriver did not start: {last}");
    }

    pub async fn call(
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
    pub async fn execute(&self, c: &reqwest::Client, session: &str, js: &str) -> Value {
        let path = format!("/session/{session}/execute/sync");
        let body = serde_json::json!({"script": js, "args": []});
        self.call(c, reqwest::Method::POST, &path, Some(body)).await
    }

    /// Runs `js` in `session`'s page and waits for it to call its last
    /// argument back; what it passed.
    pub async fn execute_async(&self, c: &reqwest::Client, session: &str, js: &str) -> Value {
        let path = format!("/session/{session}/execute/async");
        let body = serde_json::json!({"script": js, "args": []});
        self.call(c, reqwest::Method::POST, &path, Some(body)).await
    }

    /// Sends a Chrome DevTools command to `session`'s page.
    pub async fn cdp(&self, c: &reqwest::Client, session: &str, cmd: &str, params: Value) -> Value {
        let path = format!("/session/{session}/goog/cdp/execute");
        let body = serde_json::json!({"cmd": cmd, "params": params});
        self.call(c, reqwest::Method::POST, &path, Some(body)).await
    }

    /// Loads `url` in `session`'s window.
    pub async fn go(&self, c: &reqwest::Client, session: &str, url: &str) {
        let path = format!("/session/{session}/url");
        let body = serde_json::json!({"url": url});
        self.call(c, reqwest::Method::POST, &path, Some(body)).await;
    }

    /// Makes `session`'s pages see `prefers-color-scheme: scheme`
    /// ("light" or "dark").
    pub async fn color_scheme(&self, c: &reqwest::Client, session: &str, scheme: &str) {
        let features = serde_json::json!({"features": [{"name": "prefers-color-scheme", "value": scheme}]});
        self.cdp(c, session, "Emulation.setEmulatedMedia", features).await;
    }

    pub async fn session(&self, c: &reqwest::Client) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        while c.get(format!("{}/status", self.base)).send().await.is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver stopped answering on {}",
                self.base
            );
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
pub const AXE_VERSION: &str = "4.10.2";

/// axe.min.js, installed from npm under the target directory if missing:
/// the test installs what it needs, and fails if it cannot. Once per
/// process: two browser tests installing into one directory at once
/// would break each other's install.
pub fn axe_source() -> String {
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
/// moderate or above, listing them; `scheme` names the page and its color
/// scheme in the message.
pub async fn axe_check(driver: &Driver, c: &reqwest::Client, session: &str, axe: &str, scheme: &str) {
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
        "axe found violations above minor ({scheme}): {}",
        serde_json::to_string_pretty(&serious).unwrap_or_default()
    );
}
