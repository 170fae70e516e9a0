"""``granted(on_position=...)``: the ticket's event stream tells each move
within about a second, the grant arrives on it, a timeout leaves the
ticket in line, and a ticket already gone is a typed error; sync and
asyncio, on both stores."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import List, Tuple

import pytest
from conftest import Server

from tollgate_client import AsyncClient, AsyncLease, AsyncTicket, Client, Lease, Ticket, TollgateError


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_on_position_hears_each_move_over_the_event_stream(server: Server) -> None:
    with Client(server.url) as c:
        gate = c.gate(unique("line"))
        holder = gate.enter(capacity=1)
        first = gate.enter(capacity=1)
        mine = gate.enter(capacity=1)
        assert isinstance(holder, Lease) and isinstance(first, Ticket) and isinstance(mine, Ticket)
        assert mine.position == 2
        heard: List[Tuple[int, float]] = []
        got: List[Lease] = []
        started = time.monotonic()

        def wait() -> None:
            got.append(mine.granted(timeout=20, on_position=lambda t: heard.append((t.position, time.monotonic()))))

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(1.5)  # nobody moves for a while first
        moved_at = time.monotonic()
        holder.release()
        first_lease = first.granted(timeout=5)
        for _ in range(50):
            if heard:
                break
            time.sleep(0.1)
        assert [p for p, _ in heard] == [1]
        assert heard[0][1] - moved_at < 2.5, f"heard {heard[0][1] - moved_at:.1f} s after the move"
        assert heard[0][1] > started
        first_lease.release()
        waiter.join(10)
        [lease] = got
        assert lease.fence > first_lease.fence
        lease.release()

        # Past the timeout: TimeoutError, the ticket still in line.
        held = gate.enter(capacity=1)
        late = gate.enter(capacity=1)
        assert isinstance(late, Ticket)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            late.granted(timeout=0.4, on_position=lambda t: None)
        assert time.monotonic() - started < 2.0
        assert late.poll() is None and late.position == 1
        late.cancel()
        with pytest.raises(TollgateError) as gone:
            late.granted(on_position=lambda t: None)
        assert gone.value.is_not_found()
        assert isinstance(held, Lease)
        held.release()


def test_async_on_position(server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(server.url) as c:
            gate = c.gate(unique("aline"))
            holder = await gate.enter(capacity=1)
            assert isinstance(holder, AsyncLease)
            mine = await gate.enter(capacity=1)
            other = await gate.enter(capacity=1)
            assert isinstance(mine, AsyncTicket) and isinstance(other, AsyncTicket)
            heard: List[int] = []
            waiting = asyncio.ensure_future(other.granted(timeout=20, on_position=lambda t: heard.append(t.position)))
            await asyncio.sleep(0.5)
            await mine.cancel()  # the one ahead leaves: other moves up
            for _ in range(50):
                if heard:
                    break
                await asyncio.sleep(0.1)
            assert heard == [1]
            await holder.release()
            lease = await waiting
            await lease.release()
            # A timeout leaves it in line.
            held = await gate.enter(capacity=1)
            late = await gate.enter(capacity=1)
            assert isinstance(held, AsyncLease) and isinstance(late, AsyncTicket)
            with pytest.raises(TimeoutError):
                await late.granted(timeout=0.4, on_position=lambda t: None)
            assert await late.poll() is None and late.position == 1
            await late.cancel()
            await held.release()

    asyncio.run(main())


def test_timed_out_waits_leave_no_thread_or_connection(server: Server) -> None:
    with Client(server.url) as c:
        gate = c.gate(unique("leak"))
        held = gate.enter(capacity=1)
        late = gate.enter(capacity=1)
        assert isinstance(held, Lease) and isinstance(late, Ticket)
        threads = threading.active_count()
        # More waits than httpx's pool has connections (100): each one's
        # stream must be shut and its reader joined when it times out.
        for _ in range(110):
            with pytest.raises(TimeoutError):
                late.granted(timeout=0.01, on_position=lambda t: None)
        assert threading.active_count() == threads
        assert gate.stats()["waiting"] == 1
        late.cancel()
        held.release()


def test_a_malformed_event_is_a_typed_error() -> None:
    from tollgate_client._ops import TicketEvents

    events = TicketEvents("g", "t")
    assert events.feed(": keep-alive") is None
    assert events.feed("event: granted") is None
    assert events.feed("data: {}") is None
    with pytest.raises(TollgateError) as bad:
        events.feed("")
    assert bad.value.code == "bad_answer"
    events = TicketEvents("g", "t")
    for line in ["event: position", 'data: {"position": 3,', 'data:  "waiting": 5, "eta_ms": null}']:
        assert events.feed(line) is None
    place = events.feed("")
    assert place is not None and (place.position, place.waiting) == (3, 5)


def test_a_server_that_never_answers_the_stream_does_not_hold_the_wait() -> None:
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts (the kernel does), never answers
    try:
        with Client(f"http://127.0.0.1:{silent.getsockname()[1]}") as c:
            ticket = Ticket("g", "t.30000.10000", 1, 1, None, c)
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                ticket.granted(timeout=0.5, on_position=lambda t: None)
            assert time.monotonic() - started < 1.5
            assert not [t for t in threading.enumerate() if t.name.startswith("tollgate-ticket")]
    finally:
        silent.close()
