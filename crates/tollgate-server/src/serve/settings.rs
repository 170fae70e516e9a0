//! `tollgate serve`'s settings: its flags ([`ServeArgs`]) and the
//! environment (merged by clap) win over the TOML config file, which wins
//! over the defaults.

use std::collections::HashMap;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::api::jobs::queues::QueueSettings;
use crate::api::limiters::{LimitSettings, ProtectSettings};
use crate::api::schedules::ScheduleSettings;
use crate::args::{duration, port_number};
use crate::commands::DurabilityArgs;
use crate::room::RoomSettings;

/// `tollgate serve`'s flags (each also an environment variable).
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on, HOST:PORT; a host name is resolved and the
    /// first of its addresses that can be bound is used
    /// [default: 127.0.0.1:7700].
    #[arg(long, env = "TOLLGATE_LISTEN", value_name = "ADDR")]
    pub(crate) listen: Option<String>,
    /// Address the waiting rooms ([rooms.NAME] in the config) listen on,
    /// resolved like --listen [default: 127.0.0.1:7780].
    #[arg(long, env = "TOLLGATE_PROXY_LISTEN", value_name = "ADDR")]
    pub(crate) proxy_listen: Option<String>,
    /// Redis URL; without it the embedded in-memory store is used, and this
    /// one process is the whole server.
    #[arg(long, env = "TOLLGATE_REDIS_URL", value_name = "URL")]
    pub(crate) redis: Option<String>,
    /// Prefix of every Redis key [default: tollgate].
    #[arg(long, env = "TOLLGATE_PREFIX", value_name = "PREFIX")]
    pub(crate) prefix: Option<String>,
    /// Require `Authorization: Bearer <TOKEN>` (or a session cookie from
    /// POST /v1/session) on /v1 routes and /metrics; an admin token, it may
    /// do everything. Repeat for several accepted tokens (rotation).
    /// TOLLGATE_TOKENS takes a comma-separated list.
    #[arg(
        long = "token",
        env = "TOLLGATE_TOKENS",
        value_delimiter = ',',
        value_name = "TOKEN"
    )]
    pub(crate) tokens: Vec<String>,
    /// Like --token, but the token may only read (GET and HEAD); other
    /// methods answer 403 `forbidden`. TOLLGATE_READ_TOKENS takes a
    /// comma-separated list.
    #[arg(
        long = "read-token",
        env = "TOLLGATE_READ_TOKENS",
        value_delimiter = ',',
        value_name = "TOKEN"
    )]
    pub(crate) read_tokens: Vec<String>,
    /// Let a browser app on ORIGIN (scheme://host[:port], e.g.
    /// https://app.example.com) call the API directly (CORS), with a bearer
    /// token; repeat for several. Off by default; no wildcard.
    /// TOLLGATE_CORS_ORIGINS takes a comma-separated list.
    #[arg(
        long = "cors-origin",
        env = "TOLLGATE_CORS_ORIGINS",
        value_delimiter = ',',
        value_name = "ORIGIN"
    )]
    pub(crate) cors_origins: Vec<String>,
    /// A name the API answers to, besides IP addresses, localhost and
    /// --listen's host (no port: every port is); repeat for several.
    /// Without tokens a request naming another host in `Host` is refused
    /// (421 unknown_host: a page of another site reaching this server by
    /// DNS rebinding); with tokens the check runs only when names are
    /// given. TOLLGATE_PUBLIC_HOSTS takes a comma-separated list.
    #[arg(
        long = "public-host",
        env = "TOLLGATE_PUBLIC_HOSTS",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub(crate) public_hosts: Vec<String>,
    /// Serve HTTPS on both listeners (the API's and the waiting rooms')
    /// with this PEM certificate chain (the server's certificate first);
    /// with --tls-key. Both are read again on SIGHUP.
    #[arg(long, env = "TOLLGATE_TLS_CERT", value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key (PKCS #8, PKCS #1 or SEC1) of --tls-cert.
    #[arg(long, env = "TOLLGATE_TLS_KEY", value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<std::path::PathBuf>,
    /// How long a console session (POST /v1/session) lasts [default: 12h].
    #[arg(long, env = "TOLLGATE_API_SESSION_TTL", value_name = "DURATION", value_parser = duration, allow_hyphen_values = true)]
    pub(crate) api_session_ttl: Option<Duration>,
    /// A TOML file; tollgate.example.toml has every key with its default:
    /// listen, proxy_listen, redis, wait_for_store, prefix, tokens,
    /// read_tokens, cors_origins, public_hosts, tls_cert, tls_key, api_session_ttl, durable_replicas, durable_timeout, max_tickets_per_client,
    /// max_event_subscribers, metrics_timeout, body_timeout, memory_idle,
    /// data_dir, fsync, snapshot_after_mb, and the tables
    /// [limits.NAME], [protect], [queues.NAME], [schedules.NAME],
    /// [rooms.NAME]. Flags and environment variables override it.
    #[arg(long, env = "TOLLGATE_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) durability: DurabilityArgs,
    /// Waiting tickets one client (bearer token, else IP address) may hold
    /// at once through the API; 0: no cap [default: 1000].
    #[arg(long, env = "TOLLGATE_MAX_TICKETS_PER_CLIENT", value_name = "N")]
    pub(crate) max_tickets_per_client: Option<usize>,
    /// Event streams (SSE: the API's and the waiting visitors') this server
    /// serves at once; past it, 503 too_many_subscribers [default: 1000].
    #[arg(long, env = "TOLLGATE_MAX_EVENT_SUBSCRIBERS", value_name = "N")]
    pub(crate) max_event_subscribers: Option<usize>,
    /// How long /metrics may spend reading figures from the store; what is
    /// not in by then is counted as a scrape error [default: 1s].
    #[arg(long, env = "TOLLGATE_METRICS_TIMEOUT", value_name = "DURATION", value_parser = duration, allow_hyphen_values = true)]
    pub(crate) metrics_timeout: Option<Duration>,
    /// How long a request body may take to arrive; after that, 408
    /// [default: 30s].
    #[arg(long, env = "TOLLGATE_BODY_TIMEOUT", value_name = "DURATION", value_parser = duration, allow_hyphen_values = true)]
    pub(crate) body_timeout: Option<Duration>,
    /// Without --redis: how long the embedded store keeps a name nothing
    /// holds or waits for (its capacity, fence, counters) after its last
    /// use, 1s to 30 days [default: 10m].
    #[arg(long, env = "TOLLGATE_MEMORY_IDLE", value_name = "DURATION", value_parser = duration, allow_hyphen_values = true)]
    pub(crate) memory_idle: Option<Duration>,
    /// Without --redis: the directory the embedded store keeps its log and
    /// snapshots in, so that jobs, schedules, leases, lines, fences, rate
    /// limits and waiting rooms survive a restart or a crash (created if
    /// missing; one server per directory). `none`: memory only, everything
    /// is lost when the server stops [default: tollgate-data, in the
    /// working directory].
    #[arg(long, env = "TOLLGATE_DATA_DIR", value_name = "DIR")]
    pub(crate) data_dir: Option<std::path::PathBuf>,
    /// When the embedded store's log is synced to disk: `always` (before
    /// each answer; a machine crash loses nothing answered), `everysec` (a
    /// process crash loses nothing, a machine crash up to about a second),
    /// `no` (the kernel decides) [default: everysec].
    #[arg(long, env = "TOLLGATE_FSYNC", value_name = "POLICY")]
    pub(crate) fsync: Option<String>,
    /// The embedded store takes a snapshot (and drops the log it covers)
    /// once the log since the last one is this many MiB and at least as
    /// large as that snapshot, 1 to 65536 [default: 64].
    #[arg(long, env = "TOLLGATE_SNAPSHOT_AFTER_MB", value_name = "MIB")]
    pub(crate) snapshot_after_mb: Option<u64>,
    /// With --redis: how long to wait for Redis to answer at start. The
    /// server listens at once (/readyz answers 503 until Redis does) and
    /// retries; past this it exits 69 [default: wait forever].
    #[arg(long, env = "TOLLGATE_WAIT_FOR_STORE", value_name = "DURATION", value_parser = duration)]
    pub(crate) wait_for_store: Option<Duration>,
    /// Log lines on standard error as text or as one JSON object each
    /// (levels and targets: TOLLGATE_LOG, e.g. `info` or
    /// `warn,tollgate::access=info`).
    #[arg(long, env = "TOLLGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
}

/// How `serve` writes its log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line: timestamp, level, target, message and
    /// the event's fields.
    Json,
}

/// What a TOML config file may set.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    /// HOST:PORT; a host name is resolved.
    listen: Option<String>,
    redis: Option<String>,
    prefix: Option<String>,
    /// Admin tokens: may do everything.
    #[serde(default)]
    tokens: Vec<String>,
    /// Read tokens: GET and HEAD only.
    #[serde(default)]
    read_tokens: Vec<String>,
    /// How long a console session lasts, e.g. "12h".
    api_session_ttl: Option<String>,
    /// Origins whose browser apps may call the API (CORS).
    #[serde(default)]
    cors_origins: Vec<String>,
    /// Names the API answers to besides IP addresses and localhost.
    #[serde(default)]
    public_hosts: Vec<String>,
    /// Serve TLS with this PEM certificate chain and key.
    tls_cert: Option<std::path::PathBuf>,
    tls_key: Option<std::path::PathBuf>,
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
    /// Schedules created or changed at start: `[schedules.NAME]`.
    #[serde(default)]
    schedules: HashMap<String, ScheduleSettings>,
    /// Waiting tickets one client may hold at once; 0: no cap.
    max_tickets_per_client: Option<usize>,
    /// Event streams (SSE) this server serves at once.
    max_event_subscribers: Option<usize>,
    /// How long /metrics may spend reading the store, e.g. "1s".
    metrics_timeout: Option<String>,
    /// How long a request body may take to arrive, e.g. "30s".
    body_timeout: Option<String>,
    /// The embedded store: how long an idle name's state is kept, e.g. "10m".
    memory_idle: Option<String>,
    /// With Redis: how long to wait for it at start, e.g. "30s"; absent:
    /// forever.
    wait_for_store: Option<String>,
    /// The embedded store's data directory; "none": memory only.
    data_dir: Option<std::path::PathBuf>,
    /// always, everysec or no.
    fsync: Option<String>,
    /// A snapshot once the log since the last is this many MiB.
    snapshot_after_mb: Option<u64>,
}

/// The settings `serve` runs with.
pub(super) struct Settings {
    pub(super) listen: String,
    pub(super) redis: Option<String>,
    pub(super) prefix: String,
    /// Admin tokens.
    pub(super) tokens: Vec<String>,
    /// Read-only tokens.
    pub(super) read_tokens: Vec<String>,
    /// How long a console session lasts.
    pub(super) api_session_ttl: Duration,
    /// Origins whose browser apps may call the API; empty: CORS off.
    pub(super) cors: crate::api::cors::Cors,
    /// The names the API answers to (DNS rebinding).
    pub(super) public_hosts: crate::api::origin::PublicHosts,
    /// The PEM certificate chain and key both listeners serve TLS with.
    pub(super) tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    pub(super) limits: HashMap<String, LimitSettings>,
    pub(super) protect: Option<ProtectSettings>,
    pub(super) proxy_listen: String,
    pub(super) rooms: HashMap<String, RoomSettings>,
    pub(super) durability: DurabilityArgs,
    pub(super) queues: HashMap<String, QueueSettings>,
    /// The configured schedules, checked, by name.
    pub(super) schedules: Vec<(String, tollgate::ScheduleSpec)>,
    pub(super) max_tickets_per_client: usize,
    pub(super) max_event_subscribers: usize,
    pub(super) metrics_timeout: Duration,
    pub(super) body_timeout: Duration,
    pub(super) memory_idle: Duration,
    /// How long to wait for Redis at start; `None`: forever.
    pub(super) wait_for_store: Option<Duration>,
    /// Where the embedded store keeps its state; `None`: memory only.
    pub(super) data_dir: Option<std::path::PathBuf>,
    pub(super) fsync: tollgate::Fsync,
    pub(super) snapshot_after: u64,
}

/// The embedded store's data directory when none is set: a folder in the
/// working directory, as etcd's `default.etcd`.
pub(crate) const DEFAULT_DATA_DIR: &str = "tollgate-data";

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
        (None, Some(text)) => duration(text).map_err(|e| format!("{key}: {e}"))?,
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
        Some((host, port)) if !host.is_empty() && port_number(port).is_some() => Ok(text),
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
    let all = settings
        .tokens
        .iter()
        .map(|t| ("--token", t))
        .chain(settings.read_tokens.iter().map(|t| ("--read-token", t)));
    for (flag, token) in all {
        let shown: String = token.chars().take(4).collect();
        if token.len() < 16 || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "{flag} {shown}… is too weak or malformed: use at least 16 printable characters without spaces"
            ));
        }
        // A token is one role: which one would it be?
        if flag == "--read-token" && settings.tokens.contains(token) {
            return Err(format!(
                "token {shown}… is both an admin token (tokens, --token) and a read token (read_tokens, --read-token): give it one role"
            ));
        }
    }
    Ok(settings)
}

/// The mark of every placeholder secret in tollgate.example.toml.
const PLACEHOLDER: &str = "change-me";

/// Refuses a secret that still holds the example's placeholder (it
/// contains "change-me"): whoever read tollgate.example.toml knows it.
/// The message names the key.
pub(super) fn no_placeholder_secrets(settings: &Settings) -> Result<(), String> {
    let tokens = settings
        .tokens
        .iter()
        .map(|t| ("tokens (--token, TOLLGATE_TOKENS)".to_owned(), t));
    let read = settings
        .read_tokens
        .iter()
        .map(|t| ("read_tokens (--read-token, TOLLGATE_READ_TOKENS)".to_owned(), t));
    let mut rooms: Vec<_> = settings.rooms.iter().collect();
    rooms.sort_by_key(|(name, _)| *name);
    let rooms = rooms.into_iter().flat_map(|(name, room)| {
        let keys = room
            .cookie_keys
            .iter()
            .map(move |k| (format!("rooms.{name}.cookie_keys"), k));
        let header = room
            .bypass_header
            .iter()
            .map(move |h| (format!("rooms.{name}.bypass_header"), h));
        keys.chain(header)
    });
    match tokens
        .chain(read)
        .chain(rooms)
        .find(|(_, secret)| secret.to_ascii_lowercase().contains(PLACEHOLDER))
    {
        Some((key, _)) => Err(format!(
            "{key}: still the placeholder of tollgate.example.toml (it contains \"{PLACEHOLDER}\"), \
             which anyone can read: set a secret of your own (e.g. `openssl rand -base64 32`)"
        )),
        None => Ok(()),
    }
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
    let mut schedules = file
        .schedules
        .iter()
        .map(|(name, s)| Ok((name.clone(), s.spec(name)?)))
        .collect::<Result<Vec<_>, String>>()?;
    schedules.sort_by(|a, b| a.0.cmp(&b.0));
    let listen = address("listen", args.listen.or(file.listen), "127.0.0.1:7700")?;
    let with_tokens = !(args.tokens.is_empty()
        && file.tokens.is_empty()
        && args.read_tokens.is_empty()
        && file.read_tokens.is_empty());
    let public_hosts = crate::api::origin::PublicHosts::new(
        if args.public_hosts.is_empty() {
            &file.public_hosts
        } else {
            &args.public_hosts
        },
        &listen,
        with_tokens,
    )?;
    Ok(Settings {
        schedules,
        listen,
        public_hosts,
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
        // Each list on its own: --read-token does not drop the file's
        // admin tokens, nor --token its read tokens.
        read_tokens: if args.read_tokens.is_empty() {
            file.read_tokens
        } else {
            args.read_tokens
        },
        tls: match (args.tls_cert.or(file.tls_cert), args.tls_key.or(file.tls_key)) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => return Err("tls_cert and tls_key go together: give both (TLS) or neither".to_owned()),
        },
        cors: crate::api::cors::Cors::new(if args.cors_origins.is_empty() {
            &file.cors_origins
        } else {
            &args.cors_origins
        })?,
        api_session_ttl: duration_setting(
            "api_session_ttl",
            args.api_session_ttl,
            file.api_session_ttl.as_deref(),
            crate::api::auth::SESSION_TTL,
            (Duration::from_secs(60), Duration::from_secs(30 * 24 * 3600)),
        )?,
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
        max_event_subscribers: args
            .max_event_subscribers
            .or(file.max_event_subscribers)
            .unwrap_or(crate::api::streams::DEFAULT_MAX_SUBSCRIBERS),
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
            args.memory_idle,
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
        data_dir: match args.data_dir.or(file.data_dir) {
            Some(dir) if dir.as_os_str() == "none" => None,
            Some(dir) if dir.as_os_str().is_empty() => {
                return Err("data_dir must name a directory, or be none (memory only)".to_owned());
            }
            Some(dir) => Some(dir),
            None => Some(DEFAULT_DATA_DIR.into()),
        },
        fsync: match args.fsync.or(file.fsync) {
            Some(text) => text
                .parse()
                .map_err(|e: tollgate::Error| e.message().to_owned())?,
            None => tollgate::Fsync::default(),
        },
        snapshot_after: match args.snapshot_after_mb.or(file.snapshot_after_mb) {
            Some(mb @ 1..=65536) => mb << 20,
            Some(mb) => return Err(format!("snapshot_after_mb must be 1 to 65536, not {mb}")),
            None => tollgate::DEFAULT_SNAPSHOT_AFTER,
        },
        durability: DurabilityArgs {
            durable_replicas: args.durability.durable_replicas.or(file.durable_replicas),
            durable_timeout: match (args.durability.durable_timeout, file.durable_timeout) {
                (Some(t), _) => Some(t),
                (None, Some(text)) => Some(duration(&text).map_err(|e| format!("durable_timeout: {e}"))?),
                (None, None) => None,
            },
        },
    })
}

#[cfg(test)]
#[path = "../../tests/example_support/mod.rs"]
mod example_support;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::limiters::LimitSpec;
    use crate::room::RoomSettings;

    #[test]
    fn a_listen_address_is_host_and_digits() {
        for good in ["127.0.0.1:7700", "localhost:0", "[::]:7700"] {
            assert!(address("listen", Some(good.to_owned()), "").is_ok(), "{good}");
        }
        for bad in ["0.0.0.0:+7700", "7700", ":7700", "host:70000", "host:"] {
            assert!(address("listen", Some(bad.to_owned()), "").is_err(), "{bad}");
        }
    }

    /// tollgate.example.toml sets every key the server knows: it parses
    /// strictly (no key the server does not know), and each struct is
    /// taken apart without `..`, so a key added to the code and not to
    /// the example fails to compile here until the example has it.
    /// The example as written starts with no secret, file or Redis of
    /// one's own: those settings, and the room, are shown commented out
    /// as `#key = value` (prose comments start `# `).
    #[test]
    fn the_example_leaves_what_needs_ones_own_commented_out() {
        let text = include_str!("../../../../tollgate.example.toml");
        let file: FileSettings = toml::from_str(text).expect("the example parses");
        assert!(file.redis.is_none() && file.tokens.is_empty() && file.read_tokens.is_empty());
        assert!(file.tls_cert.is_none() && file.tls_key.is_none() && file.rooms.is_empty());
        for shown in [
            "#redis = ",
            "#tokens = ",
            "#read_tokens = ",
            "#tls_cert = ",
            "#[rooms.shop]",
            "#page = ",
        ] {
            assert!(text.contains(&format!("\n{shown}")), "{shown}");
        }
    }

    use super::example_support::uncommented;

    /// Each placeholder secret of the example, uncommented as it is, is
    /// refused naming its key; replaced, it passes.
    #[test]
    fn the_examples_placeholder_secrets_are_refused() {
        use clap::Parser;
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("tollgate.toml");
        std::fs::write(
            &path,
            uncommented(include_str!("../../../../tollgate.example.toml")),
        )
        .expect("write");
        let cli =
            crate::cli::Cli::try_parse_from(["tollgate", "serve", "--config", path.to_str().expect("path")])
                .expect("arguments");
        let crate::cli::Command::Serve(args) = cli.command else {
            panic!("serve");
        };
        let mut settings = merge(args).expect("the uncommented example");
        fn room(s: &mut Settings) -> &mut RoomSettings {
            s.rooms.get_mut("shop").expect("the room")
        }
        let own = "a-secret-of-my-own-0123456789-0123456789".to_owned();
        for key in [
            "tokens (--token",
            "read_tokens (--read-token",
            "rooms.shop.cookie_keys",
            "rooms.shop.bypass_header",
        ] {
            let refused = no_placeholder_secrets(&settings).expect_err(key);
            assert!(
                refused.starts_with(key) && refused.contains("change-me"),
                "{refused}"
            );
            match key {
                "tokens (--token" => settings.tokens = vec![own.clone()],
                "read_tokens (--read-token" => settings.read_tokens = vec![format!("{own}-read")],
                "rooms.shop.cookie_keys" => room(&mut settings).cookie_keys = vec![own.clone()],
                _ => room(&mut settings).bypass_header = Some(format!("X-Internal: {own}")),
            }
        }
        assert_eq!(no_placeholder_secrets(&settings), Ok(()));
    }

    #[test]
    fn the_example_config_sets_every_key() {
        let text = uncommented(include_str!("../../../../tollgate.example.toml"));
        let file: FileSettings = toml::from_str(&text).expect("the example parses");
        let FileSettings {
            listen,
            redis,
            prefix,
            tokens,
            read_tokens,
            cors_origins,
            public_hosts,
            tls_cert,
            tls_key,
            api_session_ttl,
            limits,
            protect,
            proxy_listen,
            rooms,
            durable_replicas,
            durable_timeout,
            queues,
            schedules,
            max_tickets_per_client,
            max_event_subscribers,
            metrics_timeout,
            body_timeout,
            memory_idle,
            wait_for_store,
            data_dir,
            fsync,
            snapshot_after_mb,
        } = file;
        assert!(data_dir.is_some() && fsync.is_some() && snapshot_after_mb.is_some());
        assert!(listen.is_some() && redis.is_some() && prefix.is_some() && !tokens.is_empty());
        assert!(!read_tokens.is_empty() && api_session_ttl.is_some() && !cors_origins.is_empty());
        assert!(!public_hosts.is_empty());
        assert!(tls_cert.is_some() && tls_key.is_some());
        assert!(proxy_listen.is_some() && durable_replicas.is_some() && durable_timeout.is_some());
        assert!(max_tickets_per_client.is_some() && metrics_timeout.is_some());
        assert!(max_event_subscribers.is_some());
        assert!(body_timeout.is_some() && memory_idle.is_some() && wait_for_store.is_some());
        // `serve --help` names every key the destructuring above names.
        let help = {
            use clap::CommandFactory;
            let mut cli = crate::cli::Cli::command();
            cli.find_subcommand_mut("serve")
                .expect("serve")
                .render_long_help()
                .to_string()
        };
        for key in [
            "listen",
            "redis",
            "prefix",
            "tokens",
            "read_tokens",
            "cors_origins",
            "public_hosts",
            "tls_cert",
            "tls_key",
            "api_session_ttl",
            "[limits.NAME]",
            "[protect]",
            "proxy_listen",
            "[rooms.NAME]",
            "durable_replicas",
            "durable_timeout",
            "[queues.NAME]",
            "[schedules.NAME]",
            "max_tickets_per_client",
            "max_event_subscribers",
            "metrics_timeout",
            "body_timeout",
            "memory_idle",
            "wait_for_store",
            "data_dir",
            "fsync",
            "snapshot_after_mb",
        ] {
            assert!(help.contains(key), "serve --help does not name {key}");
        }
        assert!(help.contains("tollgate.example.toml"));

        let limit = limits.values().next().expect("a [limits.NAME]").clone();
        let LimitSettings {
            spec,
            on_store_error,
            timeout_ms,
        } = limit;
        let LimitSpec {
            rate,
            burst,
            algorithm,
        } = spec;
        assert!(!rate.is_empty() && burst.is_some() && algorithm.is_some());
        assert!(on_store_error.is_some() && timeout_ms.is_some());

        let ProtectSettings {
            limit,
            key,
            trusted_proxies,
        } = protect.expect("[protect]");
        assert!(!limit.is_empty() && key.is_some() && !trusted_proxies.is_empty());

        let QueueSettings {
            partitions,
            concurrency,
            rate,
            group_concurrency,
            group_rate,
        } = queues.values().next().expect("a [queues.NAME]").clone();
        assert!(partitions >= 1);
        assert!(
            concurrency.is_some() && rate.is_some() && group_concurrency.is_some() && group_rate.is_some()
        );

        let ScheduleSettings {
            when,
            zone,
            queue,
            payload,
            priority,
            max_attempts,
            backoff,
            group,
            misfire,
            max_catch_up,
            start,
            end,
            jitter,
            paused,
        } = schedules.values().next().expect("a [schedules.NAME]").clone();
        assert!(!when.is_empty() && zone.is_some() && !queue.is_empty() && payload.is_some());
        assert!(priority.is_some() && max_attempts.is_some() && backoff.is_some() && misfire.is_some());
        assert!(max_catch_up.is_some() && start.is_some() && end.is_some() && jitter.is_some());
        assert!(paused.is_some() && group.is_some());
        let (name, settings) = schedules.iter().next().expect("a [schedules.NAME]");
        settings.spec(name).expect("the example schedule is valid");

        let RoomSettings {
            upstream,
            upstream_ca,
            upstream_client_cert,
            upstream_client_key,
            hosts,
            path_prefix,
            capacity,
            admissions_per_minute,
            session_ttl,
            grace,
            cookie_keys,
            status_rate,
            arrival_rate,
            on_store_error,
            store_timeout_ms,
            upstream_timeout_ms,
            page,
            queued_status,
            bypass_paths,
            bypass_ips,
            bypass_header,
            trusted_proxies,
            upgrades,
            secure_cookie,
            try_again_page,
            upstream_down_page,
            upstream_timeout_page,
            closed_page,
            sold_out_page,
            not_open_page,
            challenge_bits,
            state,
            opens_at,
            order_at_open,
            queueing,
            prequeue,
            closes_at,
            lang,
            line_ages,
        } = rooms.values().next().expect("a [rooms.NAME]").clone();
        assert!(!upstream.is_empty() && !hosts.is_empty() && path_prefix.is_some() && capacity > 0);
        assert!(admissions_per_minute.is_some() && session_ttl.is_some() && grace.is_some());
        assert!(!cookie_keys.is_empty() && status_rate.is_some() && arrival_rate.is_some());
        assert!(on_store_error.is_some() && store_timeout_ms.is_some() && upstream_timeout_ms.is_some());
        assert!(page.is_some() && queued_status.is_some() && !bypass_paths.is_empty());
        assert!(!bypass_ips.is_empty() && bypass_header.is_some() && !trusted_proxies.is_empty());
        assert!(upgrades.is_some() && secure_cookie.is_some() && lang.is_some() && line_ages.is_some());
        assert!(try_again_page.is_some() && upstream_down_page.is_some() && upstream_timeout_page.is_some());
        assert!(upstream_ca.is_some() && upstream_client_cert.is_some() && upstream_client_key.is_some());
        assert!(closed_page.is_some() && sold_out_page.is_some() && state.is_some());
        assert!(not_open_page.is_some() && opens_at.is_some() && prequeue.is_some() && closes_at.is_some());
        assert!(challenge_bits.is_some() && order_at_open.is_some() && queueing.is_some());
    }
}
