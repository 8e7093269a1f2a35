"""Which model-call failures are tried again (harnessx.providers.retry, 0.9.1's module): a
throttle or an overload is; a quota, billing or context-window refusal is not, whatever its
status says; and a run does not spend its retries on one."""

from __future__ import annotations

import pytest

from harnessx import Agent, AgentConfig, HookEvent, ProviderError, RetryPolicy, ScriptedProvider
from harnessx.providers.retry import (
    is_context_overflow,
    is_rate_limited,
    is_transient,
    is_transient_text,
    retry_after_seconds,
)


def _status(code: int, message: str) -> Exception:
    return type("E", (Exception,), {"status_code": code})(message)


@pytest.mark.parametrize(
    ("message", "status", "retried"),
    [
        ("Rate limit exceeded", 429, True),
        ("You exceeded your current quota", 429, False),
        ("insufficient_quota", 429, False),
        ("billing: payment required", 429, False),
        ("Your credit balance is too low", 429, False),
        ("prompt is too long: 250000 tokens", 400, False),
        ("maximum context length exceeded", 429, False),
        ("ThrottlingException: Too many tokens", 429, True),
        ("service unavailable", 503, True),
        ("timeout in the request body", 400, False),
    ],
)
def test_the_status_decides_unless_the_message_says_it_is_permanent(
    message: str, status: int, retried: bool
) -> None:
    assert is_transient(_status(status, message)) is retried


def test_a_provider_error_marked_retryable_is_not_retried_for_a_quota_or_the_window() -> None:
    for message in ("You exceeded your current quota", "prompt is too long: 250000 tokens > 200000"):
        assert not is_transient(ProviderError(message, status_code=429, retryable=True))
    assert is_transient(ProviderError("Rate limit exceeded", status_code=429, retryable=True))


def test_without_a_status_the_message_decides() -> None:
    assert is_transient(RuntimeError("RESOURCE_EXHAUSTED: quota")) is True, "Gemini's throttle"
    assert is_transient(RuntimeError("model is overloaded")) and is_transient_text("peer closed connection")
    assert not is_transient(RuntimeError("invalid argument"))
    assert is_transient(TimeoutError()) and is_transient(TimeoutError()) and is_transient(ConnectionError())
    assert is_context_overflow(RuntimeError("context_length_exceeded"))
    assert not is_context_overflow(RuntimeError("rate limit: too many tokens per minute"))
    assert not is_rate_limited(_status(429, "You exceeded your current quota"))
    assert retry_after_seconds(RuntimeError("no headers")) is None


async def test_a_quota_refusal_is_not_retried_by_a_run() -> None:
    quota = ProviderError("429: You exceeded your current quota", status_code=429, retryable=True)
    retries: list[object] = []

    def script(request: object) -> str:
        raise quota

    agent = Agent(
        config=AgentConfig(planning=False, retry=RetryPolicy(attempts=4, backoff_seconds=0.001)),
        provider=ScriptedProvider(script),
    )
    agent.hooks.on(HookEvent.RETRY, lambda ctx: retries.append(ctx.data))
    result = await agent.run("go")
    assert result.failed and retries == []


def test_retry_after_is_read_from_an_error_body_when_no_header_says() -> None:
    def failure(**fields: object) -> Exception:
        return type("E", (Exception,), {"code": 429, **fields})("slow down")

    assert retry_after_seconds(failure(body={"error": {"retry_after": 3}})) == 3.0
    assert retry_after_seconds(failure(body={"retry_after": 1.5})) == 1.5
    assert retry_after_seconds(failure(headers={"retry-after": "2"}, body={"retry_after": 9})) == 2.0
    assert retry_after_seconds(failure(body={"retry_after": "soon"})) is None


async def test_a_long_wait_before_the_next_attempt_is_a_waiting_event() -> None:
    from harnessx import ProgressPolicy, ProviderResponse, RunEventType

    calls = 0

    def reply(request: object) -> ProviderResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise type("E", (Exception,), {"code": 429, "headers": {"retry-after": "1"}})("rate limited")
        return ProviderResponse(text="ok")

    config = AgentConfig(
        retry=RetryPolicy(backoff_seconds=0, max_backoff_seconds=0.08, jitter=0),
        progress=ProgressPolicy(first_after_seconds=0.02, repeat_every_seconds=0.02),
    )
    agent = Agent(config=config, provider=ScriptedProvider(reply))
    async with agent, agent.run_stream("hi") as stream:
        events = [event async for event in stream]
    waits = [e.data for e in events if e.type is RunEventType.WAITING]
    assert waits and all(w["on"] == "retry" for w in waits)


def _sdk_connection_errors() -> tuple[Exception, Exception, Exception]:
    import anthropic
    import httpx

    request = httpx.Request("POST", "http://127.0.0.1:9/v1/messages")
    lost = anthropic.APIConnectionError(request=request)
    lost.__cause__ = httpx.ConnectError("[Errno 104] Connection reset by peer")
    refused = anthropic.APIConnectionError(request=request)
    refused.__cause__ = httpx.ProxyError("403 Forbidden")
    return lost, refused, anthropic.APITimeoutError(request=request)


def test_a_provider_classifies_an_sdk_connection_failure_and_a_proxy_refusal() -> None:
    """0.9.1's providers answer ``is_transient`` / ``is_rate_limited`` / ``retry_after``
    themselves; the shared classifier alone does not know an SDK's wrapped connection
    failure, a provider does, and a proxy refusing the tunnel stays final."""
    import anthropic
    import httpx

    from harnessx.providers import AnthropicProvider, OpenAIProvider
    from harnessx.providers.retry import sdk_connection_failure

    lost, refused, timed_out = _sdk_connection_errors()
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/messages")
    throttled = anthropic.RateLimitError(
        "slow", response=httpx.Response(429, request=request, headers={"retry-after": "4"}), body=None
    )
    bad = anthropic.BadRequestError("bad", response=httpx.Response(400, request=request), body=None)
    assert not is_transient(lost) and sdk_connection_failure(lost) and not sdk_connection_failure(refused)
    for provider in (AnthropicProvider(api_key="k"), OpenAIProvider(api_key="k"), ScriptedProvider([])):
        assert provider.is_transient(lost) and provider.is_transient(timed_out)
        assert not provider.is_transient(refused) and not provider.is_transient(bad)
        assert provider.is_transient(throttled) and provider.is_rate_limited(throttled)
        assert not provider.is_rate_limited(_status(503, "unavailable"))
        assert provider.retry_after(throttled) == 4.0 and provider.retry_after(bad) is None
    # A provider given an SDK client turns its errors into ProviderError by the same rule.
    from harnessx.providers._sdk_client import sdk_error

    assert sdk_error("anthropic", lost, str).retryable and not sdk_error("anthropic", refused, str).retryable


async def test_a_run_retries_an_sdk_connection_failure_but_not_a_proxy_refusal() -> None:
    lost, refused, _ = _sdk_connection_errors()
    for failure, calls_made in ((lost, 2), (refused, 1)):
        calls = 0

        def reply(request: object, failure: Exception = failure) -> str:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise failure
            return "ok"

        agent = Agent(
            config=AgentConfig(planning=False, retry=RetryPolicy(attempts=3, backoff_seconds=0)),
            provider=ScriptedProvider(reply),
        )
        result = await agent.run("go")
        assert calls == calls_made and result.ok is (failure is lost)


async def test_a_fallback_chain_classifies_as_the_member_that_failed() -> None:
    from harnessx import FallbackProvider, ProviderResponse

    class Picky(ScriptedProvider):
        def is_transient(self, exc: BaseException) -> bool:
            return "quota" in str(exc)

    def refuse(request: object) -> ProviderResponse:
        raise _status(400, "quota for now")

    primary, backup = Picky(refuse), ScriptedProvider(refuse)
    chain = FallbackProvider(primary, fallbacks=[backup])
    assert chain.is_transient(_status(400, "quota")) and not chain.is_transient(_status(503, "down"))
    with pytest.raises(Exception, match="quota"):
        await chain.create(model="m", messages=[], system="", tools=[], max_tokens=5)
    # The backup (the shared classifier: a 400 is final) failed last.
    assert not chain.is_transient(_status(400, "quota"))
