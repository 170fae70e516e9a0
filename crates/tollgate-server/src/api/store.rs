//! `GET /v1/store`: the store this server runs on and, for the durable
//! embedded store, its data directory, fsync policy, log, snapshots, disk
//! state and what recovery found at start (docs/DURABILITY.md). The
//! console's overview shows it.

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde_json::{Value, json};

use crate::state::AppState;

pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/v1/store", get(show))
}

async fn show(State(state): State<AppState>) -> axum::Json<Value> {
    let durable = state.store.durable_stats().map(|d| {
        // Milliseconds to the microsecond.
        let ms = |us: u64| us as f64 / 1000.0;
        let last = d
            .last_snapshot
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|t| t.as_millis() as u64);
        json!({
            "data_dir": std::fs::canonicalize(&d.dir).unwrap_or(d.dir.clone()),
            "fsync": d.fsync.map(tollgate::Fsync::as_str),
            "log_bytes": d.log.log_bytes,
            "log_written_bytes": d.log.bytes_written,
            "log_records": d.log.records,
            "fsyncs": d.log.fsyncs,
            "fsync_avg_ms": d.log.fsync_us_total.checked_div(d.log.fsyncs).map_or(0.0, ms),
            "fsync_max_ms": ms(d.log.fsync_us_max),
            "snapshots": d.snapshots,
            "snapshot_bytes": d.snapshot_bytes,
            "last_snapshot_ms": last,
            "disk_failing": d.log.failing,
            "recovered": {
                "snapshot_names": d.recovery.snapshot_names,
                "replayed": d.recovery.replayed,
                "torn_bytes": d.recovery.torn.as_ref().map(|(_, n)| n),
                "took_ms": d.recovery.took.as_millis() as u64,
            },
        })
    });
    axum::Json(json!({"kind": state.store.kind(), "durable": durable}))
}
