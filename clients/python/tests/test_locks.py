from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, List, Tuple

import httpx

from conftest import Server

from tollgate_client import AsyncClient, Client, Lease, Ticket, TollgateError


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(cond: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_two_clients_fifo_and_fences(server: Server) -> None:
    name = unique("lock")
    a, b = Client(server.url), Client(server.url)
    grants: List[Tuple[str, int]] = []

    def contend(who: str, client: Client) -> None:
        with client.lock(name, ttl_ms=5_000) as lease:
            grants.append((who, lease.fence))
            time.sleep(0.05)

    with a.lock(name, ttl_ms=5_000) as first:
        grants.append(("a0", first.fence))
        threads = []
        # Join the line one at a time, alternating clients, so the order is known.
        for i, (who, client) in enumerate([("b1", b), ("a2", a), ("b3", b), ("a4", a)]):
            t = threading.Thread(target=contend, args=(who, client))
            t.start()
            threads.append(t)
            wait_until(lambda: len(a.gate(name).line()) == i + 1)
    for t in threads:
        t.join(20)
    assert [w for w, _ in grants] == ["a0", "b1", "a2", "b3", "a4"]
    fences = [f for _, f in grants]
    assert fences == sorted(fences) and len(set(fences)) == len(fences)
    assert a.gate(name).stats()["used"] == 0
    a.close()
    b.close()


def test_async_lock_fifo(server: Server) -> None:
    name = unique("alock")

    async def main() -> List[Tuple[str, int]]:
        grants: List[Tuple[str, int]] = []
        async with AsyncClient(server.url) as a, AsyncClient(server.url) as b:

            async def contend(who: str, client: AsyncClient) -> None:
                async with client.lock(name, ttl_ms=5_000) as lease:
                    grants.append((who, lease.fence))

            async with a.lock(name, ttl_ms=5_000) as first:
                grants.append(("a0", first.fence))
                tasks = []
                for i, (who, client) in enumerate([("b1", b), ("a2", a)]):
                    tasks.append(asyncio.ensure_future(contend(who, client)))
                    while len(await a.gate(name).line()) != i + 1:
                        await asyncio.sleep(0.02)
            await asyncio.gather(*tasks)
        return grants

    grants = asyncio.run(main())
    assert [w for w, _ in grants] == ["a0", "b1", "a2"]
    fences = [f for _, f in grants]
    assert fences == sorted(fences) and len(set(fences)) == 3


def test_wait_timeout_cancels_ticket(server: Server) -> None:
    name = unique("timeout")
    with Client(server.url) as c:
        with c.lock(name):
            try:
                with c.lock(name, wait=0.3):
                    raise AssertionError("granted while held")
            except TimeoutError:
                pass
            # The timed-out waiter left the line.
            assert c.gate(name).line() == []


def test_frozen_holder_loses_its_lease(server: Server) -> None:
    name = unique("frozen")
    holder = subprocess.Popen([sys.executable, str(Path(__file__).parent / "holder.py"), server.url, name, "600"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line.startswith("fence "), line
        first_fence = int(line.split()[1])
        os.kill(holder.pid, signal.SIGSTOP)
        time.sleep(1.5)  # well past the 600 ms TTL
        with Client(server.url) as c:
            got = c.gate(name).enter(capacity=1, ttl_ms=30_000)
            assert isinstance(got, Lease), got
            assert got.fence > first_fence
            os.kill(holder.pid, signal.SIGCONT)
            out, _ = holder.communicate(timeout=20)
            assert out.strip() == "lost"
            assert holder.returncode == 3
            got.release()
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
            holder.wait()


def test_ticket_granted_on_release(server: Server) -> None:
    name = unique("gate")
    with Client(server.url) as c:
        gate = c.gate(name)
        held = gate.enter(capacity=2, permits=2, label="first")
        waiting = gate.enter(capacity=2, label="second")
        busy = gate.enter(capacity=2, queue=False)
        assert isinstance(held, Lease) and isinstance(waiting, Ticket)
        assert not isinstance(busy, (Lease, Ticket)) and busy.capacity == 2
        assert waiting.position == 1
        assert gate.holders()[0]["label"] == "first"
        assert held.renew(10_000) == 10_000
        assert waiting.poll() is None
        gate.set_capacity(3)  # raising admits the line at once
        lease = waiting.granted(timeout=5)
        assert lease.fence > held.fence
        held.release()
        lease.release()


def test_a_removed_ticket_is_told_so(server: Server) -> None:
    name = unique("gate")
    with Client(server.url) as c:
        gate = c.gate(name)
        held = gate.enter(capacity=1)
        waiting = gate.enter(capacity=1)
        watched = gate.enter(capacity=1)
        assert isinstance(held, Lease) and isinstance(waiting, Ticket) and isinstance(watched, Ticket)
        for w in gate.line():
            gate.remove(w["number"])
        # A poll, a long-poll and the event stream: removed, not gone.
        for wait in (lambda: waiting.poll(), lambda: waiting.granted(timeout=1),
                     lambda: watched.granted(timeout=5, on_position=lambda _: None)):
            try:
                wait()
            except TollgateError as e:
                assert e.is_removed() and e.status == 410 and not e.is_not_found(), e
            else:
                raise AssertionError("a removed ticket was not told")
        held.release()


class HangingRenewals(httpx.BaseTransport):
    """The real transport, except that lease renewals never answer (a
    server that hangs on them) until the test lets them go."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.release = threading.Event()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/renew"):
            self.release.wait(10)
            raise httpx.ReadTimeout("held back by the test", request=request)
        return self.inner.handle_request(request)


def test_lost_is_set_at_the_leases_end_while_a_renewal_hangs(server: Server) -> None:
    name = unique("hung")
    transport = HangingRenewals()
    client = Client(server.url, http=httpx.Client(base_url=server.url, transport=transport))
    try:
        started = time.monotonic()
        with client.lock(name, ttl_ms=600) as lease:
            assert lease.lost.wait(3), "lost was never set"
            after = time.monotonic() - started
            transport.release.set()
        assert 0.4 <= after < 1.5, f"lost after {after:.2f} s"
    finally:
        transport.release.set()


def test_read_write_lock_readers_together_writer_waits(server: Server) -> None:
    name = unique("rw")
    c = Client(server.url)
    gate = c.gate(name)
    r1, r2 = gate.enter(mode="shared"), gate.enter(mode="shared")
    assert isinstance(r1, Lease) and isinstance(r2, Lease), "two readers at once"
    writer = gate.enter(mode="exclusive")
    assert isinstance(writer, Ticket), "the writer waits for the readers"
    late = gate.enter(mode="shared", queue=False)
    assert not isinstance(late, Lease), "a reader entered past the waiting writer"
    r1.release()
    r2.release()
    w = writer.granted(10)
    assert w.fence > r2.fence
    w.release()
    try:
        gate.enter(mode="shared", capacity=3)
        raise AssertionError("mode with capacity was accepted")
    except TollgateError as e:
        assert e.status == 400
    with c.rw_lock(name, "shared") as lease:
        assert lease.fence > w.fence

    async def run() -> None:
        async with AsyncClient(server.url) as ac:
            async with ac.rw_lock(name, "exclusive") as lease:
                assert lease.fence > w.fence

    asyncio.run(run())


def test_max_hold_lets_go_of_a_lock_whose_work_hangs(server: Server) -> None:
    name = unique("capped")
    c = Client(server.url)
    started = time.monotonic()
    with c.lock(name, ttl_ms=300, max_hold=0.9) as lease:
        assert lease.lost.wait(5), "not lost at max_hold"
    took = time.monotonic() - started
    assert 0.8 <= took < 3, took
    # lost is told when the lease ends by this process's clock, counted
    # from a renewal's sending: the store lets go up to a round trip later.
    deadline = time.monotonic() + 1
    free = c.gate(name).enter(capacity=1, queue=False)
    while not isinstance(free, Lease) and time.monotonic() < deadline:
        time.sleep(0.02)
        free = c.gate(name).enter(capacity=1, queue=False)
    assert isinstance(free, Lease), "the lock was not free after max_hold"
    free.release()


def test_election_campaign_observe_resign(server: Server) -> None:
    name = unique("vote")
    c = Client(server.url)
    election = c.election(name)
    seen: List[object] = []
    watcher = threading.Thread(
        target=lambda: seen.extend(l and l["label"] for l in election.observe(count=4)), daemon=True)
    watcher.start()
    time.sleep(0.3)
    with election.campaign("a") as a:
        leader = election.leader()
        assert leader is not None and leader["label"] == "a" and leader["fence"] == a.fence
        time.sleep(0.3)
    with election.campaign("b") as b:
        assert b.fence > a.fence
        time.sleep(0.3)
    watcher.join(10)
    assert seen == [None, "a", "b", None]
    assert election.leader() is None

    async def run() -> None:
        async with AsyncClient(server.url) as ac:
            e = ac.election(name)
            async with e.campaign("c") as lease:
                got = await e.leader()
                assert got is not None and got["fence"] == lease.fence
                first = [x async for x in e.observe(count=1)]
                assert first[0] is not None and first[0]["label"] == "c"

    asyncio.run(run())
