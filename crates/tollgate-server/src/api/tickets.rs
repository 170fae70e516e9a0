//! How many tickets one client may hold waiting at once on the API
//! (`max_tickets_per_client`), so one client cannot fill a line without
//! bound.
//!
//! A client is the bearer token it presented when tokens are configured,
//! else its IP address (the `X-Forwarded-For` of a `[protect]` trusted
//! proxy is believed). The count is this server's own, kept in memory: a
//! ticket is counted from the `enter` that queued it until this server sees
//! it granted, gone or cancelled, or until its heartbeat lapses unasked
//! here (the store drops it then too). Servers sharing a Redis each count
//! their own, and a ticket asked about only on another server is
//! forgotten here after its heartbeat: best effort, per server.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{FromRef, FromRequestParts};
use axum::http::StatusCode;
use axum::http::request::Parts;
use ipnet::IpNet;

use super::caller::Caller;
use super::error::ApiError;

/// Waiting tickets one client may hold at once, by default.
pub(crate) const DEFAULT_PER_CLIENT: usize = 1000;

/// Waiting tickets this server keeps count of, over all clients: the
/// bound on the memory the count takes (about 150 bytes a ticket, more
/// with long gate names).
const MAX_COUNTED: usize = 1_000_000;

/// A ticket is forgotten this long after its heartbeat would have lapsed.
const SLACK: Duration = Duration::from_secs(1);

/// The per-client count of waiting tickets.
#[derive(Debug)]
pub(crate) struct TicketCaps {
    /// 0: no cap (and nothing counted).
    per_client: usize,
    trusted_proxies: Vec<IpNet>,
    counts: Mutex<Counts>,
    /// [`MAX_COUNTED`], smaller in tests.
    max_counted: usize,
}

#[derive(Debug, Default)]
struct Counts {
    /// Tickets held (or reserved) per client.
    clients: HashMap<Arc<str>, usize>,
    /// Each counted ticket (`<gate> <id>`): its client and when it is
    /// forgotten unless seen again.
    tickets: HashMap<Arc<str>, (Arc<str>, Instant)>,
    /// The same tickets by when they are forgotten (sharing the key).
    by_deadline: BTreeSet<(Instant, Arc<str>)>,
    /// Reserved for an `enter` under way, not yet a ticket.
    reserved: usize,
}

/// Why a client may not queue another ticket.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The client holds its cap.
    Client(usize),
    /// This server counts as many tickets as it can.
    Server,
}

impl Refused {
    pub(crate) fn error(&self) -> ApiError {
        metrics::counter!("tollgate_tickets_refused_total").increment(1);
        let message = match self {
            Refused::Client(n) => format!(
                "this client already holds {n} waiting tickets (max_tickets_per_client); \
                 wait for one to be granted, or cancel one, before queueing again"
            ),
            Refused::Server => {
                format!("this server already counts {MAX_COUNTED} waiting tickets; try again later")
            }
        };
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_tickets", message)
    }
}

/// Who is asking, for the count: `token:<i>` or `ip:<address>`.
#[derive(Debug, Clone)]
pub(crate) struct Client(Arc<str>);

impl<S: Send + Sync> FromRequestParts<S> for Client
where
    Arc<TicketCaps>: FromRef<S>,
{
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        if let Some(Caller(i, _)) = parts.extensions.get::<Caller>() {
            return Ok(Client(format!("token:{i}").into()));
        }
        let peer = parts
            .extensions
            .get::<tollgate::PeerAddr>()
            .map_or(IpAddr::from([0, 0, 0, 0]), |p| p.0.ip());
        let ip = Arc::<TicketCaps>::from_ref(state).client_ip(peer, &parts.headers);
        // IPv6 by its /64: rotating addresses within one subscriber's
        // allocation buys no fresh cap.
        Ok(Client(format!("ip:{}", tollgate::ip_key(ip)).into()))
    }
}

impl TicketCaps {
    /// The client's address: `peer`, or the `X-Forwarded-For` a trusted
    /// proxy set.
    pub(crate) fn client_ip(&self, peer: IpAddr, headers: &axum::http::HeaderMap) -> IpAddr {
        tollgate::client_ip(peer, headers, &self.trusted_proxies)
    }
}

/// One ticket's place in a client's count, taken before the `enter` that
/// may queue it; given back when dropped unless [`Reservation::keep`]
/// turns it into the ticket.
#[derive(Debug)]
pub(crate) struct Reservation {
    caps: Arc<TicketCaps>,
    client: Arc<str>,
    kept: bool,
}

impl Reservation {
    /// The `enter` queued ticket `id` at `gate`: count it until it is seen
    /// granted or gone, or its heartbeat lapses.
    pub(crate) fn keep(mut self, gate: &str, id: &str, heartbeat: Duration) {
        self.kept = true;
        let mut c = self.caps.lock();
        c.reserved -= 1;
        let key: Arc<str> = key(gate, id).into();
        let deadline = Instant::now() + heartbeat + SLACK;
        if let Some((client, old)) = c.tickets.insert(key.clone(), (self.client.clone(), deadline)) {
            // The same ticket twice (ids are random: not expected).
            c.by_deadline.remove(&(old, key.clone()));
            release(&mut c.clients, &client);
        }
        c.by_deadline.insert((deadline, key));
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.kept {
            let mut c = self.caps.lock();
            c.reserved -= 1;
            release(&mut c.clients, &self.client);
        }
    }
}

fn key(gate: &str, id: &str) -> String {
    format!("{gate} {id}")
}

fn release(clients: &mut HashMap<Arc<str>, usize>, client: &Arc<str>) {
    if let Some(n) = clients.get_mut(client) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            clients.remove(client);
        }
    }
}

impl TicketCaps {
    pub(crate) fn new(per_client: usize, trusted_proxies: Vec<IpNet>) -> TicketCaps {
        TicketCaps {
            per_client,
            trusted_proxies,
            counts: Mutex::default(),
            max_counted: MAX_COUNTED,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for one more waiting ticket of `client`; `Ok(None)` when
    /// nothing is capped.
    pub(crate) fn reserve(self: &Arc<Self>, client: &Client) -> Result<Option<Reservation>, Refused> {
        if self.per_client == 0 {
            return Ok(None);
        }
        let mut c = self.lock();
        forget_lapsed(&mut c, Instant::now());
        if c.tickets.len() + c.reserved >= self.max_counted {
            // Full: stop counting the tickets that lapse soonest rather
            // than refuse everyone (a few clients with many addresses
            // could otherwise shut queueing off for all).
            forget_soonest(&mut c, (self.max_counted / 100).clamp(1, FORGET_STEP));
            if c.tickets.len() + c.reserved >= self.max_counted {
                return Err(Refused::Server);
            }
        }
        let held = c.clients.get(&client.0).copied().unwrap_or(0);
        if held >= self.per_client {
            return Err(Refused::Client(held));
        }
        c.clients.insert(client.0.clone(), held + 1);
        c.reserved += 1;
        Ok(Some(Reservation {
            caps: self.clone(),
            client: client.0.clone(),
            kept: false,
        }))
    }

    /// Ticket `id` at `gate` is still waiting (its heartbeat, seen here).
    pub(crate) fn waiting(&self, gate: &str, id: &str, heartbeat: Duration) {
        if self.per_client == 0 {
            return;
        }
        let mut c = self.lock();
        let deadline = Instant::now() + heartbeat + SLACK;
        let Some((key, entry)) = c.tickets.get_key_value(key(gate, id).as_str()) else {
            return;
        };
        let (key, old) = (key.clone(), entry.1);
        if let Some(entry) = c.tickets.get_mut(&key) {
            entry.1 = deadline;
        }
        c.by_deadline.remove(&(old, key.clone()));
        c.by_deadline.insert((deadline, key));
    }

    /// Ticket `id` at `gate` no longer waits: granted, gone or cancelled.
    pub(crate) fn done(&self, gate: &str, id: &str) {
        if self.per_client == 0 {
            return;
        }
        let mut c = self.lock();
        if let Some((key, (client, deadline))) = c.tickets.remove_entry(key(gate, id).as_str()) {
            c.by_deadline.remove(&(deadline, key));
            release(&mut c.clients, &client);
        }
    }

    /// Tickets counted now (for tests and the gauge).
    #[cfg(test)]
    fn counted(&self) -> usize {
        self.lock().tickets.len()
    }
}

/// Tickets forgotten per call at most, so no request holds the count's
/// lock for long however many lapse at once.
const FORGET_STEP: usize = 1_000;

/// Forgets the tickets whose heartbeat lapsed unseen (the store has
/// dropped them from the line, or their pending grant, by now), a bounded
/// number per call: the rest go on the next calls.
fn forget_lapsed(c: &mut Counts, now: Instant) {
    for _ in 0..FORGET_STEP {
        match c.by_deadline.first() {
            Some((deadline, _)) if *deadline <= now => forget_soonest(c, 1),
            _ => break,
        }
    }
}

/// Stops counting the `n` tickets that lapse soonest.
fn forget_soonest(c: &mut Counts, n: usize) {
    for _ in 0..n {
        let Some((_, key)) = c.by_deadline.pop_first() else {
            break;
        };
        if let Some((client, _)) = c.tickets.remove(&key) {
            release(&mut c.clients, &client);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(name: &str) -> Client {
        Client(name.into())
    }

    #[test]
    fn a_client_is_capped_and_others_are_not() {
        let caps = Arc::new(TicketCaps::new(2, Vec::new()));
        let (a, b) = (client("ip:1.1.1.1"), client("ip:2.2.2.2"));
        let hb = Duration::from_secs(10);
        caps.reserve(&a).expect("1").expect("capped").keep("g", "t1", hb);
        caps.reserve(&a).expect("2").expect("capped").keep("g", "t2", hb);
        assert!(matches!(caps.reserve(&a), Err(Refused::Client(2))));
        caps.reserve(&b).expect("b").expect("capped").keep("g", "t3", hb);
        // A reservation that queued nothing is given back.
        drop(caps.reserve(&b).expect("b again"));
        caps.done("g", "t1");
        caps.reserve(&a)
            .expect("after a grant")
            .expect("capped")
            .keep("g", "t4", hb);
        assert_eq!(caps.counted(), 3);
    }

    #[test]
    fn lapsed_tickets_are_forgotten() {
        let caps = Arc::new(TicketCaps::new(1, Vec::new()));
        let a = client("token:0");
        caps.reserve(&a)
            .expect("1")
            .expect("capped")
            .keep("g", "t1", Duration::ZERO);
        let mut c = caps.lock();
        forget_lapsed(&mut c, Instant::now() + SLACK + Duration::from_millis(1));
        assert!(c.tickets.is_empty() && c.clients.is_empty() && c.by_deadline.is_empty());
    }

    #[test]
    fn a_full_count_forgets_the_soonest_rather_than_refuse_everyone() {
        let caps = Arc::new(TicketCaps {
            max_counted: 4,
            ..TicketCaps::new(10, Vec::new())
        });
        let flood = client("ip:6.6.6.6");
        for i in 0..4 {
            let hb = Duration::from_secs(100 + i);
            caps.reserve(&flood)
                .expect("room")
                .expect("capped")
                .keep("g", &format!("f{i}"), hb);
        }
        // Someone else still queues; the flood's soonest ticket stops
        // counting to make room.
        caps.reserve(&client("ip:1.1.1.1"))
            .expect("not refused")
            .expect("capped")
            .keep("g", "mine", Duration::from_secs(10));
        assert_eq!(caps.counted(), 4);
        assert!(!caps.lock().tickets.contains_key("g f0"));
    }

    #[test]
    fn lapsed_tickets_are_forgotten_a_bounded_number_at_a_time() {
        let caps = Arc::new(TicketCaps::new(5_000, Vec::new()));
        let a = client("token:0");
        for i in 0..2_500 {
            caps.reserve(&a)
                .expect("room")
                .expect("capped")
                .keep("g", &format!("t{i}"), Duration::ZERO);
        }
        let later = Instant::now() + SLACK + Duration::from_millis(1);
        let mut c = caps.lock();
        forget_lapsed(&mut c, later);
        assert_eq!(c.tickets.len(), 2_500 - FORGET_STEP);
        forget_lapsed(&mut c, later);
        forget_lapsed(&mut c, later);
        assert!(c.tickets.is_empty() && c.clients.is_empty());
    }

    #[test]
    fn no_cap_counts_nothing() {
        let caps = Arc::new(TicketCaps::new(0, Vec::new()));
        assert!(caps.reserve(&client("ip:1.1.1.1")).expect("ok").is_none());
        assert_eq!(caps.counted(), 0);
    }
}
