"""A conversation that outgrows the model's context window, as harnessx 0.9.1 handles it:
condensed into a summary the model writes (before a call, with Limits.max_context_tokens;
or after the provider refused a request as too long), large results shown as previews,
and a typed ContextOverflowError when nothing can make the request fit. Durable runs commit
the condensation, keep every message in the store, and show the condensed view after."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from durable_support import BackendTarget

from harnessx import (
    Agent,
    AgentConfig,
    AgentRuntime,
    HookEvent,
    Limits,
    PermissionLevel,
    ProviderResponse,
    RetryPolicy,
    TokenUsage,
    ToolCall,
)
from harnessx import models as model_limits
from harnessx.memory import ConversationMemory
from harnessx.providers import LLMProvider

OVERFLOW = "prompt is too long: 250000 tokens > 200000 maximum"
SUMMARY = "TASK: ship it. DONE: a. NEXT: b."


@pytest.fixture(autouse=True)
def clean_registry() -> Any:
    saved = dict(model_limits._learned)
    model_limits._learned.clear()
    yield
    model_limits._learned.clear()
    model_limits._learned.update(saved)


class Model(LLMProvider):
    """Answers summary requests with SUMMARY, others from ``script`` (an exception entry is
    raised); ``count`` is what count_tokens says; ``summary_failures`` fail first."""

    def __init__(self, script: list[Any] | None = None, *, count: int = 0, summary_failures: int = 0) -> None:
        self.script = list(script or [])
        self.count = count
        self.summary_failures = summary_failures
        self.calls: list[dict[str, Any]] = []
        self.summaries: list[dict[str, Any]] = []

    async def create(self, **kwargs: Any) -> ProviderResponse:
        if "condense" in str(kwargs.get("system")):
            self.summaries.append(kwargs)
            if len(self.summaries) <= self.summary_failures:
                raise RuntimeError("summarizer unavailable")
            return ProviderResponse(text=SUMMARY, usage=TokenUsage(input_tokens=500, output_tokens=50))
        self.calls.append(kwargs)
        step = self.script.pop(0) if self.script else ProviderResponse(text=f"reply {len(self.calls)}")
        if isinstance(step, BaseException):
            raise step
        return step

    async def count_tokens(self, **kwargs: Any) -> int:
        return self.count


def _agent(
    provider: LLMProvider, *, seen: list[tuple[str, dict[str, Any]]] | None = None, **limits: Any
) -> Agent:
    agent = Agent(
        config=AgentConfig(
            model="m-window",
            max_tokens=1_000,
            planning=False,
            limits=Limits(**limits),
            retry=RetryPolicy(attempts=3, backoff_seconds=0.001, max_backoff_seconds=0.001),
        ),
        provider=provider,
    )
    if seen is not None:
        for event in (HookEvent.RECOVERY, HookEvent.CONTEXT_CONDENSED, HookEvent.RETRY):
            agent.hooks.on(event, lambda ctx, e=event: seen.append((e.value, dict(ctx.data))))
    return agent


def _history(agent: Agent, turns: int = 5) -> None:
    for i in range(turns):
        agent.memory.add_user_message(f"question {i}")
        agent.memory.add_assistant_message(f"answer {i}")


async def test_a_request_refused_as_too_long_is_condensed_by_the_model_and_asked_again() -> None:
    provider, seen = Model([ValueError(OVERFLOW)]), []
    agent = _agent(provider, seen=seen)
    _history(agent)
    async with agent:
        result = await agent.run("go")
    assert result.ok and result.output == "reply 2"
    assert (
        len(provider.summaries) == 1
        and "[user] question 0" in provider.summaries[0]["messages"][0]["content"]
    )
    sent = provider.calls[-1]["messages"]
    assert sent[0]["role"] == "user" and sent[0]["content"].startswith(
        f"[Earlier conversation, condensed]\n{SUMMARY}"
    )
    assert "question 0" not in str(sent) and "go" in str(sent[-1])
    roles = [m["role"] for m in sent]
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
    assert [name for name, _ in seen] == ["recovery", "context_condensed"]
    assert seen[0][1]["reason"] == "context_overflow"
    assert seen[1][1] == {"messages_dropped": 7, "summary_chars": len(SUMMARY), "summarized": True}
    assert result.usage.input_tokens >= 500, "the summary's tokens are the run's"
    limits = await model_limits.resolve_model_limits(provider, "m-window")
    assert limits.context_window == 200_000, "the window the refusal named is remembered"
    # What programs read is the condensed conversation, and the next run carries on from it.
    assert agent.memory.get_messages()[0]["content"].startswith("[Earlier conversation, condensed]")


async def test_a_short_request_refused_as_too_long_is_asked_once_more_then_fails_typed() -> None:
    provider, seen = Model([ValueError(OVERFLOW), ProviderResponse(text="ok")]), []
    async with _agent(provider, seen=seen) as agent:
        assert (await agent.run("go")).output == "ok"
    assert [d["reason"] for _, d in seen] == ["spurious_overflow"]

    provider = Model([ValueError(OVERFLOW), ValueError(OVERFLOW)])
    async with _agent(provider) as agent:
        result = await agent.run("x" * 100)
    assert result.failed and result.error is not None
    assert result.error["type"] == "ContextOverflowError" and "prompt is too long" in result.error["message"]
    assert len(provider.calls) == 2


async def test_a_request_too_large_for_the_window_fails_at_once() -> None:
    provider = Model([ValueError("prompt is too long: 230000 tokens > 200000 maximum")])
    async with _agent(provider, max_context_tokens=200_000) as agent:
        result = await agent.run("x" * 900_000)
    assert result.failed and result.error is not None and result.error["type"] == "ContextOverflowError"
    assert "200000-token window" in result.error["message"] and len(provider.calls) == 1


async def test_large_results_are_shown_as_previews_when_nothing_can_be_condensed() -> None:
    big = "row,value\n" + "x" * 60_000
    provider = Model(
        [
            ProviderResponse(tool_calls=[ToolCall("c1", "dump", {})], stop_reason="tool_use"),
            ValueError("prompt is too long: 300000 tokens > 200000 maximum"),
            ProviderResponse(
                tool_calls=[ToolCall("c2", "read_tool_result", {"result_id": "c1", "pattern": "row"})]
            ),
            ProviderResponse(text="ok"),
        ]
    )
    seen: list[tuple[str, dict[str, Any]]] = []
    agent = _agent(provider, seen=seen, max_result_chars=100_000)
    agent.tools.register_tool(lambda: big, name="dump", permission=PermissionLevel.ALLOW)
    async with agent:
        result = await agent.run("go")
    assert result.ok and [d["reason"] for _, d in seen] == ["context_overflow_spill"]
    sent = str(provider.calls[2]["messages"])
    assert "Full output saved to:" in sent and "x" * 10_000 not in sent
    assert "row,value" in str(provider.calls[3]["messages"][-1]), "the whole result is still readable"


async def test_a_request_near_the_configured_window_is_condensed_before_the_call() -> None:
    provider, seen = Model(count=50_000, summary_failures=1), []
    agent = _agent(provider, seen=seen, max_context_tokens=10_000)
    async with agent:
        for turn in range(4):
            assert (await agent.run(f"turn {turn}")).ok
    condensed = [d for name, d in seen if name == "context_condensed"]
    retried = [d for name, d in seen if name == "retry"]
    assert condensed and condensed[0]["summarized"] is True, "the failed summary was retried and kept"
    assert len(retried) == 1 and retried[0]["kind"] == "model"
    assert SUMMARY in str(agent.memory.get_messages()[0]["content"])


async def test_condensing_gives_up_the_summary_after_the_retries_and_never_loops() -> None:
    provider, seen = Model(count=50_000, summary_failures=100), []
    async with _agent(provider, seen=seen, max_context_tokens=10_000) as agent:
        for turn in range(4):
            assert (await agent.run(f"turn {turn}")).ok, "a summary that cannot be made does not fail the run"
        condensed = [d for name, d in seen if name == "context_condensed"]
        assert condensed and all(d["summarized"] is False for d in condensed)
        assert "[Earlier conversation, condensed]" in str(agent.memory.get_messages()[0]["content"])

    # One run condenses at most three times, however little a summary frees.
    provider = Model(
        count=50_000, script=[ProviderResponse(tool_calls=[ToolCall(f"c{i}", "noop", {})]) for i in range(8)]
    )
    agent = _agent(provider, max_context_tokens=10_000)
    agent.tools.register_tool(lambda: "done", name="noop", permission=PermissionLevel.ALLOW)
    _history(agent)
    async with agent:
        await agent.run("go")
    assert len(provider.summaries) == 3


async def test_a_history_that_fits_is_left_alone() -> None:
    provider = Model(count=10)
    agent = _agent(provider, max_context_tokens=10_000)
    _history(agent)
    async with agent:
        await agent.run("go")
    assert not provider.summaries and len(provider.calls[0]["messages"]) == 11


async def test_a_durable_run_commits_the_condensation_and_keeps_every_message(target: BackendTarget) -> None:
    answers: list[Any] = [ProviderResponse(text=f"answer {i}") for i in range(3)]
    provider, seen = Model([*answers, ValueError(OVERFLOW)]), []
    agent = _agent(provider, seen=seen)
    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        for i in range(3):
            await runtime.run(f"question {i}")
        result = await runtime.run("go")
        assert result.ok and [d["reason"] for n, d in seen if n == "recovery"] == ["context_overflow"]
        again = await runtime.run("and again")
        assert again.ok
        sent = provider.calls[-1]["messages"]
        assert sent[0]["content"].startswith("[Earlier conversation, condensed]"), (
            "the next run carries on from it"
        )
        assert "question 0" not in str(sent)
        stored = (await backend.load_state(again.run_id)).messages
    assert any(m.get("content") == "question 0" for m in stored), "the store keeps the whole conversation"


def _conversation() -> ConversationMemory:
    memory = ConversationMemory()
    memory.add_user_message("first task")
    memory.add_assistant_message("working")
    memory.add_user_message("more context")
    memory.add_assistant_message([{"type": "tool_use", "id": "t1", "name": "d", "input": {}}])
    from harnessx import ToolResult

    memory.add_tool_results([ToolResult(tool_call_id="t1", content="out")])
    memory.add_assistant_message("done step")
    memory.add_user_message("keep going")
    memory.add_assistant_message("final")
    return memory


class Counter:
    def __init__(self, count: int | None) -> None:
        self.count = count
        self.calls = 0

    async def count_tokens(self, **kwargs: Any) -> int:
        self.calls += 1
        if self.count is None:
            raise RuntimeError("counting unavailable")
        return self.count


async def test_the_memory_condenses_as_the_original_memory_does() -> None:
    memory = _conversation()
    assert not await memory.trim_if_needed(Counter(700), "m", "", [], max_context_tokens=1_000)
    assert await memory.trim_if_needed(Counter(700), "m", "", [], max_context_tokens=1_000, reply_tokens=900)
    messages = memory.get_messages()
    assert messages[0]["role"] == "user" and "condensed" in messages[0]["content"]
    assert "How can I help" not in str(messages)
    roles = [m["role"] for m in messages]
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
    assert await _conversation().needs_condensing(Counter(None), "m", "", [], max_context_tokens=10**7)

    memory = _conversation()
    dropped, split = memory.pending_condensation()
    assert split == 3 and [m["content"] for m in dropped] == [
        "first task",
        [{"type": "text", "text": "working"}],
        "more context",
    ]
    assert memory.apply_condensation("SUMMARY", split)
    kept = memory.get_messages()
    assert kept[0]["content"].startswith("[Earlier conversation, condensed]\nSUMMARY")
    assert kept[1]["content"][0]["type"] == "tool_use" and kept[2]["content"][0]["tool_use_id"] == "t1"


async def test_a_request_measured_well_within_the_window_is_not_counted_again() -> None:
    class Measured(Model):
        counts = 0

        async def create(self, **kwargs: Any) -> ProviderResponse:
            response = await super().create(**kwargs)
            response.usage = TokenUsage(input_tokens=100, output_tokens=10)
            return response

        async def count_tokens(self, **kwargs: Any) -> int:
            self.counts += 1
            return 100

    provider = Measured([ProviderResponse(tool_calls=[ToolCall(f"c{i}", "noop", {})]) for i in range(3)])
    agent = _agent(provider, max_context_tokens=100_000)
    agent.tools.register_tool(lambda: "done", name="noop", permission=PermissionLevel.ALLOW)
    _history(agent)
    async with agent:
        assert (await agent.run("go")).ok
    assert len(provider.calls) == 4 and provider.counts == 1, "counted before the first call only"


async def test_the_reply_budget_is_fitted_into_what_the_counted_request_leaves() -> None:
    model_limits.register_model_limits("tiny-window", context_window=20_000, max_output=16_000)
    try:
        provider = Model(count=15_000)
        agent = Agent(
            config=AgentConfig(
                model="tiny-window", planning=False, limits=Limits(max_context_tokens=10_000_000)
            ),
            provider=provider,
        )
        _history(agent, 3)
        async with agent:
            await agent.run("go")
        assert provider.calls[0]["max_tokens"] == 20_000 - 15_000 - 1_024
        provider = Model(count=19_900)
        agent = Agent(
            config=AgentConfig(
                model="tiny-window", planning=False, limits=Limits(max_context_tokens=10_000_000)
            ),
            provider=provider,
        )
        _history(agent, 3)
        async with agent:
            await agent.run("go")
        assert provider.calls[0]["max_tokens"] == 1_024, "a full window still leaves the reply some room"
    finally:
        model_limits._registered.pop("tiny-window", None)


class Sized(Model):
    """Reports ``measured`` input tokens for every reply and counts the counts."""

    def __init__(self, script: list[Any], *, measured: int, count: int) -> None:
        super().__init__(script, count=count)
        self.measured = measured
        self.counts = 0

    async def create(self, **kwargs: Any) -> ProviderResponse:
        response = await super().create(**kwargs)
        response.usage = TokenUsage(input_tokens=self.measured, output_tokens=10)
        return response

    async def count_tokens(self, **kwargs: Any) -> int:
        self.counts += 1
        return self.count


@pytest.mark.parametrize(("measured", "counts"), [(150_000, 3), (1_000, 0)])
async def test_without_a_configured_window_a_request_near_the_models_is_counted(
    measured: int, counts: int
) -> None:
    """As 0.9.1: the window is the model's when Limits.max_context_tokens is unset. A
    request the provider measured near it (60 % of what it leaves the reply) is counted
    before the call; one with clear room is not."""
    model_limits.register_model_limits("m-200k", context_window=200_000, max_output=8_000)
    provider = Sized(
        [ProviderResponse(tool_calls=[ToolCall(f"c{i}", "noop", {})]) for i in range(5)],
        measured=measured,
        count=800,
    )
    agent = Agent(config=AgentConfig(model="m-200k", planning=False), provider=provider)
    agent.tools.register_tool(lambda: "done", name="noop", permission=PermissionLevel.ALLOW)
    try:
        async with agent:
            assert (await agent.run("go")).ok
    finally:
        model_limits._registered.pop("m-200k", None)
    # Six calls; from the fourth the history has six messages, the least worth counting.
    assert len(provider.calls) == 6 and provider.counts == counts and not provider.summaries


async def test_the_memory_trusts_a_measured_size_only_with_clear_room() -> None:
    memory, counter = _conversation(), Counter(1_000)

    async def needs(measured: int, reply_tokens: int = 0) -> bool:
        return await memory.needs_condensing(
            counter, "m", "", [], max_context_tokens=100_000, reply_tokens=reply_tokens, measured=measured
        )

    assert not await needs(10_000)
    assert counter.calls == 0 and (memory.last_prompt_tokens or 0) >= 10_000
    assert not await needs(70_000)
    assert counter.calls == 1 and memory.last_prompt_tokens == 1_000
    # What the reply needs comes out of the room: 10,000 is not clear of 60 % of 15,000.
    await needs(10_000, reply_tokens=85_000)
    assert counter.calls == 2
