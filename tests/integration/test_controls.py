"""The pause/cancel request's one lifecycle, on both backends (see ``Store.set_control``).

Written by the operator's verb only while another process drives the run; taken by that
process's next lease renewal, exactly once (the renewal clears it in the same statement);
dropped by the commit that stops the run if it was not taken by then. So a request issued at
any moment is delivered once or meets a stopped run (and the verb acts on it itself): it is
never lost while the run runs, and never reaches the execution after a resume.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from durable_support import BackendTarget

from harnessx._leases import LeaseKeeper
from harnessx._results import RunStatus
from harnessx._state import Delta, Phase, RunPatch
from harnessx.store._protocol import Lease, Store


async def running(store: Store, session_id: str, run_id: str) -> Lease:
    """A session leased to ``store``'s process with its run running."""
    await store.create_session(session_id, "sales:v1", {})
    lease = await store.claim(session_id, "holder")
    await store.create_run(lease, run_id, None, "hi", Delta(Phase.PREPARE_MODEL_CALL))
    return lease


async def stop(store: Store, lease: Lease, run_id: str, status: RunStatus = RunStatus.PAUSED) -> None:
    """The holder's commit that stops the run (it keeps the lease: it lets go later)."""
    state = await store.load_state(run_id)
    await store.commit(lease, state, Delta(Phase.PREPARE_MODEL_CALL, run=RunPatch(status=status)), [])


async def test_a_request_is_taken_once_by_the_holders_renewal(target: BackendTarget) -> None:
    async with target.open() as holder, target.open() as operator:
        lease = await running(holder, "s1", "r1")
        assert await operator.set_control("s1", "pause")
        session = await operator.get_session("s1")
        assert session is not None and session.control == "pause"  # pending, visible
        assert await holder.pending_controls() == {"s1": "pause"}
        assert (await holder.renew([lease])).controls == {"s1": "pause"}
        assert (await holder.renew([lease])).controls == {}  # taken: never again
        session = await operator.get_session("s1")
        assert session is not None and session.control is None
        # A later request replaces one not taken yet; the renewal takes the latest.
        assert await operator.set_control("s1", "pause")
        assert await operator.set_control("s1", "cancel")
        assert (await holder.renew([lease])).controls == {"s1": "cancel"}
        assert (await holder.renew([lease])).controls == {}


async def test_a_request_is_written_only_while_the_run_runs_and_the_session_is_held(
    target: BackendTarget,
) -> None:
    async with target.open() as holder, target.open() as operator:
        lease = await running(holder, "s1", "r1")
        await stop(holder, lease, "r1")  # paused, still leased
        assert not await operator.set_control("s1", "cancel")
        await holder.release(lease)
        assert not await operator.set_control("s1", "cancel")  # not held: the verb acts itself
        assert not await operator.set_control("no-such-session", "cancel")
        session = await operator.get_session("s1")
        assert session is not None and session.control is None
        assert (await holder.renew([await holder.claim("s1", "again")])).controls == {}


@pytest.mark.parametrize("status", [RunStatus.PAUSED, RunStatus.COMPLETED, RunStatus.CANCELLED])
async def test_a_request_not_taken_goes_with_the_commit_that_stops_the_run(
    target: BackendTarget, status: RunStatus
) -> None:
    """Never re-applied after a resume: the execution it was meant for has ended."""
    async with target.open() as holder, target.open() as operator:
        lease = await running(holder, "s1", "r1")
        assert await operator.set_control("s1", "pause")
        await stop(holder, lease, "r1", status)
        session = await operator.get_session("s1")
        assert session is not None and session.control is None
        await holder.release(lease)
        resumed = await holder.claim("s1", "resumer")
        assert (await holder.renew([resumed])).controls == {}


async def test_a_request_outlives_a_holder_that_died_before_taking_it(target: BackendTarget) -> None:
    """Never lost: the run did not stop, so whoever drives it next takes it."""
    async with target.open() as operator:
        holder = target.open()
        await holder.initialize()
        await running(holder, "s1", "r1")
        assert await operator.set_control("s1", "cancel")
        await holder.aclose()  # dies: its liveness goes, the request stays
        async with target.open() as successor:
            lease = await successor.claim("s1", "next")
            assert (await successor.renew([lease])).controls == {"s1": "cancel"}
            assert (await successor.renew([lease])).controls == {}


async def test_a_request_racing_the_stop_is_taken_or_refused_never_left_behind(target: BackendTarget) -> None:
    """A request issued at any moment around the commit that stops the run: either it is
    written first (and that commit drops it) or it is refused; none is left on a stopped run
    for a later execution."""
    async with target.open() as holder, target.open() as operator:
        outcomes = set()
        for n in range(20):
            lease = await running(holder, f"s{n}", f"r{n}")
            written, _ = await asyncio.gather(
                operator.set_control(f"s{n}", "pause"), stop(holder, lease, f"r{n}")
            )
            outcomes.add(written)
            session = await operator.get_session(f"s{n}")
            assert session is not None and session.control is None, n
        assert outcomes  # (which of the two wins varies; both must leave nothing behind)


async def test_the_lease_keeper_takes_a_request_at_once_not_at_its_next_beat(target: BackendTarget) -> None:
    """The renewal is the only delivery; a request wakes it (PostgreSQL: a notification;
    SQLite: a look every 0.25 s), so it arrives long before the 60 s beat."""
    async with target.open() as holder, target.open() as operator:
        lease = await running(holder, "s1", "r1")
        taken: list[str] = []
        keeper = LeaseKeeper(holder, 60.0)
        keeper.hold(lease, lambda _: None, lambda _, request: taken.append(request))
        try:
            await asyncio.sleep(0.3)  # the keeper is waiting for its beat
            assert await operator.set_control("s1", "pause")
            deadline = time.monotonic() + 20
            while not taken:
                assert time.monotonic() < deadline, "the request was not taken"
                await asyncio.sleep(0.02)
            assert taken == ["pause"]
            session = await operator.get_session("s1")
            assert session is not None and session.control is None
        finally:
            await keeper.aclose()
