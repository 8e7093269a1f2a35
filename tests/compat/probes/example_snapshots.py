"""The calls of the original's example ``06-durability/session_snapshots.py``:
``save_session(folder)`` after a run, ``Agent.load_session(id, folder, config=,
provider=)`` in a fresh agent, and the continued history from ``memory.get_messages()``."""

from __future__ import annotations

import asyncio
import re
import tempfile
from pathlib import Path
from typing import Any

from _probe import emit

from harnessx import Agent, AgentConfig, ProviderResponse
from harnessx.providers import LLMProvider


class Replies(LLMProvider):
    def __init__(self, replies: list[ProviderResponse]) -> None:
        self.replies = replies

    async def create(self, **kwargs: Any) -> ProviderResponse:
        return self.replies.pop(0)

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


def history(agent: Agent) -> list[str]:
    lines = []
    for message in agent.memory.get_messages():
        content = message["content"]
        if not isinstance(content, str):
            content = " ".join(block.get("text", "") for block in content if isinstance(block, dict))
        lines.append(f"{message['role']}: {content}")
    return lines


async def main(folder: str) -> None:
    observed: dict[str, Any] = {}
    config = AgentConfig(system_prompt="You keep notes on a garden.")
    first = Replies([ProviderResponse(text="Noted: tomatoes by the south wall.")])
    async with Agent(config=config, provider=first) as agent:
        await agent.run("Plant tomatoes by the south wall.")
        session_id = await agent.save_session(folder)
    observed["session_id"] = {
        "type": type(session_id).__name__,
        "is_uuid": bool(
            re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", session_id)
        ),
        "files": sorted(p.name.replace(session_id, "<id>") for p in Path(folder).iterdir()),
    }
    second = Replies([ProviderResponse(text="Water them in the morning.")])
    async with await Agent.load_session(session_id, folder, config=config, provider=second) as restored:
        observed["loaded"] = {
            "same_session": restored.session_id == session_id,
            "message_count": restored.memory.message_count,
        }
        result = await restored.run("When should I water them?")
        observed["result"] = {"status": result.status.value, "error": result.error, "output": result.output}
        observed["history"] = history(restored)
    emit(observed)


with tempfile.TemporaryDirectory() as tmp:
    asyncio.run(main(tmp))
