//! The one client of `tollgate serve`, for the commands that work through
//! one (`--server`): `lock run`, `semaphore run`, the `jobs` and
//! `schedule` commands and `limit check`. It owns what they share: the
//! URL check, TLS (the system's roots and --ca-file), the bearer token, the path escaping, reaching the
//! server, and how an answer the server refused becomes an exit code. What a command sends and how it
//! words its messages stays with the command.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use reqwest::{Method, RequestBuilder};
use serde_json::Value;

use crate::exit;

/// Why a command failed: the exit code and what to print (empty: it was
/// printed already).
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: i32,
    pub(crate) message: String,
}

impl From<tollgate::Error> for Failure {
    fn from(e: tollgate::Error) -> Self {
        Failure {
            code: exit::for_error(&e),
            message: e.to_string(),
        }
    }
}

/// A failure with exit code `code`.
pub(crate) fn failure(code: i32, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

/// A usage failure (exit 64).
pub(crate) fn usage(message: impl Into<String>) -> Failure {
    Failure {
        code: exit::USAGE,
        message: message.into(),
    }
}

/// Percent-encodes one path segment: names and job ids may hold `/`, `?`
/// or `%`, which must reach the server as part of the segment.
pub(crate) fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// How long a call may take.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Timeout {
    /// Only the connection is bounded (5 s): long-polls and renewals set
    /// their own bounds.
    Connect,
    /// The whole call, connection included.
    Total(Duration),
}

/// `--ca-file` (TOLLGATE_CA_FILE), set once at start.
pub(crate) static CA_FILE: OnceLock<PathBuf> = OnceLock::new();

/// A `tollgate serve` at an http:// or https:// URL, with the token to
/// present.
#[derive(Debug, Clone)]
pub(crate) struct Server {
    client: reqwest::Client,
    /// The URL without a trailing slash.
    base: String,
    token: Option<String>,
}

/// The server's answer: its status and its JSON body (null if it sent
/// none).
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Value,
}

impl Answer {
    /// The `error.message` of an error answer.
    pub(crate) fn message(&self) -> Option<&str> {
        self.body["error"]["message"].as_str()
    }

    /// The exit code for an answer the server refused: the one mapping
    /// from the API's statuses and error codes to the CLI's exit codes.
    pub(crate) fn exit_code(&self) -> i32 {
        match (self.status, self.body["error"]["code"].as_str()) {
            (409, Some("lease_lost")) => exit::LEASE_LOST,
            (410, Some("ticket_removed")) => exit::REMOVED,
            (409, Some("job_running")) => exit::BUSY,
            (404, Some("job_not_found" | "queue_not_found" | "schedule_not_found")) => exit::NO_SUCH,
            (404, Some("holder_not_found" | "ticket_not_found" | "limits_not_found")) => exit::NO_SUCH,
            (_, Some("partition_conflict" | "store_misconfigured")) => exit::CONFIG,
            // The token (and its role) is part of the set-up: no retry
            // mends it.
            (401, _) | (403, Some("forbidden")) => exit::CONFIG,
            (429, _) => exit::BUSY,
            (s, _) if s >= 500 => exit::UNAVAILABLE,
            // A tollgate server never redirects: something else is at
            // the URL.
            (300..=399, _) => exit::CONFIG,
            _ => exit::USAGE,
        }
    }
}

impl Server {
    /// Checks the URL (`Err`: why it is not one) and sets up the client.
    pub(crate) fn new(server: &str, token: Option<String>, timeout: Timeout) -> Result<Server, Failure> {
        let base = checked_base(server)?;
        // A tollgate server never redirects; a redirect followed could take
        // the token elsewhere.
        let builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
        // (The system's roots are read only for a server that needs them.)
        let builder = if base.starts_with("https://") {
            builder.tls_backend_preconfigured(tls_config()?)
        } else {
            builder
        };
        let builder = match timeout {
            Timeout::Connect => builder.connect_timeout(Duration::from_secs(5)),
            Timeout::Total(t) => builder.timeout(t),
        };
        let client = builder.build().map_err(|e| Failure {
            code: exit::SOFTWARE,
            message: format!("cannot set up an HTTP client: {e}"),
        })?;
        Ok(Server { client, base, token })
    }

    /// `tollgate health`'s own-port probe of `url` (a server on this
    /// machine): straight to it, whatever proxy the environment names,
    /// and over https without checking the certificate, which names the
    /// host the world knows the server by, not 127.0.0.1 (the probe sends
    /// nothing secret). Redirects are not followed.
    pub(crate) fn own_port(url: &str, timeout: Duration) -> Result<Server, Failure> {
        let base = checked_base(url)?;
        let client = reqwest::Client::builder()
            .danger_accept_invalid_certs(base.starts_with("https://"))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .build()
            .map_err(|e| Failure {
                code: exit::SOFTWARE,
                message: format!("cannot set up an HTTP client: {e}"),
            })?;
        Ok(Server {
            client,
            base,
            token: None,
        })
    }

    /// The failure for an answer the server refused: its exit code, and
    /// its message with the status, or for a refused token which flag to
    /// set.
    pub(crate) fn failure(&self, answer: &Answer) -> Failure {
        let status = answer.status;
        let message = match (status, &self.token) {
            (401, None) => format!(
                "the tollgate server at {} requires a token: give it with --server-token (or TOLLGATE_SERVER_TOKEN)",
                self.base
            ),
            (401, Some(_)) => format!(
                "the tollgate server at {} refused the token given with --server-token (or TOLLGATE_SERVER_TOKEN)",
                self.base
            ),
            (403, Some(_)) if answer.body["error"]["code"] == "forbidden" => format!(
                "the tollgate server at {} takes the token given with --server-token (or TOLLGATE_SERVER_TOKEN) for reading only; this command changes state and needs an admin token",
                self.base
            ),
            _ => answer.message().map_or_else(
                || format!("the tollgate server answered {status}"),
                |m| format!("{m} ({status})"),
            ),
        };
        Failure {
            code: answer.exit_code(),
            message,
        }
    }

    /// A request to `path` (escaped by the caller: see [`segment`]).
    pub(crate) fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let req = self.client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// Sends `req` and reads the answer, whatever its status; `Err` only
    /// when the server could not be reached.
    pub(crate) async fn send(&self, req: RequestBuilder) -> Result<Answer, Failure> {
        let resp = req.send().await.map_err(|e| {
            if crate::tls_client::untrusted(&e) {
                Failure {
                    code: exit::CONFIG,
                    message: format!(
                        "the tollgate server's TLS certificate is not trusted ({}); give its CA with --ca-file (TOLLGATE_CA_FILE)",
                        with_causes(&e)
                    ),
                }
            } else {
                Failure {
                    code: exit::UNAVAILABLE,
                    message: format!("cannot reach the tollgate server: {}", with_causes(&e)),
                }
            }
        })?;
        let status = resp.status().as_u16();
        // An answer cut off is no answer; one that is not JSON has no body
        // to read (its status still counts).
        let bytes = resp.bytes().await.map_err(|e| Failure {
            code: exit::UNAVAILABLE,
            message: format!("the tollgate server's answer broke off: {}", with_causes(&e)),
        })?;
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Answer { status, body })
    }
}

/// `server` without a trailing slash, if it is an http:// or https:// URL
/// (a usage error otherwise: a bad port, no host).
fn checked_base(server: &str) -> Result<String, Failure> {
    let base = server.trim_end_matches('/');
    let bad = |why: &str| {
        usage(format!(
            "--server {server:?}: {why}; give the http:// or https:// URL of a `tollgate serve`"
        ))
    };
    if !base.starts_with("http://") && !base.starts_with("https://") {
        return Err(bad("not an http:// or https:// URL"));
    }
    let url = reqwest::Url::parse(base).map_err(|e| bad(&e.to_string()))?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    Ok(base.to_owned())
}

/// `e` and what caused it, innermost last: the cause of a failed request
/// (refused, a certificate not trusted) is rarely in its own message.
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = c.source();
    }
    text
}

/// The TLS client set-up for https:// servers: rustls with the ring
/// provider, trusting the system's roots and the certificates of
/// `--ca-file`. A CA file that cannot be used is a set-up error (exit 78).
fn tls_config() -> Result<rustls::ClientConfig, Failure> {
    let ca = CA_FILE.get().map(|p| ("--ca-file", p.as_path()));
    crate::tls_client::client_config(ca, None).map_err(|message| Failure {
        code: exit::CONFIG,
        message,
    })
}
