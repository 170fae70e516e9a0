//! The notices a room answers a visitor with instead of the site or the
//! waiting page: the line was reset, the room is closed or sold out, a
//! scheduled room is not open yet, the arrival challenge (and its check);
//! each as a page in the room's language or as JSON, never cached.

use std::time::Duration;

use axum::body::Body;
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{Response, StatusCode};
use serde_json::json;

use super::answers::{HTML, JSON, cookie_value, typed, wants_json};
use super::challenge::{CHALLENGE_HEADER, LIFETIME, Refusal};
use super::rooms::{ArrivalChallenge, Room};
use super::states::{self, RoomState};
use super::store_call::now_ms;
use super::visit::VisitorId;

impl Room {
    /// What a visitor whose place a reset of the line took sees: that the
    /// operator reset it (the page, or `{"status":"reset"}` as JSON), never
    /// a silent place at the back nor an admission. Their token is
    /// cleared, so the page's "join again" link (back to `path`) makes a
    /// new arrival; the old token, presented again, only shows this again.
    pub(super) fn reset_page(&self, headers: &HeaderMap, path: &str, ticket: String) -> Response<Body> {
        self.metrics.reset_told.increment(1);
        let mut response = if wants_json(headers) {
            typed(json!({"status": "reset"}).to_string(), JSON)
        } else {
            let lang = self.pages.lang(headers);
            self.html(self.pages.reset(&self.name, lang, path))
        };
        let h = response.headers_mut();
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        h.append(header::SET_COOKIE, self.clear_cookie());
        response.extensions_mut().insert(VisitorId(ticket));
        response
    }

    /// What a newcomer to a closed room sees (503), or to a sold-out one,
    /// or a waiter it let go (410): the page, or `{"status":"closed"}` /
    /// `{"status":"sold_out"}` as JSON. Any token is cleared: a later
    /// visit is a new arrival.
    pub(super) fn state_page(
        &self,
        headers: &HeaderMap,
        state: RoomState,
        ticket: Option<String>,
    ) -> Response<Body> {
        let mut response = if wants_json(headers) {
            typed(
                json!({"status": state.name(), "state": state.name()}).to_string(),
                JSON,
            )
        } else {
            let lang = self.pages.lang(headers);
            self.html(self.pages.ended(&self.name, lang, state))
        };
        *response.status_mut() = if state == RoomState::SoldOut {
            StatusCode::GONE
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if let Some(ticket) = ticket {
            response
                .headers_mut()
                .append(header::SET_COOKIE, self.clear_cookie());
            response.extensions_mut().insert(VisitorId(ticket));
        }
        response
    }

    /// What a visitor before a scheduled room's pre-queue sees: 503, with
    /// `Retry-After` until the line opens (at most an hour), the page or
    /// `{"status":"not_open", …}` as JSON.
    pub(super) fn not_open_page(
        &self,
        headers: &HeaderMap,
        opens_at: u64,
        prequeue: Duration,
    ) -> Response<Body> {
        let line_opens = opens_at.saturating_sub(prequeue.as_millis() as u64);
        let wait_ms = line_opens.saturating_sub(now_ms());
        let retry = wait_ms.div_ceil(1000).clamp(1, 3600);
        let mut response = if wants_json(headers) {
            let answer = json!({
                "status": "not_open", "state": self.state().name(),
                "opens_at": states::rfc3339(opens_at), "line_opens_at": states::rfc3339(line_opens),
                "line_opens_in_ms": wait_ms,
            });
            typed(answer.to_string(), JSON)
        } else {
            let lang = self.pages.lang(headers);
            self.html(self.pages.not_open(&self.name, lang, opens_at, line_opens, retry))
        };
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        let h = response.headers_mut();
        h.insert(header::RETRY_AFTER, HeaderValue::from(retry));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    }

    /// One of the room's pages; its language may follow `Accept-Language`.
    pub(super) fn html(&self, html: String) -> Response<Body> {
        let mut r = typed(html, HTML);
        if self.pages.varies() {
            r.headers_mut()
                .insert(header::VARY, HeaderValue::from_static("accept-language"));
        }
        r
    }

    /// The cookie the challenge page sets with its solution.
    fn pass_cookie_name(&self) -> String {
        format!("{}_pass", self.cookie_name)
    }

    pub(super) fn clear_pass_cookie(&self) -> HeaderValue {
        HeaderValue::try_from(format!("{}=; Path=/; Max-Age=0", self.pass_cookie_name()))
            .unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    /// Whether the request carries a solution to one of this room's
    /// challenges, unexpired, with enough work, and not used before on
    /// any server (its nonce is spent here). `None`: no solution came.
    pub(super) async fn challenge_passed(
        &self,
        c: &ArrivalChallenge,
        headers: &HeaderMap,
    ) -> Result<(), Option<Refusal>> {
        let cookie = self.pass_cookie_name();
        let given = headers
            .get(CHALLENGE_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_owned())
            .or_else(|| cookie_value(headers, &cookie))
            .filter(|v| !v.is_empty());
        let Some(solution) = given else {
            return Err(None);
        };
        // (Bounded: a solution is a challenge, a colon and a counter.)
        if solution.len() > 256 {
            self.metrics.challenges_refused.increment(1);
            return Err(Some(Refusal::Forged));
        }
        let nonce = c.challenges.check(&solution, now_ms()).map_err(|refusal| {
            self.metrics.challenges_refused.increment(1);
            Some(refusal)
        })?;
        match c.spent.check(&nonce, 1).await {
            Ok(d) if !d.allowed => {
                self.metrics.challenges_refused.increment(1);
                Err(Some(Refusal::Replayed))
            }
            _ => {
                self.metrics.challenges_passed.increment(1);
                Ok(())
            }
        }
    }

    /// The arrival challenge (403): the page, whose script solves it and
    /// comes back with the solution in a cookie, or as JSON
    /// `{"status":"challenge","challenge","bits","header",…}` for a client
    /// that solves it itself and sends it in `Tollgate-Challenge`.
    /// `refused` says why a solution that came was not taken.
    pub(super) fn challenge_page(
        &self,
        headers: &HeaderMap,
        c: &ArrivalChallenge,
        refused: Option<Refusal>,
    ) -> Response<Body> {
        self.metrics.challenges_issued.increment(1);
        let challenge = c.challenges.issue(now_ms());
        let bits = c.challenges.bits();
        let mut response = if wants_json(headers) {
            let answer = json!({
                "status": "challenge", "challenge": challenge, "bits": bits,
                "header": "Tollgate-Challenge", "expires_in_ms": LIFETIME.as_millis() as u64,
                "refused": refused.map(Refusal::reason),
            });
            typed(answer.to_string(), JSON)
        } else {
            let lang = self.pages.lang(headers);
            self.html(
                self.pages
                    .challenge(&self.name, lang, &challenge, bits, &self.pass_cookie_name()),
            )
        };
        *response.status_mut() = StatusCode::FORBIDDEN;
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    }
}
