//! `jobs limits`, `jobs group-limits` and `jobs groups`: a queue's limits
//! applied at claim and its groups (docs/JOBS.md, "Fair queues"), on the
//! store or through `--server`, printing the JSON the HTTP API answers.

use clap::Args;
use reqwest::Method;
use serde_json::{Value, json};

use super::queue::{Queue, QueueTarget};
use crate::api::jobs::fair::group_json;
use crate::api::jobs::settings::SettingsBody;
use crate::client::{Failure, segment, usage};

#[derive(Debug, Args)]
pub(crate) struct JobsLimitsArgs {
    #[command(flatten)]
    pub(crate) target: QueueTarget,
    /// At most N of the queue's jobs running at once.
    #[arg(long, value_name = "N")]
    pub(crate) concurrency: Option<u32>,
    /// At most this many claims per period for the queue: N/s, N/min,
    /// N/h, N/d or N/<duration>.
    #[arg(long, value_name = "RATE")]
    pub(crate) rate: Option<String>,
    /// At most N running at once per group.
    #[arg(long, value_name = "N")]
    pub(crate) group_concurrency: Option<u32>,
    /// At most this many claims per period per group.
    #[arg(long, value_name = "RATE")]
    pub(crate) group_rate: Option<String>,
    /// Drop every limit of the queue.
    #[arg(long, conflicts_with_all = ["concurrency", "rate", "group_concurrency", "group_rate"])]
    pub(crate) none: bool,
}

#[derive(Debug, Args)]
pub(crate) struct JobsGroupLimitsArgs {
    #[command(flatten)]
    pub(crate) target: QueueTarget,
    /// The group.
    #[arg(long, value_name = "GROUP")]
    pub(crate) group: String,
    /// At most N of the group's jobs running at once.
    #[arg(long, value_name = "N")]
    pub(crate) concurrency: Option<u32>,
    /// At most this many of the group's jobs claimed per period.
    #[arg(long, value_name = "RATE")]
    pub(crate) rate: Option<String>,
    /// Drop the group's own limits: the queue's group limits apply.
    #[arg(long, conflicts_with_all = ["concurrency", "rate"])]
    pub(crate) drop: bool,
}

#[derive(Debug, Args)]
pub(crate) struct JobsGroupsArgs {
    #[command(flatten)]
    pub(crate) target: QueueTarget,
    /// At most this many (1 to 1000).
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub(crate) limit: usize,
    /// Where to start: the "next" of the page before.
    #[arg(long, value_name = "CURSOR")]
    pub(crate) after: Option<String>,
}

/// `jobs limits`: prints the queue's limits; with any limit (or --none),
/// replaces them first.
pub(crate) async fn limits(args: JobsLimitsArgs) -> Result<i32, Failure> {
    let body = SettingsBody {
        concurrency: args.concurrency,
        rate: args.rate.clone(),
        group_concurrency: args.group_concurrency,
        group_rate: args.group_rate.clone(),
    };
    let set = args.none
        || body.concurrency.is_some()
        || body.rate.is_some()
        || body.group_concurrency.is_some()
        || body.group_rate.is_some();
    // Checked before connecting: bad input never waits on the network.
    let limits = body
        .limits()
        .map_err(|e| usage(e.item()["message"].as_str().unwrap_or_default().to_owned()))?;
    let q = Queue::open(&args.target, set).await?;
    let answer = match &q {
        Queue::Local(q) if set => {
            q.set_limits(&limits).await?;
            serde_json::to_value(SettingsBody::of(&limits)).unwrap_or_default()
        }
        Queue::Local(q) => serde_json::to_value(SettingsBody::of(&q.limits().await?)).unwrap_or_default(),
        Queue::Remote(r) if set => r.call(r.request(Method::PUT, "/settings").json(&body)).await?.1,
        Queue::Remote(r) => r.call(r.request(Method::GET, "/settings")).await?.1,
    };
    println!("{answer}");
    Ok(0)
}

/// `jobs group-limits`: prints a group's own limits (null: none); with
/// --concurrency or --rate sets them first, with --drop drops them.
pub(crate) async fn group_limits(args: JobsGroupLimitsArgs) -> Result<i32, Failure> {
    let rate = args
        .rate
        .as_deref()
        .map(|r| {
            r.parse::<tollgate::Rate>()
                .map_err(|e| usage(format!("--rate: {e}")))
        })
        .transpose()?;
    let own = tollgate::GroupLimits {
        concurrency: args.concurrency,
        rate,
    };
    let set = own != tollgate::GroupLimits::default();
    let q = Queue::open(&args.target, set || args.drop).await?;
    let path = format!("/groups/{}/limits", segment(&args.group));
    let shown = |l: &tollgate::GroupLimits| json!({"concurrency": l.concurrency, "rate": l.rate.map(|r| r.to_string())});
    // A change prints what it set (dropped: null); only a read asks.
    let answer = match &q {
        Queue::Local(q) if set || args.drop => {
            q.set_group_limits(&args.group, set.then_some(&own)).await?;
            if set { shown(&own) } else { Value::Null }
        }
        Queue::Local(q) => q
            .group_limits(&args.group)
            .await?
            .as_ref()
            .map_or(Value::Null, shown),
        Queue::Remote(r) if args.drop => {
            r.call(r.request(Method::DELETE, &path)).await?;
            Value::Null
        }
        Queue::Remote(r) if set => {
            let body = json!({"concurrency": own.concurrency, "rate": args.rate});
            r.call(r.request(Method::PUT, &path).json(&body)).await?.1
        }
        Queue::Remote(r) => match r.call(r.request(Method::GET, &path)).await {
            Ok((_, v)) => v,
            Err(f) if f.code == crate::exit::NO_SUCH => Value::Null,
            Err(f) => return Err(f),
        },
    };
    println!("{answer}");
    Ok(0)
}

/// `jobs groups`: one page of the queue's groups as JSON lines, most ready
/// jobs first; if there are more, a last line {"next": CURSOR}.
pub(crate) async fn groups(args: JobsGroupsArgs) -> Result<i32, Failure> {
    if args.limit == 0 || args.limit > tollgate::MAX_GROUP_LIST {
        return Err(usage(format!(
            "--limit must be 1 to {}",
            tollgate::MAX_GROUP_LIST
        )));
    }
    let q = Queue::open(&args.target, false).await?;
    let (rows, next) = match &q {
        Queue::Local(q) => {
            let page = q.groups(args.after.as_deref(), args.limit).await?;
            (page.groups.iter().map(group_json).collect(), page.next)
        }
        Queue::Remote(r) => {
            let after = args
                .after
                .as_deref()
                .map_or(String::new(), |a| format!("&after={}", segment(a)));
            let url = format!("/groups?limit={}{after}", args.limit);
            let (_, v) = r.call(r.request(Method::GET, &url)).await?;
            let rows = v["groups"].as_array().cloned().unwrap_or_default();
            (rows, v["next"].as_str().map(str::to_owned))
        }
    };
    for row in rows {
        println!("{row}");
    }
    if let Some(next) = next {
        println!("{}", json!({"next": next}));
    }
    Ok(0)
}
