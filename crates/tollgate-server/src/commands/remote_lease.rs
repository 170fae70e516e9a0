//! `lock run --server URL`: the same lease, taken and kept through a
//! `tollgate serve` instead of Redis, for machines that cannot reach Redis.

use std::time::Duration;

use reqwest::Method;

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::{Answer, Failure, Server, Timeout, segment};

/// One gate on a tollgate server.
#[derive(Debug, Clone)]
pub(crate) struct Remote {
    server: Server,
    /// `/v1/gates/<name>`.
    gate: String,
}

/// A lease held through the server, renewed in the background.
#[derive(Debug)]
pub(crate) struct RemoteLease {
    remote: Remote,
    token: String,
    pub(crate) fence: u64,
    /// Not renewed past this (`--max-hold`).
    hold_until: Option<Instant>,
    lost: watch::Receiver<bool>,
    keeper: JoinHandle<()>,
}

/// What an acquire asks of the gate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask<'a> {
    /// The gate's capacity (`None`: the stored one).
    pub(crate) capacity: Option<u32>,
    pub(crate) permits: u32,
    pub(crate) ttl: Duration,
    pub(crate) heartbeat: Duration,
    /// How long to wait in line (0: try once).
    pub(crate) wait: Duration,
    pub(crate) label: &'a str,
    /// Never renewed past this from the grant (`lock run --max-hold`).
    pub(crate) max_hold: Option<Duration>,
}

/// Long-polls are asked in slices no longer than this.
const POLL_SLICE: Duration = Duration::from_secs(25);

impl Remote {
    pub(crate) fn new(server: &str, name: &str, token: Option<String>) -> Result<Remote, Failure> {
        Ok(Remote {
            server: Server::new(server, token, Timeout::Connect)?,
            gate: format!("/v1/gates/{}", segment(name)),
        })
    }

    /// Sends `method` to the gate's `path`: 200 and 404 are answers, any
    /// other status a failure.
    async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Answer, Failure> {
        let req = self.server.request(method, &format!("{}{path}", self.gate));
        let req = match body {
            Some(b) => req.json(b),
            None => req,
        };
        let answer = self.server.send(req).await?;
        match answer.status {
            200 | 404 => Ok(answer),
            _ => Err(self.server.failure(&answer)),
        }
    }

    /// Takes the permits, waiting in line up to `wait` (0: try once).
    /// Stores `capacity` as the gate's capacity.
    pub(crate) async fn set_capacity(&self, capacity: u32) -> Result<(), Failure> {
        let answer = self
            .call(Method::PUT, "/capacity", Some(&json!({ "capacity": capacity })))
            .await?;
        if answer.status == 200 {
            Ok(())
        } else {
            Err(self.server.failure(&answer))
        }
    }

    /// Takes the permits of a gate of `capacity` (`None`: the stored one).
    pub(crate) async fn acquire(&self, ask: &Ask<'_>) -> Result<Option<RemoteLease>, Failure> {
        let Ask {
            capacity,
            permits,
            ttl,
            heartbeat,
            wait,
            label,
            max_hold,
        } = *ask;
        let deadline = Instant::now() + wait;
        // Granted for no longer than it may be held (`lock run --max-hold`).
        let ttl = max_hold.map_or(ttl, |m| ttl.min(m).max(tollgate::MIN_TTL));
        let mut body = json!({
            "permits": permits,
            "ttl_ms": ttl.as_millis() as u64,
            "heartbeat_ms": heartbeat.as_millis() as u64,
            "queue": !wait.is_zero(),
            "label": label,
        });
        if let Some(n) = capacity {
            body["capacity"] = json!(n);
        }
        'enter: loop {
            let sent = Instant::now();
            let answer = self.call(Method::POST, "/enter", Some(&body)).await?.body;
            let ticket = match answer["status"].as_str() {
                Some("granted") => return Ok(Some(self.lease(&answer, ttl, sent, max_hold))),
                Some("busy") => return Ok(None),
                Some("queued") => answer["ticket"].as_str().unwrap_or_default().to_owned(),
                _ => {
                    return Err(Failure {
                        code: crate::exit::UNAVAILABLE,
                        message: format!("unexpected answer {answer}"),
                    });
                }
            };
            let ticket_path = format!("/tickets/{ticket}");
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let slice = left.min(POLL_SLICE).as_millis() as u64;
                let sent = Instant::now();
                let Answer { status, body: answer } = self
                    .call(Method::GET, &format!("{ticket_path}?wait_ms={slice}"), None)
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
                    return Ok(Some(self.lease(&answer, ttl, sent, max_hold)));
                }
                if Instant::now() >= deadline {
                    // Leave the line; a grant racing with this is given back.
                    let _ = self.call(Method::DELETE, &ticket_path, None).await;
                    return Ok(None);
                }
            }
        }
    }

    /// Takes back the leadership of election `name` that `token` names
    /// (`tollgate elect --token-file`): a renewal only its holder can
    /// make, then the election's leader, which must be that lease. `None`
    /// if it ended.
    pub(crate) async fn resume(
        &self,
        name: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<Option<RemoteLease>, Failure> {
        let sent = Instant::now();
        let path = format!("{}/leases/{}/renew", self.gate, segment(token));
        let req = self
            .server
            .request(Method::POST, &path)
            .json(&json!({"ttl_ms": ttl.as_millis() as u64}));
        let renewed = self.server.send(req).await?;
        match renewed.status {
            200 => {}
            // Ended (404 lease_not_found; 409 as well, to be safe), or not
            // a token at all (400).
            400 | 404 | 409 => return Ok(None),
            _ => return Err(self.server.failure(&renewed)),
        }
        let req = self
            .server
            .request(Method::GET, &format!("/v1/elections/{}", segment(name)));
        let now = self.server.send(req).await?;
        if now.status != 200 {
            return Err(self.server.failure(&now));
        }
        let leader = &now.body["leader"];
        if leader["handle"].as_str() != Some(tollgate::lease_handle(token).as_str()) {
            return Ok(None);
        }
        let answer = json!({"token": token, "fence": leader["fence"], "ttl_ms": renewed.body["ttl_ms"]});
        Ok(Some(self.lease(&answer, ttl, sent, None)))
    }

    fn lease(&self, answer: &Value, ttl: Duration, sent: Instant, max_hold: Option<Duration>) -> RemoteLease {
        let token = answer["token"].as_str().unwrap_or_default().to_owned();
        let granted_ttl = answer["ttl_ms"].as_u64().map_or(ttl, Duration::from_millis);
        let (tx, lost) = watch::channel(false);
        let hold_until = max_hold.map(|m| sent + m);
        let keeper = tokio::spawn(keep(
            self.clone(),
            token.clone(),
            ttl,
            sent + granted_ttl,
            hold_until,
            tx,
        ));
        RemoteLease {
            remote: self.clone(),
            token,
            fence: answer["fence"].as_u64().unwrap_or(0),
            hold_until,
            lost,
            keeper,
        }
    }
}

/// Renews every third of the TTL; marks the lease lost when the server says
/// it ended, or when renewals keep failing until the lease ran out.
async fn keep(
    remote: Remote,
    token: String,
    ttl: Duration,
    first_deadline: Instant,
    hold_until: Option<Instant>,
    lost: watch::Sender<bool>,
) {
    let mut end = first_deadline;
    let renew_path = format!("/leases/{token}/renew");
    let mut next = Instant::now() + ttl / 3;
    loop {
        tokio::time::sleep_until(next.min(end)).await;
        let now = Instant::now();
        if now >= end {
            let _ = lost.send(true);
            return;
        }
        // Never renewed past --max-hold: the lease then runs out by itself.
        let span = hold_until.map_or(ttl, |until| ttl.min(until.saturating_duration_since(now)));
        if span < tollgate::MIN_TTL {
            next = end;
            continue;
        }
        let body = json!({"ttl_ms": span.as_millis() as u64});
        let attempt = remote.call(Method::POST, &renew_path, Some(&body));
        match tokio::time::timeout(end - now, attempt).await {
            Ok(Ok(Answer { status: 200, .. })) => {
                end = now + span;
                next = now + span / 3;
            }
            Ok(Ok(_)) => {
                let _ = lost.send(true);
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e.message, "lease renewal through the server failed; retrying");
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
    /// The lease's owner token.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// It was held (to within 10 ms) for its `--max-hold`.
    pub(crate) fn reached_max_hold(&self) -> bool {
        self.hold_until
            .is_some_and(|until| Instant::now() + tollgate::MIN_TTL >= until)
    }

    /// Resolves when the lease is lost.
    pub(crate) async fn lost(&self) {
        let mut rx = self.lost.clone();
        if rx.wait_for(|l| *l).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Stops renewing and lets the lease end `hold` from now by the
    /// store's clock (a renewal to `hold`), with no release: see
    /// `tollgate::Lease::release_after`. `Ok(false)` if it had already
    /// ended.
    pub(crate) async fn release_after(self, hold: Duration) -> Result<bool, Failure> {
        if hold < tollgate::MIN_TTL {
            return self.release().await;
        }
        self.keeper.abort();
        let path = format!("/leases/{}/renew", self.token);
        let body = json!({"ttl_ms": hold.as_millis() as u64});
        let answer = self.remote.call(Method::POST, &path, Some(&body)).await?;
        Ok(answer.status == 200)
    }

    /// Releases the lease. `Ok(false)` if it had already ended.
    pub(crate) async fn release(self) -> Result<bool, Failure> {
        self.keeper.abort();
        let path = format!("/leases/{}", self.token);
        let answer = self.remote.call(Method::DELETE, &path, None).await?;
        Ok(answer.status == 200)
    }
}
