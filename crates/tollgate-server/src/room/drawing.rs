//! What a room does with its draw (draw.rs holds the method): the order
//! key of a newcomer to the pre-queue, the draw's stage, revealed once
//! from the store's record after the opening, a waiter's receipt, the
//! room's figures of it and `GET /.tollgate/{room}/draw`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use axum::body::Body;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

use super::answers::{json_error, json_response};
use super::draw::{MAX_PAGE, METHOD, Revealed, commitment, draw_id, hex, order_key, pending_draw, seed};
use super::rooms::Room;
use super::states::{self, Schedule};
use super::store_call::{bounded, now_ms};

/// How long the read of a draw's record may take (it is one answer of
/// every ticket in the draw).
const RECORD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How far the store's clock may trail this server's when a record's end
/// is compared with the draw's name.
const SKEW_MS: u64 = 2_000;

/// How long the store keeps a draw's record (as DRAW_KEEP in the gate's
/// general_state.lua), less an hour: a draw older than this whose record
/// is gone is not taken for one without entrants.
const KEPT_MS: u64 = 7 * 24 * 3_600_000 - 3_600_000;

/// Where a draw stands, for what the room publishes.
enum Stage {
    /// No draw named (a room not scheduled yet, or not drawing).
    None,
    /// The opening is ahead: the commitment only.
    Pending(u64),
    /// The opening came; the store's record is not read yet.
    Drawing(u64),
    /// The opening was long ago and the store no longer has the record.
    Expired(u64),
    Drawn(Arc<Revealed>),
}

impl Room {
    /// The order key of a newcomer's ticket, if they join a draw now.
    pub(super) fn draw_key(&self, schedule: &Schedule) -> Option<impl Fn(&str) -> u64 + '_> {
        let draws = self.draw.as_ref()?;
        let name = pending_draw(schedule, now_ms())?;
        let seed = seed(&draws.secret, &self.name, name);
        Some(move |ticket: &str| order_key(&seed, &draw_id(&draws.secret, &self.name, ticket)))
    }

    /// Where the draw of a room scheduled as `schedule` stands.
    async fn stage(&self, schedule: &Schedule) -> Stage {
        let Some(draws) = &self.draw else {
            return Stage::None;
        };
        let Some(name) = schedule.draw_ms else {
            return Stage::None;
        };
        let now = now_ms();
        if schedule.pending(now).is_some() {
            return Stage::Pending(name);
        }
        if let Some(r) = draws.cached(name) {
            return Stage::Drawn(r);
        }
        let last = draws.tried_ms.load(Ordering::Relaxed);
        if now < last + 1_000
            || draws
                .tried_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return Stage::Drawing(name);
        }
        // Nothing is revealed before the store itself has run the
        // opening (its clock may trail this server's): the read that
        // ends the draw (its record), then the door as the store reads it
        // (the record of a draw with no entrants is the last one's).
        // The record may be long: its own bound, not a visitor's.
        let Ok(record) = bounded(RECORD_TIMEOUT, self.gate.last_draw()).await else {
            return Stage::Drawing(name);
        };
        match bounded(self.store_timeout, self.gate.stats()).await {
            Ok(s) if s.door.opens_at_ms.is_none() => {}
            _ => return Stage::Drawing(name),
        }
        // The record ended at this draw's opening or later (an older one
        // is another draw's); none: nobody entered, or it is gone.
        let tickets = if record.ended_at_ms + SKEW_MS >= name {
            record.tickets
        } else if record.ended_at_ms == 0 && now >= name + KEPT_MS {
            return Stage::Expired(name);
        } else {
            Vec::new()
        };
        let ids: Vec<String> = tickets
            .iter()
            .map(|t| draw_id(&draws.secret, &self.name, t))
            .collect();
        let places = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.clone(), i as u64 + 1))
            .collect();
        let revealed = Arc::new(Revealed {
            draw_ms: name,
            seed: seed(&draws.secret, &self.name, name),
            ids,
            places,
        });
        *draws.revealed.lock().unwrap_or_else(PoisonError::into_inner) = Some(revealed.clone());
        tracing::info!(room = %self.name, entrants = revealed.ids.len(), "the draw's seed is revealed");
        Stage::Drawn(revealed)
    }

    /// The draw in the room's figures (admin API, console): null in a
    /// room that does not draw or has no draw named; else its status, the
    /// commitment, and once drawn the seed and the number of entrants.
    pub(super) async fn draw_summary(&self, schedule: &Schedule) -> Value {
        let Some(draws) = &self.draw else {
            return Value::Null;
        };
        match self.stage(schedule).await {
            Stage::None => Value::Null,
            stage => self.stage_fields(&draws.secret, &stage),
        }
    }

    /// What every answer about the draw says of `stage`: its status, and
    /// for a named draw the commitment, the seed (null until revealed)
    /// and, once drawn, the number of entrants.
    fn stage_fields(&self, secret: &[u8], stage: &Stage) -> Value {
        let named = |status: &str, name: u64, revealed: bool| {
            let s = seed(secret, &self.name, name);
            let shown = if revealed { json!(hex(&s)) } else { Value::Null };
            json!({"status": status, "commitment": commitment(&s), "seed": shown})
        };
        match stage {
            Stage::None => json!({"status": "none"}),
            Stage::Pending(name) => named("pending", *name, false),
            Stage::Drawing(name) => named("drawing", *name, false),
            Stage::Expired(name) => named("expired", *name, true),
            Stage::Drawn(r) => json!({
                "status": "drawn",
                "commitment": commitment(&r.seed),
                "seed": hex(&r.seed),
                "entrants": r.ids.len(),
            }),
        }
    }

    /// A waiter's receipt: their draw id, and their drawn place once the
    /// draw is revealed (null if they were not in it). None in a room
    /// that does not draw or has no draw named.
    pub(super) async fn receipt(&self, ticket: &str) -> Option<Value> {
        let draws = self.draw.as_ref()?;
        let schedule = self.view.settings().schedule;
        schedule.draw_ms?;
        let id = draw_id(&draws.secret, &self.name, ticket);
        let place = match self.stage(&schedule).await {
            Stage::Drawn(r) => r.places.get(&id).copied(),
            _ => None,
        };
        Some(json!({"id": id, "place": place}))
    }

    /// `GET /.tollgate/{room}/draw[?offset=N&limit=N&id=ID]`: the draw's
    /// commitment, and after the opening its seed and a page of its ids in
    /// drawn order (with `id`, that id's place too).
    pub(super) async fn draw_answer(&self, query: Option<&str>) -> Response<Body> {
        let Some(draws) = &self.draw else {
            let why = if self.view.settings().random {
                "this room admits at random (queueing = \"random\"): each place goes to a visitor picked when it frees up, so there is no order to publish"
            } else {
                "this room admits its pre-queue in arrival order (order_at_open = \"fifo\")"
            };
            return json_error(StatusCode::NOT_FOUND, "no_draw", why);
        };
        // (Numbers and hex ids: nothing to percent-decode.)
        let (mut offset, mut limit, mut wanted) = (Some(0usize), Some(1_000usize), None);
        for pair in query.unwrap_or("").split('&') {
            match pair.split_once('=') {
                Some(("offset", v)) => offset = v.parse().ok(),
                Some(("limit", v)) => limit = v.parse().ok().filter(|l| (1..=MAX_PAGE).contains(l)),
                Some(("id", v)) => wanted = Some(v.to_owned()),
                _ => {}
            }
        }
        let (Some(offset), Some(limit)) = (offset, limit) else {
            return json_error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                &format!("offset is a whole number, limit one from 1 to {MAX_PAGE}"),
            );
        };
        let schedule = self.view.settings().schedule;
        let stage = self.stage(&schedule).await;
        let mut j = self.stage_fields(&draws.secret, &stage);
        j["room"] = json!(self.name);
        j["order"] = json!("random");
        j["method"] = json!(METHOD);
        j["opens_at"] = json!(schedule.opens_at_ms.map(states::rfc3339));
        if let Stage::Drawn(r) = stage {
            let end = offset.saturating_add(limit).min(r.ids.len());
            let page = r.ids.get(offset.min(end)..end).unwrap_or_default();
            j["offset"] = json!(offset);
            j["ids"] = json!(page);
            j["next_offset"] = if end < r.ids.len() {
                json!(end)
            } else {
                Value::Null
            };
            if let Some(id) = wanted {
                j["receipt"] = json!({"id": id, "place": r.places.get(&id)});
            }
        }
        json_response(StatusCode::OK, j)
    }
}
