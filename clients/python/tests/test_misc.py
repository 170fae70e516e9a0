from __future__ import annotations

import uuid

import pytest
from conftest import Server

from tollgate_client import Client, TollgateError


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_rate_limit_refusal_is_data(server: Server) -> None:
    with Client(server.url) as c:
        name = unique("signup")
        first = c.check(name, "1.2.3.4", rate="2/min")
        assert first.allowed and first.limit == 2 and first.remaining == 1
        c.check(name, "1.2.3.4", rate="2/min")
        refused = c.check(name, "1.2.3.4", rate="2/min")
        assert not refused.allowed and refused.retry_after_ms > 0


def test_schedules_and_listing(server: Server) -> None:
    with Client(server.url) as c:
        name = unique("beat")
        made = c.put_schedule(name, "every 1h", unique("beats"), payload={"hi": 1})
        assert made["result"] == "created"
        assert len(c.next_ticks(name, count=3)) == 3
        assert c.pause_schedule(name)["paused"] is True
        assert c.trigger_schedule(name)["job_id"].startswith(f"{name}@manual-")
        assert name in [s["name"] for s in c.listing("schedules", prefix=name)["schedules"]]
        assert c.delete_schedule(name)["deleted"] is True
        queue = unique("digests")
        made = c.put_schedule(name, "0 3 * * *", queue, group="tenant-a", misfire="once")
        assert (made["group"], made["misfire"]) == ("tenant-a", "once")
        job_id = c.trigger_schedule(name)["job_id"]
        assert c.queue(queue).get(job_id)["group"] == "tenant-a"
        with pytest.raises(TollgateError) as bad:
            c.put_schedule(name, "0 3 * * *", queue, group="a b")
        assert bad.value.status == 400 and "group" in str(bad.value)
        gate = unique("listed")
        c.gate(gate).enter(capacity=1)
        page = c.listing("gates", prefix=gate)
        assert [g["gate"] for g in page["gates"]] == [gate]
