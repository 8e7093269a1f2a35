"""How the calls of one reply run: ``concurrent=False`` calls take turns in the model's
order beside the concurrent ones (which start with them, in the model's order); the model
reads the results in its order. Overlaps are observed with events, not timing."""

from __future__ import annotations

import asyncio
from typing import Any

from _probe import emit

from harnessx import Agent, AgentConfig, PermissionLevel, ProviderResponse, RunEventType, ToolCall
from harnessx.providers import LLMProvider


class Script(LLMProvider):
    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.requests: list[Any] = []

    async def create(self, **kwargs: Any) -> ProviderResponse:
        self.requests.append(kwargs["messages"])
        if len(self.requests) == 1:
            calls = [ToolCall(f"c{i}", n, {}) for i, n in enumerate(self.names)]
            return ProviderResponse(tool_calls=calls, stop_reason="tool_use")
        return ProviderResponse(text="done")

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


async def observe(names: list[str]) -> dict[str, Any]:
    log: list[str] = []
    started = {n: asyncio.Event() for n in ("fetch_a", "fetch_b", "s1", "s2")}
    provider = Script(names)
    agent = Agent(config=AgentConfig(model="m", planning=False), provider=provider)
    for name in started:

        async def tool(_name: str = name) -> str:
            log.append(f"start {_name}")
            started[_name].set()
            if _name == "s1":
                try:  # s1 waits for fetch_b, which can start only beside it
                    await asyncio.wait_for(started["fetch_b"].wait(), 2)
                except TimeoutError:
                    log.append("s1 waited in vain")
            await asyncio.sleep(0)
            log.append(f"end {_name}")
            return _name

        agent.tools.register_tool(
            tool, name=name, permission=PermissionLevel.ALLOW, concurrent=name.startswith("fetch")
        )
    async with agent.run_stream("go") as stream:
        events = [e async for e in stream]
        result = await stream.result()
    last = provider.requests[1][-1]["content"]
    return {
        "ok": result.status.value,
        "starts": [e.data.name for e in events if e.type is RunEventType.TOOL_CALL_START],
        "s1_beside_fetch_b": "s1 waited in vain" not in log,
        "s2_after_s1": log.index("end s1") < log.index("start s2") if "s2" in names else None,
        "results_in_order": [b["tool_use_id"] for b in last if b.get("type") == "tool_result"],
    }


async def main() -> None:
    emit(
        {
            "serial_first": await observe(["s1", "fetch_a", "fetch_b"]),
            "interleaved": await observe(["fetch_a", "s1", "fetch_b", "s2"]),
        }
    )


asyncio.run(main())
