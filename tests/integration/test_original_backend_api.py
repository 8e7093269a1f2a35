"""The original harnessx 0.9.1's backend API on each real backend: what ``latest_run()`` and
``get_run()`` return, ``SQLiteBackend.conn``, ``migrate(validate_only=)``, and a database of
the original's layout recognised instead of failing on "relation sessions already exists"."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import asyncpg
import pytest
from durable_support import BackendTarget

from harnessx import (
    Agent,
    AgentRuntime,
    ConfigurationError,
    PermissionLevel,
    ProviderResponse,
    RunStatus,
    SchemaError,
    ScriptedProvider,
    SQLiteBackend,
    ToolCall,
)
from harnessx.execution import result_from_state
from harnessx.store import PostgresBackend


async def test_latest_run_and_get_run_read_like_the_originals_state(target: BackendTarget) -> None:
    agent = Agent(
        provider=ScriptedProvider(
            [ProviderResponse(tool_calls=[ToolCall("c", "note", {})]), "Noted.", "Again."]
        )
    )
    agent.tools.register(name="note", replay_policy="safe")(lambda: "ok")
    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        result = await runtime.run("Note it.", request_id="r-1")
        latest = await backend.latest_run(runtime.session_id or "")
        by_id = await backend.get_run(result.run_id)
        row = await backend.get_run(result.run_id, messages=False)
        second = await runtime.run("Once more.")
        first_after = await backend.get_run(result.run_id)
        latest_after = await backend.latest_run(runtime.session_id or "")
    assert latest is not None and by_id is not None and row is not None
    conversation = [
        {"role": "user", "content": "Note it."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "note", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": "ok"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]},
    ]
    # The run's conversation as it stood at its end, in the content-block form the original
    # keeps in its state (a later run's messages are not an earlier run's).
    assert latest["messages"] == by_id["messages"] == conversation
    assert first_after is not None and first_after["messages"] == conversation
    assert latest_after is not None and latest_after["run_id"] == second.run_id
    assert latest_after["messages"] == [
        *conversation,
        {"role": "user", "content": "Once more."},
        {"role": "assistant", "content": [{"type": "text", "text": "Again."}]},
    ]
    # This harnessx's own reads (they poll) take the row alone.
    assert "messages" not in dict(row)
    with pytest.raises(KeyError, match="messages=False"):
        row["messages"]
    for state in (latest, by_id):
        assert state["status"] == "completed" and state["run_id"] == result.run_id
        assert state["session_id"] == result.session_id and state["output"] == "Noted."
        assert state["message"] == "Note it." and state["request_id"] == "r-1"
        assert state["phase"] == "result" and state["iterations"] >= 1
        assert state.get("status") == "completed" and "status" in dict(state)
        # The record's status is typed; the state's is the plain text the original's holds
        # (formatted, a RunStatus would read "RunStatus.COMPLETED").
        assert state.status is RunStatus.COMPLETED
        assert type(state["status"]) is str and f"{state['status']}" == "completed"
        assert state["tools"] == []  # the original's too, once the run is over
    assert result_from_state(latest) == result.__class__.from_dict({**result.to_dict(), "pending": []})


async def test_read_events_takes_the_originals_cursor_text_and_starts_at_the_first(
    target: BackendTarget,
) -> None:
    async with (
        target.open() as backend,
        AgentRuntime(Agent(provider=ScriptedProvider(["done"])), backend=backend) as runtime,
    ):
        result = await runtime.run("hello")
        events = await backend.read_events(result.run_id)
        later = await backend.read_events(result.run_id, events[1].cursor)
        with pytest.raises(ValueError, match="invalid event cursor"):
            await backend.read_events(result.run_id, "nope")
    assert [e.cursor for e in events] == [str(n) for n in range(1, len(events) + 1)]
    assert events[-1].data.output == "done"  # the run_result, a RunResult
    assert later == events[2:]


async def test_a_run_stopped_in_a_tool_step_shows_its_tool_calls_and_no_outcome(
    target: BackendTarget,
) -> None:
    # The original's example durable_crash_recovery.py prints each of state["tools"]'s
    # call name and status after a crash, and state.get("output") only once there is one.
    agent = Agent(
        provider=ScriptedProvider([ProviderResponse(tool_calls=[ToolCall("c", "send", {"to": "x"})])])
    )
    agent.tools.register(name="send", permission=PermissionLevel.ASK, replay_policy="manual")(
        lambda to: "sent"
    )
    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        result = await runtime.run("Send it.")
        state = await backend.latest_run(runtime.session_id or "")
        again = await backend.get_run(result.run_id)
    assert state is not None and again is not None and result.status.value == "awaiting_input"
    assert (
        state["tools"]
        == again["tools"]
        == [
            {
                "call": {"id": "c", "name": "send", "input": {"to": "x"}},
                "status": "approval",
                "attempt": 0,
                "execution_key": f"{result.run_id}:1:c",
                "policy": "manual",
                "concurrent": True,
                "timeout": 25.0,
                "retry": {
                    "attempts": 3,
                    "backoff_seconds": 0.5,
                    "max_backoff_seconds": 30.0,
                    "retry_error_results": False,
                },
            }
        ]
    )
    assert state.get("output") is None and state.get("error") is None and "stop_reason" not in state


async def test_migrate_validate_only_changes_nothing(target: BackendTarget, tmp_path: Path) -> None:
    fresh = target if target.kind == "postgres" else BackendTarget("sqlite", str(tmp_path / "new.sqlite3"))
    if fresh.kind == "sqlite":
        with pytest.raises(SchemaError, match="does not exist"):
            await SQLiteBackend(fresh.location).migrate(validate_only=True)
        sqlite3.connect(fresh.location).close()  # an empty file: no schema
    with pytest.raises(SchemaError, match="no harnessx schema"):
        await fresh.open().migrate(validate_only=True)
    assert (await fresh.open().migrate()).after > 0
    report = await fresh.open().migrate(validate_only=True)
    assert report.applied == () and report.before == report.after


async def test_sqlite_conn_is_a_connection_to_the_same_file(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "runtime.sqlite3")
    assert backend.conn is None
    async with backend, AgentRuntime(Agent(provider=ScriptedProvider(["hi"])), backend=backend) as runtime:
        await runtime.run("hello")
        conn = backend.conn
        assert conn is not None and backend.conn is conn
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    assert backend.conn is None


ORIGINAL_LAYOUT = [
    "CREATE TABLE {s}schema_versions (version INTEGER PRIMARY KEY, checksum TEXT NOT NULL)",
    "CREATE TABLE {s}sessions (id TEXT PRIMARY KEY, payload TEXT NOT NULL, control TEXT NOT NULL DEFAULT '')",
    "CREATE TABLE {s}runs (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, request_id TEXT NOT NULL, "
    "status TEXT NOT NULL, payload TEXT NOT NULL)",
]


async def test_a_database_of_the_original_is_named_not_half_migrated(target: BackendTarget) -> None:
    if target.kind == "sqlite":
        conn = sqlite3.connect(target.location)
        for statement in ORIGINAL_LAYOUT:
            conn.execute(statement.format(s=""))
        conn.commit()
        conn.close()
    else:
        pg = await asyncpg.connect(target.location)
        try:
            await pg.execute("CREATE SCHEMA harness_x")
            for statement in ORIGINAL_LAYOUT:
                await pg.execute(statement.format(s="harness_x."))
        finally:
            await pg.close()
    for auto_migrate in (True, False):
        with pytest.raises(
            SchemaError, match=r"original harnessx 0\.9\.1.*harnessx migrate --from-original"
        ) as caught:
            async with target.open(auto_migrate=auto_migrate):
                pass
        assert "already exists" not in str(caught.value)
    # Nothing was created or changed.
    if target.kind == "sqlite":
        conn = sqlite3.connect(target.location)
        tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        conn.close()
        assert tables == {"schema_versions", "sessions", "runs"}


async def test_importing_from_a_database_without_the_original_says_so(target: BackendTarget) -> None:
    from harnessx._from_original import migrate_from_original

    if target.kind == "sqlite":
        sqlite3.connect(target.location).close()
    store = target.open()
    with pytest.raises(ConfigurationError, match=r"no database of the original harnessx|neither schema"):
        await migrate_from_original(store)
    if isinstance(store, PostgresBackend):
        await store.aclose()


async def test_a_backend_closed_by_async_with_opens_again_with_another(target: BackendTarget) -> None:
    """As in harnessx 0.9.1: ``async with backend:`` twice on one backend. It opens again as
    another process: what it held before it closed counts as a dead holder's (recovered by
    others), not as a live one's."""
    backend = target.open()
    async with backend, AgentRuntime(Agent(provider=ScriptedProvider(["Done."])), backend=backend) as runtime:
        first = await runtime.run("One.")
    before = backend.owner_for("runtime")
    async with backend:
        assert (await backend.get_run(first.run_id))["status"] == "completed"
        assert not await backend.process_alive(before)
        assert await backend.process_alive(backend.owner_for("runtime"))
        async with AgentRuntime(Agent(provider=ScriptedProvider(["Again."])), backend=backend) as runtime:
            assert (await runtime.run("Two.")).output == "Again."
    await backend.aclose()  # closing a closed backend does nothing


async def test_a_postgres_backend_given_its_dsn_as_connection_string(pg_database: str) -> None:
    """0.9.1's keyword for the DSN, in the constructor and in ``connect``: a run is stored
    and read back through either."""
    from harnessx.backends.postgres import PostgresBackend as OriginalPath

    backend = OriginalPath(connection_string=pg_database)
    async with backend, AgentRuntime(Agent(provider=ScriptedProvider(["Done."])), backend=backend) as runtime:
        result = await runtime.run("One.")
    connected = await OriginalPath.connect(connection_string=pg_database)
    try:
        record = await connected.get_run(result.run_id)
    finally:
        await connected.aclose()
    assert record is not None and (record["status"], record["output"]) == ("completed", "Done.")
