//! Command-line arguments.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// `tollgate --version`: the crate version and the git commit it was
/// built from (see build.rs).
pub(crate) const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("TOLLGATE_COMMIT"),
    ")"
);

#[derive(Debug, Parser)]
#[command(name = "tollgate", version = VERSION, about = "Fair distributed locks and semaphores")]
pub(crate) struct Cli {
    /// For --server https://…: trust the certificates in this PEM file as
    /// well as the system's (a private CA, a self-signed server: its own
    /// certificate, even one `openssl req -x509` marked CA:TRUE).
    #[arg(long, global = true, env = "TOLLGATE_CA_FILE", value_name = "FILE")]
    pub(crate) ca_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the HTTP/JSON service (embedded store unless --redis is given).
    #[command(
        after_help = "Exit codes: 0 stopped by SIGTERM or SIGINT; 64 a bad flag or config \
value or a malformed --redis URL (the message names it); 69 an address to listen on cannot be \
bound (in use, not this host's), or Redis did not answer within --wait-for-store; 70 an internal \
error; 78 the set-up is wrong (Redis refused the user or ACL, the URL's DB index, a Cluster \
node given as a plain URL, a room's page template, a secret still holding the change-me \
placeholder of tollgate.example.toml)."
    )]
    Serve(ServeArgs),
    /// A distributed mutual-exclusion lock.
    #[command(subcommand)]
    Lock(LockCommand),
    /// A distributed counting semaphore.
    #[command(subcommand)]
    Semaphore(SemaphoreCommand),
    /// Rate limits: check a key against a limit.
    #[command(subcommand)]
    Limit(LimitCommand),
    /// Job queues: push jobs, run a worker, inspect.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Schedules: a cron expression or an interval that pushes a job to a
    /// queue at each tick (fired by `tollgate serve` or `jobs work
    /// --schedules`).
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Measure throughput, latency and fairness; prints one JSON line per case.
    #[command(
        after_help = "Exit codes: 0 measured; 64 bad arguments; 69 the store or server is \
unreachable; 70 an internal error; 78 the set-up is wrong (Redis credentials or ACL, the URL's DB index)."
    )]
    Bench(BenchArgs),
    /// Probe a `tollgate serve`: exit 0 if it is alive (GET /healthz) or,
    /// with --ready, ready to serve (GET /readyz). A container's
    /// HEALTHCHECK, a load balancer's script or a deploy's wait use it.
    #[command(
        after_help = "Exit codes: 0 alive (ready with --ready); 64 bad arguments; 69 no answer within \
--timeout, or the server answered 5xx (with --ready: not connected to its store, or a room that cannot \
admit exactly yet); 78 the set-up is wrong (the server's TLS certificate is not trusted, or what \
answered is not a tollgate serve)."
    )]
    Health(HealthArgs),
    /// The embedded store's data directory: check it, or repair a damaged
    /// one (docs/DURABILITY.md).
    #[command(subcommand)]
    Data(crate::commands::data::DataCommand),
    /// Print a shell completion script for SHELL on standard output, e.g.
    /// `tollgate completions bash > /etc/bash_completion.d/tollgate`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) on standard output, e.g.
    /// `tollgate man > /usr/local/share/man/man1/tollgate.1`.
    Man,
}

#[derive(Debug, Subcommand)]
pub(crate) enum LimitCommand {
    /// Spend COST of KEY's allowance under limit NAME and print the
    /// decision as JSON.
    ///
    /// Exit code: 0 allowed; 1 refused (retry_after_ms says when to try
    /// again); 64 bad arguments; 69 the store or server is unreachable;
    /// 75 a server's own rate limit turned this client away; 78 the set-up
    /// is wrong (Redis credentials or ACL, --server-token, the URL's DB
    /// index, a server answering store_misconfigured).
    Check(LimitCheckArgs),
}

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
}

/// Which queue, and where.
#[derive(Debug, Args)]
pub(crate) struct QueueTarget {
    /// The queue's name.
    pub(crate) queue: String,
    /// The queue is spread over this many partitions (1 to 256): every
    /// producer and worker must give the same number. Not with --server,
    /// whose [queues.NAME] decides.
    #[arg(long, value_name = "K")]
    pub(crate) partitions: Option<usize>,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
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

#[derive(Debug, Args)]
pub(crate) struct JobsWorkArgs {
    #[command(flatten)]
    pub(crate) target: QueueTarget,
    /// Jobs run at once.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(crate) concurrency: usize,
    /// Visibility lease; extended every third of it while CMD runs.
    #[arg(long, default_value = "30s", value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) lease: Duration,
    /// Exit (0) once no job has come for this long.
    #[arg(long, value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) idle_exit: Option<Duration>,
    /// On SIGTERM, how long running jobs may take to finish.
    #[arg(long, default_value = "30s", value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) shutdown_grace: Duration,
    /// Keep this many acked jobs (listable, and still counting for dedupe)
    /// instead of deleting them.
    #[arg(long, value_name = "N")]
    pub(crate) keep_completed: Option<usize>,
    /// With --keep-completed: none kept longer than this.
    #[arg(long, default_value = "24h", value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) keep_for: Duration,
    /// Also fire every due schedule of the store (each tick's job is
    /// pushed once, whichever process fires it first; any number of
    /// workers and servers may fire at once). For fleets with no `tollgate
    /// serve`; not with --server. Logged at info under tollgate::worker.
    #[arg(long)]
    pub(crate) schedules: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// The exit codes every `schedule` command shares, after its own.
macro_rules! schedule_exit_codes {
    ($own:literal) => {
        concat!(
            "Exit codes: ",
            $own,
            "64 bad arguments (the message names the field and what is allowed); \
             69 the store or server is unreachable; 70 an internal error; \
             78 the set-up is wrong (Redis credentials or ACL, --server-token, the URL's DB index)."
        )
    };
}

#[derive(Debug, Subcommand)]
pub(crate) enum ScheduleCommand {
    /// Create schedule NAME, or change it to exactly these settings
    /// (unnamed ones take their defaults). Prints created, changed or
    /// unchanged and the next tick. A changed timing (--when, --zone,
    /// --start, --end) fires from its first tick after now; --paused only
    /// applies to a new schedule (`pause` and `resume` change it).
    #[command(after_help = schedule_exit_codes!("0 created, changed or unchanged; "))]
    Add(ScheduleAddArgs),
    /// Every schedule: name, when, zone, queue, next tick, paused, last
    /// fired (a table; --json: one JSON object per line).
    #[command(after_help = schedule_exit_codes!("0 printed (none: an empty table); "))]
    List(ScheduleListArgs),
    /// Every setting of schedule NAME, its next tick and its recent ticks
    /// with their job ids.
    #[command(after_help = schedule_exit_codes!("0 printed; 65 no such schedule; "))]
    Show(ScheduleNameArgs),
    /// Delete schedule NAME; the jobs it pushed stay.
    #[command(after_help = schedule_exit_codes!("0 deleted; 65 no such schedule; "))]
    Rm(ScheduleNameArgs),
    /// Stop NAME firing until `resume`.
    #[command(after_help = schedule_exit_codes!("0 paused (or already paused); 65 no such schedule; "))]
    Pause(ScheduleNameArgs),
    /// Fire NAME again, from its first tick after now (the ticks of the
    /// pause are not fired later).
    #[command(after_help = schedule_exit_codes!("0 resumed (or not paused); 65 no such schedule; "))]
    Resume(ScheduleNameArgs),
    /// Push one extra job of NAME now (id NAME@manual-<ms>), paused or
    /// not; its ticks do not move. Prints the job id.
    #[command(after_help = schedule_exit_codes!("0 pushed; 65 no such schedule; "))]
    Trigger(ScheduleNameArgs),
    /// The next ticks of an expression, in its zone and in UTC, worked
    /// out here with no store (to check a DST day: --after); or, with
    /// --name, of a stored schedule (within its --start and --end).
    #[command(after_help = schedule_exit_codes!("0 printed; 65 no such schedule (--name); "))]
    Next(ScheduleNextArgs),
}

/// A schedule by name, on the store (--redis) or a `tollgate serve`.
#[derive(Debug, Args)]
pub(crate) struct ScheduleNameArgs {
    /// The schedule's name (letters, digits, _ - . : / @; at most 100 bytes).
    pub(crate) name: String,
    /// Print the schedule (or the answer) as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleListArgs {
    /// One JSON object per schedule and line instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleAddArgs {
    /// The schedule's name (letters, digits, _ - . : / @; at most 100 bytes).
    pub(crate) name: String,
    /// When it fires: cron with 5 fields (minute hour day-of-month month
    /// day-of-week) or 6 (seconds first), `TZ=Zone` before the fields, a
    /// macro (@hourly, @daily, @weekly, @monthly, @yearly), or an interval
    /// `every 30s` [`from <unix ms>`]. A time that a spring-forward skips
    /// fires when the gap ends; a repeated hour fires once (docs/JOBS.md).
    #[arg(long, value_name = "EXPR")]
    pub(crate) when: String,
    /// The IANA zone of a cron expression (e.g. Europe/Berlin) [default:
    /// UTC]; the same as `TZ=Zone` before the fields.
    #[arg(long, value_name = "ZONE")]
    pub(crate) zone: Option<String>,
    /// The queue each tick's job goes to (an unpartitioned one).
    #[arg(long, value_name = "QUEUE")]
    pub(crate) queue: String,
    /// Each job's payload [default: empty].
    #[arg(long, value_name = "TEXT", conflicts_with = "payload_file")]
    pub(crate) payload: Option<String>,
    /// Read the payload from this file (`-`: standard input).
    #[arg(long, value_name = "FILE")]
    pub(crate) payload_file: Option<std::path::PathBuf>,
    /// Higher runs first.
    #[arg(long, default_value_t = 0)]
    pub(crate) priority: u8,
    /// Deliveries of each job before it goes to the dead letters.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub(crate) max_attempts: u32,
    #[command(flatten)]
    pub(crate) backoff: BackoffArgs,
    /// Ticks missed while nothing fired (downtime): skip (fire only a tick
    /// less than 60 s late), once (one job for all of them) or all (each,
    /// up to --max-catch-up, the newest).
    #[arg(long, value_parser = misfire, default_value = "skip", value_name = "POLICY")]
    pub(crate) misfire: tollgate::Misfire,
    /// With --misfire all: at most this many missed ticks (1 to 1000).
    #[arg(long, default_value_t = tollgate::schedule::MAX_CATCH_UP, value_name = "N")]
    pub(crate) max_catch_up: usize,
    /// No tick before this time (RFC 3339, e.g. 2026-12-01T00:00:00Z).
    #[arg(long, value_name = "TIME")]
    pub(crate) start: Option<String>,
    /// No tick after this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub(crate) end: Option<String>,
    /// Each job is due up to this long after its tick (a fixed spread per
    /// tick), so schedules sharing a tick do not all start at once.
    #[arg(long, value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) jitter: Option<Duration>,
    /// A new schedule starts paused.
    #[arg(long)]
    pub(crate) paused: bool,
    /// Print the schedule as JSON, with "result".
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleNextArgs {
    /// The expression, as `add --when` takes it.
    #[arg(
        value_name = "EXPR",
        required_unless_present = "name",
        conflicts_with = "name"
    )]
    pub(crate) when: Option<String>,
    /// The zone of the expression, as `add --zone`.
    #[arg(long, value_name = "ZONE", conflicts_with = "name")]
    pub(crate) zone: Option<String>,
    /// A stored schedule instead of an expression (needs --redis or
    /// --server).
    #[arg(long, value_name = "NAME")]
    pub(crate) name: Option<String>,
    /// How many ticks (1 to 1000).
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub(crate) count: usize,
    /// Ticks after this time (RFC 3339, e.g. 2026-03-28T00:00:00Z)
    /// [default: now].
    #[arg(long, value_name = "TIME")]
    pub(crate) after: Option<String>,
    /// JSON: {"zone", "ticks": [{"at_ms", "local", "utc"}]}.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

/// `--misfire`: the library's words and message.
fn misfire(s: &str) -> Result<tollgate::Misfire, String> {
    s.parse().map_err(|e: tollgate::Error| e.message().to_owned())
}

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

/// The exit codes of `lock run` and `semaphore run`, with what else
/// makes a usage error (64).
macro_rules! run_exit_codes {
    ($usage:literal) => {
        concat!(
            "Exit codes: the command's own (128+N if killed by signal N); 64 bad arguments",
            $usage,
            "; 69 the store or server is unreachable; 70 an internal error; \
             75 not acquired within --wait, 0 with --if-busy skip (or a server's own rate limit); \
             76 the lease was lost while the command ran (it got SIGTERM); \
             77 an admin removed this waiter from the line (`remove`): the command did not run; \
             78 the set-up is wrong (Redis credentials or ACL, --server-token, the URL's DB index); \
             126/127 the command could not be started / was not found."
        )
    };
}

#[derive(Debug, Subcommand)]
pub(crate) enum LockCommand {
    /// Run a command while holding the lock, renewing the lease until it
    /// exits.
    #[command(after_help = run_exit_codes!(""))]
    Run(RunArgs),
    /// Print the lock's state as JSON: capacity, permits used, holders
    /// (label, time left and handle of each, soonest to end first), line
    /// length, grants, expiries and the last fencing token; with --line N
    /// the first N tickets of the line too.
    #[command(after_help = STATUS_EXIT_CODES)]
    Status(StatusArgs),
    /// Revoke a holder by its handle (as `status` lists it): its lease
    /// ends now and the next in line is granted. The holder is not told
    /// until it renews; its fencing token is stale from now on.
    #[command(after_help = ADMIN_EXIT_CODES)]
    Revoke(RevokeArgs),
    /// Remove a ticket from the line by its number (as `status --line N`
    /// lists it); everyone behind it moves up.
    #[command(after_help = ADMIN_EXIT_CODES)]
    Remove(RemoveArgs),
}

const ADMIN_EXIT_CODES: &str = "Exit codes: 0 done; 64 bad arguments; 65 no such holder or ticket; \
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

#[derive(Debug, Subcommand)]
pub(crate) enum SemaphoreCommand {
    /// Run a command while holding permits, renewing the lease until it
    /// exits.
    #[command(after_help = run_exit_codes!(" (or --limit differs from the stored capacity)"))]
    Run(SemaphoreRunArgs),
    /// Print the semaphore's state as JSON (as `lock status`).
    #[command(after_help = STATUS_EXIT_CODES)]
    Status(StatusArgs),
    /// Revoke a holder by its handle (as `lock revoke`).
    #[command(after_help = ADMIN_EXIT_CODES)]
    Revoke(RevokeArgs),
    /// Remove a ticket from the line by its number (as `lock remove`).
    #[command(after_help = ADMIN_EXIT_CODES)]
    Remove(RemoveArgs),
}

const STATUS_EXIT_CODES: &str = "Exit codes: 0 printed; 64 bad arguments; \
69 the store or server is unreachable; 78 the set-up is wrong (Redis credentials or ACL, --server-token, the URL's DB index).";

/// What `lock run` does when the lock is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum IfBusy {
    /// Exit 75 with a message.
    Fail,
    /// Exit 0, silently.
    Skip,
}

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

/// Waiting for Redis replicas after each change (`WAIT`); the default:
/// none.
#[derive(Debug, Default, Args, Clone, Copy)]
pub(crate) struct DurabilityArgs {
    /// After each change, wait until this many replicas have it (Redis
    /// WAIT); a change they do not confirm in time fails as not replicated.
    #[arg(long, env = "TOLLGATE_DURABLE_REPLICAS", value_name = "N")]
    pub(crate) durable_replicas: Option<u32>,
    /// How long to wait for the replicas [default: 500ms].
    #[arg(long, env = "TOLLGATE_DURABLE_TIMEOUT", value_name = "DURATION", value_parser = duration, allow_hyphen_values = true)]
    pub(crate) durable_timeout: Option<Duration>,
}

impl DurabilityArgs {
    /// The store as asked: `store` itself, or a durable handle on it.
    pub(crate) async fn apply(&self, store: tollgate::Store) -> tollgate::Result<tollgate::Store> {
        match self.durable_replicas {
            None | Some(0) => Ok(store),
            Some(n) => {
                store
                    .durable(n, self.durable_timeout.unwrap_or(Duration::from_millis(500)))
                    .await
            }
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct HealthArgs {
    /// The server's http:// or https:// URL. Falls back to
    /// TOLLGATE_SERVER; without either, 127.0.0.1 at the port of
    /// TOLLGATE_LISTEN (the variable `serve` listens by), else 7700, over
    /// https if TOLLGATE_TLS_CERT is set (its certificate not checked:
    /// the probe sends nothing secret to this machine's own port).
    #[arg(long, env = "TOLLGATE_SERVER", value_name = "URL")]
    pub(crate) server: Option<String>,
    /// Ask whether the server is ready (its store answers and every room
    /// can admit exactly), not only alive.
    #[arg(long)]
    pub(crate) ready: bool,
    /// Give up after this long.
    #[arg(long, default_value = "5s", value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) timeout: Duration,
    /// `serve`'s listen address, read from the environment only.
    #[arg(skip = std::env::var("TOLLGATE_LISTEN").ok())]
    pub(crate) listen: Option<String>,
    /// Whether `serve` is told to serve TLS (TOLLGATE_TLS_CERT set): the
    /// probe of TOLLGATE_LISTEN's port is then https://.
    #[arg(skip = std::env::var_os("TOLLGATE_TLS_CERT").is_some_and(|v| !v.is_empty()))]
    pub(crate) tls: bool,
}

#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// Redis URL (redis://, rediss://, unix://, redis+cluster://,
    /// redis+sentinel://). Falls back to TOLLGATE_REDIS_URL.
    #[arg(long, env = "TOLLGATE_REDIS_URL", value_name = "URL")]
    pub(crate) redis: Option<String>,
    /// Work through a `tollgate serve` at this http:// or https:// URL instead of
    /// Redis (it wins if both are given). Falls back to TOLLGATE_SERVER.
    #[arg(long, env = "TOLLGATE_SERVER", value_name = "URL")]
    pub(crate) server: Option<String>,
    /// Bearer token for --server. Falls back to TOLLGATE_SERVER_TOKEN.
    #[arg(
        long,
        env = "TOLLGATE_SERVER_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub(crate) server_token: Option<String>,
    /// Prefix of every Redis key.
    #[arg(long, default_value = "tollgate", value_name = "PREFIX")]
    pub(crate) prefix: String,
    #[command(flatten)]
    pub(crate) durability: DurabilityArgs,
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

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum BenchTarget {
    Lock,
    Semaphore,
    /// The HTTP API of a running `tollgate serve` (--server).
    Http,
    /// GCRA rate-limit decisions over --keys keys (limit_gcra).
    Limit,
    /// A trivial HTTP upstream for proxy benchmarks: answers every request
    /// with 200 "ok" on --listen for --seconds, then exits.
    Upstream,
    /// A waiting line filled to each of --sizes waiters on --redis:
    /// join and status latency, and Redis memory per waiter (line_scaling).
    Line,
    /// Job queues: push+claim+ack throughput, delayed-job lateness, and
    /// (on --redis) memory per queued job.
    Jobs,
    /// A line of --line tickets on one gate, flooded with status requests
    /// by --workers tasks: an unrelated gate's enter/leave latency during
    /// the flood against a baseline without it (status_flood).
    Flood,
    /// --schedules schedules on --redis, each every --every, fired by
    /// --firers processes for --seconds while --workers consumers claim
    /// the jobs: every tick pushed exactly once, the push lag, tick to
    /// claim, the firers' and Redis's CPU, Redis memory per schedule.
    Schedules,
    /// --keys gates on --redis, each holding a lease, paged through 100 at
    /// a time for --seconds (at least one whole pass): page latency through
    /// the library and, with --server, through `GET /v1/gates`
    /// (list_gates).
    Listing,
    /// The durable embedded store's recovery (--data-dir, empty): fills it
    /// with --jobs queued jobs and --keys gates each holding a lease, and
    /// prints the resident memory; with --reopen, recovers the directory
    /// instead and prints how long that took and the resident memory then
    /// (run it in a new process: scripts/bench-durable).
    Recovery,
    /// The durable embedded store's snapshots under load (--data-dir,
    /// empty): fills it as `recovery` does, then --workers tasks take and
    /// give back the gates' permits and push, claim and ack jobs of the
    /// big queue for --seconds without snapshots and as long again with
    /// snapshots back to back: each operation's latency, both phases
    /// (snapshot_stall).
    Snapshot,
    /// --workers operator consoles against --server for --seconds, each
    /// following room --room live and loading the overview, room and
    /// queue (--queue) pages' data once a second: their latency
    /// (console_page_data). With --redis, first fills the room's line to
    /// --line waiters and the queue to --jobs jobs (--workers 0: only that).
    Console,
}

/// The runtime a benchmark runs its workers on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BenchRuntime {
    /// A current-thread runtime (--single-thread).
    CurrentThread,
    /// A multi-thread runtime of this many worker threads.
    Workers(usize),
}

impl BenchArgs {
    /// The benchmark's runtime: --single-thread, --multi-thread (a worker
    /// per core) or --threads N; by default one worker thread for `lock`
    /// and `semaphore` and a worker per core for the others.
    ///
    /// Measured (docs/BENCHMARKS.md, 2-core machine shared with Redis): one
    /// worker thread against one per core, `lock` on Redis 84.5k → 87.3k
    /// pairs/s, `lock --contended` 7.6k → 8.4k/s, `semaphore --limit 5`
    /// 22.3k → 25.5k/s and 29.5k → 31.5k/s with --non-fair, `lock` on the
    /// embedded store 587k → 788k/s: one worker spends no CPU stealing
    /// tasks or waking the other, and leaves Redis its core. It is also
    /// how the Node peers these two targets are compared with run (one
    /// event loop). A current-thread runtime was slower again (`lock` on
    /// Redis ~50k against ~70k pairs/s on a worker per core).
    pub(crate) fn runtime(&self) -> BenchRuntime {
        let per_core = || std::thread::available_parallelism().map_or(1, |n| n.get());
        if self.single_thread {
            BenchRuntime::CurrentThread
        } else if self.multi_thread {
            BenchRuntime::Workers(per_core())
        } else {
            match self.threads {
                Some(0) => BenchRuntime::Workers(per_core()),
                Some(n) => BenchRuntime::Workers(n),
                None if matches!(self.target, BenchTarget::Lock | BenchTarget::Semaphore) => {
                    BenchRuntime::Workers(1)
                }
                None => BenchRuntime::Workers(per_core()),
            }
        }
    }
}

impl std::fmt::Display for BenchRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BenchRuntime::CurrentThread => f.write_str("tokio current-thread"),
            BenchRuntime::Workers(1) => f.write_str("tokio multi-thread, 1 worker thread"),
            BenchRuntime::Workers(n) => write!(f, "tokio multi-thread, {n} worker threads"),
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// `lock` (mutex_uncontended, or mutex_contended with --contended) or
    /// `semaphore` (semaphore_contended).
    pub(crate) target: BenchTarget,
    /// Redis URL; without it the embedded memory store is measured.
    #[arg(long, env = "TOLLGATE_REDIS_URL", value_name = "URL")]
    pub(crate) redis: Option<String>,
    /// Without --redis: measure the durable embedded store in this data
    /// directory (as `serve --data-dir`) instead of the memory-only one.
    #[arg(long, value_name = "DIR", conflicts_with = "redis")]
    pub(crate) data_dir: Option<std::path::PathBuf>,
    /// With --data-dir: the log's fsync policy (always, everysec, no)
    /// [default: everysec].
    #[arg(long, value_name = "POLICY", requires = "data_dir")]
    pub(crate) fsync: Option<String>,
    /// With --data-dir: the log's size (MiB) that starts a snapshot, as
    /// `serve --snapshot-after-mb`, 1 to 65536 [default: 64].
    #[arg(long, value_name = "MIB", requires = "data_dir", value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub(crate) snapshot_after_mb: Option<u64>,
    /// Concurrent workers.
    #[arg(long, default_value_t = 50)]
    pub(crate) workers: usize,
    /// How long to measure.
    #[arg(long, default_value = "5s", value_parser = duration, allow_hyphen_values = true)]
    pub(crate) seconds: Duration,
    /// `lock` and `semaphore`: run this long before measuring (connections,
    /// scripts and subscriptions warm, the line formed), as the peers'
    /// harness does (`PEERS_WARMUP_MS`); `0s` measures from the start.
    #[arg(long, default_value = "1s", value_parser = duration, allow_hyphen_values = true)]
    pub(crate) warmup: Duration,
    /// All workers share one lock (otherwise each has its own).
    #[arg(long)]
    pub(crate) contended: bool,
    /// `lock` and `semaphore`: acquire without a fair line (the gate's
    /// `fair = false`: free permits are taken even while others wait); the
    /// case's name ends in `_non_fair`.
    #[arg(long)]
    pub(crate) non_fair: bool,
    /// `jobs` only: measure only push+claim+ack throughput in batches of
    /// 10 on a queue of this many partitions (`ShardedJobQueue`; 1 is one
    /// plain queue driven the same way).
    #[arg(long, value_name = "K")]
    pub(crate) partitions: Option<usize>,
    /// The semaphore's capacity.
    #[arg(long, default_value_t = 5)]
    pub(crate) limit: u32,
    /// `limit`: how many keys the decisions spread over; `listing`: how
    /// many gates to page through; `recovery`: how many gates to fill.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) keys: usize,
    /// `upstream` only: where to listen.
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<std::net::SocketAddr>,
    /// `flood` and `http --flood`: the length of the flooded line;
    /// `console`: the room's line.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) line: u64,
    /// `line` only: the line lengths to measure at, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000,1000000")]
    pub(crate) sizes: Vec<u64>,
    /// Run the workers on one thread (a current-thread runtime).
    #[arg(long, conflicts_with_all = ["multi_thread", "threads"])]
    pub(crate) single_thread: bool,
    /// Run the workers on a multi-thread runtime of a worker thread per
    /// core (the default for targets other than `lock` and `semaphore`).
    #[arg(long, conflicts_with = "threads")]
    pub(crate) multi_thread: bool,
    /// Run the workers on a multi-thread runtime of N worker threads (0: one
    /// per core). Default: 1 for `lock` and `semaphore` (like the Node
    /// peers' one event loop; measured faster on a small machine shared
    /// with Redis), one per core for the others.
    #[arg(long, value_name = "N")]
    pub(crate) threads: Option<usize>,
    /// `http`, `listing` and `console`: the server to measure.
    #[arg(long, value_name = "URL")]
    pub(crate) server: Option<String>,
    /// `http` only: also hold this many long-polls open at once and report
    /// the server's memory (needs --server-pid).
    #[arg(long, default_value_t = 0)]
    pub(crate) long_polls: usize,
    /// `http` only: the server's process id, to read its RSS.
    #[arg(long)]
    pub(crate) server_pid: Option<u32>,
    /// `http` only: instead of the usual cases, build a line of --line
    /// tickets through the API, flood it with status requests from
    /// --workers connections, and time an unrelated gate's enter during the
    /// flood against a baseline without it (http_status_flood).
    #[arg(long)]
    pub(crate) flood: bool,
    /// `console` only: the room whose page the consoles show.
    #[arg(long, value_name = "NAME")]
    pub(crate) room: Option<String>,
    /// `console` only: the queue whose page the consoles show.
    #[arg(long, value_name = "NAME")]
    pub(crate) queue: Option<String>,
    /// `console`: how many ready jobs to fill --queue with; `recovery`:
    /// how many jobs to queue.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) jobs: u64,
    /// `recovery`: recover --data-dir (filled by an earlier run) instead
    /// of filling it.
    #[arg(long)]
    pub(crate) reopen: bool,
    /// `schedules` only: how many schedules.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) schedules: usize,
    /// `schedules` only: each schedule's interval (whole seconds).
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub(crate) every: Duration,
    /// `schedules` only: how many firing processes.
    #[arg(long, default_value_t = 3)]
    pub(crate) firers: usize,
    /// `schedules`, internal: be one firing process for this long.
    #[arg(long, hide = true, value_parser = duration)]
    pub(crate) fire_for: Option<Duration>,
}

/// Parses `250ms`, `30s`, `5m`, `1h`; a bare number (which unit?) and a
/// negative duration are refused with a message saying so.
/// The port of a HOST:PORT listen address: digits only (u16's own parse
/// would take "+7700").
pub(crate) fn port_number(port: &str) -> Option<u16> {
    port.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| port.parse().ok())
        .flatten()
}

pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.starts_with('-') {
        return Err(format!("{s:?}: a duration cannot be negative"));
    }
    // A bare number is refused rather than guessed (seconds? ms?), as in
    // the config file's room settings.
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("{s:?} needs a unit: {s}s, {s}ms, {s}m or {s}h"));
    }
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 250ms, 30s or 5m ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("5m"), Ok(Duration::from_secs(300)));
        assert!(duration("7").is_err_and(|e| e.contains("needs a unit")));
        assert!(duration("-1s").is_err_and(|e| e.contains("negative")));
        assert!(duration("").is_err());
        assert!(duration("-1s").is_err());
        assert!(duration("soon").is_err());
        assert!(duration("99999999999999999999").is_err());
    }

    fn bench_runtime(args: &[&str]) -> BenchRuntime {
        let cli = Cli::try_parse_from(["tollgate", "bench"].iter().chain(args)).expect("valid arguments");
        match cli.command {
            Command::Bench(b) => b.runtime(),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn bench_runtimes() {
        let per_core = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(bench_runtime(&["lock"]), BenchRuntime::Workers(1));
        assert_eq!(bench_runtime(&["semaphore"]), BenchRuntime::Workers(1));
        assert_eq!(bench_runtime(&["jobs"]), BenchRuntime::Workers(per_core));
        assert_eq!(
            bench_runtime(&["lock", "--threads", "3"]),
            BenchRuntime::Workers(3)
        );
        assert_eq!(
            bench_runtime(&["lock", "--threads", "0"]),
            BenchRuntime::Workers(per_core)
        );
        assert_eq!(
            bench_runtime(&["lock", "--multi-thread"]),
            BenchRuntime::Workers(per_core)
        );
        assert_eq!(
            bench_runtime(&["jobs", "--single-thread"]),
            BenchRuntime::CurrentThread
        );
        for clash in [
            ["--threads", "2", "--single-thread"],
            ["--threads", "2", "--multi-thread"],
        ] {
            let args = ["tollgate", "bench", "lock"].into_iter().chain(clash);
            assert!(Cli::try_parse_from(args).is_err(), "{clash:?} accepted");
        }
    }
}
