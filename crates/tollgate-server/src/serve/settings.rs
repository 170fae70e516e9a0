//! `tollgate serve`'s settings: the flags and the environment (merged by
//! clap) win over the TOML config file, which wins over the defaults.

use std::collections::HashMap;
use std::time::Duration;

use crate::api::jobs::QueueSettings;
use crate::api::limits::{LimitSettings, ProtectSettings};
use crate::cli::{DurabilityArgs, ServeArgs};
use crate::room::RoomSettings;

/// What a TOML config file may set.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    /// HOST:PORT; a host name is resolved.
    listen: Option<String>,
    redis: Option<String>,
    prefix: Option<String>,
    #[serde(default)]
    tokens: Vec<String>,
    /// Named rate limits: `[limits.NAME]`.
    #[serde(default)]
    limits: HashMap<String, LimitSettings>,
    /// Rate-limit tollgate's own /v1 API.
    protect: Option<ProtectSettings>,
    /// Where the waiting rooms listen.
    proxy_listen: Option<String>,
    /// Waiting rooms: `[rooms.NAME]`.
    #[serde(default)]
    rooms: HashMap<String, RoomSettings>,
    /// Wait for this many replicas after each change.
    durable_replicas: Option<u32>,
    /// How long to wait for them, e.g. "500ms".
    durable_timeout: Option<String>,
    /// Job queues' settings: `[queues.NAME]`.
    #[serde(default)]
    queues: HashMap<String, QueueSettings>,
    /// Waiting tickets one client may hold at once; 0: no cap.
    max_tickets_per_client: Option<usize>,
    /// How long /metrics may spend reading the store, e.g. "1s".
    metrics_timeout: Option<String>,
    /// How long a request body may take to arrive, e.g. "30s".
    body_timeout: Option<String>,
    /// The embedded store: how long an idle name's state is kept, e.g. "10m".
    memory_idle: Option<String>,
    /// With Redis: how long to wait for it at start, e.g. "30s"; absent:
    /// forever.
    wait_for_store: Option<String>,
}

/// The settings `serve` runs with.
pub(super) struct Settings {
    pub(super) listen: String,
    pub(super) redis: Option<String>,
    pub(super) prefix: String,
    pub(super) tokens: Vec<String>,
    pub(super) limits: HashMap<String, LimitSettings>,
    pub(super) protect: Option<ProtectSettings>,
    pub(super) proxy_listen: String,
    pub(super) rooms: HashMap<String, RoomSettings>,
    pub(super) durability: DurabilityArgs,
    pub(super) queues: HashMap<String, QueueSettings>,
    pub(super) max_tickets_per_client: usize,
    pub(super) metrics_timeout: Duration,
    pub(super) body_timeout: Duration,
    pub(super) memory_idle: Duration,
    /// How long to wait for Redis at start; `None`: forever.
    pub(super) wait_for_store: Option<Duration>,
}

/// A duration from a flag, else from the file's `key`, else `default`;
/// `min` to `max`.
fn duration_setting(
    key: &str,
    flag: Option<Duration>,
    file: Option<&str>,
    default: Duration,
    (min, max): (Duration, Duration),
) -> Result<Duration, String> {
    let d = match (flag, file) {
        (Some(d), _) => d,
        (None, Some(text)) => crate::cli::duration(text).map_err(|e| format!("{key}: {e}"))?,
        (None, None) => default,
    };
    if d < min || d > max {
        return Err(format!("{key} must be {min:?} to {max:?}, not {d:?}"));
    }
    Ok(d)
}

/// A listening address as given (HOST:PORT, the host a name or an IP
/// address, `[...]` around IPv6), else `default`; resolved when bound.
fn address(key: &str, given: Option<String>, default: &str) -> Result<String, String> {
    let Some(text) = given else {
        return Ok(default.to_owned());
    };
    match text.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(text),
        _ => Err(format!(
            "{key} = {text:?}: write HOST:PORT, e.g. 127.0.0.1:7700 or localhost:7700"
        )),
    }
}

/// Merges the config file, the environment and the flags: flags and
/// environment (which clap has already merged) win over the file. The
/// bearer tokens are checked too: a weak one is refused before anything
/// listens.
pub(super) fn settings(args: ServeArgs) -> Result<Settings, String> {
    let settings = merge(args)?;
    if let Some(bad) = settings
        .tokens
        .iter()
        .find(|t| t.len() < 16 || t.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        let shown: String = bad.chars().take(4).collect();
        return Err(format!(
            "--token {shown}… is too weak or malformed: use at least 16 printable characters without spaces"
        ));
    }
    Ok(settings)
}

fn merge(args: ServeArgs) -> Result<Settings, String> {
    let file = match &args.config {
        None => FileSettings::default(),
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?
        }
    };
    Ok(Settings {
        listen: address("listen", args.listen.or(file.listen), "127.0.0.1:7700")?,
        redis: args.redis.or(file.redis),
        prefix: args
            .prefix
            .or(file.prefix)
            .unwrap_or_else(|| "tollgate".to_owned()),
        tokens: if args.tokens.is_empty() {
            file.tokens
        } else {
            args.tokens
        },
        limits: file.limits,
        protect: file.protect,
        proxy_listen: address(
            "proxy_listen",
            args.proxy_listen.or(file.proxy_listen),
            "127.0.0.1:7780",
        )?,
        rooms: file.rooms,
        queues: file.queues,
        max_tickets_per_client: args
            .max_tickets_per_client
            .or(file.max_tickets_per_client)
            .unwrap_or(crate::api::tickets::DEFAULT_PER_CLIENT),
        metrics_timeout: duration_setting(
            "metrics_timeout",
            args.metrics_timeout,
            file.metrics_timeout.as_deref(),
            crate::api::metrics::METRICS_TIMEOUT,
            (Duration::from_millis(10), Duration::from_secs(60)),
        )?,
        body_timeout: duration_setting(
            "body_timeout",
            args.body_timeout,
            file.body_timeout.as_deref(),
            crate::api::body::BODY_TIMEOUT,
            (Duration::from_millis(100), Duration::from_secs(3600)),
        )?,
        memory_idle: duration_setting(
            "memory_idle",
            None,
            file.memory_idle.as_deref(),
            tollgate::MemoryOptions::default().idle,
            (Duration::from_secs(1), Duration::from_secs(30 * 24 * 3600)),
        )?,
        wait_for_store: match (args.wait_for_store, file.wait_for_store.as_deref()) {
            (None, None) => None,
            (flag, file) => Some(duration_setting(
                "wait_for_store",
                flag,
                file,
                Duration::ZERO,
                (Duration::from_millis(100), Duration::from_secs(30 * 24 * 3600)),
            )?),
        },
        durability: DurabilityArgs {
            durable_replicas: args.durability.durable_replicas.or(file.durable_replicas),
            durable_timeout: match (args.durability.durable_timeout, file.durable_timeout) {
                (Some(t), _) => Some(t),
                (None, Some(text)) => {
                    Some(crate::cli::duration(&text).map_err(|e| format!("durable_timeout: {e}"))?)
                }
                (None, None) => None,
            },
        },
    })
}
