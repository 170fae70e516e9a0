"""Request building and answer decoding, shared by ``Client`` and
``AsyncClient``: each function returns a ``Call`` that either client runs
with its own transport, so the two cannot disagree on the protocol."""

from __future__ import annotations

import base64
import json
import math
import time
from dataclasses import dataclass, field
from typing import (Any, Callable, Dict, FrozenSet, Generic, Iterable, List, Mapping, Optional, Tuple, TypeVar,
                    Union)

import httpx

from ._errors import TollgateError
from ._models import JSON, Busy, Decision, DeliveryInfo, LeaseInfo, NewJob, Pushed, TicketInfo
from ._routes import ROUTES

T = TypeVar("T")
Obj = Dict[str, Any]

# The server answers a long-poll after at most this long.
MAX_WAIT_MS = 60_000


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    query: Dict[str, str]
    body: Optional[Obj]
    parse: Callable[[Any], T]
    wait_ms: int = 0  # how long the server may hold the answer back
    # Statuses whose body is an outcome rather than an error (a limit's 429).
    data_statuses: FrozenSet[int] = field(default_factory=frozenset)

    def decode(self, status: int, headers: httpx.Headers, content: bytes) -> T:
        data: Any = None
        if content:
            try:
                data = json.loads(content)
            except ValueError:
                data = None
        if status < 400 or (status in self.data_statuses and isinstance(data, dict) and "error" not in data):
            return self.parse(data)
        raise error_from_answer(status, headers, data, content)


def error_from_answer(status: int, headers: httpx.Headers, data: Any, content: bytes) -> TollgateError:
    retry_after_ms: Optional[int] = None
    retry_after = headers.get("retry-after")
    if retry_after is not None:
        try:
            retry_after_ms = int(math.ceil(float(retry_after) * 1000))
        except ValueError:
            pass
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        err = data["error"]
        return TollgateError(str(err.get("code")), str(err.get("message")), status, retry_after_ms)
    # Not tollgate's error shape: a proxy in front, or a bug.
    text = content[:200].decode("utf-8", "replace")
    return TollgateError(f"http_{status}", text or httpx.codes.get_reason_phrase(status), status, retry_after_ms)


def error_from_exception(exc: Exception) -> TollgateError:
    if isinstance(exc, httpx.InvalidURL):
        return TollgateError("bad_request", f"invalid URL: {exc}")
    return TollgateError("unavailable", f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)


# httpx's exceptions that a call may raise; all become a TollgateError.
HTTPX_ERRORS = (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError)


def build(
    route: str,
    parse: Callable[[Any], T],
    path: Optional[Mapping[str, str]] = None,
    body: Optional[Obj] = None,
    query: Optional[Mapping[str, Optional[Union[int, str]]]] = None,
    wait_ms: int = 0,
    data_statuses: FrozenSet[int] = frozenset(),
    keep_null: FrozenSet[str] = frozenset(),
) -> Call[T]:
    """The call of ``route``. Fields of ``body`` that are None are left out,
    but for those in ``keep_null``, sent as JSON null (where null means
    something: an admission rate of null stops pacing)."""
    r = ROUTES[route]
    if body is not None:
        body = {k: v for k, v in body.items() if v is not None or k in keep_null}
        unknown = set(body) - r.body
        if unknown:
            raise ValueError(f"{route}: fields not in the route table: {sorted(unknown)}")
    q = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in (query or {}).items() if v is not None}
    if set(q) - r.query:
        raise ValueError(f"{route}: query parameters not in the route table: {sorted(set(q) - r.query)}")
    return Call(r.method, r.url(path or {}), q, body, parse, wait_ms, data_statuses)


def _obj(data: Any) -> Obj:
    return data if isinstance(data, dict) else {}


def _lease(gate: str, d: Obj) -> LeaseInfo:
    return LeaseInfo(gate, d["token"], d["fence"], d["ttl_ms"])


def _ticket(gate: str, ticket: str, d: Obj) -> TicketInfo:
    return TicketInfo(gate, ticket, d["position"], d["waiting"], d.get("eta_ms"))


# Gates

Entered = Union[LeaseInfo, TicketInfo, Busy]


def enter(gate: str, body: Obj) -> Call[Entered]:
    def parse(d: Any) -> Entered:
        d = _obj(d)
        if d.get("status") == "granted":
            return _lease(gate, d)
        if d.get("status") == "queued":
            return _ticket(gate, d["ticket"], d)
        return Busy(d["used"], d["capacity"], d["waiting"])

    return build("gate_enter", parse, {"name": gate}, body)


Polled = Union[LeaseInfo, TicketInfo]


def ticket_status(gate: str, ticket: str, wait_ms: int) -> Call[Polled]:
    def parse(d: Any) -> Polled:
        d = _obj(d)
        if d.get("status") == "granted":
            return _lease(gate, d)
        return _ticket(gate, ticket, d)

    wait_ms = max(0, min(wait_ms, MAX_WAIT_MS))
    return build("ticket_status", parse, {"name": gate, "ticket": ticket}, query={"wait_ms": wait_ms}, wait_ms=wait_ms)


# The longest event the ticket's stream may send (the server's are tiny).
MAX_EVENT_BYTES = 64 * 1024
# The server sends a keep-alive comment every 15 s: a stream silent for
# longer is broken.
EVENTS_READ_TIMEOUT = 30.0


def ticket_events_path(gate: str, ticket: str) -> str:
    return ROUTES["ticket_events"].url({"name": gate, "ticket": ticket})


def events_refused(status: int, headers: httpx.Headers, content: bytes) -> TollgateError:
    """The error of an event stream the server would not open (404: the
    ticket is gone)."""
    try:
        data: Any = json.loads(content) if content else None
    except ValueError:
        data = None
    return error_from_answer(status, headers, data, content)


class SseLines:
    """Server-Sent Events read a line at a time: ``line`` answers
    ``(event, data)`` when an event ends, None otherwise (comments, the
    keep-alives, are skipped). ``what`` names the stream in errors."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._event = "message"
        self._data: List[str] = []
        self._size = 0

    def line(self, line: str) -> Optional[Tuple[str, str]]:
        if line == "":
            event, data = self._event, "\n".join(self._data)
            self._event, self._data, self._size = "message", [], 0
            return (event, data) if data else None
        if line.startswith(":"):  # a comment: the keep-alive
            return None
        self._size += len(line)
        if self._size > MAX_EVENT_BYTES:
            raise TollgateError("bad_answer", f"an event of over 64 KiB on {self.what}")
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None


class TicketEvents:
    """Reads a ticket's event stream (Server-Sent Events), a line at a time:
    ``feed`` answers the LeaseInfo of a ``granted`` event, the TicketInfo of
    a ``position`` event, and None for anything else; ``gone`` and
    ``error`` raise TollgateError."""

    def __init__(self, gate: str, ticket: str) -> None:
        self.gate, self.ticket = gate, ticket
        self._lines = SseLines("the ticket's stream")

    def feed(self, line: str) -> Optional[Polled]:
        done = self._lines.line(line)
        return self._outcome(*done) if done else None

    def _outcome(self, event: str, data: str) -> Optional[Polled]:
        try:
            d = _obj(json.loads(data))
        except ValueError:
            raise TollgateError("bad_answer", f"a {event} event that is not JSON") from None
        if event == "position":
            return _ticket(self.gate, self.ticket, d)
        if event == "granted":
            try:
                return _lease(self.gate, d)
            except KeyError:
                raise TollgateError("bad_answer", "a granted event without its token, fence and ttl_ms") from None
        if event == "gone":
            raise TollgateError("ticket_not_found", "the ticket left the line (cancelled, or its heartbeat lapsed)", 404)
        if event == "error":
            code = str(d.get("code", "unavailable"))
            if code == "ticket_removed":
                raise TollgateError(code, "an admin removed the ticket from the line", 410)
            raise TollgateError(code, f"the server could not look at the ticket ({code})")
        return None


# Elections

def election_leader(name: str) -> Call[Optional[Obj]]:
    def parse(d: Any) -> Optional[Obj]:
        leader = _obj(d).get("leader")
        return _obj(leader) if leader is not None else None

    return build("election", parse, {"name": name})


def election_events_path(name: str) -> str:
    return ROUTES["election_events"].url({"name": name})


class LeaderEvents:
    """Reads an election's event stream a line at a time: ``feed`` answers
    ``(leader,)`` (a dict, or None for nobody) when a ``hello`` or
    ``leader`` event ends, and None otherwise."""

    def __init__(self) -> None:
        self._lines = SseLines("the election's stream")

    def feed(self, line: str) -> Optional[Tuple[Optional[Obj]]]:
        done = self._lines.line(line)
        if done is None or done[0] not in ("hello", "leader"):
            return None
        event, data = done
        try:
            leader = _obj(json.loads(data)).get("leader")
        except ValueError:
            raise TollgateError("bad_answer", f"a {event} event that is not JSON") from None
        return (_obj(leader) if leader is not None else None,)


def max_hold_cap(ttl_ms: int, hold_until: Optional[float]) -> Optional[int]:
    """The TTL to renew with under a max_hold ending at ``hold_until``
    (time.monotonic()), or None once less than 10 ms of it is left."""
    if hold_until is None:
        return ttl_ms
    left = int((hold_until - time.monotonic()) * 1000)
    return min(ttl_ms, left) if left >= 10 else None


def ticket_cancel(gate: str, ticket: str) -> Call[Obj]:
    return build("ticket_cancel", _obj, {"name": gate, "ticket": ticket})


def lease_renew(gate: str, token: str, ttl_ms: Optional[int]) -> Call[int]:
    return build("lease_renew", lambda d: int(_obj(d)["ttl_ms"]), {"name": gate, "token": token}, {"ttl_ms": ttl_ms})


def lease_release(gate: str, token: str) -> Call[Obj]:
    return build("lease_release", _obj, {"name": gate, "token": token})


def simple(route: str, path: Optional[Mapping[str, str]] = None, body: Optional[Obj] = None,
           query: Optional[Mapping[str, Optional[Union[int, str]]]] = None) -> Call[Obj]:
    """A route whose answer is handed back as the decoded JSON object."""
    return build(route, _obj, path, body, query)


def room_admission_rate(room: str, per_minute: Optional[int]) -> Call[Obj]:
    """Pace a room's admissions (a minute), or stop pacing with None."""
    return build("room_admission_rate", _obj, {"room": room}, {"per_minute": per_minute},
                 keep_null=frozenset({"per_minute"}))


def room_schedule(room: str, opens_at: Optional[str], closes_at: Optional[str] = None,
                  prequeue: Optional[str] = None) -> Call[Obj]:
    """When a room opens (RFC 3339; None: no opening), with its pre-queue
    (a duration, e.g. "30m") and when it closes (None: never)."""
    body = {"opens_at": opens_at, "closes_at": closes_at, "prequeue": prequeue}
    return build("room_schedule", _obj, {"room": room}, body, keep_null=frozenset({"opens_at"}))


# Job queues


def push(queue: str, job: NewJob) -> Call[Pushed]:
    def parse(d: Any) -> Pushed:
        d = _obj(d)
        return Pushed(d["id"], d["result"], d.get("due_ms"))

    return build("queue_push", parse, {"queue": queue}, job.to_json())


def push_many(queue: str, jobs: Iterable[Union[NewJob, JSON]]) -> Call[List[Pushed]]:
    bodies = [(j if isinstance(j, NewJob) else NewJob(j)).to_json() for j in jobs]

    def parse(d: Any) -> List[Pushed]:
        out = []
        for item in _obj(d).get("jobs", []):
            if "error" in item:
                e = item["error"]
                raise TollgateError(e.get("code", "unknown"), f"job {item.get('id')}: {e.get('message')}")
            out.append(Pushed(item["id"], item["result"], item.get("due_ms")))
        return out

    return build("queue_batch", parse, {"queue": queue}, {"jobs": bodies})


def _delivery(queue: str, j: Obj) -> DeliveryInfo:
    raw = base64.b64decode(j.get("payload_base64") or "")
    return DeliveryInfo(queue, j["id"], j.get("payload"), raw, j["attempt"], j["fence"], j["lease_until_ms"],
                        j.get("group"))


def claim(queue: str, wait_ms: int, lease_ms: Optional[int], max_jobs: Optional[int]) -> Call[List[DeliveryInfo]]:
    def parse(d: Any) -> List[DeliveryInfo]:
        return [_delivery(queue, j) for j in _obj(d).get("jobs") or []]

    wait_ms = max(0, min(wait_ms, MAX_WAIT_MS))
    query: Dict[str, Optional[Union[int, str]]] = {"wait_ms": wait_ms, "lease_ms": lease_ms, "max": max_jobs}
    return build("queue_claim", parse, {"queue": queue}, query=query, wait_ms=wait_ms)


_LIMITS = frozenset({"concurrency", "rate", "group_concurrency", "group_rate"})


def set_limits(queue: str, limits: Obj) -> Call[Obj]:
    """Replace the queue's limits (those left out or None: none)."""
    return build("queue_set_settings", _obj, {"queue": queue}, dict(limits), keep_null=_LIMITS)


def group_limits(queue: str, group: str) -> Call[Obj]:
    """A group's own limits (404 ``limits_not_found`` if it has none)."""
    return build("group_limits", _obj, {"queue": queue, "group": group})


def set_group_limits(queue: str, group: str, limits: Optional[Obj]) -> Call[Obj]:
    """Set a group's own limits; None drops them."""
    if limits is None:
        return build("group_drop_limits", _obj, {"queue": queue, "group": group})
    return build("group_set_limits", _obj, {"queue": queue, "group": group}, dict(limits))


def job_call(route: str, d: DeliveryInfo, body: Obj) -> Call[Obj]:
    """ack, nack or extend: the delivery's fence proves it is still ours."""
    return build(route, _obj, {"queue": d.queue, "id": d.id}, {"fence": d.fence, **body})


# Rate limits


def check(name: str, body: Obj) -> Call[Decision]:
    def parse(d: Any) -> Decision:
        d = _obj(d)
        return Decision(d["allowed"], d["limit"], d["remaining"], d["retry_after_ms"],
                        d["reset_after_ms"], d.get("degraded", False))

    # A refusal answers 429 with the decision; [protect]'s 429 carries an error body.
    return build("limit_check", parse, {"name": name}, body, data_statuses=frozenset({429}))
