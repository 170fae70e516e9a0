//! `tollgate jobs work`: a worker that runs a command once per job (the
//! payload on its standard input), acks or nacks by its exit, extends the
//! lease while it runs, and stops gracefully on a signal; with
//! `--schedules` it also fires the store's schedules. Its log lines are
//! under tollgate::worker.

use std::ffi::OsString;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};
use tollgate::{Job, Nacked, Retry};

use super::queue::{Queue, QueueTarget};
use crate::args::duration;
use crate::client::{Failure, failure, usage};
use crate::exit;

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

pub(crate) async fn work(args: JobsWorkArgs) -> Result<i32, Failure> {
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
