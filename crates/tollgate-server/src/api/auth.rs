//! Who may call the /v1 routes and /metrics: the configured tokens and
//! their roles, the middleware that checks a bearer token or a console
//! session cookie (with its CSRF header), and the role rule (a `read`
//! token may only GET and HEAD).
//!
//! Sessions are stateless: the cookie names a token by its place in the
//! list and is signed with a key derived from that token's digest, so any
//! server with the same config accepts it, a restart keeps it, and
//! changing or removing the token ends it. See [`super::session`] for the
//! routes that hand it out.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::caller::{Caller, Role};
use super::error::ApiError;
use super::tickets::TicketCaps;

type HmacSha256 = Hmac<Sha256>;

/// How long a console session lasts unless `session_ttl` says otherwise:
/// a working day, so an operator logs in about once a day.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// The session cookie's name.
pub(crate) const COOKIE: &str = "tollgate_session";

/// The header a cookie-authenticated change must carry.
pub(crate) const CSRF_HEADER: &str = "x-csrf-token";

/// A cookie value longer than this is not ours (ours are about 80 bytes);
/// it is not even parsed.
const MAX_COOKIE_LEN: usize = 256;

/// The server's tokens, kept as SHA-256 digests. A presented token is
/// hashed and its digest compared with every one, each comparison running
/// over all 32 bytes: the time taken depends neither on how much of a
/// guess was right nor on whether its length was, and a digest that
/// partly matches tells nothing about the token behind it.
#[derive(Debug)]
pub(crate) struct Tokens {
    digests: Vec<[u8; 32]>,
    /// The first `admins` digests are admin tokens, the rest read tokens.
    admins: usize,
    /// How long a session lasts.
    session_ttl: Duration,
}

/// A verified session cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Session {
    pub(crate) caller: Caller,
    pub(crate) expires_ms: u64,
    /// The value the `X-CSRF-Token` header must carry.
    pub(crate) csrf: String,
}

impl Tokens {
    pub(crate) fn new(admin: &[String], read: &[String], session_ttl: Duration) -> Tokens {
        Tokens {
            digests: admin.iter().chain(read).map(|t| digest(t)).collect(),
            admins: admin.len(),
            session_ttl,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    pub(crate) fn session_ttl(&self) -> Duration {
        self.session_ttl
    }

    fn role(&self, index: usize) -> Role {
        if index < self.admins {
            Role::Admin
        } else {
            Role::Read
        }
    }

    /// The caller `presented` makes, if it is one of the tokens.
    pub(crate) fn find(&self, presented: &str) -> Option<Caller> {
        let presented = digest(presented);
        let mut found = None;
        for (i, token) in self.digests.iter().enumerate() {
            if same(token, &presented) && found.is_none() {
                found = Some(i);
            }
        }
        found.map(|i| Caller(i, self.role(i)))
    }

    /// The key that signs token `index`'s sessions: derived from its
    /// digest, so it is the same on every server with the same config,
    /// and a changed token has a new one.
    fn session_key(&self, index: usize) -> HmacSha256 {
        let mut key = mac(&self.digests[index]);
        key.update(b"tollgate session key v1");
        mac(&key.finalize().into_bytes())
    }

    /// A new session cookie value for `caller`, valid until `expires_ms`.
    /// `v1.<index>.<expires_ms>.<nonce>.<signature>`: the nonce makes each
    /// login's cookie (and CSRF value) its own.
    pub(crate) fn issue(&self, caller: Caller, expires_ms: u64) -> (String, Session) {
        let nonce: [u8; 16] = rand::random();
        let payload = format!("v1.{}.{expires_ms}.{}", caller.0, URL_SAFE_NO_PAD.encode(nonce));
        let mut signer = self.session_key(caller.0);
        signer.update(payload.as_bytes());
        let value = format!(
            "{payload}.{}",
            URL_SAFE_NO_PAD.encode(signer.finalize().into_bytes())
        );
        let session = Session {
            caller,
            expires_ms,
            csrf: self.csrf(caller.0, &value),
        };
        (value, session)
    }

    /// The session `value` stands for, if this server signed it (or one
    /// with the same token at the same place), and it has not expired.
    pub(crate) fn verify(&self, value: &str, now_ms: u64) -> Option<Session> {
        if value.len() > MAX_COOKIE_LEN {
            return None;
        }
        let (payload, signature) = value.rsplit_once('.')?;
        let mut parts = payload.split('.');
        let (Some("v1"), Some(index), Some(expires), Some(_nonce), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return None;
        };
        let index: usize = index.parse().ok()?;
        let expires_ms: u64 = expires.parse().ok()?;
        if index >= self.digests.len() {
            return None;
        }
        let signature = URL_SAFE_NO_PAD.decode(signature).ok()?;
        let mut checker = self.session_key(index);
        checker.update(payload.as_bytes());
        // verify_slice compares in constant time.
        checker.verify_slice(&signature).ok()?;
        if expires_ms <= now_ms {
            return None;
        }
        Some(Session {
            caller: Caller(index, self.role(index)),
            expires_ms,
            csrf: self.csrf(index, value),
        })
    }

    /// The CSRF value of a session: another MAC over its cookie, so only
    /// a page that was told it at login (same origin) can send it.
    fn csrf(&self, index: usize, value: &str) -> String {
        let mut m = self.session_key(index);
        m.update(b"csrf.");
        m.update(value.as_bytes());
        URL_SAFE_NO_PAD.encode(m.finalize().into_bytes())
    }
}

fn mac(key: &[u8]) -> HmacSha256 {
    HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable!("hmac accepts any key length"))
}

fn digest(token: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// Compares all 32 bytes, without stopping at the first difference.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    std::hint::black_box(a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
}

/// Compares two strings in time that depends only on their lengths.
pub(crate) fn same_text(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && std::hint::black_box(a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
}

/// The credentials of `Bearer <token>`; the scheme's name is
/// case-insensitive (RFC 7235), and one or more spaces follow it.
pub(crate) fn bearer(value: &str) -> Option<&str> {
    let (scheme, rest) = value.split_once(' ')?;
    let token = rest.trim_matches(' ');
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The presented bearer token, if any.
pub(crate) fn presented_bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)
}

/// The values of the request's session cookies, in order (HTTP/2 may
/// split cookies over several `Cookie` headers).
pub(crate) fn session_cookies(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim_matches('"'))
}

impl Tokens {
    /// The first valid session among the request's session cookies. Each
    /// is tried: a browser sends every cookie of that name that matches,
    /// a longer path's first, so a stray one (an old path's, or one a
    /// sibling subdomain planted) must not hide the real one. The request
    /// head's size limit (64 KiB) bounds the tries.
    pub(crate) fn session_of(&self, headers: &HeaderMap, now_ms: u64) -> Option<Session> {
        session_cookies(headers).find_map(|c| self.verify(c, now_ms))
    }
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Tries at a token one client address (IPv6 by its /64) may make: a
/// burst of [`TRIES_BURST`], then one every 6 s. A token is at least 16
/// printable characters, so this leaves guessing hopeless while an
/// operator who mistypes a few times is not locked out.
pub(crate) const TRIES_PER_MINUTE: u64 = 10;
pub(crate) const TRIES_BURST: u64 = 10;

/// The limiter's name (in `tollgate_limit_decisions_total`).
pub(crate) const TRIES_LIMITER: &str = "tollgate-session-login";

/// Addresses remembered as refused at most; past it, one more is not
/// remembered (its tries are still counted in the store).
const MAX_REFUSED: usize = 65_536;

/// The one limit on guessing tokens, per client address: every login
/// (`POST /v1/session`, right or wrong) and every wrong bearer token
/// spend from the same allowance, kept in the store so that every server
/// sharing it adds to the same count. An address the store refused is
/// remembered here until its `Retry-After`: until then its bearer
/// tokens, right or wrong, are refused before they are checked (else the
/// refusal itself would tell a right guess from a wrong one), without a
/// store call. A right bearer spends nothing.
#[derive(Debug)]
pub(crate) struct Tries {
    limiter: tollgate::RateLimiter,
    refused: Mutex<HashMap<String, Instant>>,
}

impl Tries {
    /// The limit over `store`: a try waits up to a second for it, and
    /// answers 503 while the store cannot be asked (guessing is not worth
    /// failing open for).
    pub(crate) fn new(store: &tollgate::Store) -> Tries {
        let limit = tollgate::Rate::per_minute(TRIES_PER_MINUTE)
            .and_then(|rate| tollgate::Limit::gcra(rate, TRIES_BURST))
            .unwrap_or_else(|_| unreachable!("a valid constant limit"));
        let limiter = tollgate::RateLimiter::new(store, TRIES_LIMITER, limit)
            .unwrap_or_else(|_| unreachable!("a valid constant name"))
            .timeout(Duration::from_secs(1));
        Tries {
            limiter,
            refused: Mutex::default(),
        }
    }

    fn refused(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long `ip` is still refused, as this server knows.
    fn refused_for(&self, ip: IpAddr) -> Option<Duration> {
        let refused = self.refused();
        if refused.is_empty() {
            return None;
        }
        let until = *refused.get(&tollgate::ip_key(ip))?;
        until
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    }

    /// Spends one try of `ip`'s: `Err` with a 429 when it has none left.
    pub(crate) async fn spend(&self, ip: IpAddr) -> Result<Result<(), Response>, ApiError> {
        let key = tollgate::ip_key(ip);
        let decision = self.limiter.check(&format!("ip:{key}"), 1).await?;
        if decision.allowed {
            return Ok(Ok(()));
        }
        let now = Instant::now();
        let mut refused = self.refused();
        if refused.len() >= MAX_REFUSED {
            refused.retain(|_, until| *until > now);
        }
        if refused.len() < MAX_REFUSED {
            refused.insert(key, now + decision.retry_after);
        }
        Ok(Err(too_many_tries(decision.retry_after)))
    }

    /// The caller a presented bearer token makes, or the answer: 401 for
    /// a wrong one (a try spent), 429 once `ip` has no tries left.
    pub(crate) async fn bearer(&self, tokens: &Tokens, ip: IpAddr, token: &str) -> Result<Caller, Response> {
        if let Some(left) = self.refused_for(ip) {
            return Err(too_many_tries(left));
        }
        if let Some(caller) = tokens.find(token) {
            return Ok(caller);
        }
        match self.spend(ip).await {
            Ok(Ok(())) => Err(unauthorized()),
            Ok(Err(refused)) => Err(refused),
            Err(e) => Err(e.into_response()),
        }
    }
}

/// 429 `rate_limited` with `Retry-After` (whole seconds, at least 1).
fn too_many_tries(retry_after: Duration) -> Response {
    let mut response = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        format!(
            "too many tries at a token from this address (logins and wrong bearer tokens); at most {TRIES_PER_MINUTE} a minute after a burst of {TRIES_BURST}"
        ),
    )
    .into_response();
    let secs = retry_after.as_secs_f64().ceil().max(1.0) as u64;
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    response
}

/// The client's address, believing the `X-Forwarded-For` of the proxies
/// `[protect]` trusts.
pub(crate) fn client_ip(tickets: &TicketCaps, req: &Request) -> IpAddr {
    let peer = req
        .extensions()
        .get::<tollgate::PeerAddr>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |p| p.0.ip());
    tickets.client_ip(peer, req.headers())
}

/// Checks the caller when tokens are configured: a bearer token (its
/// tries limited per address: [`Tries`]), else a session cookie (whose
/// changes must carry its CSRF value); then the role. Notes the caller
/// ([`Caller`]) for the handlers.
pub(crate) async fn authenticate(
    State(tokens): State<Arc<Tokens>>,
    State(tries): State<Arc<Tries>>,
    State(tickets): State<Arc<TicketCaps>>,
    mut req: Request,
    next: Next,
) -> Response {
    let caller = match presented_bearer(req.headers()) {
        Some(token) => match tries.bearer(&tokens, client_ip(&tickets, &req), token).await {
            Ok(caller) => Some(caller),
            Err(answer) => return answer,
        },
        None => match tokens.session_of(req.headers(), now_ms()) {
            Some(session) => {
                if !Role::Read.allows(req.method()) {
                    let sent = req
                        .headers()
                        .get(CSRF_HEADER)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    if !same_text(sent, &session.csrf) {
                        return ApiError::new(
                            StatusCode::FORBIDDEN,
                            "csrf",
                            "a change made with the session cookie must carry the session's X-CSRF-Token header (from POST or GET /v1/session)",
                        )
                        .into_response();
                    }
                }
                Some(session.caller)
            }
            None => None,
        },
    };
    let Some(caller) = caller else {
        return unauthorized();
    };
    if !caller.1.allows(req.method()) {
        return forbidden(caller.1).into_response();
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// The answer to a role that may not do what it asked.
pub(crate) fn forbidden(role: Role) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!(
            "this token's role is {}: it may only GET and HEAD; changes need an admin token",
            role.as_str()
        ),
    )
}

/// 401 with the `WWW-Authenticate` challenge.
pub(crate) fn unauthorized() -> Response {
    let mut response = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "send Authorization: Bearer <token> with one of the server's tokens, or log in with POST /v1/session",
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Tokens {
        Tokens::new(
            &["admin-token-0123456789".to_owned()],
            &["read-token-0123456789".to_owned()],
            SESSION_TTL,
        )
    }

    #[test]
    fn sessions_verify_only_as_issued() {
        let t = tokens();
        let caller = t.find("read-token-0123456789").expect("found");
        assert_eq!(caller, Caller(1, Role::Read));
        let (value, session) = t.issue(caller, 2_000);
        assert_eq!(t.verify(&value, 1_000), Some(session.clone()));
        // Expired.
        assert_eq!(t.verify(&value, 2_000), None);
        // Another index, expiry or nonce, with the old signature.
        let (payload, sig) = value.rsplit_once('.').expect("signed");
        for edited in [
            payload.replacen("v1.1.", "v1.0.", 1),
            payload.replacen(".2000.", ".9000.", 1),
            format!("{payload}x"),
        ] {
            assert_eq!(t.verify(&format!("{edited}.{sig}"), 1_000), None, "{edited}");
        }
        // The same config elsewhere accepts it; a changed token does not.
        assert!(tokens().verify(&value, 1_000).is_some());
        let changed = Tokens::new(
            &["admin-token-0123456789".to_owned()],
            &["read-token-9876543210".to_owned()],
            SESSION_TTL,
        );
        assert_eq!(changed.verify(&value, 1_000), None);
        // Each login its own CSRF value.
        let (_, other) = t.issue(caller, 2_000);
        assert_ne!(other.csrf, session.csrf);
    }

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=b; tollgate_session=v1.x"),
        );
        assert_eq!(session_cookies(&h).collect::<Vec<_>>(), ["v1.x"]);
        assert_eq!(session_cookies(&HeaderMap::new()).next(), None);
    }

    #[test]
    fn a_stray_cookie_does_not_hide_the_session() {
        let t = tokens();
        let caller = t.find("admin-token-0123456789").expect("found");
        let (value, session) = t.issue(caller, 2_000);
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_str(&format!("tollgate_session=planted; tollgate_session={value}"))
                .expect("header"),
        );
        assert_eq!(t.session_of(&h, 1_000), Some(session));
        let mut stray = HeaderMap::new();
        stray.append(
            header::COOKIE,
            HeaderValue::from_static("tollgate_session=planted"),
        );
        assert_eq!(t.session_of(&stray, 1_000), None);
    }
}
