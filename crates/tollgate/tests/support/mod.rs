//! Test support: real redis-server processes, started and killed by the
//! tests themselves, and a harness that runs one test body on both stores.
#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::{ManualClock, Store};

/// A redis-server child on a free loopback port, with persistence off and
/// its own temp dir. Killed on drop. Panics loudly if it cannot start:
/// these tests never skip for want of Redis.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    /// Set for a TLS-only server: the TLS port (`port` is then 0).
    pub tls_port: Option<u16>,
}

/// The `cluster-node-timeout` of test clusters: 2 s, or
/// `TOLLGATE_TEST_NODE_TIMEOUT_MS` (to measure failover at other values).
pub fn cluster_node_timeout() -> Duration {
    let ms = std::env::var("TOLLGATE_TEST_NODE_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    Duration::from_millis(ms)
}

/// A free loopback port (for a server started on it later:
/// [`RedisServer::start_on_port`]).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

/// Whether every replica a master's `INFO replication` lists is online
/// (synced and acknowledging), as WAIT needs.
fn replicas_online(info: &str) -> bool {
    info.lines()
        .filter(|l| l.starts_with("slave") && l.contains("ip="))
        .all(|l| l.contains("state=online"))
}

/// A free port below 55536 whose cluster bus port (+10000) is free too.
fn free_cluster_port() -> u16 {
    for _ in 0..1000 {
        let port = free_port();
        if port < 55_536 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
    panic!("no free port pair for a cluster node");
}

impl RedisServer {
    pub fn start() -> RedisServer {
        RedisServer::start_with(|_, _| Vec::new(), false)
    }

    /// A server started with these extra arguments.
    pub fn start_with_args(args: &[&str]) -> RedisServer {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        RedisServer::start_with(move |_, _| args.clone(), false)
    }

    /// A server that logs every write to its append-only file before
    /// answering (`appendfsync always`): a restart loses nothing.
    pub fn start_aof() -> RedisServer {
        RedisServer::start_with(
            |_, _| {
                ["--appendonly", "yes", "--appendfsync", "always"]
                    .map(String::from)
                    .to_vec()
            },
            false,
        )
    }

    /// A fresh master and a synced replica of it (started off the async
    /// runtime's threads: syncing blocks).
    pub async fn start_with_replica() -> (RedisServer, RedisServer) {
        tokio::task::spawn_blocking(|| {
            let master = RedisServer::start();
            let replica = RedisServer::start_replica_of(master.port);
            (master, replica)
        })
        .await
        .expect("master and replica")
    }

    /// A replica of the server on `port`, synced before this returns.
    pub fn start_replica_of(port: u16) -> RedisServer {
        // The master sends its data at once (its default waits 5 s).
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("client");
        let mut conn = client.get_connection().expect("the master answers");
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("repl-diskless-sync-delay")
            .arg("0")
            .query(&mut conn)
            .expect("config set");
        let replica = RedisServer::start_with(
            move |_, _| {
                vec![
                    "--replicaof".into(),
                    "127.0.0.1".into(),
                    port.to_string(),
                    "--repl-diskless-sync-delay".into(),
                    "0".into(),
                ]
            },
            false,
        );
        let start = Instant::now();
        loop {
            // The master counts a replica (for WAIT) once it is online: after
            // the sync and its first acknowledgement.
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut conn)
                .unwrap_or_default();
            if replicas_online(&info) && info.contains("connected_slaves:1") {
                // And it acknowledges a write (the stream flows).
                let _: () = redis::cmd("SET")
                    .arg("replica:warm")
                    .arg("1")
                    .query(&mut conn)
                    .expect("set");
                let acked: i64 = redis::cmd("WAIT")
                    .arg(1)
                    .arg(1000)
                    .query(&mut conn)
                    .expect("wait");
                if acked == 1 {
                    let _: () = redis::cmd("DEL")
                        .arg("replica:warm")
                        .query(&mut conn)
                        .expect("del");
                    return replica;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the replica did not sync: {info}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A server that listens on a unix socket in its temp dir as well.
    pub fn start_unix() -> RedisServer {
        RedisServer::start_with(
            |dir, _| {
                vec![
                    "--unixsocket".into(),
                    dir.join("redis.sock").display().to_string(),
                ]
            },
            false,
        )
    }

    /// A server that speaks only TLS, with a fresh self-signed certificate.
    pub fn start_tls() -> RedisServer {
        RedisServer::start_with(
            |dir, port| {
                let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
                self_signed(&["-newkey", "rsa:2048", "-subj", "/CN=localhost"], &cert, &key);
                vec![
                    "--tls-port".into(),
                    port.to_string(),
                    "--tls-cert-file".into(),
                    cert.display().to_string(),
                    "--tls-key-file".into(),
                    key.display().to_string(),
                    "--tls-ca-cert-file".into(),
                    cert.display().to_string(),
                    "--tls-auth-clients".into(),
                    "no".into(),
                ]
            },
            true,
        )
    }

    /// A node for a Redis Cluster (its bus port, port + 10000, is free too),
    /// with a short node timeout so failovers in tests are quick.
    pub fn start_cluster_node() -> RedisServer {
        let timeout = cluster_node_timeout().as_millis().to_string();
        RedisServer::start_on(
            move |dir, _| {
                vec![
                    "--cluster-enabled".into(),
                    "yes".into(),
                    "--cluster-config-file".into(),
                    dir.join("nodes.conf").display().to_string(),
                    "--cluster-node-timeout".into(),
                    timeout.clone(),
                    // Replicas sync at once (the default waits 5 s), so a
                    // fresh cluster's replicas are ready to take over.
                    "--repl-diskless-sync-delay".into(),
                    "0".into(),
                ]
            },
            false,
            free_cluster_port,
        )
    }

    /// On `port` (from [`free_port`]): for a client started before its
    /// Redis.
    pub fn start_on_port(port: u16) -> RedisServer {
        let mut server = RedisServer {
            child: None,
            port,
            dir: tempfile::tempdir().expect("temp dir"),
            extra: Vec::new(),
            tls_port: None,
        };
        if let Err(e) = server.spawn() {
            panic!("could not start redis-server on port {port}: {e}");
        }
        server
    }

    fn start_with(extra: impl Fn(&std::path::Path, u16) -> Vec<String>, tls: bool) -> RedisServer {
        RedisServer::start_on(extra, tls, free_port)
    }

    fn start_on(
        extra: impl Fn(&std::path::Path, u16) -> Vec<String>,
        tls: bool,
        pick_port: fn() -> u16,
    ) -> RedisServer {
        let mut last_err = String::new();
        for _ in 0..5 {
            let dir = tempfile::tempdir().expect("temp dir");
            let port = pick_port();
            let args = extra(dir.path(), port);
            let (port, tls_port) = if tls { (0, Some(port)) } else { (port, None) };
            let mut server = RedisServer {
                child: None,
                port,
                dir,
                extra: args,
                tls_port,
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(e) => last_err = e,
            }
        }
        panic!("could not start redis-server: {last_err}");
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn spawn(&mut self) -> Result<(), String> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("cannot run redis-server ({e}); install it with `apt-get install -y redis-server`")
            })?;
        self.child = Some(child);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
                return Err(format!("redis-server exited with {status}: {log}"));
            }
            if self.ping() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        Err(format!("redis-server did not answer within 10 s: {log}"))
    }

    fn ping(&self) -> bool {
        use std::io::{Read, Write};
        if let Some(port) = self.tls_port {
            // Not speaking TLS here: being accepted is enough.
            return std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                && std::fs::read_to_string(self.log_path()).is_ok_and(|l| l.contains("Ready to accept"));
        }
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    pub fn url(&self) -> String {
        match self.tls_port {
            // The certificate is self-signed: skip verification.
            Some(port) => format!("rediss://127.0.0.1:{port}/#insecure"),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    pub fn socket_url(&self) -> String {
        format!("unix://{}", self.dir.path().join("redis.sock").display())
    }

    /// The server's process id, for signals (SIGSTOP freezes it).
    pub fn pid(&self) -> nix::unistd::Pid {
        let child = self.child.as_ref().expect("redis-server is running");
        nix::unistd::Pid::from_raw(child.id() as i32)
    }

    /// Kills the server (SIGKILL: like a crash) and waits for it to go.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port (empty: persistence is off).
    pub fn restart(&mut self) {
        self.kill();
        let start = Instant::now();
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(e) if start.elapsed() > Duration::from_secs(10) => panic!("restart failed: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// The append-only file Redis is writing to now (Redis 7's multi-part
    /// AOF: the `.incr.aof` file in `appendonlydir`), for a test that
    /// cuts its tail.
    pub fn aof_incr_file(&self) -> PathBuf {
        let dir = self.dir.path().join("appendonlydir");
        let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("entry").path())
            .filter(|p| p.to_string_lossy().ends_with(".incr.aof"))
            .collect();
        found.sort();
        found.pop().expect("an .incr.aof file")
    }

    /// Runs a command through redis-cli-free raw RESP, for inspection.
    pub fn command(&self, args: &[&str]) -> redis::Value {
        let client = redis::Client::open(self.url()).expect("client");
        let mut conn = client.get_connection().expect("connection");
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut conn).expect("command")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis Cluster of `masters` masters with `replicas` replicas each, on
/// loopback, made with `redis-cli --cluster create`. Killed on drop.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| RedisServer::start_cluster_node())
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli must be installed (it comes with redis-server)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_ok(Duration::from_secs(20));
        if replicas > 0 {
            cluster.warm_replicas();
        }
        cluster
    }

    /// Waits until every master's replicas acknowledge a write: a replica
    /// fresh from its first sync may not for up to a second, and WAIT
    /// (durable handles) counts only acknowledgements.
    fn warm_replicas(&self) {
        for node in &self.nodes {
            let client = redis::Client::open(node.url()).expect("client");
            let mut conn = client.get_connection().expect("connection");
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut conn)
                .expect("info");
            if !info.contains("role:master") {
                continue;
            }
            let start = Instant::now();
            let mut i = 0;
            loop {
                // A key this master owns (others answer MOVED).
                let key = format!("warm:{{{i}}}");
                if redis::cmd("SET")
                    .arg(&key)
                    .arg("1")
                    .query::<()>(&mut conn)
                    .is_err()
                {
                    i += 1;
                    continue;
                }
                let acked: i64 = redis::cmd("WAIT")
                    .arg(1)
                    .arg(1000)
                    .query(&mut conn)
                    .expect("wait");
                let _: () = redis::cmd("DEL").arg(&key).query(&mut conn).expect("del");
                if acked >= 1 {
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "a replica never acknowledged"
                );
            }
        }
    }

    /// Waits until every running node says the cluster is ok and knows all
    /// nodes.
    pub fn wait_ok(&self, timeout: Duration) {
        let start = Instant::now();
        loop {
            let ok = self.nodes.iter().filter(|n| n.child.is_some()).all(|n| {
                let Ok(client) = redis::Client::open(n.url()) else {
                    return false;
                };
                let Ok(mut conn) = client.get_connection() else {
                    return false;
                };
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut conn)
                    .unwrap_or_default();
                let repl: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut conn)
                    .unwrap_or_default();
                // A replica must have synced with its master to take over,
                // and a master must see its replicas online.
                let synced = if repl.contains("role:slave") {
                    repl.contains("master_link_status:up")
                } else {
                    replicas_online(&repl)
                };
                info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384") && synced
            });
            if ok {
                return;
            }
            assert!(
                start.elapsed() < timeout,
                "the cluster did not become ok within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The index in `nodes` of the master that serves `key`'s slot now,
    /// asked of a running node.
    pub fn master_of(&self, key: &str) -> usize {
        let node = self
            .nodes
            .iter()
            .find(|n| n.child.is_some())
            .expect("a running node");
        let client = redis::Client::open(node.url()).expect("client");
        let mut conn = client.get_connection().expect("connection");
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut conn)
            .expect("keyslot");
        let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut conn)
            .expect("slots");
        for range in slots {
            let redis::Value::Array(items) = range else {
                continue;
            };
            let (Some(start), Some(end), Some(redis::Value::Array(master))) = (
                items
                    .first()
                    .and_then(|v| redis::from_redis_value_ref::<i64>(v).ok()),
                items
                    .get(1)
                    .and_then(|v| redis::from_redis_value_ref::<i64>(v).ok()),
                items.get(2),
            ) else {
                continue;
            };
            if (start..=end).contains(&slot) {
                let port: i64 = master
                    .get(1)
                    .and_then(|v| redis::from_redis_value_ref(v).ok())
                    .expect("master port");
                return self
                    .nodes
                    .iter()
                    .position(|n| i64::from(n.port) == port)
                    .expect("the master is one of ours");
            }
        }
        panic!("no master serves slot {slot}");
    }

    /// `redis+cluster://127.0.0.1:p1,127.0.0.1:p2,…` (every node a seed).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }
}

/// A Redis Sentinel (one, with quorum 1) watching a master as `mymaster`,
/// on a free loopback port. Killed on drop.
pub struct RedisSentinel {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl RedisSentinel {
    pub fn start(master_port: u16) -> RedisSentinel {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nlogfile {}\n\
                 sentinel monitor mymaster 127.0.0.1 {master_port} 1\n\
                 sentinel down-after-milliseconds mymaster 1000\n\
                 sentinel failover-timeout mymaster 5000\n",
                dir.path().display(),
                dir.path().join("sentinel.log").display()
            ),
        )
        .expect("sentinel.conf");
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server --sentinel");
        let sentinel = RedisSentinel {
            child,
            port,
            _dir: dir,
        };
        let start = Instant::now();
        loop {
            let known = redis::Client::open(format!("redis://127.0.0.1:{port}"))
                .and_then(|c| c.get_connection())
                .and_then(|mut c| {
                    redis::cmd("SENTINEL")
                        .arg("get-master-addr-by-name")
                        .arg("mymaster")
                        .query::<Option<(String, u16)>>(&mut c)
                });
            if matches!(known, Ok(Some(_))) {
                return sentinel;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the Sentinel did not start: {known:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The master's port as this Sentinel names it now.
    pub fn master_port(&self) -> Option<u16> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}", self.port)).ok()?;
        let mut conn = client.get_connection().ok()?;
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("mymaster")
            .query::<Option<(String, u16)>>(&mut conn)
            .ok()
            .flatten()
            .map(|(_, p)| p)
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Sentinel-managed master with one replica.
pub struct SentinelSet {
    pub master: RedisServer,
    pub replica: RedisServer,
    pub sentinel: RedisSentinel,
}

impl SentinelSet {
    pub fn start() -> SentinelSet {
        let master = RedisServer::start();
        let replica = RedisServer::start_replica_of(master.port);
        let sentinel = RedisSentinel::start(master.port);
        SentinelSet {
            master,
            replica,
            sentinel,
        }
    }

    pub fn url(&self) -> String {
        format!("redis+sentinel://127.0.0.1:{}/mymaster", self.sentinel.port)
    }
}

/// One store under test: memory on a hand-moved clock, or a fresh Redis.
pub struct TestStore {
    pub store: Store,
    pub clock: Option<ManualClock>,
    pub server: Option<RedisServer>,
    pub cluster: Option<RedisCluster>,
    pub sentinel: Option<SentinelSet>,
    /// The durable embedded store's data directory, removed on drop.
    pub dir: Option<tempfile::TempDir>,
}

impl TestStore {
    /// Memory on the system clock, for tests of leases and waits that run
    /// in real time on both stores.
    pub fn memory_realtime() -> TestStore {
        TestStore {
            store: Store::memory(),
            clock: None,
            server: None,
            cluster: None,
            sentinel: None,
            dir: None,
        }
    }

    pub fn memory() -> TestStore {
        let clock = ManualClock::default();
        TestStore {
            store: Store::memory_with_clock(Arc::new(clock.clone())),
            clock: Some(clock),
            server: None,
            cluster: None,
            sentinel: None,
            dir: None,
        }
    }

    /// The durable embedded store in a temp dir, syncing before every
    /// answer (group commit), on a hand-moved clock.
    pub fn durable() -> TestStore {
        let clock = ManualClock::default();
        let mut ts = TestStore::durable_with(Arc::new(clock.clone()));
        ts.clock = Some(clock);
        ts
    }

    /// The durable embedded store on the system clock.
    pub fn durable_realtime() -> TestStore {
        TestStore::durable_with(Arc::new(tollgate::SystemClock))
    }

    fn durable_with(clock: Arc<dyn tollgate::Clock>) -> TestStore {
        let dir = tempfile::tempdir().expect("tempdir");
        let memory = tollgate::MemoryOptions {
            clock,
            ..tollgate::MemoryOptions::default()
        };
        let durable = tollgate::DurableOptions {
            fsync: tollgate::Fsync::Always,
            ..tollgate::DurableOptions::new(dir.path())
        };
        let (store, _) = Store::open_with(memory, durable).expect("open the durable store");
        TestStore {
            store,
            clock: None,
            server: None,
            cluster: None,
            sentinel: None,
            dir: Some(dir),
        }
    }

    pub async fn redis() -> TestStore {
        let server = RedisServer::start();
        let store = Store::redis(&server.url()).await.expect("connect to test redis");
        TestStore {
            store,
            clock: None,
            server: Some(server),
            cluster: None,
            sentinel: None,
            dir: None,
        }
    }

    /// A fresh 3-master Redis Cluster (no replicas).
    pub async fn cluster() -> TestStore {
        let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 0))
            .await
            .expect("cluster start");
        let store = Store::redis(&cluster.url())
            .await
            .expect("connect to the test cluster");
        TestStore {
            store,
            clock: None,
            server: None,
            cluster: Some(cluster),
            sentinel: None,
            dir: None,
        }
    }

    /// A fresh Sentinel-managed master with one replica.
    pub async fn sentinel() -> TestStore {
        let set = tokio::task::spawn_blocking(SentinelSet::start)
            .await
            .expect("sentinel start");
        let store = Store::redis(&set.url())
            .await
            .expect("connect through the Sentinel");
        TestStore {
            store,
            clock: None,
            server: None,
            cluster: None,
            sentinel: Some(set),
            dir: None,
        }
    }

    /// Lets `d` of store time pass: moves the manual clock, or sleeps while
    /// Redis's clock runs.
    pub async fn advance(&self, d: Duration) {
        match &self.clock {
            Some(c) => c.advance(d),
            None => tokio::time::sleep(d).await,
        }
    }
}

/// Declares `async fn NAME(ts: TestStore)` bodies as tests on both stores.
/// `manual_clock:` runs the memory variant on a hand-moved clock;
/// `realtime:` on the system clock (for leases renewed in the background).
#[macro_export]
macro_rules! on_both_stores {
    (manual_clock: $($name:ident),* $(,)?) => {
        $crate::on_both_stores!(@ memory, durable, $($name),*);
    };
    (realtime: $($name:ident),* $(,)?) => {
        $crate::on_both_stores!(@ memory_realtime, durable_realtime, $($name),*);
    };
    (@ $memory:ident, $durable:ident, $($name:ident),*) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::support::TestStore::$memory()).await
                }
            )*
        }
        mod durable {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::support::TestStore::$durable()).await
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::support::TestStore::redis().await).await
                }
            )*
        }
        mod cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::support::TestStore::cluster().await).await
                }
            )*
        }
        mod sentinel {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::support::TestStore::sentinel().await).await
                }
            )*
        }
    };
}

/// A fresh self-signed certificate for a test, valid a day:
/// `openssl req -x509 -nodes` with `args` (the key type, the subject, any
/// extensions), its certificate to `cert` and its key to `key`.
pub fn self_signed(args: &[&str], cert: &std::path::Path, key: &std::path::Path) {
    let ok = Command::new("openssl")
        .args(["req", "-x509", "-nodes", "-days", "1"])
        .args(args)
        .arg("-keyout")
        .arg(key)
        .arg("-out")
        .arg(cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl must be installed for the TLS tests (scripts/test installs it)");
    assert!(ok.success(), "openssl could not make a certificate");
}
