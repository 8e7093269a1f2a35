"""OpenAIProvider against a scripted chat-completions server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from harnessx._errors import ConfigurationError
from harnessx.providers import OpenAIProvider, StopReason, StreamChunk, TokenUsage
from harnessx.providers.base import INVALID_ARGUMENTS
from harnessx.types import ToolCallDelta

if TYPE_CHECKING:
    from conftest import ScriptedServer

MakeOpenAI = Callable[..., OpenAIProvider]
KEY = "sk-test-SECRET-0123456789"

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def completion(
    content: str | None = "Hello!",
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str | None = "stop",
    usage: dict[str, Any] | None = None,
    **message_extra: Any,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, **message_extra}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def wire_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def delta(payload: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {"id": "c1", "choices": [{"index": 0, "delta": payload, "finish_reason": finish_reason}]}


async def collect(stream: AsyncIterator[StreamChunk]) -> list[StreamChunk]:
    return [chunk async for chunk in stream]


# --------------------------------------------------------------------------- create


async def test_plain_text_reply(server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_json(completion("Hello there"))
    response = await openai().create(
        model="gpt-test",
        messages=[{"role": "user", "content": "Hi"}],
        system="Be brief.",
        tools=[],
        max_tokens=100,
    )
    assert response.text == "Hello there"
    assert response.tool_calls == []
    assert response.stop_reason == StopReason.END_TURN
    assert response.usage == TokenUsage(input_tokens=10, output_tokens=5)

    request = server.requests[0]
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.json == {
        "model": "gpt-test",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "max_completion_tokens": 100,  # max_tokens is deprecated, and refused by reasoning models
    }


async def test_optional_fields_are_sent_only_when_set(server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_json(completion())
    await openai().create(
        model="gpt-test",
        messages=[{"role": "user", "content": "Hi"}],
        system="",
        tools=[],
        max_tokens=None,
        temperature=0.3,
    )
    sent = server.requests[0].json
    assert "max_completion_tokens" not in sent and "max_tokens" not in sent and "tools" not in sent
    assert sent["temperature"] == 0.3
    assert sent["messages"] == [{"role": "user", "content": "Hi"}]  # no empty system message


async def test_tool_call_reply_and_tool_results_on_the_wire(
    server: ScriptedServer, openai: MakeOpenAI
) -> None:
    server.reply_json(
        completion(
            None,
            tool_calls=[wire_call("call_9", "get_weather", '{"city": "Oslo"}')],
            finish_reason="tool_calls",
        )
    )
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Two cities."},  # not sent: nowhere to put it
                {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "no data", "is_error": True},
                {"type": "text", "text": "And now?"},
            ],
        },
    ]
    response = await openai().create(
        model="gpt-test",
        messages=history,
        system="You are a weather bot.",
        tools=[WEATHER_TOOL],
        max_tokens=None,
    )

    assert response.stop_reason == StopReason.TOOL_USE
    assert response.tool_calls is not None and len(response.tool_calls) == 1
    call = response.tool_calls[0]
    assert (call.id, call.name, call.input, call.parse_error) == (
        "call_9",
        "get_weather",
        {"city": "Oslo"},
        None,
    )

    sent = server.requests[0].json
    assert sent["messages"][0] == {"role": "system", "content": "You are a weather bot."}
    assert sent["messages"][1] == {"role": "user", "content": "Weather in Paris and Rome?"}
    assistant = sent["messages"][2]
    assert assistant["role"] == "assistant" and assistant["content"] is None
    assert assistant["tool_calls"][0] == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
    }
    assert json.loads(assistant["tool_calls"][1]["function"]["arguments"]) == {"city": "Rome"}
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
    assert sent["messages"][4]["tool_call_id"] == "call_2"
    assert "no data" in sent["messages"][4]["content"]
    assert sent["messages"][4]["content"].startswith("Error")  # the API has no is_error flag
    # The user's words after the answers to the calls, as the API wants them.
    assert sent["messages"][5] == {"role": "user", "content": "And now?"}
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city",
                "parameters": WEATHER_TOOL["input_schema"],
            },
        }
    ]


async def test_malformed_tool_arguments_become_parse_errors(
    server: ScriptedServer, openai: MakeOpenAI
) -> None:
    server.reply_json(
        completion(
            None,
            tool_calls=[
                wire_call("call_a", "get_weather", '{"city": "Oslo"'),
                wire_call("call_b", "get_weather", '["Oslo"]'),
                wire_call("call_c", "get_weather", ""),
            ],
            finish_reason="tool_calls",
        )
    )
    response = await openai().create(
        model="gpt-test",
        messages=[{"role": "user", "content": "?"}],
        system="",
        tools=[WEATHER_TOOL],
        max_tokens=None,
    )
    assert response.tool_calls is not None
    broken, listed, empty = response.tool_calls
    assert broken.parse_error is not None and "not valid JSON" in broken.parse_error
    assert listed.parse_error is not None and "array" in listed.parse_error
    assert broken.input == {INVALID_ARGUMENTS: broken.parse_error}, "0.9.1's marker"
    assert listed.input == {INVALID_ARGUMENTS: listed.parse_error}
    assert empty.input == {} and empty.parse_error is None  # no arguments at all is fine


@pytest.mark.parametrize(
    ("finish_reason", "expected"),
    [
        ("stop", StopReason.END_TURN),
        ("length", StopReason.MAX_TOKENS),
        ("content_filter", StopReason.SAFETY),
        ("tool_calls", StopReason.TOOL_USE),
        ("function_call", StopReason.TOOL_USE),
        ("something_new", StopReason.OTHER),
        (None, StopReason.END_TURN),
    ],
)
async def test_finish_reason_mapping(
    server: ScriptedServer, openai: MakeOpenAI, finish_reason: str | None, expected: StopReason
) -> None:
    server.reply_json(completion("x", finish_reason=finish_reason))
    response = await openai().create(
        model="gpt-test", messages=[{"role": "user", "content": "?"}], system="", tools=[], max_tokens=None
    )
    assert response.stop_reason == expected


async def test_tool_calls_with_finish_reason_stop_count_as_tool_use(
    server: ScriptedServer, openai: MakeOpenAI
) -> None:
    # What some local servers send.
    server.reply_json(
        completion(None, tool_calls=[wire_call("c", "get_weather", "{}")], finish_reason="stop")
    )
    response = await openai().create(
        model="gpt-test", messages=[{"role": "user", "content": "?"}], system="", tools=[], max_tokens=None
    )
    assert response.stop_reason == StopReason.TOOL_USE


async def test_usage_and_reasoning(server: ScriptedServer, openai: MakeOpenAI) -> None:
    usage = {"prompt_tokens": 120, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 100}}
    server.reply_json(completion("42", usage=usage, reasoning_content="6 times 7"))
    response = await openai().create(
        model="gpt-test", messages=[{"role": "user", "content": "?"}], system="", tools=[], max_tokens=None
    )
    assert response.usage == TokenUsage(input_tokens=120, output_tokens=30, cache_read_input_tokens=100)
    assert response.thinking == "6 times 7"
    assert response.raw["id"] == "chatcmpl-1"


# --------------------------------------------------------------------------- keys and URLs


async def test_custom_base_url_needs_no_key(server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_json(completion("local"))
    provider = openai(api_key=None)
    response = await provider.create(
        model="llama", messages=[{"role": "user", "content": "?"}], system="", tools=[], max_tokens=None
    )
    assert response.text == "local"
    assert "authorization" not in server.requests[0].headers


async def test_missing_key_for_openai_fails_at_call_time() -> None:
    provider = OpenAIProvider("gpt-test")  # constructing is fine
    assert provider.base_url == "https://api.openai.com/v1"
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        await provider.create(
            model="gpt-test",
            messages=[{"role": "user", "content": "?"}],
            system="",
            tools=[],
            max_tokens=None,
        )
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        await collect(
            provider.stream(
                model="gpt-test",
                messages=[{"role": "user", "content": "?"}],
                system="",
                tools=[],
                max_tokens=None,
            )
        )
    await provider.aclose()


async def test_key_and_base_url_from_the_environment(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1/")
    server.reply_json(completion("env"))
    provider = OpenAIProvider("gpt-test")
    try:
        response = await provider.create(
            model="gpt-test",
            messages=[{"role": "user", "content": "?"}],
            system="",
            tools=[],
            max_tokens=None,
        )
    finally:
        await provider.aclose()
    assert response.text == "env"
    assert server.requests[0].path == "/v1/chat/completions"
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env"
    assert "sk-from-env" not in repr(provider)


async def test_organization_and_extra_headers(server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_json(completion())
    provider = openai(organization="org-7", extra_headers={"x-trace": "abc"})
    await provider.create(
        model="gpt-test", messages=[{"role": "user", "content": "?"}], system="", tools=[], max_tokens=None
    )
    headers = server.requests[0].headers
    assert headers["openai-organization"] == "org-7"
    assert headers["x-trace"] == "abc"


async def test_count_tokens_is_a_local_estimate(server: ScriptedServer, openai: MakeOpenAI) -> None:
    provider = openai()
    short = await provider.count_tokens(
        model="gpt-test", messages=[{"role": "user", "content": "hi"}], system="", tools=[]
    )
    long = await provider.count_tokens(
        model="gpt-test",
        messages=[{"role": "user", "content": "word " * 400}],
        system="sys",
        tools=[WEATHER_TOOL],
    )
    assert 0 < short < long
    assert 400 <= long <= 800  # ~2000 characters of content at about 4 per token
    assert server.requests == []


# --------------------------------------------------------------------------- streaming


async def test_streaming_text(server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_sse(
        [
            server.event(delta({"role": "assistant", "content": ""})),
            server.event(delta({"content": "Hel"})),
            server.event(delta({"content": "lo"})),
            server.event(delta({}, finish_reason="stop")),
            server.event({"id": "c1", "choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": 2}}),
            server.event("[DONE]"),
        ]
    )
    chunks = await collect(
        openai().stream(
            model="gpt-test", messages=[{"role": "user", "content": "Hi"}], system="", tools=[], max_tokens=50
        )
    )
    assert [(c.kind, c.data) for c in chunks[:-1]] == [("text_delta", "Hel"), ("text_delta", "lo")]
    final = chunks[-1]
    assert final.kind == "response"
    assert final.data.text == "Hello"
    assert final.data.stop_reason == StopReason.END_TURN
    assert final.data.usage == TokenUsage(input_tokens=8, output_tokens=2)

    sent = server.requests[0].json
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["max_completion_tokens"] == 50


async def test_streamed_tool_calls_are_assembled_from_fragments(
    server: ScriptedServer, openai: MakeOpenAI
) -> None:
    def fragment(index: int, arguments: str, call_id: str | None = None, name: str | None = None) -> str:
        piece: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
        if call_id:  # only the first fragment of each call names it
            piece.update(id=call_id, type="function")
            piece["function"]["name"] = name
        return server.event(delta({"tool_calls": [piece]}))

    server.reply_sse(
        [
            server.event(delta({"role": "assistant", "content": "Checking."})),
            fragment(0, "", "call_A", "get_weather"),
            fragment(0, '{"ci'),
            fragment(1, "", "call_B", "get_weather"),
            fragment(0, 'ty": "Par'),
            fragment(1, '{"city": "Rome"}'),
            fragment(0, 'is"}'),
            server.event(delta({}, finish_reason="tool_calls")),
            server.event("[DONE]"),
        ]
    )
    chunks = await collect(
        openai().stream(
            model="gpt-test",
            messages=[{"role": "user", "content": "?"}],
            system="",
            tools=[WEATHER_TOOL],
            max_tokens=None,
        )
    )
    # As 0.9.1: each call as it starts (its name, no arguments), then each piece of its arguments.
    a, b = ToolCallDelta("call_A", "get_weather"), ToolCallDelta("call_B", "get_weather")
    assert chunks[:-1] == [
        StreamChunk("text_delta", "Checking."),
        StreamChunk("tool_call_delta", a),
        StreamChunk("tool_call_delta", replace(a, partial_json='{"ci')),
        StreamChunk("tool_call_delta", b),
        StreamChunk("tool_call_delta", replace(a, partial_json='ty": "Par')),
        StreamChunk("tool_call_delta", replace(b, partial_json='{"city": "Rome"}')),
        StreamChunk("tool_call_delta", replace(a, partial_json='is"}')),
    ]
    final = chunks[-1].data
    assert final.text == "Checking."
    assert final.stop_reason == StopReason.TOOL_USE
    assert [(c.id, c.name, c.input) for c in final.tool_calls] == [
        ("call_A", "get_weather", {"city": "Paris"}),
        ("call_B", "get_weather", {"city": "Rome"}),
    ]


async def test_a_streamed_call_without_an_id_is_named_as_it_runs(
    server: ScriptedServer, openai: MakeOpenAI
) -> None:
    """A server that sends no call id (some local ones): the pieces name the id the call is
    given, as 0.9.1's; a fragment with nothing to show is a bare ``progress`` chunk."""
    fragments = [
        {"index": 0, "type": "function", "function": {"name": "get_weather", "arguments": ""}},
        {"index": 0, "function": {"arguments": ""}},
        {"index": 0, "function": {"arguments": '{"city": "Oslo"}'}},
    ]
    server.reply_sse(
        [
            *[server.event(delta({"tool_calls": [fragment]})) for fragment in fragments],
            server.event(delta({}, finish_reason="tool_calls")),
            server.event("[DONE]"),
        ]
    )
    chunks = await collect(
        openai().stream(
            model="gpt-test",
            messages=[{"role": "user", "content": "?"}],
            system="",
            tools=[],
            max_tokens=None,
        )
    )
    (call,) = chunks[-1].data.tool_calls
    assert call.id.startswith("call_") and call.input == {"city": "Oslo"}
    assert chunks[:-1] == [
        StreamChunk("tool_call_delta", ToolCallDelta(call.id, "get_weather")),
        StreamChunk("progress"),
        StreamChunk("tool_call_delta", ToolCallDelta(call.id, "get_weather", '{"city": "Oslo"}')),
    ]


async def test_streamed_malformed_tool_arguments(server: ScriptedServer, openai: MakeOpenAI) -> None:
    first = {
        "index": 0,
        "id": "call_X",
        "type": "function",
        "function": {"name": "get_weather", "arguments": "{"},
    }
    server.reply_sse(
        [
            server.event(delta({"tool_calls": [first]})),
            server.event(delta({"tool_calls": [{"index": 0, "function": {"arguments": '"city": '}}]})),
            server.event(delta({}, finish_reason="tool_calls")),
            server.event("[DONE]"),
        ]
    )
    chunks = await collect(
        openai().stream(
            model="gpt-test",
            messages=[{"role": "user", "content": "?"}],
            system="",
            tools=[],
            max_tokens=None,
        )
    )
    (call,) = chunks[-1].data.tool_calls
    assert call.id == "call_X" and call.input == {INVALID_ARGUMENTS: call.parse_error}
    assert call.parse_error is not None and "not complete JSON" in call.parse_error


async def test_streamed_reasoning_is_thinking(server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_sse(
        [
            server.event(delta({"reasoning_content": "Let me "})),
            server.event(delta({"reasoning_content": "think."})),
            server.event(delta({"content": "Done."})),
            server.event(delta({}, finish_reason="length")),
            server.event("[DONE]"),
        ]
    )
    chunks = await collect(
        openai().stream(
            model="gpt-test",
            messages=[{"role": "user", "content": "?"}],
            system="",
            tools=[],
            max_tokens=None,
        )
    )
    assert [c.kind for c in chunks] == ["thinking_delta", "thinking_delta", "text_delta", "response"]
    final = chunks[-1].data
    assert final.thinking == "Let me think."
    assert final.stop_reason == StopReason.MAX_TOKENS
    assert final.usage == TokenUsage()  # this server sent no usage chunk: none is known


async def test_stream_without_done_but_with_finish_reason_is_complete(
    server: ScriptedServer, openai: MakeOpenAI
) -> None:
    server.reply_sse([server.event(delta({"content": "ok"}, finish_reason="stop"))])
    chunks = await collect(
        openai().stream(
            model="gpt-test",
            messages=[{"role": "user", "content": "?"}],
            system="",
            tools=[],
            max_tokens=None,
        )
    )
    assert chunks[-1].data.text == "ok"
    assert len(server.requests) == 1
