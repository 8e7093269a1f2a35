"""A boundary that only the engine's computation separates from the one before it is
committed with it, in one transaction (``Driver.commit_with_next``): a tool's processed
result with the next model call's request, a final reply with the run's finish.

What must not change: the boundaries a run passes, their ``CHECKPOINT`` hooks and every
other hook, in order; what a crash can lose (only computation); a stop asked for between
two boundaries, which still takes effect before the second.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harnessx import Agent, HookEvent, ProviderResponse, ScriptedProvider, ToolCall
from harnessx._driver import Driver, RunControl
from harnessx._errors import LeaseLostError
from harnessx._journal import RunJournal
from harnessx._results import RunStatus
from harnessx._runlog import MemoryRunLog
from harnessx._state import Delta, Phase, RunState, ToolStatus

WATCHED = (HookEvent.CHECKPOINT, HookEvent.RECOVERY, HookEvent.LOOP_ITERATION_END, HookEvent.TOOL_CALL_END)


class Commits(MemoryRunLog):
    """The in-memory log, keeping every delta committed; ``refuse`` names a commit (by its
    number, from 0) to fail as a lost lease does."""

    def __init__(self, refuse: int | None = None) -> None:
        super().__init__()
        self.deltas: list[Delta] = []
        self.refuse = refuse

    async def commit(self, state: RunState, delta: Delta) -> None:
        if self.refuse == len(self.deltas):
            raise LeaseLostError("the lease was lost")
        self.deltas.append(delta)
        await super().commit(state, delta)

    @property
    def phases(self) -> list[Phase]:
        return [delta.phase for delta in self.deltas]


def reporter(
    replies: list[ProviderResponse | str], ledger: list[str], meanwhile: Callable[[], None] = lambda: None
) -> Agent:
    """An agent with one tool, whose model gives ``replies`` in turn (an empty one too)."""
    given = iter(replies)
    agent = Agent(provider=ScriptedProvider(lambda request: next(given)))

    @agent.tools.register()
    def write_report(region: str) -> str:
        """Write a report.

        Args:
            region: Region.
        """
        ledger.append(region)
        meanwhile()
        return f"report for {region}"

    return agent


def a_call() -> ProviderResponse:
    return ProviderResponse(text="Writing.", tool_calls=[ToolCall("c1", "write_report", {"region": "EMEA"})])


def heard(agent: Agent) -> list[tuple[str, Any]]:
    """The hooks of ``WATCHED`` as they fire: (event, its phase or iteration or reason)."""
    fired: list[tuple[str, Any]] = []
    for event in WATCHED:

        def note(ctx: Any, event: HookEvent = event) -> None:
            data = ctx.data
            fired.append((event.value, data.get("phase") or data.get("iteration") or data.get("reason")))

        agent.hooks.on(event, note)
    return fired


async def started(
    agent: Agent, commits: Commits, *, control: RunControl | None = None, journal: bool = False
) -> tuple[RunState, Driver]:
    """A durable run of ``agent`` committed up to its start, and the driver to drive it."""
    state = RunState("session-1", "run-1")
    engine = agent.engine(durable=True)
    driver = Driver(
        engine=engine,
        settings=agent.run_settings(),
        provider=lambda: agent.provider,
        committer=commits,
        control=control,
        journal=RunJournal(state) if journal else None,
    )
    await driver.commit(state, engine.start(state, "Write the report."))
    return state, driver


async def drive(
    agent: Agent, commits: Commits, *, control: RunControl | None = None, journal: bool = False
) -> RunState:
    state, driver = await started(agent, commits, control=control, journal=journal)
    await driver.drive(state)
    return state


async def test_a_run_with_a_tool_call_commits_six_times_and_announces_every_boundary() -> None:
    ledger: list[str] = []
    agent = reporter([a_call(), "Report written."], ledger)
    fired = heard(agent)
    commits = Commits()
    state = await drive(agent, commits)
    assert state.status is RunStatus.COMPLETED and state.output == "Report written."
    assert ledger == ["EMEA"]
    assert commits.phases == [
        Phase.PREPARE_MODEL_CALL,  # the run's start
        Phase.MODEL_CALL,
        Phase.PREPARE_TOOLS,
        Phase.DISPATCH,
        Phase.RAW_RESULT,
        Phase.PREPARE_MODEL_CALL,  # the processed result, with the next call's request
        Phase.FINISH,  # the final reply, with the finish
    ]
    # The same hooks, in the same order, as when each boundary was a commit of its own.
    assert fired == [
        ("checkpoint", "prepare_model"),
        ("checkpoint", "prepare_tools"),
        ("checkpoint", "tools"),
        ("checkpoint", "tools"),
        ("checkpoint", "tools"),
        ("tool_call_end", None),
        ("checkpoint", "tools"),
        ("checkpoint", "prepare_model"),
        ("loop_iteration_end", 1),
        ("checkpoint", "finish"),
        ("checkpoint", "result"),
        ("loop_iteration_end", 2),
    ]
    # One joined commit holds both boundaries' writes, in order.
    joined = commits.deltas[5]
    assert [entry.status for entry in joined.tools] == [ToolStatus.COMPLETED]
    assert [message["role"] for message in joined.messages] == ["tool"]
    assert [event.type.value for event in commits.deltas[6].events] == [
        "text_complete",
        "turn_complete",
        "run_result",
    ]


async def test_hooks_due_between_two_joined_boundaries_fire_between_their_announcements() -> None:
    # An empty reply: the model is asked to go on (a RECOVERY hook), a boundary computed alone.
    agent = reporter([ProviderResponse(text=""), "Done."], [])
    fired = heard(agent)
    commits = Commits()
    state = await drive(agent, commits)
    assert state.status is RunStatus.COMPLETED
    assert commits.phases == [Phase.PREPARE_MODEL_CALL, Phase.PREPARE_MODEL_CALL, Phase.FINISH]
    assert fired == [
        ("checkpoint", "prepare_model"),
        ("checkpoint", "finish"),
        ("recovery", "empty_reply"),
        ("checkpoint", "prepare_model"),
        ("loop_iteration_end", 1),
        ("checkpoint", "finish"),
        ("checkpoint", "result"),
        ("loop_iteration_end", 2),
    ]


async def test_a_pause_asked_for_before_the_commit_takes_effect_before_the_next_boundary() -> None:
    control = RunControl()
    agent = reporter([a_call(), "Report written."], [], meanwhile=control.request_pause)
    commits = Commits()
    state = await drive(agent, commits, control=control)
    assert state.status is RunStatus.PAUSED
    # The processed result went alone; the pause came before the next call's request.
    assert commits.phases[-2:] == [Phase.COMPLETED_RESULT, Phase.COMPLETED_RESULT]
    assert commits.deltas[-1].run.status is RunStatus.PAUSED


async def test_a_joined_commit_that_fails_leaves_the_run_at_the_boundary_before_it() -> None:
    ledger: list[str] = []
    agent = reporter([a_call(), "Report written."], ledger)
    commits = Commits(refuse=5)  # the processed result with the next call's request
    state, driver = await started(agent, commits)
    with pytest.raises(LeaseLostError):
        await driver.drive(state)
    # Nothing of either boundary is applied: the raw result is the last one kept, from
    # which a resume processes it again without calling the tool.
    assert commits.phases[-1] is Phase.RAW_RESULT
    assert state.phase is Phase.RAW_RESULT and state.iteration == 0
    assert [entry.status for entry in state.entries()] == [ToolStatus.RAW_COMPLETED]
    assert ledger == ["EMEA"]


async def test_a_recorded_run_commits_every_boundary_on_its_own() -> None:
    # Its journal keeps one checkpoint record per boundary, as harnessx 0.9.1's does.
    agent = reporter([a_call(), "Report written."], [])
    commits = Commits()
    state = await drive(agent, commits, journal=True)
    assert state.status is RunStatus.COMPLETED
    assert commits.phases[-3:] == [Phase.PREPARE_MODEL_CALL, Phase.MODEL_CALL, Phase.FINISH]
    assert Phase.COMPLETED_RESULT in commits.phases
