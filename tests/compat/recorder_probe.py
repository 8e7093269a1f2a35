"""A differential probe of the flight recorder, run under this harnessx and under 0.9.1.

    python recorder_probe.py OUTDIR [BUNDLE ...]

Records one run (a scripted model that calls a tool once, then answers), exports it twice
into OUTDIR (``metadata.hx`` without payloads, ``payloads.hx`` with them), verifies both and
every BUNDLE given (bundles the other package wrote), and prints what it saw as JSON. It uses
only the API both packages share; never a name of one of them alone.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from harnessx import (
    Agent,
    AgentRuntime,
    ExportPolicy,
    IncidentRecorder,
    PermissionLevel,
    ProviderResponse,
    SQLiteBackend,
    ToolCall,
)
from harnessx.providers import LLMProvider


class Model(LLMProvider):
    async def create(self, **kwargs: Any) -> ProviderResponse:
        if not any(_answers(message) for message in kwargs["messages"]):
            return ProviderResponse(
                tool_calls=[ToolCall("inv", "balance", {"account": "demo"})], stop_reason="tool_use"
            )
        return ProviderResponse(text="The balance is 1500.")

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


def _answers(message: dict[str, Any]) -> bool:
    """A tool's answer, in either package's message shape."""
    if message.get("role") == "tool":
        return True
    content = message.get("content")
    return isinstance(content, list) and any(block.get("type") == "tool_result" for block in content)


def report(verification: Any) -> dict[str, Any]:
    return {
        "valid": verification.valid,
        "complete": verification.complete,
        "issues": sorted(verification.issues),
    }


async def main(folder: Path, others: list[str]) -> None:
    agent = Agent(provider=Model())

    @agent.tools.register(permission=PermissionLevel.ALLOW, replay_policy="safe")
    def balance(account: str) -> str:
        """The account's balance."""
        return json.dumps({"account": account, "balance": 1500})

    backend = SQLiteBackend(str(folder / "runtime.sqlite3"))
    async with backend, AgentRuntime(agent, backend=backend, recording=True) as runtime:
        result = await runtime.run("What is the demo account's balance?")
        metadata = await runtime.export_incident(result.run_id, destination=folder / "metadata.hx")
        payloads = await runtime.export_incident(
            result.run_id, destination=folder / "payloads.hx", policy=ExportPolicy(include_payloads=True)
        )
    recorder = IncidentRecorder()
    playback = await recorder.playback(payloads)
    seen = {
        "output": result.output,
        "own": {path.name: report(await recorder.verify(path)) for path in (metadata, payloads)},
        "boundaries": [
            [record["kind"], record["step_id"], record["attempt_id"]]
            for record in playback.records
            if record["kind"].startswith(("model.", "tool."))
        ],
        "others": {name: report(await recorder.verify(name)) for name in others},
    }
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2:]))
