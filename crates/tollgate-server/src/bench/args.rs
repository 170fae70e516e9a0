//! `tollgate bench`'s arguments (one set for every target: each reads the
//! ones it uses) and the runtime each target runs on.

use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::args::duration;

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
    /// A bare reverse proxy for proxy benchmarks: hyper's HTTP/1 server
    /// and hyper-util's pooled client, as the room's proxy has them, with
    /// none of the room's work (no token, no headers added), forwarding
    /// every request on --listen to --upstream for --seconds: the HTTP
    /// stack's own cost, to tell it from the room's.
    Proxy,
    /// A waiting line filled to each of --sizes waiters on --redis:
    /// join and status latency, and Redis memory per waiter (line_scaling).
    Line,
    /// A scheduled opening of a pre-queue of --line visitors in a draw
    /// (as a room with order_at_open = random), on --redis or the
    /// embedded store: --workers tasks ask random visitors' status
    /// throughout; the fill rate, the status latency before the opening
    /// and in the second from it, and a check that the draw holds every
    /// visitor (draw_opening).
    Draw,
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
    /// A read-heavy mix on one read-write lock: --workers tasks, each
    /// operation a read (--readers-percent) or a write, held --hold; then
    /// the same on one exclusive lock, the baseline: throughput and each
    /// side's wait (rw_lock, exclusive_lock).
    Rwlock,
    /// --workers observers follow one election through --rounds changes
    /// of leader, a resign and a lease of --hold that ends unrenewed: how
    /// long after each change every observer saw it (election_resign,
    /// election_expiry).
    Election,
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
    /// `rwlock`: how long each operation holds the lock; `election`: the
    /// lease of the leader whose lease is left to end.
    #[arg(long, default_value = "2ms", value_parser = duration, allow_hyphen_values = true, value_name = "D")]
    pub(crate) hold: Duration,
    /// `rwlock`: the share of operations that read, in percent.
    #[arg(long, default_value_t = 90, value_name = "P")]
    pub(crate) readers_percent: u32,
    /// `election`: changes of leader measured, of each kind.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub(crate) rounds: usize,
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
    /// 10 on a queue of this many partitions (`JobQueue`; 1 is one
    /// plain queue driven the same way).
    #[arg(long, value_name = "K")]
    pub(crate) partitions: Option<usize>,
    /// `jobs` only: measure push+claim+ack throughput in batches of 10 on
    /// a plain queue, then on one whose jobs spread over this many groups
    /// (no limit reached), in the same run, and their ratio.
    #[arg(long, value_name = "N")]
    pub(crate) groups: Option<usize>,
    /// `jobs` only: with every group at its concurrency, this many idle
    /// consumers waiting for --seconds: the store's CPU they cost (Redis:
    /// INFO's used_cpu, as a share of one core).
    #[arg(long, value_name = "N")]
    pub(crate) idle_consumers: Option<usize>,
    /// `jobs` only: a queue with this rate (`1000/s`), a backlog, and
    /// --workers consumers for --seconds: the jobs handed out per second
    /// against the rate (as BullMQ's `limiter` is measured).
    #[arg(long, value_name = "RATE")]
    pub(crate) queue_rate: Option<String>,
    /// The semaphore's capacity.
    #[arg(long, default_value_t = 5)]
    pub(crate) limit: u32,
    /// `limit`: how many keys the decisions spread over; `listing`: how
    /// many gates to page through; `recovery`: how many gates to fill.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) keys: usize,
    /// `upstream` and `proxy`: where to listen.
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<std::net::SocketAddr>,
    /// `proxy` only: where to forward (http://host:port).
    #[arg(long, value_name = "URL")]
    pub(crate) upstream: Option<String>,
    /// `flood` and `http --flood`: the length of the flooded line; `draw`:
    /// the pre-queue;
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

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
