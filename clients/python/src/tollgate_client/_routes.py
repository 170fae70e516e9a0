"""Every route the client calls, with the body fields and query parameters
it may send. The client builds each request from this table (and refuses a
field that is not listed), and a test checks the table against the server's
/openapi.json, so the two cannot drift apart unnoticed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Mapping, Tuple
from urllib.parse import quote


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    body: FrozenSet[str] = field(default_factory=frozenset)
    query: FrozenSet[str] = field(default_factory=frozenset)

    def url(self, params: Mapping[str, str]) -> str:
        # Names may hold "/", which must not split the path.
        return self.path.format(**{k: quote(v, safe="") for k, v in params.items()})


def _r(method: str, path: str, body: Tuple[str, ...] = (), query: Tuple[str, ...] = ()) -> Route:
    return Route(method, path, frozenset(body), frozenset(query))


_G = "/v1/gates/{name}"
_Q = "/v1/queues/{queue}"
_R = "/v1/rooms/{room}"
_S = "/v1/schedules/{name}"
_PUSH = ("payload", "payload_base64", "id", "delay_ms", "at_ms", "priority",
         "max_attempts", "backoff", "on_duplicate", "group")
_LIST = ("prefix", "cursor", "limit")

ROUTES: Dict[str, Route] = {
    "healthz": _r("GET", "/healthz"),
    "readyz": _r("GET", "/readyz"),
    # Gates
    "gate_enter": _r("POST", _G + "/enter",
                     ("capacity", "permits", "mode", "ttl_ms", "heartbeat_ms", "queue", "label")),
    "ticket_status": _r("GET", _G + "/tickets/{ticket}", query=("wait_ms",)),
    "ticket_cancel": _r("DELETE", _G + "/tickets/{ticket}"),
    "ticket_events": _r("GET", _G + "/tickets/{ticket}/events"),
    "lease_renew": _r("POST", _G + "/leases/{token}/renew", ("ttl_ms",)),
    "lease_release": _r("DELETE", _G + "/leases/{token}"),
    "gate_stats": _r("GET", _G),
    "gate_holders": _r("GET", _G + "/holders", query=("limit",)),
    "gate_revoke": _r("DELETE", _G + "/holders/{handle}"),
    "gate_line": _r("GET", _G + "/line", query=("limit",)),
    "gate_line_remove": _r("DELETE", _G + "/line/{number}"),
    "gate_capacity": _r("PUT", _G + "/capacity", ("capacity",)),
    # Elections (candidates campaign through the gates routes)
    "election": _r("GET", "/v1/elections/{name}"),
    "election_events": _r("GET", "/v1/elections/{name}/events"),
    # Job queues
    "queue_push": _r("POST", _Q + "/jobs", _PUSH),
    "queue_batch": _r("POST", _Q + "/batch", ("jobs",)),
    "queue_claim": _r("POST", _Q + "/claim", query=("wait_ms", "lease_ms", "max")),
    "job_ack": _r("POST", _Q + "/jobs/{id}/ack", ("fence", "keep")),
    "job_nack": _r("POST", _Q + "/jobs/{id}/nack", ("fence", "delay_ms", "error")),
    "job_extend": _r("POST", _Q + "/jobs/{id}/extend", ("fence", "lease_ms")),
    "job_get": _r("GET", _Q + "/jobs/{id}"),
    "job_cancel": _r("DELETE", _Q + "/jobs/{id}"),
    "job_reschedule": _r("POST", _Q + "/jobs/{id}/reschedule", ("delay_ms",)),
    "queue_stats": _r("GET", _Q),
    "queue_jobs": _r("GET", _Q + "/jobs", query=("state", "cursor", "limit")),
    "queue_dead": _r("GET", _Q + "/dead", query=("limit",)),
    "queue_replay": _r("POST", _Q + "/dead/replay", ("id",)),
    "queue_purge": _r("POST", _Q + "/dead/purge", ("id",)),
    "queue_pause": _r("POST", _Q + "/pause"),
    "queue_resume": _r("POST", _Q + "/resume"),
    "queue_settings": _r("GET", _Q + "/settings"),
    "queue_set_settings": _r("PUT", _Q + "/settings",
                             ("concurrency", "rate", "group_concurrency", "group_rate")),
    "queue_groups": _r("GET", _Q + "/groups", query=("limit", "after")),
    "group_limits": _r("GET", _Q + "/groups/{group}/limits"),
    "group_set_limits": _r("PUT", _Q + "/groups/{group}/limits", ("concurrency", "rate")),
    "group_drop_limits": _r("DELETE", _Q + "/groups/{group}/limits"),
    # Rate limits
    "limit_check": _r("POST", "/v1/limits/{name}/check",
                      ("key", "cost", "rate", "burst", "algorithm")),
    "limit_get": _r("GET", "/v1/limits/{name}"),
    # Waiting rooms (admin)
    "room_stats": _r("GET", _R),
    "room_capacity": _r("PUT", _R + "/capacity", ("capacity",)),
    "room_admission_rate": _r("PUT", _R + "/admission_rate", ("per_minute",)),
    "room_pause": _r("POST", _R + "/pause"),
    "room_resume": _r("POST", _R + "/resume"),
    "room_reset": _r("POST", _R + "/reset"),
    "room_state": _r("PUT", _R + "/state", ("state",)),
    "room_schedule": _r("PUT", _R + "/schedule", ("opens_at", "closes_at", "prequeue")),
    "room_end_session": _r("DELETE", _R + "/sessions/{session}"),
    "room_line": _r("GET", _R + "/line", query=("limit",)),
    "room_line_remove": _r("DELETE", _R + "/line/{number}"),
    # Schedules
    "schedule_put": _r("PUT", _S, ("when", "zone", "queue", "payload", "payload_base64",
                                   "priority", "max_attempts", "backoff", "group", "misfire",
                                   "max_catch_up", "start_ms", "end_ms", "jitter_ms",
                                   "paused")),
    "schedule_get": _r("GET", _S),
    "schedule_delete": _r("DELETE", _S),
    "schedule_pause": _r("POST", _S + "/pause"),
    "schedule_resume": _r("POST", _S + "/resume"),
    "schedule_trigger": _r("POST", _S + "/trigger"),
    "schedule_next": _r("GET", _S + "/next", query=("count",)),
    # Listings
    "list_gates": _r("GET", "/v1/gates", query=_LIST),
    "list_queues": _r("GET", "/v1/queues", query=_LIST),
    "list_rooms": _r("GET", "/v1/rooms", query=_LIST),
    "list_limits": _r("GET", "/v1/limits", query=_LIST),
    "list_schedules": _r("GET", "/v1/schedules", query=_LIST),
}
