from __future__ import annotations

from typing import Optional

_UNAVAILABLE = frozenset({"store_unavailable", "not_replicated", "unavailable"})


class TollgateError(Exception):
    """Every failure the client reports: an error answer from the server, or
    no answer at all (code ``unavailable``, status None).

    A refusal that is an ordinary outcome (a queued ticket, a busy gate, a
    rate-limit check that says no) is data, not this error.
    """

    def __init__(
        self,
        code: str,
        message: str,
        status: Optional[int] = None,
        retry_after_ms: Optional[int] = None,
    ) -> None:
        super().__init__(f"{code}: {message}" if status is None else f"{status} {code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.retry_after_ms = retry_after_ms

    def is_unavailable(self) -> bool:
        """The store or the server could not be reached; trying again later may work."""
        return self.code in _UNAVAILABLE and self.status in (None, 503)

    def is_not_found(self) -> bool:
        return self.status == 404

    def is_removed(self) -> bool:
        """An admin took the ticket out of the line (410 ``ticket_removed``):
        stop waiting rather than queue again."""
        return self.code == "ticket_removed"

    def is_conflict(self) -> bool:
        return self.status == 409

    def is_invalid(self) -> bool:
        return self.status in (400, 413, 415) or (self.status is None and self.code == "bad_request")

    def is_unauthorized(self) -> bool:
        return self.status in (401, 403)

    def is_rate_limited(self) -> bool:
        return self.status == 429
