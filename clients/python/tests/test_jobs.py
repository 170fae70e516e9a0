from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import List, Tuple

import pytest
from conftest import Server

from tollgate_client import AsyncClient, AsyncDelivery, Backoff, Client, Delivery, NewJob, TollgateError


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_push_claim_ack_nack(server: Server) -> None:
    with Client(server.url) as c:
        q = c.queue(unique("q"))
        first = q.push({"n": 1}, id="one", priority=5)
        assert first.id == "one" and first.result == "created"
        pushed = q.push_many([{"n": 2}, NewJob(b"\x00raw", id="raw"), NewJob({"n": 3}, delay_ms=60_000)])
        assert [p.result for p in pushed] == ["created"] * 3
        got = q.claim(max=10, lease_ms=5_000)
        assert [d.payload for d in got][0] == {"n": 1}  # priority first
        assert {d.id for d in got} == {"one", pushed[0].id, "raw"}
        raw = next(d for d in got if d.id == "raw")
        assert raw.payload_bytes == b"\x00raw"
        assert q.get("one")["state"] == "running"
        assert got[0].extend(10_000) > 0
        for d in got:
            if d.id == "raw":
                assert d.nack(error="boom", delay_ms=60_000)["result"] == "retry"
            else:
                assert d.ack()["acked"] is True
        with pytest.raises(TollgateError) as e:
            got[0].ack()
        assert e.value.is_conflict() and e.value.code == "lease_lost"
        assert q.get("raw")["state"] == "delayed"  # the error is kept only by a nack that kills
        assert q.cancel(pushed[2].id)["result"] == "cancelled"
        with pytest.raises(TollgateError) as e:
            q.get(pushed[2].id)
        assert e.value.is_not_found() and e.value.code == "job_not_found"
        assert q.stats()["acked"] == 2


def test_groups_take_turns_and_limits_hold(server: Server) -> None:
    with Client(server.url) as c:
        q = c.queue(unique("fair"))
        assert q.set_limits(group_concurrency=1) == {
            "concurrency": None, "rate": None, "group_concurrency": 1, "group_rate": None}
        for id_, group in [("a1", "a"), ("a2", "a"), ("b1", "b")]:
            q.push(id_, id=id_, group=group)
        q.push_many([NewJob("c", id="c1", group="c")])
        got = q.claim(max=10, lease_ms=60_000)
        assert [(d.id, d.group) for d in got] == [("a1", "a"), ("b1", "b"), ("c1", "c")]
        page = q.groups(limit=10)
        held = {g["group"]: (g["ready"], g["running"], g["held"]) for g in page["groups"]}
        assert held["a"] == (1, 1, "concurrency")
        assert q.set_group_limits("a", {"concurrency": 2}) == {"concurrency": 2, "rate": None}
        assert q.group_limits("a") == {"concurrency": 2, "rate": None}
        assert [d.id for d in q.claim(max=10)] == ["a2"]
        q.set_group_limits("a", None)
        assert q.group_limits("a") is None
        with pytest.raises(TollgateError) as e:
            q.push("x", group="a b")
        assert e.value.status == 400
        with pytest.raises(TollgateError) as e:
            q.set_limits(concurrency=0)
        assert e.value.status == 400
        assert q.limits()["group_concurrency"] == 1
        assert q.stats()["groups"] == 3


def test_groups_over_the_async_client(server: Server) -> None:
    async def run() -> None:
        async with AsyncClient(server.url) as c:
            q = c.queue(unique("afair"))
            await q.set_limits(concurrency=1)
            await q.push("x", group="g1")
            await q.push("y", group="g2")
            got = await q.claim(max=10)
            assert [d.group for d in got] == ["g1"]
            assert (await q.groups())["groups"][0]["group"] in ("g1", "g2")
            assert await q.group_limits("g1") is None
            await q.set_group_limits("g1", {"rate": "10/s"})
            assert (await q.group_limits("g1"))["rate"] == "10/s"

    asyncio.run(run())


def test_worker_acks_and_nacks(server: Server) -> None:
    with Client(server.url) as c:
        q = c.queue(unique("w"))
        q.push("good", id="good")
        q.push("bad", id="bad", max_attempts=1, backoff=Backoff("fixed", 10))
        done: List[str] = []
        finished = threading.Event()

        def handler(job: Delivery) -> None:
            done.append(job.id)
            if len(done) == 2:
                finished.set()
            if job.payload == "bad":
                raise ValueError("cannot do bad things")

        w = c.worker(q.name, handler, concurrency=2, lease_ms=2_000, poll_ms=200)
        w.start()
        assert finished.wait(10)
        w.stop()
        assert sorted(done) == ["bad", "good"]
        dead = q.dead()
        assert [d["id"] for d in dead] == ["bad"]
        assert dead[0]["last_error"] == "cannot do bad things"


def test_killed_worker_job_is_redelivered(server: Server) -> None:
    with Client(server.url) as c:
        q = c.queue(unique("k"))
        pushed = q.push({"task": "resize"}, max_attempts=3)
        stuck = subprocess.Popen([sys.executable, str(Path(__file__).parent / "stuck_worker.py"), server.url,
                                  q.name, "800"], stdout=subprocess.PIPE, text=True)
        try:
            assert stuck.stdout is not None
            assert stuck.stdout.readline().split() == ["started", pushed.id, "1"]
        finally:
            stuck.send_signal(signal.SIGKILL)
            stuck.wait()
        got: List[Tuple[str, int]] = []
        finished = threading.Event()

        def handler(job: Delivery) -> None:
            got.append((job.id, job.attempt))
            finished.set()

        w = c.worker(q.name, handler, lease_ms=5_000, poll_ms=500)
        w.start()
        assert finished.wait(15), "the job was not redelivered"
        w.stop()
        assert got == [(pushed.id, 2)]
        stats = q.stats()
        assert stats["acked"] == 1 and stats["in_flight"] == 0


def test_async_worker(server: Server) -> None:
    name = unique("aw")

    async def main() -> List[int]:
        async with AsyncClient(server.url) as c:
            q = c.queue(name)
            await q.push_many([{"n": i} for i in range(5)])
            seen: List[int] = []

            async def handler(job: AsyncDelivery) -> None:
                seen.append(job.payload["n"])
                await asyncio.sleep(0.01)

            w = c.worker(name, handler, concurrency=3, lease_ms=2_000, poll_ms=200)
            w.start()
            for _ in range(500):
                if len(seen) == 5:
                    break
                await asyncio.sleep(0.02)
            await w.stop()
            assert (await q.stats())["acked"] == 5
            return seen

    assert sorted(asyncio.run(main())) == [0, 1, 2, 3, 4]
