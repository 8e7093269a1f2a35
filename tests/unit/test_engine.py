"""The engine's recovery rules, driven directly: no process, store or model.

One test group per row of the table "What survives a failure" in the user guide
(``durable-agent-runs.md``). A "crash" is modelled the way a store sees it: only the deltas
committed so far survive, and the next process rebuilds the run from them
(``Committed.reload``) and settles it with ``recover`` and ``reopen`` before driving it, as
the executor does on a resume. The process-level tests (``tests/process``) kill real workers
for the same rules; these pin each rule to the engine alone.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from harnessx import Limits, PermissionManager, ProviderResponse, ToolCall, ToolRegistry, ToolResult
from harnessx._engine import CallModel, CompleteResult, Dispatch, Engine, PrepareTools, Step, Stop
from harnessx._events import RunEventType
from harnessx._results import RunStatus
from harnessx._state import Delta, Phase, RunState, ToolEntry, ToolStatus
from harnessx.providers._base import StopReason

POLICIES = ("safe", "idempotent", "manual")
REPLAYABLE = ("safe", "idempotent")


def make_engine() -> Engine:
    """A durable run's engine (approvals are recorded, not asked) with one tool per policy."""
    tools = ToolRegistry()
    for policy in POLICIES:

        def handler(item: str) -> str:
            """Do the work.

            Args:
                item: What to do.
            """
            raise AssertionError("the engine never invokes a tool; the driver does")

        tools.register(name=f"{policy}_tool", replay_policy=policy)(handler)
    return Engine(tools=tools, permissions=PermissionManager(), limits=Limits(), interactive_approval=False)


@dataclass
class Committed:
    """What a store holds for one run: every delta committed so far, in order."""

    engine: Engine
    state: RunState = field(default_factory=lambda: RunState("session-1", "run-1"))
    deltas: list[Delta] = field(default_factory=list)

    def commit(self, delta: Delta) -> None:
        self.deltas.append(delta)
        self.state.apply(delta)

    def step(self) -> Step:
        """The engine's next step; a pure transition is committed on the spot, and so are
        the calls to prepare (no tool middleware here: they are prepared as the model made
        them)."""
        step = self.engine.next_step(self.state)
        if isinstance(step, PrepareTools):
            step = self.engine.prepare_tools(self.state, list(step.calls))
        if isinstance(step, Delta):
            self.commit(step)
        return step

    def reload(self) -> RunState:
        """The run as a fresh process loads it after a crash: the committed deltas replayed
        onto a new state, tool entries through their stored form (nothing is shared with
        the dead process's objects)."""
        state = RunState(self.state.session_id, self.state.run_id)
        for delta in self.deltas:
            state.apply(
                Delta(
                    delta.phase,
                    messages=copy.deepcopy(delta.messages),
                    tools=[ToolEntry.from_dict(e.to_dict()) for e in delta.tools],
                    run=copy.deepcopy(delta.run),
                )
            )
        return state

    def crash(self) -> Committed:
        """A new process's view of the run, settled as the executor settles a resumed one."""
        after = Committed(self.engine, self.reload(), list(self.deltas))
        recovered = self.engine.recover(after.state, may_have_streamed=True)
        if recovered is not None:
            after.commit(recovered)
        reopened = self.engine.reopen(after.state)
        if reopened is not None:
            after.commit(reopened)
        return after


def calling(*policies: str) -> Committed:
    """A run whose model replied with one call per policy given, committed up to the
    prepared calls (phase ``prepare_tools``): nothing dispatched yet."""
    run = Committed(make_engine())
    run.commit(run.engine.start(run.state, "Write the reports."))
    assert isinstance(run.engine.next_step(run.state), CallModel)
    calls = [ToolCall(f"call_{i}", f"{policy}_tool", {"item": f"R{i}"}) for i, policy in enumerate(policies)]
    reply = ProviderResponse(text="On it.", tool_calls=calls, stop_reason=StopReason.TOOL_USE)
    run.commit(run.engine.model_responded(run.state, reply))
    prepared = run.step()
    assert isinstance(prepared, Delta) and prepared.phase is Phase.PREPARE_TOOLS
    assert [e.status for e in run.state.entries()] == [ToolStatus.PREPARED] * len(policies)
    return run


def key(run: Committed, index: int = 0) -> str:
    """The execution key of the model's call number ``index``."""
    (found,) = [k for k, entry in run.state.tools.items() if entry.call.id == f"call_{index}"]
    return found


def dispatch(run: Committed) -> tuple[str, ...]:
    """Record dispatch intent for the next batch, as the driver does before invoking."""
    step = run.step()
    assert isinstance(step, Dispatch), step
    run.commit(run.engine.dispatched(run.state, step.keys))
    return step.keys


def kinds(delta: Delta | None) -> list[RunEventType]:
    return [] if delta is None else [event.type for event in delta.events]


# ------------------------------------------- prepared call, before dispatch is recorded


@pytest.mark.parametrize("policy", POLICIES)
def test_a_prepared_call_is_dispatched_after_a_crash_whatever_its_policy(policy: str) -> None:
    run = calling(policy)
    before = run.reload()
    # Nothing was in flight: recovery has nothing to settle and nobody is asked.
    assert run.engine.recover(before, may_have_streamed=True) is None
    assert run.engine.reopen(before) is None
    after = run.crash()
    assert after.state.phase is Phase.PREPARE_TOOLS
    step = after.engine.next_step(after.state)
    assert step == Dispatch((key(run),))
    after.commit(after.engine.dispatched(after.state, step.keys))
    # Its first attempt: no invocation can have happened before the crash.
    assert after.state.tools[key(run)].attempt == 1


def test_prepared_calls_of_every_policy_are_dispatched_together_after_a_crash() -> None:
    run = calling(*POLICIES)
    after = run.crash()
    assert after.engine.next_step(after.state) == Dispatch(tuple(key(run, i) for i in range(3)))


# ------------------------------------------------ dispatch recorded, no saved result


def test_a_dispatched_manual_call_waits_for_reconciliation_after_a_crash() -> None:
    run = calling("manual")
    dispatch(run)
    recovered = run.engine.recover(run.reload(), may_have_streamed=True)
    assert recovered is not None
    (moved,) = recovered.tools
    assert moved.status is ToolStatus.UNCERTAIN and moved.attempt == 1
    assert kinds(recovered) == []  # announced when the run stops to wait, as 0.9.1 does

    after = run.crash()
    stopped = after.step()
    # Never dispatched again on its own: the run waits for a person.
    assert isinstance(stopped, Delta) and stopped.run.status is RunStatus.AWAITING_INPUT
    assert kinds(stopped) == [RunEventType.RECOVERY_REQUIRED, RunEventType.RUN_RESULT]
    assert stopped.events[0].data["execution_key"] == key(run)
    assert stopped.events[0].data["policy"] == "manual"
    (pending,) = after.state.result().pending
    assert pending.execution_key == key(run) and pending.status == "uncertain" and pending.attempt == 1
    assert isinstance(after.step(), Stop)
    # Resumed again while it waits: reopened, it goes straight back to waiting, with no
    # second recovery notice and no dispatch.
    again = after.crash()
    assert [kinds(d) for d in again.deltas[len(after.deltas) :]] == [[]]
    waits = again.step()
    assert isinstance(waits, Delta) and waits.run.status is RunStatus.AWAITING_INPUT
    assert again.state.tools[key(run)].status is ToolStatus.UNCERTAIN


def reconcile(run: Committed, **decision: object) -> Committed:
    """A person's decision on the uncertain call, then a resume (a new process)."""
    waiting = run.crash()
    waiting.step()
    assert waiting.state.status is RunStatus.AWAITING_INPUT
    waiting.commit(waiting.engine.resolve(waiting.state, key(run), **decision))  # type: ignore[arg-type]
    return waiting.crash()


def test_an_uncertain_call_resolved_with_its_result_is_not_invoked() -> None:
    run = calling("manual")
    dispatch(run)
    verified = ToolResult("call_0", "report R0 was filed", False)
    after = reconcile(run, result=verified, retry=False, abort=False)
    assert after.state.status is RunStatus.RUNNING
    assert after.engine.next_step(after.state) == CompleteResult(key(run))
    assert after.state.tools[key(run)].raw_result == verified


def test_an_uncertain_call_resolved_with_retry_is_invoked_again_as_its_second_attempt() -> None:
    run = calling("manual")
    dispatch(run)
    after = reconcile(run, result=None, retry=True, abort=False)
    assert dispatch(after) == (key(run),)
    assert after.state.tools[key(run)].attempt == 2


def test_an_uncertain_call_resolved_with_abort_ends_the_run_cancelled() -> None:
    run = calling("manual")
    dispatch(run)
    after = reconcile(run, result=None, retry=False, abort=True)
    # A run's stop reason is empty unless it completed (0.9.1's shape).
    assert after.state.status is RunStatus.CANCELLED and after.state.stop_reason == ""
    # Nothing is undone: the call stays uncertain (the next run's request answers it).
    assert after.state.tools[key(run)].status is ToolStatus.UNCERTAIN
    assert isinstance(after.engine.next_step(after.state), Stop)
    assert after.engine.recover(after.reload()) is None and after.engine.reopen(after.state) is None


@pytest.mark.parametrize("policy", REPLAYABLE)
def test_a_dispatched_replayable_call_is_dispatched_again_under_the_same_key(policy: str) -> None:
    run = calling(policy)
    dispatch(run)
    recovered = run.engine.recover(run.reload(), may_have_streamed=True)
    assert recovered is not None
    (moved,) = recovered.tools
    assert moved.status is ToolStatus.PREPARED
    assert kinds(recovered) == []  # nobody needs to look at it
    after = run.crash()
    assert dispatch(after) == (key(run),)
    # The same execution key, as its second attempt: an idempotent tool's service sees the
    # key it saw before and can refuse to repeat the effect.
    assert after.state.tools[key(run)].attempt == 2


def test_a_loaded_run_with_calls_in_flight_must_be_recovered_before_it_is_driven() -> None:
    run = calling("safe")
    dispatch(run)
    with pytest.raises(AssertionError, match="recover"):
        run.engine.next_step(run.reload())


def test_in_a_mixed_batch_only_the_manual_call_waits_after_a_crash() -> None:
    run = calling(*POLICIES)
    assert len(dispatch(run)) == 3
    after = run.crash()
    statuses = {e.call.name: e.status for e in after.state.entries()}
    assert statuses == {
        "safe_tool": ToolStatus.PREPARED,
        "idempotent_tool": ToolStatus.PREPARED,
        "manual_tool": ToolStatus.UNCERTAIN,
    }
    assert dispatch(after) == (key(run, 0), key(run, 1))
    for index in (0, 1):
        after.commit(after.engine.raw_result(after.state, key(run, index), ToolResult("", "done")))
        complete = after.step()
        assert complete == CompleteResult(key(run, index))
        after.commit(after.engine.completed_result(after.state, key(run, index), ToolResult("", "done")))
    stopped = after.step()
    assert isinstance(stopped, Delta) and stopped.run.status is RunStatus.AWAITING_INPUT
    assert [p.execution_key for p in after.state.result().pending] == [key(run, 2)]


def test_a_manual_call_that_timed_out_waits_like_one_cut_off_by_a_crash() -> None:
    run = calling("manual")
    dispatch(run)
    timed_out = run.engine.timed_out(run.state, key(run), "the tool ran past its timeout of 5 s")
    assert [e.status for e in timed_out.tools] == [ToolStatus.UNCERTAIN]
    run.commit(timed_out)
    after = run.crash()
    stopped = after.step()
    assert isinstance(stopped, Delta) and stopped.run.status is RunStatus.AWAITING_INPUT


# ------------------------------------------------------------------ raw result committed


@pytest.mark.parametrize("policy", POLICIES)
def test_a_committed_raw_result_is_reused_without_invoking_the_tool_again(policy: str) -> None:
    run = calling(policy)
    dispatch(run)
    raw = ToolResult("call_0", "raw report R0", False)
    run.commit(run.engine.raw_result(run.state, key(run), raw))
    assert run.state.phase is Phase.RAW_RESULT
    # Nothing is in flight: recovery leaves the raw result as it is, whatever the policy.
    assert run.engine.recover(run.reload(), may_have_streamed=True) is None
    after = run.crash()
    # Result middleware runs on the saved raw result; no Dispatch comes first.
    assert after.engine.next_step(after.state) == CompleteResult(key(run))
    assert after.state.tools[key(run)].raw_result == raw
    processed = ToolResult("call_0", "processed: raw report R0", False)
    after.commit(after.engine.completed_result(after.state, key(run), processed))
    entry = after.state.tools[key(run)]
    assert entry.status is ToolStatus.COMPLETED and entry.attempt == 1
    # The run goes on to its next model call with the processed result as the answer.
    going_on = after.step()
    assert isinstance(going_on, Delta) and going_on.phase is Phase.PREPARE_MODEL_CALL
    assert after.state.iteration == 1
    assert after.state.messages[-1]["content"] == "processed: raw report R0"
    assert isinstance(after.engine.next_step(after.state), CallModel)


def test_a_completed_result_survives_a_crash_before_the_next_model_call() -> None:
    run = calling("manual")
    dispatch(run)
    run.commit(run.engine.raw_result(run.state, key(run), ToolResult("call_0", "raw")))
    assert run.step() == CompleteResult(key(run))
    run.commit(run.engine.completed_result(run.state, key(run), ToolResult("call_0", "final")))
    after = run.crash()
    going_on = after.step()
    assert isinstance(going_on, Delta) and after.state.messages[-1]["content"] == "final"


# ----------------------------------------------------------------------- run completed


def finished(finish: Callable[[Committed], None]) -> Committed:
    run = calling("manual")
    dispatch(run)
    run.commit(run.engine.raw_result(run.state, key(run), ToolResult("call_0", "raw")))
    run.step()
    run.commit(run.engine.completed_result(run.state, key(run), ToolResult("call_0", "final")))
    run.step()
    finish(run)
    return run


def answer(run: Committed) -> None:
    assert isinstance(run.engine.next_step(run.state), CallModel)
    run.commit(run.engine.model_responded(run.state, ProviderResponse(text="All reports are written.")))
    done = run.step()
    assert isinstance(done, Delta) and done.run.status is RunStatus.COMPLETED


def test_a_completed_run_is_read_from_its_saved_result_and_has_nothing_to_resume() -> None:
    run = finished(answer)
    saved = run.reload()
    assert run.engine.recover(saved, may_have_streamed=True) is None
    assert run.engine.reopen(saved) is None
    assert isinstance(run.engine.next_step(saved), Stop)
    result = saved.result()
    assert result.ok and result.status is RunStatus.COMPLETED
    assert result.output == "All reports are written." and result.pending == []
    assert result == run.state.result()


def test_a_cancelled_run_has_nothing_to_resume_either() -> None:
    run = finished(lambda run: run.commit(run.engine.cancel(run.state)))
    saved = run.reload()
    assert saved.status is RunStatus.CANCELLED
    assert run.engine.recover(saved) is None and run.engine.reopen(saved) is None
    assert isinstance(run.engine.next_step(saved), Stop)


def test_a_run_that_failed_with_a_call_in_flight_is_settled_before_it_is_continued() -> None:
    # Not finished: resume() continues a failed run, so what it left in flight is settled
    # by the same rule as a crash (here a manual call: uncertain, not invoked again).
    run = calling("manual")
    dispatch(run)
    run.commit(run.engine.fail(run.state, RuntimeError("the store went away")))
    after = run.crash()
    assert after.state.tools[key(run)].status is ToolStatus.UNCERTAIN
    assert after.state.status is RunStatus.RUNNING
    stopped = after.step()
    assert isinstance(stopped, Delta) and stopped.run.status is RunStatus.AWAITING_INPUT


# ----------------------------------------------------- a crash during a model call


def test_a_model_call_cut_off_by_a_crash_is_made_again_and_its_stream_reset() -> None:
    run = Committed(make_engine())
    run.commit(run.engine.start(run.state, "Write the reports."))
    recovered = run.engine.recover(run.reload(), may_have_streamed=True)
    # Listeners are told to drop the partial text they may have received.
    assert kinds(recovered) == [RunEventType.ATTEMPT_RESET]
    # A run fresh from the queue cannot have streamed anything.
    assert run.engine.recover(run.reload(), may_have_streamed=False) is None
    after = run.crash()
    assert isinstance(after.engine.next_step(after.state), CallModel)


# ------------------------------------------------- batches: serial calls beside the others


def batch_engine(**limits: int) -> Engine:
    """An engine with a concurrent ``fetch`` and a serial ``note`` (both ``safe``)."""
    tools = ToolRegistry()
    for name, concurrent in (("fetch", True), ("note", False)):

        def handler(item: str) -> str:
            """Do the work.

            Args:
                item: What to do.
            """
            raise AssertionError("the engine never invokes a tool; the driver does")

        tools.register(name=name, replay_policy="safe", concurrent=concurrent)(handler)
    return Engine(tools=tools, permissions=PermissionManager(), limits=Limits(**limits))


def batch_of(engine: Engine, *names: str) -> Committed:
    run = Committed(engine)
    run.commit(engine.start(run.state, "Go."))
    calls = [ToolCall(f"call_{i}", name, {"item": str(i)}) for i, name in enumerate(names)]
    run.commit(
        engine.model_responded(run.state, ProviderResponse(tool_calls=calls, stop_reason=StopReason.TOOL_USE))
    )
    run.step()
    return run


def returned(run: Committed, index: int) -> None:
    run.commit(run.engine.raw_result(run.state, key(run, index), ToolResult(f"call_{index}", "ok")))


def completed(run: Committed, index: int) -> None:
    run.commit(run.engine.completed_result(run.state, key(run, index), ToolResult(f"call_{index}", "ok")))


def test_serial_calls_start_beside_the_concurrent_ones_and_take_turns() -> None:
    run = batch_of(batch_engine(), "fetch", "note", "fetch", "note")
    # The first serial call starts with the concurrent ones, in the model's order.
    assert dispatch(run) == (key(run, 0), key(run, 1), key(run, 2))
    assert run.engine.startable(run.state) == ()
    returned(run, 0)
    assert run.engine.startable(run.state) == (), "the second note waits for the first"
    returned(run, 1)
    assert run.engine.startable(run.state) == (), "nor before the first one's result middleware"
    completed(run, 1)
    assert run.engine.startable(run.state) == (key(run, 3),)


def test_a_call_that_waited_for_room_starts_as_another_returns() -> None:
    run = batch_of(batch_engine(tool_concurrency=2), "fetch", "fetch", "fetch")
    assert dispatch(run) == (key(run, 0), key(run, 1))
    returned(run, 1)
    assert run.engine.startable(run.state) == (key(run, 2),)


def test_the_earlier_batches_stay_for_recorded_histories() -> None:
    engine = batch_engine()
    engine.overlap_serial = False
    run = batch_of(engine, "fetch", "note", "fetch")
    assert dispatch(run) == (key(run, 0),)
    returned(run, 0)
    completed(run, 0)
    assert dispatch(run) == (key(run, 1),), "a serial call alone"


def test_a_crash_mid_batch_keeps_what_returned_and_runs_the_rest_again() -> None:
    run = batch_of(batch_engine(), "fetch", "note", "fetch", "note")
    dispatch(run)
    returned(run, 1)
    completed(run, 1)
    run.commit(run.engine.dispatched(run.state, run.engine.startable(run.state)))
    returned(run, 3)
    assert [e.status for e in run.state.entries()] == [
        ToolStatus.STARTED,
        ToolStatus.COMPLETED,
        ToolStatus.STARTED,
        ToolStatus.RAW_COMPLETED,
    ]
    after = run.crash()
    # The committed results are kept (the raw one's middleware runs), the calls in flight
    # are safe: prepared again, and they start together.
    assert after.step() == CompleteResult(key(run, 3))
    completed(after, 3)
    assert dispatch(after) == (key(run, 0), key(run, 2))
