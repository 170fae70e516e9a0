//! The container image (deploy/container/Dockerfile, built by
//! scripts/build-image from the binary under test) and compose.yaml, run
//! for real with podman: the image serves as an unprivileged user,
//! configured by environment variables and by a mounted file; its
//! HEALTHCHECK passes on a live server and fails on one that does not
//! answer where it probes; it stops cleanly on SIGTERM. compose runs it on
//! Redis with an append-only file: a lease taken before Redis is killed
//! (SIGKILL, no shutdown save) is still held after its container is
//! removed and compose makes a new one on the same volume.
//!
//! Each test keeps its images, containers, volumes and network
//! definitions in a store of its own under a temp dir (scripts/podman-store:
//! CONTAINERS_CONF and CONTAINERS_STORAGE_CONF), removed on drop, and
//! names its compose project after its process, so runs side by side stay
//! apart. What podman keeps machine-wide regardless (its address
//! allocations and DNS entries under /run/containers/networks, a blob
//! cache under /var/lib/containers/cache) is written to as by any podman
//! use. No registry is reachable: the Redis image for compose is
//! assembled from this machine's redis-server, as the tollgate image is.

mod serve_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use serve_support::{install_tls_provider, send};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const TOKEN: &str = "container-test-token-0123456789";

/// A private podman store; everything in it is removed on drop.
struct Podman {
    dir: tempfile::TempDir,
}

impl Podman {
    fn new() -> Podman {
        for tool in ["podman", "runc", "podman-compose", "strip", "ldd"] {
            which(tool);
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let out = Command::new("bash")
            .arg(format!("{ROOT}/scripts/podman-store"))
            .arg(dir.path())
            .output()
            .expect("run scripts/podman-store");
        succeeded("scripts/podman-store", out);
        let podman = Podman { dir };
        // Podman makes its lock segment (/dev/shm/libpod_lock) on its
        // first run on a machine: two stores' first commands at once both
        // find none, both make it, and one fails ("failed to create 2048
        // locks in /libpod_lock: file exists", seen on a fresh machine).
        // Each store's first command runs alone.
        static FIRST_RUN: std::sync::Mutex<()> = std::sync::Mutex::new(());
        {
            let _alone = FIRST_RUN
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            podman.ok(&["info", "--format", "{{.Version.Version}}"]);
        }
        podman
    }

    /// `program` with this store's configuration in its environment.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("CONTAINERS_CONF", self.dir.path().join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", self.dir.path().join("storage.conf"));
        cmd
    }

    /// `podman ARGS`, whatever its exit status.
    fn run(&self, args: &[&str]) -> Output {
        self.command("podman").args(args).output().expect("run podman")
    }

    /// `podman ARGS`, which must succeed: its standard output.
    fn ok(&self, args: &[&str]) -> String {
        succeeded(&format!("podman {args:?}"), self.run(args))
    }

    /// Builds the tollgate image from the binary under test with
    /// scripts/build-image, as `tag`.
    fn build_tollgate(&self, tag: &str) {
        let out = self
            .command("bash")
            .arg(format!("{ROOT}/scripts/build-image"))
            .arg(tag)
            .env("TOLLGATE_BIN", env!("CARGO_BIN_EXE_tollgate"))
            .env("CONTAINER_CLI", "podman")
            .output()
            .expect("run scripts/build-image");
        succeeded("scripts/build-image", out);
    }

    /// A Redis image from this machine's redis-server and redis-cli.
    fn build_redis(&self, tag: &str) {
        let context = self.dir.path().join("redis-image");
        let out = Command::new("bash")
            .arg(format!("{ROOT}/scripts/image-rootfs"))
            .arg(context.join("rootfs"))
            .arg(which("redis-server"))
            .arg(which("redis-cli"))
            .output()
            .expect("run scripts/image-rootfs");
        succeeded("scripts/image-rootfs", out);
        std::fs::create_dir_all(context.join("rootfs/data")).expect("data dir");
        std::fs::write(
            context.join("Dockerfile"),
            "FROM scratch\nCOPY rootfs/ /\nCMD [\"redis-server\"]\n",
        )
        .expect("write Dockerfile");
        self.ok(&["build", "-q", "-t", tag, &context.display().to_string()]);
    }

    /// The host pid of a running container.
    fn pid(&self, container: &str) -> u32 {
        self.ok(&["inspect", "--format", "{{.State.Pid}}", container])
            .parse()
            .expect("a pid")
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        // Containers first (their network set-up goes with them), then the
        // rest; the temp dir goes after.
        let _ = self.run(&["rm", "--all", "--force", "--time", "0"]);
        let _ = self.run(&["system", "reset", "--force"]);
    }
}

/// The path of `tool`; a missing one fails the test (scripts/test
/// installs them all).
fn which(tool: &str) -> String {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .expect("sh");
    assert!(
        out.status.success(),
        "{tool} is not installed: scripts/test installs it"
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The standard output of `what`, which must have succeeded.
fn succeeded(what: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("address")
        .port()
}

/// Polls `url` until it answers `want` (with `token` as bearer), for up to
/// 60 s: the answer's body.
async fn wait_for(url: &str, token: Option<&str>, want: u16) -> Value {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::from("no answer");
    while Instant::now() < deadline {
        let mut req = client.get(url).timeout(Duration::from_secs(2));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        match req.send().await {
            Ok(resp) if resp.status().as_u16() == want => {
                return resp.json().await.unwrap_or(Value::Null);
            }
            Ok(resp) => last = format!("{} {}", resp.status(), resp.text().await.unwrap_or_default()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{url} did not answer {want} within 60 s; last: {last}");
}

fn uid_of(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|uids| uids.split_whitespace().next())
        .expect("a Uid line")
        .to_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_runs_unprivileged_configured_by_env_and_file_with_a_working_health_check() {
    install_tls_provider();
    let podman = Podman::new();
    podman.build_tollgate("localhost/tollgate:test");
    let http = reqwest::Client::new();

    // Tokens from the environment, a named limit from a mounted file.
    let config = write(
        podman.dir.path(),
        "tollgate.toml",
        "[limits.signup]\nrate = \"2/min\"\n",
    );
    let port = free_port();
    podman.ok(&[
        "run",
        "-d",
        "--name",
        "tg",
        "-p",
        &format!("127.0.0.1:{port}:7700"),
        "-e",
        &format!("TOLLGATE_TOKENS={TOKEN}"),
        "-e",
        "TOLLGATE_CONFIG=/etc/tollgate/tollgate.toml",
        "-v",
        &format!("{}:/etc/tollgate/tollgate.toml:ro", config.display()),
        "localhost/tollgate:test",
    ]);
    let base = format!("http://127.0.0.1:{port}");
    let ready = wait_for(&format!("{base}/readyz"), None, 200).await;
    assert_eq!(ready["store"], "memory", "{ready}");

    // The environment's token is required…
    let (status, _) = send(http.get(format!("{base}/v1/gates/g"))).await;
    assert_eq!(status, 401, "the token from TOLLGATE_TOKENS is not in force");
    // …and the file's limit is there: two allowed, the third refused.
    let check = || {
        http.post(format!("{base}/v1/limits/signup/check"))
            .bearer_auth(TOKEN)
            .json(&json!({"key": "k"}))
    };
    assert_eq!(send(check()).await.0, 200);
    assert_eq!(send(check()).await.0, 200);
    let (status, body) = send(check()).await;
    assert_eq!(status, 429, "the mounted file's limit is not in force: {body}");

    // Not root: the server runs as the image's user, on the host too.
    assert_eq!(
        podman.ok(&["inspect", "--format", "{{.Config.User}}", "tg"]),
        "10001:10001"
    );
    assert_eq!(uid_of(podman.pid("tg")), "10001");

    // The image's HEALTHCHECK (run on demand: podman schedules it with
    // systemd, which does not run here) passes, and the probe tells
    // alive from ready.
    let health = podman.run(&["healthcheck", "run", "tg"]);
    assert!(
        health.status.success(),
        "healthcheck: {}",
        String::from_utf8_lossy(&health.stderr)
    );
    assert_eq!(
        podman.ok(&["inspect", "--format", "{{.State.Health.Status}}", "tg"]),
        "healthy"
    );
    let ready = podman.ok(&["exec", "tg", "/usr/local/bin/tollgate", "health", "--ready"]);
    assert!(ready.contains("\"ready\""), "{ready}");

    // A server that listens elsewhere than TOLLGATE_LISTEN says fails the
    // check: it probes for real.
    podman.ok(&[
        "run",
        "-d",
        "--name",
        "elsewhere",
        "localhost/tollgate:test",
        "serve",
        "--listen",
        "0.0.0.0:7701",
    ]);
    // Beyond loopback with no tokens: it says so (the one with tokens did
    // not). `run -d` returns before the server has logged: wait for it.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let logs = podman.run(&["logs", "elsewhere"]);
        if String::from_utf8_lossy(&logs.stderr).contains("no tokens set") {
            break;
        }
        assert!(Instant::now() < deadline, "{logs:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logs = podman.run(&["logs", "tg"]);
    assert!(
        !String::from_utf8_lossy(&logs.stderr).contains("no tokens set"),
        "{logs:?}"
    );
    let probe = podman.run(&["exec", "elsewhere", "/usr/local/bin/tollgate", "health"]);
    assert_eq!(probe.status.code(), Some(69), "{probe:?}");
    let health = podman.run(&["healthcheck", "run", "elsewhere"]);
    assert!(
        !health.status.success(),
        "a server not answering passed the healthcheck"
    );
    // Alive but not ready: a server still waiting for its Redis.
    podman.ok(&[
        "run",
        "-d",
        "--name",
        "waiting",
        "-e",
        "TOLLGATE_REDIS_URL=redis://127.0.0.1:1",
        "localhost/tollgate:test",
    ]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !podman
        .run(&["exec", "waiting", "/usr/local/bin/tollgate", "health"])
        .status
        .success()
    {
        assert!(Instant::now() < deadline, "the waiting server never came up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let probe = podman.run(&["exec", "waiting", "/usr/local/bin/tollgate", "health", "--ready"]);
    assert_eq!(probe.status.code(), Some(69), "{probe:?}");
    assert!(
        String::from_utf8_lossy(&probe.stderr).contains("not connected to the store"),
        "{probe:?}"
    );

    // SIGTERM (podman stop) ends it cleanly: exit 0, well within the
    // grace period.
    let started = Instant::now();
    podman.ok(&["stop", "--time", "20", "tg"]);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "stop took {:?}",
        started.elapsed()
    );
    assert_eq!(
        podman.ok(&["inspect", "--format", "{{.State.ExitCode}}", "tg"]),
        "0"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn compose_runs_it_on_redis_whose_append_only_file_survives_a_kill() {
    install_tls_provider();
    let podman = Podman::new();
    podman.build_tollgate("localhost/tollgate:compose");
    podman.build_redis("localhost/redis:compose");
    let (port, proxy_port) = (free_port(), free_port());
    let project = format!("tgtest{}", std::process::id());
    let compose = |args: &[&str]| {
        let out = podman
            .command("podman-compose")
            .current_dir(format!("{ROOT}/deploy/container"))
            .args(["-p", &project, "-f", "compose.yaml"])
            .args(args)
            .env("TOLLGATE_IMAGE", "localhost/tollgate:compose")
            .env("REDIS_IMAGE", "localhost/redis:compose")
            .env("TOLLGATE_TOKENS", TOKEN)
            .env("TOLLGATE_PORT", port.to_string())
            .env("TOLLGATE_PROXY_PORT", proxy_port.to_string())
            .output()
            .expect("run podman-compose");
        succeeded(&format!("podman-compose {args:?}"), out);
    };
    compose(&["up", "-d"]);
    let base = format!("http://127.0.0.1:{port}");
    let ready = wait_for(&format!("{base}/readyz"), None, 200).await;
    assert_eq!(ready["store"], "redis", "{ready}");

    let http = reqwest::Client::new();
    let enter = |queue: bool| {
        http.post(format!("{base}/v1/gates/stock/enter"))
            .bearer_auth(TOKEN)
            .json(&json!({"capacity": 1, "ttl_ms": 600_000, "queue": queue}))
    };
    let (status, lease) = send(enter(false)).await;
    assert_eq!(
        (status, lease["status"].as_str()),
        (200, Some("granted")),
        "{lease}"
    );
    // appendfsync everysec: past the second, the grant is on disk.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Kill Redis outright (no shutdown save) and remove its container
    // (its own layer goes with it): compose makes a new one, which has
    // only the volume to read.
    let redis = podman.ok(&[
        "ps",
        "--filter",
        "label=com.docker.compose.service=redis",
        "--format",
        "{{.Names}}",
    ]);
    assert!(
        !redis.is_empty() && !redis.contains('\n'),
        "redis container: {redis:?}"
    );
    podman.ok(&["kill", "--signal", "KILL", &redis]);
    podman.ok(&["rm", "--force", &redis]);
    compose(&["up", "-d"]);

    let stats = wait_for(&format!("{base}/v1/gates/stock"), Some(TOKEN), 200).await;
    assert_eq!(stats["used"], 1, "the lease did not survive: {stats}");
    assert_eq!(stats["fence"], lease["fence"], "{stats}");
    // And it still excludes: a second holder is turned away.
    let (status, busy) = send(enter(false)).await;
    assert_eq!((status, busy["status"].as_str()), (200, Some("busy")), "{busy}");
    // The lease taken before the kill can still be released.
    let token = lease["token"].as_str().expect("token");
    let (status, released) = send(
        http.delete(format!("{base}/v1/gates/stock/leases/{token}"))
            .bearer_auth(TOKEN),
    )
    .await;
    assert_eq!(status, 200, "{released}");

    compose(&["down", "--volumes"]);
}
