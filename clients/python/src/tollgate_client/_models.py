"""Plain data the server answers, shared by the sync and async clients."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Dict, Optional

JSON = Any


@dataclass
class LeaseInfo:
    """A grant: hold ``token`` for ``ttl_ms``; pass ``fence`` to what you protect."""

    gate: str
    token: str
    fence: int
    ttl_ms: int


@dataclass
class TicketInfo:
    """A place in a gate's line."""

    gate: str
    ticket: str
    position: int
    waiting: int
    eta_ms: Optional[int]

    def _take(self, place: TicketInfo) -> bool:
        """Takes ``place``'s position, line length and estimate; whether the
        position or the line length changed."""
        moved = (place.position, place.waiting) != (self.position, self.waiting)
        self.position, self.waiting, self.eta_ms = place.position, place.waiting, place.eta_ms
        return moved


@dataclass(frozen=True)
class Busy:
    """``enter`` with ``queue=False`` on a full gate."""

    used: int
    capacity: int
    waiting: int


@dataclass(frozen=True)
class Decision:
    """A rate-limit check's answer; ``allowed`` False is a refusal, not an error."""

    allowed: bool
    limit: int
    remaining: int
    retry_after_ms: int
    reset_after_ms: int
    degraded: bool


@dataclass(frozen=True)
class Pushed:
    id: str
    result: str
    due_ms: Optional[int]


@dataclass(frozen=True)
class Backoff:
    kind: str  # "fixed" or "exponential"
    base_ms: int
    max_ms: Optional[int] = None

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"kind": self.kind, "base_ms": self.base_ms}
        if self.max_ms is not None:
            out["max_ms"] = self.max_ms
        return out


@dataclass(frozen=True)
class NewJob:
    """One job for ``push_many``. A ``bytes`` payload is sent as base64."""

    payload: JSON
    id: Optional[str] = None
    delay_ms: Optional[int] = None
    at_ms: Optional[int] = None
    priority: Optional[int] = None
    max_attempts: Optional[int] = None
    backoff: Optional[Backoff] = None
    on_duplicate: Optional[str] = None
    #: The job's group (a tenant, a customer): groups take turns at claim
    #: and may have limits of their own (``set_limits``).
    group: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        body: Dict[str, Any] = {}
        if isinstance(self.payload, (bytes, bytearray)):
            body["payload_base64"] = base64.b64encode(bytes(self.payload)).decode("ascii")
        else:
            body["payload"] = self.payload
        for key in ("id", "delay_ms", "at_ms", "priority", "max_attempts", "on_duplicate", "group"):
            value = getattr(self, key)
            if value is not None:
                body[key] = value
        if self.backoff is not None:
            body["backoff"] = self.backoff.to_json()
        return body


@dataclass
class DeliveryInfo:
    """A claimed job. ``payload`` is the JSON value (None if the payload is not
    JSON); ``payload_bytes`` is always the raw payload."""

    queue: str
    id: str
    payload: JSON
    payload_bytes: bytes
    attempt: int
    fence: int
    lease_until_ms: int
    #: Its group; None for the default group.
    group: Optional[str]
