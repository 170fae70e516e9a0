//! `tollgate health`: alive and ready from a running server, by URL or by
//! `TOLLGATE_LISTEN`'s port; alive but not ready while the server waits
//! for its Redis; and each failure's exit code: no answer (69, also past
//! `--timeout`), not a tollgate server (78), a bad URL (64).

mod serve_support;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serve_support::Server;

fn health(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.arg("health")
        .args(args)
        .env_remove("TOLLGATE_SERVER")
        .env_remove("TOLLGATE_LISTEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run tollgate health")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_running_server_is_alive_and_ready_and_failures_have_their_codes() {
    let server = Server::start(None);
    let base = server.url("");
    let port = base.rsplit(':').next().expect("a port").to_owned();

    let out = health(&["--server", &base], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), r#"{"status":"ok"}"#);
    let out = health(&["--server", &base, "--ready"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(r#""status":"ready""#),
        "{}",
        text(&out.stdout)
    );

    // No URL: this machine, at the port `serve` is told by TOLLGATE_LISTEN
    // (a wildcard host is reached over loopback).
    let out = health(&[], &[("TOLLGATE_LISTEN", &format!("0.0.0.0:{port}"))]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = health(&["--ready"], &[("TOLLGATE_SERVER", &base)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // Something else answers there: a set-up mistake.
    let out = health(&["--server", &format!("{base}/not-here")], &[]);
    assert_eq!(out.status.code(), Some(78), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("404"), "{}", text(&out.stderr));

    // Bad input.
    for bad in [&["--server", "ftp://127.0.0.1:1"][..], &["--timeout", "5"][..]] {
        let out = health(bad, &[]);
        assert_eq!(out.status.code(), Some(64), "{bad:?}: {}", text(&out.stderr));
    }
    let out = health(&[], &[("TOLLGATE_LISTEN", "no-port")]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("TOLLGATE_LISTEN"),
        "{}",
        text(&out.stderr)
    );

    // Nobody listens: 69.
    drop(server);
    let out = health(&["--server", &base], &[]);
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("cannot reach"),
        "{}",
        text(&out.stderr)
    );

    // A listener that never answers: 69 once --timeout has passed.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", silent.local_addr().expect("address"));
    let started = Instant::now();
    let out = health(&["--server", &url, "--timeout", "300ms"], &[]);
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_server_waiting_for_its_redis_is_alive_but_not_ready() {
    // Nothing listens on port 1: the server keeps retrying. (Not
    // `Server::start`, which waits for the store.)
    let server = Server::spawn(
        Server::command(Some("redis://127.0.0.1:1"), &[]),
        std::process::Stdio::null(),
    );
    let base = server.url("");
    let out = health(&["--server", &base], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = health(&["--server", &base, "--ready"], &[]);
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("not connected to the store"),
        "{}",
        text(&out.stderr)
    );
}
