//! `tollgate data check` and `tollgate data repair`: what a durable
//! embedded store's data directory holds, and making a damaged one
//! recoverable by keeping what reads whole (as `redis-check-aof` does).

use clap::{Args, Subcommand};

use crate::exit;

#[derive(Debug, Subcommand)]
pub(crate) enum DataCommand {
    /// Read a data directory without changing it: the newest snapshot and
    /// every log record's checksum and order. Prints one JSON object.
    #[command(
        after_help = "Exit codes: 0 the server would start on it as it is (a torn last \
write is cut off at start); 64 bad arguments; 74 a file cannot be read; 78 it is damaged: the \
server refuses to start on it (`tollgate data repair` keeps what reads whole)."
    )]
    Check(DataArgs),
    /// Make a damaged data directory recoverable: cut the log at its first
    /// damage (the cut bytes and any later segment are moved to
    /// `*.damaged`, never deleted) and move a damaged snapshot aside.
    /// Stop the server first (the directory's lock is taken). Prints the
    /// check after the repair.
    #[command(
        after_help = "Exit codes: 0 repaired (or nothing to repair) and recoverable; 64 \
bad arguments; 74 a file cannot be read or written; 78 still not recoverable (for example a \
snapshot was damaged and the log it covered is gone), or a server holds the directory."
    )]
    Repair(DataArgs),
}

#[derive(Debug, Args)]
pub(crate) struct DataArgs {
    /// The data directory (`serve --data-dir`).
    #[arg(
        long,
        env = "TOLLGATE_DATA_DIR",
        value_name = "DIR",
        default_value = "tollgate-data"
    )]
    dir: std::path::PathBuf,
}

pub(crate) fn run(command: &DataCommand) -> i32 {
    let (args, repair) = match command {
        DataCommand::Check(a) => (a, false),
        DataCommand::Repair(a) => (a, true),
    };
    if !args.dir.is_dir() {
        eprintln!("tollgate: {} is not a directory", args.dir.display());
        return exit::USAGE;
    }
    let done = if repair {
        tollgate::repair_data_dir(&args.dir)
    } else {
        tollgate::check_data_dir(&args.dir)
    };
    match done {
        Ok(report) => {
            println!("{}", render(&report));
            if report.recoverable() { 0 } else { exit::CONFIG }
        }
        Err(e) => {
            eprintln!("tollgate: {e}");
            match e.kind() {
                tollgate::ErrorKind::Misconfigured => exit::CONFIG,
                _ => exit::IO,
            }
        }
    }
}

fn render(report: &tollgate::DataCheck) -> serde_json::Value {
    let snapshot = report.snapshot.as_ref().map(|(path, read)| match read {
        Ok(from) => serde_json::json!({"path": path, "ok": true, "log_from": from}),
        Err(e) => serde_json::json!({"path": path, "ok": false, "error": e}),
    });
    let segments: Vec<_> = report
        .segments
        .iter()
        .map(|s| {
            serde_json::json!({
                "path": s.path,
                "bytes": s.bytes,
                "records": s.records,
                "first_lsn": s.first_lsn,
                "last_lsn": s.last_lsn,
                "bad_at": s.bad.as_ref().map(|(at, _)| at),
                "problem": s.bad.as_ref().map(|(_, what)| what),
                "torn_end": s.torn,
            })
        })
        .collect();
    serde_json::json!({
        "recoverable": report.recoverable(),
        "snapshot": snapshot,
        "segments": segments,
    })
}
