"""Rate leases, on both backends (a real SQLite file, a real PostgreSQL): a reservation that
grants several model calls' starts at once when they may all start now, which the gate then
spends with no round trip; a bucket near its limit grants one call and spaces calls exactly
as before; unspent calls go back to the bucket when the lease expires, when the gate flushes
and when the bucket is paused; a run with a kept reservation still takes it.

Statements are counted at the store's methods (each of reserve_rate and release_rate is one
statement, see test_rate_limits.py), and what they did is read back from the bucket's row."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from durable_support import BackendTarget
from test_rate_limits import held_back

from harnessx._middleware import ModelRequest
from harnessx._rate_gate import RateGate
from harnessx.providers import OpenAIProvider


@pytest.fixture
async def provider() -> AsyncIterator[OpenAIProvider]:
    # Never called: the gate only needs its name and model for the bucket (openai/gpt-lease).
    made = OpenAIProvider("gpt-lease", api_key="sk-test-not-a-secret", base_url="http://127.0.0.1:9/v1")
    yield made
    await made.aclose()


REQUEST = ModelRequest(model="gpt-lease", messages=[], system="", tools=[], max_tokens=100)
BUCKET = "openai/gpt-lease"


class Counted:
    """The store's rate statements, counted as the gate makes them."""

    def __init__(self, store: Any) -> None:
        self.reservations: list[int] = []  # the calls each reservation asked for
        self.releases = 0
        reserve: Callable[..., Awaitable[Any]] = store.reserve_rate
        release: Callable[..., Awaitable[Any]] = store.release_rate

        async def reserve_rate(*args: Any, **kwargs: Any) -> Any:
            self.reservations.append(kwargs.get("calls", 1))
            return await reserve(*args, **kwargs)

        async def release_rate(*args: Any, **kwargs: Any) -> Any:
            self.releases += 1
            return await release(*args, **kwargs)

        store.reserve_rate = reserve_rate
        store.release_rate = release_rate


async def requests_at(store: Any) -> float:
    """The bucket's requests_at, read with a reservation of one more call (one a second,
    ahead of now: it moves requests_at on by exactly 1 s)."""
    probe = await store.reserve_rate(BUCKET, 0)
    assert probe is not None
    return float(probe.requests_at) - 1.0  # one call a second: the probe's own share


async def test_a_store_grants_only_the_calls_that_may_all_start_now(target: BackendTarget) -> None:
    async with target.open() as store:
        # One call a second, 2 s of burst: a fresh bucket lets three start at once (the
        # first, and two more within the burst), not the fourth (1 s away, beyond 0.25 s).
        await store.set_rate_limit(BUCKET, 60, None, burst_seconds=2)
        taken = await store.reserve_rate(BUCKET, 0, calls=10, slack=0.25)
        assert taken is not None and taken.wait == 0 and taken.granted == 3
        assert taken.requests_at == pytest.approx(taken.start + 3)
        # The bucket is now at its limit: a lease asked for grants the one call, which waits
        # exactly as a reservation of one would, and the ones after it are a second apart.
        after = [await store.reserve_rate(BUCKET, 0, calls=10, slack=0.25) for _ in range(3)]
        assert all(t is not None and t.granted == 1 and t.wait > 0.5 for t in after)
        starts = [t.start for t in after if t is not None]
        assert starts == pytest.approx([taken.start + 1, taken.start + 2, taken.start + 3])


async def test_tokens_bound_a_lease_as_requests_do(target: BackendTarget) -> None:
    async with target.open() as store:
        # 600 tokens a minute (10 a second), 10 s of burst: calls of 30 tokens fit four
        # (the first, then 3 s of tokens each while tokens_at - burst <= now + slack).
        await store.set_rate_limit(BUCKET, None, 600, burst_seconds=10)
        taken = await store.reserve_rate(BUCKET, 30, calls=10, slack=0.25)
        assert taken is not None and taken.granted == 4
        assert taken.tokens_at == pytest.approx(taken.start + 12)


async def test_a_non_binding_limit_leases_and_later_calls_make_no_statement(
    target: BackendTarget, provider: OpenAIProvider
) -> None:
    async with target.open() as store:
        # One call a second with a minute of burst: the limit never binds 16 calls.
        await store.set_rate_limit(BUCKET, 60, None, burst_seconds=60)
        counted = Counted(store)
        gate = RateGate(store, lease_seconds=30)  # nothing expires during the test
        admissions = [await gate.admit(provider, REQUEST) for _ in range(16)]
        assert all(a is not None and a.wait == 0 for a in admissions)
        # Each reservation asks for as many calls as the gate made in the lease lifetime:
        # calls 1, 2, 3, 5 and 9 go to the store (1, 1, 2, 4 and 8 calls), the rest are
        # spent from the leases with no statement at all.
        assert counted.reservations == [1, 1, 2, 4, 8]
        assert counted.releases == 0
        first = admissions[0]
        assert first is not None
        # Sixteen calls' starts are in the bucket, and only those.
        assert await requests_at(store) == pytest.approx(first.start + 16, abs=0.01)


async def test_calls_of_a_bucket_at_once_ask_the_store_once(
    target: BackendTarget, provider: OpenAIProvider
) -> None:
    async with target.open() as store:
        await store.set_rate_limit(BUCKET, 60, None, burst_seconds=60)
        counted = Counted(store)
        gate = RateGate(store, lease_seconds=30)
        first, *_ = [await gate.admit(provider, REQUEST) for _ in range(8)]
        assert first is not None and BUCKET not in gate._leases  # spent: the next call asks the store
        asked = len(counted.reservations)
        together = await asyncio.gather(*(gate.admit(provider, REQUEST) for _ in range(8)))
        assert all(a is not None and a.wait == 0 for a in together)
        # The first asks for a lease of 8; the others wait for it and spend it.
        assert counted.reservations[asked:] == [8] and BUCKET not in gate._leases
        assert await requests_at(store) == pytest.approx(first.start + 16, abs=0.01)


async def test_a_bucket_near_its_limit_grants_one_call_and_spaces_them_as_before(
    target: BackendTarget, provider: OpenAIProvider
) -> None:
    async with target.open() as store:
        await store.set_rate_limit(BUCKET, 60, None)  # one a second, no burst
        counted = Counted(store)
        gate = RateGate(store, lease_seconds=30)
        admissions = [await gate.admit(provider, REQUEST) for _ in range(5)]
        starts = [a.start for a in admissions if a is not None]
        assert len(starts) == 5 and len(counted.reservations) == 5  # every call reserved itself
        assert [b - a for a, b in itertools.pairwise(starts)] == pytest.approx([1.0] * 4)
        assert [a.wait > 0 for a in admissions if a is not None] == [False, True, True, True, True]
        assert gate._leases == {}


async def leased(store: Any, gate: RateGate, provider: OpenAIProvider) -> float:
    """Make the gate hold a lease of 8 calls with 7 unspent (one call a second, a minute of
    burst); the bucket's requests_at once it was granted."""
    await store.set_rate_limit(BUCKET, 60, None, burst_seconds=60)
    for _ in range(8):  # the lease size follows the calls made: the ninth asks for 8
        await gate.admit(provider, REQUEST)
    for _ in range(8):  # spend them: now the gate has made 16 calls
        await gate.admit(provider, REQUEST)
    assert BUCKET not in gate._leases
    await gate.admit(provider, REQUEST)  # asks for 16, spends one
    lease = gate._leases[BUCKET]
    assert lease.left == 15
    return lease.end


async def test_an_unspent_lease_is_given_back_when_it_expires(
    target: BackendTarget, provider: OpenAIProvider
) -> None:
    async with target.open() as store:
        counted = Counted(store)
        gate = RateGate(store, lease_seconds=2)
        end = await leased(store, gate, provider)
        deadline = time.monotonic() + 30
        while counted.releases == 0:  # off the call's path, once the lease's 2 s are over
            assert time.monotonic() < deadline, "the expired lease was never given back"
            await asyncio.sleep(0.05)
        assert BUCKET not in gate._leases
        assert await requests_at(store) == pytest.approx(end - 15, abs=0.01)  # 15 calls back
        # The next call asks the store again; the unspent ones cannot be spent any more.
        reserved = len(counted.reservations)
        await gate.admit(provider, REQUEST)
        assert len(counted.reservations) == reserved + 1


async def test_an_expired_lease_rides_the_next_reservation_back(
    target: BackendTarget, provider: OpenAIProvider
) -> None:
    async with target.open() as store:
        counted = Counted(store)
        gate = RateGate(store, lease_seconds=30)
        end = await leased(store, gate, provider)
        gate._leases[BUCKET].expires = time.monotonic()  # as if its 30 s were over
        await gate.admit(provider, REQUEST)  # gives the 15 back, then reserves afresh
        assert counted.releases == 0
        lease = gate._leases.get(BUCKET)
        granted = 1 + (lease.left if lease is not None else 0)
        assert lease is None or lease.end == pytest.approx(end - 15 + granted)


async def test_an_unspent_lease_is_given_back_when_the_gate_flushes(
    target: BackendTarget, provider: OpenAIProvider
) -> None:
    async with target.open() as store:
        counted = Counted(store)
        gate = RateGate(store, lease_seconds=30)
        end = await leased(store, gate, provider)
        await gate.flush()  # a worker or runtime stopping
        assert counted.releases == 1 and gate._leases == {}
        assert await requests_at(store) == pytest.approx(end - 15, abs=0.01)


async def test_a_pause_drops_the_lease(target: BackendTarget, provider: OpenAIProvider) -> None:
    async with target.open() as store:
        counted = Counted(store)
        gate = RateGate(store, lease_seconds=30)
        end = await leased(store, gate, provider)
        admission = await gate.admit(provider, REQUEST)  # a leased call the vendor refuses
        assert admission is not None and len(gate._leases) == 1
        await gate.pause(admission, 5)  # Retry-After: 5
        assert gate._leases == {} and counted.releases == 1
        reserved = len(counted.reservations)
        after = await gate.admit(provider, REQUEST)  # from the store, and it waits the pause out
        assert len(counted.reservations) == reserved + 1
        assert after is not None and after.wait > 4  # it starts when the pause ends
        assert await requests_at(store) == pytest.approx(end - 14 + 1, abs=0.01)  # 14 back, 1 more


async def test_a_run_with_a_kept_reservation_still_takes_it(
    target: BackendTarget, provider: OpenAIProvider
) -> None:
    async with target.open() as store:
        gate = RateGate(store, lease_seconds=30)
        await leased(store, gate, provider)
        runtime, handle = await held_back(store, BUCKET)  # its reservation: an hour from now
        try:
            loaded = await store.load_run(handle.run_id)  # what a worker claiming it reads
            assert loaded is not None and loaded.rate_holds == (BUCKET,)
            left = gate._leases[BUCKET].left
            kept = await gate.admit(provider, REQUEST, handle.run_id)
            assert kept is not None and kept.held and 3500 < kept.wait <= 3600
            assert gate._leases[BUCKET].left == left  # the lease is other runs' still
            again = await store.load_run(handle.run_id)
            assert again is not None and again.rate_holds == ()
        finally:
            await runtime.cancel()
            await asyncio.wait_for(handle.result(), 30)
            await runtime.stop()
