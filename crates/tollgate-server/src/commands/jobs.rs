//! `tollgate jobs push|work|stats|dead|completed|replay|purge|cancel|reschedule|repartition|pause|resume`;
//! `jobs work --schedules` also fires the store's schedules.

use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use tollgate::{Backoff, OnDuplicate, PushOptions};

use super::StoreArgs;
use super::queue::{Queue, QueueTarget};
use super::work::JobsWorkArgs;
use crate::args::duration;
use crate::client::{Failure, failure, usage};
use crate::exit;

/// The exit codes every `jobs` command shares, after its own.
macro_rules! jobs_exit_codes {
    ($own:literal) => {
        concat!(
            "Exit codes: ",
            $own,
            "64 bad arguments; 69 the store or server is unreachable; 70 an internal error; \
             78 the set-up is wrong (Redis credentials or ACL, --server-token, the URL's DB index, \
             --partitions differing from the stored count)."
        )
    };
}

#[derive(Debug, Subcommand)]
pub(crate) enum JobsCommand {
    /// Push one job; the payload is read from standard input (or
    /// --payload-file). Prints {"id", "result", "due_ms"}.
    #[command(after_help = jobs_exit_codes!("0 pushed (or kept, replaced, busy: see result); "))]
    Push(JobsPushArgs),
    /// Run CMD once per job, with the payload on its standard input and
    /// TOLLGATE_JOB_ID, TOLLGATE_FENCE, TOLLGATE_ATTEMPT, TOLLGATE_QUEUE in
    /// its environment: ack on exit 0, nack (retry after backoff)
    /// otherwise; the lease is extended while CMD runs. SIGTERM/SIGINT: no
    /// new jobs; running ones finish (or, after --shutdown-grace, are
    /// stopped and released at once). Each job's course is logged at info
    /// under the target tollgate::worker (TOLLGATE_LOG=info).
    #[command(after_help = jobs_exit_codes!(
        "0 a signal or --idle-exit ended it; 64 also --schedules with --server; 126/127 CMD could not be started / was not found (checked before any claim); "
    ))]
    Work(JobsWorkArgs),
    /// The queue's counts, as JSON.
    #[command(after_help = jobs_exit_codes!("0 printed; 65 no such queue (it never held anything); "))]
    Stats(JobsQueueArgs),
    /// Dead jobs (oldest first), as JSON lines: up to 10,000, and only as
    /// many as fit in about 2 MiB of ids, errors and payloads; `jobs list
    /// --state dead` pages through them all, `jobs show` gives one whole.
    #[command(after_help = jobs_exit_codes!("0 printed; 65 no such queue (it never held anything); "))]
    Dead(JobsQueueArgs),
    /// Kept completed jobs (most recent first), as JSON lines; only workers
    /// with --keep-completed keep them. At most --limit, and only as many
    /// as fit in about 2 MiB of ids and payloads (as `jobs dead`).
    #[command(after_help = jobs_exit_codes!("0 printed; 65 no such queue (it never held anything); "))]
    Completed(JobsCompletedArgs),
    /// Make dead jobs ready again: one by --id, or all. Prints {"replayed": n}.
    #[command(after_help = jobs_exit_codes!("0 replayed (n may be 0); "))]
    Replay(JobsReplayArgs),
    /// Delete dead jobs: one by --id, or all. Prints {"purged": n}.
    #[command(after_help = jobs_exit_codes!("0 purged (all: n may be 0); 65 no dead job --id; "))]
    Purge(JobsReplayArgs),
    /// Cancel a waiting job (a dead one is purged). Prints {"id", "result":
    /// "cancelled"|"purged"}.
    #[command(after_help = jobs_exit_codes!("0 cancelled; 65 no such job; 75 the job is being run (try later); "))]
    Cancel(JobsIdArgs),
    /// Move a waiting job's due time. Prints {"id", "due_ms"}.
    #[command(after_help = jobs_exit_codes!("0 moved; 65 no such waiting job; 75 the job is being run (try later); "))]
    Reschedule(JobsRescheduleArgs),
    /// One job as it stands, as JSON: its state (ready, delayed, running,
    /// dead, completed), attempts, fence, its state's time, last error and
    /// the first 256 bytes of its payload. A cancelled job is unknown.
    #[command(after_help = jobs_exit_codes!("0 printed; 65 no such job; "))]
    Show(JobsIdArgs),
    /// The jobs in one state, in its order, as JSON lines (one page); if
    /// there are more, a last line {"next": CURSOR} to pass as --cursor.
    #[command(after_help = jobs_exit_codes!(
        "0 printed (none: nothing printed); 64 also a bad --state, --limit or --cursor; 65 no such queue (it never held anything); "
    ))]
    List(JobsListArgs),
    /// Change the queue's number of partitions. Only an empty queue may
    /// (nothing ready, delayed, running or dead): stop its producers and
    /// workers first, and start them again with the new --partitions.
    #[command(after_help = jobs_exit_codes!("0 changed; 64 also when the queue still holds jobs; "))]
    Repartition(JobsRepartitionArgs),
    /// Pause the queue: it still takes pushes, but workers get no jobs
    /// (they wait) until it is resumed; jobs already running finish.
    /// Prints {"queue", "paused": true, "changed"} (changed: false if it
    /// was paused already).
    #[command(after_help = jobs_exit_codes!("0 paused; "))]
    Pause(JobsQueueArgs),
    /// Resume a paused queue: waiting workers get its jobs at once. Prints
    /// {"queue", "paused": false, "changed"} (changed: false if it was not
    /// paused).
    #[command(after_help = jobs_exit_codes!("0 resumed; "))]
    Resume(JobsQueueArgs),
    /// The queue's limits applied at claim, as JSON {"concurrency",
    /// "rate", "group_concurrency", "group_rate"} (null: none). With any
    /// of them given (or --none), replaces them first; they apply from the
    /// next claim on every worker.
    #[command(after_help = jobs_exit_codes!("0 printed; 64 also a bad limit or rate; "))]
    Limits(super::fair::JobsLimitsArgs),
    /// A group's own limits, in place of the queue's group limits, as JSON
    /// (null: none). With --concurrency or --rate sets them first; with
    /// --drop drops them.
    #[command(after_help = jobs_exit_codes!("0 printed; 64 also a bad group, limit or rate; "))]
    GroupLimits(super::fair::JobsGroupLimitsArgs),
    /// The queue's groups with ready or running jobs, most ready first, as
    /// JSON lines {"group", "ready", "running", "held", "held_until_ms",
    /// "concurrency", "rate"} (group null: the default group); if there
    /// are more, a last line {"next": CURSOR} to pass as --after.
    #[command(after_help = jobs_exit_codes!("0 printed (none: nothing printed); 64 also a bad --limit or --after; "))]
    Groups(super::fair::JobsGroupsArgs),
}

#[derive(Debug, Args)]
pub(crate) struct JobsQueueArgs {
    #[command(flatten)]
    pub(crate) target: QueueTarget,
}

#[derive(Debug, Args)]
pub(crate) struct JobsReplayArgs {
    #[command(flatten)]
    pub(crate) target: QueueTarget,
    /// Only this dead job.
    #[arg(long)]
    pub(crate) id: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct JobsCompletedArgs {
    #[command(flatten)]
    pub(crate) target: QueueTarget,
    /// At most this many (1 to 10000).
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub(crate) limit: usize,
}

/// A job by its id.
#[derive(Debug, Args)]
pub(crate) struct JobsIdArgs {
    #[command(flatten)]
    pub(crate) target: QueueTarget,
    /// The job's id.
    #[arg(value_name = "ID")]
    pub(crate) id: String,
}

/// One page of the jobs in a state.
#[derive(Debug, Args)]
pub(crate) struct JobsListArgs {
    #[command(flatten)]
    pub(crate) target: QueueTarget,
    /// ready, delayed, running, dead or completed.
    #[arg(long, value_name = "STATE")]
    pub(crate) state: String,
    /// At most this many (1 to 1000).
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub(crate) limit: usize,
    /// Where to start: the "next" of the page before.
    #[arg(long, value_name = "CURSOR")]
    pub(crate) cursor: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct JobsRescheduleArgs {
    #[command(flatten)]
    pub(crate) job: JobsIdArgs,
    /// Due this long from now.
    #[arg(long, value_parser = duration, allow_hyphen_values = true, value_name = "D",
          required_unless_present = "at", conflicts_with = "at")]
    pub(crate) delay: Option<Duration>,
    /// Due at this time (RFC 3339, e.g. 2026-11-21T18:00:00Z).
    #[arg(long, value_name = "TIME")]
    pub(crate) at: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct JobsRepartitionArgs {
    /// The queue's name.
    pub(crate) queue: String,
    /// The new number of partitions (1 to 256).
    #[arg(long, value_name = "K")]
    pub(crate) partitions: usize,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

#[derive(Debug, Args)]
pub(crate) struct JobsPushArgs {
    #[command(flatten)]
    pub(crate) target: QueueTarget,
    /// Due this long from now.
    #[arg(long, value_parser = duration, allow_hyphen_values = true, value_name = "D", conflicts_with = "at")]
    pub(crate) delay: Option<Duration>,
    /// Due at this time (RFC 3339, e.g. 2026-11-21T18:00:00Z).
    #[arg(long, value_name = "TIME")]
    pub(crate) at: Option<String>,
    /// Your own id: a second push with it is ignored (or replaces a waiting
    /// job with --replace).
    #[arg(long)]
    pub(crate) id: Option<String>,
    #[arg(long)]
    pub(crate) replace: bool,
    /// Deliveries before the job goes to the dead letters.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub(crate) max_attempts: u32,
    /// Higher runs first.
    #[arg(long, default_value_t = 0)]
    pub(crate) priority: u8,
    #[command(flatten)]
    pub(crate) backoff: BackoffArgs,
    /// Read the payload from this file instead of standard input (`-`:
    /// standard input).
    #[arg(long, value_name = "FILE")]
    pub(crate) payload_file: Option<std::path::PathBuf>,
    /// The job's group (a tenant, a customer): groups take turns at claim
    /// and may have limits of their own (`jobs limits`).
    #[arg(long, value_name = "GROUP")]
    pub(crate) group: Option<String>,
}

/// A job's retry wait: `jobs push` and `schedule add`.
#[derive(Debug, Args)]
pub(crate) struct BackoffArgs {
    /// The wait before a retry: fixed (always --backoff-base) or
    /// exponential (--backoff-base doubling per attempt up to
    /// --backoff-max, times a random factor in [0.5, 1)). Default
    /// exponential from 1s to 5m.
    #[arg(long, value_enum, value_name = "KIND")]
    pub(crate) backoff: Option<BackoffKind>,
    /// The backoff's first (or, fixed, every) wait.
    #[arg(long, value_parser = duration, allow_hyphen_values = true, value_name = "D", requires = "backoff")]
    pub(crate) backoff_base: Option<Duration>,
    /// Exponential backoff: the longest wait [default: 5m].
    #[arg(long, value_parser = duration, allow_hyphen_values = true, value_name = "D", requires = "backoff")]
    pub(crate) backoff_max: Option<Duration>,
}

/// `--backoff`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum BackoffKind {
    Fixed,
    Exponential,
}

pub(crate) async fn run(command: JobsCommand) -> i32 {
    let done = match command {
        JobsCommand::Push(a) => push(a).await,
        JobsCommand::Work(a) => super::work::work(a).await,
        JobsCommand::Stats(a) => stats(a).await,
        JobsCommand::Dead(a) => dead(a).await,
        JobsCommand::Completed(a) => completed(a).await,
        JobsCommand::Replay(a) => replay(a).await,
        JobsCommand::Purge(a) => purge(a).await,
        JobsCommand::Cancel(a) => cancel(a).await,
        JobsCommand::Reschedule(a) => reschedule(a).await,
        JobsCommand::Show(a) => show(a).await,
        JobsCommand::List(a) => list(a).await,
        JobsCommand::Repartition(a) => repartition(a).await,
        JobsCommand::Pause(a) => pause(a, true).await,
        JobsCommand::Resume(a) => pause(a, false).await,
        JobsCommand::Limits(a) => super::fair::limits(a).await,
        JobsCommand::GroupLimits(a) => super::fair::group_limits(a).await,
        JobsCommand::Groups(a) => super::fair::groups(a).await,
    };
    match done {
        Ok(code) => code,
        Err(f) => {
            // Some failures (a store that cannot be reached) were told
            // where they happened and carry no message.
            if !f.message.is_empty() {
                eprintln!("tollgate: {}", f.message);
            }
            f.code
        }
    }
}

async fn repartition(args: JobsRepartitionArgs) -> Result<i32, Failure> {
    if args.store.server.is_some() {
        return Err(usage(
            "repartition works on the store (--redis), not through --server",
        ));
    }
    let store = args.store.connect().await.map_err(|code| failure(code, ""))?;
    tollgate::JobQueue::repartition(&store, &args.queue, args.partitions).await?;
    println!("{}", json!({"queue": args.queue, "partitions": args.partitions}));
    Ok(0)
}

/// `--at TIME` (RFC 3339, at most a year ahead).
fn parse_at(t: &str) -> Result<std::time::SystemTime, Failure> {
    match humantime::parse_rfc3339_weak(t) {
        // The bound --delay has (the library checks that one).
        Ok(at) if at > std::time::SystemTime::now() + tollgate::MAX_JOB_DELAY => {
            Err(usage(format!("--at {t:?} is more than a year ahead")))
        }
        Ok(at) => Ok(at),
        Err(e) => Err(usage(format!(
            "--at {t:?}: {e} (give RFC 3339, e.g. 2026-11-21T18:00:00Z)"
        ))),
    }
}

/// The backoff of `--backoff KIND --backoff-base D --backoff-max D`.
pub(crate) fn backoff(args: &BackoffArgs) -> Result<Backoff, Failure> {
    let Some(kind) = args.backoff else {
        return Ok(Backoff::default());
    };
    let base = args
        .backoff_base
        .ok_or_else(|| usage("--backoff needs --backoff-base"))?;
    Ok(match kind {
        BackoffKind::Fixed if args.backoff_max.is_some() => {
            return Err(usage("--backoff-max goes with --backoff exponential only"));
        }
        BackoffKind::Fixed => Backoff::Fixed(base),
        BackoffKind::Exponential => Backoff::Exponential {
            base,
            max: args.backoff_max.unwrap_or(Duration::from_secs(300)),
        },
    })
}

/// The payload: the file named by `--payload-file`, or standard input.
pub(crate) async fn read_payload(file: Option<std::path::PathBuf>) -> Result<Vec<u8>, Failure> {
    let file = file.filter(|f| f.as_os_str() != "-");
    let why = match &file {
        Some(f) => format!("cannot read the payload from {}", f.display()),
        None => "cannot read the payload from standard input".to_owned(),
    };
    let read = tokio::task::spawn_blocking(move || match file {
        Some(f) => std::fs::read(f),
        None => {
            use std::io::Read;
            let mut payload = Vec::new();
            std::io::stdin().read_to_end(&mut payload).map(|_| payload)
        }
    })
    .await;
    match read {
        Ok(Ok(p)) => Ok(p),
        Ok(Err(e)) => Err(usage(format!("{why}: {e}"))),
        Err(e) => Err(failure(exit::SOFTWARE, format!("{why}: {e}"))),
    }
}

async fn push(args: JobsPushArgs) -> Result<i32, Failure> {
    let at = args.at.as_deref().map(parse_at).transpose()?;
    let options = PushOptions {
        id: args.id.clone(),
        delay: args.delay,
        at,
        priority: args.priority,
        max_attempts: args.max_attempts,
        backoff: backoff(&args.backoff)?,
        on_duplicate: if args.replace {
            OnDuplicate::Replace
        } else {
            OnDuplicate::Keep
        },
        group: args.group.clone(),
    };
    let payload = read_payload(args.payload_file.clone()).await?;
    let q = Queue::open(&args.target, true).await?;
    println!("{}", q.push(&payload, &options).await?);
    Ok(0)
}

async fn cancel(args: JobsIdArgs) -> Result<i32, Failure> {
    let q = Queue::open(&args.target, true).await?;
    println!("{}", q.cancel(&args.id).await?);
    Ok(0)
}

async fn reschedule(args: JobsRescheduleArgs) -> Result<i32, Failure> {
    let delay = match (args.delay, args.at.as_deref()) {
        (Some(d), _) => d,
        // The store's clock decides when the job is due; the delay is
        // measured on this machine's.
        (None, Some(t)) => parse_at(t)?
            .duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
        (None, None) => return Err(usage("give --delay D or --at TIME")),
    };
    let q = Queue::open(&args.job.target, true).await?;
    println!("{}", q.reschedule(&args.job.id, delay).await?);
    Ok(0)
}

async fn purge(args: JobsReplayArgs) -> Result<i32, Failure> {
    let q = Queue::open(&args.target, true).await?;
    let n = q.purge(args.id.as_deref()).await?;
    if let (Some(id), 0) = (&args.id, n) {
        return Err(failure(
            exit::NO_SUCH,
            format!("no dead job {id:?} in queue {:?}", q.name()),
        ));
    }
    println!("{}", json!({"purged": n}));
    Ok(0)
}

async fn completed(args: JobsCompletedArgs) -> Result<i32, Failure> {
    if args.limit == 0 || args.limit > 10_000 {
        return Err(usage("--limit must be 1 to 10000"));
    }
    let q = Queue::open(&args.target, false).await?;
    for c in q.completed(args.limit).await? {
        println!("{c}");
    }
    Ok(0)
}

async fn show(args: JobsIdArgs) -> Result<i32, Failure> {
    let q = Queue::open(&args.target, false).await?;
    println!("{}", q.show(&args.id).await?);
    Ok(0)
}

async fn list(args: JobsListArgs) -> Result<i32, Failure> {
    let state: tollgate::JobState = args
        .state
        .parse()
        .map_err(|e: tollgate::Error| usage(e.to_string()))?;
    if args.limit == 0 || args.limit > tollgate::MAX_JOB_LIST {
        return Err(usage(format!("--limit must be 1 to {}", tollgate::MAX_JOB_LIST)));
    }
    let q = Queue::open(&args.target, false).await?;
    let (jobs, next) = q.list(state, args.cursor.as_deref(), args.limit).await?;
    for j in jobs {
        println!("{j}");
    }
    if let Some(next) = next {
        println!("{}", json!({"next": next}));
    }
    Ok(0)
}

async fn stats(args: JobsQueueArgs) -> Result<i32, Failure> {
    let q = Queue::open(&args.target, false).await?;
    println!("{}", q.stats().await?);
    Ok(0)
}

async fn dead(args: JobsQueueArgs) -> Result<i32, Failure> {
    let q = Queue::open(&args.target, false).await?;
    for d in q.dead().await? {
        println!("{d}");
    }
    Ok(0)
}

async fn replay(args: JobsReplayArgs) -> Result<i32, Failure> {
    let q = Queue::open(&args.target, true).await?;
    let n = q.replay(args.id.as_deref()).await?;
    println!("{}", json!({"replayed": n}));
    Ok(0)
}

/// `jobs pause` (`pause`) and `jobs resume`.
async fn pause(args: JobsQueueArgs, pause: bool) -> Result<i32, Failure> {
    let q = Queue::open(&args.target, true).await?;
    let changed = q.set_paused(pause).await?;
    println!(
        "{}",
        json!({"queue": q.name(), "paused": pause, "changed": changed})
    );
    Ok(0)
}
