//! `tollgate health`: probes a `tollgate serve` (GET /healthz, or /readyz
//! with --ready) and answers with an exit code, for a container's
//! HEALTHCHECK or a deploy script that waits for the server. The image
//! has no shell or curl, so the probe is the binary itself.

use std::time::Duration;

use clap::Args;
use reqwest::Method;

use crate::args::duration;
use crate::client::{Failure, Server, Timeout, usage};
use crate::exit;

#[derive(Debug, Args)]
pub(crate) struct HealthArgs {
    /// The server's http:// or https:// URL. Falls back to
    /// TOLLGATE_SERVER; without either, 127.0.0.1 at the port of
    /// TOLLGATE_LISTEN (the variable `serve` listens by), else 7700, over
    /// https if TOLLGATE_TLS_CERT is set (its certificate not checked:
    /// the probe sends nothing secret to this machine's own port).
    #[arg(long, env = "TOLLGATE_SERVER", value_name = "URL")]
    pub(crate) server: Option<String>,
    /// Ask whether the server is ready (its store answers and every room
    /// can admit exactly), not only alive.
    #[arg(long)]
    pub(crate) ready: bool,
    /// Give up after this long.
    #[arg(long, default_value = "5s", value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) timeout: Duration,
    /// `serve`'s listen address, read from the environment only.
    #[arg(skip = std::env::var("TOLLGATE_LISTEN").ok())]
    pub(crate) listen: Option<String>,
    /// Whether `serve` is told to serve TLS (TOLLGATE_TLS_CERT set): the
    /// probe of TOLLGATE_LISTEN's port is then https://.
    #[arg(skip = std::env::var_os("TOLLGATE_TLS_CERT").is_some_and(|v| !v.is_empty()))]
    pub(crate) tls: bool,
}

/// Where `serve` listens when TOLLGATE_LISTEN is not set.
const DEFAULT_PORT: &str = "7700";

pub(crate) async fn run(args: HealthArgs) -> i32 {
    match probe(&args).await {
        Ok(body) => {
            println!("{body}");
            0
        }
        Err(f) => {
            eprintln!("tollgate: {}", f.message);
            f.code
        }
    }
}

async fn probe(args: &HealthArgs) -> Result<serde_json::Value, Failure> {
    if args.timeout.is_zero() {
        return Err(usage("--timeout 0s: give the probe some time, e.g. 5s"));
    }
    let (url, server) = match &args.server {
        Some(url) => (url.clone(), Server::new(url, None, Timeout::Total(args.timeout))?),
        None => {
            let url = local_url(args.listen.as_deref(), args.tls)?;
            let server = Server::own_port(&url, args.timeout)?;
            (url, server)
        }
    };
    let (path, want) = if args.ready {
        ("/readyz", "ready")
    } else {
        ("/healthz", "ok")
    };
    let answer = server.send(server.request(Method::GET, path)).await?;
    match answer.status {
        200 if answer.body["status"] == want => Ok(answer.body),
        200 => Err(Failure {
            code: exit::CONFIG,
            message: format!(
                "{url}{path} answered 200, but not as a `tollgate serve` does (no \"status\": \"{want}\"): is this its URL?"
            ),
        }),
        s if s >= 500 => Err(Failure {
            code: exit::UNAVAILABLE,
            message: format!(
                "{url}{path}: {} ({s})",
                answer.message().unwrap_or("the server is not healthy")
            ),
        }),
        s => Err(Failure {
            code: exit::CONFIG,
            message: format!("{url}{path} answered {s}: is this the URL of a `tollgate serve`?"),
        }),
    }
}

/// The URL of a server on this machine listening at `listen` (HOST:PORT,
/// `serve`'s TOLLGATE_LISTEN), over https if `tls`: a wildcard host is
/// reached over loopback.
fn local_url(listen: Option<&str>, tls: bool) -> Result<String, Failure> {
    let scheme = if tls { "https" } else { "http" };
    let Some(listen) = listen.map(str::trim).filter(|l| !l.is_empty()) else {
        return Ok(format!("{scheme}://127.0.0.1:{DEFAULT_PORT}"));
    };
    let bad = || {
        usage(format!(
            "TOLLGATE_LISTEN {listen:?} is not HOST:PORT (an IPv6 address in brackets: [::1]:7700); \
             give the server's URL with --server"
        ))
    };
    let (host, port) = listen.rsplit_once(':').ok_or_else(bad)?;
    let port_ok = crate::args::port_number(port).is_some_and(|p| p > 0);
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        // An IPv4 address or a host name.
        None => {
            !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        }
    };
    if !port_ok || !host_ok {
        return Err(bad());
    }
    let host = match host {
        "0.0.0.0" => "127.0.0.1",
        "[::]" => "[::1]",
        h => h,
    };
    Ok(format!("{scheme}://{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::local_url;

    #[test]
    fn a_wildcard_listen_address_is_probed_over_loopback() {
        assert_eq!(local_url(None, false).unwrap(), "http://127.0.0.1:7700");
        assert_eq!(local_url(None, true).unwrap(), "https://127.0.0.1:7700");
        assert_eq!(
            local_url(Some("0.0.0.0:8080"), false).unwrap(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(local_url(Some("[::]:8080"), true).unwrap(), "https://[::1]:8080");
        assert_eq!(
            local_url(Some("10.0.0.5:7700"), false).unwrap(),
            "http://10.0.0.5:7700"
        );
        assert_eq!(
            local_url(Some("localhost:1"), false).unwrap(),
            "http://localhost:1"
        );
        assert_eq!(local_url(Some("[::1]:7700"), false).unwrap(), "http://[::1]:7700");
        for bad in [
            "7700",
            "host:",
            "host:port",
            "host:70000",
            "host:0",
            "0.0.0.0:+7799",
            "::1:7799",
            "a/b:7799",
            "user@host:7799",
            ":7700",
            "[nope]:1",
        ] {
            assert_eq!(local_url(Some(bad), false).unwrap_err().code, 64, "{bad}");
        }
    }
}
