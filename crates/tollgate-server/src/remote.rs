//! `lock run --server URL`: the same lease, taken and kept through a
//! `tollgate serve` instead of Redis, for machines that cannot reach Redis.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What went wrong talking to the server, sorted by exit code.
#[derive(Debug)]
pub(crate) enum RemoteError {
    /// The server refused the request as malformed or conflicting (4xx).
    Refused(String),
    /// The server could not be reached, or its store could not (5xx).
    Unavailable(String),
}

/// A tollgate server and one gate on it.
#[derive(Debug, Clone)]
pub(crate) struct Remote {
    client: reqwest::Client,
    gate_url: String,
    token: Option<String>,
}

/// A lease held through the server, renewed in the background.
#[derive(Debug)]
pub(crate) struct RemoteLease {
    remote: Remote,
    token: String,
    pub(crate) fence: u64,
    lost: watch::Receiver<bool>,
    keeper: JoinHandle<()>,
}

/// Long-polls are asked in slices no longer than this.
const POLL_SLICE: Duration = Duration::from_secs(25);

impl Remote {
    pub(crate) fn new(server: &str, name: &str, token: Option<String>) -> Result<Remote, String> {
        let base = server.trim_end_matches('/');
        if !base.starts_with("http://") {
            return Err(format!(
                "--server {server:?}: give an http:// URL of a `tollgate serve` (https is not supported yet)"
            ));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| format!("cannot set up an HTTP client: {e}"))?;
        Ok(Remote {
            client,
            gate_url: format!("{base}/v1/gates/{}", name.replace('/', "%2F")),
            token,
        })
    }

    async fn call(&self, req: reqwest::RequestBuilder) -> Result<(u16, Value), RemoteError> {
        let req = match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        };
        let resp = req
            .send()
            .await
            .map_err(|e| RemoteError::Unavailable(format!("cannot reach the tollgate server: {e}")))?;
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        match status {
            200 | 404 => Ok((status, body)),
            s if s >= 500 => Err(RemoteError::Unavailable(message(&body, s))),
            s => Err(RemoteError::Refused(message(&body, s))),
        }
    }

    /// Takes the permits, waiting in line up to `wait` (0: try once).
    pub(crate) async fn acquire(
        &self,
        capacity: u32,
        permits: u32,
        ttl: Duration,
        heartbeat: Duration,
        wait: Duration,
    ) -> Result<Option<RemoteLease>, RemoteError> {
        let deadline = Instant::now() + wait;
        let body = json!({
            "capacity": capacity,
            "permits": permits,
            "ttl_ms": ttl.as_millis() as u64,
            "heartbeat_ms": heartbeat.as_millis() as u64,
            "queue": !wait.is_zero(),
        });
        'enter: loop {
            let sent = Instant::now();
            let (_, answer) = self
                .call(self.client.post(format!("{}/enter", self.gate_url)).json(&body))
                .await?;
            let ticket = match answer["status"].as_str() {
                Some("granted") => return Ok(Some(self.lease(&answer, ttl, sent))),
                Some("busy") => return Ok(None),
                Some("queued") => answer["ticket"].as_str().unwrap_or_default().to_owned(),
                _ => return Err(RemoteError::Unavailable(format!("unexpected answer {answer}"))),
            };
            let ticket_url = format!("{}/tickets/{ticket}", self.gate_url);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let slice = left.min(POLL_SLICE).as_millis() as u64;
                let sent = Instant::now();
                let (status, answer) = self
                    .call(self.client.get(format!("{ticket_url}?wait_ms={slice}")))
                    .await?;
                if status == 404 {
                    // Dropped from the line (a stall past the heartbeat, or
                    // the store lost its data): queue again while time remains.
                    if Instant::now() >= deadline {
                        return Ok(None);
                    }
                    continue 'enter;
                }
                if answer["status"].as_str() == Some("granted") {
                    return Ok(Some(self.lease(&answer, ttl, sent)));
                }
                if Instant::now() >= deadline {
                    // Leave the line; a grant racing with this is given back.
                    let _ = self.call(self.client.delete(&ticket_url)).await;
                    return Ok(None);
                }
            }
        }
    }

    fn lease(&self, answer: &Value, ttl: Duration, sent: Instant) -> RemoteLease {
        let token = answer["token"].as_str().unwrap_or_default().to_owned();
        let granted_ttl = answer["ttl_ms"].as_u64().map_or(ttl, Duration::from_millis);
        let (tx, lost) = watch::channel(false);
        let keeper = tokio::spawn(keep(self.clone(), token.clone(), ttl, sent + granted_ttl, tx));
        RemoteLease {
            remote: self.clone(),
            token,
            fence: answer["fence"].as_u64().unwrap_or(0),
            lost,
            keeper,
        }
    }
}

fn message(body: &Value, status: u16) -> String {
    body["error"]["message"]
        .as_str()
        .map_or_else(|| format!("the tollgate server answered {status}"), str::to_owned)
}

/// Renews every third of the TTL; marks the lease lost when the server says
/// it ended, or when renewals keep failing until the lease ran out.
async fn keep(
    remote: Remote,
    token: String,
    ttl: Duration,
    first_deadline: Instant,
    lost: watch::Sender<bool>,
) {
    let mut end = first_deadline;
    let renew_url = format!("{}/leases/{token}/renew", remote.gate_url);
    let body = json!({"ttl_ms": ttl.as_millis() as u64});
    let mut next = Instant::now() + ttl / 3;
    loop {
        tokio::time::sleep_until(next.min(end)).await;
        let now = Instant::now();
        if now >= end {
            let _ = lost.send(true);
            return;
        }
        let attempt = remote.call(remote.client.post(&renew_url).json(&body));
        match tokio::time::timeout(end - now, attempt).await {
            Ok(Ok((200, _))) => {
                end = now + ttl;
                next = now + ttl / 3;
            }
            Ok(Ok(_)) => {
                let _ = lost.send(true);
                return;
            }
            Ok(Err(e)) => {
                let why = match e {
                    RemoteError::Refused(m) | RemoteError::Unavailable(m) => m,
                };
                tracing::warn!(error = %why, "lease renewal through the server failed; retrying");
                next = Instant::now() + (ttl / 10).min(Duration::from_millis(250));
            }
            Err(_) => {
                let _ = lost.send(true);
                return;
            }
        }
    }
}

impl RemoteLease {
    /// Resolves when the lease is lost.
    pub(crate) async fn lost(&self) {
        let mut rx = self.lost.clone();
        if rx.wait_for(|l| *l).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Releases the lease. `Ok(false)` if it had already ended.
    pub(crate) async fn release(self) -> Result<bool, RemoteError> {
        self.keeper.abort();
        let url = format!("{}/leases/{}", self.remote.gate_url, self.token);
        let (status, _) = self.remote.call(self.remote.client.delete(url)).await?;
        Ok(status == 200)
    }
}
