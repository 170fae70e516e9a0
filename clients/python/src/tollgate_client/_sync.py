"""The blocking client. ``_async.py`` mirrors it method for method."""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Type, TypeVar, Union

import httpx

from . import _ops as ops
from ._errors import TollgateError
from ._models import JSON, Backoff, Busy, Decision, DeliveryInfo, LeaseInfo, NewJob, Pushed, TicketInfo

T = TypeVar("T")
Obj = Dict[str, Any]
log = logging.getLogger("tollgate_client")


class Client:
    """A blocking client for one tollgate server. Safe to share between threads."""

    def __init__(self, base_url: str, token: Optional[str] = None, timeout: float = 10.0,
                 *, http: Optional[httpx.Client] = None) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.timeout = timeout
        self._http = http or httpx.Client(base_url=base_url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, call: ops.Call[T]) -> T:
        # A long-poll may hold the answer back for wait_ms: read that much longer.
        timeout = httpx.Timeout(self.timeout, read=self.timeout + call.wait_ms / 1000)
        try:
            r = self._http.request(call.method, call.path, params=call.query, json=call.body, timeout=timeout)
        except ops.HTTPX_ERRORS as e:
            raise ops.error_from_exception(e) from e
        return call.decode(r.status_code, r.headers, r.content)

    def ready(self) -> Obj:
        """``GET /readyz``: raises TollgateError (is_unavailable) while the store is down."""
        return self._run(ops.simple("readyz"))

    # Gates

    def gate(self, name: str) -> Gate:
        return Gate(self, name)

    def lock(self, name: str, ttl_ms: int = 30_000, wait: Optional[float] = None,
             label: Optional[str] = None, max_hold: Optional[float] = None) -> Held:
        """A gate of capacity 1 held for a ``with`` block. ``wait``: seconds to
        wait in line (None: as long as it takes), then TimeoutError.
        ``max_hold``: seconds it may be held at most, renewals or not."""
        return Held(self.gate(name), 1, 1, ttl_ms, wait, label, max_hold=max_hold)

    def semaphore(self, name: str, limit: int, permits: int = 1, ttl_ms: int = 30_000,
                  wait: Optional[float] = None, label: Optional[str] = None,
                  max_hold: Optional[float] = None) -> Held:
        return Held(self.gate(name), limit, permits, ttl_ms, wait, label, max_hold=max_hold)

    def rw_lock(self, name: str, mode: str, ttl_ms: int = 30_000, wait: Optional[float] = None,
                label: Optional[str] = None, max_hold: Optional[float] = None) -> Held:
        """A fair read-write lock held for a ``with`` block: ``mode`` "shared"
        (a reader, among others) or "exclusive" (the writer, alone), in
        arrival order: a waiting writer holds back the readers after it."""
        return Held(self.gate(name), None, None, ttl_ms, wait, label, mode=mode, max_hold=max_hold)

    def election(self, name: str) -> Election:
        return Election(self, name)

    # Job queues

    def queue(self, name: str) -> Queue:
        return Queue(self, name)

    def worker(self, queue: str, handler: Callable[[Delivery], Any], concurrency: int = 1,
               lease_ms: int = 30_000, poll_ms: int = 1_000) -> Worker:
        return Worker(self.queue(queue), handler, concurrency, lease_ms, poll_ms)

    # Rate limits

    def check(self, name: str, key: str, cost: int = 1, rate: Optional[str] = None,
              burst: Optional[int] = None, algorithm: Optional[str] = None) -> Decision:
        """Spend ``cost`` of ``key``'s allowance; a refusal is ``allowed=False``."""
        body = {"key": key, "cost": cost, "rate": rate, "burst": burst, "algorithm": algorithm}
        return self._run(ops.check(name, body))

    def limit(self, name: str) -> Obj:
        return self._run(ops.simple("limit_get", {"name": name}))

    # Waiting rooms, schedules, listings: the server's JSON as it comes.

    def room(self, name: str) -> Room:
        return Room(self, name)

    def put_schedule(self, name: str, when: str, queue: str, **fields: Any) -> Obj:
        """Create or change a schedule; ``fields`` are the route's other body fields."""
        return self._run(ops.simple("schedule_put", {"name": name}, {"when": when, "queue": queue, **fields}))

    def schedule(self, name: str) -> Obj:
        return self._run(ops.simple("schedule_get", {"name": name}))

    def delete_schedule(self, name: str) -> Obj:
        return self._run(ops.simple("schedule_delete", {"name": name}))

    def pause_schedule(self, name: str) -> Obj:
        return self._run(ops.simple("schedule_pause", {"name": name}))

    def resume_schedule(self, name: str) -> Obj:
        return self._run(ops.simple("schedule_resume", {"name": name}))

    def trigger_schedule(self, name: str) -> Obj:
        return self._run(ops.simple("schedule_trigger", {"name": name}))

    def next_ticks(self, name: str, count: Optional[int] = None) -> List[int]:
        got = self._run(ops.simple("schedule_next", {"name": name}, query={"count": count}))
        return list(got["next_ms"])

    def listing(self, kind: str, prefix: Optional[str] = None, cursor: Optional[str] = None,
             limit: Optional[int] = None) -> Obj:
        """One page of ``gates``, ``queues``, ``rooms``, ``limits`` or ``schedules``:
        ``{kind: [...], "next": cursor or None}``."""
        return self._run(ops.simple(f"list_{kind}", query={"prefix": prefix, "cursor": cursor, "limit": limit}))


class Gate:
    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name

    def enter(self, *, ttl_ms: Optional[int] = None, permits: Optional[int] = None,
              capacity: Optional[int] = None, queue: bool = True, heartbeat_ms: Optional[int] = None,
              label: Optional[str] = None, mode: Optional[str] = None) -> Union[Lease, Ticket, Busy]:
        """``mode``: a read-write lock's hold, "shared" (a reader) or
        "exclusive" (the writer); it sets capacity and permits."""
        body = {"ttl_ms": ttl_ms, "permits": permits, "capacity": capacity, "queue": queue,
                "heartbeat_ms": heartbeat_ms, "label": label, "mode": mode}
        got = self.client._run(ops.enter(self.name, body))
        if isinstance(got, LeaseInfo):
            return Lease.of(got, self.client)
        if isinstance(got, TicketInfo):
            return Ticket.of(got, self.client)
        return got

    def stats(self) -> Obj:
        return self.client._run(ops.simple("gate_stats", {"name": self.name}))

    def holders(self, limit: Optional[int] = None) -> List[Obj]:
        got = self.client._run(ops.simple("gate_holders", {"name": self.name}, query={"limit": limit}))
        return list(got["holders"])

    def line(self, limit: Optional[int] = None) -> List[Obj]:
        got = self.client._run(ops.simple("gate_line", {"name": self.name}, query={"limit": limit}))
        return list(got["line"])

    def set_capacity(self, capacity: int) -> Obj:
        return self.client._run(ops.simple("gate_capacity", {"name": self.name}, {"capacity": capacity}))

    def revoke(self, handle: str) -> Obj:
        return self.client._run(ops.simple("gate_revoke", {"name": self.name, "handle": handle}))

    def remove(self, number: int) -> Obj:
        return self.client._run(ops.simple("gate_line_remove", {"name": self.name, "number": str(number)}))


@dataclass
class Lease(LeaseInfo):
    client: Client = field(repr=False, compare=False)
    # Set once the lease is known to have ended without our release.
    lost: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    @classmethod
    def of(cls, info: LeaseInfo, client: Client) -> Lease:
        return cls(info.gate, info.token, info.fence, info.ttl_ms, client)

    def renew(self, ttl_ms: Optional[int] = None) -> int:
        try:
            self.ttl_ms = self.client._run(ops.lease_renew(self.gate, self.token, ttl_ms))
        except TollgateError as e:
            if e.is_not_found():
                self.lost.set()
            raise
        return self.ttl_ms

    def release(self) -> None:
        self.client._run(ops.lease_release(self.gate, self.token))


@dataclass
class Ticket(TicketInfo):
    client: Client = field(repr=False, compare=False)

    @classmethod
    def of(cls, info: TicketInfo, client: Client) -> Ticket:
        return cls(info.gate, info.ticket, info.position, info.waiting, info.eta_ms, client)

    def poll(self, wait_ms: int = 0) -> Optional[Lease]:
        """Ask once (and keep the heartbeat); the Lease if granted, else None
        with ``position``, ``waiting`` and ``eta_ms`` brought up to date."""
        got = self.client._run(ops.ticket_status(self.gate, self.ticket, wait_ms))
        if isinstance(got, LeaseInfo):
            return Lease.of(got, self.client)
        self._take(got)
        return None

    def granted(self, timeout: Optional[float] = None,
                on_position: Optional[Callable[[Ticket], None]] = None) -> Lease:
        """Wait for the grant by long-polling; TimeoutError after ``timeout`` s
        (the ticket stays in line: cancel it if you give up). With
        ``on_position``, follow the ticket's event stream instead: the
        callback hears each move within about a second (for a "you are
        number 3" display), and the grant comes on the same stream."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if on_position is not None:
            return self._granted_by_events(deadline, timeout, on_position)
        while True:
            left = ops.MAX_WAIT_MS if deadline is None else int(max(0.0, deadline - time.monotonic()) * 1000)
            lease = self.poll(min(left, ops.MAX_WAIT_MS))
            if lease is not None:
                return lease
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"not granted {self.gate} within {timeout} s")

    def cancel(self) -> Obj:
        return self.client._run(ops.ticket_cancel(self.gate, self.ticket))

    def _granted_by_events(self, deadline: Optional[float], timeout: Optional[float],
                           on_position: Callable[[Ticket], None]) -> Lease:
        # A reader thread follows the stream (opened again if the server
        # ends it without an answer) and hands each outcome over; this
        # thread waits with the deadline, which a blocked read could not
        # keep, and calls on_position itself. When the wait ends, it shuts
        # the stream's socket, which wakes the reader, and joins it. The
        # stream's connection is never handed back to the client's pool
        # (Connection: close), so the socket shut is always its own; and
        # no read waits past the deadline, so a server yet to answer (not
        # registered here, nothing to shut) still lets the reader go by
        # then. (A grant the reader met meanwhile stays with the ticket, as
        # a long-poll's would.)
        outcomes: queue.Queue[Union[ops.Polled, BaseException]] = queue.Queue()
        done = threading.Event()
        streams: List[httpx.Response] = []
        lock = threading.Lock()

        def read() -> None:
            try:
                while not done.is_set():
                    events = ops.TicketEvents(self.gate, self.ticket)
                    read = ops.EVENTS_READ_TIMEOUT
                    if deadline is not None:
                        read = max(0.05, min(read, deadline - time.monotonic() + 0.1))
                    with self.client._http.stream(
                            "GET", ops.ticket_events_path(self.gate, self.ticket),
                            headers={"accept": "text/event-stream", "connection": "close"},
                            timeout=httpx.Timeout(self.client.timeout, read=read)) as r:
                        with lock:
                            if done.is_set():
                                return
                            streams.append(r)
                        try:
                            if r.status_code != 200:
                                r.read()
                                raise ops.events_refused(r.status_code, r.headers, r.content)
                            for line in r.iter_lines():
                                got = events.feed(line)
                                if got is not None:
                                    outcomes.put(got)
                                    if isinstance(got, LeaseInfo):
                                        return
                                if done.is_set():
                                    return
                        finally:
                            with lock:
                                streams.remove(r)
                    done.wait(0.25)
            except ops.HTTPX_ERRORS as e:
                outcomes.put(ops.error_from_exception(e))
            except BaseException as e:  # handed to the waiting thread
                outcomes.put(e)

        reader = threading.Thread(target=read, name=f"tollgate-ticket-{self.gate}", daemon=True)
        reader.start()
        try:
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"not granted {self.gate} within {timeout} s")
                try:
                    got = outcomes.get(timeout=left)
                except queue.Empty:
                    continue
                if isinstance(got, BaseException):
                    raise got
                if isinstance(got, LeaseInfo):
                    return Lease.of(got, self.client)
                if self._take(got):
                    on_position(self)
        finally:
            with lock:
                done.set()
                for r in streams:
                    _shut(r)
            reader.join(1.0)


def _shut(response: httpx.Response) -> None:
    """Shuts the socket under ``response`` down, which wakes a thread
    blocked reading it (closing the socket would not). HTTP/1.1 only: an
    HTTP/2 connection carries other requests too."""
    if response.extensions.get("http_version") != b"HTTP/1.1":
        return
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Held:
    """``with client.lock(...) as lease``: waits in line, renews every ttl/3 in
    a thread, releases on exit. ``lease.lost`` is set if a renewal finds the
    lease gone or none succeeded within a TTL."""

    def __init__(self, gate: Gate, capacity: Optional[int], permits: Optional[int], ttl_ms: int,
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
        self.lease: Optional[Lease] = None
        self._stop = threading.Event()
        self._renewer: Optional[threading.Thread] = None

    def acquire(self) -> Lease:
        sent = time.monotonic()
        got = self.gate.enter(ttl_ms=self.ttl_ms, permits=self.permits, capacity=self.capacity, mode=self.mode,
                              label=self.label)
        waited = isinstance(got, Ticket)
        if isinstance(got, Ticket):
            ticket = got
            try:
                got = ticket.granted(self.wait)
            except BaseException:
                # Interrupted or timed out: leave the line (or hand back a grant
                # that raced the interruption) so nobody waits behind a ghost.
                try:
                    ticket.cancel()
                except TollgateError:
                    pass
                raise
        assert isinstance(got, Lease)
        self.lease = got
        # From the grant: a wait in line does not count.
        granted_at = sent if not waited else time.monotonic()
        self._hold_until = None if self.max_hold is None else granted_at + self.max_hold
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew, args=(got,), daemon=True,
                                         name=f"tollgate-renew-{self.gate.name}")
        self._renewer.start()
        return got

    def _renew(self, lease: Lease) -> None:
        ttl = self.ttl_ms / 1000

        def deadline_at(delay: float) -> threading.Timer:
            # Sets lost at the lease's end whatever the renewal in flight is
            # doing (a hung request, a process frozen past the TTL).
            timer = threading.Timer(max(0.0, delay), lease.lost.set)
            timer.daemon = True
            timer.start()
            return timer

        deadline = deadline_at(ttl)
        try:
            while not self._stop.wait(ttl / 3):
                if lease.lost.is_set():
                    return
                ttl_ms = ops.max_hold_cap(self.ttl_ms, self._hold_until)
                if ttl_ms is None:
                    # Held for max_hold: no more renewals; lost at its end
                    # (the deadline), unless released first.
                    self._stop.wait()
                    return
                sent = time.monotonic()
                try:
                    lease.renew(ttl_ms)
                except TollgateError as e:
                    if e.is_not_found():
                        return  # renew() has set lost
                    log.warning("renewing %s failed: %s", lease.gate, e)
                    continue
                if lease.lost.is_set():
                    return
                # The renewal ran the lease ttl from when it was sent.
                deadline.cancel()
                deadline = deadline_at(sent + ttl_ms / 1000 - time.monotonic())
        finally:
            deadline.cancel()

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None
        lease, self.lease = self.lease, None
        if lease is not None and not lease.lost.is_set():
            try:
                lease.release()
            except TollgateError as e:
                if not e.is_not_found():
                    raise

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        try:
            self.release()
        except TollgateError:
            if exc is None:
                raise  # otherwise keep the block's own exception


class Queue:
    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name

    def push(self, payload: JSON, *, id: Optional[str] = None, delay_ms: Optional[int] = None,
             at_ms: Optional[int] = None, priority: Optional[int] = None,
             max_attempts: Optional[int] = None, backoff: Optional[Backoff] = None,
             on_duplicate: Optional[str] = None, group: Optional[str] = None) -> Pushed:
        job = NewJob(payload, id, delay_ms, at_ms, priority, max_attempts, backoff, on_duplicate, group)
        return self.client._run(ops.push(self.name, job))

    def push_many(self, jobs: Iterable[Union[NewJob, JSON]]) -> List[Pushed]:
        return self.client._run(ops.push_many(self.name, jobs))

    def claim(self, wait_ms: int = 0, lease_ms: Optional[int] = None, max: Optional[int] = None) -> List[Delivery]:
        got = self.client._run(ops.claim(self.name, wait_ms, lease_ms, max))
        return [Delivery.of(d, self.client) for d in got]

    def stats(self) -> Obj:
        return self.client._run(ops.simple("queue_stats", {"queue": self.name}))

    def get(self, id: str) -> Obj:
        return self.client._run(ops.simple("job_get", {"queue": self.name, "id": id}))

    def cancel(self, id: str) -> Obj:
        return self.client._run(ops.simple("job_cancel", {"queue": self.name, "id": id}))

    def reschedule(self, id: str, delay_ms: int) -> Obj:
        return self.client._run(ops.simple("job_reschedule", {"queue": self.name, "id": id}, {"delay_ms": delay_ms}))

    def jobs(self, state: str, cursor: Optional[str] = None, limit: Optional[int] = None) -> Obj:
        q: Dict[str, Optional[Union[int, str]]] = {"state": state, "cursor": cursor, "limit": limit}
        return self.client._run(ops.simple("queue_jobs", {"queue": self.name}, query=q))

    def dead(self, limit: Optional[int] = None) -> List[Obj]:
        got = self.client._run(ops.simple("queue_dead", {"queue": self.name}, query={"limit": limit}))
        return list(got["jobs"])

    def replay(self, id: Optional[str] = None) -> int:
        got = self.client._run(ops.simple("queue_replay", {"queue": self.name}, {"id": id}))
        return int(got["replayed"])

    def purge(self, id: Optional[str] = None) -> int:
        got = self.client._run(ops.simple("queue_purge", {"queue": self.name}, {"id": id}))
        return int(got["purged"])

    def pause(self) -> Obj:
        return self.client._run(ops.simple("queue_pause", {"queue": self.name}))

    def resume(self) -> Obj:
        return self.client._run(ops.simple("queue_resume", {"queue": self.name}))

    def limits(self) -> Obj:
        """The queue's limits applied at claim (None: no limit)."""
        return self.client._run(ops.simple("queue_settings", {"queue": self.name}))

    def set_limits(self, **limits: Optional[Union[int, str]]) -> Obj:
        """Replace the queue's limits: concurrency, rate ("50/s"),
        group_concurrency, group_rate (one left out: none)."""
        return self.client._run(ops.set_limits(self.name, limits))

    def group_limits(self, group: str) -> Optional[Obj]:
        """A group's own limits; None if it has none."""
        try:
            return self.client._run(ops.group_limits(self.name, group))
        except TollgateError as e:
            if e.code == "limits_not_found":
                return None
            raise

    def set_group_limits(self, group: str, limits: Optional[Obj]) -> Obj:
        """A group's own limits ({"concurrency", "rate"}); None drops them."""
        return self.client._run(ops.set_group_limits(self.name, group, limits))

    def groups(self, limit: Optional[int] = None, after: Optional[str] = None) -> Obj:
        """A page of the queue's groups, most ready first: {"groups", "next"}."""
        return self.client._run(ops.simple("queue_groups", {"queue": self.name}, query={"limit": limit, "after": after}))


@dataclass
class Delivery(DeliveryInfo):
    client: Client = field(repr=False, compare=False)

    @classmethod
    def of(cls, d: DeliveryInfo, client: Client) -> Delivery:
        return cls(d.queue, d.id, d.payload, d.payload_bytes, d.attempt, d.fence, d.lease_until_ms, d.group, client)

    def ack(self, keep: Optional[Obj] = None) -> Obj:
        return self.client._run(ops.job_call("job_ack", self, {"keep": keep}))

    def nack(self, error: Optional[str] = None, delay_ms: Optional[int] = None) -> Obj:
        return self.client._run(ops.job_call("job_nack", self, {"error": error, "delay_ms": delay_ms}))

    def extend(self, lease_ms: Optional[int] = None) -> int:
        got = self.client._run(ops.job_call("job_extend", self, {"lease_ms": lease_ms}))
        self.lease_until_ms = int(got["lease_until_ms"])
        return self.lease_until_ms


class Worker:
    """Claims jobs in ``concurrency`` threads and runs ``handler`` on each:
    ack when it returns, nack with the error text when it raises, the lease
    extended every lease_ms/3 meanwhile. ``stop()`` lets running jobs finish."""

    def __init__(self, queue: Queue, handler: Callable[[Delivery], Any], concurrency: int = 1,
                 lease_ms: int = 30_000, poll_ms: int = 1_000) -> None:
        self.queue, self.handler, self.concurrency = queue, handler, concurrency
        self.lease_ms, self.poll_ms = lease_ms, poll_ms
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []

    def start(self) -> None:
        self._stop.clear()
        self._threads = [threading.Thread(target=self._loop, daemon=True, name=f"tollgate-worker-{i}")
                         for i in range(self.concurrency)]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """Take no new job; returns once the running ones are done (within one poll)."""
        self._stop.set()
        self.join()

    def join(self) -> None:
        for t in self._threads:
            t.join()

    def run(self) -> None:
        """Work until ``stop()`` is called from another thread."""
        self.start()
        self.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                jobs = self.queue.claim(self.poll_ms, self.lease_ms, 1)
            except TollgateError as e:
                log.warning("claim from %s failed: %s", self.queue.name, e)
                self._stop.wait(min((e.retry_after_ms or 1000) / 1000, 5.0))
                continue
            for job in jobs:
                self._handle(job)

    def _handle(self, job: Delivery) -> None:
        done = threading.Event()
        extender = threading.Thread(target=self._extend, args=(job, done), daemon=True)
        extender.start()
        try:
            self.handler(job)
        except Exception as e:
            done.set()
            self._finish(job.nack, str(e) or type(e).__name__)
        else:
            done.set()
            self._finish(job.ack)
        extender.join()

    def _finish(self, step: Callable[..., Obj], *args: str) -> None:
        try:
            step(*args)
        except TollgateError as e:
            # lease_lost: the job went to someone else meanwhile; theirs counts.
            log.warning("%s of a job failed: %s", step.__name__, e)

    def _extend(self, job: Delivery, done: threading.Event) -> None:
        while not done.wait(self.lease_ms / 3000):
            try:
                job.extend(self.lease_ms)
            except TollgateError as e:
                log.warning("extending job %s failed: %s", job.id, e)
                if e.is_conflict():
                    return


class Room:
    """A waiting room's admin routes (rooms are configured on the server)."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name

    def _do(self, route: str, body: Optional[Obj] = None, **path: str) -> Obj:
        return self.client._run(ops.simple(route, {"room": self.name, **path}, body))

    def stats(self) -> Obj:
        return self._do("room_stats")

    def set_capacity(self, capacity: int) -> Obj:
        return self._do("room_capacity", {"capacity": capacity})

    def set_admission_rate(self, per_minute: Optional[int]) -> Obj:
        """Admissions a minute (1 to 6000), or None to stop pacing."""
        return self.client._run(ops.room_admission_rate(self.name, per_minute))

    def pause(self) -> Obj:
        return self._do("room_pause")

    def resume(self) -> Obj:
        return self._do("room_resume")

    def reset(self) -> Obj:
        return self._do("room_reset")

    def set_state(self, state: str) -> Obj:
        """open, paused, closed, sold_out or passthrough, on every server at
        once; sold_out lets everyone waiting go. Answers the room's stats
        and, for sold_out, how many were let go ("dropped")."""
        return self._do("room_state", {"state": state})

    def set_schedule(self, opens_at: Optional[str], closes_at: Optional[str] = None,
                     prequeue: Optional[str] = None) -> Obj:
        """When the room opens (RFC 3339, e.g. "2030-12-01T10:00:00Z"; None:
        no opening), with its pre-queue ("30m" by default) and when it
        closes (None: never). The room's state is kept."""
        return self.client._run(ops.room_schedule(self.name, opens_at, closes_at, prequeue))

    def end_session(self, session: str) -> Obj:
        return self._do("room_end_session", session=session)

    def line(self, limit: Optional[int] = None) -> Obj:
        return self.client._run(ops.simple("room_line", {"room": self.name}, query={"limit": limit}))

    def remove(self, number: int) -> Obj:
        return self._do("room_line_remove", number=str(number))


class Election:
    """A leader election: the holder of a lock of that name leads."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name

    def leader(self) -> Optional[Obj]:
        """Who leads now ({label, fence, since_ms, ttl_ms, handle}), or None."""
        return self.client._run(ops.election_leader(self.name))

    def campaign(self, label: str, ttl_ms: int = 30_000, wait: Optional[float] = None) -> Held:
        """``with election.campaign("me") as lease``: waits in line to lead,
        renews while the block runs (``lease.lost`` is set if leadership is
        lost) and resigns on exit, when the next candidate leads at once."""
        return Held(self.client.gate(self.name), 1, 1, ttl_ms, wait, label)

    def observe(self, count: Optional[int] = None) -> Iterator[Optional[Obj]]:
        """The leader now, then each change (a new leader, or None), from
        the server's event stream, ``count`` of them (None: for ever). A
        stream that breaks is opened again."""
        seen = 0
        last: Any = ()
        while count is None or seen < count:
            events = ops.LeaderEvents()
            try:
                with self.client._http.stream(
                        "GET", ops.election_events_path(self.name),
                        headers={"accept": "text/event-stream"},
                        timeout=httpx.Timeout(self.client.timeout, read=ops.EVENTS_READ_TIMEOUT)) as r:
                    if r.status_code != 200:
                        r.read()
                        raise ops.events_refused(r.status_code, r.headers, r.content)
                    for line in r.iter_lines():
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
                time.sleep(0.25)
