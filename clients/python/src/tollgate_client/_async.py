"""The asyncio client: ``_sync.py`` method for method, awaited."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Iterable, List, Optional, Type, TypeVar, Union

import httpx

from . import _ops as ops
from ._errors import TollgateError
from ._models import JSON, Backoff, Busy, Decision, DeliveryInfo, LeaseInfo, NewJob, Pushed, TicketInfo

T = TypeVar("T")
Obj = Dict[str, Any]
log = logging.getLogger("tollgate_client")


class AsyncClient:
    """An asyncio client for one tollgate server."""

    def __init__(self, base_url: str, token: Optional[str] = None, timeout: float = 10.0,
                 *, http: Optional[httpx.AsyncClient] = None) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.timeout = timeout
        self._http = http or httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _run(self, call: ops.Call[T]) -> T:
        # A long-poll may hold the answer back for wait_ms: read that much longer.
        timeout = httpx.Timeout(self.timeout, read=self.timeout + call.wait_ms / 1000)
        try:
            r = await self._http.request(call.method, call.path, params=call.query, json=call.body, timeout=timeout)
        except ops.HTTPX_ERRORS as e:
            raise ops.error_from_exception(e) from e
        return call.decode(r.status_code, r.headers, r.content)

    async def ready(self) -> Obj:
        """``GET /readyz``: raises TollgateError (is_unavailable) while the store is down."""
        return await self._run(ops.simple("readyz"))

    # Gates

    def gate(self, name: str) -> AsyncGate:
        return AsyncGate(self, name)

    def lock(self, name: str, ttl_ms: int = 30_000, wait: Optional[float] = None,
             label: Optional[str] = None, max_hold: Optional[float] = None) -> AsyncHeld:
        """A gate of capacity 1 held for a ``with`` block. ``wait``: seconds to
        wait in line (None: as long as it takes), then TimeoutError.
        ``max_hold``: seconds it may be held at most, renewals or not."""
        return AsyncHeld(self.gate(name), 1, 1, ttl_ms, wait, label, max_hold=max_hold)

    def semaphore(self, name: str, limit: int, permits: int = 1, ttl_ms: int = 30_000,
                  wait: Optional[float] = None, label: Optional[str] = None,
                  max_hold: Optional[float] = None) -> AsyncHeld:
        return AsyncHeld(self.gate(name), limit, permits, ttl_ms, wait, label, max_hold=max_hold)

    def rw_lock(self, name: str, mode: str, ttl_ms: int = 30_000, wait: Optional[float] = None,
                label: Optional[str] = None, max_hold: Optional[float] = None) -> AsyncHeld:
        """A fair read-write lock held for a ``with`` block: ``mode`` "shared"
        (a reader, among others) or "exclusive" (the writer, alone), in
        arrival order: a waiting writer holds back the readers after it."""
        return AsyncHeld(self.gate(name), None, None, ttl_ms, wait, label, mode=mode, max_hold=max_hold)

    def election(self, name: str) -> AsyncElection:
        return AsyncElection(self, name)

    # Job queues

    def queue(self, name: str) -> AsyncQueue:
        return AsyncQueue(self, name)

    def worker(self, queue: str, handler: Callable[[AsyncDelivery], Awaitable[Any]], concurrency: int = 1,
               lease_ms: int = 30_000, poll_ms: int = 1_000) -> AsyncWorker:
        return AsyncWorker(self.queue(queue), handler, concurrency, lease_ms, poll_ms)

    # Rate limits

    async def check(self, name: str, key: str, cost: int = 1, rate: Optional[str] = None,
              burst: Optional[int] = None, algorithm: Optional[str] = None) -> Decision:
        """Spend ``cost`` of ``key``'s allowance; a refusal is ``allowed=False``."""
        body = {"key": key, "cost": cost, "rate": rate, "burst": burst, "algorithm": algorithm}
        return await self._run(ops.check(name, body))

    async def limit(self, name: str) -> Obj:
        return await self._run(ops.simple("limit_get", {"name": name}))

    # Waiting rooms, schedules, listings: the server's JSON as it comes.

    def room(self, name: str) -> AsyncRoom:
        return AsyncRoom(self, name)

    async def put_schedule(self, name: str, when: str, queue: str, **fields: Any) -> Obj:
        """Create or change a schedule; ``fields`` are the route's other body fields."""
        return await self._run(ops.simple("schedule_put", {"name": name}, {"when": when, "queue": queue, **fields}))

    async def schedule(self, name: str) -> Obj:
        return await self._run(ops.simple("schedule_get", {"name": name}))

    async def delete_schedule(self, name: str) -> Obj:
        return await self._run(ops.simple("schedule_delete", {"name": name}))

    async def pause_schedule(self, name: str) -> Obj:
        return await self._run(ops.simple("schedule_pause", {"name": name}))

    async def resume_schedule(self, name: str) -> Obj:
        return await self._run(ops.simple("schedule_resume", {"name": name}))

    async def trigger_schedule(self, name: str) -> Obj:
        return await self._run(ops.simple("schedule_trigger", {"name": name}))

    async def next_ticks(self, name: str, count: Optional[int] = None) -> List[int]:
        got = await self._run(ops.simple("schedule_next", {"name": name}, query={"count": count}))
        return list(got["next_ms"])

    async def listing(self, kind: str, prefix: Optional[str] = None, cursor: Optional[str] = None,
             limit: Optional[int] = None) -> Obj:
        """One page of ``gates``, ``queues``, ``rooms``, ``limits`` or ``schedules``:
        ``{kind: [...], "next": cursor or None}``."""
        return await self._run(ops.simple(f"list_{kind}", query={"prefix": prefix, "cursor": cursor, "limit": limit}))


class AsyncGate:
    def __init__(self, client: AsyncClient, name: str) -> None:
        self.client = client
        self.name = name

    async def enter(self, *, ttl_ms: Optional[int] = None, permits: Optional[int] = None,
              capacity: Optional[int] = None, queue: bool = True, heartbeat_ms: Optional[int] = None,
              label: Optional[str] = None, mode: Optional[str] = None) -> Union[AsyncLease, AsyncTicket, Busy]:
        """``mode``: a read-write lock's hold, "shared" (a reader) or
        "exclusive" (the writer); it sets capacity and permits."""
        body = {"ttl_ms": ttl_ms, "permits": permits, "capacity": capacity, "queue": queue,
                "heartbeat_ms": heartbeat_ms, "label": label, "mode": mode}
        got = await self.client._run(ops.enter(self.name, body))
        if isinstance(got, LeaseInfo):
            return AsyncLease.of(got, self.client)
        if isinstance(got, TicketInfo):
            return AsyncTicket.of(got, self.client)
        return got

    async def stats(self) -> Obj:
        return await self.client._run(ops.simple("gate_stats", {"name": self.name}))

    async def holders(self, limit: Optional[int] = None) -> List[Obj]:
        got = await self.client._run(ops.simple("gate_holders", {"name": self.name}, query={"limit": limit}))
        return list(got["holders"])

    async def line(self, limit: Optional[int] = None) -> List[Obj]:
        got = await self.client._run(ops.simple("gate_line", {"name": self.name}, query={"limit": limit}))
        return list(got["line"])

    async def set_capacity(self, capacity: int) -> Obj:
        return await self.client._run(ops.simple("gate_capacity", {"name": self.name}, {"capacity": capacity}))

    async def revoke(self, handle: str) -> Obj:
        return await self.client._run(ops.simple("gate_revoke", {"name": self.name, "handle": handle}))

    async def remove(self, number: int) -> Obj:
        return await self.client._run(ops.simple("gate_line_remove", {"name": self.name, "number": str(number)}))


@dataclass
class AsyncLease(LeaseInfo):
    client: AsyncClient = field(repr=False, compare=False)
    # Set once the lease is known to have ended without our release.
    lost: asyncio.Event = field(default_factory=asyncio.Event, repr=False, compare=False)

    @classmethod
    def of(cls, info: LeaseInfo, client: AsyncClient) -> AsyncLease:
        return cls(info.gate, info.token, info.fence, info.ttl_ms, client)

    async def renew(self, ttl_ms: Optional[int] = None) -> int:
        try:
            self.ttl_ms = await self.client._run(ops.lease_renew(self.gate, self.token, ttl_ms))
        except TollgateError as e:
            if e.is_not_found():
                self.lost.set()
            raise
        return self.ttl_ms

    async def release(self) -> None:
        await self.client._run(ops.lease_release(self.gate, self.token))


@dataclass
class AsyncTicket(TicketInfo):
    client: AsyncClient = field(repr=False, compare=False)

    @classmethod
    def of(cls, info: TicketInfo, client: AsyncClient) -> AsyncTicket:
        return cls(info.gate, info.ticket, info.position, info.waiting, info.eta_ms, client)

    async def poll(self, wait_ms: int = 0) -> Optional[AsyncLease]:
        """Ask once (and keep the heartbeat); the AsyncLease if granted, else None
        with ``position``, ``waiting`` and ``eta_ms`` brought up to date."""
        got = await self.client._run(ops.ticket_status(self.gate, self.ticket, wait_ms))
        if isinstance(got, LeaseInfo):
            return AsyncLease.of(got, self.client)
        self._take(got)
        return None

    async def granted(self, timeout: Optional[float] = None,
                      on_position: Optional[Callable[[AsyncTicket], None]] = None) -> AsyncLease:
        """Wait for the grant by long-polling; TimeoutError after ``timeout`` s
        (the ticket stays in line: cancel it if you give up). With
        ``on_position``, follow the ticket's event stream instead: the
        callback hears each move within about a second (for a "you are
        number 3" display), and the grant comes on the same stream."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if on_position is not None:
            try:
                return await asyncio.wait_for(self._granted_by_events(on_position), timeout)
            except asyncio.TimeoutError:
                # (asyncio's own class before Python 3.11.)
                raise TimeoutError(f"not granted {self.gate} within {timeout} s") from None
        while True:
            left = ops.MAX_WAIT_MS if deadline is None else int(max(0.0, deadline - time.monotonic()) * 1000)
            lease = await self.poll(min(left, ops.MAX_WAIT_MS))
            if lease is not None:
                return lease
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"not granted {self.gate} within {timeout} s")

    async def cancel(self) -> Obj:
        return await self.client._run(ops.ticket_cancel(self.gate, self.ticket))

    async def _granted_by_events(self, on_position: Callable[[AsyncTicket], None]) -> AsyncLease:
        # Opened again if the server ends it without an answer.
        while True:
            events = ops.TicketEvents(self.gate, self.ticket)
            try:
                async with self.client._http.stream(
                        "GET", ops.ticket_events_path(self.gate, self.ticket),
                        headers={"accept": "text/event-stream"},
                        timeout=httpx.Timeout(self.client.timeout, read=ops.EVENTS_READ_TIMEOUT)) as r:
                    if r.status_code != 200:
                        await r.aread()
                        raise ops.events_refused(r.status_code, r.headers, r.content)
                    async for line in r.aiter_lines():
                        got = events.feed(line)
                        if isinstance(got, LeaseInfo):
                            return AsyncLease.of(got, self.client)
                        if got is not None and self._take(got):
                            on_position(self)
            except ops.HTTPX_ERRORS as e:
                raise ops.error_from_exception(e) from e
            await asyncio.sleep(0.25)


class AsyncHeld:
    """``async with client.lock(...) as lease``: waits in line, renews every
    ttl/3 in a task, releases on exit. ``lease.lost`` is set if a renewal
    finds the lease gone or none succeeded within a TTL."""

    def __init__(self, gate: AsyncGate, capacity: Optional[int], permits: Optional[int], ttl_ms: int,
                 wait: Optional[float], label: Optional[str], mode: Optional[str] = None,
                 max_hold: Optional[float] = None) -> None:
        self.gate, self.capacity, self.permits = gate, capacity, permits
        self.ttl_ms, self.wait, self.label = ttl_ms, wait, label
        # A read-write lock's mode; max_hold: seconds it may be held,
        # renewals or not (then lease.lost is set at its end).
        self.mode, self.max_hold = mode, max_hold
        if max_hold is not None:
            # Granted for no longer than it may be held.
            self.ttl_ms = max(10, min(ttl_ms, int(max_hold * 1000)))
        self._hold_until: Optional[float] = None
        self.lease: Optional[AsyncLease] = None
        self._renewer: Optional[asyncio.Task[None]] = None

    async def acquire(self) -> AsyncLease:
        sent = time.monotonic()
        got = await self.gate.enter(ttl_ms=self.ttl_ms, permits=self.permits, capacity=self.capacity, mode=self.mode,
                                    label=self.label)
        waited = isinstance(got, AsyncTicket)
        if isinstance(got, AsyncTicket):
            ticket = got
            try:
                got = await ticket.granted(self.wait)
            except BaseException:
                # Cancelled or timed out: leave the line (or hand back a grant
                # that raced the cancellation) so nobody waits behind a ghost.
                # Shielded, since our own task may be the one being cancelled.
                try:
                    await asyncio.shield(ticket.cancel())
                except (TollgateError, asyncio.CancelledError):
                    pass
                raise
        assert isinstance(got, AsyncLease)
        self.lease = got
        # From the grant: a wait in line does not count.
        granted_at = sent if not waited else time.monotonic()
        self._hold_until = None if self.max_hold is None else granted_at + self.max_hold
        self._renewer = asyncio.ensure_future(self._renew(got))
        return got

    async def _renew(self, lease: AsyncLease) -> None:
        ttl = self.ttl_ms / 1000
        loop = asyncio.get_running_loop()
        # Sets lost at the lease's end whatever the renewal in flight is
        # doing (a hung request, an event loop blocked past the TTL).
        deadline = loop.call_later(ttl, lease.lost.set)
        try:
            while True:
                await asyncio.sleep(ttl / 3)
                if lease.lost.is_set():
                    return
                ttl_ms = ops.max_hold_cap(self.ttl_ms, self._hold_until)
                if ttl_ms is None:
                    # Held for max_hold: lost at its end (the deadline),
                    # unless released (this task cancelled) first.
                    await asyncio.Event().wait()
                    return
                sent = time.monotonic()
                try:
                    await lease.renew(ttl_ms)
                except TollgateError as e:
                    if e.is_not_found():
                        return  # renew() has set lost
                    log.warning("renewing %s failed: %s", lease.gate, e)
                    continue
                if lease.lost.is_set():
                    return
                # The renewal ran the lease ttl from when it was sent.
                deadline.cancel()
                deadline = loop.call_later(max(0.0, sent + ttl_ms / 1000 - time.monotonic()), lease.lost.set)
        finally:
            deadline.cancel()

    async def release(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            try:
                await self._renewer
            except asyncio.CancelledError:
                pass
            self._renewer = None
        lease, self.lease = self.lease, None
        if lease is not None and not lease.lost.is_set():
            try:
                await lease.release()
            except TollgateError as e:
                if not e.is_not_found():
                    raise

    async def __aenter__(self) -> AsyncLease:
        return await self.acquire()

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        try:
            await self.release()
        except TollgateError:
            if exc is None:
                raise  # otherwise keep the block's own exception


class AsyncQueue:
    def __init__(self, client: AsyncClient, name: str) -> None:
        self.client = client
        self.name = name

    async def push(self, payload: JSON, *, id: Optional[str] = None, delay_ms: Optional[int] = None,
             at_ms: Optional[int] = None, priority: Optional[int] = None,
             max_attempts: Optional[int] = None, backoff: Optional[Backoff] = None,
             on_duplicate: Optional[str] = None, group: Optional[str] = None) -> Pushed:
        job = NewJob(payload, id, delay_ms, at_ms, priority, max_attempts, backoff, on_duplicate, group)
        return await self.client._run(ops.push(self.name, job))

    async def push_many(self, jobs: Iterable[Union[NewJob, JSON]]) -> List[Pushed]:
        return await self.client._run(ops.push_many(self.name, jobs))

    async def claim(self, wait_ms: int = 0, lease_ms: Optional[int] = None, max: Optional[int] = None) -> List[AsyncDelivery]:
        got = await self.client._run(ops.claim(self.name, wait_ms, lease_ms, max))
        return [AsyncDelivery.of(d, self.client) for d in got]

    async def stats(self) -> Obj:
        return await self.client._run(ops.simple("queue_stats", {"queue": self.name}))

    async def get(self, id: str) -> Obj:
        return await self.client._run(ops.simple("job_get", {"queue": self.name, "id": id}))

    async def cancel(self, id: str) -> Obj:
        return await self.client._run(ops.simple("job_cancel", {"queue": self.name, "id": id}))

    async def reschedule(self, id: str, delay_ms: int) -> Obj:
        return await self.client._run(ops.simple("job_reschedule", {"queue": self.name, "id": id}, {"delay_ms": delay_ms}))

    async def jobs(self, state: str, cursor: Optional[str] = None, limit: Optional[int] = None) -> Obj:
        q: Dict[str, Optional[Union[int, str]]] = {"state": state, "cursor": cursor, "limit": limit}
        return await self.client._run(ops.simple("queue_jobs", {"queue": self.name}, query=q))

    async def dead(self, limit: Optional[int] = None) -> List[Obj]:
        got = await self.client._run(ops.simple("queue_dead", {"queue": self.name}, query={"limit": limit}))
        return list(got["jobs"])

    async def replay(self, id: Optional[str] = None) -> int:
        got = await self.client._run(ops.simple("queue_replay", {"queue": self.name}, {"id": id}))
        return int(got["replayed"])

    async def purge(self, id: Optional[str] = None) -> int:
        got = await self.client._run(ops.simple("queue_purge", {"queue": self.name}, {"id": id}))
        return int(got["purged"])

    async def pause(self) -> Obj:
        return await self.client._run(ops.simple("queue_pause", {"queue": self.name}))

    async def resume(self) -> Obj:
        return await self.client._run(ops.simple("queue_resume", {"queue": self.name}))

    async def limits(self) -> Obj:
        return await self.client._run(ops.simple("queue_settings", {"queue": self.name}))

    async def set_limits(self, **limits: Optional[Union[int, str]]) -> Obj:
        return await self.client._run(ops.set_limits(self.name, limits))

    async def group_limits(self, group: str) -> Optional[Obj]:
        try:
            return await self.client._run(ops.group_limits(self.name, group))
        except TollgateError as e:
            if e.code == "limits_not_found":
                return None
            raise

    async def set_group_limits(self, group: str, limits: Optional[Obj]) -> Obj:
        return await self.client._run(ops.set_group_limits(self.name, group, limits))

    async def groups(self, limit: Optional[int] = None, after: Optional[str] = None) -> Obj:
        return await self.client._run(
            ops.simple("queue_groups", {"queue": self.name}, query={"limit": limit, "after": after}))


@dataclass
class AsyncDelivery(DeliveryInfo):
    client: AsyncClient = field(repr=False, compare=False)

    @classmethod
    def of(cls, d: DeliveryInfo, client: AsyncClient) -> AsyncDelivery:
        return cls(d.queue, d.id, d.payload, d.payload_bytes, d.attempt, d.fence, d.lease_until_ms, d.group, client)

    async def ack(self, keep: Optional[Obj] = None) -> Obj:
        return await self.client._run(ops.job_call("job_ack", self, {"keep": keep}))

    async def nack(self, error: Optional[str] = None, delay_ms: Optional[int] = None) -> Obj:
        return await self.client._run(ops.job_call("job_nack", self, {"error": error, "delay_ms": delay_ms}))

    async def extend(self, lease_ms: Optional[int] = None) -> int:
        got = await self.client._run(ops.job_call("job_extend", self, {"lease_ms": lease_ms}))
        self.lease_until_ms = int(got["lease_until_ms"])
        return self.lease_until_ms


class AsyncWorker:
    """Claims jobs in ``concurrency`` tasks and awaits ``handler`` on each:
    ack when it returns, nack with the error text when it raises, the lease
    extended every lease_ms/3 meanwhile. ``stop()`` lets running jobs finish."""

    def __init__(self, queue: AsyncQueue, handler: Callable[[AsyncDelivery], Awaitable[Any]],
                 concurrency: int = 1, lease_ms: int = 30_000, poll_ms: int = 1_000) -> None:
        self.queue, self.handler, self.concurrency = queue, handler, concurrency
        self.lease_ms, self.poll_ms = lease_ms, poll_ms
        self._stopping = False
        self._tasks: List[asyncio.Task[None]] = []

    def start(self) -> None:
        self._stopping = False
        self._tasks = [asyncio.ensure_future(self._loop()) for _ in range(self.concurrency)]

    async def stop(self) -> None:
        """Take no new job; returns once the running ones are done (within one poll)."""
        self._stopping = True
        await self.join()

    async def join(self) -> None:
        await asyncio.gather(*self._tasks)

    async def run(self) -> None:
        """Work until ``stop()`` is called from another task."""
        self.start()
        await self.join()

    async def _loop(self) -> None:
        while not self._stopping:
            try:
                jobs = await self.queue.claim(self.poll_ms, self.lease_ms, 1)
            except TollgateError as e:
                log.warning("claim from %s failed: %s", self.queue.name, e)
                await asyncio.sleep(min((e.retry_after_ms or 1000) / 1000, 5.0))
                continue
            for job in jobs:
                await self._handle(job)

    async def _handle(self, job: AsyncDelivery) -> None:
        extender = asyncio.ensure_future(self._extend(job))
        try:
            await self.handler(job)
        except Exception as e:
            await self._finish(extender, job.nack(str(e) or type(e).__name__))
        else:
            await self._finish(extender, job.ack())

    async def _finish(self, extender: asyncio.Task[None], step: Awaitable[Obj]) -> None:
        extender.cancel()
        try:
            await step
        except TollgateError as e:
            # lease_lost: the job went to someone else meanwhile; theirs counts.
            log.warning("finishing a job failed: %s", e)

    async def _extend(self, job: AsyncDelivery) -> None:
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            try:
                await job.extend(self.lease_ms)
            except TollgateError as e:
                log.warning("extending job %s failed: %s", job.id, e)
                if e.is_conflict():
                    return


class AsyncRoom:
    """A waiting room's admin routes (rooms are configured on the server)."""

    def __init__(self, client: AsyncClient, name: str) -> None:
        self.client = client
        self.name = name

    async def _do(self, route: str, body: Optional[Obj] = None, **path: str) -> Obj:
        return await self.client._run(ops.simple(route, {"room": self.name, **path}, body))

    async def stats(self) -> Obj:
        return await self._do("room_stats")

    async def set_capacity(self, capacity: int) -> Obj:
        return await self._do("room_capacity", {"capacity": capacity})

    async def set_admission_rate(self, per_minute: Optional[int]) -> Obj:
        """Admissions a minute (1 to 6000), or None to stop pacing."""
        return await self.client._run(ops.room_admission_rate(self.name, per_minute))

    async def pause(self) -> Obj:
        return await self._do("room_pause")

    async def resume(self) -> Obj:
        return await self._do("room_resume")

    async def reset(self) -> Obj:
        return await self._do("room_reset")

    async def set_state(self, state: str) -> Obj:
        """open, paused, closed, sold_out or passthrough, on every server at
        once; sold_out lets everyone waiting go. Answers the room's stats
        and, for sold_out, how many were let go ("dropped")."""
        return await self._do("room_state", {"state": state})

    async def set_schedule(self, opens_at: Optional[str], closes_at: Optional[str] = None,
                     prequeue: Optional[str] = None) -> Obj:
        """When the room opens (RFC 3339, e.g. "2030-12-01T10:00:00Z"; None:
        no opening), with its pre-queue ("30m" by default) and when it
        closes (None: never). The room's state is kept."""
        return await self.client._run(ops.room_schedule(self.name, opens_at, closes_at, prequeue))

    async def end_session(self, session: str) -> Obj:
        return await self._do("room_end_session", session=session)

    async def line(self, limit: Optional[int] = None) -> Obj:
        return await self.client._run(ops.simple("room_line", {"room": self.name}, query={"limit": limit}))

    async def remove(self, number: int) -> Obj:
        return await self._do("room_line_remove", number=str(number))


class AsyncElection:
    """A leader election: the holder of a lock of that name leads."""

    def __init__(self, client: AsyncClient, name: str) -> None:
        self.client = client
        self.name = name

    async def leader(self) -> Optional[Obj]:
        """Who leads now ({label, fence, since_ms, ttl_ms, handle}), or None."""
        return await self.client._run(ops.election_leader(self.name))

    def campaign(self, label: str, ttl_ms: int = 30_000, wait: Optional[float] = None) -> AsyncHeld:
        """``async with election.campaign("me") as lease``: waits in line to
        lead, renews while the block runs (``lease.lost`` is set if
        leadership is lost) and resigns on exit."""
        return AsyncHeld(self.client.gate(self.name), 1, 1, ttl_ms, wait, label)

    async def observe(self, count: Optional[int] = None) -> AsyncIterator[Optional[Obj]]:
        """The leader now, then each change (a new leader, or None), from
        the server's event stream, ``count`` of them (None: for ever)."""
        seen = 0
        last: Any = ()
        while count is None or seen < count:
            events = ops.LeaderEvents()
            try:
                async with self.client._http.stream(
                        "GET", ops.election_events_path(self.name),
                        headers={"accept": "text/event-stream"},
                        timeout=httpx.Timeout(self.client.timeout, read=ops.EVENTS_READ_TIMEOUT)) as r:
                    if r.status_code != 200:
                        await r.aread()
                        raise ops.events_refused(r.status_code, r.headers, r.content)
                    async for line in r.aiter_lines():
                        got = events.feed(line)
                        if got is None:
                            continue
                        leader = got[0]
                        fence = None if leader is None else leader.get("fence")
                        if fence == last:
                            continue
                        last = fence
                        yield leader
                        seen += 1
                        if count is not None and seen >= count:
                            return
            except ops.HTTPX_ERRORS:
                await asyncio.sleep(0.25)
