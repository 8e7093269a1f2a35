"""Streams recorded from a real model server, replayed byte for byte on loopback.

``streams/`` holds six request/response pairs recorded from llama.cpp's ``llama-server``
serving SmolLM2-135M-Instruct (``bench/real_model_setup.sh`` builds the same server): a
reply cut off by the token limit, a tool call and the answer after the tool result, over
both wire formats. Nobody here wrote these bytes, so they catch what a hand-written fake
server agrees with us about by construction.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harnessx import Agent, AgentConfig, RunEventType, ToolCallDelta
from harnessx.providers import (
    AnthropicProvider,
    LLMProvider,
    OpenAIProvider,
    ProviderResponse,
    StopReason,
    StreamChunk,
    TokenUsage,
    ToolCall,
)

if TYPE_CHECKING:
    from conftest import ScriptedServer

STREAMS = Path(__file__).parent / "streams"
SYSTEM = "You are a weather assistant. Always call the get_weather tool to answer weather questions."
QUESTION = "What is the weather in Oslo right now?"
TOOL_RESULT = "It is 21 degrees and sunny in Oslo."
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "Name of the city, e.g. Oslo."}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOL = {
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "input_schema": WEATHER_SCHEMA,
}
BEFORE_TOOL = (
    "To determine the weather in Oslo, you can call one of the functions provided by the weather_forecast "
    "function:\n"
)
AFTER_TOOL = "<tool_response>\nIt is 21 degrees and sunny in Oslo.\n</tool_response>"
CUT_OFF = (
    "Oleksandershavn, the capital of Norway, is currently in the midst of a heatwave. The weather is "
    "expected to reach 30 degrees Celsius (80 degrees Fahrenheit) by the end of the day. The city is "
    "expected to experience a 10-hour heatwave, with temperatures expected to reach 40 degrees Celsius "
    "(104 degrees Fahrenheit) by the end of the day. The heatwave is expected to last for 2"
)


@dataclass(frozen=True)
class Recorded:
    name: str
    text: str
    tool_calls: list[ToolCall]
    stop_reason: StopReason
    usage: TokenUsage

    @property
    def wire(self) -> str:
        return "openai" if "_openai_" in self.name else "anthropic"

    def body(self) -> bytes:
        return (STREAMS / f"{self.name}.sse").read_bytes()

    def request(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads((STREAMS / f"{self.name}.request.json").read_text())
        return loaded


OSLO_OPENAI = ToolCall("LR9XOl9TE5CcVEN5IlZRcMjiHFBWO6sr", "get_weather", {"city": "Oslo"})
OSLO_ANTHROPIC = ToolCall("STSYKOata2ciBYzgMrdl85oySnn04gpG", "get_weather", {"city": "Oslo"})
# The tool call's arguments as llama-server streamed them (both wire formats).
OSLO_PIECES = ["{", '"', "city", '":', ' "', "Os", "lo", '"}']
# Both wire formats report the same prompt sizes (input_tokens counts cached tokens too).
RECORDED = [
    Recorded(
        "llamacpp_openai_stream_text_length",
        CUT_OFF,
        [],
        StopReason.MAX_TOKENS,
        TokenUsage(input_tokens=41, output_tokens=96, cache_read_input_tokens=6),
    ),
    Recorded(
        "llamacpp_openai_stream_tool_call",
        BEFORE_TOOL,
        [OSLO_OPENAI],
        StopReason.TOOL_USE,
        TokenUsage(input_tokens=228, output_tokens=56, cache_read_input_tokens=227),
    ),
    Recorded(
        "llamacpp_openai_stream_after_tool_result",
        AFTER_TOOL,
        [],
        StopReason.END_TURN,
        TokenUsage(input_tokens=318, output_tokens=24, cache_read_input_tokens=252),
    ),
    Recorded(
        "llamacpp_anthropic_stream_text",
        "Hello, I'm here to help with any creative endeavors.",
        [],
        StopReason.END_TURN,
        TokenUsage(input_tokens=23, output_tokens=13, cache_read_input_tokens=3),
    ),
    Recorded(
        "llamacpp_anthropic_stream_tool_use",
        BEFORE_TOOL,
        [OSLO_ANTHROPIC],
        StopReason.TOOL_USE,
        TokenUsage(input_tokens=228, output_tokens=56, cache_read_input_tokens=227),
    ),
    Recorded(
        "llamacpp_anthropic_stream_after_tool_result",
        AFTER_TOOL,
        [],
        StopReason.END_TURN,
        TokenUsage(input_tokens=318, output_tokens=24, cache_read_input_tokens=252),
    ),
]


def by_event(body: bytes) -> list[bytes]:
    """One SSE event per transfer chunk, as llama-server writes them."""
    return [event + b"\n\n" for event in body.split(b"\n\n") if event]


def in_pieces(body: bytes, size: int = 7) -> list[bytes]:
    """Chunks that split lines, field names and JSON anywhere."""
    return [body[i : i + size] for i in range(0, len(body), size)]


def make_provider(wire: str, server: ScriptedServer, transport: str = "http", **kwargs: Any) -> LLMProvider:
    """``transport="sdk"``: the provider is given the vendor's own SDK client pointed at the
    server (as 0.9.1's providers were), which then does the HTTP."""
    if transport == "sdk":
        if wire == "openai":
            import openai

            sdk = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="sk-test", max_retries=0)
            return OpenAIProvider(client=sdk, **kwargs)
        import anthropic

        return AnthropicProvider(
            client=anthropic.AsyncAnthropic(base_url=server.url, api_key="sk-test", max_retries=0), **kwargs
        )
    if wire == "openai":
        return OpenAIProvider("smollm2", base_url=f"{server.url}/v1", **kwargs)
    # The recordings were asked with a temperature, which API version 2023-06-01 still takes.
    return AnthropicProvider("smollm2", base_url=server.url, anthropic_version="2023-06-01", **kwargs)


async def stream_once(provider: LLMProvider) -> list[StreamChunk]:
    chunks = []
    async for chunk in provider.stream(
        model="smollm2",
        messages=[{"role": "user", "content": QUESTION}],
        system="",
        tools=[TOOL],
        max_tokens=96,
    ):
        chunks.append(chunk)
    return chunks


@pytest.mark.parametrize("transport", ["http", "sdk"])
@pytest.mark.parametrize("split", [by_event, in_pieces], ids=["by-event", "7-byte-pieces"])
@pytest.mark.parametrize("recorded", RECORDED, ids=[r.name.removeprefix("llamacpp_") for r in RECORDED])
async def test_recorded_stream_parses(
    server: ScriptedServer, recorded: Recorded, split: Callable[[bytes], list[bytes]], transport: str
) -> None:
    server.reply_sse(split(recorded.body()))
    provider = make_provider(recorded.wire, server, transport)
    try:
        chunks = await stream_once(provider)
    finally:
        await provider.aclose()
    final = chunks[-1]
    assert final.kind == "response"
    response: ProviderResponse = final.data
    assert response.text == recorded.text
    assert "".join(c.data for c in chunks if c.kind == "text_delta") == recorded.text
    assert response.tool_calls == recorded.tool_calls
    assert response.stop_reason == recorded.stop_reason
    assert response.usage == recorded.usage
    assert isinstance(response.raw, dict)
    # Each tool call as it is written (0.9.1's tool_call_delta chunks): first its name with no
    # arguments, then the pieces, as the server sent them, naming the call that runs.
    deltas = [c.data for c in chunks if c.kind == "tool_call_delta"]
    assert all(isinstance(d, ToolCallDelta) for d in deltas)
    if recorded.tool_calls:
        (call,) = recorded.tool_calls
        assert deltas[0] == ToolCallDelta(call.id, call.name)
        assert deltas[1:] == [ToolCallDelta(call.id, call.name, piece) for piece in OSLO_PIECES]
    else:
        assert deltas == []


@pytest.mark.parametrize("transport", ["http", "sdk"])
@pytest.mark.parametrize("wire", ["openai", "anthropic"])
async def test_an_agent_sends_the_recorded_requests(
    server: ScriptedServer, wire: str, transport: str
) -> None:
    """The recorded tool-call conversation, driven by an agent: it asks what was asked of the
    real server, runs the tool once, and answers with the recorded reply."""
    recorded = {r.name: r for r in RECORDED}
    tool_call = "tool_call" if wire == "openai" else "tool_use"
    first = recorded[f"llamacpp_{wire}_stream_{tool_call}"]
    second = recorded[f"llamacpp_{wire}_stream_after_tool_result"]
    models_api = wire == "anthropic" and transport == "sdk"
    if models_api:  # asked for the model's limits first (once), as 0.9.1 did; this one has none
        server.reply_json({"type": "error", "error": {"type": "not_found_error", "message": "no"}}, 404)
    server.reply_sse(by_event(first.body()))
    server.reply_sse(by_event(second.body()))
    provider = make_provider(wire, server, transport)
    # The recorded requests offered one tool: no task list, no read_tool_result built-in; and
    # they were recorded before prompt-cache markers were sent.
    config = AgentConfig(
        model="smollm2",
        max_tokens=96,
        system_prompt=SYSTEM,
        temperature=1.0,
        planning=False,
        prompt_cache=None,
    )
    calls: list[str] = []

    def get_weather(city: str) -> str:
        calls.append(city)
        return TOOL_RESULT

    try:
        async with Agent(config, provider=provider) as agent:
            agent.tools.unregister("read_tool_result")
            agent.tools.register_with_schema(TOOL["name"], TOOL["description"], WEATHER_SCHEMA, get_weather)
            async with agent.run_stream(QUESTION) as run:  # the recordings are streams
                events = [event async for event in run]
                result = await run.result()
    finally:
        await provider.aclose()

    assert calls == ["Oslo"]
    # The run's stream shows the call as the model wrote it, before it is dispatched.
    kinds = [event.type for event in events]
    assert kinds.index(RunEventType.TOOL_CALL_DELTA) < kinds.index(RunEventType.TOOL_CALL_START)
    deltas = [event.data for event in events if event.type is RunEventType.TOOL_CALL_DELTA]
    (call,) = first.tool_calls
    assert deltas[0] == ToolCallDelta(call.id, "get_weather")
    assert json.loads("".join(d.partial_json for d in deltas)) == call.input == {"city": "Oslo"}
    assert result.ok and result.output == AFTER_TOOL
    assert result.usage == first.usage + second.usage
    if models_api:
        assert server.requests.pop(0).path == "/v1/models/smollm2"
    sent = [request.json for request in server.requests]
    expected = [first.request(), second.request()]
    if wire == "openai":
        for body in expected:  # recorded with the deprecated field; the limit is the same
            body["max_completion_tokens"] = body.pop("max_tokens")
    else:
        # Recorded before the tools asked for eager_input_streaming; llama-server reads only a
        # tool's name, description and input_schema, so the reply is the same.
        for body in expected:
            body["tools"] = [{**tool, "eager_input_streaming": True} for tool in body["tools"]]
            # Recorded with the question as one text block; a plain string now goes as the
            # string, as 0.9.1 sends it (the API reads the two alike).
            question = body["messages"][0]
            if question["content"] == [{"type": "text", "text": QUESTION}]:
                question["content"] = QUESTION
    assert sent == expected
