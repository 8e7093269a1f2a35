"""``tool_choice=`` on the built-in providers (0.9.1's option): one value for every vendor,
each vendor's spelling on the wire, over HTTP and through a vendor SDK client.

Every body sent is checked against the SDK's own request type (``sdk_wire.request_is_valid``):
the value goes out as the vendor documents it (a plain string, not our enum member).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anthropic
import openai
import pytest
from anthropic.types.message_count_tokens_params import MessageCountTokensParams
from anthropic.types.message_create_params import (
    MessageCreateParamsNonStreaming,
    MessageCreateParamsStreaming,
)
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
)
from sdk_wire import (
    anthropic_message,
    anthropic_sse,
    anthropic_stream,
    openai_completion,
    openai_sse,
    openai_stream,
    request_is_valid,
)

import harnessx
import harnessx.types
from harnessx import ConfigurationError, ToolChoice
from harnessx.providers import AnthropicProvider, OpenAIProvider, StreamChunk
from harnessx.providers.base import TOOL_CHOICES, normalize_tool_choice

if TYPE_CHECKING:
    from conftest import ScriptedServer

ASK: dict[str, Any] = {
    "model": "m",
    "messages": [{"role": "user", "content": "?"}],
    "system": "",
    "max_tokens": 50,
}
TOOL = {"name": "lookup", "description": "Look up", "input_schema": {"type": "object", "properties": {}}}
ANTHROPIC_WIRE = {"auto": {"type": "auto"}, "any": {"type": "any"}, "none": {"type": "none"}}
OPENAI_WIRE = {"auto": "auto", "any": "required", "none": "none"}


@pytest.fixture(autouse=True)
def _no_tool_choice_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_TOOL_CHOICE", "OPENAI_TOOL_CHOICE"):
        monkeypatch.delenv(name, raising=False)


async def drain(stream: AsyncIterator[StreamChunk]) -> None:
    async for _ in stream:
        pass


# --------------------------------------------------------------------------- the value


def test_the_choices_and_their_spellings() -> None:
    assert TOOL_CHOICES == ("auto", "any", "none")
    assert [choice.value for choice in ToolChoice] == list(TOOL_CHOICES)
    assert ToolChoice.ANY == "any" and isinstance(ToolChoice.ANY, str)
    assert harnessx.types.ToolChoice is ToolChoice is harnessx.ToolChoice
    assert normalize_tool_choice(ToolChoice.NONE) is ToolChoice.NONE
    assert normalize_tool_choice(" ANY ") is ToolChoice.ANY
    assert normalize_tool_choice(None) is None and normalize_tool_choice("") is None
    # As 0.9.1's: str() of the member is its name, the value is .value.
    assert (str(ToolChoice.ANY), f"{ToolChoice.AUTO}") == ("ToolChoice.ANY", "ToolChoice.AUTO")


@pytest.mark.parametrize("bad", ["required", "sometimes", "ToolChoice.ANY", 1])
def test_a_value_that_is_not_a_choice_is_refused_with_the_choices(bad: object) -> None:
    with pytest.raises(ValueError, match="'auto', 'any', 'none'") as caught:
        normalize_tool_choice(bad)  # type: ignore[arg-type]
    assert isinstance(caught.value, ConfigurationError)
    for make in (AnthropicProvider, OpenAIProvider):
        with pytest.raises(ConfigurationError, match="not a tool choice"):
            make("m", api_key="k", tool_choice=bad)


@pytest.mark.parametrize(
    ("make", "env"), [(AnthropicProvider, "ANTHROPIC_TOOL_CHOICE"), (OpenAIProvider, "OPENAI_TOOL_CHOICE")]
)
def test_the_environment_is_the_fallback(make: Any, env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert make("m", api_key="k").tool_choice is None
    monkeypatch.setenv(env, "None")
    assert make("m", api_key="k").tool_choice is ToolChoice.NONE
    assert make("m", api_key="k", tool_choice="any").tool_choice is ToolChoice.ANY  # the argument wins
    monkeypatch.setenv(env, "always")
    with pytest.raises(ConfigurationError, match=f"{env}='always' is not a tool choice"):
        make("m", api_key="k")


# --------------------------------------------------------------------------- over HTTP


@pytest.mark.parametrize("choice", [*TOOL_CHOICES, ToolChoice.ANY])
@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "create"])
async def test_anthropic_sends_its_spelling(server: ScriptedServer, choice: str, streamed: bool) -> None:
    provider = AnthropicProvider(base_url=server.url, api_key="k", tool_choice=choice)
    try:
        if streamed:
            server.reply_sse(anthropic_sse(anthropic_stream("text")))
            await drain(provider.stream(**ASK, tools=[TOOL]))
        else:
            server.reply_json(anthropic_message("text").model_dump(mode="json"))
            await provider.create(**ASK, tools=[TOOL])
        server.reply_json({"input_tokens": 12})
        await provider.count_tokens(model="m", messages=ASK["messages"], system="", tools=[TOOL])
    finally:
        await provider.aclose()
    sent, counted = (request.json for request in server.requests)
    assert sent["tool_choice"] == ANTHROPIC_WIRE[ToolChoice(choice).value]
    params = MessageCreateParamsStreaming if streamed else MessageCreateParamsNonStreaming
    assert request_is_valid(params, sent) == []
    # It changes the count (the API adds a system prompt for it), so it is counted too.
    assert counted["tool_choice"] == sent["tool_choice"]
    assert request_is_valid(MessageCountTokensParams, counted) == []


@pytest.mark.parametrize("choice", [*TOOL_CHOICES, ToolChoice.ANY])
@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "create"])
async def test_openai_sends_its_spelling(server: ScriptedServer, choice: str, streamed: bool) -> None:
    provider = OpenAIProvider(base_url=f"{server.url}/v1", api_key="k", tool_choice=choice)
    try:
        if streamed:
            server.reply_sse(openai_sse(openai_stream("text")))
            await drain(provider.stream(**ASK, tools=[TOOL]))
        else:
            server.reply_json(openai_completion("text").model_dump(mode="json"))
            await provider.create(**ASK, tools=[TOOL])
    finally:
        await provider.aclose()
    [sent] = (request.json for request in server.requests)
    assert sent["tool_choice"] == OPENAI_WIRE[ToolChoice(choice).value]
    params = CompletionCreateParamsStreaming if streamed else CompletionCreateParamsNonStreaming
    assert request_is_valid(params, sent) == []


async def test_unset_or_without_tools_nothing_is_sent(server: ScriptedServer) -> None:
    providers = [
        AnthropicProvider(base_url=server.url, api_key="k"),
        AnthropicProvider(base_url=server.url, api_key="k", tool_choice="any"),
        OpenAIProvider(base_url=f"{server.url}/v1", api_key="k"),
        OpenAIProvider(base_url=f"{server.url}/v1", api_key="k", tool_choice="any"),
    ]
    try:
        for provider, tools in zip(providers, [[TOOL], [], [TOOL], []], strict=True):
            if isinstance(provider, AnthropicProvider):
                server.reply_json(anthropic_message("text").model_dump(mode="json"))
            else:
                server.reply_json(openai_completion("text").model_dump(mode="json"))
            await provider.create(**ASK, tools=tools)
    finally:
        for provider in providers:
            await provider.aclose()
    assert [("tool_choice" in request.json) for request in server.requests] == [False] * 4


async def test_extra_body_wins_over_the_option(server: ScriptedServer) -> None:
    # extra_body holds the vendor's own forms (a named tool); set with tool_choice= (or its
    # environment variable) it is the one sent, as an SDK's extra_body wins over its arguments.
    named = {"type": "tool", "name": "lookup", "disable_parallel_tool_use": True}
    claude = AnthropicProvider(
        base_url=server.url, api_key="k", tool_choice="any", extra_body={"tool_choice": named}
    )
    gpt = OpenAIProvider(
        base_url=f"{server.url}/v1",
        api_key="k",
        tool_choice="none",
        extra_body={"tool_choice": {"type": "function", "function": {"name": "lookup"}}},
    )
    try:
        server.reply_json(anthropic_message("text").model_dump(mode="json"))
        await claude.create(**ASK, tools=[TOOL])
        server.reply_json(openai_completion("text").model_dump(mode="json"))
        await gpt.create(**ASK, tools=[TOOL])
    finally:
        await claude.aclose()
        await gpt.aclose()
    sent_claude, sent_gpt = (request.json for request in server.requests)
    assert sent_claude["tool_choice"] == named
    assert request_is_valid(MessageCreateParamsNonStreaming, sent_claude) == []
    assert sent_gpt["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert request_is_valid(CompletionCreateParamsNonStreaming, sent_gpt) == []


# --------------------------------------------------------------------------- an SDK client


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "create"])
async def test_through_the_vendor_sdks(server: ScriptedServer, streamed: bool) -> None:
    claude = AnthropicProvider(
        client=anthropic.AsyncAnthropic(base_url=server.url, api_key="sk-sdk", max_retries=0),
        tool_choice=ToolChoice.ANY,
    )
    gpt = OpenAIProvider(
        client=openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="sk-sdk", max_retries=0),
        tool_choice=ToolChoice.ANY,
    )
    try:
        if streamed:
            server.reply_sse(anthropic_sse(anthropic_stream("text")))
            await drain(claude.stream(**ASK, tools=[TOOL]))
            server.reply_sse(openai_sse(openai_stream("text")))
            await drain(gpt.stream(**ASK, tools=[TOOL]))
        else:
            server.reply_json(anthropic_message("text").model_dump(mode="json"))
            await claude.create(**ASK, tools=[TOOL])
            server.reply_json(openai_completion("text").model_dump(mode="json"))
            await gpt.create(**ASK, tools=[TOOL])
    finally:
        await claude.aclose()
        await gpt.aclose()
    sent_claude, sent_gpt = (request.json for request in server.requests)
    assert sent_claude["tool_choice"] == {"type": "any"}
    assert sent_gpt["tool_choice"] == "required"
    if streamed:
        assert request_is_valid(MessageCreateParamsStreaming, sent_claude) == []
        assert request_is_valid(CompletionCreateParamsStreaming, sent_gpt) == []
    else:
        assert request_is_valid(MessageCreateParamsNonStreaming, sent_claude) == []
        assert request_is_valid(CompletionCreateParamsNonStreaming, sent_gpt) == []
