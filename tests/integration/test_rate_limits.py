"""Fleet-wide model rate limits, on both backends: the store's shared buckets (reservations
from several stores at once each get a start of their own), and runs that wait for budget
before calling a model vendor (a real HTTP server on loopback), with nothing open to it.

The process test (tests/process/test_rate_limit_pool.py) holds the limit across three
worker processes, counted from the vendor's side."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from durable_support import BackendTarget
from fake_vendor import FakeVendor

from harnessx import Agent, AgentConfig, AgentRef, AgentRuntime, ConfigurationError, RunEvent
from harnessx._config import RetryPolicy
from harnessx.providers import OpenAIProvider


@pytest.fixture
async def vendor() -> AsyncIterator[FakeVendor]:
    served = FakeVendor()
    await served.start()
    providers.clear()
    yield served
    for provider in providers:  # injected into their agents: the test's to close
        await provider.aclose()
    await served.stop()


providers: list[OpenAIProvider] = []


def vendor_agent(vendor: FakeVendor, model: str) -> Agent:
    provider = OpenAIProvider(model, api_key="sk-test-not-a-secret", base_url=vendor.base_url)
    providers.append(provider)
    return Agent(
        config=AgentConfig(
            model=model,
            system_prompt="Be brief.",
            max_tokens=50,
            planning=False,
            retry=RetryPolicy(attempts=3),  # the one retry path: the driver's, for every provider
        ),
        provider=provider,
    )


async def rate_waits(events: AsyncIterator[RunEvent]) -> AsyncIterator[RunEvent]:
    async for event in events:
        if event.type.value == "waiting" and event.data.get("on") == "rate_limit":
            yield event


async def test_rate_limits_are_set_listed_replaced_and_removed(target: BackendTarget) -> None:
    async with target.open() as store:
        await store.set_rate_limit("openai/*", 600, None)
        await store.set_rate_limit("openai/gpt-4o", 60, 30_000, burst_seconds=2)
        await store.set_rate_limit("openai/*", 300, 90_000)  # replaces
        found = {limit.pattern: limit for limit in await store.rate_limits()}
        assert set(found) == {"openai/*", "openai/gpt-4o"}
        assert (found["openai/*"].requests_per_minute, found["openai/*"].tokens_per_minute) == (300, 90_000)
        assert found["openai/gpt-4o"].burst_seconds == 2
        assert await store.reserve_rate("anthropic/claude", 100) is None  # nothing governs it
        taken = await store.reserve_rate("openai/gpt-4o-mini", 100)
        assert taken is not None and taken.wait == 0
        assert await store.remove_rate_limit("openai/*") is True
        assert await store.remove_rate_limit("openai/*") is False
        assert await store.reserve_rate("openai/gpt-4o-mini", 100) is None
        buckets = {bucket.name: bucket for bucket in await store.rate_buckets()}
        assert buckets["openai/gpt-4o-mini"].pattern is None and buckets["openai/gpt-4o-mini"].waits == 0
        with pytest.raises(ConfigurationError, match="needs requests per minute"):
            await store.set_rate_limit("openai/x", None, None)
        with pytest.raises(ConfigurationError, match="without spaces"):
            await store.set_rate_limit("open ai", 60, None)


async def test_reservations_from_several_stores_each_get_a_start_of_their_own(target: BackendTarget) -> None:
    stores = (target.open(), target.open(auto_migrate=False), target.open(auto_migrate=False))
    async with stores[0] as first, stores[1] as second, stores[2] as third:
        # Six calls a minute: one start every 10 s. Nothing sleeps: each reservation says
        # how long its caller must wait, and those waits must be 10 s apart.
        await first.set_rate_limit("openai/gpt-4o", 6, None)
        began = time.time()
        taken = await asyncio.gather(
            *(store.reserve_rate("openai/gpt-4o", 0) for store in (first, second, third) for _ in range(8))
        )
        span = time.time() - began
    reserved = [t for t in taken if t is not None]
    assert len(reserved) == 24
    # The k-th start is k x 10 s after the first reservation's moment, seen from a moment
    # at most `span` later: two callers given the same start would break this.
    for k, wait in enumerate(sorted(t.wait for t in reserved)):
        assert k * 10 - span - 0.01 <= wait <= k * 10 + 0.01, (k, sorted(t.wait for t in reserved), span)
    starts = sorted(t.start for t in reserved)
    assert [b - a for a, b in itertools.pairwise(starts)] == pytest.approx([10] * 23)


async def test_a_calls_tokens_settle_its_reservation(target: BackendTarget) -> None:
    async with target.open() as store:
        await store.set_rate_limit("openai/gpt-4o", None, 600)  # ten tokens a second
        began = time.time()
        first = await store.reserve_rate("openai/gpt-4o", 100)  # holds the bucket 10 s
        assert first is not None and first.wait == 0
        await store.settle_rate("openai/gpt-4o", -90)  # it used 10: 1 s
        second = await store.reserve_rate("openai/gpt-4o", 10)
        span = time.time() - began
        assert second is not None and 1 - span - 0.01 <= second.wait <= 1.01
        assert second.start == pytest.approx(first.start + 1)
        (bucket,) = await store.rate_buckets()
        assert (bucket.pattern, bucket.waits) == ("openai/gpt-4o", 1)
        assert bucket.waited == pytest.approx(second.wait)


async def test_a_run_waits_for_budget_with_no_request_open_and_cancels_while_waiting(
    target: BackendTarget, vendor: FakeVendor
) -> None:
    async with target.open() as store:
        await store.set_rate_limit("openai/gpt-slow", 1, None)  # one call a minute
        assert await store.reserve_rate("openai/gpt-slow", 0) is not None  # someone else's, just now
        async with AgentRuntime(vendor_agent(vendor, "gpt-slow"), backend=store) as runtime:
            handle = await runtime.submit("Hello")
            waiting = await asyncio.wait_for(anext(rate_waits(handle.events())), 30)
            assert waiting.data["bucket"] == "openai/gpt-slow" and 50 < waiting.data["seconds"] <= 60
            # The run is waiting for its turn: the vendor has had no request, none is open.
            assert vendor.calls == [] and vendor.open_now == 0
            await runtime.cancel()
            result = await asyncio.wait_for(handle.result(), 30)
            assert result.status.value == "cancelled"
    assert vendor.calls == []


async def test_a_run_waits_its_turn_then_calls_and_its_tokens_settle(
    target: BackendTarget, vendor: FakeVendor
) -> None:
    async with target.open() as store:
        await store.set_rate_limit("openai/*", 60, 1_000_000)  # one call a second
        assert await store.reserve_rate("openai/gpt-turn", 0) is not None  # the bucket's second is taken
        async with AgentRuntime(vendor_agent(vendor, "gpt-turn"), backend=store) as runtime:
            handle = await runtime.submit("Hello")
            result = await asyncio.wait_for(handle.result(), 30)
            assert result.ok and result.output == "Done."
            waits = [event async for event in rate_waits(handle.events())]
        assert len(waits) == 1 and 0 < waits[0].data["seconds"] <= 1
        assert len(vendor.served("gpt-turn")) == 1
        (bucket,) = [b for b in await store.rate_buckets() if b.name == "openai/gpt-turn"]
        assert bucket.pattern == "openai/*" and bucket.waits == 1


async def test_a_vendors_retry_after_is_still_honoured_under_a_limit(
    target: BackendTarget, vendor: FakeVendor
) -> None:
    async with target.open() as store:
        await store.set_rate_limit("openai/*", 6000, None)
        vendor.throttle(1, "1")  # the vendor's own limit says: come back in a second
        async with AgentRuntime(vendor_agent(vendor, "gpt-busy"), backend=store) as runtime:
            result = await asyncio.wait_for(runtime.run("Hello"), 30)
    assert result.ok
    refused, served = vendor.calls
    assert (refused.status, served.status) == (429, 200)
    assert served.at - refused.at >= 1.0


async def test_a_reservation_settles_what_earlier_calls_owe_in_the_same_statement(
    target: BackendTarget,
) -> None:
    async with target.open() as store:
        await store.set_rate_limit("openai/gpt-4o", None, 600)  # ten tokens a second
        first = await store.reserve_rate("openai/gpt-4o", 100)  # holds the bucket 10 s
        assert first is not None and first.wait == 0
        # The first call used 10 of its 100: the next reservation brings that with it.
        second = await store.reserve_rate("openai/gpt-4o", 10, -90)
        assert second is not None and second.start == pytest.approx(first.start + 1)
        assert second.tokens_at == pytest.approx(first.start + 2)


async def test_a_paused_bucket_starts_no_call_before_the_pause_ends(target: BackendTarget) -> None:
    async with target.open() as store, target.open(auto_migrate=False) as other:
        await store.set_rate_limit("openai/*", 6000, None)  # a call every 10 ms
        assert await store.pause_rate("openai/gpt-4o", 5) is None  # never reserved from: no bucket
        first = await store.reserve_rate("openai/gpt-4o", 0)
        assert first is not None and first.wait == 0
        began = time.time()
        until = await store.pause_rate("openai/gpt-4o", 5)  # a vendor said: Retry-After 5
        assert until is not None and began <= until <= time.time() + 5.01
        assert await store.pause_rate("openai/gpt-4o", 1) == pytest.approx(until)  # the later stands
        # Another worker's next calls of the bucket wait it out, one after another.
        taken = [await other.reserve_rate("openai/gpt-4o", 0) for _ in range(3)]
        starts = [t.start for t in taken if t is not None]
        assert starts == pytest.approx([until, until + 0.01, until + 0.02])
        assert all(t is not None and t.wait > 4 for t in taken)
        # Other buckets of the same limit are not paused.
        other_model = await other.reserve_rate("openai/gpt-4o-mini", 0)
        assert other_model is not None and other_model.wait == 0


async def test_a_reservation_commits_without_waiting_for_the_disk_and_nothing_else_does(
    target: BackendTarget,
) -> None:
    # Every reservation of a bucket writes the bucket's one row: a commit that waited for
    # the disk held that row (PostgreSQL) or the file's write lock (SQLite) meanwhile, and
    # the model call waited for it too (docs/scheduling.md, *The algorithm*).
    async with target.open() as store:
        await store.set_rate_limit("openai/*", 6000, None)
        if target.kind == "sqlite":
            seen: list[str] = []
            await store._call(lambda conn: conn.set_trace_callback(seen.append))
            try:
                assert await store.reserve_rate("openai/gpt-4o", 0) is not None
                await store.set_rate_limit("openai/*", 3000, None)  # any other write
            finally:
                await store._call(lambda conn: conn.set_trace_callback(None))
            kinds = [s.split()[0] if not s.startswith("PRAGMA") else s for s in seen]
            begins = [i for i, kind in enumerate(kinds) if kind == "BEGIN"]
            assert len(begins) == 2, seen
            assert kinds[begins[0] - 1] == "PRAGMA synchronous=NORMAL", seen  # the reservation
            assert kinds[begins[1] - 1] == "PRAGMA synchronous=FULL", seen  # back before the next
            return
    conn = await asyncpg.connect(target.location, server_settings={"search_path": "harness_x"})
    try:
        async with conn.transaction():
            await conn.fetch("SELECT * FROM harnessx_reserve_rate('openai/gpt-4o', 0, 0, NULL)")
            assert await conn.fetchval("SHOW synchronous_commit") == "off"
        assert await conn.fetchval("SHOW synchronous_commit") == "on"  # for its transaction alone
        async with conn.transaction():
            await conn.fetch("SELECT * FROM harnessx_claim_runs('w/1', NULL, 1, 30, 'c1')")
            assert await conn.fetchval("SHOW synchronous_commit") == "on"  # a claim waits for it
    finally:
        await conn.close()


@pytest.mark.parametrize("target", ["postgres"], indirect=True)  # SQLite's is a Python transaction
async def test_a_reservation_writes_its_buckets_row_once_and_takes_a_hold_once(target: BackendTarget) -> None:
    # Schema 34: the bucket's row is locked by the SELECT that reads the limit, not by an
    # upsert that writes a row version only to lock it (then the UPDATE wrote another).
    # Counted from the server's own statistics of the transaction, which do not depend on
    # timing.
    async with target.open() as store:
        await store.set_rate_limit("openai/*", 60_000, 6_000_000)
        assert await store.reserve_rate("openai/gpt-4o", 10) is not None  # its row exists
        runtime, handle = await held_back(store, "openai/gpt-4o")
        try:
            conn = await asyncpg.connect(target.location, server_settings={"search_path": "harness_x"})
            try:
                # The backend's counts not yet reported (they may span transactions): read
                # before and after the call, in one transaction.
                counting = (
                    "SELECT b.n_tup_ins, b.n_tup_upd, h.n_tup_del FROM pg_stat_xact_user_tables b, "
                    "pg_stat_xact_user_tables h WHERE b.relname = 'rate_buckets' AND h.relname = 'rate_holds'"
                )

                async def writes(call: str) -> tuple[tuple[int, ...], tuple[Any, ...]]:
                    async with conn.transaction():
                        before = await conn.fetchrow(counting)
                        row = await conn.fetchrow(call)
                        after = await conn.fetchrow(counting)
                    return tuple(a - b for a, b in zip(after, before, strict=True)), tuple(row)

                # The four-argument call of schema 34 still works (a worker of the previous
                # version during a rolling upgrade); held is the fifth column.
                mini = "SELECT * FROM harnessx_reserve_rate('openai/gpt-4o-mini', 10, {}, NULL)"
                first, _ = await writes(mini.format(0))
                assert first == (1, 1, 0)  # the bucket's first row, then its times
                again, taken = await writes(mini.format(5))
                assert again == (0, 1, 0) and taken[4] is False
                kept, taken = await writes(
                    f"SELECT * FROM harnessx_reserve_rate('openai/gpt-4o', 10, 0, '{handle.run_id}')"
                )
                assert kept == (0, 1, 1) and taken[4] is True  # the run's hold, taken once
                after, taken = await writes(
                    f"SELECT * FROM harnessx_reserve_rate('openai/gpt-4o', 10, 0, '{handle.run_id}')"
                )
                assert after == (0, 1, 0) and taken[4] is False and taken[0] < 1  # a new one
            finally:
                await conn.close()
        finally:
            await runtime.cancel()
            await asyncio.wait_for(handle.result(), 30)
            await runtime.stop()


async def test_the_gate_settles_a_calls_tokens_off_its_path_within_a_bound(target: BackendTarget) -> None:
    from harnessx._middleware import ModelRequest
    from harnessx._rate_gate import RateGate
    from harnessx.providers._base import TokenUsage

    async with target.open() as store:
        await store.set_rate_limit("openai/*", None, 600)  # ten tokens a second
        gate = RateGate(store, settle_seconds=0.2)
        provider = OpenAIProvider(
            "gpt-owed", api_key="sk-test-not-a-secret", base_url="http://127.0.0.1:9/v1"
        )
        try:
            request = ModelRequest(model="gpt-owed", messages=[], system="", tools=[], max_tokens=100)
            admission = await gate.admit(provider, request)
            assert admission is not None and admission.tokens >= 100
            before = await store.reserve_rate("openai/gpt-owed", 0)  # no tokens: reads tokens_at
            assert before is not None
            gate.settle(admission, TokenUsage(input_tokens=5, output_tokens=5))  # no round trip here
            # Owed for at most settle_seconds, then in the store on its own.
            deadline = time.monotonic() + 30
            while True:
                now = await store.reserve_rate("openai/gpt-owed", 0)
                assert now is not None
                if now.tokens_at < before.tokens_at:
                    break
                assert time.monotonic() < deadline, "the owed tokens never reached the store"
                await asyncio.sleep(0.05)
            assert now.tokens_at == pytest.approx(before.tokens_at - (admission.tokens - 10) * 0.1)
            # Owed again: the next reservation takes it, and nothing is left to send.
            gate.settle(admission, TokenUsage(input_tokens=5, output_tokens=5))
            again = await gate.admit(provider, request)
            assert again is not None and gate._owed == {}
        finally:
            await provider.aclose()


async def test_a_plain_agent_run_obeys_the_stores_limits_when_given_the_store(
    target: BackendTarget, vendor: FakeVendor
) -> None:
    async with target.open() as store:
        await store.set_rate_limit("openai/*", 60, 1_000_000)  # one call a second
        taken = await store.reserve_rate("openai/gpt-plain", 0)  # the bucket's second is taken
        assert taken is not None
        agent = vendor_agent(vendor, "gpt-plain").use_rate_limits(store)
        async with agent, agent.run_stream("Hello") as stream:
            events = [event async for event in stream]
            result = await stream.result()
        assert result.ok and result.output == "Done."
        (waiting,) = [e for e in events if e.type.value == "waiting" and e.data.get("on") == "rate_limit"]
        assert waiting.data["bucket"] == "openai/gpt-plain" and 0 < waiting.data["seconds"] <= 1
        (call,) = vendor.served("gpt-plain")
        assert call.at >= taken.start + 1 - 0.01  # its start, a second after the other call's
        (bucket,) = [b for b in await store.rate_buckets() if b.name == "openai/gpt-plain"]
        assert bucket.waits == 1


async def table_rows(target: BackendTarget, query: str) -> list[tuple[Any, ...]]:
    """Rows read from the test's database, outside the store."""
    if target.kind == "sqlite":
        with sqlite3.connect(target.location) as conn:
            return list(conn.execute(query))
    conn = await asyncpg.connect(target.location, server_settings={"search_path": "harness_x"})
    try:
        return [tuple(row) for row in await conn.fetch(query)]
    finally:
        await conn.close()


async def held_back(store: Any, bucket: str) -> tuple[AgentRuntime, Any]:
    """A pool run that went back to the queue to wait for its budget, its reservation of
    ``bucket`` (an hour from now) kept for it, as a worker's long wait leaves it."""
    runtime = AgentRuntime(AgentRef("a", "v1"), backend=store, execution="pool")
    await runtime.start()
    handle = await runtime.submit("held back")
    ((lease, run_id),) = await store.claim_queued("w", None, 1)
    await store.hold_rate(lease, run_id, bucket, time.time() + 3600, 3599)
    await store.release(lease)
    return runtime, handle


async def test_a_run_cancelled_while_it_waits_for_budget_in_the_queue_leaves_no_hold(
    target: BackendTarget,
) -> None:
    async with target.open() as store:
        await store.set_rate_limit("openai/gpt-held", 1, None)
        runtime, handle = await held_back(store, "openai/gpt-held")
        kept = await table_rows(target, "SELECT run_id, bucket FROM rate_holds")
        assert kept == [(handle.run_id, "openai/gpt-held")]
        await runtime.cancel()  # it is queued: ended without a worker taking it
        result = await asyncio.wait_for(handle.result(), 30)
        assert result.status.value == "cancelled"
        assert await table_rows(target, "SELECT run_id FROM rate_holds") == []
        await runtime.stop()


# Undoing the schema version that drops finished runs' holds, by backend: (its statements,
# its version).
UNDO_FINISHED_HOLDS = {
    "sqlite": ("DROP TRIGGER runs_finished_rate_holds", 12),
    "postgres": (
        "DROP TRIGGER runs_finished_rate_holds ON runs; DROP FUNCTION harnessx_drop_rate_holds()",
        16,
    ),
}


async def test_upgrading_removes_the_holds_of_runs_that_already_finished(target: BackendTarget) -> None:
    undo, version = UNDO_FINISHED_HOLDS[target.kind]
    async with target.open() as store:
        await store.set_rate_limit("openai/gpt-held", 1, None)
        runtime, handle = await held_back(store, "openai/gpt-held")
        waiting, waiting_handle = await held_back(store, "openai/gpt-held")
        session = waiting.session_id
        await runtime.stop()
        await waiting.stop()
    # As a store of the version before left it: the first run cancelled with its hold kept.
    if target.kind == "sqlite":
        with sqlite3.connect(target.location) as conn:
            conn.executescript(f"{undo}; DELETE FROM harnessx_migrations WHERE version = {version};")
            conn.execute(
                "UPDATE runs SET status = 'cancelled', queued_at = NULL WHERE id = ?", (handle.run_id,)
            )
    else:
        conn = await asyncpg.connect(target.location, server_settings={"search_path": "harness_x"})
        try:
            await conn.execute(f"{undo}; DELETE FROM harnessx_migrations WHERE version = {version}")
            await conn.execute(
                "UPDATE runs SET status = 'cancelled', queued_at = NULL WHERE id = $1", handle.run_id
            )
        finally:
            await conn.close()
    assert len(await table_rows(target, "SELECT run_id FROM rate_holds")) == 2
    async with target.open() as store:  # migrates
        kept = await table_rows(target, "SELECT run_id FROM rate_holds")
        assert kept == [(waiting_handle.run_id,)]  # the queued run's hold is still its own
        again = AgentRuntime(AgentRef("a", "v1"), backend=store, execution="pool")
        await again.start(session)
        await again.cancel()  # and the trigger is back: cancelling it drops its hold
        assert await table_rows(target, "SELECT run_id FROM rate_holds") == []
        await again.stop()
