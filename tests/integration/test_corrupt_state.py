"""Stored rows that do not decode, or that break a run's rules, on each real backend.

Nothing drives such a run (a manual tool must never run again because its state was
misread); every decode failure is the one ``CorruptStateError``, naming the run.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from durable_support import BackendTarget, ledger_lines, make_agent

from harnessx import AgentRuntime, CorruptStateError, RunStatus


async def raw(target: BackendTarget, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run ``sql`` (``?`` placeholders) straight against the target's tables."""
    if target.kind == "sqlite":
        with sqlite3.connect(target.location) as conn:
            return conn.execute(sql, params).fetchall()
    import asyncpg

    numbered = iter(range(1, 100))
    conn = await asyncpg.connect(target.location)
    try:
        await conn.execute("SET search_path TO harness_x")
        rows = await conn.fetch(re.sub(r"\?", lambda _: f"${next(numbered)}", sql), *params)
        return [tuple(row) for row in rows]
    finally:
        await conn.close()


async def waiting_run(target: BackendTarget, ledger: Path | None = None) -> Any:
    """A run waiting for approval of a manual tool: resumable, its tool not yet run."""
    agent = make_agent(permission="ask", ledger=str(ledger) if ledger else None)
    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        waiting = await runtime.run("Write the report.")
    assert waiting.needs_input
    return waiting


async def test_a_reply_whose_role_was_damaged_does_not_run_a_manual_tool_again(
    target: BackendTarget, tmp_path: Path
) -> None:
    """The run's last committed boundary is the model's final reply (phase model_call), and
    that reply's role no longer reads 'assistant': the engine would take the earlier reply's
    tool call for this one and run the manual tool a second time."""
    ledger = tmp_path / "ledger"
    agent = make_agent(policy="manual", ledger=str(ledger))
    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        done = await runtime.run("Write the report.")
    assert done.ok and len(ledger_lines(ledger)) == 1
    # As a crash right after the final reply committed leaves it...
    await raw(
        target,
        "UPDATE runs SET status = 'running', phase = 'model_call', stop_reason = '' WHERE id = ?",
        done.run_id,
    )
    # ...with that reply damaged.
    (seq,) = (await raw(target, "SELECT max(seq) FROM messages WHERE session_id = ?", done.session_id))[0]
    reply = json.dumps({"role": "robot", "content": "Done: report for R0 written"})
    await raw(
        target, "UPDATE messages SET body = ? WHERE session_id = ? AND seq = ?", reply, done.session_id, seq
    )
    async with target.open() as backend:
        runtime = AgentRuntime(make_agent(policy="manual", ledger=str(ledger)), backend=backend)
        with pytest.raises(CorruptStateError, match=r"role 'robot'.*restore the database from a backup"):
            await runtime.resume(done.session_id)
        await runtime.stop()
    assert len(ledger_lines(ledger)) == 1  # never again


CORRUPTIONS: dict[str, tuple[str, str, str]] = {
    # name: (SQL with ? for the run id, what the error says, which backends)
    "message is not an object": (
        "UPDATE messages SET body = '[1, 2]' WHERE run_id = ?",
        r"message 1 of the session: a message is a list",
        "both",
    ),
    "message role": (
        """UPDATE messages SET body = '{"role": "wizard", "content": "hi"}' WHERE run_id = ?""",
        r"role 'wizard'",
        "both",
    ),
    "replay policy": (
        "UPDATE tool_calls SET policy = 'whenever' WHERE run_id = ?",
        r"replay policy 'whenever'",
        "both",
    ),
    "tool status": (
        "UPDATE tool_calls SET status = 'exploded' WHERE run_id = ?",
        r"'exploded' is not a valid ToolStatus",
        "both",
    ),
    "tool input": (
        """UPDATE tool_calls SET call = '{"id": "call_0", "name": "write_report", "input": "all"}'
           WHERE run_id = ?""",
        r"input that is not an object",
        "both",
    ),
    "run status": (
        "UPDATE runs SET status = 'exploded' WHERE id = ?",
        r"status 'exploded' is not a run status",
        "both",
    ),
    "run phase": (
        "UPDATE runs SET phase = 'nowhere' WHERE id = ?",
        r"'nowhere' is not a valid Phase",
        "both",
    ),
    "usage": (
        """UPDATE runs SET usage = '{"input_tokens": "many"}' WHERE id = ?""",
        r"invalid literal for int",
        "both",
    ),
    # PostgreSQL's integer column refuses text; SQLite stores it.
    "iteration": (
        "UPDATE runs SET iteration = 'abc' WHERE id = ?",
        r"iteration is 'abc', not an integer",
        "sqlite",
    ),
    "tool json": (
        "UPDATE tool_calls SET call = '{not json' WHERE run_id = ?",
        r"its call is not JSON",
        "sqlite",
    ),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
async def test_every_decode_failure_is_the_corrupt_state_error(
    target: BackendTarget, tmp_path: Path, corruption: str
) -> None:
    sql, says, backends = CORRUPTIONS[corruption]
    if backends != "both" and backends != target.kind:
        pytest.skip(f"{target.kind} cannot hold this corruption")
    ledger = tmp_path / "ledger"
    waiting = await waiting_run(target, ledger)
    await raw(target, sql, waiting.run_id)
    async with target.open() as backend:
        # The row itself still reads: listing, following and cancelling need it.
        record = await backend.latest_run(waiting.session_id)
        assert record is not None and record.id == waiting.run_id
        runtime = AgentRuntime(make_agent(permission="ask", ledger=str(ledger)), backend=backend)
        with pytest.raises(CorruptStateError, match=rf"run {waiting.run_id} of session .* {says}") as raised:
            await runtime.resume(waiting.session_id)
        assert "cancel the run" in str(raised.value)
        with pytest.raises(CorruptStateError):
            await backend.load_state(waiting.run_id)
        await runtime.stop()
    assert ledger_lines(ledger) == []


async def test_a_run_whose_state_cannot_be_read_can_still_be_cancelled(target: BackendTarget) -> None:
    waiting = await waiting_run(target)
    await raw(target, "UPDATE tool_calls SET policy = 'whenever' WHERE run_id = ?", waiting.run_id)
    async with target.open() as backend:
        runtime = AgentRuntime(make_agent(permission="ask"), backend=backend)
        await runtime.start(waiting.session_id)
        with pytest.raises(CorruptStateError, match="cancel the run"):
            await runtime.resume(waiting.session_id)
        await runtime.cancel()  # what the error advises: it must work
        record = await backend.latest_run(waiting.session_id)
        assert record is not None and record.status == "cancelled"
        events = await backend.read_events(waiting.run_id, 0)
        assert [int(e.cursor or 0) for e in events] == list(range(1, len(events) + 1))
        assert events[-1].type.value == "run_result" and events[-1].data.status is RunStatus.CANCELLED
        assert await runtime.resume(waiting.session_id) is None
        # The session moves on: a new run starts.
        fresh = await runtime.run("Write the report again.")
        assert fresh.run_id != waiting.run_id and not fresh.failed
        await runtime.stop()


async def test_a_run_whose_tool_call_cannot_be_read_still_has_a_record(target: BackendTarget) -> None:
    # latest_run()/get_run() show a run in a tool step with its calls (state["tools"]); a
    # call that does not decode leaves them out instead of making the run unreadable to
    # listing, following and cancelling.
    waiting = await waiting_run(target)
    await raw(target, "UPDATE tool_calls SET status = 'exploded' WHERE run_id = ?", waiting.run_id)
    async with target.open() as backend:
        latest = await backend.latest_run(waiting.session_id)
        by_id = await backend.get_run(waiting.run_id)
        with pytest.raises(CorruptStateError):
            await backend.load_state(waiting.run_id)
    assert latest is not None and by_id is not None
    assert latest.status == by_id.status == "awaiting_input"
    assert latest["tools"] == by_id["tools"] == []
