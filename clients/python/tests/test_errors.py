from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import List

import pytest
from conftest import Server, free_port

from tollgate_client import Client, Lease, Ticket, TollgateError


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_bad_input(server: Server) -> None:
    with Client(server.url) as c:
        with pytest.raises(TollgateError) as e:
            c.gate(unique("g")).enter(capacity=1, ttl_ms=0)
        assert e.value.is_invalid() and e.value.code == "bad_request" and e.value.status == 400
        assert "ttl" in e.value.message
        name = unique("g")
        c.gate(name).enter(capacity=1)
        with pytest.raises(TollgateError) as e:
            c.gate(name).enter(capacity=2)
        assert e.value.is_conflict() and e.value.code == "capacity_conflict"
        with pytest.raises(TollgateError) as e:
            c.gate("bad name!").stats()
        assert e.value.is_invalid()
        with pytest.raises(TollgateError) as e:
            c.check(unique("l"), "k", cost=0, rate="5/s")
        assert e.value.is_invalid()
        with pytest.raises(TollgateError) as e:
            c.check(unique("l"), "k")
        assert e.value.is_not_found() and e.value.code == "limit_not_found"
        with pytest.raises(TollgateError) as e:
            c.queue(unique("q")).push("x" * 2_000_000)
        assert e.value.is_invalid() and e.value.status == 413


def test_no_server_is_unavailable() -> None:
    with Client(f"http://127.0.0.1:{free_port()}", timeout=2) as c:
        with pytest.raises(TollgateError) as e:
            c.gate("g").stats()
    assert e.value.is_unavailable() and e.value.code == "unavailable" and e.value.status is None


def test_unauthorized(workdir: Path, own_servers: List[Server]) -> None:
    srv = Server(workdir, token="a-long-enough-token-1")
    own_servers.append(srv)
    srv.start()
    with Client(srv.url) as c, pytest.raises(TollgateError) as e:
        c.gate("g").stats()
    assert e.value.is_unauthorized() and e.value.code == "unauthorized"
    with Client(srv.url, token="a-long-enough-token-1") as c:
        assert isinstance(c.gate("g").enter(capacity=1), Lease)


def test_restart_under_waiting_client(workdir: Path, redis_url: str, own_servers: List[Server]) -> None:
    srv = Server(workdir, redis_url)
    own_servers.append(srv)
    srv.start()
    name = unique("restart")
    with Client(srv.url, timeout=2) as c:
        held = c.gate(name).enter(capacity=1, ttl_ms=60_000)
        ticket = c.gate(name).enter(capacity=1, heartbeat_ms=30_000)
        assert isinstance(held, Lease) and isinstance(ticket, Ticket)
        errors: List[BaseException] = []

        def wait() -> None:
            try:
                ticket.granted(timeout=30)
            except BaseException as e:  # noqa: BLE001 - handed to the test thread
                errors.append(e)

        waiter = threading.Thread(target=wait)
        waiter.start()
        srv.stop()  # answers the long-poll, then the next poll finds no server
        waiter.join(15)
        assert not waiter.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], TollgateError), errors
        assert errors[0].is_unavailable(), errors[0]
        srv.start()  # same port, same Redis: the line is still there
        held.release()
        lease = ticket.granted(timeout=10)
        assert lease.fence > held.fence
        lease.release()
