"""A streamed reply that stalls is abandoned and retried (``IncompleteStreamError``), as in
harnessx 0.9.1: ``RetryPolicy.stream_idle_timeout_seconds`` bounds every gap of a provider's
own stream, and ``first_event_timeout`` the wait for the first event of a provider that
sends one as soon as the model starts (``LLMProvider.first_event_promptly``), which is then
streamed by ``run()`` too. A slow start seen in a run makes later calls wait longer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from harnessx import (
    Agent,
    AgentConfig,
    LLMProvider,
    PermissionLevel,
    ProviderResponse,
    RetryPolicy,
    RunEventType,
    StreamChunk,
    ToolCall,
    ToolCallDelta,
)
from harnessx.providers.base import streams


class Streaming(LLMProvider):
    """Streams each reply; ``delays[n]`` is how long call ``n + 1`` waits before its first
    event; with ``stall_mid_reply`` the first call stalls after a piece of text."""

    def __init__(
        self,
        delays: list[float] | None = None,
        *,
        promptly: bool = False,
        stall_mid_reply: bool = False,
        replies: list[ProviderResponse] | None = None,
    ) -> None:
        self.delays = delays or []
        self.first_event_promptly = promptly
        self.stall_mid_reply = stall_mid_reply
        self.replies = replies or []
        self.calls = 0

    async def create(self, **kwargs: Any) -> ProviderResponse:
        raise AssertionError("a provider that streams and says so promptly is streamed by run() too")

    async def stream(self, **kwargs: Any) -> AsyncIterator[StreamChunk]:
        self.calls += 1
        call = self.calls
        await asyncio.sleep(self.delays[call - 1] if call <= len(self.delays) else 0)
        yield StreamChunk("progress", None)
        if self.stall_mid_reply and call == 1:
            yield StreamChunk("text_delta", "Hel")
            await asyncio.sleep(30)
        reply = self.replies[call - 1] if call <= len(self.replies) else ProviderResponse(text="Hello")
        if reply.text:
            yield StreamChunk("text_delta", reply.text)
        yield StreamChunk("response", reply)

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


def make(provider: LLMProvider, **retry: Any) -> Agent:
    return Agent(provider=provider, config=AgentConfig(retry=RetryPolicy(backoff_seconds=0, **retry)))


async def test_a_stream_that_stalls_mid_reply_is_retried_and_its_text_voided() -> None:
    provider = Streaming(stall_mid_reply=True)
    async with make(provider, stream_idle_timeout_seconds=0.1) as a, a.run_stream("go") as stream:
        events = [event async for event in stream]
        result = await stream.result()
    assert result.ok and result.output == "Hello" and provider.calls == 2
    kinds = [e.type for e in events]
    assert RunEventType.ATTEMPT_RESET in kinds
    assert kinds.index(RunEventType.ATTEMPT_RESET) > kinds.index(RunEventType.TEXT_DELTA)


async def test_a_prompt_provider_that_never_starts_is_retried_by_run_too() -> None:
    provider = Streaming([30.0], promptly=True)
    async with make(provider, stream_first_event_timeout_seconds=0.05, stream_idle_timeout_seconds=30) as a:
        result = await asyncio.wait_for(a.run("go"), 10)
    assert result.ok and result.output == "Hello" and provider.calls == 2


async def test_a_slow_start_gets_through_on_a_later_attempt_and_is_remembered() -> None:
    reply = ProviderResponse(tool_calls=[ToolCall("c1", "probe", {})], stop_reason="tool_use")
    # First step: 0.05 s deadline, then 0.5 s (growth 10) for a server that takes 0.2 s.
    # Second step: 10 times the 0.2 s seen from the outset, so no attempt is lost.
    provider = Streaming([0.2, 0.2, 0.2], promptly=True, replies=[ProviderResponse(), reply])
    a = make(
        provider,
        stream_first_event_timeout_seconds=0.05,
        stream_first_event_growth=10.0,
        stream_idle_timeout_seconds=30,
    )
    a.tools.register_tool(lambda: "ok", name="probe", permission=PermissionLevel.ALLOW)
    async with a:
        result = await asyncio.wait_for(a.run("go"), 10)
    assert result.ok and result.output == "Hello"
    assert provider.calls == 3


async def test_without_growth_a_slow_server_spends_every_attempt() -> None:
    provider = Streaming([0.2] * 5, promptly=True)
    async with make(
        provider, attempts=3, stream_first_event_timeout_seconds=0.02, stream_first_event_growth=1.0
    ) as a:
        result = await asyncio.wait_for(a.run("go"), 10)
    assert result.failed and result.error is not None and result.error["type"] == "IncompleteStreamError"
    assert "stalled" in result.error["message"] and provider.calls == 3


async def test_a_quiet_start_is_a_model_thinking_where_the_provider_does_not_say_otherwise() -> None:
    provider = Streaming([0.2])
    a = make(provider, stream_first_event_timeout_seconds=0.05, stream_idle_timeout_seconds=5)
    async with a, a.run_stream("go") as stream:
        result = await stream.result()
    assert result.ok and provider.calls == 1


async def test_a_provider_streaming_through_create_is_not_cut() -> None:
    class OnlyCreate(LLMProvider):
        first_event_promptly = True

        async def create(self, **kwargs: Any) -> ProviderResponse:
            await asyncio.sleep(0.2)
            return ProviderResponse(text="done")

        async def count_tokens(self, **kwargs: Any) -> int:
            return 0

    assert not streams(OnlyCreate()) and streams(Streaming())
    async with (
        make(OnlyCreate(), stream_first_event_timeout_seconds=0.05, stream_idle_timeout_seconds=0.1) as a,
        a.run_stream("go") as stream,
    ):
        result = await stream.result()
    assert result.ok and result.output == "done"


class WritesAnArgument(LLMProvider):
    """Streams one tool call's long argument in ``tool_call_delta`` pieces, each gap under the
    idle limit, all of them together over it, as a model writing a whole file does."""

    def __init__(self) -> None:
        self.calls = 0

    async def create(self, **kwargs: Any) -> ProviderResponse:
        raise AssertionError("streamed")

    async def stream(self, **kwargs: Any) -> AsyncIterator[StreamChunk]:
        self.calls += 1
        if self.calls > 1:
            yield StreamChunk("text_delta", "written")
            yield StreamChunk("response", ProviderResponse(text="written"))
            return
        yield StreamChunk("tool_call_delta", ToolCallDelta("c1", "save"))
        pieces = ['{"text": "', *["line of the report " for _ in range(10)], '"}']
        for piece in pieces:
            await asyncio.sleep(0.04)
            yield StreamChunk("tool_call_delta", ToolCallDelta("c1", "save", piece))
        call = ToolCall("c1", "save", {"text": "".join(pieces[1:-1])})
        yield StreamChunk("response", ProviderResponse(tool_calls=[call], stop_reason="tool_use"))

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


async def test_a_tool_call_being_written_keeps_the_stream_alive() -> None:
    provider = WritesAnArgument()
    a = make(provider, stream_idle_timeout_seconds=0.2)
    a.tools.register_tool(lambda text: "saved", name="save", permission=PermissionLevel.ALLOW)
    async with a, a.run_stream("write the report") as stream:
        events = [event async for event in stream]
        result = await stream.result()
    assert result.ok and provider.calls == 2, "no retry: each piece reset the idle deadline"
    deltas = [e.data for e in events if e.type is RunEventType.TOOL_CALL_DELTA]
    assert len(deltas) == 13 and RunEventType.ATTEMPT_RESET not in [e.type for e in events]
