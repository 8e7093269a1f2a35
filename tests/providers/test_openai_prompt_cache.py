"""The prompt-cache hint on OpenAI's wire, as harnessx 0.9.1 sends it: the hint's prefix key
as ``prompt_cache_key`` (OpenAI caches long prefixes by itself; the key routes requests that
share one to the same cache), left out with ``prompt_cache=None``, and dropped for good by a
server that refuses it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from harnessx import Agent, AgentConfig, HookEvent
from harnessx.providers import OpenAIProvider

if TYPE_CHECKING:
    from conftest import ScriptedServer

MakeOpenAI = Callable[..., OpenAIProvider]


def completion(text: str = "ok") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1},
    }


def stream_reply(server: ScriptedServer) -> None:
    server.reply_sse(
        [
            server.event(
                {"id": "c", "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": None}]}
            ),
            server.event({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            server.event("[DONE]"),
        ]
    )


def agent(provider: OpenAIProvider, **config: Any) -> tuple[Agent, list[Any]]:
    built = Agent(
        config=AgentConfig(model="gpt-4o", system_prompt="Be brief.", planning=False, **config),
        provider=provider,
    )
    keys: list[Any] = []
    built.hooks.on(HookEvent.LLM_REQUEST, lambda ctx: keys.append(ctx.data["prefix_key"]))
    return built, keys


@pytest.mark.parametrize("stream", [False, True])
async def test_the_prefix_key_is_sent_as_prompt_cache_key(
    server: ScriptedServer, openai: MakeOpenAI, stream: bool
) -> None:
    if stream:
        stream_reply(server)
    else:
        server.reply_json(completion())
    built, keys = agent(openai())
    if stream:
        async with built.run_stream("hi") as run:
            [event async for event in run]
    else:
        await built.run("hi")
    assert server.requests[0].json["prompt_cache_key"] == keys[0] and len(keys[0]) == 64


async def test_no_key_without_a_hint_and_extra_body_wins(server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_json(completion())
    server.reply_json(completion())
    await agent(openai(), prompt_cache=None)[0].run("hi")
    await agent(openai(extra_body={"prompt_cache_key": "mine"}))[0].run("hi")
    first, second = (r.json for r in server.requests)
    assert "prompt_cache_key" not in first and second["prompt_cache_key"] == "mine"


async def test_a_server_that_refuses_the_key_is_asked_without_it_from_then_on(
    server: ScriptedServer, openai: MakeOpenAI
) -> None:
    server.reply_json({"error": {"message": "Unrecognized request argument: prompt_cache_key"}}, status=400)
    server.reply_json(completion("first"))
    server.reply_json(completion("second"))
    provider = openai()
    built, _ = agent(provider)
    assert (await built.run("hi")).output == "first"
    assert (await built.run("again")).output == "second"
    sent = [r.json for r in server.requests]
    assert ["prompt_cache_key" in body for body in sent] == [True, False, False]
