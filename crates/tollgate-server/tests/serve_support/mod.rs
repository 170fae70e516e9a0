//! A `tollgate serve` child process for the HTTP tests.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// A `tollgate serve` child on a free port; killed on drop.
pub struct Server {
    pub child: Child,
    pub base: String,
    /// The waiting rooms' address, when rooms are configured.
    pub proxy: Option<String>,
    /// The listening line as printed (text, or JSON with --log-format json).
    pub line: String,
    /// The embedded store's data directory this server was given (a
    /// fresh one under the target directory), removed on drop.
    pub data_dir: Option<std::path::PathBuf>,
}

/// A fresh data directory for one server under the target directory.
pub fn fresh_data_dir() -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("data-{}-{n}", std::process::id()))
}

impl Server {
    pub fn start(redis: Option<&str>) -> Server {
        Server::start_with(redis, &[])
    }

    pub fn start_with(redis: Option<&str>, extra: &[&str]) -> Server {
        Server::start_full(redis, extra, Stdio::inherit())
    }

    /// With its standard error going to `stderr` (a file, to read logs).
    /// With `redis`, returns once the server has reached it (or is gone).
    pub fn start_full(redis: Option<&str>, extra: &[&str], stderr: Stdio) -> Server {
        let s = Server::spawn(Server::command(redis, extra), stderr);
        if redis.is_some() {
            s.wait_for_store();
        }
        s
    }

    /// Waits until the server has opened its store (its /readyz no longer
    /// gives the answer of a server still waiting for Redis), or is gone:
    /// it listens before it reaches Redis, and a test that stops Redis
    /// right after the start must know the server saw it up.
    pub fn wait_for_store(&self) {
        use std::io::{Read, Write};
        let addr = self.base.trim_start_matches("http://");
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_secs(20) {
            let Ok(mut conn) = std::net::TcpStream::connect(addr) else {
                return;
            };
            let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(5)));
            let mut answer = String::new();
            let asked = conn.write_all(b"GET /readyz HTTP/1.0\r\nHost: tollgate\r\n\r\n");
            if asked.is_err() || conn.read_to_string(&mut answer).is_err() {
                return;
            }
            if !answer.contains("not connected to the store yet") {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The command `start_full` runs (on 127.0.0.1:0 unless `extra` has a
    /// --listen), to change its environment before [`Server::spawn`].
    pub fn command(redis: Option<&str>, extra: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
        cmd.arg("serve");
        if !extra.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        if !extra.contains(&"--data-dir") {
            // The embedded store on disk, as a user runs it, in a
            // directory of its own (the default is the working directory's).
            cmd.env("TOLLGATE_DATA_DIR", fresh_data_dir());
        }
        cmd.args(extra)
            .env_remove("TOLLGATE_REDIS_URL")
            .env_remove("TOLLGATE_TOKENS")
            .env_remove("TOLLGATE_READ_TOKENS")
            .env_remove("TOLLGATE_API_SESSION_TTL")
            .env_remove("TOLLGATE_WAIT_FOR_STORE")
            .env_remove("TOLLGATE_LOG_FORMAT")
            .env("TOLLGATE_LOG", "warn");
        if let Some(url) = redis {
            cmd.args(["--redis", url]);
        }
        cmd
    }

    /// Runs `cmd` and reads the listening line: text (the addresses are
    /// its words that start with a scheme) or a JSON object (`api`,
    /// `rooms`).
    pub fn spawn(mut cmd: Command, stderr: Stdio) -> Server {
        install_tls_provider();
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the listening line");
        let (base, proxy) = match serde_json::from_str::<Value>(&line) {
            Ok(json) => (
                json["api"].as_str().map(str::to_owned),
                json["rooms"].as_str().map(str::to_owned),
            ),
            Err(_) => {
                let mut addresses = line
                    .split_whitespace()
                    .filter(|w| w.starts_with("http://") || w.starts_with("https://"))
                    .map(|w| {
                        w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                            .to_owned()
                    });
                (addresses.next(), addresses.next())
            }
        };
        let base = base.unwrap_or_else(|| panic!("no address in {line:?}"));
        let data_dir = cmd
            .get_envs()
            .find(|(k, _)| *k == "TOLLGATE_DATA_DIR")
            .and_then(|(_, v)| v)
            .map(std::path::PathBuf::from)
            .filter(|p| p.starts_with(env!("CARGO_TARGET_TMPDIR")));
        Server {
            child,
            base,
            proxy,
            line,
            data_dir,
        }
    }

    /// The /metrics text, with `token` as bearer if given.
    pub async fn metrics(&self, token: Option<&str>) -> String {
        let mut req = reqwest::Client::new().get(self.url("/metrics"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Server {
    /// Stops the server as an operator does (SIGTERM) and waits for it to
    /// exit; fails the test if it does not within 20 s.
    pub fn terminate(mut self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
        assert!(sent.success());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while self.child.try_wait().expect("wait").is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "serve did not stop on SIGTERM"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.data_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// reqwest here has rustls without a provider of its own (the binary
/// picks ring): install ring for this test process, before any client is
/// built. Every test that starts a server has it; call it first otherwise.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub async fn send(req: reqwest::RequestBuilder) -> (u16, Value) {
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let body = resp.json::<Value>().await.unwrap_or(Value::Null);
    (status, body)
}

/// Runs scripts/check-metrics.py over a /metrics text: its verdict and
/// what it said.
pub fn check_metrics(text: &str) -> (bool, String) {
    use std::io::Write;
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut child = Command::new("python3")
        .arg(format!("{root}/scripts/check-metrics.py"))
        .arg(format!("{root}/docs/METRICS.md"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs (scripts/test installs prometheus-client)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write the text");
    let out = child.wait_with_output().expect("checker");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}
