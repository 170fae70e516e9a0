"""The waiting-room admin calls against a real room: a `tollgate serve`
whose room fronts a small upstream here, with visitors going through its
proxy port as browsers would (cookies kept per visitor)."""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator, List, Tuple

import httpx
import pytest
from conftest import Server

from tollgate_client import AsyncClient, Client, TollgateError

ROOM = "shop"
UPSTREAM_BODY = "the site itself"


class Upstream:
    """The site behind the room: answers every GET, and keeps the
    Tollgate-Visitor id of each request it got."""

    def __init__(self) -> None:
        visitors: List[str] = []
        self.visitors = visitors

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server name)
                visitors.append(self.headers.get("Tollgate-Visitor", ""))
                body = UPSTREAM_BODY.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture(scope="module", params=["memory", "redis"])
def room_server(request: pytest.FixtureRequest, workdir: Path) -> Iterator[Tuple[Server, Upstream]]:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    upstream = Upstream()
    config = (f'[rooms.{ROOM}]\nupstream = "http://127.0.0.1:{upstream.port}"\ncapacity = 1\n'
              'cookie_keys = ["a-cookie-key-for-the-client-tests-0123456789"]\n')
    srv = Server(workdir, url, config=config).start()
    yield srv, upstream
    srv.stop()
    upstream.close()


def visit(browser: httpx.Client, srv: Server) -> httpx.Response:
    return browser.get(f"http://127.0.0.1:{srv.proxy_port}/")


def test_room_admin_steers_real_visitors(room_server: Tuple[Server, Upstream]) -> None:
    srv, upstream = room_server
    with Client(srv.url) as c, httpx.Client() as a, httpx.Client() as b, httpx.Client() as late:
        room = c.room(ROOM)
        room.reset()  # each store's run starts from an empty line
        # A gets the one slot; B waits in line.
        assert visit(a, srv).text == UPSTREAM_BODY
        a_id = upstream.visitors[-1]
        assert a_id
        assert visit(b, srv).text != UPSTREAM_BODY
        stats = room.stats()
        assert (stats["capacity"], stats["active"], stats["waiting"]) == (1, 1, 1), stats
        line = room.line()["line"]
        assert len(line) == 1 and line[0]["position"] == 1, line

        # A second slot admits B at once.
        assert room.set_capacity(2)["capacity"] == 2
        assert room.stats()["waiting"] == 0
        assert visit(b, srv).text == UPSTREAM_BODY

        # Paused: a newcomer waits though a slot is free; taken out of the
        # line by number, the line is empty again.
        assert room.pause()["paused"] is True
        assert room.set_capacity(3)["capacity"] == 3
        assert visit(late, srv).text != UPSTREAM_BODY
        [entry] = room.line(limit=5)["line"]
        assert room.remove(entry["number"]) == {"removed": True}
        assert room.stats()["waiting"] == 0
        with pytest.raises(TollgateError) as gone:
            room.remove(entry["number"])
        assert gone.value.is_not_found()
        assert room.resume()["paused"] is False

        # Pacing on and off (None stops it: the server needs the null).
        assert room.set_admission_rate(60)["admissions_per_minute"] == 60
        assert room.set_admission_rate(None)["admissions_per_minute"] is None

        # An ended session is never let back in with its token: A's next
        # request does not reach the site as A.
        assert room.end_session(a_id) == {"ended": True, "was": "active"}
        seen = len(upstream.visitors)
        visit(a, srv)
        assert a_id not in upstream.visitors[seen:]
        with pytest.raises(TollgateError) as ended:
            room.end_session(a_id)
        assert ended.value.is_not_found() and ended.value.code == "session_not_found"

        # Reset drops everyone waiting.
        room.set_capacity(1)
        room.pause()
        with httpx.Client() as w1, httpx.Client() as w2:
            visit(w1, srv)
            visit(w2, srv)
            assert room.stats()["waiting"] == 2
            reset = room.reset()
            assert reset["dropped"] == 2 and reset["waiting"] == 0, reset
        room.resume()

        # States, on every server: closed turns newcomers away; open again.
        closed = room.set_state("closed")
        assert closed["state"] == "closed", closed
        assert room.stats()["state"] == "closed"
        assert room.set_state("open")["state"] == "open"
        # A schedule: an opening ahead (the room draws its pre-queue, and
        # says so), then none.
        sale = room.set_schedule("2030-12-01T10:00:00Z", closes_at="2030-12-01T18:00:00Z", prequeue="10m")
        assert (sale["opens_at"], sale["closes_at"], sale["prequeue_seconds"]) == (
            "2030-12-01T10:00:00Z", "2030-12-01T18:00:00Z", 600), sale
        assert sale["draw"]["status"] == "pending" and len(sale["draw"]["commitment"]) == 64, sale
        cleared = room.set_schedule(None)
        assert (cleared["opens_at"], cleared["closes_at"]) == (None, None), cleared
        with pytest.raises(TollgateError) as bad:
            room.set_state("shut")
        assert bad.value.is_invalid()

        # Bad input and unknown rooms are typed errors.
        with pytest.raises(TollgateError) as bad:
            room.set_capacity(0)
        assert bad.value.is_invalid() and bad.value.status == 400
        with pytest.raises(TollgateError) as bad:
            room.set_admission_rate(6001)
        assert bad.value.is_invalid()
        with pytest.raises(TollgateError) as unknown:
            c.room("no-such-room").stats()
        assert unknown.value.is_not_found()
        assert ROOM in [r["room"] for r in c.listing("rooms")["rooms"]]


def test_async_room_admin(room_server: Tuple[Server, Upstream]) -> None:
    srv, _ = room_server

    async def main() -> None:
        async with AsyncClient(srv.url) as c:
            room = c.room(ROOM)
            assert (await room.set_capacity(4))["capacity"] == 4
            assert (await room.pause())["paused"] is True
            assert (await room.set_admission_rate(30))["admissions_per_minute"] == 30
            assert (await room.set_admission_rate(None))["admissions_per_minute"] is None
            assert (await room.resume())["paused"] is False
            assert (await room.set_state("paused"))["state"] == "paused"
            assert (await room.set_state("open"))["state"] == "open"
            sale = await room.set_schedule("2030-12-01T10:00:00Z")
            assert sale["opens_at"] == "2030-12-01T10:00:00Z" and sale["prequeue_seconds"] == 1800, sale
            assert (await room.set_schedule(None))["opens_at"] is None
            assert (await room.line())["line"] == []
            with pytest.raises(TollgateError) as e:
                await room.end_session("0" * 32)
            assert e.value.is_not_found()
            assert (await room.stats())["capacity"] == 4

    asyncio.run(main())
