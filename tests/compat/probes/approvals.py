"""An ASK tool in a durable run: the stop, the pending call, decisions and their errors."""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
from typing import Any

from _durable import durable
from _probe import caught, emit, event

from harnessx import (
    Agent,
    HookEvent,
    PermissionLevel,
    ProviderResponse,
    ToolCall,
)
from harnessx.providers import LLMProvider


class Provider(LLMProvider):
    async def create(self, **kwargs: Any) -> ProviderResponse:
        last = kwargs["messages"][-1]["content"]
        if isinstance(last, list):
            results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
            if results:
                return ProviderResponse(text="answered: " + results[0]["content"])
        return ProviderResponse(
            tool_calls=[ToolCall("note", "create_note", {"text": "hi"})], stop_reason="tool_use"
        )

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


# (status, phase) of each CHECKPOINT hook, in order.
checkpoints: list[list[str]] = []


def agent() -> Agent:
    a = Agent(provider=Provider())
    a.hooks.on(HookEvent.CHECKPOINT, lambda ctx: checkpoints.append([ctx.data["status"], ctx.data["phase"]]))

    @a.tools.register(permission=PermissionLevel.ASK, replay_policy="manual")
    def create_note(text: str) -> str:
        """Create a note."""
        return "Note created"

    return a


async def record(backend: Any, session_id: str) -> list[Any] | str:
    """``[status, phase, messages]`` of the session's latest run as the backend stores it
    (the messages in the content-block form, as the model is shown them)."""
    latest = getattr(backend, "latest_run", None)
    if latest is None:
        return "no latest_run"
    stored = await latest(session_id)
    return [stored["status"], stored["phase"], stored["messages"]]


async def main(folder: str) -> None:
    observed: dict[str, Any] = {}
    async with durable(folder, {"notes": agent}) as (backend, make):
        async with make("notes") as runtime:
            handle = await runtime.submit("note it")
            events = [e async for e in handle.events()]
            waiting = await handle.result()
            pending = waiting.pending[0]
            observed["waiting"] = {
                "status": waiting.status.value,
                "stop_reason": waiting.stop_reason,
                "needs_input": waiting.needs_input,
                "pending": pending.to_dict(),
                "pending_type": type(pending).__name__,
                "pending_fields": [f.name for f in dataclasses.fields(pending)],
                "pending_frozen": type(pending).__dataclass_params__.frozen,  # type: ignore[attr-defined]
            }
            observed["events"] = [event(e) for e in events]
            observed["stopped_record"] = await record(backend, waiting.session_id)
            observed["last_checkpoint_at_the_stop"] = checkpoints[-1]
            try:
                await runtime.resolve_tool(pending, retry=True)
            except Exception as error:
                observed["resolve_an_approval"] = caught(error)
            try:
                await runtime.approve(f"{waiting.run_id}:1:nothing")
            except Exception as error:
                observed["approve_an_unknown_key"] = {
                    **caught(error),
                    "execution_key": getattr(error, "execution_key", None),
                }
            approved = await runtime.approve(pending, resume=True)
            observed["approve_resume"] = {
                "type": type(approved).__name__,
                "status": approved.status.value,
                "output": approved.output,
            }
            observed["finished_record"] = await record(backend, waiting.session_id)
            observed["last_checkpoint_at_the_end"] = checkpoints[-1]
            observed["approve_without_resume"] = None
        async with make("notes") as runtime:
            waiting = await runtime.run("note it")
            observed["approve_without_resume"] = repr(await runtime.decline(waiting.pending[0]))
            declined = await runtime.resume(waiting.session_id)
            observed["after_decline"] = (await declined.result()).output if declined else None
        async with make("notes") as runtime:
            waiting = await runtime.run("note it")
            declined = await runtime.decline(waiting.pending[0], resume=True)
            observed["decline_resume"] = {"type": type(declined).__name__, "output": declined.output}
    emit(observed)


with tempfile.TemporaryDirectory() as tmp:
    asyncio.run(main(tmp))
