"""A provider's own blocks (``{"type": "provider", ...}``: a server tool's call and result)
and a server tool offered by request middleware: what a provider is sent (the tool as given,
a paused turn as it stands, the whole turn on the next run), what the memory and a session
snapshot keep, a middleware that changes them, and a fallback chain pinned to the member
that paused its turn."""

from __future__ import annotations

import asyncio
import copy
import json
import tempfile
from typing import Any

from _probe import emit

from harnessx import Agent, AgentConfig, Middleware, ProviderResponse, RetryPolicy
from harnessx.providers import LLMProvider
from harnessx.providers.fallback import FallbackProvider

WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
CALL = {
    "type": "provider",
    "provider": "anthropic",
    "data": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
}
RESULT = {
    "type": "provider",
    "provider": "anthropic",
    "data": {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
}


class Scripted(LLMProvider):
    def __init__(self, replies: list[Any]) -> None:
        self.replies = list(replies)
        self.calls: list[dict[str, Any]] = []

    async def create(self, **request: Any) -> ProviderResponse:
        self.calls.append(copy.deepcopy({k: request[k] for k in ("messages", "tools")}))
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def count_tokens(self, **request: Any) -> int:
        return 0


class WebSearch(Middleware):
    async def before_llm_call(self, messages: Any, tools: Any) -> Any:
        return messages, [*tools, WEB_SEARCH]


class Rewrite(Middleware):
    async def after_llm_call(self, response: Any) -> Any:
        blocks = [dict(b) if isinstance(b, dict) else b for b in response.content]
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "provider":
                block["data"] = {**block["data"], "input": {"query": "changed"}}
        response.content = blocks
        return response


def config() -> AgentConfig:
    return AgentConfig(
        model="fixture", planning=False, prompt_cache=None, retry=RetryPolicy(attempts=1, backoff_seconds=0)
    )


def seen(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "messages": call["messages"],
        "server_tools": [t for t in call["tools"] if "input_schema" not in t],
    }


async def main() -> None:
    paused = ProviderResponse(
        content=[{"type": "text", "text": "Searching."}, CALL], stop_reason="pause_turn"
    )
    finished = ProviderResponse(content=[RESULT, {"type": "text", "text": "Found it."}])
    provider = Scripted([paused, finished, ProviderResponse(text="Nothing new.")])
    folder = tempfile.mkdtemp()
    async with Agent(config=config(), provider=provider) as agent:
        agent.middleware.add(WebSearch())
        first = await agent.run("search")
        second = await agent.run("again")
        memory = agent.memory.get_messages()
        session = await agent.save_session(folder)
    async with await Agent.load_session(session, folder, provider=Scripted([])) as loaded:
        restored = loaded.memory.get_messages()

    rewritten = Scripted([ProviderResponse(content=[{"type": "text", "text": "Searching."}, CALL, RESULT])])
    async with Agent(config=config(), provider=rewritten) as agent:
        agent.middleware.add(Rewrite())
        refused = await agent.run("search")

    primary = Scripted([paused, ConnectionError("down")])
    backup = Scripted([ProviderResponse(text="backup")])
    chain = FallbackProvider(primary, fallbacks=[backup])
    request = {"model": "fixture", "messages": [], "tools": [], "system": None, "max_tokens": 100}
    await chain.create(**request)
    state = json.loads(json.dumps(chain.export_state()))
    try:
        await chain.create(**request)
        pinned_error = None
    except ConnectionError as exc:
        pinned_error = type(exc).__name__

    emit(
        {
            "outputs": [first.output, second.output, str(first.status), str(second.status)],
            "requests": [seen(call) for call in provider.calls],
            "memory": memory,
            "restored_equal": restored == memory,
            "refused": [str(refused.status), (refused.error or {}).get("type")],
            "fallback": {
                "pinned": state.get("pinned"),
                "error": pinned_error,
                "backup_calls": len(backup.calls),
            },
        }
    )


asyncio.run(main())
