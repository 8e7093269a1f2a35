"""The calls of the original's example ``07-quality/flight_recorder.py``: a recorded run on
SQLite whose model fails once (a retry), calls a ``safe`` tool and answers through an
``after_llm_call`` middleware; the incident bundle exported with payloads; playback after
the agent and the store are gone, with no model or tool call made again."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from _probe import emit

from harnessx import (
    Agent,
    AgentRuntime,
    ExportPolicy,
    IncidentRecorder,
    Middleware,
    PermissionLevel,
    ProviderResponse,
    SQLiteBackend,
    ToolCall,
)
from harnessx.providers import LLMProvider


class FailsOnce(LLMProvider):
    def __init__(self) -> None:
        self.calls = 0

    async def create(self, **kwargs: Any) -> ProviderResponse:
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("the network blinked")
        if self.calls == 2:
            return ProviderResponse(
                tool_calls=[ToolCall("s", "stock_level", {"item": "bolts"})], stop_reason="tool_use"
            )
        return ProviderResponse(text="Bolts: 120.")

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


class Tag(Middleware):
    async def after_llm_call(self, response: Any) -> Any:
        if response.text:
            response.text += " (test data)"
        return response


async def main(folder: Path, bundle_path: Path) -> None:
    provider = FailsOnce()
    ran: list[str] = []
    async with Agent(provider=provider) as agent:
        agent.middleware.add(Tag())

        @agent.tools.register(permission=PermissionLevel.ALLOW, replay_policy="safe")
        def stock_level(item: str) -> str:
            """The stock level of an item."""
            ran.append(item)
            return json.dumps({"item": item, "count": 120})

        async with (
            SQLiteBackend(str(folder / "store.db")) as backend,
            AgentRuntime(agent, backend=backend, recording=True) as runtime,
        ):
            result = await runtime.run("How many bolts?")
            bundle = await runtime.export_incident(
                result.run_id, destination=bundle_path, policy=ExportPolicy(include_payloads=True)
            )
    calls = (provider.calls, len(ran))
    playback = await IncidentRecorder().playback(bundle)
    steps = [
        f"step={r['step_id']} attempt={r['attempt_id']} {r['kind']}"
        for r in playback.records
        if r["kind"].startswith(("model.", "tool."))
    ]
    emit(
        {
            "status": result.status.value,
            "output": result.output,
            "bundle_is_destination": Path(bundle) == bundle_path,
            "valid": playback.report.valid,
            "complete": playback.report.complete,
            "issues": list(playback.report.issues),
            "calls_before_playback": list(calls),
            "calls_after_playback": [provider.calls, len(ran)],
            "model_and_tool_records": steps,
            "record_count": playback.report.record_count,
            "seqs_of_model_and_tool_records": [
                r["seq"] for r in playback.records if r["kind"].startswith(("model.", "tool."))
            ],
        }
    )


with tempfile.TemporaryDirectory() as tmp:
    asyncio.run(main(Path(tmp), Path(tmp) / "incident.hx"))
