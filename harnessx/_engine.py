"""The step machine: given a ``RunState``, what happens next.

The engine performs no I/O at all. ``next_step`` either returns a ``Delta`` (a pure
transition the driver commits and applies) or an *effect* the driver must perform (call
the model, dispatch tools, run result middleware, ask an approver) and report back
through the matching transition method, which again returns a ``Delta``. Because every
change is a delta, every phase boundary can be committed before the next effect starts.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from typing import Any

from harnessx._builtin_tools import render_todos, todos_of, todos_payload
from harnessx._config import Limits
from harnessx._errors import CostLimitError, MaxIterationsError, ResolutionError, UnknownExecutionKey
from harnessx._events import RunEvent, RunEventType
from harnessx._large_results import cap_stored, shown_result
from harnessx._loopguard import call_signature, repetition_notice, trip_at
from harnessx._messages import TEXT_BLOCKS, THINKING_BLOCKS, close_open_calls, text_blocks, thinking_blocks
from harnessx._policies import ToolRetry
from harnessx._results import RunStatus, ToolResult
from harnessx._state import Delta, Phase, RunPatch, RunState, ToolEntry, ToolStatus, execution_key
from harnessx._tools import (
    PERMISSION_DENIED,
    PermissionLevel,
    PermissionManager,
    ReplayPolicy,
    ToolDefinition,
    ToolNotFoundError,
    ToolRegistry,
)
from harnessx.providers._base import (
    STOP_REASONS_WITHOUT_TOOLS,
    ProviderResponse,
    StopReason,
    TokenUsage,
    ToolCall,
    given_blocks,
)

__all__ = [
    "CANCELLED_CALL",
    "CONTINUE_NOTICE",
    "CUT_OFF_CALL",
    "EMPTY_NOTICE",
    "MAX_PAUSE_RESUMES",
    "PLAN_REMINDER",
    "AskApproval",
    "CallModel",
    "CompleteResult",
    "Dispatch",
    "Engine",
    "PrepareTools",
    "Recovery",
    "RecoveryExhaustedError",
    "Step",
    "Stop",
    "continued_output",
    "empty_nudges",
    "expect_waiting",
    "step_id",
    "truncation_recoveries",
]


@dataclass(frozen=True)
class Recovery:
    """A ``RECOVERY`` hook a reply just recorded calls for (``Engine.recoveries``).
    ``raised_budget``: its ``reply_budget`` is the next call's raised one (a reply cut off at
    its budget), not the budget the reply was given."""

    reason: str
    attempt: int
    raised_budget: bool = False


@dataclass(frozen=True)
class CallModel:
    """Call the model with the state's conversation; report via ``model_responded``."""


@dataclass(frozen=True)
class PrepareTools:
    """Pass these calls through tool middleware; commit ``prepare_tools`` with the result."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class Dispatch:
    """Commit ``dispatched(keys)``, invoke those tools, report each via ``raw_result`` (and,
    when ``Engine.overlap_serial``, its result middleware via ``completed_result`` at once),
    then dispatch what ``Engine.startable`` names."""

    keys: tuple[str, ...]


@dataclass(frozen=True)
class CompleteResult:
    """Run result middleware on a committed raw result; report via ``completed_result``."""

    key: str


@dataclass(frozen=True)
class AskApproval:
    """Ask the configured approver about these calls; report via ``approvals_answered``."""

    keys: tuple[str, ...]


@dataclass(frozen=True)
class Stop:
    """The run is not running (finished or waiting); nothing more to do."""


Step = Delta | CallModel | PrepareTools | Dispatch | CompleteResult | AskApproval | Stop


# What the model is told when a run reaches Limits.max_iterations and is asked for its last reply.
FINAL_ANSWER_NOTICE = (
    "[You have reached the step limit of this run. Do not call any tools. Reply now with what you did, "
    "what is left to do, and your best answer so far.]"
)
NOT_RUN_AT_LIMIT = "Not executed: the run reached its step limit."
# The answer a call gets when the run is cancelled while it may be running (the wording of
# harnessx 0.9.1, which programs may look for).
CANCELLED_CALL = "Run cancelled; execution outcome may be unknown."
# A reply cut off at its token budget (Limits.max_truncation_recoveries): its tool calls may
# have lost arguments, so they are answered, never run, and the model asked again with a
# larger budget; a text reply is continued, and the pieces make the output.
CUT_OFF_CALL = (
    "Not executed: your reply was cut off at the output token limit while writing this call, so its "
    "arguments may be incomplete. Call the tool again; the next reply has a larger budget."
)
CUT_OFF_CALL_AT_LIMIT = (
    "Not executed: the reply was cut off at the token budget, so these arguments may be incomplete. "
    "Call the tool again with a shorter reply."
)
# A reply with nothing in it (no text, no call) is not stored; the model is asked to go on,
# at most MAX_EMPTY_NUDGES times a run (0.9.1's limit), then the run fails.
EMPTY_NOTICE = "Your last reply was empty. Continue with the task, or give your final answer."
MAX_EMPTY_NUDGES = 2
CONTINUE_NOTICE = (
    "[Your reply was cut off at the output token limit. Continue exactly where it stopped, without "
    "repeating anything.]"
)


# An empty reply while the run's own task list is still open is answered with this (once a
# run, before the empty-reply notice): something may have been dropped (0.9.1's reminder).
PLAN_REMINDER = "Before you finish: your task list still has unfinished items."
_PLAN_REMINDER_ASK = (
    "If they are done, mark them completed with write_todos. If work remains, continue it, or say "
    "plainly what is left. Do not repeat your previous reply."
)

# A turn the provider paused (``pause_turn``: a long turn of server tools) is continued by
# asking again, at most this many times a run (0.9.1's limit); then the run fails.
MAX_PAUSE_RESUMES = 5


class RecoveryExhaustedError(RuntimeError):
    """The model kept replying with nothing, or kept pausing its turn; the run fails with
    this (0.9.1's type name)."""


class Engine:
    """Run rules for one agent definition: its tools, permissions and limits."""

    def __init__(
        self,
        *,
        tools: ToolRegistry,
        permissions: PermissionManager,
        limits: Limits,
        allowed_tools: list[str] | None = None,
        interactive_approval: bool = False,
        cost_baseline: TokenUsage | None = None,
        recover_truncation: bool = True,
        recover_empty: bool = True,
        recover_pauses: bool = True,
        remind_plan: bool = True,
        overlap_serial: bool = True,
    ) -> None:
        """``interactive_approval`` is a plain run (ASK asks the approval callback there
        and then); otherwise ASK records an approval to wait for. ``cost_baseline`` is
        usage spent before this run that ``Limits.max_cost_dollars`` also counts."""
        self.tools = tools
        self.permissions = permissions
        self.limits = limits
        self.allowed_tools = allowed_tools
        self.interactive_approval = interactive_approval
        self.cost_baseline = cost_baseline or TokenUsage()
        # False only where decisions recorded before truncated replies were recovered must
        # be replayed as they were (a Temporal history).
        self.recover_truncation = recover_truncation
        self.recover_empty = recover_empty
        # 0.9.1's rules for a paused turn: its text is part of the output, and a run
        # continues at most MAX_PAUSE_RESUMES of them (False: a Temporal history recorded
        # before these rules, replayed as it was decided).
        self.recover_pauses = recover_pauses
        # An empty reply with the task list open gets PLAN_REMINDER once (False: a Temporal
        # history recorded before it, replayed as it was decided).
        self.remind_plan = remind_plan
        # 0.9.1's batches: the serial calls of a reply take turns beside its concurrent
        # ones (False: a Temporal history recorded before, where a serial call ran alone).
        self.overlap_serial = overlap_serial

    # ----------------------------------------------------------------- deciding

    def next_step(self, state: RunState) -> Step:
        if state.status is not RunStatus.RUNNING:
            return Stop()
        if state.phase is Phase.PREPARE_MODEL_CALL:
            over = self._over_budget(state)
            if over is not None:
                return self.fail(state, CostLimitError(over))
            return CallModel()
        if state.phase is Phase.MODEL_CALL:
            return self._after_model_call(state)
        return self._tool_step(state)

    def final_call(self, state: RunState) -> bool:
        """Whether the model call at hand is the one last call a run at its limit gets."""
        limit = self.limits.max_iterations
        return bool(limit) and self.limits.final_answer_on_limit and state.iteration >= limit

    def _over_budget(self, state: RunState) -> str | None:
        budget = self.limits.max_cost_dollars
        if budget is None:
            return None
        spent = self.cost_baseline + state.usage
        cost = self.limits.cost_of(
            spent.input_tokens,
            spent.output_tokens,
            spent.cache_read_input_tokens,
            spent.cache_creation_input_tokens,
        )
        if cost < budget:
            return None
        return (
            f"estimated cost ${cost:.4f} reached the limit of ${budget:.4f} (Limits.max_cost_dollars); "
            "raise the limit or narrow the task"
        )

    def _after_model_call(self, state: RunState) -> Step:
        if self.recover_empty and not _replied(state):
            # The reply was empty and not stored (model_responded).
            if self.reminds_plan(state):
                return self._next_model_call(state, [{"role": "user", "content": self._plan_reminder(state)}])
            if empty_nudges(state) < MAX_EMPTY_NUDGES:
                return self._next_model_call(state, [{"role": "user", "content": EMPTY_NOTICE}])
            return self._exhausted(state, "empty_reply", self._continued(state))
        message = state.last_assistant() or {}
        calls = [ToolCall.from_dict(c) for c in message.get("tool_calls") or []]
        output = self._continued(state) + str(message.get("content") or "")
        if self.final_call(state):
            # The last reply of a run at its limit ends it, whatever it holds; a call it made
            # anyway is answered, so the conversation stays valid for the next run.
            delta = self._finish(state, RunStatus.COMPLETED, "max_iterations", output)
            delta.messages = [_unanswered(call, NOT_RUN_AT_LIMIT) for call in calls]
            return delta
        if state.stop_reason == StopReason.MAX_TOKENS and self.recover_truncation:
            if self.recovers_truncation(state):
                if calls:
                    return self._next_model_call(state, [_unanswered(call, CUT_OFF_CALL) for call in calls])
                return self._next_model_call(state, [{"role": "user", "content": CONTINUE_NOTICE}])
            delta = self._finish(state, RunStatus.COMPLETED, StopReason.MAX_TOKENS.value, output)
            delta.messages = [_unanswered(call, CUT_OFF_CALL_AT_LIMIT) for call in calls]
            return delta
        if calls:
            return PrepareTools(tuple(calls))
        if state.stop_reason == StopReason.PAUSE_TURN:
            if self.recover_pauses and paused_turns(state) >= MAX_PAUSE_RESUMES:
                return self._exhausted(state, "pause_turn", output)
            # The provider paused a long turn; asking again continues it (the turn is sent
            # back as it stands: no message is added).
            return self._next_model_call(state, [])
        stop = state.stop_reason if state.stop_reason not in ("", StopReason.TOOL_USE) else "end_turn"
        return self._finish(state, RunStatus.COMPLETED, stop, output)

    def nudges_empty_reply(self, state: RunState) -> bool:
        """Whether the reply just recorded was empty and the model is asked to go on."""
        return self.recover_empty and not _replied(state) and empty_nudges(state) < MAX_EMPTY_NUDGES

    def reminds_plan(self, state: RunState) -> bool:
        """Whether the reply just recorded was empty while the run's task list (the planning
        tools') is still open, and no reminder was sent this run: the model is shown the
        list and asked to finish it or say what is left, before any empty-reply notice."""
        return (
            self.remind_plan
            and self.recover_empty
            and not _replied(state)
            and StopReason.coerce(state.stop_reason) in (StopReason.END_TURN, StopReason.STOP_SEQUENCE)
            and self.tools.get("write_todos") is not None
            and any(item.get("status") != "completed" for item in todos_of(state.messages))
            and not self._continued(state).strip()
            and not any(
                m.get("role") == "user" and str(m.get("content", "")).startswith(PLAN_REMINDER)
                for m in state.messages[state.history_length :]
            )
        )

    def _plan_reminder(self, state: RunState) -> str:
        return f"{PLAN_REMINDER}\n{render_todos(todos_of(state.messages))}\n{_PLAN_REMINDER_ASK}"

    def recoveries(self, state: RunState, response: ProviderResponse) -> list[Recovery]:
        """The ``RECOVERY`` hooks of ``response``, once ``model_responded`` recorded it: the
        model is asked to go on after an empty reply, asked again after one cut off at its
        budget, or continues a paused turn. Pure, so a Temporal workflow decides them as the
        driver does."""
        found = []
        if self.reminds_plan(state):
            found.append(Recovery("unfinished_plan", 1))
        elif self.nudges_empty_reply(state):
            found.append(Recovery("empty_reply", empty_nudges(state) + 1))
        elif response.stop_reason == StopReason.MAX_TOKENS and self.recovers_truncation(state):
            reason = "truncated_tool_call" if response.tool_calls else "truncated_text"
            found.append(Recovery(reason, truncation_recoveries(state) + 1, raised_budget=True))
        if response.stop_reason == StopReason.PAUSE_TURN and not response.tool_calls:
            if not self.recover_pauses:
                found.append(Recovery("paused_turn", 1))
            elif paused_turns(state) < MAX_PAUSE_RESUMES:
                found.append(Recovery("paused_turn", paused_turns(state) + 1))
        return found

    def _continued(self, state: RunState) -> str:
        """The output so far of this run's replies that others continued."""
        return continued_output(state, paused=self.recover_pauses)

    def _is_empty(self, state: RunState, response: ProviderResponse, calls: list[ToolCall]) -> bool:
        return (
            self.recover_empty
            and not calls
            and not response.text.strip()
            # A server tool's call or result (a provider block) is part of the conversation.
            and not any(b.get("type") == "provider" for b in given_blocks(response))
            # A refusal says something by stopping; a paused turn is continued as it is.
            and StopReason.coerce(response.stop_reason)
            not in (StopReason.SAFETY, StopReason.REFUSAL, StopReason.PAUSE_TURN)
            and not self.final_call(state)
            and not self._continued(state).strip()
        )

    def recovers_truncation(self, state: RunState) -> bool:
        """Whether a reply cut off at its budget now is asked again (within
        ``Limits.max_truncation_recoveries`` for the run), rather than ending the run."""
        return (
            self.recover_truncation
            and not self.final_call(state)
            and truncation_recoveries(state) < self.limits.max_truncation_recoveries
        )

    def _tool_step(self, state: RunState) -> Step:
        entries = state.entries()
        for entry in entries:
            if entry.status is ToolStatus.RAW_COMPLETED:
                return CompleteResult(entry.execution_key)
        in_flight = [e.execution_key for e in entries if e.status is ToolStatus.STARTED]
        if in_flight:
            raise AssertionError(f"tool calls {in_flight} are in flight; recover() the state first")
        approvals = tuple(e.execution_key for e in entries if e.status is ToolStatus.APPROVAL)
        if approvals:
            # Nothing of a batch runs before every call of it that needs approval has it.
            return AskApproval(approvals) if self.interactive_approval else self._wait(state)
        prepared = [e for e in entries if e.status is ToolStatus.PREPARED]
        if prepared:
            recheck = self._recheck_permissions(state, prepared)
            return recheck if recheck is not None else Dispatch(self._batch(state, prepared))
        if any(e.status is ToolStatus.UNCERTAIN for e in entries):
            return self._wait(state)
        return self._collect(state, entries)

    def _collect(self, state: RunState, entries: list[ToolEntry]) -> Delta:
        """Every call of this step has its result: answer them and go on."""
        limit = self.limits.max_result_chars
        results = [_tool_message(e, limit) for e in entries]
        period = trip_at(self._signatures(state), self.limits.loop_guard)
        laps = self.limits.loop_guard.threshold
        if period is not None and results:
            note = repetition_notice(period, laps)
            results[0] = {**results[0], "content": f"{note}\n\n{results[0]['content']}"}
        delta = self._next_model_call(state, results)
        if period is not None and entries:
            delta.repetition = (period, laps, entries[0].call.name)
        before = todos_of(state.messages)
        after = todos_of([*state.messages, *results])
        if after != before:
            delta.events.insert(0, self._event(state, RunEventType.TODOS_UPDATED, todos_payload(after)))
        return delta

    def _signatures(self, state: RunState) -> list[list[str]]:
        """The run's completed calls, step by step, as loop-guard signatures."""
        steps: dict[int, list[ToolEntry]] = {}
        for entry in state.tools.values():
            steps.setdefault(entry.iteration, []).append(entry)
        out = []
        for iteration in sorted(steps):
            ordered = sorted(steps[iteration], key=lambda e: e.index)
            out.append(
                [
                    call_signature(e.call.name, e.call.input, (e.result or ToolResult()).content)
                    for e in ordered
                    if e.status is ToolStatus.COMPLETED
                ]
            )
        return out

    def _batch(self, state: RunState, prepared: list[ToolEntry]) -> tuple[str, ...]:
        """The calls to dispatch first."""
        return self.startable(state) if self.overlap_serial else self.exclusive_batch(prepared)

    def startable(self, state: RunState) -> tuple[str, ...]:
        """The prepared calls of this step that may start now, beside the calls in flight
        (``started``), in the model's order: ``concurrent=True`` calls, and the first
        serial call if no serial call is in flight (the serial calls take turns in the
        model's order, beside the others, as in harnessx 0.9.1); at most
        ``Limits.tool_concurrency`` in flight. The driver asks again as each call returns."""
        entries = state.entries()
        running = [e for e in entries if e.status is ToolStatus.STARTED]
        room = self.limits.tool_concurrency - len(running)
        # A serial call's turn ends with its result middleware: the next one sees its result.
        busy = (ToolStatus.STARTED, ToolStatus.RAW_COMPLETED)
        serial_free = not any(e.status in busy and not self._is_concurrent(e) for e in entries)
        keys: list[str] = []
        for entry in entries:
            if room <= 0:
                break
            if entry.status is not ToolStatus.PREPARED:
                continue
            if self._is_concurrent(entry):
                keys.append(entry.execution_key)
                room -= 1
            elif serial_free:
                keys.append(entry.execution_key)
                room -= 1
                serial_free = False
        return tuple(keys)

    def exclusive_batch(self, prepared: list[ToolEntry]) -> tuple[str, ...]:
        """The batches of harnessx-durable before 0.9.1's (kept for Temporal histories
        recorded with them): a run of concurrent calls, or one serial call alone."""
        first = prepared[0]
        if not self._is_concurrent(first):
            return (first.execution_key,)
        batch: list[str] = []
        for entry in prepared:
            if not self._is_concurrent(entry) or len(batch) >= self.limits.tool_concurrency:
                break
            batch.append(entry.execution_key)
        return tuple(batch)

    def _is_concurrent(self, entry: ToolEntry) -> bool:
        tool = self.tools.get(entry.call.name)
        return tool is not None and tool.concurrent

    # -------------------------------------------------------------- transitions

    def start(self, state: RunState, message: str) -> Delta:
        """The first boundary of a run: the user's message is part of the conversation."""
        return Delta(
            Phase.PREPARE_MODEL_CALL,
            messages=[{"role": "user", "content": message}],
            run=RunPatch(status=RunStatus.RUNNING, iteration=0),
        )

    def model_responded(self, state: RunState, response: ProviderResponse) -> Delta:
        stop = StopReason.coerce(response.stop_reason)
        # A reply cut off at its budget keeps its calls, to be answered and not run.
        dropped = stop in STOP_REASONS_WITHOUT_TOOLS and not (
            stop is StopReason.MAX_TOKENS and self.recover_truncation
        )
        calls = [] if dropped else _unique_ids(response.tool_calls or [])
        message: dict[str, Any] = {"role": "assistant", "content": response.text}
        if calls:
            message["tool_calls"] = [c.to_dict() for c in calls]
        given = given_blocks(response)
        thinking = thinking_blocks(given)
        if thinking:
            # Kept as received (signature, redacted data): with extended thinking and tools
            # the API wants them back unchanged in the turn they came with.
            message[THINKING_BLOCKS] = thinking
        texts = text_blocks(given)
        if texts:
            # Shown as they came (citations), sent as the text; the provider's own blocks
            # among them (a server tool's call and result) are sent back as they came.
            message[TEXT_BLOCKS] = texts
        events = []
        if response.text:
            events.append(self._event(state, RunEventType.TEXT_COMPLETE, response.text))
        # A provider that reports no usage reports zeros, as harnessx 0.9.1 counts it.
        run = RunPatch(stop_reason=stop.value, usage=state.usage + response.usage)
        if self._is_empty(state, response, calls):
            return Delta(Phase.MODEL_CALL, run=run, events=events)
        return Delta(Phase.MODEL_CALL, messages=[message], run=run, events=events)

    def attempt_reset(self, state: RunState, attempt: int) -> Delta:
        """Model call number ``attempt`` failed and is made again: what it streamed is void,
        and what it was billed is not known."""
        event = self._event(state, RunEventType.ATTEMPT_RESET, {"attempt": attempt})
        return Delta(state.phase, run=RunPatch(usage_incomplete=True), events=[event])

    def fail(
        self, state: RunState, error: BaseException, *, output: str | None = None, stop_reason: str = ""
    ) -> Delta:
        """Failed: the error is recorded, and every call the run leaves open is answered.
        ``output`` and ``stop_reason``: what a run that gives up on a reply keeps of it."""
        details = {"type": type(error).__name__, "message": str(error)}
        run = RunPatch(status=RunStatus.FAILED, stop_reason=stop_reason, error=details)
        if output is not None:
            run.output = output
        if state.phase is Phase.PREPARE_MODEL_CALL:
            run.usage_incomplete = True  # the failed model call may have been billed
        closing = self._close_calls(state, f"Not run: the run failed first ({type(error).__name__})")
        delta = Delta(state.phase, run=run, messages=closing)
        delta.events.append(self._event(state, RunEventType.ERROR, str(error)))
        delta.events.append(self._run_result_event(state, delta))
        return delta

    def dispatched(self, state: RunState, keys: tuple[str, ...]) -> Delta:
        """Dispatch intent: recorded *before* the tools are invoked."""
        moved = [
            state.tools[k].moved(status=ToolStatus.STARTED, attempt=state.tools[k].attempt + 1) for k in keys
        ]
        events = [self._tool_event(state, RunEventType.TOOL_CALL_START, e, e.call) for e in moved]
        return Delta(Phase.DISPATCH, tools=moved, events=events)

    def raw_result(self, state: RunState, key: str, result: ToolResult) -> Delta:
        """The handler's result, committed before result middleware runs on it; announced
        with ``tool_call_complete`` (``tool_result`` follows once middleware is done)."""
        entry = state.tools[key]
        raw = ToolResult(entry.call.id, self._stored(result.content), result.is_error)
        moved = entry.moved(status=ToolStatus.RAW_COMPLETED, raw_result=raw)
        event = self._tool_event(state, RunEventType.TOOL_CALL_COMPLETE, moved, moved.call)
        return Delta(Phase.RAW_RESULT, tools=[moved], events=[event])

    def timed_out(self, state: RunState, key: str, message: str) -> Delta:
        """A call ran past its timeout. Its outcome is unknown: in a durable run a ``manual``
        tool waits ``uncertain`` for a person; otherwise the model reads an error result."""
        entry = state.tools[key]
        if not self.interactive_approval and entry.policy == ReplayPolicy.MANUAL:
            # Announced with recovery_required when the run stops to wait.
            return Delta(Phase.RAW_RESULT, tools=[entry.moved(status=ToolStatus.UNCERTAIN)])
        text = f"{message}. It may have partly run; check its effects before calling it again."
        return self.raw_result(state, key, ToolResult(entry.call.id, text, True))

    def completed_result(self, state: RunState, key: str, result: ToolResult) -> Delta:
        entry = state.tools[key]
        final = ToolResult(entry.call.id, self._stored(result.content), result.is_error)
        return self._complete(state, entry, final, Phase.COMPLETED_RESULT, dispatched=True)

    def approvals_answered(self, state: RunState, answers: dict[str, bool]) -> Delta:
        delta = Delta(Phase.PREPARE_TOOLS)
        for key, allowed in answers.items():
            entry = state.tools[key]
            if allowed:
                delta.tools.append(entry.moved(status=ToolStatus.PREPARED, approved=True))
            else:
                delta = delta.then(self._deny(state, entry))
        return delta

    def pause(self, state: RunState, reason: str = "") -> Delta:
        """Stop ``paused`` (resumable). ``timeout`` also records why, as the run's error."""
        delta = self._stop(state, RunStatus.PAUSED, reason)
        if reason == "timeout":
            delta = Delta(
                state.phase,
                run=RunPatch(
                    status=RunStatus.PAUSED,
                    stop_reason=reason,
                    error={"type": "TimeoutError", "message": "Session duration limit exceeded"},
                ),
            )
            delta.events.append(self._run_result_event(state, delta))
        return delta

    def cancel(self, state: RunState) -> Delta:
        """Cancelled: a ``manual`` call that may be running becomes ``uncertain`` (its effect
        is unknown), and every open call is answered so that the next request is valid."""
        uncertain = [
            e.moved(status=ToolStatus.UNCERTAIN)
            for e in state.entries()
            if e.status is ToolStatus.STARTED and e.policy == ReplayPolicy.MANUAL
        ]
        delta = Delta(state.phase, tools=uncertain, run=RunPatch(status=RunStatus.CANCELLED, stop_reason=""))
        delta.messages = self._close_calls(state, CANCELLED_CALL)
        delta.events.append(self._run_result_event(state, delta))
        return delta

    def _close_calls(self, state: RunState, unanswered: str) -> list[dict[str, Any]]:
        recorded = {e.call.id: result for e in state.entries() if (result := e.result or e.raw_result)}
        return close_open_calls(state.messages[state.history_length :], recorded, unanswered)

    # ------------------------------------------------- recovery and decisions

    def recover(self, state: RunState, *, may_have_streamed: bool = True) -> Delta | None:
        """Settle what a dead process left in flight; ``None`` when nothing needs it.

        A call dispatched without a committed raw result is invoked again when its replay
        policy allows it, and otherwise becomes ``uncertain`` for a person to resolve. A
        failed run is settled too, since resume() continues it: it may have failed with
        calls in flight.
        """
        if state.status in (RunStatus.COMPLETED, RunStatus.CANCELLED):
            return None
        delta = Delta(state.phase)
        for entry in state.entries():
            if entry.status is not ToolStatus.STARTED:
                continue
            if entry.policy in (ReplayPolicy.SAFE, ReplayPolicy.IDEMPOTENT):
                delta.tools.append(entry.moved(status=ToolStatus.PREPARED))
            else:
                # Announced with recovery_required when the run stops to wait.
                delta.tools.append(entry.moved(status=ToolStatus.UNCERTAIN))
        if (
            may_have_streamed
            and state.phase is Phase.PREPARE_MODEL_CALL
            and state.status is RunStatus.RUNNING
        ):
            # A model call may have been streaming when the process died.
            delta.events.append(
                self._event(state, RunEventType.ATTEMPT_RESET, {"attempt": max(state.attempt, 1)})
            )
        return delta if delta.tools or delta.events else None

    def reopen(self, state: RunState) -> Delta | None:
        """Make a paused, waiting or failed run runnable again (``None`` if it already is).

        A run still waiting on an undecided call goes straight back to waiting."""
        if state.status in (RunStatus.PAUSED, RunStatus.AWAITING_INPUT, RunStatus.FAILED):
            return Delta(state.phase, run=RunPatch(status=RunStatus.RUNNING, stop_reason="", error=None))
        return None

    def approve(self, state: RunState, key: str, allow: bool) -> Delta:
        entry = state.tools[key]
        if allow:
            return Delta(state.phase, tools=[entry.moved(status=ToolStatus.PREPARED, approved=True)])
        # A declined call never runs and is not announced: the model reads its answer.
        denied = ToolResult(entry.call.id, PERMISSION_DENIED, True)
        return Delta(state.phase, tools=[entry.moved(status=ToolStatus.COMPLETED, result=denied)])

    def resolve(
        self, state: RunState, key: str, *, result: ToolResult | None, retry: bool, abort: bool
    ) -> Delta:
        entry = state.tools[key]
        if result is not None:
            raw = ToolResult(entry.call.id, self._stored(result.content), result.is_error)
            moved = entry.moved(status=ToolStatus.RAW_COMPLETED, raw_result=raw)
            event = self._tool_event(state, RunEventType.TOOL_CALL_COMPLETE, moved, moved.call)
            return Delta(state.phase, tools=[moved], events=[event])
        if retry:
            return Delta(state.phase, tools=[entry.moved(status=ToolStatus.PREPARED)])
        # Abort: the run ends cancelled, the call stays uncertain (nothing is undone), and
        # its answer says the outcome is unknown.
        return self.cancel(state).with_phase(state.phase)

    # ------------------------------------------------------------------ helpers

    def _stored(self, content: str) -> str:
        """A tool result as the run keeps it: cut to ``Limits.max_stored_chars``, saying so."""
        return cap_stored(content, self.limits.max_stored_chars)

    def prepare_tools(self, state: RunState, calls: list[ToolCall]) -> Delta:
        """The model's calls (after tool middleware) as tool entries: checked, permitted,
        denied or waiting. Each records the tool's settings for ``PendingTool``."""
        delta = Delta(Phase.PREPARE_TOOLS)
        for index, model_call in enumerate(calls):
            call = self._repaired(model_call)
            key = execution_key(state.run_id, state.iteration, call.id)
            tool = self.tools.get(call.name)
            entry = ToolEntry(
                execution_key=key,
                iteration=state.iteration,
                index=index,
                call=call,
                policy=(tool.replay_policy if tool else ReplayPolicy.MANUAL).value,
                status=ToolStatus.PREPARED,
                concurrent=tool.concurrent if tool else False,
                timeout=tool.timeout_seconds if tool else None,
                retry=_tool_retry(tool).to_dict(),
            )
            problem = self._call_problem(call, index)
            if problem is not None:
                delta = delta.then(self._complete(state, entry, ToolResult(call.id, problem, True), None))
                continue
            reused = self._dedupe(state, call)
            if reused is not None:
                delta = delta.then(
                    self._complete(state, entry, ToolResult(call.id, reused.content, reused.is_error), None),
                )
                continue
            level = self.permissions.get_effective_permission(call.name, tool)
            if level is PermissionLevel.DENY:
                delta = delta.then(self._deny(state, entry))
            elif level is PermissionLevel.ASK and not self._granted(call):
                delta = delta.then(self._ask(state, entry))
            else:
                delta.tools.append(entry)
        return delta

    def _granted(self, call: ToolCall) -> bool:
        """A plain run lets a tool granted for the session through without asking."""
        return self.interactive_approval and self.permissions.granted(call.name)

    def _dedupe(self, state: RunState, call: ToolCall) -> ToolResult | None:
        """With ``dedupe_calls``, the result of an identical earlier call of this run."""
        if not self.tools.dedupe_calls:
            return None
        for entry in state.tools.values():
            if (
                entry.iteration < state.iteration
                and entry.status is ToolStatus.COMPLETED
                and entry.call.name == call.name
                and entry.call.input == call.input
            ):
                return entry.raw_result or entry.result
        return None

    def _call_problem(self, call: ToolCall, index: int) -> str | None:
        """Why a model's call cannot run, phrased for the model to correct itself."""
        if index >= self.limits.max_tool_calls_per_turn:
            return (
                f"Error: too many tool calls in one reply (limit {self.limits.max_tool_calls_per_turn}); "
                "this call was not run"
            )
        try:
            tool, name = self.tools.resolve_tool(call.name, among=self._offered_names())
        except ToolNotFoundError as exc:
            return str(exc)
        if name != call.name:  # a stored call (repaired when prepared) whose tool was renamed since
            return f"No tool named {call.name!r}. Did you mean {name!r}?"
        return tool.check_arguments(call)

    def _repaired(self, call: ToolCall) -> ToolCall:
        """``call`` with its tool's name when the model missed it only in case or
        separators (``Search_Web``, ``functions.search_web``): a typo, not another intent.
        An ambiguous miss is left for ``_call_problem`` to tell the model."""
        try:
            _, name = self.tools.resolve_tool(call.name, among=self._offered_names())
        except ToolNotFoundError:
            return call
        return call if name == call.name else ToolCall(call.id, name, call.input, call.parse_error)

    def _offered_names(self) -> list[str]:
        names = self.tools.names()
        return [n for n in names if self.allowed_tools is None or n in self.allowed_tools]

    def _recheck_permissions(self, state: RunState, prepared: list[ToolEntry]) -> Delta | None:
        """Permissions can change between prepare and dispatch (or across a resume)."""
        delta = Delta(Phase.PREPARE_TOOLS)
        for entry in prepared:
            problem = self._call_problem(entry.call, entry.index)
            if problem is not None:
                delta = delta.then(
                    self._complete(state, entry, ToolResult(entry.call.id, problem, True), None)
                )
                continue
            level = self.permissions.get_effective_permission(
                entry.call.name, self.tools.get(entry.call.name)
            )
            if level is PermissionLevel.DENY:
                delta = delta.then(self._deny(state, entry))
            elif level is PermissionLevel.ASK and not entry.approved and not self._granted(entry.call):
                delta = delta.then(self._ask(state, entry))
        return delta if delta.tools else None

    def _deny(self, state: RunState, entry: ToolEntry) -> Delta:
        return self._complete(state, entry, ToolResult(entry.call.id, PERMISSION_DENIED, True), None)

    def _ask(self, state: RunState, entry: ToolEntry) -> Delta:
        # Asked at once in a plain run (the approval callback); otherwise announced with
        # approval_required when the run stops to wait.
        return Delta(Phase.PREPARE_TOOLS, tools=[entry.moved(status=ToolStatus.APPROVAL)])

    def _complete(
        self,
        state: RunState,
        entry: ToolEntry,
        result: ToolResult,
        phase: Phase | None,
        *,
        dispatched: bool = False,
    ) -> Delta:
        """A call's final result. One that never ran (denied, invalid) is announced as
        started and complete too, so every call reads the same on the event stream."""
        moved = entry.moved(status=ToolStatus.COMPLETED, result=result)
        events = []
        if not dispatched:
            events.append(self._tool_event(state, RunEventType.TOOL_CALL_START, moved, moved.call))
            events.append(self._tool_event(state, RunEventType.TOOL_CALL_COMPLETE, moved, moved.call))
        events.append(self._tool_event(state, RunEventType.TOOL_RESULT, moved, result))
        return Delta(phase or Phase.PREPARE_TOOLS, tools=[moved], events=events)

    def _next_model_call(self, state: RunState, results: list[dict[str, Any]]) -> Delta:
        iteration = state.iteration + 1
        limit = self.limits.max_iterations
        if limit and iteration >= limit:
            if not self.limits.final_answer_on_limit:
                delta = self.fail(
                    state,
                    MaxIterationsError(
                        f"the run reached its maximum iterations, {limit} model calls "
                        "(Limits.max_iterations); raise the limit, or set "
                        "Limits(final_answer_on_limit=True) to end with the model's account"
                    ),
                )
                delta.messages = results
                return delta
            notice = {"role": "user", "content": FINAL_ANSWER_NOTICE}
            return Delta(
                Phase.PREPARE_MODEL_CALL, messages=[*results, notice], run=RunPatch(iteration=iteration)
            )
        return Delta(Phase.PREPARE_MODEL_CALL, messages=results, run=RunPatch(iteration=iteration))

    def _exhausted(self, state: RunState, reason: str, output: str) -> Delta:
        """A recovery made as often as a run may: the run fails, keeping the output so far,
        its stop reason the recovery's (as 0.9.1)."""
        error = RecoveryExhaustedError(f"Recovery exhausted: {reason}")
        return self.fail(state, error, output=output, stop_reason=reason)

    def _finish(self, state: RunState, status: RunStatus, stop_reason: str, output: str) -> Delta:
        delta = Delta(Phase.FINISH, run=RunPatch(status=status, stop_reason=stop_reason, output=output))
        if status is RunStatus.COMPLETED:
            delta.events.append(self._event(state, RunEventType.TURN_COMPLETE, stop_reason))
        delta.events.append(self._run_result_event(state, delta))
        return delta

    def _wait(self, state: RunState) -> Delta:
        """Stop ``awaiting_input``, announcing every call that waits for a decision."""
        delta = Delta(state.phase, run=RunPatch(status=RunStatus.AWAITING_INPUT, stop_reason=""))
        for entry in state.entries():
            pending = entry.pending()
            if pending is not None:
                waiting = pending.status == "approval"
                kind = RunEventType.APPROVAL_REQUIRED if waiting else RunEventType.RECOVERY_REQUIRED
                delta.events.append(self._event(state, kind, pending.to_dict()))
        delta.events.append(self._run_result_event(state, delta))
        return delta

    def _stop(self, state: RunState, status: RunStatus, stop_reason: str) -> Delta:
        # No ``waiting`` event here: that type is the slow-model notice (ProgressPolicy);
        # a stop for approval is told by its approval_required / recovery_required events.
        delta = Delta(state.phase, run=RunPatch(status=status, stop_reason=stop_reason))
        delta.events.append(self._run_result_event(state, delta))
        return delta

    def _run_result_event(self, state: RunState, delta: Delta) -> RunEvent:
        preview = copy.copy(state)
        preview.messages = []
        preview.tools = dict(state.tools)
        preview.apply(Delta(delta.phase, tools=delta.tools, run=delta.run))
        return self._event(state, RunEventType.RUN_RESULT, preview.result())

    def _event(self, state: RunState, kind: RunEventType, data: Any) -> RunEvent:
        # As in harnessx 0.9.1: the step is the iteration (from 1), the attempt the model call's.
        return RunEvent(
            kind, data, state.session_id, state.run_id, step_id(state.iteration), str(state.attempt)
        )

    def _tool_event(self, state: RunState, kind: RunEventType, entry: ToolEntry, data: Any) -> RunEvent:
        return RunEvent(
            kind, data, state.session_id, state.run_id, step_id(entry.iteration), str(entry.attempt)
        )


def expect_waiting(state: RunState, key: str, status: ToolStatus) -> None:
    """Refuse a decision that does not apply: ``UnknownExecutionKey`` when no call of the run
    waits with ``key``, ``ResolutionError`` when it waits for the other kind of decision."""
    entry = state.tools.get(key)
    if entry is None or entry.status not in (ToolStatus.APPROVAL, ToolStatus.UNCERTAIN):
        raise UnknownExecutionKey(key, f"no tool call of run {state.run_id} waits with execution key {key!r}")
    if entry.status is not status:
        if status is ToolStatus.APPROVAL:
            raise ResolutionError(
                f"tool call {key!r} does not await approval: its outcome is uncertain; settle it with "
                "resolve_tool(result=..., retry=True or abort=True)"
            )
        raise ResolutionError(
            f"tool call {key!r} has no uncertain outcome: it awaits approval; use approve() or decline()"
        )


def truncation_recoveries(state: RunState) -> int:
    """How many replies of this run were cut off at their budget and asked again: each one is
    followed by ``CONTINUE_NOTICE`` or by ``CUT_OFF_CALL`` answers (derived from the
    conversation, so it needs nothing stored beside it)."""
    own = state.messages[state.history_length :]
    return sum(
        1
        for before, after in itertools.pairwise(own)
        if before.get("role") == "assistant" and _is_recovery(after)
    )


def continued_output(state: RunState, *, paused: bool = True) -> str:
    """The text of this run's replies that were cut off and continued (and with ``paused``,
    of those that paused their turn), in order: the start of the output the reply that
    finishes them completes."""
    own = state.messages[state.history_length :]
    return "".join(
        str(before.get("content") or "")
        for before, after in itertools.pairwise(own)
        if before.get("role") == "assistant"
        and (
            (after.get("role") == "user" and after.get("content") == CONTINUE_NOTICE)
            or (paused and after.get("role") == "assistant")
        )
    )


def paused_turns(state: RunState) -> int:
    """How many of this run's paused turns were continued: a paused reply is the one reply
    the next reply directly follows (continuing it adds no message)."""
    own = state.messages[state.history_length :]
    return sum(
        1
        for before, after in itertools.pairwise(own)
        if before.get("role") == "assistant" and after.get("role") == "assistant"
    )


def empty_nudges(state: RunState) -> int:
    """How many times this run's model was asked to go on after an empty reply."""
    own = state.messages[state.history_length :]
    return sum(1 for m in own if m.get("role") == "user" and m.get("content") == EMPTY_NOTICE)


def _replied(state: RunState) -> bool:
    """Whether the run's last message is the model's reply (not so after an empty one)."""
    own = state.messages[state.history_length :]
    return bool(own) and own[-1].get("role") == "assistant"


def _is_recovery(message: dict[str, Any]) -> bool:
    content = message.get("content")
    if message.get("role") == "user":
        return content == CONTINUE_NOTICE
    return message.get("role") == "tool" and content == CUT_OFF_CALL


def step_id(iteration: int) -> str:
    """An event's step: the iteration counted from 1, as in execution keys."""
    return str(iteration + 1)


def _tool_retry(tool: ToolDefinition | None) -> ToolRetry:
    """The retry settings a call records with it."""
    retry = tool.retry if tool is not None else None
    return retry if isinstance(retry, ToolRetry) else ToolRetry()


def _tool_message(entry: ToolEntry, max_chars: int) -> dict[str, Any]:
    """The answer the model reads: the result, or when it is longer than ``max_chars`` what
    ``shown_result`` makes of it (the whole text stays on the tool entry, for
    ``read_tool_result``). Made once, as the step's results are committed: a run resumed
    later reads it from its messages, whatever this build would make of it."""
    result = entry.result or ToolResult(entry.call.id, "", True)
    content = result.content
    if len(content) > max_chars:
        content = shown_result(entry.call.id, content, max_chars)
    return {
        "role": "tool",
        "tool_call_id": entry.call.id,
        "name": entry.call.name,
        "content": content,
        "is_error": result.is_error,
    }


def _unanswered(call: ToolCall, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": text, "is_error": True}


def _unique_ids(calls: list[ToolCall]) -> list[ToolCall]:
    """Give every call of one reply a distinct, non-empty id (execution keys depend on it)."""
    seen: set[str] = set()
    unique = []
    for index, call in enumerate(calls):
        call_id = call.id or f"call_{index}"
        if call_id in seen:
            call_id = f"{call_id}_{index}"
        seen.add(call_id)
        unique.append(ToolCall(call_id, call.name, call.input, call.parse_error))
    return unique


def model_iterations(state: RunState) -> int:
    """The iterations a run began, as 0.9.1 counts them (``GuardrailsEngine.record_iteration``,
    once its checks let a model call go ahead): one per model call, the failed one included,
    but not the call the cost limit refused before it was made."""
    refused = state.status is RunStatus.FAILED and (state.error or {}).get("type") == "CostLimitError"
    return state.iteration if refused else state.iteration + 1
