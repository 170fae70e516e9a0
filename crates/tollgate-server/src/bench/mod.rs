//! `tollgate bench`: the benchmarks, one JSON line per case. This module
//! owns the checks every target shares and the dispatch from a
//! `BenchTarget` to its submodule; the arguments are in args.rs, what the
//! submodules share in support.rs. A submodule uses those and never a
//! sibling, so each reads alone.

pub(crate) mod args;
mod console;
mod coord;
mod draw;
mod fair;
mod flood;
mod http;
mod jobs;
mod limit;
mod listing;
mod lock;
mod recovery;
mod room;
mod schedules;
mod support;

use std::time::Duration;

use self::args::{BenchArgs, BenchTarget};
use crate::exit;

pub(crate) async fn run(args: BenchArgs) -> i32 {
    // Checked for every target, as the arguments are shared.
    // `console` alone runs with none: it then only fills its scene.
    let none_allowed = matches!(args.target, BenchTarget::Console);
    if (args.workers == 0 && !none_allowed) || args.workers > 10_000 {
        eprintln!("tollgate: --workers must be between 1 and 10000");
        return exit::USAGE;
    }
    if args.seconds.is_zero() || args.seconds > Duration::from_secs(600) {
        eprintln!("tollgate: --seconds must be between 1ms and 10m");
        return exit::USAGE;
    }
    if args.warmup > Duration::from_secs(60) {
        eprintln!("tollgate: --warmup must be at most 1m");
        return exit::USAGE;
    }
    match args.target {
        BenchTarget::Lock | BenchTarget::Semaphore => lock::run(&args).await,
        BenchTarget::Http => http::run(&args).await,
        BenchTarget::Limit => limit::run(&args).await,
        BenchTarget::Upstream => room::upstream(&args).await,
        BenchTarget::Proxy => room::bare_proxy(&args).await,
        BenchTarget::Line => room::line(&args).await,
        BenchTarget::Draw => draw::run(&args).await,
        BenchTarget::Jobs => jobs::run(&args).await,
        BenchTarget::Flood => flood::run(&args).await,
        BenchTarget::Schedules => schedules::run(&args).await,
        BenchTarget::Listing => listing::run(&args).await,
        BenchTarget::Console => console::run(&args).await,
        BenchTarget::Recovery => recovery::run(&args).await,
        BenchTarget::Rwlock => coord::rwlock(&args).await,
        BenchTarget::Election => coord::election(&args).await,
        BenchTarget::Snapshot => recovery::stall(&args).await,
    }
}
