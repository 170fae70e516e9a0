//! `tollgate lock revoke` / `lock remove`: an admin's end of a holder (by
//! handle) or of a ticket in line (by number), on the store or through
//! `tollgate serve` (`--server`).

use clap::Args;
use reqwest::Method;
use serde_json::{Value, json};
use tollgate::{Gate, GateOptions, Left, Waiting};

use super::StoreArgs;
use crate::client::{Failure, Server, Timeout, segment, usage};
use crate::exit;

pub(crate) const ADMIN_EXIT_CODES: &str = "Exit codes: 0 done; 64 bad arguments; 65 no such holder or ticket; \
69 the store or server is unreachable; 78 the set-up is wrong (Redis credentials or ACL, --server-token, the URL's DB index).";

/// `lock revoke`.
#[derive(Debug, Args)]
pub(crate) struct RevokeArgs {
    /// Name of the lock or semaphore.
    pub(crate) name: String,
    /// The holder's handle: 16 hex digits, from `status`'s `leases`.
    pub(crate) handle: String,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

/// `lock remove`.
#[derive(Debug, Args)]
pub(crate) struct RemoveArgs {
    /// Name of the lock or semaphore.
    pub(crate) name: String,
    /// The ticket's number, from `status --line N`'s `line`.
    pub(crate) number: u64,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

/// The line as `GET /v1/gates/{name}/line` shows it.
pub(crate) fn line_json(line: Vec<Waiting>) -> Value {
    line.into_iter()
        .map(|w| json!({"number": w.number, "position": w.position, "permits": w.permits, "label": w.label}))
        .collect()
}

pub(crate) async fn revoke(args: RevokeArgs) -> i32 {
    let path = format!(
        "/v1/gates/{}/holders/{}",
        segment(&args.name),
        segment(&args.handle)
    );
    let done = act(&args.name, &args.store, path, |gate| {
        let handle = args.handle.clone();
        async move { gate.revoke(&handle).await }
    });
    report(done.await, "revoked", "no current holder has that handle")
}

pub(crate) async fn remove(args: RemoveArgs) -> i32 {
    let path = format!("/v1/gates/{}/line/{}", segment(&args.name), args.number);
    let number = args.number;
    let done = act(&args.name, &args.store, path, |gate| async move {
        gate.remove_waiter(number).await
    });
    report(done.await, "removed", "no ticket in line has that number")
}

/// Runs the admin step on the store, or sends `DELETE path` to the
/// server; `Ok(false)`: nobody by that handle or number.
async fn act<F, Fut>(name: &str, store: &StoreArgs, path: String, op: F) -> Result<bool, Failure>
where
    F: FnOnce(Gate) -> Fut,
    Fut: std::future::Future<Output = tollgate::Result<Left>>,
{
    tollgate::Name::new(name).map_err(|e| usage(e.message()))?;
    if let Some(url) = &store.server {
        let server = Server::new(
            url,
            store.server_token.clone(),
            Timeout::Total(std::time::Duration::from_secs(30)),
        )?;
        let answer = server.send(server.request(Method::DELETE, &path)).await?;
        return match answer.status {
            200 => Ok(true),
            404 if answer.exit_code() == exit::NO_SUCH => Ok(false),
            _ => Err(server.failure(&answer)),
        };
    }
    let store = store.connect().await.map_err(|code| Failure {
        code,
        message: String::new(),
    })?;
    let gate = Gate::new(&store, name, None, GateOptions::default())?;
    Ok(op(gate).await? != Left::Unknown)
}

fn report(done: Result<bool, Failure>, what: &str, none: &str) -> i32 {
    match done {
        Ok(true) => {
            println!("{}", json!({ what: true }));
            0
        }
        Ok(false) => {
            eprintln!("tollgate: {none}");
            exit::NO_SUCH
        }
        Err(f) => {
            if !f.message.is_empty() {
                eprintln!("tollgate: {}", f.message);
            }
            f.code
        }
    }
}
