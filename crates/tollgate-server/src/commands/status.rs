//! `tollgate lock status` / `semaphore status`: a gate's state as JSON,
//! the same fields as `GET /v1/gates/{name}` plus `leases`, its holders
//! (label, time left and handle, soonest to end first), and with
//! `--line N` the first N tickets of the line.

use clap::Args;
use reqwest::Method;
use serde_json::Value;
use tollgate::{Gate, GateOptions};

use super::StoreArgs;
use crate::api::gates::{holding_json, stats_answer};
use crate::client::{Failure, Server, Timeout, segment, usage};

pub(crate) const STATUS_EXIT_CODES: &str = "Exit codes: 0 printed; 64 bad arguments; \
69 the store or server is unreachable; 78 the set-up is wrong (Redis credentials or ACL, --server-token, the URL's DB index).";

/// `lock status` / `semaphore status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Name of the lock or semaphore.
    pub(crate) name: String,
    /// Also list the first N tickets of the line (`line`: number,
    /// position, permits, label), 1 to 1000.
    #[arg(long, value_name = "N")]
    pub(crate) line: Option<u32>,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

/// Holders listed at most.
const HOLDERS: u32 = 100;

pub(crate) async fn run(args: StatusArgs) -> i32 {
    match status(&args).await {
        Ok(v) => {
            println!("{v}");
            0
        }
        Err(f) => {
            if !f.message.is_empty() {
                eprintln!("tollgate: {}", f.message);
            }
            f.code
        }
    }
}

async fn status(args: &StatusArgs) -> Result<Value, Failure> {
    tollgate::Name::new(&args.name).map_err(|e| usage(e.message()))?;
    if let Some(url) = &args.store.server {
        let server = Server::new(
            url,
            args.store.server_token.clone(),
            Timeout::Total(std::time::Duration::from_secs(30)),
        )?;
        let path = format!("/v1/gates/{}", segment(&args.name));
        let get = |path: String| {
            let server = server.clone();
            async move {
                let answer = server.send(server.request(Method::GET, &path)).await?;
                if answer.status == 200 {
                    Ok(answer.body)
                } else {
                    Err(server.failure(&answer))
                }
            }
        };
        let mut stats = get(path.clone()).await?;
        let holders = get(format!("{path}/holders?limit={HOLDERS}")).await?;
        stats["leases"] = holders["holders"].clone();
        if let Some(n) = args.line {
            let line = get(format!("{path}/line?limit={n}")).await?;
            stats["line"] = line["line"].clone();
        }
        return Ok(stats);
    }
    let store = args.store.connect().await.map_err(|code| Failure {
        code,
        message: String::new(),
    })?;
    let gate = Gate::new(&store, &args.name, None, GateOptions::default())?;
    let stats = gate.stats().await?;
    let leases: Vec<Value> = gate
        .holders(HOLDERS)
        .await?
        .into_iter()
        .map(holding_json)
        .collect();
    let mut v = serde_json::to_value(stats_answer(args.name.clone(), stats)).map_err(|e| Failure {
        code: crate::exit::SOFTWARE,
        message: e.to_string(),
    })?;
    v["leases"] = Value::from(leases);
    if let Some(n) = args.line {
        v["line"] = super::gate_admin::line_json(gate.line(n).await?);
    }
    Ok(v)
}
