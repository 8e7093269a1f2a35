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
