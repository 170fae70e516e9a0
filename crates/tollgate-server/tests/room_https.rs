//! A waiting room in front of an https:// upstream (issue 39): the
//! certificate checked against `upstream_ca` for the URL's host (sent as
//! SNI), a client certificate for an upstream that asks for one, and a
//! refused certificate answered with the 502 page and a log line naming
//! the cause. The upstream is a real TLS server (rustls) with certificates
//! made by openssl.

mod room_support;
mod serve_support;
#[path = "../../tollgate/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use room_support::{KEY, Visitor};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serve_support::Server;

/// Runs openssl with `args` in `dir`; fails the test if it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let ok = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl must be installed for the TLS tests (scripts/test installs it)");
    assert!(ok.success(), "openssl {args:?} failed");
}

/// A CA `<name>-ca.pem` and a certificate `<name>.pem` (key `<name>.key`)
/// it signed for `cn` (also its DNS name), in `dir`.
fn ca_and_leaf(dir: &Path, name: &str, cn: &str) -> (PathBuf, PathBuf, PathBuf) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let (ca, ca_key) = (format!("{name}-ca.pem"), format!("{name}-ca.key"));
    let mut args = vec!["req", "-x509", "-days", "1", "-subj"];
    let ca_subject = format!("/CN={name} test CA");
    args.push(&ca_subject);
    args.extend(ec);
    args.extend(["-keyout", &ca_key, "-out", &ca]);
    openssl(dir, &args);
    let (leaf, key, csr, ext) = (
        format!("{name}.pem"),
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.ext"),
    );
    let subject = format!("/CN={cn}");
    let mut args = vec!["req", "-subj", &subject];
    args.extend(ec);
    args.extend(["-keyout", &key, "-out", &csr]);
    openssl(dir, &args);
    std::fs::write(
        dir.join(&ext),
        format!("subjectAltName=DNS:{cn}\nbasicConstraints=CA:FALSE\n"),
    )
    .expect("ext");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &ext,
            "-out",
            &leaf,
        ],
    );
    (dir.join(ca), dir.join(leaf), dir.join(key))
}

/// The SNI names the upstream heard, one per connection.
type Names = Arc<Mutex<Vec<String>>>;

/// A TLS upstream with `cert` and `key` (asking for a client certificate
/// signed by `client_ca`, if given) that answers every request with
/// "over tls"; its port and the SNI names it heard.
async fn tls_upstream(cert: &Path, key: &Path, client_ca: Option<&Path>) -> (u16, Names) {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .expect("cert")
        .collect::<Result<_, _>>()
        .expect("cert");
    let key = PrivateKeyDer::from_pem_file(key).expect("key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions");
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).expect("ca") {
                roots.add(c.expect("ca")).expect("ca");
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                    .build()
                    .expect("verifier");
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(chain, key).expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let names: Names = Arc::default();
    let heard = names.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, heard) = (acceptor.clone(), heard.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let sni = tls.get_ref().1.server_name().unwrap_or("-").to_owned();
                heard.lock().expect("names").push(sni);
                let answer = service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::from(
                        "over tls",
                    ))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), answer)
                    .await;
            });
        }
    });
    (port, names)
}

/// The config of a room in front of `upstream`, with the extra settings
/// `extra`.
fn config(upstream: &str, extra: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\nproxy_listen = \"127.0.0.1:0\"\n\n[rooms.shop]\nupstream = \"{upstream}\"\n\
         capacity = 10\ncookie_keys = [\"{KEY}\"]\nupstream_timeout_ms = 3000\n{extra}\n"
    )
}

/// A room in front of `upstream` with the extra settings `extra`, its log
/// going to `log`.
fn room(dir: &Path, upstream: &str, extra: &str, log: &Path) -> Server {
    let path = dir.join(format!("tollgate-{}.toml", room_support::rand_suffix()));
    std::fs::write(&path, config(upstream, extra)).expect("config");
    let s = Server::start_full(
        None,
        &["--config", path.to_str().expect("path")],
        Stdio::from(std::fs::File::create(log).expect("log")),
    );
    assert!(s.proxy.is_some(), "no waiting-room address printed");
    s
}

fn quoted(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_upstream_is_checked_against_upstream_ca_and_refused_otherwise() {
    serve_support::install_tls_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = ca_and_leaf(dir.path(), "site", "localhost");
    let (port, names) = tls_upstream(&cert, &key, None).await;
    let url = format!("https://localhost:{port}");
    let c = reqwest::Client::new();

    let log = dir.path().join("trusted.log");
    let s = room(dir.path(), &url, &format!("upstream_ca = {}", quoted(&ca)), &log);
    let proxy = s.proxy.clone().expect("proxy");
    let got = Visitor::new("a").get(&c, &proxy, "/page", false).await;
    assert_eq!((got.status, got.text.as_str()), (200, "over tls"));
    assert_eq!(
        names.lock().expect("names").as_slice(),
        ["localhost"],
        "SNI: the URL's host"
    );
    drop(s);

    // Without upstream_ca the private CA is not trusted: the 502 page, and
    // a log line that says why.
    let log = dir.path().join("untrusted.log");
    let s = room(dir.path(), &url, "", &log);
    let proxy = s.proxy.clone().expect("proxy");
    let got = Visitor::new("b").get(&c, &proxy, "/page", false).await;
    assert_eq!(got.status, 502, "{}", got.text);
    drop(s);
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(text.contains("upstream certificate refused"), "{text}");
    assert!(
        text.contains("UnknownIssuer") || text.contains("unknown issuer"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_shown_to_an_upstream_that_asks() {
    serve_support::install_tls_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = ca_and_leaf(dir.path(), "site", "localhost");
    let (client_ca, client_cert, client_key) = ca_and_leaf(dir.path(), "room", "tollgate-room");
    let (port, _) = tls_upstream(&cert, &key, Some(&client_ca)).await;
    let url = format!("https://localhost:{port}");
    let c = reqwest::Client::new();
    let with_client = format!(
        "upstream_ca = {}\nupstream_client_cert = {}\nupstream_client_key = {}",
        quoted(&ca),
        quoted(&client_cert),
        quoted(&client_key)
    );
    let s = room(dir.path(), &url, &with_client, &dir.path().join("client.log"));
    let proxy = s.proxy.clone().expect("proxy");
    let got = Visitor::new("a").get(&c, &proxy, "/page", false).await;
    assert_eq!((got.status, got.text.as_str()), (200, "over tls"));
    drop(s);
    // Without it the upstream ends the handshake: the site is unreachable.
    let s = room(
        dir.path(),
        &url,
        &format!("upstream_ca = {}", quoted(&ca)),
        &dir.path().join("none.log"),
    );
    let proxy = s.proxy.clone().expect("proxy");
    let got = Visitor::new("b").get(&c, &proxy, "/page", false).await;
    assert_eq!(got.status, 502, "{}", got.text);
}

#[test]
fn bad_upstream_tls_settings_stop_the_start_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.pem");
    let cert_only = dir.path().join("only.pem");
    std::fs::write(&cert_only, "not a certificate").expect("file");
    // A bad setting exits 64, a file that cannot be used 78 (as pages).
    for (upstream, extra, code, says) in [
        (
            "http://127.0.0.1:9",
            format!("upstream_ca = {}", quoted(&missing)),
            64,
            "https:// upstream",
        ),
        (
            "https://localhost:9",
            format!("upstream_ca = {}", quoted(&missing)),
            78,
            "upstream_ca",
        ),
        (
            "https://localhost:9",
            format!("upstream_ca = {}", quoted(&cert_only)),
            78,
            "upstream_ca",
        ),
        (
            "https://localhost:9",
            format!("upstream_client_cert = {}", quoted(&cert_only)),
            64,
            "upstream_client_key",
        ),
        ("ftp://localhost:9", String::new(), 64, "https://host:port"),
    ] {
        let path = dir.path().join("tollgate.toml");
        std::fs::write(&path, config(upstream, &extra)).expect("config");
        let out = Server::command(None, &["--config", path.to_str().expect("path")])
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{upstream} {extra}: {stderr}");
        assert!(
            stderr.contains(says),
            "{upstream} {extra}: {stderr} should say {says}"
        );
    }
}
