"""Our providers against the vendors' own SDKs (``openai``, ``anthropic``; test-only).

- Every request body the providers send, streamed or not, with tool results, errors and
  ``extra_body`` fields, validates against the SDK's request type (``CompletionCreateParams``,
  ``MessageCreateParams``, ``MessageCountTokensParams``): no field the SDK does not know, no
  value it would send differently.
- Replies built from the SDK's response and stream-event types, served on loopback, parse to
  the text, tool calls (parallel ones included), stop reason, usage and (Anthropic) content
  blocks that the SDK's own client and accumulators make of the same bytes.
- The streams recorded from llama-server (``streams/``) read the same through the SDKs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anthropic
import openai
import pytest
from anthropic.types.message_count_tokens_params import MessageCountTokensParams
from anthropic.types.message_create_params import (
    MessageCreateParamsNonStreaming,
    MessageCreateParamsStreaming,
)
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
)
from sdk_wire import (
    anthropic_message,
    anthropic_sse,
    anthropic_stream,
    expected_from_anthropic,
    expected_from_openai,
    openai_completion,
    openai_sse,
    openai_stream,
    request_is_valid,
)

from harnessx import Agent, AgentConfig
from harnessx.providers import AnthropicProvider, LLMProvider, OpenAIProvider, ProviderResponse, StreamChunk

if TYPE_CHECKING:
    from conftest import ScriptedServer

STREAMS = Path(__file__).parent / "streams"
ASK: dict[str, Any] = {"model": "sdk-model", "messages": [{"role": "user", "content": "?"}], "system": ""}
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name"}},
    "required": ["city"],
}


async def final_of(stream: AsyncIterator[StreamChunk]) -> tuple[ProviderResponse, str]:
    pieces: list[str] = []
    response: ProviderResponse | None = None
    async for chunk in stream:
        if chunk.kind == "text_delta":
            pieces.append(chunk.data)
        elif chunk.kind == "response":
            response = chunk.data
    assert response is not None
    return response, "".join(pieces)


def said(response: ProviderResponse, expected: dict[str, Any]) -> dict[str, Any]:
    return {key: getattr(response, key) for key in expected}


# --------------------------------------------------------------------------- OpenAI replies


def openai_client(server: ScriptedServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="sk-test", max_retries=0)


async def sdk_openai_stream(server: ScriptedServer) -> Any:
    client = openai_client(server)
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    try:
        stream = await client.chat.completions.create(
            model="sdk-model", messages=[{"role": "user", "content": "?"}], stream=True
        )
        async for chunk in stream:
            state.handle_chunk(chunk)
    finally:
        await client.close()
    # The snapshot is everything accumulated; get_final_completion() also parses the content
    # and raises on finish_reason "length".
    return state.current_completion_snapshot


@pytest.mark.parametrize("scenario", ["text", "parallel_tool_calls", "refusal", "length"])
async def test_openai_stream_reads_as_the_sdk_accumulates_it(server: ScriptedServer, scenario: str) -> None:
    body = openai_sse(openai_stream(scenario))
    server.reply_sse(body)
    server.reply_sse(body)
    provider = OpenAIProvider("sdk-model", base_url=f"{server.url}/v1")
    try:
        ours, streamed = await final_of(provider.stream(**ASK, tools=[], max_tokens=None))
    finally:
        await provider.aclose()
    sdk = await sdk_openai_stream(server)
    expected = expected_from_openai(sdk)
    assert said(ours, expected) == expected
    assert streamed == ours.text
    # raw is the completion the stream amounts to, as the SDK assembles it
    message = sdk.choices[0].message
    raw_message = ours.raw["choices"][0]["message"]
    assert (raw_message["content"], raw_message["refusal"]) == (
        message.content or None,
        message.refusal or None,
    )
    assert raw_message.get("tool_calls", []) == [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.function.name, "arguments": c.function.arguments},
        }
        for c in message.tool_calls or []
    ]
    assert ours.raw["choices"][0]["finish_reason"] == sdk.choices[0].finish_reason


@pytest.mark.parametrize("scenario", ["text", "parallel_tool_calls", "refusal"])
async def test_openai_completion_reads_as_the_sdk_reads_it(server: ScriptedServer, scenario: str) -> None:
    body = openai_completion(scenario).model_dump(mode="json")
    server.reply_json(body)
    server.reply_json(body)
    provider = OpenAIProvider("sdk-model", base_url=f"{server.url}/v1")
    try:
        ours = await provider.create(**ASK, tools=[], max_tokens=None)
    finally:
        await provider.aclose()
    client = openai_client(server)
    try:
        sdk = await client.chat.completions.create(
            model="sdk-model", messages=[{"role": "user", "content": "?"}]
        )
    finally:
        await client.close()
    expected = expected_from_openai(sdk)
    assert said(ours, expected) == expected


# --------------------------------------------------------------------------- Anthropic replies


def anthropic_client(server: ScriptedServer) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.url, api_key="sk-test", max_retries=0)


@pytest.mark.parametrize("scenario", ["text", "thinking_and_parallel_tool_use", "max_tokens"])
async def test_anthropic_stream_reads_as_the_sdk_accumulates_it(
    server: ScriptedServer, scenario: str
) -> None:
    body = anthropic_sse(anthropic_stream(scenario))
    server.reply_sse(body)
    server.reply_sse(body)
    provider = AnthropicProvider("sdk-model", base_url=server.url)
    try:
        ours, streamed = await final_of(provider.stream(**ASK, tools=[], max_tokens=None))
    finally:
        await provider.aclose()
    client = anthropic_client(server)
    try:
        async with client.messages.stream(
            model="sdk-model", max_tokens=100, messages=[{"role": "user", "content": "?"}]
        ) as stream:
            sdk = await stream.get_final_message()
    finally:
        await client.close()
    expected = expected_from_anthropic(sdk)
    assert said(ours, expected) == expected  # content: signed and redacted thinking intact
    assert streamed == ours.text
    # The streamed reply's raw is the message the SDK assembles (which also sets the fields
    # this server left out to None).
    assert ours.raw == {
        key: value for key, value in sdk.to_dict().items() if key in ours.raw or value is not None
    }


@pytest.mark.parametrize("scenario", ["thinking_and_parallel_tool_use", "refusal"])
async def test_anthropic_message_reads_as_the_sdk_reads_it(server: ScriptedServer, scenario: str) -> None:
    body = anthropic_message(scenario).model_dump(mode="json")
    server.reply_json(body)
    server.reply_json(body)
    provider = AnthropicProvider("sdk-model", base_url=server.url)
    try:
        ours = await provider.create(**ASK, tools=[], max_tokens=None)
    finally:
        await provider.aclose()
    client = anthropic_client(server)
    try:
        sdk = await client.messages.create(
            model="sdk-model", max_tokens=100, messages=[{"role": "user", "content": "?"}]
        )
    finally:
        await client.close()
    expected = expected_from_anthropic(sdk)
    assert said(ours, expected) == expected


async def test_the_anthropic_version_header_is_the_one_the_sdk_sends(server: ScriptedServer) -> None:
    body = anthropic_message("refusal").model_dump(mode="json")
    server.reply_json(body)
    server.reply_json(body)
    provider = AnthropicProvider("sdk-model", base_url=server.url)
    try:
        await provider.create(**ASK, tools=[], max_tokens=None)
    finally:
        await provider.aclose()
    client = anthropic_client(server)  # the SDK's defaults: no version chosen
    try:
        await client.messages.create(
            model="sdk-model", max_tokens=100, messages=[{"role": "user", "content": "?"}]
        )
    finally:
        await client.close()
    ours, sdk = (request.headers["anthropic-version"] for request in server.requests)
    assert ours == sdk == "2026-10-21"


# --------------------------------------------------------------------------- recorded streams


@pytest.mark.parametrize("name", sorted(p.stem for p in STREAMS.glob("*.sse")))
async def test_recorded_streams_read_as_the_sdk_reads_them(server: ScriptedServer, name: str) -> None:
    body = [event + "\n\n" for event in (STREAMS / f"{name}.sse").read_text().split("\n\n") if event]
    server.reply_sse(body)
    server.reply_sse(body)
    if "_openai_" in name:
        provider: LLMProvider = OpenAIProvider("smollm2", base_url=f"{server.url}/v1")
        try:
            ours, _ = await final_of(provider.stream(**ASK, tools=[], max_tokens=None))
        finally:
            await provider.aclose()
        expected = expected_from_openai(await sdk_openai_stream(server))
    else:
        provider = AnthropicProvider("smollm2", base_url=server.url)
        try:
            ours, _ = await final_of(provider.stream(**ASK, tools=[], max_tokens=None))
        finally:
            await provider.aclose()
        client = anthropic_client(server)
        try:
            async with client.messages.stream(
                model="smollm2", max_tokens=96, messages=[{"role": "user", "content": "?"}]
            ) as stream:
                expected = expected_from_anthropic(await stream.get_final_message())
        finally:
            await client.close()
    assert said(ours, expected) == expected


# --------------------------------------------------------------------------- request bodies


class RecordingOpenAI(OpenAIProvider):
    calls: list[dict[str, Any]]

    async def create(self, **kwargs: Any) -> ProviderResponse:  # type: ignore[override]
        self.calls.append(kwargs)
        return await super().create(**kwargs)


class CreatingOpenAI(RecordingOpenAI):
    stream = LLMProvider.stream  # type: ignore[assignment]  # the engine then calls create()


class RecordingAnthropic(AnthropicProvider):
    """Keeps what the engine hands it, to ask count_tokens about the same conversation."""

    calls: list[dict[str, Any]]

    async def create(self, **kwargs: Any) -> ProviderResponse:  # type: ignore[override]
        self.calls.append(kwargs)
        return await super().create(**kwargs)

    def stream(self, **kwargs: Any) -> AsyncIterator[StreamChunk]:  # type: ignore[override]
        self.calls.append(kwargs)
        return super().stream(**kwargs)


class CreatingAnthropic(RecordingAnthropic):
    stream = LLMProvider.stream  # type: ignore[assignment]


async def run_weather_agent(provider: LLMProvider) -> None:
    """A run with two parallel tool calls, one of which fails, then an answer."""
    config = AgentConfig(model="sdk-model", max_tokens=300, system_prompt="Weather bot.", temperature=0.4)

    def get_weather(city: str) -> str:
        if city == "Bergen":
            raise RuntimeError("station offline")
        return "sunny"

    async with Agent(config, provider=provider) as agent:
        agent.tools.register_with_schema("get_weather", "Current weather", WEATHER, get_weather)
        # A streamed run: a provider whose stream is the base one's makes create() calls.
        async with agent.run_stream("Weather in Oslo and Bergen?") as run:
            [event async for event in run]
            result = await run.result()
    assert result.ok, result


OPENAI_EXTRA: dict[str, Any] = {
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "seed": 7,
    "metadata": {"run": "conformance"},
    "top_p": 0.9,
}


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "create"])
@pytest.mark.parametrize(
    "options",
    [{}, {"extra_body": OPENAI_EXTRA}, {"max_tokens_param": "max_tokens"}],
    ids=["defaults", "extra_body", "max_tokens"],
)
async def test_openai_requests_validate_against_the_sdk(
    server: ScriptedServer, streamed: bool, options: dict[str, Any]
) -> None:
    if streamed:
        server.reply_sse(openai_sse(openai_stream("parallel_tool_calls")))
        server.reply_sse(openai_sse(openai_stream("text")))
    else:
        server.reply_json(openai_completion("parallel_tool_calls").model_dump(mode="json"))
        server.reply_json(openai_completion("text").model_dump(mode="json"))
    kind = RecordingOpenAI if streamed else CreatingOpenAI
    provider = kind("sdk-model", base_url=f"{server.url}/v1", **options)
    provider.calls = []
    try:
        await run_weather_agent(provider)
    finally:
        await provider.aclose()
    params = CompletionCreateParamsStreaming if streamed else CompletionCreateParamsNonStreaming
    bodies = [request.json for request in server.requests]
    assert len(bodies) == 2
    assert [request_is_valid(params, body) for body in bodies] == [[], []]
    assert [message["role"] for message in bodies[1]["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
    ]


ANTHROPIC_EXTRA: dict[str, Any] = {
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": False},
    "metadata": {"user_id": "conformance"},
    "stop_sequences": ["\n\nHuman:"],
}


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "create"])
@pytest.mark.parametrize("options", [{}, {"extra_body": ANTHROPIC_EXTRA}], ids=["defaults", "extra_body"])
async def test_anthropic_requests_validate_against_the_sdk(
    server: ScriptedServer, streamed: bool, options: dict[str, Any]
) -> None:
    if streamed:
        server.reply_sse(anthropic_sse(anthropic_stream("thinking_and_parallel_tool_use")))
        server.reply_sse(anthropic_sse(anthropic_stream("text")))
    else:
        server.reply_json(anthropic_message("thinking_and_parallel_tool_use").model_dump(mode="json"))
        server.reply_json(anthropic_message("text").model_dump(mode="json"))
    kind = RecordingAnthropic if streamed else CreatingAnthropic
    provider = kind("sdk-model", base_url=server.url, **options)
    provider.calls = []
    try:
        await run_weather_agent(provider)
        # count_tokens for the conversation of the second call, as the engine sent it
        last = provider.calls[-1]
        server.reply_json({"input_tokens": 123})
        await provider.count_tokens(
            model=last["model"], messages=last["messages"], system=last["system"], tools=last["tools"]
        )
    finally:
        await provider.aclose()
    params = MessageCreateParamsStreaming if streamed else MessageCreateParamsNonStreaming
    *bodies, counted = (request.json for request in server.requests)
    assert len(bodies) == 2
    assert "temperature" not in bodies[0]  # API version 2026-10-21 has none
    assert [request_is_valid(params, body) for body in bodies] == [[], []]
    assert request_is_valid(MessageCountTokensParams, counted) == []
    assert [message["role"] for message in bodies[1]["messages"]] == ["user", "assistant", "user"]


def test_the_check_catches_what_the_sdk_would_not_send() -> None:
    # What the providers sent before: temperature on Anthropic's current API version.
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "temperature": 0.2}
    assert request_is_valid(MessageCreateParamsNonStreaming, body) == [
        "body.temperature: not in the SDK's MessageCreateParamsNonStreaming"
    ]
    nested = {"model": "m", "messages": [{"role": "tool", "content": "x", "tool_call_id": "c", "name": "t"}]}
    assert request_is_valid(CompletionCreateParamsNonStreaming, nested) == [
        "body.messages[0].name: not in the SDK's ChatCompletionToolMessageParam"
    ]
    block = {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": [{"type": "txt", "text": "x"}]}],
    }
    assert request_is_valid(MessageCreateParamsNonStreaming, block)  # no such block type
    assert request_is_valid(MessageCreateParamsNonStreaming, {"model": "m", "messages": []}) == [
        "body.max_tokens: required by MessageCreateParamsNonStreaming"
    ]
