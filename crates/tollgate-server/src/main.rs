//! The `tollgate` executable: the HTTP/JSON service, running a command
//! under a distributed lock or semaphore, and benchmarks.

mod api;
mod args;
mod bench;
mod cli;
mod client;
mod commands;
mod console;
mod exit;
mod proxy_workers;
mod room;
mod serve;
mod state;
mod tls_client;

use clap::Parser;

// mimalloc rather than the system allocator: it gives memory freed in
// bulk (a flood of names gone idle) back to the system, where glibc's
// malloc keeps it in its arenas, so the server's memory follows what it
// holds; and it is at least as fast for a server's many small, short-lived
// allocations. Built without transparent huge pages (Cargo.toml): a huge
// page stays resident while any part of it is used, which kept 18 MiB of a
// 16 MiB server after a flood (docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use crate::bench::args::BenchRuntime;
use crate::cli::{Cli, Command, LimitCommand, LockCommand, SemaphoreCommand};
use crate::serve::settings::LogFormat;

fn main() {
    // The one TLS provider (ring) for every rustls user in the process:
    // the HTTP client of --server https:// and anything else reqwest
    // builds. (Already installed only if this ran twice.)
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    if let Some(path) = &cli.ca_file {
        let _ = client::CA_FILE.set(path.clone());
    }
    // Printing help-like text needs no runtime and no logger.
    match &cli.command {
        Command::Completions { shell } => std::process::exit(commands::docs::completions(*shell)),
        Command::Man => std::process::exit(commands::docs::man()),
        _ => {}
    }
    start_logging(&cli.command);
    let runtime = match runtime_for(&cli.command) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tollgate: cannot start the async runtime: {e}");
            std::process::exit(exit::SOFTWARE);
        }
    };
    let code = runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => serve::run(args).await,
            Command::Lock(LockCommand::Run(args)) => commands::run::lock(args).await,
            Command::Elect(args) => commands::elect::elect(args).await,
            Command::Lock(LockCommand::Status(args)) => commands::status::run(args).await,
            Command::Lock(LockCommand::Revoke(args)) => commands::gate_admin::revoke(args).await,
            Command::Lock(LockCommand::Remove(args)) => commands::gate_admin::remove(args).await,
            Command::Semaphore(SemaphoreCommand::Run(args)) => commands::run::semaphore(args).await,
            Command::Semaphore(SemaphoreCommand::Status(args)) => commands::status::run(args).await,
            Command::Semaphore(SemaphoreCommand::Revoke(args)) => commands::gate_admin::revoke(args).await,
            Command::Semaphore(SemaphoreCommand::Remove(args)) => commands::gate_admin::remove(args).await,
            Command::Limit(LimitCommand::Check(args)) => commands::limit::check(args).await,
            Command::Jobs(command) => commands::jobs::run(command).await,
            Command::Schedule(command) => commands::schedule::run(command).await,
            Command::Room(command) => commands::room::run(command).await,
            Command::Bench(args) => bench::run(args).await,
            Command::Health(args) => commands::health::run(args).await,
            Command::Data(command) => commands::data::run(&command),
            Command::Completions { .. } | Command::Man => 0,
        }
    });
    // Dropped leases release in spawned tasks; give them a moment.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    std::process::exit(code);
}

/// Log lines go to standard error, filtered by TOLLGATE_LOG; `serve`
/// writes them as JSON with `--log-format json` (the logger starts before
/// the config file is read, so the format is a flag and an environment
/// variable only).
fn start_logging(command: &Command) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOLLGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_log_level(command)));
    let logger = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match command {
        Command::Serve(args) if args.log_format == LogFormat::Json => {
            // The event's fields beside timestamp, level and target, not
            // nested under "fields": what log shippers index directly.
            logger.json().flatten_event(true).init();
        }
        _ => logger
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
}

/// The server logs requests at info; the CLI commands only warnings, so a
/// command's output stays its own.
fn default_log_level(command: &Command) -> &'static str {
    match command {
        Command::Serve(_) => "info",
        _ => "warn",
    }
}

/// A benchmark's runtime is its own choice (`BenchArgs::runtime`: one
/// worker thread for `lock` and `semaphore` unless told otherwise);
/// everything else runs on a worker thread per core.
fn runtime_for(command: &Command) -> std::io::Result<tokio::runtime::Runtime> {
    match command {
        Command::Bench(b) => match b.runtime() {
            BenchRuntime::CurrentThread => tokio::runtime::Builder::new_current_thread().enable_all().build(),
            BenchRuntime::Workers(n) => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(n)
                .enable_all()
                .build(),
        },
        _ => tokio::runtime::Builder::new_multi_thread().enable_all().build(),
    }
}
