"""AnthropicProvider against a scripted Messages API server."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import pytest

from harnessx._errors import ConfigurationError, ProviderError
from harnessx.providers import AnthropicProvider, StopReason, StreamChunk, TokenUsage
from harnessx.providers.base import INVALID_ARGUMENTS
from harnessx.types import ToolCallDelta

if TYPE_CHECKING:
    from conftest import Drive, ScriptedServer

MakeAnthropic = Callable[..., AnthropicProvider]
KEY = "sk-test-SECRET-0123456789"
ASK: dict[str, Any] = {"model": "claude-test", "messages": [{"role": "user", "content": "?"}], "system": ""}

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def message(
    *blocks: dict[str, Any], stop_reason: str | None = "end_turn", usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": list(blocks),
        "stop_reason": stop_reason,
        "usage": usage or {"input_tokens": 12, "output_tokens": 4},
    }


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


async def collect(stream: AsyncIterator[StreamChunk]) -> list[StreamChunk]:
    return [chunk async for chunk in stream]


def events(server: ScriptedServer, *items: tuple[str, dict[str, Any]]) -> list[str]:
    return [server.event({"type": name, **data}, event=name) for name, data in items]


def message_start(input_tokens: int = 20) -> tuple[str, dict[str, Any]]:
    usage = {"input_tokens": input_tokens, "output_tokens": 1, "cache_read_input_tokens": 5}
    return ("message_start", {"message": {"id": "msg_s", "content": [], "usage": usage}})


def block_start(index: int, block: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return ("content_block_start", {"index": index, "content_block": block})


def block_delta(index: int, delta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return ("content_block_delta", {"index": index, "delta": delta})


def block_stop(index: int) -> tuple[str, dict[str, Any]]:
    return ("content_block_stop", {"index": index})


def message_end(stop_reason: str = "end_turn", output_tokens: int = 9) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("message_delta", {"delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": output_tokens}}),
        ("message_stop", {}),
    ]


def text_reply(server: ScriptedServer, *pieces: str) -> list[str]:
    deltas = [block_delta(0, {"type": "text_delta", "text": piece}) for piece in pieces]
    return events(
        server,
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        *deltas,
        block_stop(0),
        *message_end(),
    )


# --------------------------------------------------------------------------- create


async def test_plain_text_reply(server: ScriptedServer, anthropic: MakeAnthropic) -> None:
    server.reply_json(message(text("Hello"), text(" there")))
    response = await anthropic().create(
        model="claude-test",
        messages=[{"role": "user", "content": "Hi"}],
        system="Be brief.",
        tools=[],
        max_tokens=None,
    )
    assert response.text == "Hello there"
    assert response.stop_reason == StopReason.END_TURN
    assert response.usage == TokenUsage(input_tokens=12, output_tokens=4)

    request = server.requests[0]
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2026-10-21"  # the current API version
    assert "authorization" not in request.headers
    assert request.json == {
        "model": "claude-test",
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Hi"}],  # a plain string as it is, as 0.9.1 sends it
        # The API requires it; unset, it is the model's limit (harnessx.models: unknown model).
        "max_tokens": 32_000,
    }


async def test_explicit_max_tokens_temperature_and_version(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    server.reply_json(message(text("ok")))
    provider = anthropic(anthropic_version="2023-06-01", default_max_tokens=10)
    await provider.create(**ASK, tools=[], max_tokens=77, temperature=0.0)
    sent = server.requests[0]
    assert sent.json["max_tokens"] == 77 and sent.json["temperature"] == 0.0
    assert "system" not in sent.json and "tools" not in sent.json
    assert sent.headers["anthropic-version"] == "2023-06-01"


@pytest.mark.parametrize("version", [None, "2026-10-21", "2099-01-01"])
async def test_no_temperature_from_api_version_2026_10_21(
    server: ScriptedServer, anthropic: MakeAnthropic, caplog: pytest.LogCaptureFixture, version: str | None
) -> None:
    # The Messages API answers 400 to temperature (any value) from version 2026-10-21 on.
    provider = anthropic() if version is None else anthropic(anthropic_version=version)
    for _ in range(2):
        server.reply_json(message(text("ok")))
        await provider.create(**ASK, tools=[], max_tokens=None, temperature=0.2)
    assert all("temperature" not in sent.json for sent in server.requests)
    warnings = [r.getMessage() for r in caplog.records if "temperature" in r.getMessage()]
    assert len(warnings) == 1  # said once, not on every call
    assert "anthropic_version='2023-06-01'" in warnings[0]


async def test_tool_use_reply_and_tool_results_on_the_wire(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    server.reply_json(
        message(
            {"type": "thinking", "thinking": "Need weather.", "signature": "sig"},
            text("Let me check."),
            {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Oslo"}},
            stop_reason="tool_use",
        )
    )
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "Paris and Rome?"},
        {
            "role": "assistant",
            "content": [
                # Thinking without the API's signature cannot be sent back.
                {"type": "thinking", "thinking": "Two lookups."},
                text("Checking both."),
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "failed", "is_error": True},
            ],
        },
        {"role": "user", "content": "And Oslo?"},
    ]
    response = await anthropic().create(
        model="claude-test", messages=history, system="Weather bot.", tools=[WEATHER_TOOL], max_tokens=500
    )

    assert response.text == "Let me check."
    assert response.thinking == "Need weather."
    assert response.stop_reason == StopReason.TOOL_USE
    assert response.tool_calls is not None
    assert [(c.id, c.name, c.input, c.parse_error) for c in response.tool_calls] == [
        ("toolu_9", "get_weather", {"city": "Oslo"}, None)
    ]

    sent = server.requests[0].json
    assert sent["system"] == "Weather bot."
    assert sent["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city",
            "input_schema": WEATHER_TOOL["input_schema"],
            "eager_input_streaming": True,  # arguments streamed as they are written, as 0.9.1 asks
        }
    ]
    assert sent["messages"] == [
        {"role": "user", "content": "Paris and Rome?"},  # as 0.9.1: a string stays one
        {
            "role": "assistant",
            "content": [
                text("Checking both."),
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
            ],
        },
        {
            # Both results in ONE user message, followed by the user's next words.
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "failed", "is_error": True},
                text("And Oslo?"),
            ],
        },
    ]


async def test_tools_ask_for_their_arguments_as_they_are_written(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    """As 0.9.1 (``eager_tool_streaming=True``): a call is not held back until its arguments
    are whole, which a stall deadline could take for a dead stream. A tool that says either
    way keeps its choice; the caller's definitions are not changed."""
    quiet = {**WEATHER_TOOL, "name": "quiet", "eager_input_streaming": False}
    tools = [WEATHER_TOOL, quiet]
    server.reply_json(message(text("ok")))
    server.reply_sse(text_reply(server, "ok"))
    server.reply_json(message(text("ok")))
    provider = anthropic()
    await provider.create(**ASK, tools=tools, max_tokens=5)
    await collect(provider.stream(**ASK, tools=tools, max_tokens=5))
    await anthropic(eager_tool_streaming=False).create(**ASK, tools=tools, max_tokens=5)
    eager, streamed, off = (
        [t.get("eager_input_streaming") for t in r.json["tools"]] for r in server.requests
    )
    assert eager == streamed == [True, False] and off == [None, False]
    assert tools == [WEATHER_TOOL, quiet] and "eager_input_streaming" not in WEATHER_TOOL


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_server_that_refuses_eager_streaming_gets_calls_without_it(
    server: ScriptedServer, anthropic: MakeAnthropic, streaming: bool
) -> None:
    """The first refusal naming the field turns it off for the provider, and the same call
    goes again without it (the prompt-cache markers stay: it was not them)."""
    from harnessx import PromptCacheHint

    refusal = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "tools.0.custom.eager_input_streaming: Extra inputs are not permitted",
        },
    }
    server.reply_json(refusal, status=400)
    for _ in range(2):
        if streaming:
            server.reply_sse(text_reply(server, "ok"))
        else:
            server.reply_json(message(text("ok")))
    provider = anthropic()
    hint = PromptCacheHint(prefix_key="k", breakpoints=("tools",))
    for _ in range(2):
        if streaming:
            reply = (await collect(provider.stream(**ASK, tools=[WEATHER_TOOL], max_tokens=5, cache=hint)))[
                -1
            ].data
        else:
            reply = await provider.create(**ASK, tools=[WEATHER_TOOL], max_tokens=5, cache=hint)
        assert reply.text == "ok"
    assert provider.eager_tool_streaming is False
    sent = [r.json for r in server.requests]
    assert len(sent) == 3, "refused once, then never sent again"
    assert ["eager_input_streaming" in body["tools"][0] for body in sent] == [True, False, False]
    assert all(body["tools"][-1].get("cache_control") for body in sent)


async def test_history_from_an_sdk_reply_goes_back_as_the_api_takes_it(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    """As 0.9.1 sends it: a tool call keeps its ``caller``; a tool result's text blocks lose
    what an SDK reply added (``parsed_output``), which the API refuses; the history passed
    in is not changed."""
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "hello"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking", "parsed_output": None},
                {
                    "type": "tool_use",
                    "id": "t1",
                    "name": "echo",
                    "input": {"k": 1},
                    "caller": {"type": "direct"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "ok", "parsed_output": {"result": "ok"}}],
                }
            ],
        },
    ]
    kept = copy.deepcopy(history)
    server.reply_json(message(text("done")))
    await anthropic().create(model="claude-test", messages=history, system="", tools=[], max_tokens=5)
    assistant, results = server.requests[0].json["messages"][1:]
    assert assistant["content"][1] == {
        "type": "tool_use",
        "id": "t1",
        "name": "echo",
        "input": {"k": 1},
        "caller": {"type": "direct"},
    }
    assert results["content"][0]["content"] == [{"type": "text", "text": "ok"}]
    assert history == kept


async def test_assistant_turn_of_only_tool_calls_has_no_empty_text_block(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    server.reply_json(message(text("ok")))
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": ""},
                {"type": "tool_use", "id": "t1", "name": "noop", "input": {}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "done"}]},
    ]
    await anthropic().create(model="claude-test", messages=history, system="", tools=[], max_tokens=None)
    assistant = server.requests[0].json["messages"][1]
    assert assistant["content"] == [{"type": "tool_use", "id": "t1", "name": "noop", "input": {}}]


async def test_tool_input_that_is_not_an_object_becomes_a_parse_error(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    server.reply_json(
        message(
            {"type": "tool_use", "id": "t", "name": "get_weather", "input": "Oslo"}, stop_reason="tool_use"
        )
    )
    response = await anthropic().create(**ASK, tools=[WEATHER_TOOL], max_tokens=None)
    assert response.tool_calls is not None
    (call,) = response.tool_calls
    assert call.parse_error is not None and call.input == {INVALID_ARGUMENTS: call.parse_error}


@pytest.mark.parametrize(
    ("stop_reason", "expected"),
    [
        ("end_turn", StopReason.END_TURN),
        ("tool_use", StopReason.TOOL_USE),
        ("max_tokens", StopReason.MAX_TOKENS),
        ("stop_sequence", StopReason.STOP_SEQUENCE),
        ("refusal", StopReason.REFUSAL),
        ("pause_turn", StopReason.PAUSE_TURN),
        ("brand_new_reason", StopReason.OTHER),
    ],
)
async def test_stop_reason_mapping(
    server: ScriptedServer, anthropic: MakeAnthropic, stop_reason: str, expected: StopReason
) -> None:
    server.reply_json(message(text("x"), stop_reason=stop_reason))
    response = await anthropic().create(**ASK, tools=[], max_tokens=None)
    assert response.stop_reason == expected


async def test_usage_includes_cache_tokens(server: ScriptedServer, anthropic: MakeAnthropic) -> None:
    usage = {
        "input_tokens": 3,
        "output_tokens": 50,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 200,
    }
    server.reply_json(message(text("x"), usage=usage))
    response = await anthropic().create(**ASK, tools=[], max_tokens=None)
    # input_tokens counts every prompt token, cached ones included (as OpenAI's prompt_tokens)
    assert response.usage == TokenUsage(
        input_tokens=1203, output_tokens=50, cache_read_input_tokens=1000, cache_creation_input_tokens=200
    )


async def test_count_tokens_uses_the_endpoint(server: ScriptedServer, anthropic: MakeAnthropic) -> None:
    server.reply_json({"input_tokens": 321})
    count = await anthropic().count_tokens(
        model="claude-test", messages=[{"role": "user", "content": "hi"}], system="sys", tools=[WEATHER_TOOL]
    )
    assert count == 321
    request = server.requests[0]
    assert request.path == "/v1/messages/count_tokens"
    assert request.headers["x-api-key"] == KEY
    assert request.json["system"] == "sys" and request.json["tools"][0]["name"] == "get_weather"
    assert "max_tokens" not in request.json


# --------------------------------------------------------------------------- keys and errors


async def test_missing_key_fails_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    provider = AnthropicProvider("claude-test")  # constructing is fine; nothing is sent
    try:
        with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
            await provider.create(**ASK, tools=[], max_tokens=None)
        with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
            await provider.count_tokens(**ASK, tools=[])
        with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
            await collect(provider.stream(**ASK, tools=[], max_tokens=None))
    finally:
        await provider.aclose()


async def test_a_compatible_server_needs_no_key(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # llama.cpp's llama-server speaks /v1/messages and has no keys.
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    server.reply_json(message(text("local")))
    provider = AnthropicProvider("smollm2", base_url=server.url)
    try:
        response = await provider.create(**ASK, tools=[], max_tokens=None)
    finally:
        await provider.aclose()
    assert response.text == "local"
    assert "x-api-key" not in server.requests[0].headers


async def test_key_and_base_url_from_the_environment(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    server.reply_json(message(text("env")))
    provider = AnthropicProvider("claude-test")
    try:
        response = await provider.create(**ASK, tools=[], max_tokens=None)
    finally:
        await provider.aclose()
    assert response.text == "env"
    assert server.requests[0].headers["x-api-key"] == "sk-ant-from-env"
    assert "sk-ant-from-env" not in repr(provider)


async def test_401_names_the_env_var(server: ScriptedServer, anthropic: MakeAnthropic) -> None:
    server.reply_json(
        {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}},
        status=401,
    )
    with pytest.raises(ProviderError) as caught:
        await anthropic().create(**ASK, tools=[], max_tokens=None)
    assert caught.value.status_code == 401
    assert "ANTHROPIC_API_KEY" in str(caught.value)
    assert "invalid x-api-key" in str(caught.value)
    assert KEY not in str(caught.value)
    assert len(server.requests) == 1


async def test_400_carries_the_server_message(server: ScriptedServer, anthropic: MakeAnthropic) -> None:
    server.reply_json(
        {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: too large"}},
        status=400,
    )
    with pytest.raises(ProviderError, match="max_tokens: too large") as caught:
        await anthropic().create(**ASK, tools=[], max_tokens=None)
    assert caught.value.status_code == 400 and caught.value.retryable is False
    assert len(server.requests) == 1


async def test_529_overloaded_is_retried(
    drive: Drive, server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    server.reply_json(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, status=529
    )
    with pytest.raises(ProviderError) as caught:
        await anthropic().create(**ASK, tools=[], max_tokens=None)
    assert caught.value.retryable is True and caught.value.status_code == 529
    server.reply_json(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, status=529
    )
    server.reply_json(message(text("recovered")))
    run = await drive(anthropic())
    assert run.result.output == "recovered"
    assert len(server.requests) == 3
    assert run.waits == [0.01]


# --------------------------------------------------------------------------- streaming


async def test_streaming_text(server: ScriptedServer, anthropic: MakeAnthropic) -> None:
    reply = text_reply(server, "Hel", "lo")
    reply.insert(2, ": a comment line\n\n")
    reply.insert(3, server.event({"type": "ping"}, event="ping"))
    server.reply_sse(reply)
    chunks = await collect(anthropic().stream(**ASK, tools=[], max_tokens=None))
    assert [(c.kind, c.data) for c in chunks[:-1]] == [("text_delta", "Hel"), ("text_delta", "lo")]
    final = chunks[-1]
    assert final.kind == "response"
    assert final.data.text == "Hello"
    assert final.data.stop_reason == StopReason.END_TURN
    # input from message_start, output from message_delta
    assert final.data.usage == TokenUsage(input_tokens=25, output_tokens=9, cache_read_input_tokens=5)
    assert server.requests[0].json["stream"] is True


async def test_streamed_tool_call_with_split_json(server: ScriptedServer, anthropic: MakeAnthropic) -> None:
    pieces = ['{"ci', 'ty": "Pa', 'ris"', "}"]
    server.reply_sse(
        events(
            server,
            message_start(),
            block_start(0, {"type": "thinking", "thinking": ""}),
            block_delta(0, {"type": "thinking_delta", "thinking": "Hmm."}),
            block_delta(0, {"type": "signature_delta", "signature": "abc"}),
            block_stop(0),
            block_start(1, {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}),
            *[block_delta(1, {"type": "input_json_delta", "partial_json": piece}) for piece in pieces],
            block_stop(1),
            block_start(2, {"type": "tool_use", "id": "toolu_2", "name": "list_cities", "input": {}}),
            block_stop(2),
            *message_end("tool_use"),
        )
    )
    chunks = await collect(anthropic().stream(**ASK, tools=[WEATHER_TOOL], max_tokens=None))
    # As 0.9.1: each call as it starts (its name, no arguments), then each piece of its arguments.
    assert chunks[:-1] == [
        StreamChunk("thinking_delta", "Hmm."),
        StreamChunk("tool_call_delta", ToolCallDelta("toolu_1", "get_weather")),
        *[StreamChunk("tool_call_delta", ToolCallDelta("toolu_1", "get_weather", piece)) for piece in pieces],
        StreamChunk("tool_call_delta", ToolCallDelta("toolu_2", "list_cities")),
    ]
    final = chunks[-1].data
    assert final.thinking == "Hmm."
    assert final.stop_reason == StopReason.TOOL_USE
    assert [(c.id, c.name, c.input, c.parse_error) for c in final.tool_calls] == [
        ("toolu_1", "get_weather", {"city": "Paris"}, None),
        ("toolu_2", "list_cities", {}, None),
    ]


async def test_streamed_invalid_tool_json_becomes_a_parse_error(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    server.reply_sse(
        events(
            server,
            message_start(),
            block_start(0, {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}),
            block_delta(0, {"type": "input_json_delta", "partial_json": '{"city": '}),
            block_stop(0),
            *message_end("tool_use"),
        )
    )
    chunks = await collect(anthropic().stream(**ASK, tools=[WEATHER_TOOL], max_tokens=None))
    (call,) = chunks[-1].data.tool_calls
    # 0.9.1's marker on arguments cut off part way, which its programs read.
    assert call.id == "toolu_1" and call.input == {INVALID_ARGUMENTS: call.parse_error}
    assert call.parse_error is not None and "not complete JSON" in call.parse_error


async def test_overloaded_error_event_before_output_is_retried(
    drive: Drive, server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    server.reply_sse(
        events(
            server,
            message_start(),
            ("ping", {}),
            ("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}}),
        )
    )
    server.reply_sse(text_reply(server, "second try"))
    run = await drive(anthropic(), stream=True)
    assert run.result.output == "second try"
    assert len(server.requests) == 2
    assert len(run.waits) == 1


async def test_error_event_after_output_is_raised_as_retryable(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    server.reply_sse(
        events(
            server,
            message_start(),
            block_start(0, {"type": "text", "text": ""}),
            block_delta(0, {"type": "text_delta", "text": "Half a"}),
            ("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}}),
        )
    )
    received: list[StreamChunk] = []
    with pytest.raises(ProviderError, match="Overloaded") as caught:
        async for chunk in anthropic().stream(**ASK, tools=[], max_tokens=None):
            received.append(chunk)
    assert received == [StreamChunk("text_delta", "Half a")]
    assert len(server.requests) == 1
    # Retried by the runtime, which tells followers to drop "Half a" (attempt_reset).
    assert caught.value.retryable is True


async def test_non_transient_error_event_is_not_retried(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    server.reply_sse(
        events(
            server,
            message_start(),
            ("error", {"error": {"type": "invalid_request_error", "message": "bad thing"}}),
        )
    )
    with pytest.raises(ProviderError, match="bad thing") as caught:
        await collect(anthropic().stream(**ASK, tools=[], max_tokens=None))
    assert caught.value.retryable is False
    assert len(server.requests) == 1


async def test_stream_http_error_before_output_is_retried(
    drive: Drive, server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    server.reply_json(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        status=529,
        headers={"retry-after-ms": "20"},
    )
    server.reply_sse(text_reply(server, "fine"))
    run = await drive(anthropic(), stream=True)
    assert run.result.output == "fine"
    assert run.waits == [0.02]


async def test_stream_cut_before_message_stop_is_retried_when_nothing_was_delivered(
    drive: Drive, server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    server.reply_sse(events(server, message_start(), block_start(0, {"type": "text", "text": ""})))
    server.reply_sse(text_reply(server, "complete"))
    run = await drive(anthropic(), stream=True)
    assert run.result.output == "complete"
    assert len(server.requests) == 2
