"""Data stored by harnessx before typed events still loads, on both backends.

The rows in ``tests/fixtures/store_0_1`` were written by the harnessx of commit 72cffb6 (see
its README): events with dict payloads, conversations with ``tool_calls`` and ``role:
"tool"`` messages, tool calls without their settings, execution keys counting iterations from 0. They go into
a store created by today's code as they are, and today's code must read them typed and carry
on with them, handing providers the conversation in content blocks.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from durable_support import BackendTarget

from harnessx import (
    Agent,
    AgentConfig,
    AgentRuntime,
    LLMProvider,
    ProviderResponse,
    RunEventType,
    RunResult,
    RunStatus,
    ToolCall,
    ToolResult,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "store_0_1"
ROWS: dict[str, dict[str, Any]] = json.loads((FIXTURES / "rows.json").read_text())
TABLES = ("sessions", "runs", "messages", "tool_calls", "events")


class OriginalStyleProvider(LLMProvider):
    """A provider written for harnessx 0.9.1: it answers once it sees a ``tool_result`` block."""

    def __init__(self) -> None:
        self.requests: list[list[dict[str, Any]]] = []

    async def create(self, **kwargs: Any) -> ProviderResponse:
        self.requests.append(kwargs["messages"])
        last = kwargs["messages"][-1]["content"]
        results = [b["content"] for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            return ProviderResponse(text="Done: " + "; ".join(results))
        return ProviderResponse(
            text="Writing the report.",
            tool_calls=[ToolCall("call_2", "write_report", {"region": "APAC"})],
            stop_reason="tool_use",
        )

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


def sales_agent(provider: LLMProvider, *, permission: str | None = None) -> Agent:
    agent = Agent(config=AgentConfig(system_prompt="You write sales reports."), provider=provider)

    @agent.tools.register(permission=permission, replay_policy="manual")
    def write_report(region: str) -> str:
        """Write the report.

        Args:
            region: Sales region.
        """
        return f"report for {region} written"

    return agent


async def load_rows(target: BackendTarget) -> None:
    """The fixture rows, written into ``target``'s (migrated, empty) store as they are."""
    async with target.open():
        pass  # creates the schema
    if target.kind == "sqlite":
        with sqlite3.connect(target.location) as conn:
            for table in TABLES:
                columns = ROWS[table]["columns"]
                marks = ", ".join("?" for _ in columns)
                conn.executemany(
                    f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", ROWS[table]["rows"]
                )
        return
    import asyncpg

    conn = await asyncpg.connect(target.location)
    try:
        await conn.execute("SET search_path TO harness_x")
        for table in TABLES:
            types = dict(
                await conn.fetch(
                    "SELECT column_name, data_type FROM information_schema.columns "
                    "WHERE table_schema = 'harness_x' AND table_name = $1",
                    table,
                )
            )
            columns = ROWS[table]["columns"]
            casts = ", ".join(f"${i}::{_cast(types[c])}" for i, c in enumerate(columns, 1))
            await conn.executemany(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({casts})",
                [
                    [_pg_value(types[c], v) for c, v in zip(columns, row, strict=True)]
                    for row in ROWS[table]["rows"]
                ],
            )
    finally:
        await conn.close()


def _cast(data_type: str) -> str:
    return "timestamptz" if data_type.startswith("timestamp") else data_type


def _pg_value(data_type: str, value: Any) -> Any:
    if value is None:
        return None
    if data_type.startswith("timestamp"):
        return datetime.fromtimestamp(value, UTC)
    if data_type == "boolean":
        return bool(value)
    return value


def run_of(session_id: str) -> str:
    return next(row[0] for row in ROWS["runs"]["rows"] if row[1] == session_id)


async def test_stored_events_read_back_typed(target: BackendTarget) -> None:
    await load_rows(target)
    async with target.open() as store:
        events = await store.read_events(run_of("completed"), 0)
    kinds = [e.type for e in events]
    assert kinds == [RunEventType.TEXT_DELTA] * 4 + [
        RunEventType.TEXT_COMPLETE,
        RunEventType.TOOL_CALL_START,
        RunEventType.TOOL_CALL_COMPLETE,
        RunEventType.TOOL_RESULT,
        *[RunEventType.TEXT_DELTA] * 6,
        RunEventType.TEXT_COMPLETE,
        RunEventType.TURN_COMPLETE,
        RunEventType.RUN_RESULT,
    ]
    assert "".join(e.data for e in events[:4]) == "Writing the report."
    call = ToolCall("call_1", "write_report", {"region": "EMEA"})
    # The old tool_call_complete did not record the input: it comes back from the tool call.
    assert events[5].data == call and events[6].data == call
    assert events[7].data == ToolResult("call_1", "report for EMEA written", False)
    assert events[-2].data == "end_turn"
    result = events[-1].data
    assert isinstance(result, RunResult) and result.output == "Done: report for EMEA written"
    assert result.usage.input_tokens == 106 and result.usage.cache_read_input_tokens == 0
    assert all(e.session_id == "completed" for e in events)
    # Step ids name the iteration, from 1.
    assert [(e.step_id, e.attempt_id) for e in events[4:8]] == [("1", ""), ("1", "1"), ("1", "1"), ("1", "1")]
    assert [e.cursor for e in events] == [str(i) for i in range(1, 18)]


async def test_a_stored_waiting_run_reads_and_is_approved(target: BackendTarget) -> None:
    await load_rows(target)
    provider = OriginalStyleProvider()
    async with target.open() as store:
        events = await store.read_events(run_of("waiting"), 0)
        # The approval stop's old 'waiting' event has no counterpart any more.
        assert [e.type for e in events[-2:]] == [RunEventType.APPROVAL_REQUIRED, RunEventType.RUN_RESULT]
        approval = events[-2].data
        assert approval["call"] == {"id": "call_1", "name": "write_report", "input": {"region": "EMEA"}}
        assert (
            approval["status"] == "approval" and approval["execution_key"] == f"{run_of('waiting')}:0:call_1"
        )
        runtime = AgentRuntime(sales_agent(provider, permission="ask"), backend=store)
        handle = await runtime.resume("waiting")
        assert handle is not None
        waiting = await handle.result()
        assert waiting.needs_input and waiting.pending[0].retry is None  # not recorded back then
        done = await runtime.approve(waiting.pending[0], resume=True)
        await runtime.stop()
    assert done.ok and done.output == "Done: report for EMEA written"
    # The provider saw the old conversation in today's form.
    assert provider.requests[-1] == [
        {"role": "user", "content": "Write the EMEA report."},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Writing the report."},
                {"type": "tool_use", "id": "call_1", "name": "write_report", "input": {"region": "EMEA"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "report for EMEA written"}
            ],
        },
    ]


async def test_a_run_stored_mid_tool_recovers(target: BackendTarget) -> None:
    await load_rows(target)
    async with target.open() as store:
        runtime = AgentRuntime(sales_agent(OriginalStyleProvider()), backend=store)
        handle = await runtime.resume("crashed")
        assert handle is not None
        waiting = await handle.result()
        (pending,) = waiting.pending
        assert pending.status == "uncertain" and pending.call.input == {"region": "EMEA"}
        events = [e async for e in handle.events()]
        assert [e.type for e in events[-3:]] == [
            RunEventType.TOOL_CALL_START,  # the last event the old version stored
            RunEventType.RECOVERY_REQUIRED,
            RunEventType.RUN_RESULT,
        ]
        assert events[-2].data["execution_key"] == pending.execution_key
        await runtime.resolve_tool(pending, result=ToolResult("call_1", "report for EMEA written"))
        resumed = await runtime.resume("crashed")
        assert resumed is not None
        done = await resumed.result()
        await runtime.stop()
    assert done.status is RunStatus.COMPLETED and done.output == "Done: report for EMEA written"


async def test_a_stored_conversation_carries_on(target: BackendTarget) -> None:
    await load_rows(target)
    provider = OriginalStyleProvider()
    async with target.open() as store:
        runtime = AgentRuntime(sales_agent(provider), backend=store)
        await runtime.start("completed")
        result = await runtime.run("Now the APAC report.")
        state = await store.load_state(run_of("completed"))
        await runtime.stop()
    assert result.ok and result.output == "Done: report for APAC written"
    # The first request of the new run holds the old run's conversation, in today's form.
    first = provider.requests[0]
    assert [m["role"] for m in first] == ["user", "assistant", "user", "assistant", "user"]
    assert first[2]["content"][0]["type"] == "tool_result" and first[3]["content"][0]["type"] == "text"
    # The store keeps its own form; nothing on disk is rewritten.
    assert state.messages[2] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "name": "write_report",
        "content": "report for EMEA written",
        "is_error": False,
    }


async def test_a_stored_session_snapshot_loads(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "snapshot.json", tmp_path / "snapshot.json")
    provider = OriginalStyleProvider()
    agent = await Agent.load_session("snapshot", tmp_path, provider=provider)
    messages = agent.memory.get_messages()
    assert messages[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Writing the report."},
            {"type": "tool_use", "id": "call_1", "name": "write_report", "input": {"region": "EMEA"}},
        ],
    }
    assert messages[2]["content"][0]["tool_use_id"] == "call_1"
    # The conversation carries on: the provider sees it in content blocks.
    sales = sales_agent(provider)
    sales.memory.set_messages(messages)
    assert (await sales.run("Now the APAC report.")).output == "Done: report for APAC written"
    assert provider.requests[0][:3] == messages[:3]


@pytest.mark.parametrize("table", TABLES)
def test_fixture_rows_are_what_the_old_version_wrote(table: str) -> None:
    """Guards the fixture itself: it must keep the shapes this test exists for."""
    rows = ROWS[table]["rows"]
    assert rows
    text = json.dumps(rows)
    if table == "messages":
        assert '\\"role\\":\\"tool\\"' in text and '\\"tool_calls\\"' in text
    if table == "events":
        assert '{\\"text\\":' in text and '\\"reason\\":\\"approval\\"' in text
