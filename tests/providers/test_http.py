"""The shared HTTP machinery: SSE parsing, Retry-After, failures, secrets, clients.

Failure classification is exercised through ``OpenAIProvider`` (it is the same code for
both providers); Anthropic-specific failure modes live in ``test_anthropic.py``.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from harnessx import RunEventType
from harnessx._config import RetryPolicy
from harnessx._errors import ConfigurationError, ProviderError
from harnessx.providers import AnthropicProvider, OpenAIProvider, StreamChunk
from harnessx.providers._http import iter_sse, parse_retry_after, parse_tool_arguments

if TYPE_CHECKING:
    from conftest import Drive, ScriptedServer

MakeOpenAI = Callable[..., OpenAIProvider]
KEY = "sk-test-SECRET-0123456789"  # the key the provider fixtures use
ARGS: dict[str, Any] = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "system": ""}


def completion(text: str = "ok") -> dict[str, Any]:
    return {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }


def text_stream(server: ScriptedServer, *pieces: str) -> list[str]:
    events = [
        server.event({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
        for piece in pieces
    ]
    events.append(server.event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    return [*events, server.event("[DONE]")]


async def create(provider: OpenAIProvider) -> Any:
    return await provider.create(**ARGS, tools=[], max_tokens=None)


async def collect(stream: AsyncIterator[StreamChunk]) -> list[StreamChunk]:
    return [chunk async for chunk in stream]


async def lines(*items: str) -> AsyncIterator[str]:
    for item in items:
        yield item


# --------------------------------------------------------------------------- SSE parser


async def test_sse_parser_handles_events_comments_and_multiline_data() -> None:
    source = lines(
        ": keep-alive comment",
        "event: message_start",
        'data: {"a": 1}',
        "",
        "",  # extra blank lines dispatch nothing
        "data: first line",
        "data:second line",  # no space after the colon is allowed
        "data:  indented",  # only one leading space is stripped
        "id: 7",
        "retry: 100",
        "",
        "event: ping",  # an event with no data is not dispatched
        "",
        "data: unterminated",  # no blank line before the end: still delivered
    )
    events = [event async for event in iter_sse(source)]
    assert events == [
        ("message_start", '{"a": 1}'),
        ("message", "first line\nsecond line\n indented"),
        ("message", "unterminated"),
    ]


async def test_sse_event_name_does_not_leak_into_the_next_event() -> None:
    events = [event async for event in iter_sse(lines("event: a", "data: 1", "", "data: 2", ""))]
    assert events == [("a", "1"), ("message", "2")]


# --------------------------------------------------------------------------- helpers


def test_retry_after_seconds_date_and_millis() -> None:
    now = time.time()
    in_30s = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    waited = parse_retry_after({"retry-after": in_30s}, now=now)
    assert waited is not None and 28 <= waited <= 31
    past = email.utils.formatdate(now - 60, usegmt=True)
    assert parse_retry_after({"retry-after": past}, now=now) == 0.0
    assert parse_retry_after({"retry-after": "-3"}) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after": "nan"}) is None
    assert parse_retry_after({}) is None


@pytest.mark.parametrize(
    ("raw", "expected", "error_fragment"),
    [
        ('{"a": 1}', {"a": 1}, None),
        ({"a": 1}, {"a": 1}, None),
        ("", {}, None),
        (None, {}, None),
        ('{"a": ', {}, "not valid JSON"),
        ("[1, 2]", {}, "got array"),
        ('"text"', {}, "got string"),
        ("null", {}, "got null"),
        (42, {}, "got int"),
    ],
)
def test_parse_tool_arguments(raw: object, expected: dict[str, Any], error_fragment: str | None) -> None:
    parsed, error = parse_tool_arguments(raw)
    assert parsed == expected
    if error_fragment is None:
        assert error is None
    else:
        assert error is not None and error_fragment in error


# --------------------------------------------------------------------------- failures
#
# A provider call is one attempt; its ProviderError says whether another may succeed. The
# retrying is the runtime's, the same for every provider (tests/unit/test_retry.py has it
# with a provider written by hand), and is checked here end to end through an Agent.


async def test_a_429_is_retryable_and_carries_retry_after(server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_json({"error": {"message": "slow down"}}, status=429, headers={"retry-after": "1"})
    with pytest.raises(ProviderError, match="slow down") as caught:
        await create(openai())
    assert caught.value.retryable is True and caught.value.status_code == 429
    assert caught.value.retry_after == 1.0
    assert len(server.requests) == 1


async def test_a_429_is_retried_after_the_wait_the_server_asked_for(
    drive: Drive, server: ScriptedServer, openai: MakeOpenAI
) -> None:
    server.reply_json({"error": {"message": "slow down"}}, status=429, headers={"retry-after-ms": "30"})
    server.reply_json(completion("after the wait"))
    run = await drive(openai())
    assert run.result.ok and run.result.output == "after the wait"
    assert len(server.requests) == 2
    assert run.waits == [0.03]
    assert run.result.usage_incomplete  # the refused attempt may have been billed


async def test_retry_after_is_capped_by_max_backoff(
    drive: Drive, server: ScriptedServer, openai: MakeOpenAI
) -> None:
    server.reply_json({}, status=429, headers={"retry-after": "3600"})
    server.reply_json(completion())
    run = await drive(openai(), retry=RetryPolicy(attempts=2, backoff_seconds=0.01, max_backoff_seconds=0.05))
    assert run.result.ok and run.waits == [0.05]


async def test_5xx_is_retried_with_exponential_backoff(
    drive: Drive, server: ScriptedServer, openai: MakeOpenAI
) -> None:
    server.reply_json({"error": {"message": "boom"}}, status=500)
    server.reply_json({}, status=502)
    server.reply_json(completion("third time lucky"))
    run = await drive(openai())
    assert run.result.output == "third time lucky"
    assert len(server.requests) == 3
    assert run.waits == [0.01, 0.02]
    assert [(r["attempt"], r["next_attempt"]) for r in run.retries] == [(1, 2), (2, 3)]


async def test_exhausted_retries_fail_the_run_with_the_last_error(
    drive: Drive, server: ScriptedServer, openai: MakeOpenAI
) -> None:
    for _ in range(3):
        server.reply_json({"error": {"type": "server_error", "message": "still down"}}, status=503)
    run = await drive(openai())
    assert run.result.failed and run.result.error is not None
    assert run.result.error["type"] == "ProviderError" and "still down" in run.result.error["message"]
    assert len(server.requests) == 3 and len(run.waits) == 2


async def test_400_is_not_retried_and_carries_the_server_message(
    drive: Drive, server: ScriptedServer, openai: MakeOpenAI
) -> None:
    server.reply_json(
        {"error": {"type": "invalid_request_error", "message": "messages must not be empty"}}, status=400
    )
    with pytest.raises(ProviderError) as caught:
        await create(openai())
    assert caught.value.status_code == 400
    assert caught.value.retryable is False
    assert "messages must not be empty" in str(caught.value)
    server.reply_json({"error": {"message": "messages must not be empty"}}, status=400)
    run = await drive(openai())
    assert run.result.failed and run.retries == []
    assert len(server.requests) == 2


async def test_error_body_that_is_not_json_is_quoted(server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_raw(b"upstream says no", status=422, headers={"content-type": "text/plain"})
    with pytest.raises(ProviderError, match="upstream says no"):
        await create(openai())


@pytest.mark.parametrize(
    "body",
    [{"error": "model not found"}, {"message": "model not found"}, {"detail": "model not found"}],
)
async def test_error_message_shapes_of_compatible_servers(
    server: ScriptedServer, openai: MakeOpenAI, body: dict[str, Any]
) -> None:
    server.reply_json(body, status=404)
    with pytest.raises(ProviderError, match="model not found"):
        await create(openai())


async def test_401_names_the_env_var_and_never_shows_the_key(
    server: ScriptedServer, openai: MakeOpenAI
) -> None:
    # Servers sometimes quote the rejected key back; it must not reach the error text.
    server.reply_json({"error": {"message": f"Incorrect API key provided: {KEY}"}}, status=401)
    with pytest.raises(ProviderError) as caught:
        await create(openai())
    message = str(caught.value)
    assert caught.value.status_code == 401
    assert "OPENAI_API_KEY" in message and "api_key" in message
    assert KEY not in message and "[secure]" in message


async def test_key_is_kept_out_of_retry_log_lines(
    drive: Drive, server: ScriptedServer, openai: MakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    server.reply_json({"error": {"message": f"backend rejected {KEY}"}}, status=500)
    server.reply_json(completion())
    with caplog.at_level(logging.DEBUG, logger="harnessx"):
        run = await drive(openai())
    assert run.result.ok and "retrying" in caplog.text
    assert KEY not in caplog.text and all(KEY not in retry["error"] for retry in run.retries)


async def test_timeouts_are_retried(drive: Drive, server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_slowly(2.0, completion("too late"))
    server.reply_json(completion("in time"))
    run = await drive(openai(timeout=0.2))
    assert run.result.output == "in time"
    assert len(run.waits) == 1


async def test_timeouts_are_not_retried_when_the_policy_says_so(
    drive: Drive, server: ScriptedServer, openai: MakeOpenAI
) -> None:
    server.reply_slowly(2.0, completion())
    policy = RetryPolicy(attempts=3, backoff_seconds=0.01, retry_on_timeout=False)
    run = await drive(openai(timeout=0.2), retry=policy)
    assert run.result.failed and run.result.error is not None and "timed out" in run.result.error["message"]
    assert run.retries == []


async def test_connection_refused_is_retried_then_reported(
    drive: Drive, openai: MakeOpenAI, unused_port: int
) -> None:
    provider = openai(base_url=f"http://127.0.0.1:{unused_port}/v1")
    with pytest.raises(ProviderError, match="connection failed") as caught:
        await create(provider)
    assert caught.value.retryable is True
    run = await drive(provider)
    assert run.result.failed and len(run.waits) == 2


async def test_non_json_success_body_is_a_provider_error(server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_raw(b"<html>gateway</html>", status=200, headers={"content-type": "text/html"})
    with pytest.raises(ProviderError, match="not JSON"):
        await create(openai())


# --------------------------------------------------------------------------- streaming failures


async def test_stream_retries_an_error_status_before_any_output(
    drive: Drive, server: ScriptedServer, openai: MakeOpenAI
) -> None:
    server.reply_json({"error": {"message": "busy"}}, status=429, headers={"retry-after": "0"})
    server.reply_sse(text_stream(server, "hel", "lo"))
    run = await drive(openai(), stream=True)
    assert [e.data for e in run.events if e.type is RunEventType.TEXT_DELTA] == ["hel", "lo"]
    assert run.waits == [0.01]  # Retry-After: 0 does not cut the policy's own back-off
    assert len(server.requests) == 2


async def test_stream_retries_a_connection_dropped_before_any_output(
    drive: Drive, server: ScriptedServer, openai: MakeOpenAI
) -> None:
    server.reply_sse(text_stream(server, "lost"), drop_after=0)
    server.reply_sse(text_stream(server, "kept"))
    run = await drive(openai(), stream=True)
    assert [e.data for e in run.events if e.type is RunEventType.TEXT_DELTA] == ["kept"]
    assert len(server.requests) == 2


async def test_a_stream_that_broke_off_after_output_is_retried_with_an_attempt_reset(
    drive: Drive, server: ScriptedServer, openai: MakeOpenAI
) -> None:
    server.reply_sse(text_stream(server, "partial", "never sent"), drop_after=1)
    with pytest.raises(ProviderError, match="broke off") as caught:
        await collect(openai().stream(**ARGS, tools=[], max_tokens=None))
    assert caught.value.retryable is True and len(server.requests) == 1
    server.reply_sse(text_stream(server, "partial", "never sent"), drop_after=1)
    server.reply_sse(text_stream(server, "whole ", "answer"))
    run = await drive(openai(), stream=True)
    kinds = [
        (e.type, e.data)
        for e in run.events
        if e.type in (RunEventType.TEXT_DELTA, RunEventType.ATTEMPT_RESET)
    ]
    # Followers are told to drop what they saw before the reset.
    assert kinds == [
        (RunEventType.TEXT_DELTA, "partial"),
        (RunEventType.ATTEMPT_RESET, {"attempt": 1}),
        (RunEventType.TEXT_DELTA, "whole "),
        (RunEventType.TEXT_DELTA, "answer"),
    ]
    assert run.result.output == "whole answer"


async def test_stream_that_ends_early_is_retried(
    drive: Drive, server: ScriptedServer, openai: MakeOpenAI
) -> None:
    # A cleanly finished body without [DONE] or a finish reason: the reply is incomplete.
    server.reply_sse([server.event({"choices": []})])
    server.reply_sse(text_stream(server, "whole"))
    run = await drive(openai(), stream=True)
    assert run.result.output == "whole"
    assert len(server.requests) == 2


async def test_stream_consumer_may_stop_early(server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_sse(text_stream(server, "a", "b", "c"))
    stream = openai().stream(**ARGS, tools=[], max_tokens=None)
    async for chunk in stream:
        assert chunk.data == "a"
        break
    await stream.aclose()  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- keys and clients


def test_repr_hides_the_key() -> None:
    provider = OpenAIProvider("gpt-test", api_key=KEY)
    assert KEY not in repr(provider) and KEY not in str(provider)
    assert "api_key=[secure]" in repr(provider)
    anthropic = AnthropicProvider("claude-test", api_key=KEY)
    assert KEY not in repr(anthropic) and "api_key=[secure]" in repr(anthropic)


def test_repr_says_when_there_is_no_key() -> None:
    assert "api_key=None" in repr(OpenAIProvider("gpt-test", base_url="http://localhost:1/v1"))


async def test_missing_model_is_a_configuration_error(server: ScriptedServer, openai: MakeOpenAI) -> None:
    provider = openai(model=None)
    with pytest.raises(ConfigurationError, match="model"):
        await provider.create(**{**ARGS, "model": ""}, tools=[], max_tokens=None)
    assert server.requests == []


async def test_provider_model_is_used_when_the_call_gives_none(
    server: ScriptedServer, openai: MakeOpenAI
) -> None:
    server.reply_json(completion())
    await openai(model="from-constructor").create(**{**ARGS, "model": ""}, tools=[], max_tokens=None)
    assert server.requests[0].json["model"] == "from-constructor"


async def test_aclose_closes_an_owned_client(server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_json(completion())
    provider = openai()
    await create(provider)
    client = provider.http_client
    await provider.aclose()
    assert client.is_closed


async def test_aclose_leaves_an_injected_client_open(server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_json(completion())
    async with httpx.AsyncClient() as client:
        provider = openai(http_client=client)
        await create(provider)
        await provider.aclose()
        assert not client.is_closed
        assert provider.http_client is client


async def test_provider_is_usable_after_aclose(server: ScriptedServer, openai: MakeOpenAI) -> None:
    server.reply_json(completion("one"))
    server.reply_json(completion("two"))
    provider = openai()
    assert (await create(provider)).text == "one"
    await provider.aclose()
    assert (await create(provider)).text == "two"
