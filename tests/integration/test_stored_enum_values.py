"""Stop reasons, replay policies and permission levels are stored as their values, on both
backends, whatever ``str()`` of their enums gives.

``StopReason``, ``ReplayPolicy``, ``PermissionLevel`` (and ``ToolChoice``) are ``(str, Enum)``
as in harnessx 0.9.1, so ``str(member)`` is ``"StopReason.END_TURN"``: a store must never
take that for the value. A run written with members everywhere a caller may give one stores
exactly what earlier builds stored (``tests/fixtures/store_0_1``: ``end_turn``, ``manual``),
and reads back as plain strings equal to the members.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import asyncpg
from durable_support import BackendTarget

from harnessx import (
    Agent,
    AgentConfig,
    AgentRuntime,
    LLMProvider,
    PermissionLevel,
    ProviderResponse,
    ReplayPolicy,
    RunStatus,
    StopReason,
    ToolCall,
)

TABLES = ("sessions", "runs", "messages", "tool_calls", "events")
MEMBER_NAMES = ("StopReason.", "ReplayPolicy.", "PermissionLevel.", "ToolChoice.", "RunStatus.")


class MembersProvider(LLMProvider):
    """Replies whose stop reasons are ``StopReason`` members, as built-in providers give them."""

    async def create(self, **request: Any) -> ProviderResponse:
        last = request["messages"][-1]["content"]
        if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
            return ProviderResponse(text="Filed.", stop_reason=StopReason.END_TURN)
        return ProviderResponse(
            text="Filing.",
            tool_calls=[ToolCall("call_1", "file_report", {"region": "EMEA"})],
            stop_reason=StopReason.TOOL_USE,
        )

    async def count_tokens(self, **request: Any) -> int:
        return 0


def agent() -> Agent:
    made = Agent(AgentConfig(model="m", planning=False), provider=MembersProvider())

    @made.tools.register(permission=PermissionLevel.ASK, replay_policy=ReplayPolicy.IDEMPOTENT)
    def file_report(region: str) -> str:
        """File the report.

        Args:
            region: Sales region.
        """
        return f"filed {region}"

    made.permissions.set_permission("file_report", PermissionLevel.ASK)
    return made


async def stored_rows(target: BackendTarget) -> dict[str, list[dict[str, Any]]]:
    """Every row of the store's tables, as the database holds them (JSON text for PostgreSQL)."""
    if target.kind == "sqlite":
        with sqlite3.connect(target.location) as conn:
            conn.row_factory = sqlite3.Row
            return {t: [dict(row) for row in conn.execute(f"SELECT * FROM {t}")] for t in TABLES}
    conn = await asyncpg.connect(target.location)
    try:
        rows = {}
        for table in TABLES:
            found = await conn.fetch(f"SELECT row_to_json(t)::text FROM harness_x.{table} t")
            rows[table] = [json.loads(row[0]) for row in found]
        return rows
    finally:
        await conn.close()


async def test_members_are_stored_as_their_values(target: BackendTarget) -> None:
    async with target.open() as store:
        runtime = AgentRuntime(agent(), backend=store)
        handle = await runtime.submit("File the EMEA report.")
        waiting = await handle.result()
        assert waiting.status is RunStatus.AWAITING_INPUT
        done = await runtime.approve(waiting.pending[0], resume=True)
        await runtime.stop()
        assert done is not None and done.ok and done.output == "Filed."
        record = await store.get_run(done.run_id)
        state = await store.load_state(done.run_id)
    rows = await stored_rows(target)
    text = json.dumps(rows, default=str)
    assert [name for name in MEMBER_NAMES if name in text] == []
    [run] = rows["runs"]
    assert (run["status"], run["stop_reason"]) == ("completed", "end_turn")
    [call] = rows["tool_calls"]
    assert call["policy"] == "idempotent"
    # Read back: plain strings, equal to the members (and str() of them is the value).
    # get_run() is the original's state dict (its CLI prints these), load_state() the engine's.
    assert record is not None
    for stop in (record["stop_reason"], state.stop_reason):
        assert type(stop) is str and stop == StopReason.END_TURN and f"{stop}" == "end_turn"
    [entry] = state.tools.values()
    assert type(entry.policy) is str and entry.policy == ReplayPolicy.IDEMPOTENT
    assert f"{entry.policy}" == "idempotent"
