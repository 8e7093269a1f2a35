"""Replies that hit a limit and the run that goes on, as in harnessx 0.9.1, durable runs as
plain ones: a reply budget refused as too large is lowered to the limit the refusal names
and remembered; a reply cut off at its budget is asked again with a larger one; an empty
reply is not kept and the model is asked to go on."""

from __future__ import annotations

from typing import Any

import pytest
from durable_support import BackendTarget

from harnessx import (
    Agent,
    AgentConfig,
    AgentRuntime,
    HookEvent,
    Limits,
    ProviderResponse,
    TokenUsage,
    ToolCall,
)
from harnessx import models as model_limits
from harnessx.errors import MalformedToolInputError
from harnessx.providers import LLMProvider

REFUSAL = "max_tokens: 32000 > 8192, which is the maximum allowed number of output tokens for m-2"


class RefusesLargeBudgets(LLMProvider):
    """A model that writes at most 8,192 tokens and says so when asked for more."""

    def __init__(self) -> None:
        self.budgets: list[int | None] = []

    async def create(self, **kwargs: Any) -> ProviderResponse:
        self.budgets.append(kwargs["max_tokens"])
        if kwargs["max_tokens"] > 8_192:
            raise ValueError(REFUSAL)
        return ProviderResponse(text=f"answer {len(self.budgets)}")

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


@pytest.fixture(autouse=True)
def clean_registry() -> Any:
    saved = dict(model_limits._learned)
    model_limits._learned.clear()
    yield
    model_limits._learned.clear()
    model_limits._learned.update(saved)


def agent(provider: LLMProvider, recoveries: list[dict[str, Any]]) -> Agent:
    built = Agent(config=AgentConfig(model="m-2", planning=False), provider=provider)
    built.hooks.on(HookEvent.RECOVERY, lambda ctx: recoveries.append(dict(ctx.data)))
    built.hooks.on(HookEvent.RETRY, lambda ctx: recoveries.append({"retry": ctx.data["attempt"]}))
    return built


async def test_a_refused_budget_is_lowered_and_remembered_in_a_plain_run() -> None:
    provider, recoveries = RefusesLargeBudgets(), []
    async with agent(provider, recoveries) as plain:
        first = await plain.run("go")
        second = await plain.run("again")
    assert first.ok and second.ok
    assert provider.budgets == [32_000, 8_192, 8_192]
    assert recoveries == [{"reason": "reply_limit", "attempt": 1, "reply_budget": 8_192}]


async def test_a_refused_budget_is_lowered_and_remembered_in_a_durable_run(target: BackendTarget) -> None:
    provider, recoveries = RefusesLargeBudgets(), []
    async with (
        target.open() as backend,
        AgentRuntime(agent(provider, recoveries), backend=backend) as runtime,
    ):
        first = await runtime.run("go")
        second = await runtime.run("again")
    assert (first.output, second.output) == ("answer 2", "answer 3")
    assert provider.budgets == [32_000, 8_192, 8_192]
    assert recoveries == [{"reason": "reply_limit", "attempt": 1, "reply_budget": 8_192}]


async def test_a_refusal_naming_no_lower_budget_fails_as_before() -> None:
    class Refuses(RefusesLargeBudgets):
        async def create(self, **kwargs: Any) -> ProviderResponse:
            self.budgets.append(kwargs["max_tokens"])
            raise ValueError("max_tokens: 32000 > 64000, which is the maximum allowed")

    provider, recoveries = Refuses(), []
    async with agent(provider, recoveries) as plain:
        result = await plain.run("go")
    assert result.failed and provider.budgets == [32_000] and recoveries == []


class Scripted(LLMProvider):
    """Replies in order, recording the budget and the conversation of each call."""

    def __init__(self, *replies: ProviderResponse) -> None:
        self.replies = list(replies)
        self.calls: list[dict[str, Any]] = []

    async def create(self, **kwargs: Any) -> ProviderResponse:
        self.calls.append(kwargs)
        return self.replies.pop(0)

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


def cut(text: str = "", *calls: ToolCall) -> ProviderResponse:
    return ProviderResponse(text=text, tool_calls=list(calls), stop_reason="max_tokens")


def writer(provider: LLMProvider, recoveries: list[dict[str, Any]], **limits: Any) -> tuple[Agent, list[str]]:
    config = AgentConfig(model="claude-sonnet-4-6", planning=False, limits=Limits(**limits))
    built = Agent(config=config, provider=provider)
    built.hooks.on(HookEvent.RECOVERY, lambda ctx: recoveries.append(dict(ctx.data)))
    written: list[str] = []

    @built.tools.register(replay_policy="safe")
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        written.append(content)
        return f"wrote {len(content)} characters"

    return built, written


def tool_results(call: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        b for b in call["messages"][-1]["content"] if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


@pytest.mark.parametrize("durable", [False, True])
async def test_a_tool_call_cut_off_is_answered_and_asked_again_with_a_larger_budget(
    durable: bool, target: BackendTarget
) -> None:
    half = ToolCall("c1", "write_file", {"path": "big.py"})
    whole = ToolCall("c2", "write_file", {"path": "big.py", "content": "x" * 50})
    provider = Scripted(
        cut("Writing it.", half), ProviderResponse(tool_calls=[whole]), ProviderResponse(text="Done.")
    )
    recoveries: list[dict[str, Any]] = []
    built, written = writer(provider, recoveries)
    if durable:
        async with target.open() as backend, AgentRuntime(built, backend=backend) as runtime:
            result = await runtime.run("write big.py")
    else:
        async with built:
            result = await built.run("write big.py")
    assert result.ok and result.output == "Done."
    assert written == ["x" * 50], "the call that was cut off never ran"
    refused = tool_results(provider.calls[1])
    assert refused[0]["tool_use_id"] == "c1" and refused[0]["is_error"] and "cut off" in refused[0]["content"]
    assert [c["max_tokens"] for c in provider.calls] == [32_000, 64_000, 64_000]
    assert recoveries == [{"reason": "truncated_tool_call", "attempt": 1, "reply_budget": 64_000}]


@pytest.mark.parametrize("durable", [False, True])
async def test_text_cut_off_is_continued_and_the_pieces_are_the_output(
    durable: bool, target: BackendTarget
) -> None:
    provider = Scripted(cut("The first half, "), cut("the second half, "), ProviderResponse(text="the end."))
    recoveries: list[dict[str, Any]] = []
    built, _ = writer(provider, recoveries)
    if durable:
        async with target.open() as backend, AgentRuntime(built, backend=backend) as runtime:
            result = await runtime.run("write an essay")
    else:
        result = await built.run("write an essay")
    assert result.ok and result.output == "The first half, the second half, the end."
    assert "Continue exactly where it stopped" in str(provider.calls[1]["messages"][-1])
    assert [c["max_tokens"] for c in provider.calls] == [32_000, 64_000, 128_000]
    assert [r["reason"] for r in recoveries] == ["truncated_text", "truncated_text"]


async def test_recovery_is_bounded_and_nothing_written_is_lost() -> None:
    provider = Scripted(*(cut(f"part{i} ") for i in range(5)))
    recoveries: list[dict[str, Any]] = []
    built, _ = writer(provider, recoveries, max_truncation_recoveries=2)
    result = await built.run("go")
    assert len(provider.calls) == 3 and result.truncated and not result.ok
    assert result.output == "part0 part1 part2 "
    assert [r["attempt"] for r in recoveries] == [1, 2]


async def test_the_budget_never_grows_past_what_the_model_writes() -> None:
    provider = Scripted(cut("a"), cut("b"), ProviderResponse(text="c"))
    config = AgentConfig(model="claude-3-haiku-20240307", planning=False)
    await Agent(config=config, provider=provider).run("go")
    assert [c["max_tokens"] for c in provider.calls] == [4_096, 4_096, 4_096]


@pytest.mark.parametrize("durable", [False, True])
async def test_an_empty_reply_is_not_kept_and_the_model_is_asked_to_go_on(
    durable: bool, target: BackendTarget
) -> None:
    provider = Scripted(
        ProviderResponse(text=""), ProviderResponse(text="  "), ProviderResponse(text="answer")
    )
    recoveries: list[dict[str, Any]] = []
    built, _ = writer(provider, recoveries)
    if durable:
        async with target.open() as backend, AgentRuntime(built, backend=backend) as runtime:
            result = await runtime.run("go")
            stored = (await backend.load_state(result.run_id)).messages
    else:
        result = await built.run("go")
        stored = built.memory.get_messages()
    assert result.ok and result.output == "answer"
    assert [m["role"] for m in stored].count("assistant") == 1
    assert "Your last reply was empty" in str(provider.calls[1]["messages"][-1])
    assert [(r["reason"], r["attempt"]) for r in recoveries] == [("empty_reply", 1), ("empty_reply", 2)]


async def test_empty_replies_are_answered_twice_then_the_run_fails() -> None:
    provider = Scripted(*(ProviderResponse(text="") for _ in range(5)))
    built, _ = writer(provider, [])
    result = await built.run("go")
    assert len(provider.calls) == 3 and result.failed and result.output == ""
    assert result.error == {"type": "RecoveryExhaustedError", "message": "Recovery exhausted: empty_reply"}
    assert result.stop_reason == "empty_reply"  # as 0.9.1: the recovery that ran out


@pytest.mark.parametrize("durable", [False, True])
async def test_a_paused_turn_is_continued_and_its_text_is_part_of_the_output(
    durable: bool, target: BackendTarget
) -> None:
    provider = Scripted(
        ProviderResponse(text="Searching... ", stop_reason="pause_turn"), ProviderResponse(text="found.")
    )
    recoveries: list[dict[str, Any]] = []
    built, _ = writer(provider, recoveries)
    if durable:
        async with target.open() as backend, AgentRuntime(built, backend=backend) as runtime:
            result = await runtime.run("go")
    else:
        result = await built.run("go")
    assert result.ok and result.output == "Searching... found."
    assert provider.calls[1]["messages"][-1]["role"] == "assistant"  # the turn sent back as it stands
    assert [(r["reason"], r["attempt"]) for r in recoveries] == [("paused_turn", 1)]


@pytest.mark.parametrize("durable", [False, True])
async def test_a_turn_paused_again_and_again_fails_the_run_after_five_continuations(
    durable: bool, target: BackendTarget
) -> None:
    provider = Scripted(
        *(
            ProviderResponse(text="part", stop_reason="pause_turn", usage=TokenUsage(input_tokens=3))
            for _ in range(8)
        )
    )
    recoveries: list[dict[str, Any]] = []
    built, _ = writer(provider, recoveries)
    if durable:
        async with target.open() as backend, AgentRuntime(built, backend=backend) as runtime:
            result = await runtime.run("go")
    else:
        result = await built.run("go")
    assert len(provider.calls) == 6 and result.failed
    assert result.error == {"type": "RecoveryExhaustedError", "message": "Recovery exhausted: pause_turn"}
    assert (result.output, result.stop_reason, result.usage.input_tokens) == ("part" * 6, "pause_turn", 18)
    assert [r["attempt"] for r in recoveries] == [1, 2, 3, 4, 5]


class Unreadable(Scripted):
    """Raises MalformedToolInputError for the first ``failures`` calls, then answers."""

    def __init__(self, failures: int) -> None:
        super().__init__(ProviderResponse(text="ok"))
        self.failures = failures

    async def create(self, **kwargs: Any) -> ProviderResponse:
        if len(self.calls) < self.failures:
            self.calls.append(kwargs)
            raise MalformedToolInputError("Unable to parse tool parameter JSON")
        return await super().create(**kwargs)


@pytest.mark.parametrize("durable", [False, True])
async def test_an_unreadable_reply_is_asked_for_once_more(durable: bool, target: BackendTarget) -> None:
    provider, recoveries = Unreadable(1), []
    built, _ = writer(provider, recoveries)
    if durable:
        async with target.open() as backend, AgentRuntime(built, backend=backend) as runtime:
            result = await runtime.run("go")
    else:
        result = await built.run("go")
    assert result.ok and result.output == "ok" and len(provider.calls) == 2
    assert [r["reason"] for r in recoveries] == ["malformed_tool_input"]


async def test_a_second_unreadable_reply_fails_the_run() -> None:
    provider = Unreadable(2)
    built, _ = writer(provider, [])
    result = await built.run("go")
    assert result.failed and result.error is not None and result.error["type"] == "MalformedToolInputError"
    assert len(provider.calls) == 2


@pytest.mark.parametrize("durable", [False, True])
async def test_an_empty_reply_with_the_task_list_open_is_reminded_of_it_once(
    durable: bool, target: BackendTarget
) -> None:
    """As 0.9.1: the model is shown its open list and asked to finish it or say what is
    left, once a run (then an empty reply gets the usual notice); an answer with the list
    open ends the run as it stands."""
    plan = [{"content": "Step", "status": "pending"}]
    provider = Scripted(
        ProviderResponse(tool_calls=[ToolCall("p1", "write_todos", {"todos": plan})], stop_reason="tool_use"),
        ProviderResponse(text=""),
        ProviderResponse(text=""),
        ProviderResponse(text="Step is left for you."),
    )
    recoveries: list[dict[str, Any]] = []
    built = Agent(config=AgentConfig(model="claude-sonnet-4-6"), provider=provider)
    built.hooks.on(HookEvent.RECOVERY, lambda ctx: recoveries.append(dict(ctx.data)))
    if durable:
        async with target.open() as backend, AgentRuntime(built, backend=backend) as runtime:
            result = await runtime.run("go")
    else:
        result = await built.run("go")
    assert result.ok and result.output == "Step is left for you." and len(provider.calls) == 4
    sent = [str(m) for m in provider.calls[-1]["messages"]]
    assert sum("Before you finish: your task list still has unfinished items." in m for m in sent) == 1
    assert any("[ ] Step" in m for m in sent)  # the list as the model reads it
    assert [r["reason"] for r in recoveries] == ["unfinished_plan", "empty_reply"]
