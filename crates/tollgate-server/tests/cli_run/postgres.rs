//! A PostgreSQL server of the test's own: Debian's `postgresql` binaries
//! (found in PATH or /usr/lib/postgresql/*/bin), a cluster made by initdb
//! in a temp dir, listening on a Unix socket there only, on a free port
//! number; stopped on drop. As root it runs as the `postgres` user (the
//! server refuses root).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

pub(crate) struct Postgres {
    child: Option<Child>,
    dir: tempfile::TempDir,
    port: u16,
}

/// The folder holding initdb and postgres: beside them in PATH, else the
/// newest /usr/lib/postgresql/N/bin. Fails loudly without one.
fn bin_dir() -> PathBuf {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file() && dir.join("postgres").is_file() {
                return dir;
            }
        }
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, bin)| bin)
        .expect("PostgreSQL's initdb and postgres are needed (Debian: apt-get install postgresql); scripts/test installs them")
}

/// The postgres user's uid and gid, when this runs as root.
fn server_user() -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let user = nix::unistd::User::from_name("postgres")
        .expect("users")
        .expect("the postgres user (Debian's postgresql package makes it)");
    Some((user.uid.as_raw(), user.gid.as_raw()))
}

/// `program` with `args`, as the postgres user when this is root.
fn as_server_user(program: &Path, args: &[&str]) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(program);
    c.args(args);
    if let Some((uid, gid)) = server_user() {
        c.uid(uid).gid(gid);
    }
    c
}

impl Postgres {
    pub(crate) fn start() -> Postgres {
        let bin = bin_dir();
        let dir = tempfile::tempdir().expect("temp dir");
        let owner = |path: &Path| {
            if let Some((uid, gid)) = server_user() {
                let (uid, gid) = (nix::unistd::Uid::from_raw(uid), nix::unistd::Gid::from_raw(gid));
                nix::unistd::chown(path, Some(uid), Some(gid)).expect("chown");
            }
        };
        owner(dir.path());
        let data = dir.path().join("data");
        let (data_s, sock_s) = (data.to_str().expect("utf-8"), dir.path().to_str().expect("utf-8"));
        let init = as_server_user(
            &bin.join("initdb"),
            &[
                "-D",
                data_s,
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        )
        .stdout(Stdio::null())
        .output()
        .expect("run initdb");
        assert!(
            init.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let port = crate::support::free_port();
        let port_s = port.to_string();
        let log = std::fs::File::create(dir.path().join("server.log")).expect("log");
        let child = as_server_user(
            &bin.join("postgres"),
            &[
                "-D",
                data_s,
                "-p",
                &port_s,
                "-k",
                sock_s,
                "-c",
                "listen_addresses=",
                "-c",
                "fsync=off",
            ],
        )
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start postgres");
        let pg = Postgres {
            child: Some(child),
            dir,
            port,
        };
        let start = Instant::now();
        loop {
            if pg.psql("SELECT 1").status.success() {
                return pg;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "postgres did not start: {}",
                std::fs::read_to_string(pg.dir.path().join("server.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// psql's arguments for this server: quiet, unaligned, stop on error.
    pub(crate) fn psql_args(&self) -> Vec<String> {
        [
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-h",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .chain([
            self.dir.path().display().to_string(),
            "-p".to_owned(),
            self.port.to_string(),
        ])
        .collect()
    }

    /// The same as one shell string, for commands run by `sh -c`.
    pub(crate) fn psql_line(&self) -> String {
        format!("psql {}", self.psql_args().join(" "))
    }

    pub(crate) fn psql(&self, sql: &str) -> Output {
        Command::new("psql")
            .args(self.psql_args())
            .args(["-c", sql])
            .output()
            .expect("run psql")
    }

    /// Runs `sql` and returns what it printed, or fails the test.
    pub(crate) fn query(&self, sql: &str) -> String {
        let o = self.psql(sql);
        assert!(
            o.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    }

    pub(crate) fn run_file(&self, file: &Path) {
        let o = Command::new("psql")
            .args(self.psql_args())
            .arg("-f")
            .arg(file)
            .output()
            .expect("run psql");
        assert!(
            o.status.success(),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SIGQUIT is postgres's immediate stop.
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGQUIT);
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
