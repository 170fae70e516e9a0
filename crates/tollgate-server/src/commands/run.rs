//! `tollgate lock run` and `tollgate semaphore run`: hold a lease while a
//! child command runs.

use std::ffi::OsString;
use std::process::ExitStatus;
use std::time::Duration;

use clap::{Args, ValueEnum};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};
use tollgate::{Gate, GateOptions, Lease, RW_PERMITS, RwMode};

use super::StoreArgs;
use super::remote_lease::{Ask, Remote, RemoteLease};
use crate::args::duration;
use crate::exit;

/// What `lock run` does when the lock is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum IfBusy {
    /// Exit 75 with a message.
    Fail,
    /// Exit 0, silently.
    Skip,
}

/// `semaphore run`: `lock run`'s arguments and the permits.
#[derive(Debug, Args)]
pub(crate) struct SemaphoreRunArgs {
    /// Number of permits of the semaphore. Without it, the capacity
    /// already stored is used (a semaphore that has none needs it). A
    /// different number than the stored one is refused (exit 64) unless
    /// --resize is given.
    #[arg(long, value_name = "N")]
    pub(crate) limit: Option<u32>,
    /// Permits to take.
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub(crate) permits: u32,
    /// With --limit: store N as the semaphore's capacity first (raising
    /// admits waiters at once; lowering takes effect as holders leave).
    #[arg(long, requires = "limit")]
    pub(crate) resize: bool,
    #[command(flatten)]
    pub(crate) run: RunArgs,
}

/// `lock run`: the run's arguments and the read-write lock's mode.
#[derive(Debug, Args)]
pub(crate) struct LockRunArgs {
    /// Hold NAME as a reader of a read-write lock: alongside any other
    /// --shared runs, never with an --exclusive one. A read-write lock is
    /// not the plain lock of the same name (mixing them exits 64).
    #[arg(long)]
    pub(crate) shared: bool,
    /// Hold NAME as the writer of a read-write lock: alone. Readers that
    /// come after a waiting writer wait behind it, so a stream of readers
    /// never starves it.
    #[arg(long, conflicts_with = "shared")]
    pub(crate) exclusive: bool,
    #[command(flatten)]
    pub(crate) run: RunArgs,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Name of the lock or semaphore (letters, digits, _ - . : / @).
    pub(crate) name: String,
    /// Lease length; renewed every third of it while the command runs.
    #[arg(long, default_value = "30s", value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) ttl: Duration,
    /// How long a waiter may go without a heartbeat (it sends one at least
    /// every second) before it loses its place in line.
    #[arg(long, default_value = "10s", value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) heartbeat: Duration,
    /// How long to wait in line; 0 means try once.
    #[arg(long, default_value = "0s", value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) wait: Duration,
    /// Keep the lock at least this long after the grant, even when the
    /// command exits sooner: a runner that finishes early shortens its
    /// lease to end at grant + D (by the store's clock) and exits at once,
    /// so machines whose cron fired a little later find it taken. Make it
    /// longer than the fleet's clock skew plus cron start jitter.
    #[arg(long, value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) min_hold: Option<Duration>,
    /// Hold the lock at most this long after the grant: then the command
    /// is stopped (SIGTERM, SIGKILL 10 s later), the lease is let go and
    /// the run exits 76, however its renewals go. The lease is never
    /// renewed past it, so the lock is freed at grant + D even if this
    /// process freezes. Unset: no cap. At least --min-hold.
    #[arg(long, value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) max_hold: Option<Duration>,
    /// When the lock is taken (or was taken within --min-hold): `fail`
    /// exits 75 with a message; `skip` exits 0 and prints nothing (-v says
    /// why), so skipping machines stay silent in cron mail.
    #[arg(long, value_enum, default_value_t = IfBusy::Fail, value_name = "WHAT")]
    pub(crate) if_busy: IfBusy,
    /// Say more: with --if-busy skip, why it skipped.
    #[arg(short, long)]
    pub(crate) verbose: bool,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// How long a child gets after SIGTERM (lease lost) before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(10);

pub(crate) async fn lock(args: LockRunArgs) -> i32 {
    let (permits, what) = match (args.shared, args.exclusive) {
        (false, false) => (Permits::LOCK, "lock"),
        (shared, _) => {
            let mode = if shared { RwMode::Shared } else { RwMode::Exclusive };
            let permits = Permits {
                limit: Some(RW_PERMITS),
                take: mode.permits(),
                resize: false,
            };
            (permits, "read-write lock")
        }
    };
    run(args.run, permits, what).await
}

pub(crate) async fn semaphore(args: SemaphoreRunArgs) -> i32 {
    let permits = Permits {
        limit: args.limit,
        take: args.permits,
        resize: args.resize,
    };
    run(args.run, permits, "semaphore").await
}

/// What a run asks of the gate.
#[derive(Debug, Clone, Copy)]
struct Permits {
    /// The capacity; `None`: the stored one.
    limit: Option<u32>,
    /// Permits to take.
    take: u32,
    /// Store `limit` as the capacity first.
    resize: bool,
}

impl Permits {
    const LOCK: Permits = Permits {
        limit: Some(1),
        take: 1,
        resize: false,
    };
}

async fn run(args: RunArgs, permits: Permits, what: &str) -> i32 {
    let options = GateOptions {
        ttl: args.ttl,
        heartbeat: args.heartbeat,
        max_hold: args.max_hold,
        ..GateOptions::default()
    };
    // Validate before connecting, so bad input never waits on the network.
    if let Err(msg) = validate(&args, permits) {
        eprintln!("tollgate: {msg}");
        return exit::USAGE;
    }
    if let Some(server) = &args.store.server {
        return run_remote(server, &args, permits, what).await;
    }
    let store = match args.store.connect().await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let gate = match Gate::new(&store, &args.name, permits.limit, options) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("tollgate: {}", e.message());
            return exit::USAGE;
        }
    };
    let resized = match permits.limit {
        Some(n) if permits.resize => gate.set_capacity(n).await,
        _ => Ok(()),
    };
    let lease = match resized {
        Ok(()) => {
            gate.acquire_as(permits.take, args.wait, Some(&holder_label()))
                .await
        }
        Err(e) => Err(e),
    };
    let lease = match lease {
        Ok(Some(lease)) => lease,
        Ok(None) => return busy(&args, what),
        Err(e) => {
            eprintln!(
                "tollgate: cannot acquire {what} {:?}: {}",
                args.name,
                cli_words(&e, what)
            );
            return exit::for_error(&e);
        }
    };
    supervise(Held::Local(lease), &Job::of(&args), what).await
}

/// `e` as the CLI says it: a capacity conflict or a missing capacity names
/// the flags that mend it.
fn cli_words(e: &tollgate::Error, what: &str) -> String {
    match e.kind() {
        tollgate::ErrorKind::CapacityConflict if what != "semaphore" => format!(
            "{e}: a read-write lock (--shared, --exclusive) and a plain lock (or a semaphore) cannot share a name"
        ),
        tollgate::ErrorKind::CapacityConflict => {
            format!("{e}: give the stored number, leave --limit out, or change it with --limit N --resize")
        }
        tollgate::ErrorKind::NoCapacity => format!("{e}: give --limit N"),
        _ => e.to_string(),
    }
}

/// Not acquired within --wait: 75 with a message, or with `--if-busy
/// skip` 0 and silence (a reason only with -v).
fn busy(args: &RunArgs, what: &str) -> i32 {
    let why = format!(
        "{what} {:?} is busy; not acquired within {}",
        args.name,
        humantime::format_duration(args.wait)
    );
    match args.if_busy {
        IfBusy::Fail => {
            eprintln!("tollgate: {why}");
            exit::BUSY
        }
        IfBusy::Skip => {
            if args.verbose {
                eprintln!("tollgate: skipped: {why} (or taken within its --min-hold)");
            }
            0
        }
    }
}

/// Who holds, for `lock status`: this host, process and start time (at
/// most 64 printable characters, as labels must be).
pub(crate) fn holder_label() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host: String = host
        .trim()
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(32)
        .collect();
    let host = if host.is_empty() {
        "unknown-host".to_owned()
    } else {
        host
    };
    let since = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    format!("{host} pid {} since {since}", std::process::id())
}

async fn run_remote(server: &str, args: &RunArgs, permits: Permits, what: &str) -> i32 {
    let remote = match Remote::new(server, &args.name, args.store.server_token.clone()) {
        Ok(r) => r,
        Err(f) => {
            eprintln!("tollgate: {}", f.message);
            return f.code;
        }
    };
    let resized = match permits.limit {
        Some(n) if permits.resize => remote.set_capacity(n).await,
        _ => Ok(()),
    };
    let acquired = match resized {
        Ok(()) => {
            let label = holder_label();
            let ask = Ask {
                capacity: permits.limit,
                permits: permits.take,
                ttl: args.ttl,
                heartbeat: args.heartbeat,
                wait: args.wait,
                label: &label,
                max_hold: args.max_hold,
            };
            remote.acquire(&ask).await
        }
        Err(f) => Err(f),
    };
    match acquired {
        Ok(Some(lease)) => supervise(Held::Remote(lease), &Job::of(args), what).await,
        Ok(None) => busy(args, what),
        Err(f) => {
            eprintln!("tollgate: cannot acquire {what} {:?}: {}", args.name, f.message);
            f.code
        }
    }
}

/// What `supervise` runs and keeps to: the command, and the holds.
pub(crate) struct Job<'a> {
    /// The lock's (or election's) name, for messages and TOLLGATE_NAME.
    pub(crate) name: &'a str,
    pub(crate) command: &'a [OsString],
    pub(crate) min_hold: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
    /// More of the command's environment.
    pub(crate) env: Vec<(&'static str, String)>,
    /// Told the command's pid once it started.
    pub(crate) on_spawn: Option<&'a (dyn Fn(u32) + Sync)>,
}

impl Job<'_> {
    fn of(args: &RunArgs) -> Job<'_> {
        Job {
            name: &args.name,
            command: &args.command,
            min_hold: args.min_hold,
            max_hold: args.max_hold,
            env: Vec::new(),
            on_spawn: None,
        }
    }
}

/// A lease held directly on the store or through a tollgate server.
pub(crate) enum Held {
    Local(Lease),
    Remote(RemoteLease),
}

/// How releasing went.
pub(crate) enum Released {
    Done,
    /// The lease had ended before the release.
    AlreadyEnded,
    Failed(String),
}

impl Held {
    pub(crate) fn fence(&self) -> u64 {
        match self {
            Held::Local(l) => l.fence(),
            Held::Remote(r) => r.fence,
        }
    }

    pub(crate) fn token(&self) -> &str {
        match self {
            Held::Local(l) => l.token(),
            Held::Remote(r) => r.token(),
        }
    }

    async fn lost(&self) {
        match self {
            Held::Local(l) => l.lost().await,
            Held::Remote(r) => r.lost().await,
        }
    }

    /// The lease ended because it was held for its max_hold (neither is
    /// renewed past it).
    fn reached_max_hold(&self) -> bool {
        match self {
            Held::Local(l) => l.reached_max_hold(),
            Held::Remote(r) => r.reached_max_hold(),
        }
    }

    pub(crate) async fn release(self) -> Released {
        self.release_after(Duration::ZERO).await
    }

    /// Lets the lease end `hold` from now (`--min-hold`), or at once.
    async fn release_after(self, hold: Duration) -> Released {
        match self {
            Held::Local(l) => match l.release_after(hold).await {
                Ok(()) => Released::Done,
                Err(e) if e.is_lease_lost() => Released::AlreadyEnded,
                Err(e) => Released::Failed(e.to_string()),
            },
            Held::Remote(r) => match r.release_after(hold).await {
                Ok(true) => Released::Done,
                Ok(false) => Released::AlreadyEnded,
                Err(f) => Released::Failed(f.message),
            },
        }
    }
}

fn validate(args: &RunArgs, permits: Permits) -> Result<(), String> {
    tollgate::Name::new(&args.name).map_err(|e| e.message().to_owned())?;
    let most = permits.limit.unwrap_or(tollgate::MAX_CAPACITY);
    if most == 0 || most > tollgate::MAX_CAPACITY {
        return Err(format!(
            "--limit must be between 1 and {}, got {most}",
            tollgate::MAX_CAPACITY
        ));
    }
    if permits.take == 0 || permits.take > most {
        return Err(format!(
            "--permits must be between 1 and --limit ({most}), got {}",
            permits.take
        ));
    }
    if args.ttl < tollgate::MIN_TTL || args.ttl > tollgate::MAX_TTL {
        return Err(format!(
            "--ttl must be between {} and 24h, got {}",
            humantime::format_duration(tollgate::MIN_TTL),
            humantime::format_duration(args.ttl)
        ));
    }
    if args.heartbeat < tollgate::MIN_TTL || args.heartbeat > tollgate::MAX_TTL {
        return Err(format!(
            "--heartbeat must be between {} and 24h, got {}",
            humantime::format_duration(tollgate::MIN_TTL),
            humantime::format_duration(args.heartbeat)
        ));
    }
    if args.wait > tollgate::MAX_TTL {
        return Err("--wait must be at most 24h".to_owned());
    }
    if args.min_hold.is_some_and(|d| d > tollgate::MAX_TTL) {
        return Err("--min-hold must be at most 24h".to_owned());
    }
    if let Some(max) = args.max_hold {
        if max < tollgate::MIN_TTL || max > tollgate::MAX_TTL {
            return Err(format!(
                "--max-hold must be between {} and 24h, got {}",
                humantime::format_duration(tollgate::MIN_TTL),
                humantime::format_duration(max)
            ));
        }
        if args.min_hold.is_some_and(|min| min > max) {
            return Err("--min-hold must not be longer than --max-hold".to_owned());
        }
    }
    Ok(())
}

pub(crate) async fn supervise(lease: Held, args: &Job<'_>, what: &str) -> i32 {
    // A moment after the grant: holding to here + --min-hold keeps the
    // lock at least that long after it.
    let granted = std::time::Instant::now();
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env("TOLLGATE_FENCE", lease.fence().to_string())
        .env("TOLLGATE_NAME", args.name)
        .envs(args.env.iter().map(|(k, v)| (k, v)))
        .kill_on_drop(false);
    let mut child = match cmd.spawn() {
        Ok(c) => {
            if let (Some(told), Some(pid)) = (args.on_spawn, c.id()) {
                told(pid);
            }
            c
        }
        Err(e) => {
            eprintln!("tollgate: cannot run {:?}: {e}", args.command[0]);
            let _ = lease.release().await;
            return if e.kind() == std::io::ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::CANNOT_EXECUTE
            };
        }
    };
    let (Ok(mut sigterm), Ok(mut sigint), Ok(mut sighup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        eprintln!("tollgate: cannot install signal handlers");
        terminate(&mut child).await;
        let _ = lease.release().await;
        return exit::SOFTWARE;
    };
    // --max-hold: by this process's clock from the grant (the lease's own
    // cap, from the request's send, is a little earlier for a local one).
    let cap = async {
        match args.max_hold {
            Some(d) => tokio::time::sleep_until((granted + d).into()).await,
            None => std::future::pending().await,
        }
    };
    let status = {
        let lost = lease.lost();
        tokio::pin!(lost, cap);
        loop {
            tokio::select! {
                status = child.wait() => break Ok(status),
                () = &mut lost => break Err(lease.reached_max_hold()),
                () = &mut cap => break Err(true),
                _ = sigterm.recv() => forward(&child, Signal::SIGTERM),
                _ = sigint.recv() => forward(&child, Signal::SIGINT),
                _ = sighup.recv() => forward(&child, Signal::SIGHUP),
            }
        }
    };
    let status = match status {
        Ok(status) => status,
        Err(true) => return held_too_long(&mut child, lease, args, what).await,
        Err(false) => {
            eprintln!(
                "tollgate: lease on {what} {:?} was lost; stopping the command with SIGTERM",
                args.name
            );
            terminate(&mut child).await;
            return exit::LEASE_LOST;
        }
    };
    let hold = args
        .min_hold
        .map_or(Duration::ZERO, |d| d.saturating_sub(granted.elapsed()));
    match lease.release_after(hold).await {
        Released::AlreadyEnded => {
            eprintln!(
                "tollgate: the lease on {what} {:?} had ended before the command finished",
                args.name
            );
            return exit::LEASE_LOST;
        }
        Released::Failed(e) => {
            eprintln!(
                "tollgate: could not release {what} {:?}: {e} (it expires by itself)",
                args.name
            )
        }
        Released::Done => {}
    }
    match status {
        Ok(status) => code_of(status),
        Err(e) => {
            eprintln!("tollgate: lost track of the command: {e}");
            exit::SOFTWARE
        }
    }
}

/// --max-hold ran out: the command is stopped and the lease let go.
async fn held_too_long(child: &mut Child, lease: Held, args: &Job<'_>, what: &str) -> i32 {
    eprintln!(
        "tollgate: {what} {:?} was held for --max-hold {}; stopping the command with SIGTERM",
        args.name,
        humantime::format_duration(args.max_hold.unwrap_or_default())
    );
    terminate(child).await;
    let _ = lease.release().await;
    exit::LEASE_LOST
}

fn code_of(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

fn forward(child: &Child, sig: Signal) {
    if let Some(pid) = child.id() {
        let _ = kill(Pid::from_raw(pid as i32), sig);
    }
}

async fn terminate(child: &mut Child) {
    forward(child, Signal::SIGTERM);
    if tokio::time::timeout(TERM_GRACE, child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}
