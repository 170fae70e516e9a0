//! A visitor's way through a room: the token in a cookie or header, the
//! bypass rules, arriving, waiting in line (page, JSON, rate of asking),
//! being admitted and forwarded while active, the room's own endpoints
//! (status, events, leave), and what a visitor sees while the store is down.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::body::Body;
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{Method, Request, Response, StatusCode};
use futures_util::future::BoxFuture;
use serde_json::json;
use tollgate::{Entered, ErrorKind, TicketStatus, client_ip};

use super::answers::{
    JSON, TRY_AGAIN_SECONDS, closed, cookie_value, json_error, json_response, plain, typed, wants_json,
};
use super::feeds;
use super::page::{Figures, Shown};
use super::proxy::{Hop, SESSION_HEADER, VISITOR_HEADER, ViaTls};
use super::rooms::{Bypass, Gone, OnStoreError, Room};
use super::states::{Phase, RoomState};
use super::store_call::{bounded, is_store_error, now_ms, ticket_status};
use super::token::{TOKEN_HEADER, Visitor};
use super::{path, proxy, watch};

/// What a waiter asking too often is told.
const KEPT: &str = "asking too often; your place in line is kept";

impl Room {
    /// The room's cookie; Secure when `secure_cookie` says so or the
    /// visitor came over this server's own TLS (`tls`).
    fn cookie(&self, value: &str, max_age: Duration, tls: bool) -> HeaderValue {
        let secure = if self.secure_cookie || tls { "; Secure" } else { "" };
        let text = format!(
            "{}={value}; Path=/; Max-Age={}; HttpOnly; SameSite=Lax{secure}",
            self.cookie_name,
            max_age.as_secs()
        );
        HeaderValue::try_from(text).unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    pub(super) fn clear_cookie(&self) -> HeaderValue {
        HeaderValue::try_from(format!("{}=; Path=/; Max-Age=0", self.cookie_name))
            .unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    /// The visitor's token from the `Tollgate-Token` header or the cookie.
    fn presented(&self, headers: &HeaderMap) -> Option<String> {
        if let Some(v) = headers.get(TOKEN_HEADER).and_then(|v| v.to_str().ok()) {
            return Some(v.trim().to_owned());
        }
        cookie_value(headers, &self.cookie_name)
    }

    fn visitor(&self, headers: &HeaderMap) -> Option<Visitor> {
        let token = self.presented(headers)?;
        let v = self.keys.verify(&self.name, &token, now_ms());
        if v.is_none() {
            self.metrics.rejected_tokens.increment(1);
        }
        v
    }

    /// Signs an active visitor's token and attaches it to `response`.
    fn admit_token(&self, response: &mut Response<Body>, token: &str, tls: bool) {
        let now = now_ms();
        let visitor = Visitor::Active {
            token: token.to_owned(),
            renewed_ms: now,
        };
        let signed = self
            .keys
            .sign(&self.name, &visitor, now + self.session_ttl.as_millis() as u64);
        self.attach(response, &signed, self.session_ttl, tls);
    }

    fn attach(&self, response: &mut Response<Body>, signed: &str, max_age: Duration, tls: bool) {
        response
            .headers_mut()
            .append(header::SET_COOKIE, self.cookie(signed, max_age, tls));
        if let Ok(v) = HeaderValue::try_from(signed) {
            response.headers_mut().insert(TOKEN_HEADER, v);
        }
    }

    /// Whether the request passes without queueing, and why.
    fn bypassed(&self, req: &Request<hyper::body::Incoming>, path: &str, client: IpAddr) -> Option<Bypass> {
        if self.bypass_paths.iter().any(|p| path::under(path, p)) {
            Some(Bypass::Path)
        } else if self.bypass_ips.iter().any(|n| n.contains(&client))
            || self
                .bypass_header
                .as_ref()
                .is_some_and(|(n, v)| req.headers().get(n) == Some(v))
        {
            Some(Bypass::Trusted)
        } else {
            None
        }
    }

    /// A request for the site behind the room, and its access-log line
    /// (target `tollgate::access`, at info): the visitor's session id
    /// (never the signed token), the upstream's status when it answered,
    /// and the time to the response's head in whole milliseconds.
    pub(super) async fn logged_visit(
        &self,
        req: Request<hyper::body::Incoming>,
        peer: SocketAddr,
        path: &str,
    ) -> Response<Body> {
        let started = std::time::Instant::now();
        let (method, logged_path) = (req.method().clone(), req.uri().path().to_owned());
        let mut response = self.visit(req, peer, path).await;
        let visitor = response.extensions_mut().remove::<VisitorId>();
        let upstream = response.extensions_mut().remove::<proxy::UpstreamStatus>();
        tracing::info!(
            target: "tollgate::access",
            room = %self.name,
            visitor = visitor.as_ref().map(|v| v.0.as_str()),
            %method,
            path = logged_path,
            status = response.status().as_u16(),
            upstream_status = upstream.map(|u| u.0),
            ms = started.elapsed().as_millis() as u64,
            "visit"
        );
        response
    }

    /// A request for the site behind the room.
    async fn visit(
        &self,
        mut req: Request<hyper::body::Incoming>,
        peer: SocketAddr,
        path: &str,
    ) -> Response<Body> {
        // Tollgate-Visitor reaching the upstream is only ever the room's own.
        req.headers_mut().remove(VISITOR_HEADER);
        let client = client_ip(peer.ip(), req.headers(), &self.trusted_proxies);
        let bypass = self.bypassed(&req, path, client);
        // Only the listed protocols upgrade, and never on a bypassed path:
        // a tunnel there would carry later requests past the room.
        let may_upgrade = match proxy::upgrade_protocols(req.headers()) {
            None => false,
            Some(_) if bypass == Some(Bypass::Path) => {
                return plain(
                    StatusCode::BAD_REQUEST,
                    "bad request: no upgrade on a path that bypasses the waiting room",
                );
            }
            Some(asked) => match asked.iter().find(|p| !self.upgrades.contains(p)) {
                Some(refused) => {
                    return plain(
                        StatusCode::BAD_REQUEST,
                        &format!("bad request: upgrading to {refused:?} is not allowed here"),
                    );
                }
                None => true,
            },
        };
        let hop = Hop {
            client,
            peer: peer.ip(),
            trusted_peer: self.trusted_proxies.iter().any(|n| n.contains(&peer.ip())),
            may_upgrade,
            tls: req.extensions().get::<ViaTls>().is_some(),
        };
        // A room in passthrough steps aside for everyone.
        if bypass.is_some() || self.state() == RoomState::Passthrough {
            self.metrics.bypassed.increment(1);
            return self
                .upstream
                .forward(req, hop, &self.cookie_name, &self.metrics, None)
                .await;
        }
        match self.visitor(req.headers()) {
            Some(Visitor::Active { token, renewed_ms }) => self.active(req, hop, token, renewed_ms).await,
            Some(Visitor::Waiting {
                ticket,
                since_ms,
                eta_ms,
            }) => self.waiting(req, hop, ticket, since_ms, eta_ms).await,
            None => self.arrive(req, hop).await,
        }
    }

    async fn arrive(&self, req: Request<hyper::body::Incoming>, hop: Hop) -> Response<Body> {
        // A scheduled room before its pre-queue: the "not open yet" page,
        // no store call (the gate would queue the visitor, held until the
        // opening; the line is for the pre-queue only). A closed or sold
        // out room says so instead.
        let settings = self.view.settings();
        if let Phase::NotOpen(at) = settings.schedule.phase(now_ms())
            && !settings.state.refuses_newcomers()
        {
            return self.not_open_page(req.headers(), at, settings.schedule.prequeue);
        }
        // Sold out, as of a fresh view: no store call for the crowd that
        // follows (the gate's door refuses newcomers anyway; a room that
        // is only closed is asked, as it may have just sold out).
        if self.state() == RoomState::SoldOut && self.view.is_fresh(now_ms()) {
            return self.state_page(req.headers(), RoomState::SoldOut, None);
        }
        if let Some(limit) = &self.arrival_limit
            && let Ok(d) = limit.check(&tollgate::ip_key(hop.client), 1).await
            && !d.allowed
        {
            self.metrics.arrivals_limited.increment(1);
            return self.slow_down(
                req.headers(),
                d.retry_after,
                "too many arrivals from your address; try again shortly",
            );
        }
        // The arrival challenge: a new place in line costs a proof of work
        // (not asked of a newcomer a closed room turns away anyway).
        let passed = match &self.challenge {
            Some(_) if self.state().refuses_newcomers() => false,
            None => false,
            Some(c) => match self.challenge_passed(c, req.headers()).await {
                Ok(()) => true,
                Err(refusal) => return self.challenge_page(req.headers(), c, refusal),
            },
        };
        // The label is the arrival time: the gate orders its line by a
        // counter and keeps no time, and the operator's view of the line
        // shows each waiter's age from it. Taken before entering, it is
        // also the token's join time: never later than the ticket's
        // arrival in the store, so a reset that took the ticket is never
        // taken for one before it joined (`why_gone`).
        let joined_ms = now_ms();
        let joined = self.line_ages.then(|| joined_ms.to_string());
        // In a room that draws, a newcomer to the pre-queue joins the draw.
        let draw_key = self.draw_key(&settings.schedule);
        let enter = || async {
            match &draw_key {
                Some(key) => self.gate.enter_drawn(1, joined.as_deref(), key).await,
                None => self.gate.enter_as(1, true, joined.as_deref()).await,
            }
        };
        let mut entered = bounded(self.store_timeout, enter()).await;
        if entered.as_ref().is_err_and(|e| e.kind() == ErrorKind::NoCapacity) {
            // The store lost the room's settings (data loss, or an idle
            // gate dropped): write them back and count this visitor
            // properly, rather than failing open or closed.
            self.view.reset(now_ms());
            self.restore().await;
            entered = bounded(self.store_timeout, enter()).await;
        }
        let mut response = match entered {
            Ok(Entered::Granted(g)) => {
                self.metrics.admitted.increment(1);
                self.metrics.wait.record(0.0);
                self.forward_active(req, hop, &g.token, true).await
            }
            Ok(Entered::Queued { ticket, place }) => {
                self.metrics.queued.increment(1);
                let id = VisitorId(ticket.clone());
                let now = now_ms();
                let signed = self.keys.sign(
                    &self.name,
                    &Visitor::Waiting {
                        ticket,
                        since_ms: joined_ms,
                        // (In a draw the estimate would tell the place.)
                        eta_ms: place
                            .eta
                            .filter(|_| draw_key.is_none())
                            .map(|e| e.as_millis() as u64),
                    },
                    now + 24 * 3600 * 1000,
                );
                let mut response = self.queued_page(req.headers(), Shown::of(&place, self.view.settings()));
                self.attach(&mut response, &signed, Duration::from_secs(24 * 3600), hop.tls);
                response.extensions_mut().insert(id);
                response
            }
            Ok(Entered::Busy(_)) => self.store_down(req, hop, None).await,
            Err(e) if e.kind() == ErrorKind::Closed => {
                // Which of the two, from the store: this server's view may
                // not have caught up with the change yet.
                let state = match self.stored_state().await {
                    RoomState::SoldOut => RoomState::SoldOut,
                    _ => RoomState::Closed,
                };
                self.state_page(req.headers(), state, None)
            }
            Err(e) => self.store_down(req, hop, Some(e)).await,
        };
        if passed {
            // The pass is spent: the browser need not send it again.
            response
                .headers_mut()
                .append(header::SET_COOKIE, self.clear_pass_cookie());
        }
        response
    }

    async fn active(
        &self,
        req: Request<hyper::body::Incoming>,
        hop: Hop,
        token: String,
        renewed_ms: u64,
    ) -> Response<Body> {
        let now = now_ms();
        let age = Duration::from_millis(now.saturating_sub(renewed_ms));
        if age < self.renew_every && self.view.trusts(&token, renewed_ms, now) {
            return self.forward_active(req, hop, &token, false).await;
        }
        if self.view.is_revoked(&token) {
            // An ended session presented again: it counts for nothing.
            self.metrics.revoked_replays.increment(1);
            return self.arrive(req, hop).await;
        }
        // Activity refreshes the session; a lease that ended (idle past its
        // TTL, or the session was ended) means starting over.
        match bounded(self.store_timeout, self.gate.renew(&token, self.session_ttl)).await {
            Ok(_) => self.forward_active(req, hop, &token, true).await,
            Err(e) if e.kind() == ErrorKind::LeaseLost => {
                self.metrics.expired_sessions.increment(1);
                self.arrive(req, hop).await
            }
            Err(e) if is_store_error(&e) => self.store_down(req, hop, Some(e)).await,
            Err(_) => self.arrive(req, hop).await,
        }
    }

    /// Forwards an admitted visitor's request; ends the session if the
    /// upstream says so, else hands over a freshly signed token when
    /// `fresh_token` (just admitted, or just renewed).
    async fn forward_active(
        &self,
        req: Request<hyper::body::Incoming>,
        hop: Hop,
        token: &str,
        fresh_token: bool,
    ) -> Response<Body> {
        let mut req = req;
        if let Ok(v) = HeaderValue::try_from(token) {
            req.headers_mut().insert(VISITOR_HEADER, v);
        }
        let close = hop.may_upgrade.then(|| self.tunnel_watch(token));
        let mut response = self
            .upstream
            .forward(req, hop, &self.cookie_name, &self.metrics, close)
            .await;
        response.extensions_mut().insert(VisitorId(token.to_owned()));
        let end = response
            .headers_mut()
            .remove(SESSION_HEADER)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"end"));
        if end {
            let _ = self.end_session(token).await;
            response
                .headers_mut()
                .append(header::SET_COOKIE, self.clear_cookie());
        } else if fresh_token {
            self.admit_token(&mut response, token, hop.tls);
        }
        response
    }

    /// For an admitted visitor's upgraded connection (a WebSocket): keeps
    /// the session alive while it is open (a tunnel carries no requests to
    /// renew it), and resolves, closing it, once the session ends (ended
    /// anywhere, or its lease lost).
    fn tunnel_watch(&self, token: &str) -> BoxFuture<'static, ()> {
        let (gate, view, token) = (self.gate.clone(), self.view.clone(), token.to_owned());
        let (ttl, timeout) = (self.session_ttl, self.store_timeout);
        let every = self.renew_every.as_millis() as u64;
        let close_on_error = self.on_store_error == OnStoreError::Closed;
        let closed = self.metrics.tunnels_closed.clone();
        Box::pin(async move {
            // When the session was last confirmed with the store (ms), and
            // the view's reset count then.
            let (mut confirmed, mut resets) = (now_ms(), view.resets());
            let mut tried = 0;
            loop {
                tokio::time::sleep(watch::WATCH_EVERY).await;
                if view.is_revoked(&token) {
                    break;
                }
                let now = now_ms();
                // Renew when due, and at once (at most once a second while
                // it fails) when this server's view cannot vouch for the
                // session: stale, or its state created anew since.
                let doubt = !view.is_fresh(now) || view.resets() != resets;
                let due = now.saturating_sub(confirmed) >= every;
                if !(due || doubt) || now.saturating_sub(tried) < 1_000.min(every) {
                    continue;
                }
                tried = now;
                let resets_before = view.resets();
                match bounded(timeout, gate.renew(&token, ttl)).await {
                    Ok(_) => (confirmed, resets) = (now, resets_before),
                    Err(e) if e.kind() == ErrorKind::LeaseLost => break,
                    // The store cannot vouch for it: a fail-closed room
                    // closes it, a fail-open one lets it be.
                    Err(_) if close_on_error => break,
                    Err(_) => {}
                }
            }
            closed.increment(1);
        })
    }

    /// Ends a visitor's session at once: an admitted visitor's slot goes to
    /// the next in line in the same step; a waiting one leaves the line.
    pub(crate) async fn end_session(&self, token: &str) -> tollgate::Result<tollgate::Left> {
        // Refused here at once; the gate's revocation log tells the other
        // servers, written in the step that frees the slot.
        self.view.revoke(token, now_ms());
        let left = self.end_in_store(token).await;
        if let Err(e) = &left {
            tracing::warn!(room = %self.name, error = %e, "could not end a session yet; retrying");
        }
        left
    }

    /// Ends `token`'s session in the store (and its revocation log); one
    /// the store does not take is retried by the watch until it does, so
    /// the other servers learn of it too.
    pub(super) async fn end_in_store(&self, token: &str) -> tollgate::Result<tollgate::Left> {
        let left = bounded(self.store_timeout, self.gate.end(token, self.view.keep())).await;
        match &left {
            Ok(tollgate::Left::Released) => self.metrics.ended_sessions.increment(1),
            Ok(_) => {}
            Err(_) => self.view.end_failed(token),
        }
        left
    }

    async fn waiting(
        &self,
        req: Request<hyper::body::Incoming>,
        hop: Hop,
        ticket: String,
        since_ms: u64,
        eta_ms: Option<u64>,
    ) -> Response<Body> {
        // A visitor refreshing too often is answered without touching the
        // line: their place is kept either way.
        if let Ok(d) = self.status_limit.check(&ticket, 1).await
            && !d.allowed
        {
            self.metrics.status_limited.increment(1);
            return self.slow_down(req.headers(), d.retry_after, KEPT);
        }
        match ticket_status(self.store_timeout, self.gate.status(&ticket)).await {
            // A session ended here whose end the store has not confirmed
            // yet is still ended.
            Ok(TicketStatus::Granted(g)) if self.view.is_revoked(&g.token) => {
                self.metrics.revoked_replays.increment(1);
                self.arrive(req, hop).await
            }
            Ok(TicketStatus::Granted(g)) => {
                self.admitted_after(since_ms, eta_ms);
                self.forward_active(req, hop, &g.token, true).await
            }
            Ok(TicketStatus::Queued(place)) => {
                let mut response = self.queued_page(req.headers(), Shown::of(&place, self.view.settings()));
                response.extensions_mut().insert(VisitorId(ticket));
                response
            }
            Ok(TicketStatus::Gone) => {
                match self.why_gone(since_ms).await {
                    Gone::SoldOut => return self.state_page(req.headers(), RoomState::SoldOut, Some(ticket)),
                    Gone::Reset => return self.reset_page(req.headers(), req.uri().path(), ticket),
                    Gone::Left => {}
                }
                // Left the line (silent past the grace): a new arrival.
                self.metrics.abandoned.increment(1);
                self.arrive(req, hop).await
            }
            Err(e) if is_store_error(&e) => self.store_down(req, hop, Some(e)).await,
            Err(_) => self.arrive(req, hop).await,
        }
    }

    /// Counts an admission from the line, how long it waited, and how far
    /// off the estimate it was given on joining was.
    fn admitted_after(&self, since_ms: u64, eta_ms: Option<u64>) {
        self.metrics.admitted.increment(1);
        let waited = now_ms().saturating_sub(since_ms);
        self.metrics.wait.record(waited as f64 / 1000.0);
        if let Some(eta) = eta_ms {
            let error = waited.abs_diff(eta);
            self.metrics.eta_error.record(error as f64 / 1000.0);
            let [sum, count] = &self.metrics.eta_errors;
            sum.fetch_add(error, std::sync::atomic::Ordering::Relaxed);
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn retry_seconds(&self) -> u64 {
        2
    }

    fn queued_page(&self, headers: &HeaderMap, shown: Shown) -> Response<Body> {
        let retry = self.retry_seconds();
        let state = shown.state;
        let mut response = if wants_json(headers) {
            typed(shown.json().to_string(), JSON)
        } else {
            let lang = self.pages.lang(headers);
            let html = self
                .pages
                .waiting(&self.name, lang, Figures::Known(&shown), retry, state);
            self.html(html)
        };
        *response.status_mut() = self.queued_status;
        let h = response.headers_mut();
        h.insert(header::RETRY_AFTER, HeaderValue::from(retry));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    }

    fn slow_down(&self, headers: &HeaderMap, retry_after: Duration, message: &str) -> Response<Body> {
        let secs = retry_after.as_millis().div_ceil(1000).max(1) as u64;
        let mut response = if wants_json(headers) {
            typed(tollgate::error_body("rate_limited", message), JSON)
        } else {
            let lang = self.pages.lang(headers);
            self.html(
                self.pages
                    .waiting(&self.name, lang, Figures::Unknown, secs, self.state()),
            )
        };
        *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        let h = response.headers_mut();
        h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    }

    /// The store could not be asked: pass the visitor through (open) or
    /// ask them to come back (closed).
    async fn store_down(
        &self,
        req: Request<hyper::body::Incoming>,
        hop: Hop,
        error: Option<tollgate::Error>,
    ) -> Response<Body> {
        // Uncounted visitors get no tunnel: it would outlive the outage.
        let hop = Hop {
            may_upgrade: false,
            ..hop
        };
        let error = error.map_or_else(|| "unexpected answer".to_owned(), |e| e.to_string());
        tracing::warn!(room = %self.name, error, open = self.on_store_error == OnStoreError::Open, "waiting room: store error");
        match self.on_store_error {
            OnStoreError::Open => {
                self.metrics.failed_open.increment(1);
                self.upstream
                    .forward(req, hop, &self.cookie_name, &self.metrics, None)
                    .await
            }
            OnStoreError::Closed => {
                self.metrics.failed_closed.increment(1);
                let lang = self.pages.lang(req.headers());
                closed(req.headers(), || {
                    self.html(self.pages.try_again(&self.name, lang, TRY_AGAIN_SECONDS))
                })
            }
        }
    }

    /// A waiter's status request (or event stream) past `status_rate`:
    /// the JSON 429 that keeps its place.
    async fn asks_too_often(
        &self,
        req: &Request<hyper::body::Incoming>,
        ticket: &str,
    ) -> Option<Response<Body>> {
        let d = self.status_limit.check(ticket, 1).await.ok()?;
        if d.allowed {
            return None;
        }
        self.metrics.status_limited.increment(1);
        let mut h = req.headers().clone();
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        Some(self.slow_down(&h, d.retry_after, KEPT))
    }

    /// The room's own endpoints: `status` (JSON), `events` (SSE), `leave`.
    pub(super) async fn own(&self, req: Request<hyper::body::Incoming>, action: &str) -> Response<Body> {
        let visitor = self.visitor(req.headers());
        match (req.method(), action, visitor) {
            (
                &Method::GET,
                "status",
                Some(Visitor::Waiting {
                    ticket,
                    since_ms,
                    eta_ms,
                }),
            ) => {
                if let Some(refused) = self.asks_too_often(&req, &ticket).await {
                    return refused;
                }
                match ticket_status(self.store_timeout, self.gate.status(&ticket)).await {
                    Ok(TicketStatus::Queued(place)) => {
                        let mut j = Shown::of(&place, self.view.settings()).json();
                        if let Some(receipt) = self.receipt(&ticket).await {
                            j["draw"] = receipt;
                        }
                        let mut r = json_response(StatusCode::OK, j);
                        r.headers_mut()
                            .insert(header::RETRY_AFTER, HeaderValue::from(self.retry_seconds()));
                        r
                    }
                    Ok(TicketStatus::Granted(g)) if self.view.is_revoked(&g.token) => {
                        json_response(StatusCode::OK, json!({"status": "ended"}))
                    }
                    Ok(TicketStatus::Granted(g)) => {
                        self.admitted_after(since_ms, eta_ms);
                        let mut r = json_response(StatusCode::OK, json!({"status": "admitted"}));
                        self.admit_token(&mut r, &g.token, req.extensions().get::<ViaTls>().is_some());
                        r
                    }
                    Ok(TicketStatus::Gone) => {
                        let gone = match self.why_gone(since_ms).await {
                            Gone::SoldOut => json!({"status": "sold_out", "state": "sold_out"}),
                            Gone::Reset => {
                                self.metrics.reset_told.increment(1);
                                json!({"status": "reset"})
                            }
                            Gone::Left => return json_response(StatusCode::OK, json!({"status": "gone"})),
                        };
                        let mut r = json_response(StatusCode::OK, gone);
                        r.headers_mut().append(header::SET_COOKIE, self.clear_cookie());
                        r
                    }
                    Err(_) => json_error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "store_unavailable",
                        "try again shortly",
                    ),
                }
            }
            (&Method::GET, "status", Some(Visitor::Active { token, renewed_ms })) => {
                let now = now_ms();
                let young = now.saturating_sub(renewed_ms) < self.renew_every.as_millis() as u64;
                if young && self.view.trusts(&token, renewed_ms, now) {
                    return json_response(StatusCode::OK, json!({"status": "active"}));
                }
                if self.view.is_revoked(&token) {
                    return json_response(StatusCode::OK, json!({"status": "ended"}));
                }
                match ticket_status(self.store_timeout, self.gate.status(&token)).await {
                    Ok(TicketStatus::Granted(_)) => {
                        json_response(StatusCode::OK, json!({"status": "active"}))
                    }
                    Ok(_) => json_response(StatusCode::OK, json!({"status": "ended"})),
                    Err(_) => json_error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "store_unavailable",
                        "try again shortly",
                    ),
                }
            }
            (&Method::GET, "status", None) => json_response(StatusCode::OK, json!({"status": "none"})),
            (&Method::GET, "draw", _) => self.draw_answer(req.uri().query()).await,
            (&Method::GET, "events", Some(Visitor::Waiting { ticket, .. })) => {
                // Opening a stream is a status request too.
                if let Some(refused) = self.asks_too_often(&req, &ticket).await {
                    return refused;
                }
                feeds::events(
                    &self.feeds,
                    &self.gate,
                    &self.view,
                    self.store_timeout,
                    &self.subscribers,
                    &ticket,
                )
            }
            (&Method::GET, "events", _) => {
                json_error(StatusCode::NOT_FOUND, "not_waiting", "no place in line")
            }
            (&Method::POST, "leave", v) => {
                match v {
                    Some(Visitor::Active { token, .. }) => {
                        let _ = self.end_session(&token).await;
                    }
                    Some(Visitor::Waiting { ticket, .. }) => {
                        let _ = bounded(self.store_timeout, self.gate.leave(&ticket)).await;
                    }
                    None => {}
                }
                let mut r = json_response(StatusCode::OK, json!({"status": "left"}));
                r.headers_mut().append(header::SET_COOKIE, self.clear_cookie());
                r
            }
            (_, "status" | "events" | "leave" | "draw", _) => json_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "wrong method",
            ),
            _ => json_error(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such waiting-room endpoint",
            ),
        }
    }
}

/// Whom a response was for, for the access log: the ticket's id while in
/// line, the session's once admitted (the same id), never the signed token.
#[derive(Debug, Clone)]
pub(super) struct VisitorId(pub(super) String);
