//! `tollgate limit check NAME KEY`: one rate-limit decision, on Redis or
//! through a `tollgate serve` (--server), printed as JSON.

use std::time::Duration;

use clap::Args;
use reqwest::Method;
use serde::Deserialize;
use tollgate::RateLimiter;

use super::connect_redis;
use super::{DurabilityArgs, StoreArgs};
use crate::api::limiters::LimitSpec;
use crate::api::limits::DecisionBody;
use crate::args::duration;
use crate::client::{Server, Timeout, segment};
use crate::exit;

#[derive(Debug, Args)]
pub(crate) struct LimitCheckArgs {
    /// Name of the limiter (letters, digits, _ - . : / @).
    pub(crate) name: String,
    /// Whose allowance: a user, an IP, a job name.
    pub(crate) key: String,
    /// N/s, N/min, N/h or N/<duration> (e.g. 5/250ms). Optional with
    /// --server when the server configures NAME.
    #[arg(long, value_name = "RATE")]
    pub(crate) rate: Option<String>,
    /// GCRA burst: how many at once [default: the rate's N].
    #[arg(long, value_name = "B")]
    pub(crate) burst: Option<u64>,
    /// gcra (default), fixed_window or sliding_window.
    #[arg(long, value_name = "ALGORITHM")]
    pub(crate) algorithm: Option<String>,
    /// What this check spends.
    #[arg(long, default_value_t = 1, value_name = "C")]
    pub(crate) cost: u64,
    /// Longest wait for Redis per decision.
    #[arg(long, default_value = "100ms", value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) timeout: Duration,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

/// `tollgate limit check NAME KEY`: prints the decision as JSON; exit 0
/// when allowed, 1 when refused.
pub(crate) async fn check(args: LimitCheckArgs) -> i32 {
    let spec = match (&args.rate, args.burst, &args.algorithm) {
        (None, None, None) => None,
        (Some(rate), burst, algorithm) => Some(LimitSpec {
            rate: rate.clone(),
            burst,
            algorithm: algorithm.clone(),
        }),
        (None, _, _) => {
            eprintln!("tollgate: --burst and --algorithm need --rate");
            return exit::USAGE;
        }
    };
    if let Some(server) = &args.store.server {
        return remote_check(server, args.store.server_token.as_deref(), &args, spec).await;
    }
    let Some(url) = &args.store.redis else {
        eprintln!(
            "tollgate: limit check needs --redis URL or --server URL (or TOLLGATE_REDIS_URL / TOLLGATE_SERVER)"
        );
        return exit::USAGE;
    };
    let Some(spec) = spec else {
        eprintln!("tollgate: limit check on Redis needs --rate (and optionally --burst, --algorithm)");
        return exit::USAGE;
    };
    let limit = match spec.limit() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tollgate: {e}");
            return exit::USAGE;
        }
    };
    // A check has never waited for replicas: the --durable-* flags are
    // not applied here, and the connection gets the check's own timeout.
    let connect_timeout = Some(args.timeout.max(Duration::from_secs(1)));
    let no_durability = DurabilityArgs::default();
    let store = match connect_redis(url, &args.store.prefix, no_durability, connect_timeout).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let decided = async {
        let limiter = RateLimiter::new(&store, &args.name, limit)?.timeout(args.timeout);
        limiter.check(&args.key, args.cost).await
    };
    match decided.await {
        Ok(d) => print_decision(&DecisionBody::from(&d)),
        Err(e) => {
            eprintln!("tollgate: {e}");
            exit::for_error(&e)
        }
    }
}

fn print_decision(d: &DecisionBody) -> i32 {
    println!("{}", serde_json::to_string(d).unwrap_or_default());
    if d.allowed { 0 } else { exit::REFUSED }
}

async fn remote_check(
    server: &str,
    token: Option<&str>,
    args: &LimitCheckArgs,
    spec: Option<LimitSpec>,
) -> i32 {
    let server = match Server::new(
        server,
        token.map(str::to_owned),
        Timeout::Total(Duration::from_secs(10)),
    ) {
        Ok(s) => s,
        Err(f) => {
            eprintln!("tollgate: {}", f.message);
            return f.code;
        }
    };
    let mut body = serde_json::json!({"key": args.key, "cost": args.cost});
    if let Some(spec) = spec {
        body["rate"] = spec.rate.into();
        if let Some(b) = spec.burst {
            body["burst"] = b.into();
        }
        if let Some(a) = spec.algorithm {
            body["algorithm"] = a.into();
        }
    }
    let path = format!("/v1/limits/{}/check", segment(&args.name));
    let answer = match server.send(server.request(Method::POST, &path).json(&body)).await {
        Ok(a) => a,
        Err(f) => {
            eprintln!("tollgate: {}", f.message);
            return f.code;
        }
    };
    let status = answer.status;
    match (status, DecisionBody::deserialize(&answer.body)) {
        (200 | 429, Ok(d)) => print_decision(&d),
        (429, _) => {
            // The server's own [protect] limit turned the check away; the
            // key was not checked.
            eprintln!("tollgate: the server is rate-limiting this client; try again later");
            exit::BUSY
        }
        _ => {
            let f = server.failure(&answer);
            eprintln!("tollgate: {}", f.message);
            f.code
        }
    }
}
