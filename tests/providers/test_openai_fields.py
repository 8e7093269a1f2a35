"""OpenAIProvider: refusals, the token-limit field, temperature on reasoning models,
``extra_body``, and the streamed reply's ``raw``."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import pytest

from harnessx import Agent, AgentConfig
from harnessx._errors import ConfigurationError
from harnessx.providers import OpenAIProvider, StopReason, StreamChunk
from harnessx.providers._openai import is_reasoning_model

if TYPE_CHECKING:
    from conftest import ScriptedServer

MakeOpenAI = Callable[..., OpenAIProvider]
ASK: dict[str, Any] = {"model": "gpt-test", "messages": [{"role": "user", "content": "Hi"}], "system": ""}
TOOL = {"name": "lookup", "description": "Look up", "input_schema": {"type": "object", "properties": {}}}
REFUSAL = "I'm sorry, I can't help with that."


def completion(message: dict[str, Any], finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16},
    }


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-2",
        "object": "chat.completion.chunk",
        "created": 2,
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


async def collect(stream: AsyncIterator[StreamChunk]) -> list[StreamChunk]:
    return [piece async for piece in stream]


# --------------------------------------------------------------------------- refusals


async def test_a_refusal_is_the_reply_text_and_the_stop_reason(
    server: ScriptedServer, openai: MakeOpenAI
) -> None:
    server.reply_json(completion({"content": None, "refusal": REFUSAL}))
    response = await openai().create(**ASK, tools=[], max_tokens=None)
    assert response.text == REFUSAL
    assert response.stop_reason == StopReason.REFUSAL  # finish_reason said "stop"


async def test_a_streamed_refusal_is_shown_and_stops_as_refusal(
    server: ScriptedServer, openai: MakeOpenAI
) -> None:
    server.reply_sse(
        [
            server.event(chunk({"role": "assistant", "content": None, "refusal": ""})),
            server.event(chunk({"refusal": "I'm sorry, "})),
            server.event(chunk({"refusal": "I can't help with that."})),
            server.event(chunk({}, finish_reason="stop")),
            server.event("[DONE]"),
        ]
    )
    chunks = await collect(openai().stream(**ASK, tools=[], max_tokens=None))
    pieces = [c.data for c in chunks if c.kind == "text_delta"]
    final = chunks[-1].data
    assert "".join(pieces) == final.text == REFUSAL
    assert final.stop_reason == StopReason.REFUSAL
    assert final.raw["choices"][0]["message"]["refusal"] == REFUSAL


async def test_a_refused_run_says_refused(server: ScriptedServer) -> None:
    # A streamed run; before, this run ended "end_turn" with empty output.
    server.reply_sse(
        [server.event(chunk({"refusal": REFUSAL})), server.event(chunk({}, "stop")), server.event("[DONE]")]
    )
    provider = OpenAIProvider("gpt-test", base_url=f"{server.url}/v1", api_key="sk-test")
    try:
        agent = Agent(AgentConfig(model="gpt-test"), provider=provider)
        async with agent, agent.run_stream("Help me with something bad") as stream:
            [event async for event in stream]
            result = await stream.result()
    finally:
        await provider.aclose()
    assert result.refused and not result.ok
    assert result.stop_reason == "refusal"
    assert result.output == REFUSAL


# --------------------------------------------------------------------------- parameters


async def test_the_token_limit_field_is_configurable(server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_json(completion({"content": "a"}))
    server.reply_json(completion({"content": "b"}))
    await openai().create(**ASK, tools=[], max_tokens=64)
    await openai(max_tokens_param="max_tokens").create(**ASK, tools=[], max_tokens=64)
    first, second = (request.json for request in server.requests)
    assert first["max_completion_tokens"] == 64 and "max_tokens" not in first
    assert second["max_tokens"] == 64 and "max_completion_tokens" not in second


def test_an_unknown_token_limit_field_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="max_completion_tokens"):
        OpenAIProvider("gpt-test", max_tokens_param="max_output_tokens")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("model", "reasoning"),
    [
        ("o1", True),
        ("o3-mini", True),
        ("o4-mini-2025-04-16", True),
        ("gpt-5", True),
        ("gpt-5.2-pro", True),
        ("gpt-6-sol", True),
        ("openai/gpt-5-mini", True),
        ("gpt-5-chat-latest", False),
        ("gpt-4.1", False),
        ("gpt-4o-mini", False),
        ("omni-moderation", False),
        ("smollm2", False),
        ("llama3.1:8b", False),
    ],
)
def test_reasoning_models_by_name(model: str, reasoning: bool) -> None:
    assert is_reasoning_model(model) is reasoning


async def test_no_temperature_for_a_reasoning_model(
    server: ScriptedServer, openai: MakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    provider = openai(model="o3")
    for _ in range(2):
        server.reply_json(completion({"content": "ok"}))
        await provider.create(**{**ASK, "model": "o3"}, tools=[], max_tokens=None, temperature=0.2)
    assert all("temperature" not in request.json for request in server.requests)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "temperature" in r.getMessage()]
    assert len(warnings) == 1 and "reasoning_model=False" in warnings[0].getMessage()


async def test_reasoning_model_override(server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_json(completion({"content": "a"}))
    server.reply_json(completion({"content": "b"}))
    await openai(reasoning_model=False).create(
        **{**ASK, "model": "o3"}, tools=[], max_tokens=None, temperature=0.5
    )
    await openai(reasoning_model=True).create(**ASK, tools=[], max_tokens=None, temperature=0.5)
    assert server.requests[0].json["temperature"] == 0.5
    assert "temperature" not in server.requests[1].json


# --------------------------------------------------------------------------- extra_body


async def test_extra_body_fields_are_sent(server: ScriptedServer, openai: MakeOpenAI) -> None:
    fields = {"tool_choice": "required", "parallel_tool_calls": False, "seed": 38, "metadata": {"k": "v"}}
    provider = openai(extra_body=fields)
    fields["seed"] = 1  # the provider keeps its own copy
    server.reply_json(completion({"content": "a"}))
    server.reply_sse([server.event(chunk({"content": "b"}, "stop")), server.event("[DONE]")])
    await provider.create(**ASK, tools=[TOOL], max_tokens=None)
    await collect(provider.stream(**ASK, tools=[TOOL], max_tokens=None))
    for request in server.requests:
        sent = request.json
        assert sent["tool_choice"] == "required" and sent["parallel_tool_calls"] is False
        assert sent["seed"] == 38 and sent["metadata"] == {"k": "v"}


async def test_tool_fields_are_left_out_of_a_request_without_tools(
    server: ScriptedServer, openai: MakeOpenAI
) -> None:
    # OpenAI: "tool_choice is only allowed when tools are specified".
    server.reply_json(completion({"content": "a"}))
    await openai(extra_body={"tool_choice": "auto", "parallel_tool_calls": True, "seed": 1}).create(
        **ASK, tools=[], max_tokens=None
    )
    sent = server.requests[0].json
    assert "tool_choice" not in sent and "parallel_tool_calls" not in sent and sent["seed"] == 1


@pytest.mark.parametrize(
    ("field", "hint"),
    [
        ("messages", "conversation"),
        ("model", "AgentConfig.model"),
        ("max_tokens", "AgentConfig.max_tokens"),
        ("max_completion_tokens", "max_tokens_param"),
        ("temperature", "AgentConfig.temperature"),
        ("stream", "streamed runs"),
        ("tools", "agent's tools"),
    ],
)
def test_extra_body_may_not_replace_what_the_agent_sets(field: str, hint: str) -> None:
    with pytest.raises(ConfigurationError, match=hint):
        OpenAIProvider("gpt-test", extra_body={field: 1})


def test_extra_body_must_be_json() -> None:
    with pytest.raises(ConfigurationError, match="'seed' is not JSON-serialisable"):
        OpenAIProvider("gpt-test", extra_body={"seed": {1, 2}})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="'top_p' is not JSON-serialisable"):
        OpenAIProvider("gpt-test", extra_body={"top_p": float("nan")})
    with pytest.raises(ConfigurationError, match="mapping"):
        OpenAIProvider("gpt-test", extra_body=[("seed", 1)])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- raw


async def test_a_streamed_reply_has_the_completion_as_raw(server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_sse(
        [
            server.event(chunk({"role": "assistant", "content": "Let me look."})),
            server.event(
                chunk(
                    {
                        "tool_calls": [
                            {"index": 0, "id": "call_1", "function": {"name": "lookup", "arguments": "{}"}}
                        ]
                    }
                )
            ),
            server.event(chunk({}, "tool_calls")),
            server.event({**chunk({}), "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}),
            server.event("[DONE]"),
        ]
    )
    final = (await collect(openai().stream(**ASK, tools=[TOOL], max_tokens=None)))[-1].data
    assert final.raw == {
        "id": "chatcmpl-2",
        "created": 2,
        "model": "gpt-test",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Let me look.",
                    "refusal": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": "{}"},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
    }
