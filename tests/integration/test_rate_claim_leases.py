"""Rate leases asked for with a claim, on both backends (a real SQLite file, a real
PostgreSQL): a worker's gate that holds no lease of the bucket its runs open with asks the
claim to reserve the taken runs' first model calls in its own transaction
(``RateGate.ahead``, ``Store.claim_queued(rate=...)``), so those calls make no statement of
their own. At most one call a run taken; none when the claim takes no run, when the first
call would wait (a full or paused bucket: nothing is written, the calls reserve and wait as
before) or when nothing limits the bucket any more; calls a guess did not need go back.

Statements are counted at the store's methods (test_rate_leases.py's ``Counted``), and what
they did is read back from the bucket's row."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from durable_support import BackendTarget
from test_rate_leases import BUCKET, REQUEST, Counted, requests_at

from harnessx import AgentRef, AgentRuntime
from harnessx._middleware import ModelRequest
from harnessx._rate_gate import RateGate
from harnessx.providers import OpenAIProvider
from harnessx.store._scheduling import RateAsk


@pytest.fixture
async def provider() -> AsyncIterator[OpenAIProvider]:
    # Never called: the gate only needs its name and model for the bucket (openai/gpt-lease).
    made = OpenAIProvider("gpt-lease", api_key="sk-test-not-a-secret", base_url="http://127.0.0.1:9/v1")
    yield made
    await made.aclose()


async def queue_runs(store: Any, count: int) -> list[AgentRuntime]:
    """``count`` runs in the pool's queue, each in a session of its own, for a claim to take
    (``stop_all`` the runtimes at the end)."""
    runtimes = []
    for n in range(count):
        runtime = AgentRuntime(AgentRef("a", "v1"), backend=store, execution="pool")
        await runtime.start()
        await runtime.submit(f"ahead {n}")
        runtimes.append(runtime)
    return runtimes


async def stop_all(runtimes: list[AgentRuntime]) -> None:
    for runtime in runtimes:
        await runtime.stop()


async def opened(gate: RateGate, provider: OpenAIProvider) -> Any:
    """One opening call through ``gate`` (a driver's first): what ``ahead`` learns from."""
    admission = await gate.admit(provider, REQUEST, opening=True)
    assert admission is not None and admission.wait == 0
    return admission


async def claim_one(store: Any, gate: RateGate) -> tuple[RateAsk, Any]:
    """A claim of one run carrying the gate's ask for its first call, and what it took."""
    ask = gate.ahead(1)
    assert ask is not None
    return ask, await store.claim_queued("w", None, 1, rate=ask)


async def test_a_claim_leases_one_first_call_for_each_run_it_takes(
    target: BackendTarget, provider: OpenAIProvider
) -> None:
    async with target.open() as store:
        await store.set_rate_limit(BUCKET, 60, None, burst_seconds=60)  # never binds here
        runtimes = await queue_runs(store, 2)
        gate = RateGate(store, lease_seconds=30)
        first = await opened(gate, provider)
        ask = gate.ahead(4)  # a worker with four free slots
        assert ask == RateAsk(BUCKET, first.tokens, 4, 30)
        assert gate.ahead(4) is None  # asked already: one claim carries it, no other
        claims = await store.claim_queued("w", None, 4, rate=ask)
        assert len(claims) == 2 and claims.rate is not None
        assert claims.rate.granted == 2 and claims.rate.wait == 0  # one a run taken, not four
        gate.taken(ask, claims.rate)
        counted = Counted(store)
        for _ in range(2):
            await opened(gate, provider)
        assert counted.reservations == [] and BUCKET not in gate._leases  # spent, no statement
        assert await requests_at(store) == pytest.approx(first.start + 3, abs=0.01)  # only those
        await stop_all(runtimes)


async def test_a_claim_that_takes_no_run_leases_nothing(
    target: BackendTarget, provider: OpenAIProvider
) -> None:
    async with target.open() as store:
        await store.set_rate_limit(BUCKET, 60, None, burst_seconds=60)
        gate = RateGate(store, lease_seconds=30)
        first = await opened(gate, provider)
        ask = gate.ahead(2)
        assert ask is not None
        claims = await store.claim_queued("w", None, 2, rate=ask)
        assert claims == [] and claims.rate is None
        gate.taken(ask, claims.rate)
        assert gate._leases == {} and gate.ahead(2) == ask  # free to ask again
        assert await requests_at(store) == pytest.approx(first.start + 1, abs=0.01)


async def test_a_full_bucket_grants_a_claim_nothing_and_calls_wait_as_before(
    target: BackendTarget, provider: OpenAIProvider
) -> None:
    async with target.open() as store:
        await store.set_rate_limit(BUCKET, 60, None)  # one a second, no burst
        runtimes = await queue_runs(store, 1)
        counted = Counted(store)
        gate = RateGate(store, lease_seconds=30)
        first = await opened(gate, provider)
        ask, claims = await claim_one(store, gate)  # the next start is a second away
        assert len(claims) == 1 and claims.rate is not None and claims.rate.granted == 0
        gate.taken(ask, claims.rate)
        assert gate._leases == {}
        after = await gate.admit(provider, REQUEST, opening=True)
        assert after is not None and 0.5 < after.wait <= 1.0  # it waits, as a call of its own did
        assert after.start == pytest.approx(first.start + 1, abs=0.01)  # nothing was taken
        assert counted.reservations == [1, 1] and counted.releases == 0
        await stop_all(runtimes)


@pytest.mark.parametrize("change", ["paused", "limit removed"])
async def test_a_claim_leases_nothing_from_a_paused_or_unlimited_bucket(
    target: BackendTarget, provider: OpenAIProvider, change: str
) -> None:
    async with target.open() as store:
        await store.set_rate_limit(BUCKET, 60, None, burst_seconds=60)
        runtimes = await queue_runs(store, 1)
        gate = RateGate(store, lease_seconds=30)
        await opened(gate, provider)  # the gate reads the limits: it asks by that copy
        if change == "paused":
            await store.pause_rate(BUCKET, 30)  # a vendor's Retry-After on another worker's call
        else:
            await store.remove_rate_limit(BUCKET)
        ask, claims = await claim_one(store, gate)
        assert len(claims) == 1  # the run is taken all the same
        if change == "paused":
            assert claims.rate is not None and claims.rate.granted == 0
        else:
            assert claims.rate is None
        gate.taken(ask, claims.rate)
        assert gate._leases == {} and gate._ahead == {}
        await stop_all(runtimes)


async def test_a_guess_that_misses_gives_its_calls_back(
    target: BackendTarget, provider: OpenAIProvider
) -> None:
    async with target.open() as store:
        # One call in 10 s, 10 minutes of burst: the leased calls' share of the schedule lies
        # well ahead of the moment they are given back, so all of it comes back.
        await store.set_rate_limit(BUCKET, 6, None, burst_seconds=600)
        runtimes = await queue_runs(store, 2)
        counted = Counted(store)
        gate = RateGate(store, lease_seconds=1)
        first = await opened(gate, provider)
        ask = gate.ahead(2)  # the claimed runs never call the model (cancelled, say)
        assert ask is not None
        claims = await store.claim_queued("w", None, 2, rate=ask)
        gate.taken(ask, claims.rate)
        assert gate._leases[BUCKET].left == 2
        deadline = time.monotonic() + 30
        while counted.releases == 0:  # given back unspent when its lease lifetime is over
            assert time.monotonic() < deadline, "the unspent calls were never given back"
            await asyncio.sleep(0.05)
        probe = await store.reserve_rate(BUCKET, 0)  # moves requests_at on by its own 10 s
        assert probe is not None
        assert probe.requests_at - 10 == pytest.approx(first.start + 10, abs=0.01)  # the first call's
        await stop_all(runtimes)


async def test_a_call_larger_than_the_guess_reserves_itself_and_gives_the_guess_back(
    target: BackendTarget, provider: OpenAIProvider
) -> None:
    async with target.open() as store:
        # A token limit as well: the lease holds the tokens of the largest opening call seen.
        await store.set_rate_limit(BUCKET, 60, 6_000_000, burst_seconds=60)
        runtimes = await queue_runs(store, 1)
        gate = RateGate(store, lease_seconds=30)
        first = await opened(gate, provider)
        ask, claims = await claim_one(store, gate)
        assert ask.tokens == first.tokens  # its 100 to reply, and its input
        gate.taken(ask, claims.rate)
        counted = Counted(store)
        larger = ModelRequest(model="gpt-lease", messages=[], system="x" * 400, tools=[], max_tokens=100)
        admission = await gate.admit(provider, larger, opening=True)
        # Not covered: one reservation of its own, the guessed call given back with it.
        assert admission is not None and admission.tokens == first.tokens + 100
        assert counted.reservations == [1] and counted.releases == 0
        assert BUCKET not in gate._leases
        await stop_all(runtimes)


async def test_nothing_is_asked_ahead_without_one_known_limited_bucket(
    target: BackendTarget, provider: OpenAIProvider
) -> None:
    async with target.open() as store:
        await store.set_rate_limit("openai/*", 60, None, burst_seconds=60)
        gate = RateGate(store, lease_seconds=30)
        await gate.refresh()
        assert gate.ahead(2) is None  # no opening call seen yet: nothing to go by
        for _ in range(3):  # the third call leases: a gate holding a lease asks nothing ahead
            await gate.admit(provider, REQUEST, opening=True)
        assert BUCKET in gate._leases and gate.ahead(2) is None
        gate._leases.clear()
        other = ModelRequest(model="gpt-other", messages=[], system="", tools=[], max_tokens=100)
        await gate.admit(provider, other, opening=True)
        assert gate.ahead(2) is None  # the runs opened in two buckets: which one is not known
        for _ in range(8):
            await gate.admit(provider, REQUEST, opening=True)
        gate._leases.clear()
        assert gate.ahead(2) is not None  # the last 8 opened in one bucket
        gate._ahead.clear()
        await store.remove_rate_limit("openai/*")
        await gate.refresh()
        assert gate.ahead(2) is None  # one bucket, but nothing limits it any more


async def test_a_worker_reserves_its_claimed_runs_first_calls_with_the_claim(target: BackendTarget) -> None:
    """A pool worker reserves the first model call of a run it claims in the claim itself:
    that call asks the store for nothing. Its first run has nothing to go by."""
    from chaos.agents import registry
    from harness_workers._worker import Worker, WorkerConfig

    async with target.open() as store:
        await store.set_rate_limit("scripted/*", 1e9, 1e12)  # never binds; every call reserves
        seen: list[str] = []  # claims that took a run (and the calls they leased), reservations
        reserve, claim = store.reserve_rate, store.claim_queued

        async def reserve_rate(*args: Any, **kwargs: Any) -> Any:
            seen.append("reserve")
            return await reserve(*args, **kwargs)

        async def claim_queued(*args: Any, rate: RateAsk | None = None) -> Any:
            claims = await claim(*args, rate=rate)
            if claims:
                seen.append("claim" if claims.rate is None else f"claim+{claims.rate.granted}")
            return claims

        store.reserve_rate, store.claim_queued = reserve_rate, claim_queued
        worker = Worker(store, registry, WorkerConfig(concurrency=2, stats_interval=60))
        running = asyncio.create_task(worker.run())
        try:
            for n in range(3):
                start = len(seen)
                # Runs a moment apart (more than a lease's lifetime): no lease is left over.
                await asyncio.sleep(0.3)
                runtime = AgentRuntime(AgentRef("safe", "v1"), backend=store, execution="pool")
                handle = await runtime.submit(f"Write report {n}.")
                assert (await asyncio.wait_for(handle.result(), 60)).ok
                await runtime.stop()
                # Two model calls a run: the tool call, then the answer (its own reservation).
                opening = ["claim", "reserve"] if n == 0 else ["claim+1"]
                assert seen[start:] == [*opening, "reserve"], (n, seen[start:])
        finally:
            worker.drain()
            await running
