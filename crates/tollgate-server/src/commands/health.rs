//! `tollgate health`: probes a `tollgate serve` (GET /healthz, or /readyz
//! with --ready) and answers with an exit code, for a container's
//! HEALTHCHECK or a deploy script that waits for the server. The image
//! has no shell or curl, so the probe is the binary itself.

use reqwest::Method;

use crate::cli::HealthArgs;
use crate::client::{Failure, Server, Timeout};
use crate::exit;

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
    let (url, server) = match &args.server {
        Some(url) => (url.clone(), Server::new(url, None, Timeout::Total(args.timeout))?),
        None => {
            let url = local_url(args.listen.as_deref(), args.tls)?;
            let server = if args.tls {
                Server::loopback_unverified(&url, args.timeout)?
            } else {
                Server::new(&url, None, Timeout::Total(args.timeout))?
            };
            (url, server)
        }
    };
    let path = if args.ready { "/readyz" } else { "/healthz" };
    let answer = server.send(server.request(Method::GET, path)).await?;
    match answer.status {
        200 => Ok(answer.body),
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
    let bad = || Failure {
        code: exit::USAGE,
        message: format!("TOLLGATE_LISTEN {listen:?} is not HOST:PORT; give the server's URL with --server"),
    };
    let (host, port) = listen.rsplit_once(':').ok_or_else(bad)?;
    if port.parse::<u16>().is_err() {
        return Err(bad());
    }
    let host = match host {
        "" | "0.0.0.0" => "127.0.0.1",
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
        for bad in ["7700", "host:", "host:port", "host:70000"] {
            assert_eq!(local_url(Some(bad), false).unwrap_err().code, 64, "{bad}");
        }
    }
}
