//! The documentation's shell examples run as written. Every ```sh block
//! in README.md and docs/*.md says what it is: `sh runnable` blocks are
//! run here, each against a fresh `tollgate serve` (embedded store, with a
//! `[limits.api]`) and an emptied redis-server, with `tollgate` on the
//! PATH; `sh illustrative` blocks (set-up commands, clusters, hosts of
//! your own) are not. The one liberty taken: `localhost:7700` and
//! `redis://127.0.0.1:6379` stand for the test's own free ports.
//!
//! A block fails if it exits non-zero (it runs under `bash -e -o
//! pipefail`) or prints an error answer (`{"error":`).

mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serve_support::Server;
use support::RedisServer;

/// A fenced ```sh block: where it is, its marker and its text.
struct Block {
    at: String,
    marker: String,
    text: String,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn blocks() -> Vec<Block> {
    let mut files = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read a doc");
        let name = file.file_name().expect("name").to_string_lossy().into_owned();
        let mut open: Option<Block> = None;
        for (n, line) in text.lines().enumerate() {
            match (&mut open, line.strip_prefix("```")) {
                (None, Some(info)) if info == "sh" || info.starts_with("sh ") => {
                    open = Some(Block {
                        at: format!("{name}:{}", n + 1),
                        marker: info.trim_start_matches("sh").trim().to_owned(),
                        text: String::new(),
                    });
                }
                (Some(_), Some("")) => found.extend(open.take()),
                (Some(b), _) => {
                    b.text.push_str(line);
                    b.text.push('\n');
                }
                _ => {}
            }
        }
    }
    found
}

#[test]
fn every_shell_block_says_whether_it_runs() {
    let blocks = blocks();
    assert!(blocks.len() > 10, "found only {} blocks", blocks.len());
    let unmarked: Vec<_> = blocks
        .iter()
        .filter(|b| b.marker != "runnable" && b.marker != "illustrative")
        .map(|b| format!("{} (```sh {})", b.at, b.marker))
        .collect();
    assert!(
        unmarked.is_empty(),
        "mark each ```sh block `sh runnable` (this test runs it) or `sh illustrative`: {unmarked:?}"
    );
}

/// What the runnable blocks run against: a redis-server, a config for
/// `tollgate serve`, and a PATH with `tollgate` on it.
struct Runner {
    redis: RedisServer,
    config: PathBuf,
    path: String,
    _dir: tempfile::TempDir,
}

impl Runner {
    fn new() -> Runner {
        let redis = RedisServer::start();
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("tollgate.toml");
        std::fs::write(&config, "[limits.api]\nrate = \"100/min\"\n").expect("config");
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_tollgate"));
        let path = format!(
            "{}:{}",
            bin.parent().expect("bin dir").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Runner {
            redis,
            config,
            path,
            _dir: dir,
        }
    }

    /// A fresh `tollgate serve` on an emptied redis-server.
    fn fresh_server(&self) -> Server {
        self.redis.command(&["FLUSHALL"]);
        Server::start_with(None, &["--config", self.config.to_str().expect("path")])
    }

    /// Runs `block` against `server`; panics with its output if it fails.
    fn run(&self, block: &Block, server: &Server) {
        let address = server.base.trim_start_matches("http://").to_owned();
        let script = block
            .text
            .replace("localhost:7700", &address)
            .replace("redis://127.0.0.1:6379", &self.redis.url());
        let work = tempfile::tempdir().expect("workdir");
        let out = tokio::task::block_in_place(|| {
            Command::new("timeout")
                .args(["60", "bash", "-e", "-o", "pipefail", "-c", &script])
                .current_dir(work.path())
                .env("PATH", &self.path)
                .env_remove("TOLLGATE_REDIS_URL")
                .env_remove("TOLLGATE_SERVER")
                .output()
                .expect("bash runs")
        });
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !stdout.contains("{\"error\":"),
            "{} failed ({:?}):\n{script}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
            block.at,
            out.status
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runnable_examples_run_as_written() {
    let runner = Runner::new();
    let runnable: Vec<Block> = blocks().into_iter().filter(|b| b.marker == "runnable").collect();
    assert!(runnable.len() >= 4, "only {} runnable blocks", runnable.len());
    for block in runnable {
        let server = runner.fresh_server();
        runner.run(&block, &server);
        drop(server);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A reader tries README's first request, then HTTP.md's gate walk-through
/// twice, on one server within a minute: the walk-through uses gates of its
/// own and releases what it takes, so neither run finds a title held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_walk_through_runs_after_the_readme_and_again() {
    let runner = Runner::new();
    let runnable: Vec<Block> = blocks().into_iter().filter(|b| b.marker == "runnable").collect();
    let first = |file: &str, needle: &str| {
        runnable
            .iter()
            .find(|b| b.at.starts_with(file) && b.text.contains(needle))
            .unwrap_or_else(|| panic!("no runnable block in {file} with {needle}"))
    };
    let readme = first("README.md:", "/v1/gates/");
    let walk = first("HTTP.md:", "/enter");
    let server = runner.fresh_server();
    runner.run(readme, &server);
    runner.run(walk, &server);
    runner.run(walk, &server);
}
