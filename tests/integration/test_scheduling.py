"""Scheduling the pool's queue, on both backends: priorities with aging, delayed runs,
concurrency limits (per key, per pattern, per agent), fair shares between tenants.

Claims are made through the store itself, one statement per claim as workers make them; a
claimed run whose lease is released without ending stops counting as driving, which is
how these tests end a run's turn."""

from __future__ import annotations

import asyncio
import datetime as dt
import sqlite3
import time
from typing import Any

import pytest
from durable_support import BackendTarget

from harnessx import AgentRef, AgentRuntime, ConfigurationError
from harnessx._state import Delta, Phase
from harnessx.store._scheduling import Schedule

START = Delta(Phase.PREPARE_MODEL_CALL, messages=[{"role": "user", "content": "go"}])


async def queue(store: Any, run_id: str, agent: str = "a@v1", **schedule: Any) -> None:
    """A queued pool run ``run_id`` in a session of its own (``s-<run_id>``)."""
    session = f"s-{run_id}"
    await store.create_session(session, agent, {})
    lease = await store.claim(session, "submitter")
    await store.create_run(lease, run_id, None, "go", START, queued=True, schedule=Schedule(**schedule))


async def claim_all(store: Any, limit: int = 100, agents: list[str] | None = None) -> list[str]:
    return [run_id for _, run_id in await store.claim_queued("w", agents, limit)]


async def claim_one_by_one(store: Any, count: int) -> list[str]:
    order = []
    for _ in range(count):
        claimed = await store.claim_queued("w", None, 1)
        assert len(claimed) <= 1
        for lease, run_id in claimed:
            order.append(run_id)
            await store.release(lease)  # the run's turn ends: it no longer drives
    return order


async def execute(target: BackendTarget, statement: str, *args: Any) -> None:
    """A statement on the test's database, outside the store (to set a scene)."""
    if target.kind == "sqlite":
        with sqlite3.connect(target.location) as conn:
            conn.execute(statement, args)
        return
    import asyncpg

    conn = await asyncpg.connect(target.location, server_settings={"search_path": "harness_x"})
    try:
        await conn.execute(statement.replace("?", "$1"), *args)
    finally:
        await conn.close()


async def backdate(target: BackendTarget, run_id: str, seconds: float) -> None:
    """Make run ``run_id`` look queued ``seconds`` earlier than it was."""
    if target.kind == "sqlite":
        await execute(target, f"UPDATE runs SET queued_at = queued_at - {seconds} WHERE id = ?", run_id)
    else:
        await execute(
            target,
            f"UPDATE runs SET queued_at = queued_at - interval '{seconds} seconds' WHERE id = ?",
            run_id,
        )


# ------------------------------------------------------------------------ priority


async def test_claims_go_by_priority_then_age(target: BackendTarget) -> None:
    async with target.open() as store:
        for run_id, priority in [("p0", 0), ("p5a", 5), ("m3", -3), ("p5b", 5), ("p10", 10), ("none", None)]:
            await queue(store, run_id, priority=priority)
        assert await claim_one_by_one(store, 7) == ["p10", "p5a", "p5b", "p0", "none", "m3"]


async def test_a_run_waiting_longer_than_a_minute_per_point_overtakes_a_higher_priority(
    target: BackendTarget,
) -> None:
    async with target.open() as store:
        await queue(store, "old_low", priority=0)
        await queue(store, "new_high", priority=10)
        # 11 minutes of waiting: effective priority 0 + 11 > 10.
        await backdate(target, "old_low", 11 * 60)
        assert await claim_one_by_one(store, 2) == ["old_low", "new_high"]
        await queue(store, "older_low", priority=0)
        await queue(store, "newer_high", priority=10)
        # 9 minutes: 0 + 9 < 10, the higher priority still goes first.
        await backdate(target, "older_low", 9 * 60)
        assert await claim_one_by_one(store, 2) == ["newer_high", "older_low"]


async def test_an_agents_registered_priority_is_its_runs_default(target: BackendTarget) -> None:
    async with target.open() as store:
        await store.publish_agent_defaults({"urgent@v1": (7, None), "a@v1": (None, None)})
        await queue(store, "plain")
        await queue(store, "urgent_default", agent="urgent@v1")
        await queue(store, "urgent_but_low", agent="urgent@v1", priority=-1)
        assert await claim_one_by_one(store, 3) == ["urgent_default", "plain", "urgent_but_low"]
        schedule = await store.schedule_of("urgent_default")
        assert schedule is not None and schedule.priority == 7


@pytest.mark.parametrize(
    ("tenant", "paused"),
    [(None, False), ("acme", False), (None, True)],
    ids=["untenanted", "tenant", "limited"],
)
async def test_a_worker_naming_its_agents_takes_their_runs_by_priority_across_them(
    target: BackendTarget, tenant: str | None, paused: bool
) -> None:
    # A worker names the agents it serves; their runs are read by agent (PostgreSQL schema
    # 33) and must still come in effective priority order across them, past other agents'.
    async with target.open() as store:
        if paused:
            await store.set_concurrency_limit("agent:a@v1", 0)  # a's runs wait, b's go
        await queue(store, "other", agent="x@v1", priority=9, tenant=tenant)
        await queue(store, "a_plain", agent="a@v1", tenant=tenant)
        await queue(store, "b_high", agent="b@v1", priority=5, tenant=tenant)
        await queue(store, "a_later", agent="a@v1", priority=20, delay=3600, tenant=tenant)
        await queue(store, "b_low", agent="b@v1", priority=-1, tenant=tenant)
        order = []
        while claimed := await store.claim_queued("w", ["a@v1", "b@v1", "a@v1"], 1):
            [(lease, run_id)] = claimed
            order.append(run_id)
            await store.release(lease)
        assert order == (["b_high", "b_low"] if paused else ["b_high", "a_plain", "b_low"])
        assert await claim_all(store, agents=["x@v1"]) == ["other"]


async def test_a_worker_serving_many_agents_reads_the_queues_of_those_with_runs_waiting(
    target: BackendTarget,
) -> None:
    # A worker names every agent it serves (a dozen, say), and a SQLite claim read each one's
    # queue for every tenant it served, most of them empty: twelve statements a run. It now
    # reads only the queues of the agents with runs waiting. (PostgreSQL merges the queues
    # inside harnessx_claim_runs: there the claim is only checked to take the right runs.)
    served = [f"idle{n}@v1" for n in range(10)] + ["a@v1", "b@v1"]
    async with target.open() as store:
        for tenant in ("t1", "t2", "t3"):
            await queue(store, f"a_{tenant}", agent="a@v1", tenant=tenant)
        await queue(store, "b_t1", agent="b@v1", tenant="t1")
        await queue(store, "unserved", agent="x@v1", tenant="t2")
        seen: list[str] = []
        if target.kind == "sqlite":
            await store._call(lambda conn: conn.set_trace_callback(seen.append))
        try:
            taken = await claim_all(store, agents=served)
        finally:
            if target.kind == "sqlite":
                await store._call(lambda conn: conn.set_trace_callback(None))
        assert sorted(taken) == ["a_t1", "a_t2", "a_t3", "b_t1"]
        reads = [s for s in seen if "r.agent_ref = '" in s]  # agent_queue, one agent's queue
        assert not any("idle" in s for s in reads), reads
        assert len(reads) <= 7, reads  # t1's two agents, t2's and t3's one; a second look at most
        assert await claim_all(store, agents=served) == []
        assert await claim_all(store, agents=["x@v1"]) == ["unserved"]


# ----------------------------------------------------------------- delayed runs


async def test_a_delayed_run_is_not_claimed_before_its_time(target: BackendTarget) -> None:
    async with target.open() as store:
        await queue(store, "later", delay=3600)
        await queue(store, "soon", delay=0.5)
        await queue(store, "now")
        assert await claim_all(store) == ["now"]
        schedule = await store.schedule_of("later")
        assert schedule is not None and schedule.queued and schedule.not_before is not None
        assert schedule.not_before - schedule.queued_at == pytest.approx(3600, abs=1)
        deadline = time.monotonic() + 30
        claimed: list[str] = []
        while not claimed:
            assert time.monotonic() < deadline, "the delayed run never became claimable"
            claimed = await claim_all(store)
            await asyncio.sleep(0.05)
        assert claimed == ["soon"]
        taken = await store.schedule_of("soon")
        assert taken is not None and not taken.queued
        # Claimed no earlier than its time, by the store's own clock.
        assert taken.claimed_at is not None and taken.not_before is not None
        assert taken.claimed_at >= taken.not_before
        assert await claim_all(store) == []  # the hour-long one still waits


async def test_a_delayed_pool_run_shows_in_status_and_cancels_while_it_waits(target: BackendTarget) -> None:
    async with target.open() as store:
        runtime = AgentRuntime(AgentRef("a", "v1"), backend=store, execution="pool")
        await runtime.start()
        when = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
        handle = await runtime.submit("later", not_before=when, priority=3, concurrency_key="crm")
        status = await runtime.status()
        schedule = status["schedule"]
        assert schedule["queued"] is True
        assert abs((schedule["not_before"] - when).total_seconds()) < 5
        assert (schedule["priority"], schedule["concurrency_key"], schedule["tenant"]) == (3, "crm", "crm")
        await runtime.cancel()
        result = await handle.result()
        assert result.status.value == "cancelled"
        assert await claim_all(store) == []
        assert (await runtime.status())["schedule"]["queued"] is False
        await runtime.stop()


async def test_scheduling_options_are_checked_and_only_for_pool_runs(target: BackendTarget) -> None:
    async with target.open() as store:
        pool = AgentRuntime(AgentRef("a", "v1"), backend=store, execution="pool")
        await pool.start()
        for bad, match in [
            ({"priority": 1.5}, "priority must be an int"),
            ({"concurrency_key": ""}, "non-empty string"),
            ({"concurrency_key": "a b"}, "without spaces"),
            ({"concurrency_key": "agent:x@v1"}, "names limits on whole agents"),
            ({"tenant": "t*"}, "without spaces or"),
            ({"not_before": dt.datetime(2030, 1, 1)}, "has no time zone"),
            ({"not_before": 5}, "datetime or a timedelta"),
        ]:
            with pytest.raises(ConfigurationError, match=match):
                await pool.submit("x", **bad)
        assert await store.latest_run(pool.session_id) is None  # nothing was submitted
        local = AgentRuntime(backend=store)
        with pytest.raises(ConfigurationError, match="execution='pool'"):
            await local.submit("x", priority=1)
        await pool.stop()
        await local.stop()


# -------------------------------------------------------------- concurrency limits


async def test_a_key_never_has_more_runs_driving_than_its_limit(target: BackendTarget) -> None:
    async with target.open() as store:
        await store.set_concurrency_limit("crm", 2)
        for index in range(5):
            await queue(store, f"crm{index}", concurrency_key="crm")
        await queue(store, "other", concurrency_key="mail")
        first = await store.claim_queued("w", None, 10)
        taken = sorted(run_id for _, run_id in first)
        assert taken == ["crm0", "crm1", "other"]
        again = await store.claim_queued("w", None, 10)
        assert list(again) == [] and again.deferred >= 1  # the other three wait for a slot
        (limit,) = [x for x in await store.concurrency_limits() if x.pattern == "crm"]
        assert (limit.max_running, limit.driving, limit.queued, limit.source) == (2, 2, 3, "operator")
        leases = {run_id: lease for lease, run_id in first}
        await store.release(leases["crm0"])  # one run of the key lets go: one slot frees
        assert await claim_all(store) == ["crm2"]
        assert await claim_all(store) == []


async def test_a_slot_frees_when_its_lease_expires(target: BackendTarget) -> None:
    async with target.open(lease_seconds=0.5) as store:
        await store.set_concurrency_limit("crm", 1)
        await queue(store, "one", concurrency_key="crm")
        await queue(store, "two", concurrency_key="crm")
        assert await claim_all(store) == ["one"]
        assert await claim_all(store) == []
        # Its holder stops renewing (a stalled or killed worker): the slot is free once the
        # lease expires, even before a supervisor drops it.
        deadline = time.monotonic() + 30
        claimed: list[str] = []
        while not claimed:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
            claimed = await claim_all(store)
        assert claimed == ["two"]


async def test_limits_by_pattern_by_agent_and_zero(target: BackendTarget) -> None:
    async with target.open() as store:
        await store.set_concurrency_limit("tenant:*", 1)
        await store.set_concurrency_limit("tenant:big", 2)  # an exact key wins over a pattern
        await store.set_concurrency_limit("paused", 0)
        await store.publish_agent_defaults({"few@v1": (None, 1)})
        for key in ("tenant:a", "tenant:a", "tenant:b", "tenant:big", "tenant:big", "tenant:big", "paused"):
            await queue(store, f"{key}-{time.monotonic_ns()}", concurrency_key=key)
        await queue(store, "few1", agent="few@v1")
        await queue(store, "few2", agent="few@v1")
        taken = await claim_all(store)
        keys = []
        for run_id in taken:
            found = await store.schedule_of(run_id)
            assert found is not None
            keys.append(found.concurrency_key or run_id)
        assert sorted(keys) == sorted(["tenant:a", "tenant:b", "tenant:big", "tenant:big", "few1"])
        # An operator's limit on an agent replaces its registry's.
        await store.set_concurrency_limit("agent:few@v1", 2)
        assert await claim_all(store) == ["few2"]
        limits = {x.pattern: x for x in await store.concurrency_limits()}
        assert limits["agent:few@v1"].source == "operator" and limits["agent:few@v1"].driving == 2
        assert await store.remove_concurrency_limit("agent:few@v1") is True
        assert await store.remove_concurrency_limit("agent:few@v1") is False
        limits = {x.pattern: x for x in await store.concurrency_limits()}
        assert (limits["agent:few@v1"].source, limits["agent:few@v1"].max_running) == ("registry", 1)
        assert limits["paused"].queued == 1 and limits["tenant:*"].driving is None


async def test_a_limit_is_checked_when_set(target: BackendTarget) -> None:
    async with target.open() as store:
        for pattern, value, match in [
            ("a*b", 1, "prefix ending in"),
            ("", 1, "non-empty"),
            ("k", -1, "whole number"),
            ("k", 1.5, "whole number"),
        ]:
            with pytest.raises(ConfigurationError, match=match):
                await store.set_concurrency_limit(pattern, value)
        with pytest.raises(ConfigurationError, match="weight must be a number above 0"):
            await store.set_tenant_weight("t", 0)


async def claim_traced(store: Any, target: BackendTarget, limit: int) -> tuple[list[str], list[str]]:
    """What one claim took, and the statements it ran: SQLite's trace of the store's
    connection; on PostgreSQL auto_explain's report of each statement inside
    ``harnessx_claim_runs``, called on a connection of the test's."""
    if target.kind == "sqlite":
        seen: list[str] = []
        await store._call(lambda conn: conn.set_trace_callback(seen.append))
        try:
            return await claim_all(store, limit), seen
        finally:
            await store._call(lambda conn: conn.set_trace_callback(None))
    import asyncpg

    conn = await asyncpg.connect(target.location, server_settings={"search_path": "harness_x"})
    try:
        reports: list[str] = []
        conn.add_log_listener(lambda _, message: reports.append(message.message))
        for setting in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_nested_statements = on",
            "SET auto_explain.log_level = notice",
            "SET client_min_messages = notice",
        ):
            await conn.execute(setting)
        rows = await conn.fetch(
            "SELECT run_id FROM harnessx_claim_runs('w/1', NULL, $1, 30, 'c') WHERE run_id IS NOT NULL", limit
        )
        return [row[0] for row in rows], reports
    finally:
        await conn.close()


async def test_an_agents_limit_costs_other_claims_nothing_while_none_of_its_runs_waits(
    target: BackendTarget,
) -> None:
    # One agent of a fleet with max_concurrent made every claim, of any agent, look up and
    # count limits; now only a claim with a limited run waiting does.
    async with target.open() as store:
        await store.publish_agent_defaults({"few@v1": (None, 1)})
        await queue(store, "plain1")
        await queue(store, "plain2")
        taken, statements = await claim_traced(store, target, 8)
        assert taken == ["plain1", "plain2"]
        assert not any("max_running" in statement for statement in statements), statements
        await queue(store, "few1", agent="few@v1")
        await queue(store, "few2", agent="few@v1")
        await queue(store, "plain3")
        taken, statements = await claim_traced(store, target, 8)
        assert sorted(taken) == ["few1", "plain3"]  # the agent's limit holds
        assert any("max_running" in statement for statement in statements), statements


# ------------------------------------------------------------------- fair shares


async def test_a_small_tenant_progresses_behind_a_large_one(target: BackendTarget) -> None:
    async with target.open() as store:
        for index in range(1000):
            await queue(store, f"big{index:04d}", tenant="big")
        for index in range(10):
            await queue(store, f"small{index}", tenant="small")
        order = await claim_one_by_one(store, 40)
        smalls = [position for position, run_id in enumerate(order, 1) if run_id.startswith("small")]
        # Claims alternate between the two tenants: all ten small runs within twenty claims
        # (plus one for the big tenant's head start), not after a thousand.
        assert len(smalls) == 10 and smalls[-1] <= 21, order
        # Claims of several runs at once share out the same way.
        await queue(store, "small-late-1", tenant="small")
        await queue(store, "small-late-2", tenant="small")
        batch = await claim_all(store, limit=4)
        assert sum(run_id.startswith("small") for run_id in batch) == 2, batch


async def test_a_claim_looks_past_tenants_first_in_line_with_nothing_claimable(target: BackendTarget) -> None:
    # Every pass is equal, so a and b come first (ties go by name), but their runs are not
    # claimable yet: the claim goes on down the line, to c.
    async with target.open() as store:
        await queue(store, "a-later", tenant="a", delay=3600)
        await queue(store, "b-later", tenant="b", delay=3600)
        await queue(store, "c1", tenant="c")
        await queue(store, "d1", tenant="d")
        assert await claim_all(store, limit=1) == ["c1"]
        assert await claim_all(store, limit=3) == ["d1"]


async def test_weights_share_claims_in_proportion(target: BackendTarget) -> None:
    async with target.open() as store:
        await store.set_tenant_weight("gold", 3)
        for index in range(40):
            await queue(store, f"gold{index:02d}", tenant="gold")
            await queue(store, f"tin{index:02d}", tenant="tin")
        order = await claim_one_by_one(store, 40)
        golds = sum(run_id.startswith("gold") for run_id in order)
        assert 28 <= golds <= 32, order  # three claims in four
        shares = {share.tenant: share for share in await store.tenant_shares()}
        assert shares["gold"].weight == 3 and shares["gold"].queued == 40 - golds


async def test_untenanted_runs_share_with_tenants_and_keys_are_tenants(target: BackendTarget) -> None:
    async with target.open() as store:
        for index in range(20):
            await queue(store, f"plain{index:02d}")
        for index in range(20):
            await queue(store, f"crm{index:02d}", concurrency_key="crm")
        order = await claim_one_by_one(store, 20)
        crm = sum(run_id.startswith("crm") for run_id in order)
        assert 8 <= crm <= 12, order  # the key is a tenant of its own, beside the runs with none
        schedule = await store.schedule_of("crm00")
        assert schedule is not None and schedule.tenant == "crm"


async def test_a_tenant_waiting_again_gets_no_credit_for_its_idle_time(target: BackendTarget) -> None:
    async with target.open() as store:
        for index in range(30):
            await queue(store, f"busy{index:02d}", tenant="busy")
        await queue(store, "idle0", tenant="idle")
        await claim_one_by_one(store, 30)  # "idle" had one run; "busy" took the other 29 turns
        for index in range(10):
            await queue(store, f"busy-more{index}", tenant="busy")
            await queue(store, f"idle-more{index}", tenant="idle")
        order = await claim_one_by_one(store, 10)
        idles = sum(run_id.startswith("idle") for run_id in order)
        assert 4 <= idles <= 6, order  # alternating again, not ten turns in a row


async def queued_by_tenant(target: BackendTarget) -> dict[str, int]:
    """Each tenant's queued runs, counted from the runs themselves."""
    query = "SELECT tenant, count(*) FROM runs WHERE queued_at IS NOT NULL AND tenant <> '' GROUP BY tenant"
    if target.kind == "sqlite":
        with sqlite3.connect(target.location) as conn:
            return {str(t): int(n) for t, n in conn.execute(query)}
    import asyncpg

    conn = await asyncpg.connect(target.location, server_settings={"search_path": "harness_x"})
    try:
        return {str(t): int(n) for t, n in await conn.fetch(query)}
    finally:
        await conn.close()


async def counts_agree(store: Any, target: BackendTarget, expected: dict[str, int]) -> None:
    counted = {share.tenant: share.queued for share in await store.tenant_shares() if share.tenant}
    actual = await queued_by_tenant(target)
    assert {t: n for t, n in counted.items() if n} == actual == {t: n for t, n in expected.items() if n}
    assert all(n >= 0 for n in counted.values()), counted


async def test_a_tenants_queued_count_follows_its_runs_in_and_out_of_the_queue(target: BackendTarget) -> None:
    # fair_shares.queued, kept by triggers, is what claims find waiting tenants by: it must
    # match the queue through every way a run enters or leaves it, a dead claimer included.
    from harnessx.store._protocol import WorkerInfo
    from supervisor._supervisor import ROLE

    async with target.open() as store:
        for run_id, tenant in [("a1", "A"), ("a2", "A"), ("b1", "B")]:
            await queue(store, run_id, tenant=tenant)
        await counts_agree(store, target, {"A": 2, "B": 1})
    # A worker claims one and is killed before it writes anything.
    worker = target.open()
    await worker.initialize()
    await worker.register_worker(WorkerInfo(worker.process_id, "host", 4242, ["a@v1"], 1))
    ((_, lost),) = list(await worker.claim_queued("w", None, 1))
    await worker.aclose()
    async with target.open() as store:
        left = {"A": 2, "B": 1}
        left["A" if lost.startswith("a") else "B"] -= 1
        await counts_agree(store, target, left)
        term = await store.try_leadership(ROLE)
        assert term is not None
        (orphan,) = await store.find_orphans()
        recovery = await store.recover_orphan(term, orphan, requeue=True)  # the supervisor
        assert recovery is not None and recovery.run_id == lost
        await counts_agree(store, target, {"A": 2, "B": 1})
        leases = dict((run_id, lease) for lease, run_id in await store.claim_queued("w", None, 10))
        assert sorted(leases) == ["a1", "a2", "b1"]
        await counts_agree(store, target, {})
        await store.requeue(leases["a1"], "a1")  # a draining worker hands it back
        await store.hold_rate(leases["b1"], "b1", "openai/gpt-4o", time.time() + 60, 59)  # a long rate wait
        await store.defer_start(leases["a2"], "a2", attempts=1, retry_in=0, events=[])  # could not start
        await counts_agree(store, target, {"A": 2, "B": 1})
        for lease in leases.values():
            await store.release(lease)
        cancelling = AgentRuntime(AgentRef("a", "v1"), backend=store, execution="pool")
        await cancelling.start("s-b1")
        await cancelling.cancel()  # cancelled while queued
        await cancelling.stop()
        await counts_agree(store, target, {"A": 2})
        assert sorted(await claim_all(store)) == ["a1", "a2"]
        await counts_agree(store, target, {})


async def test_queue_shape_counts_by_band_and_key(target: BackendTarget) -> None:
    async with target.open() as store:
        await queue(store, "h", priority=4, concurrency_key="crm")
        await queue(store, "n1")
        await queue(store, "n2", concurrency_key="crm")
        await queue(store, "l", priority=-2, delay=3600)
        shape = await store.queue_shape()
        bands = shape.by_band()
        assert {band: count for band, (count, _) in bands.items()} == {"high": 1, "normal": 2, "low": 1}
        assert bands["low"][1] is None  # not claimable yet: no age
        keys = shape.by_key()
        assert {key: count for key, (count, _) in keys.items()} == {"crm": 2, "none": 2}
        assert shape.delayed == 1
