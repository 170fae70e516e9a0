//! `tollgate serve` over TLS (`--tls-cert`, `--tls-key`): the API answers
//! on https only, the CLI reaches it with `--ca-file` and refuses it
//! without, the certificate is swapped on SIGHUP (and a bad new one is
//! refused while the old one keeps serving), the session cookie is Secure
//! and the same-origin check takes https for the scheme; the waiting
//! rooms' listener speaks TLS too, sets its cookie Secure and tells the
//! upstream so; idle connections from one address stop neither another
//! address's handshakes nor the other listener's; a bad pair stops the
//! server at start, and a SIGHUP before the server is ready does not stop
//! it.

mod room_support;
mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use serve_support::{Server, install_tls_provider};

/// A fresh self-signed certificate for 127.0.0.1 and localhost (not a CA,
/// so it can be a server's), and its key: `dir/<name>.pem`,
/// `dir/<name>.key`.
fn certificate(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    certificate_for(dir, name, "DNS:localhost,IP:127.0.0.1")
}

/// The same, naming `names` (a subjectAltName value) only.
fn certificate_for(dir: &Path, name: &str, names: &str) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
    let (subject, names) = (format!("/CN={name}"), format!("subjectAltName={names}"));
    support::self_signed(
        &[
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-subj",
            &subject,
            "-addext",
            &names,
            "-addext",
            "basicConstraints=critical,CA:FALSE",
        ],
        &cert,
        &key,
    );
    (cert, key)
}

/// `tollgate serve` (embedded store unless `extra` names Redis) serving
/// TLS with `cert` and `key`.
fn serve_tls(cert: &Path, key: &Path, extra: &[&str]) -> Server {
    let (cert, key) = (cert.to_str().expect("utf-8"), key.to_str().expect("utf-8"));
    let mut args = vec!["--tls-cert", cert, "--tls-key", key];
    args.extend_from_slice(extra);
    Server::start_with(None, &args)
}

/// A client that trusts `ca` only.
fn client(ca: &Path) -> reqwest::Client {
    client_from(ca, None)
}

/// The same, connecting from `local` if given.
fn client_from(ca: &Path, local: Option<std::net::IpAddr>) -> reqwest::Client {
    install_tls_provider();
    let pem = std::fs::read(ca).expect("read the certificate");
    let cert = reqwest::Certificate::from_pem(&pem).expect("a PEM certificate");
    reqwest::Client::builder()
        .tls_certs_only([cert])
        .local_address(local)
        .timeout(Duration::from_secs(8))
        .build()
        .expect("client")
}

/// A room of one slot behind TLS (both listeners): the server, the
/// certificate, the temp dir and the rooms' address.
async fn tls_room() -> (Server, PathBuf, tempfile::TempDir, String) {
    let (_seen, up, dir) = room_support::site().await;
    let (cert, key) = certificate(dir.path(), "rooms");
    // The TLS keys first: they are top-level, the room is a table.
    let config = format!(
        "tls_cert = {:?}\ntls_key = {:?}\n{}",
        cert.to_str().expect("utf-8"),
        key.to_str().expect("utf-8"),
        room_support::room_config(up, 1, "")
    );
    let s = room_support::start(&dir, &config, None);
    let proxy = s.proxy.clone().expect("the rooms' address");
    (s, cert, dir, proxy)
}

fn tollgate(args: &[&str], ca: Option<&Path>) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    cmd.args(args).env_remove("TOLLGATE_CA_FILE");
    if let Some(ca) = ca {
        cmd.arg("--ca-file").arg(ca);
    }
    let out = cmd.output().expect("run tollgate");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// OpenSSL 3's plain `openssl req -x509` marks its certificate a CA
/// (`CA:TRUE`), which webpki refuses as a server's: given by `--ca-file`,
/// the very certificate the server shows is trusted all the same, still
/// only for its own names.
#[test]
fn a_self_signed_ca_certificate_given_by_ca_file_is_trusted() {
    let dir = tempfile::tempdir().expect("temp dir");
    // OpenSSL's defaults, as a user types it: two alike, one the server's.
    let [(cert, key), (other_cert, _)] = ["ca", "other"].map(|name| {
        let (cert, key) = (
            dir.path().join(format!("{name}.pem")),
            dir.path().join(format!("{name}.key")),
        );
        support::self_signed(
            &[
                "-newkey",
                "rsa:2048",
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=DNS:localhost",
            ],
            &cert,
            &key,
        );
        (cert, key)
    });
    let text = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&cert)
        .output()
        .expect("openssl x509");
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("CA:TRUE"),
        "openssl made no CA certificate: nothing to test"
    );
    let s = serve_tls(&cert, &key, &[]);
    let by_name = s.base.replacen("127.0.0.1", "localhost", 1);
    let (code, out, err) = tollgate(&["lock", "status", "l", "--server", &by_name], Some(&cert));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("\"name\":\"l\""), "{out}");
    // Its names still count: 127.0.0.1 is not one of them.
    let (code, _, err) = tollgate(&["lock", "status", "l", "--server", &s.base], Some(&cert));
    assert_eq!(code, Some(78), "{err}");
    assert!(err.contains("not trusted"), "{err}");
    // Another CA certificate in the file does not vouch for this one.
    let (code, _, err) = tollgate(&["lock", "status", "l", "--server", &by_name], Some(&other_cert));
    assert_eq!(code, Some(78), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_speaks_tls_and_the_cli_reaches_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key) = certificate(dir.path(), "one");
    let token = "tls-admin-token-0123456789";
    let s = serve_tls(&cert, &key, &["--token", token]);
    assert!(s.base.starts_with("https://127.0.0.1:"), "{}", s.base);
    let c = client(&cert);
    let r = c.get(s.url("/healthz")).send().await.expect("https");
    assert_eq!(r.status(), 200);

    // Plain HTTP on the TLS port gets no answer.
    let plain = s.base.replacen("https://", "http://", 1);
    let r = reqwest::Client::new()
        .get(format!("{plain}/healthz"))
        .send()
        .await;
    assert!(r.is_err() || !r.expect("answer").status().is_success());

    // The CLI, trusting the certificate through --ca-file.
    let status = [
        "lock",
        "status",
        "nightly",
        "--server",
        &s.base,
        "--server-token",
        token,
    ];
    let (code, out, err) = tollgate(&status, Some(&cert));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("\"name\":\"nightly\""), "{out}");
    // Without it the system's roots do not know this certificate: a clear
    // message, and the set-up's exit code (no retry mends it).
    let (code, _, err) = tollgate(&status, None);
    assert_eq!(code, Some(78), "{err}");
    assert!(err.contains("not trusted") && err.contains("--ca-file"), "{err}");
    // A CA file that is not one: a set-up error, exit 78.
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").expect("write");
    let (code, _, err) = tollgate(&["lock", "status", "nightly", "--server", &s.base], Some(&junk));
    assert_eq!(code, Some(78), "{err}");
    assert!(err.contains("--ca-file"), "{err}");

    // Over its own TLS the server knows the scheme: the console's cookie
    // is Secure, and a change from the page's own https origin passes the
    // same-origin check.
    let r = c
        .post(s.url("/v1/session"))
        .json(&json!({"token": token}))
        .send()
        .await
        .expect("login");
    assert_eq!(r.status(), 200);
    let cookie = r.headers()["set-cookie"].to_str().expect("ascii").to_owned();
    assert!(cookie.contains("; Secure"), "{cookie}");
    let r = c
        .post(s.url("/v1/queues/q/jobs"))
        .bearer_auth(token)
        .header("origin", &s.base)
        .header("sec-fetch-site", "same-origin")
        .json(&json!({"payload": 1}))
        .send()
        .await
        .expect("push");
    assert_eq!(r.status(), 201);
}

#[test]
fn tollgate_health_probes_a_tls_server() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A certificate for the name the world knows the server by, not for
    // 127.0.0.1.
    let (cert, key) = certificate_for(dir.path(), "probe", "DNS:tollgate.example.com");
    let s = serve_tls(&cert, &key, &[]);
    let port = s.base.rsplit(':').next().expect("a port");
    let health = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tollgate"));
        cmd.arg("health")
            .args(args)
            .env_remove("TOLLGATE_SERVER")
            .env_remove("TOLLGATE_CA_FILE")
            .env_remove("TOLLGATE_TLS_CERT")
            .envs(env.iter().copied());
        let out = cmd.output().expect("run tollgate health");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // By URL, the certificate is checked like any command's: not for
    // this name, even with it trusted.
    let cert_path = cert.to_str().expect("utf-8");
    let (code, err) = health(&["--server", &s.base], &[]);
    assert_eq!(code, Some(78), "{err}");
    let (code, err) = health(&["--server", &s.base, "--ca-file", cert_path], &[]);
    assert_eq!(code, Some(78), "{err}");
    // The container's way: no URL, `serve`'s own variables. With
    // TOLLGATE_TLS_CERT set the probe speaks TLS to its own port (not
    // checking the certificate, which need not name 127.0.0.1).
    let listen = format!("0.0.0.0:{port}");
    let own = [
        ("TOLLGATE_LISTEN", listen.as_str()),
        ("TOLLGATE_TLS_CERT", cert_path),
    ];
    let (code, err) = health(&["--ready"], &own);
    assert_eq!(code, Some(0), "{err}");
    // Without it, plain HTTP to a TLS port gets no answer.
    let (code, err) = health(&[], &own[..1]);
    assert_eq!(code, Some(69), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_swaps_the_certificate_and_keeps_a_good_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (first, first_key) = certificate(dir.path(), "first");
    let (second, second_key) = certificate(dir.path(), "second");
    // The server reads the pair at fixed paths, as a renewal would rewrite it.
    let (cert, key) = (dir.path().join("server.pem"), dir.path().join("server.key"));
    std::fs::copy(&first, &cert).expect("copy");
    std::fs::copy(&first_key, &key).expect("copy");
    let s = serve_tls(&cert, &key, &[]);
    let trusts_first = client(&first);
    let trusts_second = client(&second);
    let answers = |c: &reqwest::Client| {
        let req = c.get(s.url("/healthz")).send();
        async move { req.await.is_ok() }
    };
    assert!(answers(&trusts_first).await);
    assert!(!answers(&trusts_second).await);

    let hup = |pid: u32| {
        let ok = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(ok.success());
    };
    std::fs::copy(&second, &cert).expect("copy");
    std::fs::copy(&second_key, &key).expect("copy");
    hup(s.child.id());
    let mut swapped = false;
    for _ in 0..50 {
        // New connections only: a fresh client each time.
        if answers(&client(&second)).await {
            swapped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(swapped, "the second certificate is served after SIGHUP");
    assert!(!answers(&client(&first)).await);

    // A renewal gone wrong (the key of another certificate): refused,
    // and the second pair keeps serving.
    std::fs::copy(&first_key, &key).expect("copy");
    hup(s.child.id());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(answers(&client(&second)).await, "still serving the good pair");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_rooms_listener_speaks_tls() {
    let (_s, cert, _dir, proxy) = tls_room().await;
    assert!(proxy.starts_with("https://"), "{proxy}");
    let c = client(&cert);
    let mut visitor = room_support::Visitor::new("v1");
    let page = visitor.get(&c, &proxy, "/page", false).await;
    assert!(
        room_support::is_admitted(&page, "v1"),
        "{} {}",
        page.status,
        page.text
    );
    // Its cookie is Secure, though the room's secure_cookie is not set.
    let cookie = page.headers["set-cookie"].to_str().expect("ascii");
    assert!(
        cookie.starts_with("tollgate_shop=") && cookie.ends_with("; Secure"),
        "{cookie}"
    );
    // The upstream hears that the visitor came over https.
    let seen = visitor.get(&c, &proxy, "/headers", false).await.json();
    assert_eq!(seen["x-forwarded-proto"], "https", "{seen}");
}

/// Raises this process's soft limit on open files to at least `n` (within
/// the hard limit): the test holds that many connections.
fn allow_open_files(n: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    if soft < n {
        assert!(hard >= n, "the hard limit on open files ({hard}) is below {n}");
        setrlimit(Resource::RLIMIT_NOFILE, n, hard).expect("setrlimit");
    }
}

/// Idle TCP connections from one address (more than the 1,024 handshakes
/// one pool takes) to the rooms' TLS port stop neither the API's
/// handshakes (a pool per listener) nor another address's on the same
/// port (a cap per address).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_from_one_address_stop_no_one_elses_handshake() {
    allow_open_files(4096);
    let (s, cert, _dir, proxy) = tls_room().await;
    let proxy_addr = proxy.trim_start_matches("https://").to_owned();
    let mut idle = Vec::new();
    for _ in 0..1_030 {
        // Refused or reset ones count too: the server closes those past
        // its caps at once.
        if let Ok(conn) = tokio::net::TcpStream::connect(&proxy_addr).await {
            idle.push(conn);
        }
    }
    // The server accepts in order: by the time it answers a request on
    // the rooms' port, it has taken all of the connections before it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let from = |ip: [u8; 4]| client_from(&cert, Some(ip.into()));
    let (other, same) = (from([127, 0, 0, 2]), from([127, 0, 0, 1]));
    for (who, c, url) in [
        ("127.0.0.2, the API", &other, s.url("/healthz")),
        ("127.0.0.1, the API", &same, s.url("/healthz")),
        ("127.0.0.2, the rooms", &other, format!("{proxy}/healthz")),
    ] {
        let r = c.get(&url).send().await;
        let status = r.map(|r| r.status().as_u16());
        assert!(
            matches!(status, Ok(200)),
            "{who}: {status:?} with {} idle connections open",
            idle.len()
        );
    }
    drop(idle);
}

#[test]
fn a_bad_pair_stops_the_server_at_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key) = certificate(dir.path(), "a");
    let (_, other_key) = certificate(dir.path(), "b");
    let missing = dir.path().join("missing.pem");
    let text = |p: &Path| p.to_str().expect("utf-8").to_owned();
    for (args, says) in [
        (
            vec![
                "--tls-cert".to_owned(),
                text(&cert),
                "--tls-key".to_owned(),
                text(&other_key),
            ],
            "do not make a usable pair",
        ),
        (
            vec![
                "--tls-cert".to_owned(),
                text(&missing),
                "--tls-key".to_owned(),
                text(&key),
            ],
            "tls_cert",
        ),
        (vec!["--tls-cert".to_owned(), text(&cert)], "--tls-key"),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = Server::command(None, &args).output().expect("run serve");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn a_sighup_while_waiting_for_the_store_does_not_stop_the_server() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key) = certificate(dir.path(), "early");
    // A Redis that never answers: the server listens, and waits for it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let redis = format!("redis://{}", silent.local_addr().expect("addr"));
    let mut s = serve_tls(&cert, &key, &["--redis", &redis]);
    let ok = Command::new("kill")
        .args(["-HUP", &s.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(ok.success());
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        s.child.try_wait().expect("wait").is_none(),
        "SIGHUP stopped the server"
    );
}
