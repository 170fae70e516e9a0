//! `tollgate jobs push|work|stats|dead|completed|replay|purge|cancel|reschedule|repartition|pause|resume`;
//! `jobs work --schedules` also fires the store's schedules.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};
use tollgate::{Backoff, Job, Nacked, OnDuplicate, PushOptions, Retry};

use super::queue::Queue;
use crate::cli::{
    BackoffArgs, BackoffKind, JobsCommand, JobsCompletedArgs, JobsIdArgs, JobsListArgs, JobsPushArgs,
    JobsQueueArgs, JobsRepartitionArgs, JobsReplayArgs, JobsRescheduleArgs, JobsWorkArgs,
};
use crate::client::{Failure, usage};
use crate::exit;

pub(crate) async fn run(command: JobsCommand) -> i32 {
    let done = match command {
        JobsCommand::Push(a) => push(a).await,
        JobsCommand::Work(a) => work(a).await,
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

/// A failure with exit code `code`.
fn failure(code: i32, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

async fn repartition(args: JobsRepartitionArgs) -> Result<i32, Failure> {
    if args.store.server.is_some() {
        return Err(usage(
            "repartition works on the store (--redis), not through --server",
        ));
    }
    let store = args.store.connect().await.map_err(|code| failure(code, ""))?;
    tollgate::ShardedJobQueue::repartition(&store, &args.queue, args.partitions).await?;
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

/// Whether `program` can be started, found the way `execvp` finds it (a
/// name with a `/` is a path, else it is looked for in `PATH`): else the
/// exit code a shell gives, 127 (not found) or 126 (not executable), and
/// why.
fn runnable(program: &std::ffi::OsStr) -> Result<(), (i32, &'static str)> {
    use std::os::unix::ffi::OsStrExt;
    // access(X_OK) asks the kernel, so it knows about owners, ACLs and
    // noexec mounts, which the mode bits alone do not tell.
    let executable = |path: &std::path::Path| match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Some(nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()),
        Ok(_) => Some(false),
        Err(_) => None,
    };
    if program.as_bytes().contains(&b'/') {
        return match executable(std::path::Path::new(program)) {
            Some(true) => Ok(()),
            Some(false) => Err((exit::CANNOT_EXECUTE, "not an executable file")),
            None => Err((exit::NOT_FOUND, "no such file")),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut found_not_executable = false;
    for dir in std::env::split_paths(&path) {
        match executable(&dir.join(program)) {
            Some(true) => return Ok(()),
            Some(false) => found_not_executable = true,
            None => {}
        }
    }
    if found_not_executable {
        Err((exit::CANNOT_EXECUTE, "not an executable file"))
    } else {
        Err((exit::NOT_FOUND, "command not found in PATH"))
    }
}

/// What became of one job run.
enum Ran {
    Acked,
    Retried,
    /// The lease ended while the command ran (the job was delivered again).
    Lost,
    /// Shutting down: the command was stopped and the job released.
    Released,
    /// The command could not be started (it was checked before the first
    /// claim, so it changed since): the job was given back, and the worker
    /// stops with this exit code.
    CannotStart(i32),
}

async fn work(args: JobsWorkArgs) -> Result<i32, Failure> {
    if args.concurrency == 0 || args.concurrency > 1000 {
        return Err(usage("--concurrency must be 1 to 1000"));
    }
    if args.schedules && args.target.store.server.is_some() {
        return Err(usage(
            "--schedules fires the store's schedules itself (--redis); through --server, \
             the `tollgate serve` fires them",
        ));
    }
    // Before claiming anything: a claimed job's attempt is counted, so a
    // command that cannot start would burn (and dead-letter) every job.
    if let Err((code, why)) = runnable(&args.command[0]) {
        return Err(failure(code, format!("cannot run {:?}: {why}", args.command[0])));
    }
    let q = Queue::open(&args.target, true).await?.lease(args.lease)?;
    // Stopped at the first signal, or when this function returns,
    // however it does.
    let mut firing = None;
    if args.schedules {
        let store = args
            .target
            .store
            .connect()
            .await
            .map_err(|code| failure(code, ""))?;
        let schedules = tollgate::Schedules::new(&store);
        firing = Some(AbortOnDrop(tokio::spawn(async move {
            schedules.fire_forever(log_firing).await;
        })));
    }
    let q = match args.keep_completed {
        None => q,
        Some(n) => q
            .keep_completed(n, args.keep_for)
            .map_err(|f| failure(exit::USAGE, f.message))?,
    };
    let (Ok(mut sigterm), Ok(mut sigint)) =
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        return Err(failure(exit::SOFTWARE, "cannot install signal handlers"));
    };
    let stopping = Arc::new(AtomicBool::new(false));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let args = Arc::new(args);
    let workers: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let (q, args, stopping, stop_rx) = (q.clone(), args.clone(), stopping.clone(), stop_rx.clone());
            tokio::spawn(async move { worker(q, args, stopping, stop_rx).await })
        })
        .collect();
    let all = futures_util::future::join_all(workers);
    tokio::pin!(all);
    let results = tokio::select! {
        r = &mut all => r,
        _ = sigterm.recv() => { stopping.store(true, Ordering::SeqCst); drop(firing.take()); shutdown(&args, &stop_tx, all).await }
        _ = sigint.recv() => { stopping.store(true, Ordering::SeqCst); drop(firing.take()); shutdown(&args, &stop_tx, all).await }
    };
    Ok(match results.iter().find(|r| !matches!(r, Ok(0))) {
        None => 0,
        Some(Ok(code)) => *code,
        Some(Err(_)) => exit::SOFTWARE,
    })
}

/// A task that ends with its handle.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Logs one firing pass of `--schedules` as the worker logs its jobs:
/// each pushed tick at info, what went wrong at warn.
fn log_firing(pass: tollgate::Result<&tollgate::FireReport>) {
    let report = match pass {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(target: LOG, error = %e, "firing schedules failed; retrying in 1 s");
            return;
        }
    };
    for f in &report.fired {
        tracing::info!(target: LOG, schedule = %f.schedule, queue = %f.queue, job = %f.job_id,
            lag_ms = f.lag.as_millis() as u64, "schedule fired");
    }
    for (schedule, missed) in &report.missed {
        tracing::info!(target: LOG, schedule = %schedule, missed,
            "schedule ticks missed (not pushed, as its misfire policy says)");
    }
    for (schedule, e) in &report.refused {
        tracing::warn!(target: LOG, schedule = %schedule, error = %e,
            "schedule's queue refused its job; the schedule moved on");
    }
    for (schedule, e) in &report.unreadable {
        tracing::warn!(target: LOG, schedule = %schedule, error = %e, "schedule cannot be read; left as it is");
    }
}

/// Lets running jobs finish for the grace, then tells the workers to stop
/// their commands and release their jobs.
async fn shutdown(
    args: &JobsWorkArgs,
    stop: &tokio::sync::watch::Sender<bool>,
    mut all: std::pin::Pin<&mut impl std::future::Future<Output = Vec<Result<i32, tokio::task::JoinError>>>>,
) -> Vec<Result<i32, tokio::task::JoinError>> {
    eprintln!(
        "tollgate: stopping: no new jobs; waiting up to {:?} for running ones",
        args.shutdown_grace
    );
    if let Ok(r) = tokio::time::timeout(args.shutdown_grace, &mut all).await {
        return r;
    }
    let _ = stop.send(true);
    all.await
}

async fn worker(
    q: Queue,
    args: Arc<JobsWorkArgs>,
    stopping: Arc<AtomicBool>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> i32 {
    let mut idle_since = Instant::now();
    while !stopping.load(Ordering::SeqCst) {
        let wait = Duration::from_millis(500);
        let job = match q.next(wait).await {
            Ok(Some(job)) => job,
            Ok(None) => {
                if args.idle_exit.is_some_and(|idle| idle_since.elapsed() >= idle) {
                    return 0;
                }
                continue;
            }
            // No retry mends the set-up (a partition count the store
            // does not have, credentials it refuses): stop, and say so.
            Err(e) if e.code == exit::CONFIG || e.code == exit::USAGE => {
                eprintln!("tollgate: {}", e.message);
                stopping.store(true, Ordering::SeqCst);
                return e.code;
            }
            Err(e) => {
                tracing::warn!(target: LOG, queue = q.name(), error = %e.message, "claiming a job failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        idle_since = Instant::now();
        // Each end of a run is logged where it happens (run_one).
        if let Ran::CannotStart(code) = run_one(&q, &args, &job, stop.clone()).await {
            stopping.store(true, Ordering::SeqCst);
            return code;
        }
    }
    0
}

/// How a command ended, as a worker's log and a dead letter say it.
fn how_it_ended(status: &std::io::Result<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            (None, None) => format!("{s}"),
        },
        Err(e) => format!("cannot wait for the command: {e}"),
    }
}

/// How much of the end of a failed command's standard error a dead job
/// keeps (with "exit code N" before it, within the store's 4 KiB).
const STDERR_KEPT: usize = 4000;

/// Copies a command's standard error to ours as it comes, and answers its
/// last `STDERR_KEPT` bytes.
async fn tee(mut from: tokio::process::ChildStderr) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    // std's stderr (tokio's needs a feature this crate does not build):
    // a write of a few KiB to a terminal or a log pipe.
    let mut out = std::io::stderr();
    let (mut kept, mut buf) = (Vec::new(), [0u8; 8192]);
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let _ = std::io::Write::write_all(&mut out, &buf[..n]);
        kept.extend_from_slice(&buf[..n]);
        if kept.len() > 2 * STDERR_KEPT {
            kept.drain(..kept.len() - STDERR_KEPT);
        }
    }
    if kept.len() > STDERR_KEPT {
        kept.drain(..kept.len() - STDERR_KEPT);
    }
    kept
}

/// Log lines of `jobs work` carry this target (`TOLLGATE_LOG=tollgate::worker=info`).
const LOG: &str = "tollgate::worker";

async fn run_one(
    q: &Queue,
    args: &JobsWorkArgs,
    job: &Job,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Ran {
    let (queue, id, attempt) = (q.name(), job.id.as_str(), job.attempt);
    tracing::info!(target: LOG, queue, job = id, attempt, fence = job.fence, "claimed");
    let started = Instant::now();
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env("TOLLGATE_JOB_ID", &job.id)
        .env("TOLLGATE_FENCE", job.fence.to_string())
        .env("TOLLGATE_ATTEMPT", job.attempt.to_string())
        .env("TOLLGATE_QUEUE", q.name())
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tollgate: cannot run {:?}: {e}", args.command[0]);
            // Due again at once. Its claim counted an attempt, which a nack
            // cannot give back (on its last attempt the job goes dead).
            let _ = q
                .nack(&job.id, job.fence, Retry::After(Duration::ZERO), None)
                .await;
            return Ran::CannotStart(if e.kind() == std::io::ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::CANNOT_EXECUTE
            });
        }
    };
    let stderr = child.stderr.take().map(|e| tokio::spawn(tee(e)));
    if let Some(mut stdin) = child.stdin.take() {
        let payload = job.payload.clone();
        tokio::spawn(async move {
            let _ = stdin.write_all(&payload).await;
        });
    }
    let every = args.lease / 3;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            () = tokio::time::sleep(every) => {
                if let Err(e) = q.extend(&job.id, job.fence, args.lease).await {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                    tracing::warn!(target: LOG, queue, job = id, attempt, error = %e.message,
                        "lease lost: the command was stopped; the job will be delivered again");
                    return Ran::Lost;
                }
            }
            _ = stop.changed() => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                let _ = q.nack(&job.id, job.fence, Retry::After(Duration::ZERO), None).await;
                tracing::info!(target: LOG, queue, job = id, attempt,
                    "released at shutdown: the command was stopped; the job is due again");
                return Ran::Released;
            }
        }
    };
    let ms = started.elapsed().as_millis() as u64;
    let lost = |e: Failure| {
        tracing::warn!(target: LOG, queue, job = id, attempt, ms, error = %e.message,
            "lease lost before the job's end was recorded; it will be delivered again");
        Ran::Lost
    };
    if status.as_ref().is_ok_and(|s| s.success()) {
        return match q.ack(&job.id, job.fence).await {
            Ok(()) => {
                tracing::info!(target: LOG, queue, job = id, attempt, ms, "done");
                Ran::Acked
            }
            Err(e) => lost(e),
        };
    }
    let why = how_it_ended(&status);
    // The end of what the command said, unless a process it left behind
    // still holds its standard error open.
    let said = match stderr {
        Some(t) => tokio::time::timeout(Duration::from_secs(1), t)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let error = if said.is_empty() {
        why.clone()
    } else {
        format!("{why}\n{}", String::from_utf8_lossy(&said))
    };
    match q.nack(&job.id, job.fence, Retry::Backoff, Some(&error)).await {
        Ok(Nacked::RetryAt(at)) => {
            let retry_in_ms = at
                .duration_since(std::time::SystemTime::now())
                .map_or(0, |d| d.as_millis() as u64);
            tracing::info!(target: LOG, queue, job = id, attempt, ms, retry_in_ms,
                "failed ({why}); will be retried");
            Ran::Retried
        }
        Ok(Nacked::Dead) => {
            tracing::warn!(target: LOG, queue, job = id, attempt, ms,
                "failed ({why}) on its last attempt: dead-lettered");
            Ran::Retried
        }
        Err(e) => lost(e),
    }
}
