"""The providers given a vendor SDK client (``client=``, as 0.9.1's took one).

The clients are the vendors' real ones (``anthropic.AsyncAnthropic``, ``openai.AsyncOpenAI``)
pointed at the scripted server on loopback: the SDK does the HTTP, the provider builds the
request and reads what the SDK hands back. ``test_replay.py`` replays the recorded streams
through them too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import anthropic
import openai
import pytest

from harnessx import PromptCacheHint
from harnessx._errors import ConfigurationError, IncompleteStreamError, ProviderError
from harnessx._model_limits import UNKNOWN_MODEL, ModelLimits, lookup_model_limits, resolve_model_limits
from harnessx.providers import (
    AnthropicProvider,
    OpenAIProvider,
    StopReason,
    StreamChunk,
    TokenUsage,
    ToolCall,
)

if TYPE_CHECKING:
    from conftest import ScriptedServer

ASK: dict[str, Any] = {
    "model": "m",
    "messages": [{"role": "user", "content": "?"}],
    "system": "",
    "tools": [],
}


def anthropic_sdk(server: ScriptedServer) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.url, api_key="sk-sdk", max_retries=0)


def openai_sdk(server: ScriptedServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="sk-sdk", max_retries=0)


async def collect(stream: AsyncIterator[StreamChunk]) -> list[StreamChunk]:
    return [chunk async for chunk in stream]


MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "tu_1", "name": "get_weather", "input": {"city": "Oslo"}},
    ],
    "stop_reason": "tool_use",
    "usage": {"input_tokens": 10, "output_tokens": 4, "cache_read_input_tokens": 2},
}


async def test_anthropic_create_goes_through_the_sdk(server: ScriptedServer) -> None:
    server.reply_json(MESSAGE)
    sdk = anthropic_sdk(server)
    async with AnthropicProvider(client=sdk) as provider:
        assert provider.client is sdk
        reply = await provider.create(**ASK, max_tokens=50, temperature=0.5)
    assert sdk.is_closed(), "aclose() closes the SDK client, as 0.9.1's provider did"
    assert reply.text == "Looking."
    assert reply.tool_calls == [ToolCall("tu_1", "get_weather", {"city": "Oslo"})]
    assert reply.stop_reason is StopReason.TOOL_USE
    assert reply.usage == TokenUsage(input_tokens=12, output_tokens=4, cache_read_input_tokens=2)
    [request] = server.requests
    assert request.path == "/v1/messages"
    headers = {name.lower(): value for name, value in request.headers.items()}
    assert headers["authorization"] == "Bearer sk-sdk"  # the SDK's own authentication
    # The client chooses the API version, so the temperature goes as 0.9.1 sent it.
    assert request.json == {
        "model": "m",
        "max_tokens": 50,
        "temperature": 0.5,
        "messages": [{"role": "user", "content": "?"}],
    }


async def test_a_provider_without_a_client_shows_one_for_its_endpoint(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.9.1's providers always hold an SDK client (programs read ``provider.client``, e.g.
    its ``max_retries``): without ``client=`` ours makes one for the same endpoint on first
    read, which the program may use; the provider's own calls stay on its HTTP client."""
    server.reply_json(MESSAGE)
    server.reply_json({"input_tokens": 5})
    async with AnthropicProvider(
        api_key="sk-own", base_url=server.url, extra_headers={"x-team": "a"}
    ) as provider:
        sdk = provider.client
        assert isinstance(sdk, anthropic.AsyncAnthropic) and provider.client is sdk
        assert sdk.max_retries == 0, "a run owns the retries, as with 0.9.1's clients"
        assert str(sdk.base_url).rstrip("/") == server.url
        await provider.create(**ASK, max_tokens=5)
        assert (
            await sdk.messages.count_tokens(model="m", messages=[{"role": "user", "content": "?"}])
        ).input_tokens == 5
    assert sdk.is_closed(), "aclose() closes the client it made"
    own, through_sdk = ({k.lower(): v for k, v in r.headers.items()} for r in server.requests)
    assert "anthropic" not in own.get("user-agent", "").lower(), "the provider's call is its own"
    assert through_sdk["x-team"] == "a" and through_sdk["anthropic-version"] == provider.anthropic_version
    assert "sk-own" in (through_sdk.get("x-api-key", "") + through_sdk.get("authorization", ""))

    server.reply_json(completion("hi"))
    async with OpenAIProvider("gpt-x", api_key="sk-own", base_url=f"{server.url}/v1") as openai_provider:
        assert openai_provider.client.max_retries == 0 and openai_provider.client.api_key == "sk-own"
        # Assigning a client sends the calls through it, as 0.9.1's attribute did.
        openai_provider.client = openai_sdk(server)
        assert (await openai_provider.create(**ASK, max_tokens=5)).text == "hi"
    assert server.requests[-1].headers["authorization"] == "Bearer sk-sdk"
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        _ = OpenAIProvider(api_key=None, base_url="https://api.openai.com/v1").client


async def test_anthropic_client_as_the_first_argument(server: ScriptedServer) -> None:
    server.reply_json(MESSAGE)
    async with AnthropicProvider(anthropic_sdk(server)) as provider:  # 0.9.1's signature
        assert provider.model is None
        assert (await provider.create(**ASK, max_tokens=5)).text == "Looking."


async def test_a_refused_temperature_is_dropped(server: ScriptedServer) -> None:
    refusal = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "temperature: not here"},
    }
    server.reply_json(refusal, 400)
    server.reply_json(MESSAGE)
    async with AnthropicProvider(client=anthropic_sdk(server)) as provider:
        await provider.create(**ASK, max_tokens=5, temperature=1.0)
    assert [r.json.get("temperature") for r in server.requests] == [1.0, None]


async def test_sdk_errors_become_provider_errors(server: ScriptedServer) -> None:
    busy = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    server.reply_json(busy, 529, headers={"retry-after": "7"})
    server.reply_json({"type": "error", "error": {"type": "authentication_error", "message": "bad key"}}, 401)
    async with AnthropicProvider(client=anthropic_sdk(server)) as provider:
        with pytest.raises(ProviderError) as overloaded:
            await provider.create(**ASK, max_tokens=5)
        with pytest.raises(ProviderError) as refused:
            await collect(provider.stream(**ASK, max_tokens=5))
    assert (overloaded.value.status_code, overloaded.value.retryable) == (529, True)
    assert overloaded.value.retry_after == 7.0
    assert (refused.value.status_code, refused.value.retryable) == (401, False)
    assert "bad key" in str(refused.value)


async def test_a_connection_failure_is_retryable() -> None:
    sdk = anthropic.AsyncAnthropic(base_url="http://127.0.0.1:9", api_key="k", max_retries=0)
    async with AnthropicProvider(client=sdk) as provider:
        with pytest.raises(ProviderError) as caught:
            await provider.create(**ASK, max_tokens=5)
    assert caught.value.retryable and "connection failed" in str(caught.value)


async def test_anthropic_cache_markers_and_their_refusal(server: ScriptedServer) -> None:
    refusal = {"type": "error", "error": {"type": "invalid_request_error", "message": "cache_control: no"}}
    server.reply_json(refusal, 400)
    server.reply_json(MESSAGE)
    hint = PromptCacheHint(prefix_key="k", breakpoints=("system",))
    async with AnthropicProvider(client=anthropic_sdk(server)) as provider:
        await provider.create(**{**ASK, "system": "sys"}, max_tokens=5, cache=hint)
    marked, plain = (r.json["system"] for r in server.requests)
    assert marked == [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}]
    assert plain == "sys"


async def test_anthropic_count_tokens_through_the_sdk(server: ScriptedServer) -> None:
    server.reply_json({"input_tokens": 321})
    async with AnthropicProvider(client=anthropic_sdk(server)) as provider:
        assert await provider.count_tokens(**ASK) == 321
    assert server.requests[0].path == "/v1/messages/count_tokens"


async def test_the_models_api_is_asked_once_per_model(server: ScriptedServer) -> None:
    server.reply_json(
        {"type": "model", "id": "claude-next", "display_name": "Next", "created_at": "2026-01-01T00:00:00Z"}
        | {"max_input_tokens": 400_000, "max_tokens": 96_000}
    )
    async with AnthropicProvider(client=anthropic_sdk(server)) as provider:
        assert await resolve_model_limits(provider, "claude-next") == ModelLimits(400_000, 96_000)
        assert await resolve_model_limits(provider, "claude-next") == ModelLimits(400_000, 96_000)
    assert [r.path for r in server.requests] == ["/v1/models/claude-next"]
    # Without a client the table answers, and nothing is asked.
    assert await AnthropicProvider().model_limits("claude-next") is None


def model_info(model: str, window: int, output: int) -> dict[str, Any]:
    return {"type": "model", "id": model, "display_name": "x", "created_at": "2026-01-01T00:00:00Z"} | {
        "max_input_tokens": window,
        "max_tokens": output,
    }


@pytest.fixture(autouse=True)
def _fresh_models_api_answers() -> Iterator[None]:
    AnthropicProvider.clear_model_limits_cache()
    yield
    AnthropicProvider.clear_model_limits_cache()


async def test_a_model_the_table_knows_does_not_wait_for_the_models_api(server: ScriptedServer) -> None:
    """As 0.9.1: the table answers the first calls, and the API's figures the later ones."""
    model = "claude-sonnet-4-6"
    table = lookup_model_limits(model)
    assert table is not None and table != ModelLimits(300_000, 50_000)
    server.reply_slowly(0.2, model_info(model, 300_000, 50_000))
    async with AnthropicProvider(client=anthropic_sdk(server)) as provider:
        assert await resolve_model_limits(provider, model) == table, "the lookup held up the call"
        for _ in range(200):  # the lookup answers in the background
            if await resolve_model_limits(provider, model) != table:
                break
            await asyncio.sleep(0.01)
        assert await resolve_model_limits(provider, model) == ModelLimits(300_000, 50_000)
    assert [r.path for r in server.requests] == [f"/v1/models/{model}"]


async def test_the_models_api_answer_is_kept_for_the_process_and_endpoint(server: ScriptedServer) -> None:
    server.reply_json(model_info("claude-next", 400_000, 96_000))
    server.reply_json({"type": "error", "error": {"type": "api_error", "message": "x"}}, status=500)
    server.reply_json({"type": "error", "error": {"type": "api_error", "message": "x"}}, status=500)
    server.reply_json(model_info("claude-next", 500_000, 64_000))
    for _ in range(2):  # a provider (and an SDK client) per task: asked once
        async with AnthropicProvider(client=anthropic_sdk(server)) as provider:
            assert await resolve_model_limits(provider, "claude-next") == ModelLimits(400_000, 96_000)
    for _ in range(2):  # a failed lookup is the provider's own
        async with AnthropicProvider(client=anthropic_sdk(server)) as provider:
            assert await resolve_model_limits(provider, "claude-later") == UNKNOWN_MODEL
    AnthropicProvider.clear_model_limits_cache()
    async with AnthropicProvider(client=anthropic_sdk(server)) as provider:
        assert await resolve_model_limits(provider, "claude-next") == ModelLimits(500_000, 64_000)
    assert [r.path for r in server.requests] == [
        "/v1/models/claude-next",
        "/v1/models/claude-later",
        "/v1/models/claude-later",
        "/v1/models/claude-next",
    ]


def completion(content: str, finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9},
    }


async def test_openai_create_and_the_cache_key_through_the_sdk(server: ScriptedServer) -> None:
    server.reply_json(completion("hi"))
    sdk = openai_sdk(server)
    async with OpenAIProvider(client=sdk) as provider:
        reply = await provider.create(
            **ASK, max_tokens=5, cache=PromptCacheHint(prefix_key="abc", breakpoints=("system",))
        )
    assert sdk.is_closed()
    assert (reply.text, reply.stop_reason, reply.usage) == ("hi", StopReason.END_TURN, TokenUsage(7, 2))
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert {name.lower(): value for name, value in request.headers.items()}[
        "authorization"
    ] == "Bearer sk-sdk"
    assert request.json["prompt_cache_key"] == "abc"  # sent in the SDK's extra_body


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    return {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice]}


@pytest.mark.parametrize("allow", [False, True])
async def test_an_openai_stream_without_a_finish_reason(server: ScriptedServer, allow: bool) -> None:
    server.reply_sse(
        [server.event(chunk({"role": "assistant", "content": "hel"})), server.event(chunk({"content": "lo"}))]
    )
    async with OpenAIProvider(
        client=openai_sdk(server), allow_missing_finish_reason_for_text=allow
    ) as provider:
        if not allow:
            with pytest.raises(IncompleteStreamError):
                await collect(provider.stream(**ASK, max_tokens=5))
            return
        chunks = await collect(provider.stream(**ASK, max_tokens=5))
    assert chunks[-1].data.text == "hello"


async def test_an_unfinished_tool_call_is_never_accepted(server: ScriptedServer) -> None:
    call = {"index": 0, "id": "t1", "type": "function", "function": {"name": "t", "arguments": "{"}}
    server.reply_sse([server.event(chunk({"content": "x", "tool_calls": [call]}))])
    async with OpenAIProvider(
        "m", base_url=f"{server.url}/v1", allow_missing_finish_reason_for_text=True
    ) as provider:
        with pytest.raises(IncompleteStreamError):
            await collect(provider.stream(**ASK, max_tokens=5))


async def test_a_null_in_a_tool_input_is_kept(server: ScriptedServer) -> None:
    """The SDK's objects are read back as the JSON the server sent: a null argument stays (a
    guard: turning them into JSON without nulls would drop it)."""
    call = {"type": "tool_use", "id": "tu_2", "name": "find", "input": {"query": "x", "limit": None}}
    server.reply_json({**MESSAGE, "content": [call]})
    start = {"type": "message_start", "message": {**MESSAGE, "content": [], "stop_reason": None}}
    server.reply_sse(
        [
            server.event(start, event="message_start"),
            server.event(
                {"type": "content_block_start", "index": 0, "content_block": {**call, "input": {}}},
                event="content_block_start",
            ),
            server.event(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": '{"query": "x", "limit": null}'},
                },
                event="content_block_delta",
            ),
            server.event({"type": "content_block_stop", "index": 0}, event="content_block_stop"),
            server.event(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "tool_use"},
                    "usage": {"output_tokens": 3},
                },
                event="message_delta",
            ),
            server.event({"type": "message_stop"}, event="message_stop"),
        ]
    )
    expected = [ToolCall("tu_2", "find", {"query": "x", "limit": None})]
    async with AnthropicProvider(client=anthropic_sdk(server)) as provider:
        assert (await provider.create(**ASK, max_tokens=5)).tool_calls == expected
        assert (await collect(provider.stream(**ASK, max_tokens=5)))[-1].data.tool_calls == expected


def test_an_sdk_block_is_kept_without_the_sdks_own_fields() -> None:
    from anthropic.types import ParsedTextBlock

    from harnessx import ProviderResponse

    block = ParsedTextBlock[dict[str, int]](type="text", text="400", parsed_output={"answer": 400})
    assert ProviderResponse(content=[block]).content == [{"type": "text", "text": "400", "citations": None}]


async def test_an_sdk_client_refusing_eager_streaming_gets_calls_without_it(server: ScriptedServer) -> None:
    tool = {"name": "get_weather", "description": "Weather.", "input_schema": {"type": "object"}}
    refusal = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "tools.0.custom.eager_input_streaming: Extra inputs are not permitted",
        },
    }
    server.reply_json(refusal, status=400)
    server.reply_json(MESSAGE | {"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"})
    server.reply_json(MESSAGE | {"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"})
    async with AnthropicProvider(client=anthropic_sdk(server)) as provider:
        for _ in range(2):
            assert (await provider.create(**(ASK | {"tools": [tool]}), max_tokens=5)).text == "ok"
        assert provider.eager_tool_streaming is False
    sent = [r.json["tools"][0] for r in server.requests]
    assert [t.get("eager_input_streaming") for t in sent] == [True, None, None]


def tool_stream(server: ScriptedServer, *arguments: str, stop_reason: str = "tool_use") -> list[str]:
    """A streamed reply: a text block, then a tool call whose arguments arrive as given."""
    call = {"type": "tool_use", "id": "tu_w", "name": "write_file", "input": {}}
    start = {"type": "message_start", "message": {**MESSAGE, "content": [], "stop_reason": None}}

    def event(data: dict[str, Any]) -> str:
        return server.event(data, event=data["type"])

    return [
        event(start),
        event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        event(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Writing."}}
        ),
        event({"type": "content_block_stop", "index": 0}),
        event({"type": "content_block_start", "index": 1, "content_block": call}),
        *(
            event(
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "input_json_delta", "partial_json": a},
                }
            )
            for a in arguments
        ),
        event({"type": "content_block_stop", "index": 1}),
        event(
            {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": 9}}
        ),
        event({"type": "message_stop"}),
    ]


WRITE = {"name": "write_file", "description": "Write a file.", "input_schema": {"type": "object"}}


async def test_a_tool_argument_the_sdk_cannot_parse_is_answered_not_fatal(server: ScriptedServer) -> None:
    """The SDK raises on a streamed argument that is not JSON (the API no longer checks them
    with eager input streaming) and the rest of the stream is lost; as 0.9.1, the reply so
    far stands, the call marked for the run to answer."""
    from harnessx.providers.base import INVALID_ARGUMENTS

    server.reply_sse(tool_stream(server, '{"path": "fib.py", ', '"content": @@'))
    async with AnthropicProvider(client=anthropic_sdk(server)) as provider:
        chunks = await collect(provider.stream(**(ASK | {"tools": [WRITE]}), max_tokens=50))
    reply = chunks[-1].data
    assert chunks[-1].kind == "response" and reply.text == "Writing."
    assert reply.stop_reason is StopReason.TOOL_USE
    [call] = reply.tool_calls
    assert (call.id, call.name) == ("tu_w", "write_file")
    assert (
        "not valid JSON" in call.input[INVALID_ARGUMENTS]
        and call.parse_error == call.input[INVALID_ARGUMENTS]
    )
    assert "@@" not in call.parse_error, "the argument text itself is left out"


async def test_a_run_asks_the_model_to_resend_a_call_it_could_not_read(server: ScriptedServer) -> None:
    from harnessx import Agent, AgentConfig

    server.reply_json({"type": "error", "error": {"type": "not_found_error", "message": "no"}}, status=404)
    server.reply_sse(tool_stream(server, '{"path": "fib.py", "content": @@'))
    server.reply_sse(tool_stream(server, '{"path": "fib.py", "content": "def fib(n):\\n    a, b'))
    server.reply_sse(tool_stream(server, '{"path": "fib.py", ', '"content": "ok"}'))
    server.reply_sse(tool_stream(server, stop_reason="end_turn")[:4] + tool_stream(server)[-2:])
    written: list[tuple[str, str]] = []
    async with AnthropicProvider(client=anthropic_sdk(server)) as provider:
        agent = Agent(config=AgentConfig(model="m", planning=False), provider=provider)

        @agent.tools.register()
        def write_file(path: str, content: str) -> str:
            """Write a file."""
            written.append((path, content))
            return "written"

        async with agent, agent.run_stream("Write it") as run:
            [event async for event in run]
            result = await run.result()
    assert result.ok, result.error
    assert written == [("fib.py", "ok")], "never the unreadable or the half-written arguments"
    sent = [r.json for r in server.requests if r.path == "/v1/messages"]
    answers = [m["messages"][-1]["content"][-1] for m in sent[1:3]]
    assert all(a["type"] == "tool_result" and a["is_error"] for a in answers)
    assert "not valid JSON" in answers[0]["content"] and "not complete JSON" in answers[1]["content"]


async def test_a_provider_with_a_client_names_the_clients_endpoint_and_hides_its_key() -> None:
    key = "sk-never-shown-0123456789"
    given = anthropic.AsyncAnthropic(api_key=key, base_url="http://127.0.0.1:9/")
    provider = AnthropicProvider("claude-test", client=given)
    try:
        shown = repr(provider)
        assert "client=AsyncAnthropic(base_url='http://127.0.0.1:9')" in shown, shown
        assert key not in shown and key not in str(provider)
        assert "api.anthropic.com" not in shown  # the default endpoint the client replaces
    finally:
        await provider.aclose()
    other = openai.AsyncOpenAI(api_key=key, base_url="http://127.0.0.1:9/v1")
    provider_o = OpenAIProvider("gpt-test", client=other)
    try:
        assert "client=AsyncOpenAI(base_url='http://127.0.0.1:9/v1')" in repr(provider_o)
        assert key not in repr(provider_o)
    finally:
        await provider_o.aclose()
    proxied = openai.AsyncOpenAI(api_key=key, base_url="http://relay:hunter2-proxy-pass@127.0.0.1:9/v1")
    provider_p = OpenAIProvider("gpt-test", client=proxied)
    try:
        assert "hunter2-proxy-pass" not in repr(provider_p), repr(provider_p)
    finally:
        await provider_p.aclose()
