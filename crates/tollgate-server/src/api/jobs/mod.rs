//! The job-queue routes of the HTTP API: `/v1/queues/{queue}/…`. Each
//! file holds one kind of route: pushing (push.rs), deliveries (claim,
//! ack, nack, extend: deliveries.rs), reading a queue and its jobs
//! (reads.rs), changing them in place (manage.rs), limits and groups
//! (fair.rs); lookup.rs finds the
//! queue a request names, queues.rs holds this server's queue handles.

pub(crate) mod deliveries;
pub(crate) mod fair;
pub(crate) mod lookup;
pub(crate) mod manage;
pub(crate) mod push;
pub(crate) mod queues;
pub(crate) mod reads;
pub(crate) mod settings;

use axum::Router;
use axum::routing::{delete, get, post};

use self::deliveries::{ACK_BODY_LIMIT, ack, ack_batch, claim, extend, nack};
use self::fair::{drop_group_limits, group_limits, groups, set_group_limits, set_settings, settings};
use self::manage::{cancel, pause, purge, replay, reschedule, resume};
use self::push::{BATCH_BODY_LIMIT, PUSH_BODY_LIMIT, push, push_batch};
use self::reads::{completed, dead, list, show, stats};
use super::body::limited;
use crate::state::AppState;

/// The job-queue routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/queues/{queue}", get(stats))
        .route("/v1/queues/{queue}/jobs", limited(post(push), PUSH_BODY_LIMIT))
        .route(
            "/v1/queues/{queue}/batch",
            limited(post(push_batch), BATCH_BODY_LIMIT),
        )
        .route("/v1/queues/{queue}/claim", post(claim))
        .route("/v1/queues/{queue}/ack", limited(post(ack_batch), ACK_BODY_LIMIT))
        .route("/v1/queues/{queue}/completed", get(completed))
        .route("/v1/queues/{queue}/jobs/{id}", delete(cancel))
        .route("/v1/queues/{queue}/jobs/{id}", get(show))
        .route("/v1/queues/{queue}/jobs", get(list))
        .route("/v1/queues/{queue}/jobs/{id}/ack", post(ack))
        .route("/v1/queues/{queue}/jobs/{id}/nack", post(nack))
        .route("/v1/queues/{queue}/jobs/{id}/extend", post(extend))
        .route("/v1/queues/{queue}/jobs/{id}/reschedule", post(reschedule))
        .route("/v1/queues/{queue}/dead", get(dead))
        .route("/v1/queues/{queue}/dead/replay", post(replay))
        .route("/v1/queues/{queue}/dead/purge", post(purge))
        .route("/v1/queues/{queue}/pause", post(pause))
        .route("/v1/queues/{queue}/resume", post(resume))
        .route("/v1/queues/{queue}/settings", get(settings).put(set_settings))
        .route("/v1/queues/{queue}/groups", get(groups))
        .route(
            "/v1/queues/{queue}/groups/{group}/limits",
            get(group_limits).put(set_group_limits).delete(drop_group_limits),
        )
}
