//! `tollgate health`: alive and ready from a running server, by URL or by
//! `TOLLGATE_LISTEN`'s port (past any proxy the environment names); alive
//! but not ready while the server waits for its Redis; and each failure's
//! exit code: no answer (69, also past `--timeout` or an answer cut off),
//! not a tollgate server (78: another page, a redirect), a bad URL (64).

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

    // A proxy in the environment is not asked to reach this machine's port.
    let out = health(
        &[],
        &[
            ("TOLLGATE_LISTEN", &format!("0.0.0.0:{port}")),
            ("http_proxy", "http://127.0.0.1:9"),
            ("HTTP_PROXY", "http://127.0.0.1:9"),
            ("ALL_PROXY", "http://127.0.0.1:9"),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // Something else answers there: a set-up mistake.
    let out = health(&["--server", &format!("{base}/not-here")], &[]);
    assert_eq!(out.status.code(), Some(78), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("404"), "{}", text(&out.stderr));

    // Bad input.
    for bad in [
        &["--server", "ftp://127.0.0.1:1"][..],
        &["--timeout", "5"][..],
        &["--timeout", "0s"][..],
        &["--server", "http://127.0.0.1:99999"][..],
        &["--server", "http://"][..],
    ] {
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

/// A one-connection-at-a-time HTTP server answering `answer` (bytes as
/// sent) to every request, for as long as the test runs.
fn canned(answer: &'static [u8]) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut head = [0u8; 4096];
            let _ = conn.read(&mut head);
            let _ = conn.write_all(answer);
            // (Dropped: the connection closes, cutting off what was promised.)
        }
    });
    url
}

#[test]
fn what_is_not_a_tollgate_answer_fails_the_probe() {
    let cases: [(&[u8], i32, &str); 4] = [
        // Another site's page.
        (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 13\r\n\r\n<html></html>",
            78,
            "not as a `tollgate serve` does",
        ),
        // JSON, but not a tollgate probe's.
        (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
            78,
            "not as a `tollgate serve` does",
        ),
        // A redirect is not followed.
        (
            b"HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:1/healthz\r\ncontent-length: 0\r\n\r\n",
            78,
            "302",
        ),
        // The promised body never comes.
        (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"status\"",
            69,
            "broke off",
        ),
    ];
    // Any command with --server: a redirect is the set-up's mistake, not
    // followed (it could carry the token elsewhere).
    let redirect =
        canned(b"HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:1/\r\ncontent-length: 0\r\n\r\n");
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "lock",
            "status",
            "x",
            "--server",
            &redirect,
            "--server-token",
            "some-token-0123456789",
        ])
        .output()
        .expect("run tollgate");
    assert_eq!(out.status.code(), Some(78), "{}", text(&out.stderr));
    for (answer, code, says) in cases {
        let url = canned(answer);
        let out = health(&["--server", &url, "--timeout", "2s"], &[]);
        let err = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{}: {err}",
            String::from_utf8_lossy(answer)
        );
        assert!(err.contains(says), "{err}");
    }
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
