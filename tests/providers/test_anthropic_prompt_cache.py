"""The prompt-cache hint on Anthropic's wire (``AgentConfig(prompt_cache=...)``, on by
default as in harnessx 0.9.1): ``cache_control`` markers after the system prompt, the tools
and the last message, as a scripted Messages API server on loopback receives them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from harnessx import Agent, AgentConfig, HookEvent, PromptCachePolicy
from harnessx._prompt_cache import build_hint
from harnessx.providers import AnthropicProvider

if TYPE_CHECKING:
    from conftest import ScriptedServer

MakeAnthropic = Callable[..., AnthropicProvider]
EPHEMERAL = {"type": "ephemeral"}


def reply(value: str = "ok") -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": value}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }


def weather_agent(provider: AnthropicProvider, **config: Any) -> Agent:
    agent = Agent(
        config=AgentConfig(model="claude-sonnet-4-6", system_prompt="Be brief.", planning=False, **config),
        provider=provider,
    )

    @agent.tools.register()
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        return "sunny"

    return agent


@pytest.mark.parametrize("stream", [False, True])
async def test_markers_after_the_system_prompt_the_tools_and_the_last_message(
    server: ScriptedServer, anthropic: MakeAnthropic, stream: bool
) -> None:
    if stream:
        server.reply_sse(
            [
                server.event({"type": "message_start", "message": {"id": "m", "content": [], "usage": {}}}),
                server.event({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}}),
                server.event({"type": "message_stop"}),
            ]
        )
    else:
        server.reply_json(reply())
    agent = weather_agent(anthropic())
    prefix_keys: list[Any] = []
    agent.hooks.on(HookEvent.LLM_REQUEST, lambda ctx: prefix_keys.append(ctx.data["prefix_key"]))
    if stream:
        async with agent.run_stream("Weather in Rome?") as run:
            [event async for event in run]
    else:
        await agent.run("Weather in Rome?")
    sent = server.requests[0].json
    assert sent["system"] == [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}]
    assert sent["tools"][-1]["cache_control"] == EPHEMERAL
    assert sent["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL
    assert str(sent).count("cache_control") == 3  # the API allows four
    assert isinstance(prefix_keys[0], str) and len(prefix_keys[0]) == 64


async def test_an_hour_long_lifetime_and_no_history_marker(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    server.reply_json(reply())
    policy = PromptCachePolicy(ttl_seconds=3600, cache_history=False)
    await weather_agent(anthropic(), prompt_cache=policy).run("Weather in Rome?")
    sent = server.requests[0].json
    assert sent["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert "cache_control" not in str(sent["messages"])


async def test_prompt_cache_none_sends_no_markers(server: ScriptedServer, anthropic: MakeAnthropic) -> None:
    server.reply_json(reply())
    agent = weather_agent(anthropic(), prompt_cache=None)
    prefix_keys: list[Any] = []
    agent.hooks.on(HookEvent.LLM_REQUEST, lambda ctx: prefix_keys.append(ctx.data["prefix_key"]))
    await agent.run("Weather in Rome?")
    sent = server.requests[0].json
    assert "cache_control" not in str(sent) and sent["system"] == "Be brief."
    assert prefix_keys == [None]


async def test_a_request_refused_for_its_markers_goes_again_without_them(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    server.reply_json(
        {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "cache_control: not allowed here"},
        },
        status=400,
    )
    server.reply_json(reply("uncached"))
    result = await weather_agent(anthropic()).run("Weather in Rome?")
    assert result.ok and result.output == "uncached"
    first, second = (r.json for r in server.requests)
    assert "cache_control" in str(first) and "cache_control" not in str(second)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_server_that_refused_the_markers_gets_none_after(
    server: ScriptedServer, anthropic: MakeAnthropic, stream: bool
) -> None:
    """Once an unmarked request went through after a refusal, the provider's later calls go
    unmarked the first time instead of twice each."""
    refusal = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad request"}}
    server.reply_json(refusal, status=400)
    text = {"type": "text_delta", "text": "ok"}
    for _ in range(2):
        if stream:
            server.reply_sse(
                [
                    server.event(
                        {"type": "message_start", "message": {"id": "m", "content": [], "usage": {}}}
                    ),
                    server.event(
                        {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
                    ),
                    server.event({"type": "content_block_delta", "index": 0, "delta": text}),
                    server.event({"type": "content_block_stop", "index": 0}),
                    server.event(
                        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}}
                    ),
                    server.event({"type": "message_stop"}),
                ]
            )
        else:
            server.reply_json(reply())
    agent = weather_agent(anthropic())
    for question in ("Weather in Rome?", "And in Oslo?"):
        if stream:
            async with agent.run_stream(question) as run:
                [event async for event in run]
            assert (await run.result()).ok
        else:
            assert (await agent.run(question)).ok
    assert ["cache_control" in str(r.json) for r in server.requests] == [True, False, False]


async def test_a_refusal_that_does_not_say_why_goes_again_unmarked_once(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    """A compatible server may refuse the markers without naming them."""
    bad = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad request"}}
    server.reply_json(bad, status=400)
    server.reply_json(bad, status=400)
    result = await weather_agent(anthropic()).run("Weather in Rome?")
    assert result.failed and result.error is not None and "bad request" in result.error["message"]
    first, second = (r.json for r in server.requests)
    assert "cache_control" in str(first) and "cache_control" not in str(second)


async def test_other_refusals_are_not_sent_again(server: ScriptedServer, anthropic: MakeAnthropic) -> None:
    server.reply_json(
        {"type": "error", "error": {"type": "authentication_error", "message": "no"}}, status=401
    )
    result = await weather_agent(anthropic()).run("Weather in Rome?")
    assert result.failed and len(server.requests) == 1


async def test_thinking_is_never_marked(server: ScriptedServer, anthropic: MakeAnthropic) -> None:
    server.reply_json(reply())
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": [{"type": "text", "text": "b"}, thinking]},
    ]
    hint = build_hint(PromptCachePolicy(), "claude-test", None, [], messages)
    await anthropic().create(
        model="claude-test", messages=messages, system="", tools=[], max_tokens=10, cache=hint
    )
    assert "cache_control" not in str(server.requests[0].json["messages"])
