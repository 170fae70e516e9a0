//! The command line's top level: `tollgate` ([`Cli`]) and its commands
//! ([`Command`]), with the `lock`, `semaphore` and `limit` groups. Each
//! command's own arguments are beside the code that runs it
//! (commands/*.rs, serve/settings.rs, bench/args.rs); the store arguments
//! every command shares are in commands/mod.rs, shared value parsers in
//! args.rs.

use clap::{Parser, Subcommand};

use crate::bench::args::BenchArgs;
use crate::commands::elect::{ELECT_EXIT_CODES, ElectArgs};
use crate::commands::gate_admin::{ADMIN_EXIT_CODES, RemoveArgs, RevokeArgs};
use crate::commands::health::HealthArgs;
use crate::commands::jobs::JobsCommand;
use crate::commands::limit::LimitCheckArgs;
use crate::commands::run::{LockRunArgs, SemaphoreRunArgs};
use crate::commands::schedule::ScheduleCommand;
use crate::commands::status::{STATUS_EXIT_CODES, StatusArgs};
use crate::serve::settings::ServeArgs;

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
    /// Leader election: run a command while this candidate leads (it gets
    /// SIGTERM and the run exits 76 when leadership is lost), or
    /// --observe who leads.
    #[command(after_help = ELECT_EXIT_CODES)]
    Elect(ElectArgs),
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
    /// Waiting rooms: check a room's draw at opening.
    #[command(subcommand)]
    Room(crate::commands::room::RoomCommand),
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

/// The exit codes of `lock run` and `semaphore run`, with what else
/// makes a usage error (64).
macro_rules! run_exit_codes {
    ($usage:literal) => {
        concat!(
            "Exit codes: the command's own (128+N if killed by signal N); 64 bad arguments",
            $usage,
            "; 69 the store or server is unreachable; 70 an internal error; \
             75 not acquired within --wait, 0 with --if-busy skip (or a server's own rate limit); \
             76 the lease was lost, or held for --max-hold, while the command ran (it got SIGTERM); \
             77 an admin removed this waiter from the line (`remove`): the command did not run; \
             78 the set-up is wrong (Redis credentials or ACL, --server-token, the URL's DB index); \
             126/127 the command could not be started / was not found."
        )
    };
}

#[derive(Debug, Subcommand)]
pub(crate) enum LockCommand {
    /// Run a command while holding the lock, renewing the lease until it
    /// exits. With --shared or --exclusive the lock is a read-write lock:
    /// many --shared runs hold it together, an --exclusive one alone, in
    /// arrival order.
    #[command(after_help = run_exit_codes!(""))]
    Run(LockRunArgs),
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
