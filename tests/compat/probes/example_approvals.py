"""The calls of the original's example ``06-durability/tool_approvals_and_resume.py``: an
ASK tool stops a run on SQLite, and ``approve(pending, allow=..., resume=True)`` answered
yes, then no, finishes the same run."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from _probe import emit

from harnessx import Agent, AgentRuntime, PermissionLevel, ProviderResponse, SQLiteBackend, ToolCall
from harnessx.providers import LLMProvider


class Replies(LLMProvider):
    """Answers from a list, one per model call."""

    def __init__(self, replies: list[ProviderResponse]) -> None:
        self.replies = replies

    async def create(self, **kwargs: Any) -> ProviderResponse:
        return self.replies.pop(0)

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


async def decided(folder: Path, allow: bool) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    written = folder / "written.txt"
    replies = [
        ProviderResponse(
            tool_calls=[ToolCall("w", "write_file", {"text": "checked"})], stop_reason="tool_use"
        ),
        ProviderResponse(text="Done with the decision."),
    ]
    async with Agent(provider=Replies(replies)) as agent:

        @agent.tools.register(permission=PermissionLevel.ASK, replay_policy="manual")
        def write_file(text: str) -> str:
            """Write a file."""
            written.write_text(text)
            return "written"

        async with (
            SQLiteBackend(str(folder / "store.db")) as backend,
            AgentRuntime(agent, backend=backend) as runtime,
        ):
            result = await runtime.run("Write the file")
            pending = result.pending[0]
            seen["before"] = {
                "status": result.status.value,
                "needs_input": result.needs_input,
                "written": written.exists(),
                "pending_status": pending.status,
                "question": f"{pending.call.name}({pending.call.input})",
            }
            after = await runtime.approve(pending, allow=allow, resume=True)
            seen["after"] = {
                "type": type(after).__name__,
                "status": after.status.value,
                "written": written.exists(),
                "error": after.error,
                "output": after.output,
            }
    return seen


async def main() -> None:
    observed = {}
    for allow in (True, False):
        with tempfile.TemporaryDirectory() as folder:
            observed["yes" if allow else "no"] = await decided(Path(folder), allow)
    emit(observed)


asyncio.run(main())
