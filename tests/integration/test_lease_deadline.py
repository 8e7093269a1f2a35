"""Before a tool starts, its holder makes sure the lease still holds by its own clock.

A store knows, for each lease this process holds, until when it certainly holds: when the
claim or renewal that last extended it was sent, plus the lease length. The committer
checks that right before a tool call and renews the lease first when it cannot tell, so a
dispatch whose reply came late never starts a tool another process has taken over.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from durable_support import BackendTarget

from harnessx import LeaseLostError
from harnessx._committer import StoreCommitter
from harnessx._state import Delta, Phase
from harnessx.store._protocol import Lease, Renewal, Store

LEASE = 0.6


async def start(store: Store, session_id: str) -> Lease:
    await store.create_session(session_id, None, {})
    lease = await store.claim(session_id, "h")
    await store.create_run(lease, f"run-{session_id}", None, "hi", Delta(Phase.PREPARE_MODEL_CALL))
    return lease


def counting_renewals(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[list[Lease]]:
    calls: list[list[Lease]] = []
    real = store.renew

    async def renew(leases: list[Lease]) -> Renewal:
        calls.append(list(leases))
        return await real(leases)

    monkeypatch.setattr(store, "renew", renew)
    return calls


async def test_a_lease_holds_until_its_last_extension_was_sent_plus_its_length(target: BackendTarget) -> None:
    async with target.open(lease_seconds=LEASE) as store:
        before = time.monotonic()
        lease = await start(store, "s1")
        assert before + LEASE <= store.lease_deadline(lease) <= time.monotonic() + LEASE
        await asyncio.sleep(0.1)
        before = time.monotonic()
        assert (await store.renew([lease])).held == {"s1"}
        assert before + LEASE <= store.lease_deadline(lease) <= time.monotonic() + LEASE
        assert store.lease_deadline(Lease("s1", lease.owner, lease.generation + 1)) == 0.0  # not ours
        await store.release(lease)
        assert store.lease_deadline(lease) == 0.0


async def test_a_lease_taken_over_has_no_deadline_and_cannot_be_confirmed(target: BackendTarget) -> None:
    async with target.open(lease_seconds=LEASE) as store, target.open(lease_seconds=LEASE) as other:
        lease = await start(store, "s1")
        await asyncio.sleep(LEASE)  # expired; nobody renewed it
        taken = await other.claim("s1", "rescuer")
        assert taken.generation == lease.generation + 1
        committer = StoreCommitter(store, lease, last_seq=0)
        with pytest.raises(
            LeaseLostError, match=r"\(another process took the session over\); the tool did not run"
        ):
            await committer.confirm()
        assert store.lease_deadline(lease) == 0.0


async def test_confirming_a_fresh_lease_costs_no_round_trip_and_a_stale_one_is_renewed(
    target: BackendTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with target.open(lease_seconds=LEASE) as store:
        lease = await start(store, "s1")
        renewals = counting_renewals(store, monkeypatch)
        committer = StoreCommitter(store, lease, last_seq=0)
        await committer.confirm()
        assert renewals == []
        await asyncio.sleep(LEASE)  # past the deadline: only a renewal can tell
        await committer.confirm()
        assert renewals == [[lease]]
        assert store.lease_deadline(lease) > time.monotonic()


@pytest.mark.parametrize("target", ["postgres"], indirect=True)
async def test_a_lost_liveness_lock_voids_every_deadline(target: BackendTarget) -> None:
    """Once its liveness connection drops, others may judge the process dead and take its
    leases at once, before they expire: no deadline counts until a renewal after that."""
    import asyncpg

    async with target.open(lease_seconds=30) as store:
        lease = await start(store, "s1")
        assert store.lease_deadline(lease) > time.monotonic() + 20
        conn = await asyncpg.connect(target.location)
        try:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'harnessx-liveness' AND datname = current_database()"
            )
        finally:
            await conn.close()
        deadline = time.monotonic() + 10
        while store.lease_deadline(lease) != 0.0:
            assert time.monotonic() < deadline, "the lost liveness connection went unnoticed"
            await asyncio.sleep(0.02)
        assert (await store.renew([lease])).held == {"s1"}  # re-takes the liveness lock first
        assert store.lease_deadline(lease) > time.monotonic() + 20
