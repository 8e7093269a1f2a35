"""AnthropicProvider: thinking blocks (signed and redacted) kept whole and sent back as they
came (in memory and through both stores), the streamed reply's ``raw``, and ``extra_body``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from anthropic.types.message_create_params import MessageCreateParamsStreaming
from durable_support import BackendTarget
from sdk_wire import request_is_valid

from harnessx import Agent, AgentConfig, AgentRuntime
from harnessx._errors import ConfigurationError
from harnessx.providers import AnthropicProvider, StopReason, StreamChunk, TokenUsage, ToolCall

if TYPE_CHECKING:
    from conftest import ScriptedServer

MakeAnthropic = Callable[..., AnthropicProvider]
ASK: dict[str, Any] = {"model": "claude-test", "messages": [{"role": "user", "content": "?"}], "system": ""}
TOOL = {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {}}}
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qyP"

# The blocks of a reply with extended thinking and a tool call, as the API returns them.
BLOCKS: list[dict[str, Any]] = [
    {
        "type": "thinking",
        "thinking": "The user wants the weather. I should call the tool.",
        "signature": SIGNATURE,
    },
    {"type": "redacted_thinking", "data": REDACTED},
    {"type": "text", "text": "Let me check."},
    {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Oslo"}},
]


def sse(server: ScriptedServer, *items: tuple[str, dict[str, Any]]) -> list[str]:
    return [server.event({"type": name, **data}, event=name) for name, data in items]


def thinking_stream(server: ScriptedServer) -> list[str]:
    """BLOCKS as the API streams them: thinking in pieces, then its signature in one delta."""
    start = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 30, "output_tokens": 1, "cache_read_input_tokens": 10},
    }
    return sse(
        server,
        ("message_start", {"message": start}),
        (
            "content_block_start",
            {"index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        ),
        (
            "content_block_delta",
            {"index": 0, "delta": {"type": "thinking_delta", "thinking": "The user wants "}},
        ),
        ("ping", {}),
        (
            "content_block_delta",
            {
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "the weather. I should call the tool."},
            },
        ),
        ("content_block_delta", {"index": 0, "delta": {"type": "signature_delta", "signature": SIGNATURE}}),
        ("content_block_stop", {"index": 0}),
        (
            "content_block_start",
            {"index": 1, "content_block": {"type": "redacted_thinking", "data": REDACTED}},
        ),
        ("content_block_stop", {"index": 1}),
        ("content_block_start", {"index": 2, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 2, "delta": {"type": "text_delta", "text": "Let me check."}}),
        ("content_block_stop", {"index": 2}),
        (
            "content_block_start",
            {
                "index": 3,
                "content_block": {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {}},
            },
        ),
        (
            "content_block_delta",
            {"index": 3, "delta": {"type": "input_json_delta", "partial_json": '{"city": '}},
        ),
        (
            "content_block_delta",
            {"index": 3, "delta": {"type": "input_json_delta", "partial_json": '"Oslo"}'}},
        ),
        ("content_block_stop", {"index": 3}),
        (
            "message_delta",
            {"delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 80}},
        ),
        ("message_stop", {}),
    )


async def collect(stream: AsyncIterator[StreamChunk]) -> list[StreamChunk]:
    return [chunk async for chunk in stream]


async def test_a_streamed_reply_keeps_signed_and_redacted_thinking(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    server.reply_sse(thinking_stream(server))
    chunks = await collect(anthropic().stream(**ASK, tools=[TOOL], max_tokens=None))
    final = chunks[-1].data
    assert final.content == BLOCKS  # the signature whole, the redacted block kept
    assert final.thinking == "The user wants the weather. I should call the tool."
    assert [c.data for c in chunks if c.kind == "thinking_delta"] == [
        "The user wants ",
        "the weather. I should call the tool.",
    ]
    assert final.text == "Let me check."
    assert final.tool_calls == [ToolCall("toolu_01", "get_weather", {"city": "Oslo"})]
    assert final.stop_reason == StopReason.TOOL_USE
    assert final.usage == TokenUsage(input_tokens=40, output_tokens=80, cache_read_input_tokens=10)


async def test_a_streamed_reply_has_the_message_as_raw(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    server.reply_sse(thinking_stream(server))
    final = (await collect(anthropic().stream(**ASK, tools=[TOOL], max_tokens=None)))[-1].data
    assert final.raw == {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": BLOCKS,
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 30, "output_tokens": 80, "cache_read_input_tokens": 10},
    }


async def test_a_reply_keeps_its_blocks_in_order(server: ScriptedServer, anthropic: MakeAnthropic) -> None:
    message = {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": BLOCKS,
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 30, "output_tokens": 80},
    }
    server.reply_json(message)
    response = await anthropic().create(**ASK, tools=[TOOL], max_tokens=None)
    assert response.content == BLOCKS
    assert response.raw == message
    assert response.thinking == BLOCKS[0]["thinking"]
    assert response.tool_calls == [ToolCall("toolu_01", "get_weather", {"city": "Oslo"})]


async def test_a_block_type_added_later_is_kept(server: ScriptedServer, anthropic: MakeAnthropic) -> None:
    server.reply_sse(
        sse(
            server,
            ("message_start", {"message": {"id": "m", "content": [], "usage": {"input_tokens": 1}}}),
            (
                "content_block_start",
                {"index": 0, "content_block": {"type": "fresh_block", "payload": {"a": 1}}},
            ),
            ("content_block_delta", {"index": 0, "delta": {"type": "fresh_delta", "x": 1}}),
            ("content_block_stop", {"index": 0}),
            ("content_block_start", {"index": 1, "content_block": {"type": "text", "text": "Hi"}}),
            ("content_block_stop", {"index": 1}),
            ("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
            ("message_stop", {}),
        )
    )
    chunks = await collect(anthropic().stream(**ASK, tools=[], max_tokens=None))
    assert chunks[-1].data.content == [
        # The API's own block, in its place, as 0.9.1 wraps it (sent back as it came).
        {"type": "provider", "provider": "anthropic", "data": {"type": "fresh_block", "payload": {"a": 1}}},
        {"type": "text", "text": "Hi"},
    ]
    assert chunks[-1].data.text == "Hi"
    assert [c.data for c in chunks if c.kind == "text_delta"] == ["Hi"]


# --------------------------------------------------------------------------- extra_body


async def test_extra_body_fields_are_sent(server: ScriptedServer, anthropic: MakeAnthropic) -> None:
    provider = anthropic(
        extra_body={
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
            "metadata": {"user_id": "u-1"},
        }
    )
    server.reply_sse(thinking_stream(server))
    server.reply_json({"input_tokens": 12})
    await collect(provider.stream(**ASK, tools=[TOOL], max_tokens=None))
    await provider.count_tokens(**ASK, tools=[TOOL])
    sent, counted = (request.json for request in server.requests)
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert sent["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert sent["metadata"] == {"user_id": "u-1"}
    # count_tokens takes thinking and tool_choice (they change the count) and refuses metadata
    assert counted["thinking"] == sent["thinking"] and counted["tool_choice"] == sent["tool_choice"]
    assert "metadata" not in counted


async def test_tool_choice_is_left_out_of_a_request_without_tools(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    server.reply_json({"content": [{"type": "text", "text": "x"}], "stop_reason": "end_turn", "usage": {}})
    await anthropic(extra_body={"tool_choice": {"type": "any"}}).create(**ASK, tools=[], max_tokens=None)
    assert "tool_choice" not in server.requests[0].json


@pytest.mark.parametrize(
    ("field", "hint"),
    [
        ("messages", "conversation"),
        ("system", "AgentConfig.system_prompt"),
        ("max_tokens", "default_max_tokens"),
        ("temperature", "2023-06-01"),
        ("stream", "streamed runs"),
    ],
)
def test_extra_body_may_not_replace_what_the_agent_sets(field: str, hint: str) -> None:
    with pytest.raises(ConfigurationError, match=hint):
        AnthropicProvider("claude-test", extra_body={field: 1})


# --------------------------------------------------------------------------- sent back


def answer_stream(server: ScriptedServer, text: str) -> list[str]:
    start = {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 50, "output_tokens": 1},
    }
    return sse(
        server,
        ("message_start", {"message": start}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}}),
        ("content_block_stop", {"index": 0}),
        ("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}),
        ("message_stop", {}),
    )


def weather_agent(provider: AnthropicProvider) -> Agent:
    agent = Agent(AgentConfig(model="claude-test", max_tokens=200, planning=False), provider=provider)
    agent.tools.register_with_schema(
        "get_weather", "Weather", TOOL["input_schema"], lambda city: f"Sunny in {city}", replay_policy="safe"
    )
    return agent


async def streamed(runner: Agent | AgentRuntime, message: str) -> Any:
    stream = runner.run_stream(message)
    async for _ in stream:
        pass
    return await stream.result()


def the_tool_turn(request_body: dict[str, Any]) -> list[dict[str, Any]]:
    """The content of the assistant turn that called get_weather, as the request sent it."""
    turns = [m for m in request_body["messages"] if m["role"] == "assistant"]
    calling = [t for t in turns if any(b.get("type") == "tool_use" for b in t["content"])]
    assert len(calling) == 1, request_body["messages"]
    return list(calling[0]["content"])


@pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"])
async def test_thinking_goes_back_to_the_api_as_it_came(
    server: ScriptedServer,
    anthropic: MakeAnthropic,
    store: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """The reply that called the tool streamed signed and redacted thinking: the request
    after the tool result, and a later run's request (durable: from the conversation the
    store kept, read by a fresh runtime), carry those blocks unchanged, first in that turn."""
    server.reply_sse(thinking_stream(server))
    server.reply_sse(answer_stream(server, "Sunny in Oslo."))
    server.reply_sse(answer_stream(server, "Still sunny."))
    if store == "memory":
        async with weather_agent(anthropic()) as agent:
            assert (await streamed(agent, "Weather in Oslo?")).output == "Sunny in Oslo."
            assert (await streamed(agent, "And now?")).output == "Still sunny."
    else:
        location = (
            str(tmp_path / "runs.sqlite3") if store == "sqlite" else request.getfixturevalue("pg_database")
        )
        target = BackendTarget(store, location)
        async with (
            target.open() as backend,
            AgentRuntime(weather_agent(anthropic()), backend=backend) as runtime,
        ):
            session_id = await runtime.start()
            assert (await streamed(runtime, "Weather in Oslo?")).output == "Sunny in Oslo."
        async with (
            target.open() as backend,
            AgentRuntime(weather_agent(anthropic()), backend=backend) as runtime,
        ):
            await runtime.start(session_id)
            assert (await streamed(runtime, "And now?")).output == "Still sunny."
    after_tool, later_run = (server.requests[1].json, server.requests[2].json)
    sent_back = [b for b in BLOCKS if b["type"] in ("thinking", "redacted_thinking")]
    for body in (after_tool, later_run):
        content = the_tool_turn(body)
        assert content[:2] == sent_back  # verbatim: the signature and the redacted data whole
        assert [b["type"] for b in content[2:]] == ["text", "tool_use"]
        assert request_is_valid(MessageCreateParamsStreaming, body) == []


async def test_unsigned_thinking_is_not_sent_back(server: ScriptedServer, anthropic: MakeAnthropic) -> None:
    """Thinking without the API's signature (a conversation written by a program, another
    provider's reasoning) would be refused by the API: it stays out of the request."""
    server.reply_sse(answer_stream(server, "ok"))
    messages = [
        {"role": "user", "content": "?"},
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "unsigned"}, {"type": "text", "text": "Hi."}],
        },
        {"role": "user", "content": "again"},
    ]
    await collect(
        anthropic().stream(model="claude-test", messages=messages, system="", tools=[], max_tokens=None)
    )
    assert server.requests[0].json["messages"][1]["content"] == [{"type": "text", "text": "Hi."}]
