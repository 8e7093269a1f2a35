"""The pause/cancel request's one lifecycle, on both backends (see ``Store.set_control``).

Written by the operator's verb only while another process drives the run; returned by every
lease renewal of its holder (and of whoever holds the run next) until the commit that stops
the run, which has acted on it, clears it. So a request issued at any moment reaches the
execution or meets a stopped run (and the verb acts on it itself): it is never lost while
the run runs, also when a renewal's reply is lost, and never reaches the execution after a
resume. A cancel is never overtaken by a pause: a later pause leaves it in place, and a run
that pauses (or begins to wait) with a cancel on it is cancelled by its driver.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from typing import Any

import asyncpg
import pytest
from durable_support import BackendTarget

from harnessx import Agent, AgentRuntime, ProviderResponse, ScriptedProvider, ScriptedRequest, ToolCall
from harnessx._errors import StorageError
from harnessx._leases import LeaseKeeper
from harnessx._results import RunStatus
from harnessx._state import Delta, Phase, RunPatch
from harnessx.store._protocol import Lease, Store
from harnessx.store._queries import load_queries
from harnessx.store._records import Renewal
from harnessx.testing._round_trips import PostgresRoundTrips


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


async def test_a_request_is_returned_by_every_renewal_until_the_run_stops(target: BackendTarget) -> None:
    async with target.open() as holder, target.open() as operator:
        lease = await running(holder, "s1", "r1")
        assert await operator.set_control("s1", "pause")
        session = await operator.get_session("s1")
        assert session is not None and session.control == "pause"  # pending, visible
        assert await holder.pending_controls() == {"s1": "pause"}
        assert (await holder.renew([lease])).controls == {"s1": "pause"}
        assert (await holder.renew([lease])).controls == {"s1": "pause"}  # kept: not taken
        assert await holder.pending_controls() == {}  # returned: no wake-up for it any more
        # A cancel replaces a pause; a pause never replaces a cancel.
        assert await operator.set_control("s1", "cancel")
        assert await holder.pending_controls() == {"s1": "cancel"}
        assert (await holder.renew([lease])).controls == {"s1": "cancel"}
        assert await operator.set_control("s1", "pause")
        assert (await holder.renew([lease])).controls == {"s1": "cancel"}
        session = await operator.get_session("s1")
        assert session is not None and session.control == "cancel"
        await stop(holder, lease, "r1", RunStatus.CANCELLED)  # acted on: cleared
        assert (await holder.renew([lease])).controls == {}
        session = await operator.get_session("s1")
        assert session is not None and session.control is None


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
async def test_a_request_goes_with_the_commit_that_stops_the_run(
    target: BackendTarget, status: RunStatus
) -> None:
    """Never re-applied after a resume: the execution it was meant for has ended, whether
    a renewal returned it first or not."""
    async with target.open() as holder, target.open() as operator:
        lease = await running(holder, "s1", "r1")
        assert await operator.set_control("s1", "pause")
        await stop(holder, lease, "r1", status)
        session = await operator.get_session("s1")
        assert session is not None and session.control is None
        await holder.release(lease)
        resumed = await holder.claim("s1", "resumer")
        assert (await holder.renew([resumed])).controls == {}
        lease = await running(holder, "s2", "r2")
        assert await operator.set_control("s2", "pause")
        assert (await holder.renew([lease])).controls == {"s2": "pause"}
        await stop(holder, lease, "r2", status)
        assert (await holder.renew([lease])).controls == {}


@pytest.mark.parametrize("status", [RunStatus.PAUSED, RunStatus.AWAITING_INPUT])
async def test_a_cancel_outlives_a_commit_that_only_pauses_the_run(
    target: BackendTarget, status: RunStatus
) -> None:
    """A pause (or a wait for input) decided before a cancel arrived does not drop it: the
    driver finds it after that commit (``Committer.pending_cancel``) and cancels the run;
    the commit that finishes the run clears it."""
    async with target.open() as holder, target.open() as operator:
        lease = await running(holder, "s1", "r1")
        assert await operator.set_control("s1", "cancel")
        await stop(holder, lease, "r1", status)
        session = await operator.get_session("s1")
        assert session is not None and session.control == "cancel"
        await stop(holder, lease, "r1", RunStatus.CANCELLED)
        session = await operator.get_session("s1")
        assert session is not None and session.control is None


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
            assert (await successor.renew([lease])).controls == {"s1": "cancel"}  # until it acts


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


async def test_the_lease_keeper_hands_a_request_over_at_once_and_once(target: BackendTarget) -> None:
    """A request wakes the keeper (PostgreSQL: a notification; SQLite: a look every 0.25 s),
    so it arrives long before the 60 s beat; renewals that return it again do not hand it
    over again, but a cancel that replaced it is handed over."""
    async with target.open() as holder, target.open() as operator:
        lease = await running(holder, "s1", "r1")
        taken: list[str] = []
        keeper = LeaseKeeper(holder, 60.0)
        keeper.hold(lease, lambda _: None, lambda _, request: taken.append(request))
        try:
            await asyncio.sleep(0.3)  # the keeper is waiting for its beat
            assert await operator.set_control("s1", "pause")
            await until(lambda: taken == ["pause"], "the pause was not handed over")
            await keeper.renew_now()
            await keeper.renew_now()
            assert taken == ["pause"]
            assert await operator.set_control("s1", "cancel")
            await until(lambda: taken == ["pause", "cancel"], "the cancel was not handed over")
        finally:
            await keeper.aclose()


async def until(check: Any, what: str, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


RENEW_LEASES = {kind: load_queries(kind)["renew_leases"] for kind in ("sqlite", "postgres")}


async def table_rows(target: BackendTarget, query: str, *args: Any) -> list[tuple[Any, ...]]:
    """Rows read (or written) outside the store, on the test's database."""
    if target.kind == "sqlite":
        with sqlite3.connect(target.location) as conn:
            return list(conn.execute(query, args))
    conn = await asyncpg.connect(target.location, server_settings={"search_path": "harness_x"})
    try:
        return [tuple(row) for row in await conn.fetch(query.replace("?", "$1"), *args)]
    finally:
        await conn.close()


def _expiry_moved(target: BackendTarget, before: Any) -> bool:
    with sqlite3.connect(target.location) as conn:
        (now,) = conn.execute("SELECT lease_expires_at FROM sessions WHERE id = 's1'").fetchone()
    return bool(now != before)


async def renew_losing_the_reply(target: BackendTarget, holder: Any, lease: Lease, proxy: Any) -> Renewal:
    """Renew ``lease`` with the reply lost after the store committed the renewal, then as the
    holder goes on: the renewal that arrives (the store's own retry, else the next one).
    PostgreSQL: the proxy lets the statement reach the server and withholds its answer,
    then resets the connection once the renewal shows in the database. SQLite: the caller
    stops waiting between the commit and the reply (its result is never delivered)."""
    ((before,),) = await table_rows(target, "SELECT lease_expires_at FROM sessions WHERE id = ?", "s1")
    if target.kind == "postgres":
        proxy.withhold_reply(RENEW_LEASES["postgres"])
        renewing = asyncio.create_task(holder.renew([lease]))
        await asyncio.wait_for(proxy.withheld.wait(), 20)
        query = "SELECT lease_expires_at FROM sessions WHERE id = ?"
        deadline = time.monotonic() + 20
        while (await table_rows(target, query, "s1"))[0][0] == before:
            assert time.monotonic() < deadline, "the withheld renewal was never committed"
            await asyncio.sleep(0.01)
        assert proxy.cut() == 1
        try:
            return await asyncio.wait_for(renewing, 30)  # retried on a new connection
        except StorageError:
            return await holder.renew([lease])
    # SQLite: hold the database thread while the renewal queues behind it, then let it run
    # and, before the event loop can deliver its result, stop waiting for it.
    started, gate = threading.Event(), threading.Event()

    def hold(conn: Any) -> None:
        started.set()
        gate.wait(20)

    blocker = asyncio.create_task(holder._call(hold))
    queue = holder._executor._work_queue
    while not started.is_set():  # the thread runs the blocker
        await asyncio.sleep(0.001)
    renewing = asyncio.create_task(holder.renew([lease]))
    while queue.qsize() < 1:  # the renewal waits behind it
        await asyncio.sleep(0)
    gate.set()
    deadline = time.monotonic() + 20
    while not _expiry_moved(target, before):  # no await: the loop delivers nothing meanwhile
        assert time.monotonic() < deadline, "the renewal was never committed"
        time.sleep(0.001)  # noqa: ASYNC251 - the point: the event loop must not run
    renewing.cancel()
    await blocker
    with pytest.raises(asyncio.CancelledError):
        await renewing
    return await holder.renew([lease])


@pytest.mark.parametrize("control", ["pause", "cancel"])
async def test_a_request_whose_renewal_reply_was_lost_is_delivered(
    target: BackendTarget, control: str
) -> None:
    """The renewal that returned the request committed, and its reply never arrived (a
    connection dropped after the commit): the request is still on the session, and the
    renewal that does arrive returns it."""
    proxy: Any = None
    async with target.open() as operator:
        if target.kind == "postgres":
            proxy = PostgresRoundTrips(target.location)
            await proxy.__aenter__()
        try:
            async with target.open_at(proxy.dsn) if proxy else target.open() as holder:
                lease = await running(holder, "s1", "r1")
                assert await operator.set_control("s1", control)
                renewal = await renew_losing_the_reply(target, holder, lease, proxy)
                assert renewal.held == {"s1"}
                assert renewal.controls == {"s1": control}
        finally:
            if proxy is not None:
                await proxy.__aexit__(None, None, None)


async def test_a_run_that_pauses_with_a_cancel_on_it_ends_cancelled(target: BackendTarget) -> None:
    """Cancel overtaken by pause: the driver has decided to pause (``runtime.pause()`` during
    a tool call) and, before its pause commit, another process's cancel reached the session
    but not yet the driver (its wake-up still on the way; here it never comes: the request
    is marked as returned, so only the 20 s beat would bring it). The run ends cancelled,
    not paused, and nothing is left on the session."""
    runtime: AgentRuntime | None = None

    def script(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            return ProviderResponse(tool_calls=[ToolCall("c1", "work", {})])
        return "done"

    agent = Agent(provider=ScriptedProvider(script))

    @agent.tools.register(replay_policy="safe")
    async def work() -> str:
        """Work, while the run is asked to pause and then to cancel."""
        assert runtime is not None and runtime.session_id is not None
        await runtime.pause()
        await table_rows(
            target,
            "UPDATE sessions SET control = 'cancel', control_sent = TRUE WHERE id = ?",
            runtime.session_id,
        )
        return "worked"

    async with target.open(lease_seconds=60) as store:
        runtime = AgentRuntime(agent, backend=store)
        result = await runtime.run("go")
        assert result.status is RunStatus.CANCELLED, result
        session = await store.get_session(result.session_id)
        assert session is not None and session.control is None
        record = await store.latest_run(result.session_id)
        assert record is not None and record.status is RunStatus.CANCELLED
        await runtime.stop()
