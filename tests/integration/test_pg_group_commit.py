"""Group commit on PostgreSQL: checkpoints of several sessions that queue up go in one
statement, and each keeps its own fence and its own outcome (``_pg_group_commit``)."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from harnessx import LeaseLostError, StorageError
from harnessx._events import RunEvent, RunEventType
from harnessx._results import RunResult, RunStatus
from harnessx._state import Delta, Phase, RunPatch, RunState, ToolEntry, ToolStatus
from harnessx.providers._base import ToolCall
from harnessx.store import PostgresBackend
from harnessx.store._protocol import Lease
from harnessx.testing._round_trips import PostgresRoundTrips

SCHEMA = "harness_x"
GROUP = "WITH members AS"  # the group statement's first line


async def sql(dsn: str, query: str, *args: Any) -> list[Any]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


def event(run_id: str, seq: int, kind: RunEventType = RunEventType.TEXT_DELTA, data: Any = "") -> RunEvent:
    return RunEvent(kind, data or f"e{seq}", run_id=run_id, cursor=str(seq))


def tool(run_id: str, status: ToolStatus) -> ToolEntry:
    return ToolEntry(f"{run_id}:1:call_1", 1, 0, ToolCall("call_1", "report", {"n": 1}), "safe", status)


async def started(backend: PostgresBackend, session_id: str) -> tuple[Lease, RunState]:
    """A session with a run at its first boundary (one message, one event)."""
    run_id = f"{session_id}-run"
    await backend.create_session(session_id, None, {})
    lease = await backend.claim(session_id, "h")
    start = Delta(
        Phase.PREPARE_MODEL_CALL, messages=[{"role": "user", "content": "hi"}], events=[event(run_id, 1)]
    )
    await backend.create_run(lease, run_id, None, "hi", start)
    return lease, await backend.load_state(run_id)


def steps(run_id: str) -> list[Delta]:
    """A run's boundaries after its first, each kind a checkpoint can be: the model's reply
    (messages, the run row), a tool prepared, dispatched, its raw and completed result (tool
    rows, progress alone), the next call's input, and the finish."""
    result = RunResult("", run_id, output="done", status=RunStatus.COMPLETED)
    return [
        Delta(
            Phase.MODEL_CALL,
            messages=[{"role": "assistant", "content": "On it."}],
            run=RunPatch(iteration=1),
            events=[event(run_id, 2)],
        ),
        Delta(Phase.PREPARE_TOOLS, tools=[tool(run_id, ToolStatus.PREPARED)], events=[event(run_id, 3)]),
        Delta(Phase.DISPATCH, tools=[tool(run_id, ToolStatus.STARTED)]),
        Delta(Phase.RAW_RESULT, tools=[tool(run_id, ToolStatus.RAW_COMPLETED)], events=[event(run_id, 4)]),
        Delta(
            Phase.PREPARE_MODEL_CALL,
            messages=[{"role": "tool", "tool_call_id": "call_1", "content": "ok"}],
            events=[event(run_id, 5), event(run_id, 6)],
        ),
        Delta(
            Phase.FINISH,
            run=RunPatch(status=RunStatus.COMPLETED, output="done"),
            events=[event(run_id, 7, RunEventType.RUN_RESULT, result)],
        ),
    ]


async def stored(dsn: str, session_id: str) -> dict[str, Any]:
    """What the database holds of a session and its run, without ids, times and generations."""
    run_id = f"{session_id}-run"
    (session,) = await sql(
        dsn,
        f"SELECT lease_owner IS NULL, message_count, current_run IS NULL, current_phase, current_event_count "
        f"FROM {SCHEMA}.sessions WHERE id = $1",
        session_id,
    )
    (run,) = await sql(
        dsn,
        f"SELECT status, phase, iteration, usage::text, output, event_count FROM {SCHEMA}.runs WHERE id = $1",
        run_id,
    )
    messages = await sql(
        dsn, f"SELECT seq, body::text FROM {SCHEMA}.messages WHERE session_id = $1 ORDER BY seq", session_id
    )
    tools = await sql(dsn, f"SELECT status, attempt FROM {SCHEMA}.tool_calls WHERE run_id = $1", run_id)
    events = await sql(
        dsn, f"SELECT seq, type, data::text FROM {SCHEMA}.events WHERE run_id = $1 ORDER BY seq", run_id
    )
    return {
        "session": tuple(session),
        "run": tuple(run),
        "messages": [tuple(r) for r in messages],
        "tools": [tuple(r) for r in tools],
        "events": [(seq, kind, data.replace(run_id, "RUN")) for seq, kind, data in events],
    }


def grouped(proxy: PostgresRoundTrips) -> bool:
    """Whether a group statement went to the server."""
    return any(GROUP in statement for trip in proxy.trips for statement in trip)


async def drive(backend: PostgresBackend, lease: Lease, state: RunState, delta: Delta, last: bool) -> None:
    await backend.commit(lease, state, delta, [], release=last)
    state.apply(delta)


async def test_checkpoints_that_queue_up_go_in_one_statement_and_write_what_each_alone_would(
    pg_database: str, postgres_dsn: str
) -> None:
    """Six runs step by step, their checkpoints committed at the same moment (grouped), and
    the same six alone, one after another: the database ends up holding the same."""
    sessions = [f"s{n}" for n in range(6)]
    async with PostgresRoundTrips(pg_database) as proxy, PostgresBackend(proxy.dsn) as backend:
        runs = [await started(backend, f"grouped-{s}") for s in sessions]
        alone = [await started(backend, f"alone-{s}") for s in sessions]
        proxy.reset()
        for index in range(len(steps("x"))):
            last = index == len(steps("x")) - 1
            await asyncio.gather(
                *(drive(backend, lease, state, steps(state.run_id)[index], last) for lease, state in runs)
            )
        grouped_trips = [trip for trip in proxy.trips if any(GROUP in statement for statement in trip)]
        checkpoints = [trip for trip in proxy.trips if any("WITH fence AS" in s for s in trip)]
        for lease, state in alone:
            for index, delta in enumerate(steps(state.run_id)):
                await drive(backend, lease, state, delta, index == len(steps("x")) - 1)
    # Each boundary of the six runs went in one statement (the first of a shape prepares it).
    assert 6 <= len(grouped_trips) <= 12 and not checkpoints, proxy.describe()
    for session in sessions:
        grouped, single = (
            await stored(pg_database, f"grouped-{session}"),
            await stored(pg_database, f"alone-{session}"),
        )
        assert grouped == single, session
    assert grouped["session"] == (True, 3, True, None, None)  # released, progress settled
    assert grouped["run"][:3] == ("completed", "finish", 1) and grouped["run"][5] == 7
    assert [seq for seq, _ in grouped["messages"]] == [1, 2, 3]
    assert grouped["tools"] == [("raw_completed", 0)]


async def test_a_lost_lease_fails_its_own_checkpoint_and_no_other(pg_database: str) -> None:
    async with (
        PostgresRoundTrips(pg_database) as proxy,
        PostgresBackend(proxy.dsn) as backend,
        PostgresBackend(pg_database) as other,
    ):
        a, b, c = [await started(backend, name) for name in ("a", "b", "c")]
        await sql(pg_database, f"UPDATE {SCHEMA}.sessions SET lease_expires_at = now() WHERE id = 'b'")
        taken = await other.claim("b", "other")
        outcomes = await asyncio.gather(
            *(drive(backend, lease, state, steps(state.run_id)[0], False) for lease, state in (a, b, c)),
            return_exceptions=True,
        )
        assert outcomes[0] is None and outcomes[2] is None
        assert isinstance(outcomes[1], LeaseLostError), outcomes
        assert grouped(proxy)
        assert f"generation {b[0].generation})" in str(outcomes[1])
        for name, written in (("a", True), ("b", False), ("c", True)):
            rows = await sql(
                pg_database, f"SELECT count(*) FROM {SCHEMA}.messages WHERE session_id = $1", name
            )
            assert rows[0][0] == (2 if written else 1), name
        # The new holder writes on as if nothing had been tried.
        state = await other.load_state("b-run")
        await other.commit(taken, state, steps("b-run")[0], [])
        assert (await other.load_state("b-run")).iteration == 1


async def test_progress_the_session_row_does_not_hold_is_sent_again_whole(pg_database: str) -> None:
    async with PostgresRoundTrips(pg_database) as proxy, PostgresBackend(proxy.dsn) as backend:
        points = [await started(backend, name) for name in ("a", "b", "c")]
        for lease, state in points:
            await drive(backend, lease, state, steps(state.run_id)[0], False)
        # The row lets go of b's progress (as a lease changing hands would): b's progress-only
        # checkpoint is answered not_held and goes again whole.
        await sql(pg_database, f"UPDATE {SCHEMA}.sessions SET current_run = NULL WHERE id = 'b'")
        await asyncio.gather(
            *(drive(backend, lease, state, steps(state.run_id)[1], False) for lease, state in points)
        )
        for name in ("a", "b", "c"):
            record = await backend.get_run(f"{name}-run")
            assert record is not None and (record.phase, record.event_count) == ("prepare_tools", 3), name
        (row,) = await sql(pg_database, f"SELECT phase FROM {SCHEMA}.runs WHERE id = 'b-run'")
        assert row[0] == "prepare_tools"  # written whole: the run row too
        assert grouped(proxy)


async def test_a_group_refused_as_a_whole_sends_each_checkpoint_alone(pg_database: str) -> None:
    async with PostgresRoundTrips(pg_database) as proxy, PostgresBackend(proxy.dsn) as backend:
        a, b, c = [await started(backend, name) for name in ("a", "b", "c")]
        wrong = RunState(session_id="b", run_id="c-run")  # a run that is not its session's
        outcomes = await asyncio.gather(
            drive(backend, *a, steps("a-run")[0], False),
            drive(backend, b[0], wrong, steps("c-run")[0], False),
            drive(backend, *c, steps("c-run")[0], False),
            return_exceptions=True,
        )
        assert outcomes[0] is None and outcomes[2] is None
        assert isinstance(outcomes[1], StorageError) and "is not a run of session b" in str(outcomes[1])
        assert (await backend.load_state("a-run")).iteration == 1
        assert (await backend.load_state("c-run")).iteration == 1
        assert (await backend.load_state("b-run")).iteration == 0
        assert grouped(proxy)


async def test_a_group_whose_reply_was_lost_is_applied_once(pg_database: str) -> None:
    async with PostgresRoundTrips(pg_database) as proxy, PostgresBackend(proxy.dsn) as backend:
        points = [await started(backend, name) for name in ("a", "b", "c")]
        await asyncio.gather(
            *(drive(backend, lease, state, steps(state.run_id)[0], False) for lease, state in points)
        )
        proxy.withhold_reply(GROUP)
        second = asyncio.gather(
            *(drive(backend, lease, state, steps(state.run_id)[1], False) for lease, state in points)
        )
        await asyncio.wait_for(proxy.withheld.wait(), 20)
        while (await sql(pg_database, f"SELECT count(*) FROM {SCHEMA}.events WHERE seq = 3"))[0][0] < 3:
            await asyncio.sleep(0.01)  # committed by the server, its answer held back
        assert proxy.cut() == 1
        await second  # retried on another connection: answered "applied" for each
    for name in ("a", "b", "c"):
        events = await sql(pg_database, f"SELECT seq FROM {SCHEMA}.events WHERE run_id = $1", f"{name}-run")
        assert sorted(seq for (seq,) in events) == [1, 2, 3], name
        tools = await sql(
            pg_database, f"SELECT count(*) FROM {SCHEMA}.tool_calls WHERE run_id = $1", f"{name}-run"
        )
        assert tools[0][0] == 1


@pytest.mark.parametrize("members", [2, 40])
async def test_a_caller_that_stops_waiting_before_its_group_is_sent_writes_nothing(
    pg_database: str, members: int
) -> None:
    async with PostgresBackend(pg_database) as backend:
        points = [await started(backend, f"s{n}") for n in range(members + 1)]
        first, *rest = points
        lone = asyncio.create_task(drive(backend, *first, steps(first[1].run_id)[0], False))
        await asyncio.sleep(0)  # on its way: the others queue behind it
        tasks = [asyncio.create_task(drive(backend, *p, steps(p[1].run_id)[0], False)) for p in rest]
        await asyncio.sleep(0)
        tasks[0].cancel()
        await lone
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(outcomes[0], asyncio.CancelledError)
        assert all(outcome is None for outcome in outcomes[1:])
        assert (await backend.load_state(rest[0][1].run_id)).iteration == 0
        assert (await backend.load_state(rest[1][1].run_id)).iteration == 1
