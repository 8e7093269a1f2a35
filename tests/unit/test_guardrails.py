"""``agent.guardrails`` (harnessx 0.9.1's ``GuardrailsEngine``): the agent's account of
iterations, tokens and cost, and ``Limits.max_cost_dollars`` counting what a plain agent
spent before the run as well as the run's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from harnessx import (
    Agent,
    AgentConfig,
    CostLimitError,
    GuardrailsEngine,
    Limits,
    MaxIterationsError,
    ProviderResponse,
    RunStatus,
    ScriptedProvider,
    TokenUsage,
)

SPEND = TokenUsage(input_tokens=100_000)  # $0.30 at the default $3 per million


def spending(turns: int) -> ScriptedProvider:
    return ScriptedProvider([ProviderResponse(text=f"answer {n}", usage=SPEND) for n in range(turns)])


async def test_the_cost_limit_counts_what_the_agent_spent_in_earlier_runs() -> None:
    agent = Agent(provider=spending(3), config=AgentConfig(limits=Limits(max_cost_dollars=0.5)))
    first, second, third = [await agent.run(f"question {n}") for n in range(3)]
    assert first.status is second.status is RunStatus.COMPLETED
    # $0.60 spent by the two runs before it: the third is refused before its model call.
    assert third.status is RunStatus.FAILED and third.error is not None
    assert third.error["type"] == "CostLimitError"
    assert agent.guardrails.total_usage == agent.total_usage == TokenUsage(input_tokens=200_000)
    assert agent.guardrails.estimated_cost == pytest.approx(0.6)
    # The refused run made no model call: not an iteration (0.9.1 counts none either), and
    # the turn's count is left readable after each run, as 0.9.1 leaves it.
    assert (agent.guardrails.lifetime_iterations, agent.guardrails.iteration_count) == (2, 0)


async def test_the_turn_count_is_readable_after_the_run() -> None:
    agent = Agent(provider=spending(1))
    await agent.run("one")
    assert (agent.guardrails.iteration_count, agent.guardrails.usage_summary["iterations"]) == (1, 1)


async def test_the_account_follows_the_session(tmp_path: Path) -> None:
    agent = Agent(provider=spending(2))
    await agent.run("one")
    await agent.run("two")
    assert agent.guardrails.lifetime_iterations == agent.lifetime_iterations == 2
    session = await agent.save_session(tmp_path)
    loaded = await Agent.load_session(session, tmp_path, provider=spending(0))
    assert loaded.guardrails.total_usage == TokenUsage(input_tokens=200_000)
    assert loaded.guardrails.lifetime_iterations == 2
    assert loaded.guardrails.estimated_cost == pytest.approx(0.6)


def test_the_engine_on_its_own() -> None:
    guard = GuardrailsEngine(max_iterations=2, max_cost_dollars=2, input_cost_per_m=3, output_cost_per_m=4)
    guard.track_usage(TokenUsage(input_tokens=1_000_000, output_tokens=1_000_000))
    assert guard.estimated_cost == 7
    # Cached prompt tokens are part of input_tokens: a tenth to read, 1.25 times to write.
    guard.track_usage(
        TokenUsage(
            input_tokens=1_000_000, cache_read_input_tokens=900_000, cache_creation_input_tokens=100_000
        )
    )
    assert guard.estimated_cost == pytest.approx(7 + 3 * (0.9 * 0.1 + 0.1 * 1.25))
    with pytest.raises(CostLimitError):
        guard.check_cost_limit()
    guard.record_iteration()
    guard.record_iteration()
    with pytest.raises(MaxIterationsError):
        guard.check_iteration_limit()
    guard.reset_turn()
    guard.check_iteration_limit()
    assert (guard.iteration_count, guard.lifetime_iterations) == (0, 2)
    assert guard.usage_summary["input_tokens"] == 2_000_000
    guard.reset()
    assert guard.total_usage == TokenUsage() and guard.estimated_cost == 0
