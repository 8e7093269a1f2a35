"""The session workflow: one per session, the engine's decisions replayed deterministically.

The workflow plays the part the driver and the store play in the SQL bindings. It keeps
the session's latest ``RunState`` in memory (Temporal's history is what makes it
durable), asks ``Engine.next_step`` what to do, and performs effects only through
activities: a model call, one activity per tool call (heartbeating; its retry policy
follows the call's replay policy), result middleware and event publishing (local
activities). Each outcome goes back through the engine's transition methods, so the
rules are the same code as everywhere else; only the recording differs.

Determinism: the engine is pure; the agent's definition comes from the worker's registry
(the factory runs here too, so it must not do I/O), and every value that comes from
outside (replies, results, ids) is an activity result or an update's argument, recorded
in the history. A changed definition under the same version label can make replay
diverge: give changed tools or permissions a new version (see docs/temporal.md).
"""

from __future__ import annotations

import asyncio
import copy
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from harnessx._agent import Agent
from harnessx._condense import view
from harnessx._driver import _fresh, checkpoint_phase
from harnessx._engine import (
    AskApproval,
    CallModel,
    CompleteResult,
    Dispatch,
    Engine,
    PrepareTools,
    Stop,
    expect_waiting,
)
from harnessx._errors import ResolutionError, UnknownExecutionKey
from harnessx._events import RunEventType
from harnessx._extensions import has_turn_callbacks
from harnessx._hooks import HookEvent
from harnessx._messages import to_blocks
from harnessx._policies import ToolRetry
from harnessx._registry import AgentRef, AgentRegistry
from harnessx._results import UNFINISHED_STATUSES, RunStatus, ToolResult
from harnessx._state import Delta, Phase, RunPatch, RunState, ToolStatus
from harnessx._tools import ReplayPolicy
from harnessx.providers._base import StopReason, TokenUsage
from harnessx.store._records import ControlRequest, control_request
from harnessx.temporal._codec import response_from_dict, state_from_dict, state_to_dict

__all__ = [
    "ACTIVITY_MODEL",
    "ACTIVITY_OUTCOME",
    "ACTIVITY_PUBLISH",
    "ACTIVITY_RESULT",
    "ACTIVITY_TOOL",
    "ACTIVITY_TURN",
    "WORKFLOW_NAME",
    "SessionWorkflowV1",
    "bind_registry",
    "dispatch_id",
    "workflow_id",
]

WORKFLOW_NAME = "harnessx.session.v1"
ACTIVITY_MODEL = "harnessx.model.v1"
ACTIVITY_TOOL = "harnessx.tool.v1"
ACTIVITY_RESULT = "harnessx.result.v1"
ACTIVITY_PUBLISH = "harnessx.publish.v1"
ACTIVITY_OUTCOME = "harnessx.outcome.v1"
ACTIVITY_TURN = "harnessx.turn.v1"

# The patch marker of firing the agent's workflow-side hooks (CHECKPOINT and the run's
# lifecycle) from the publish activity; histories recorded before it replay without them.
_HOOKS_PATCH = "harnessx-hooks-1"
_TRUNCATION_PATCH = "harnessx-truncation-recovery-1"
_EMPTY_REPLY_PATCH = "harnessx-empty-reply-1"
# The patch marker of firing the RECOVERY hooks of an empty, cut-off or paused reply (from
# the publish activity, after the reply's boundary); earlier histories replay without them.
_RECOVERY_HOOKS_PATCH = "harnessx-recovery-hooks-1"
# The patch marker of 0.9.1's rules for a paused turn (its text joins the output; at most
# MAX_PAUSE_RESUMES are continued, then the run fails); earlier histories continued every
# paused turn and kept only the last reply's text.
_PAUSE_PATCH = "harnessx-paused-turns-1"
# The patch marker of 0.9.1's reminder of an open task list after an empty reply (once a
# run, before the empty-reply notice); earlier histories sent the notice at once.
_PLAN_REMINDER_PATCH = "harnessx-plan-reminder-1"
# The patch marker of condensing on Temporal: the model activity condenses a conversation
# that no longer fits (Limits.max_context_tokens, a request refused as too long) and the
# workflow commits the condensation before the reply, or asks again; earlier histories had
# their model activities do neither.
_CONDENSING_PATCH = "harnessx-condensing-1"
# The patch marker of reading a lost manual call's recorded outcome (a local activity)
# before making it uncertain; earlier histories made it uncertain at once.
_RECORDED_OUTCOME_PATCH = "harnessx-recorded-outcome-1"
# The patch marker of 0.9.1's tool batches: a reply's serial calls take turns beside its
# concurrent ones, and a call that waited for room starts as another returns; earlier
# histories ran a serial call alone and each batch to its end before the next.
_SERIAL_BESIDE_PATCH = "harnessx-serial-beside-1"
# The patch marker of calling the extensions' turn callbacks (on_turn_start, on_turn_end,
# on_turn_complete) on the worker, as the driver calls them; earlier histories called none.
_TURN_CALLBACKS_PATCH = "harnessx-turn-callbacks-1"
# The patch marker of firing AGENT_END for a waiting run cancelled (it ends in the update,
# not in drive()), as SQLite and PostgreSQL do; earlier histories fired none there.
_CANCELLED_AGENT_END_PATCH = "harnessx-cancelled-agent-end-1"
# Everything the engine reads fits in memory; a finished run keeps only its summary.
_SUMMARY_FIELDS = ("request_id", "message")


def workflow_id(session_id: str) -> str:
    return f"harnessx-session:{session_id}"


def tool_activity_id(key: str, attempt: int) -> str:
    """The activity id of a tool call's dispatch: its execution key and dispatch attempt."""
    return f"tool:{key}#{attempt}"


def dispatch_id(workflow: str, run: str, activity: str) -> str:
    """Which dispatch of a tool call an activity attempt belongs to, as the event sink keeps
    its outcome: the same for every attempt Temporal makes of one activity, new for each
    dispatch (its activity id) and each workflow run (a run id is never reused)."""
    return f"{workflow}:{run}:{activity}"


class _Cancelled(Exception):
    """Internal: cancellation was requested while an effect ran."""


_ERROR_TYPES: dict[str, type[Exception]] = {}


def _remote_error(type_name: str, message: str) -> Exception:
    """An exception named like the one an activity reported (what ``engine.fail`` records)."""
    cls = _ERROR_TYPES.get(type_name)
    if cls is None:
        name = type_name if type_name.isidentifier() else "RemoteError"
        cls = _ERROR_TYPES.setdefault(type_name, type(name, (Exception,), {}))
    return cls(message)


def _cause(error: BaseException) -> tuple[str, str]:
    """The type and message of what failed at the bottom of an activity error."""
    inner: BaseException = error
    while getattr(inner, "cause", None) is not None:
        inner = inner.cause  # type: ignore[attr-defined]
    if isinstance(inner, ApplicationError) and inner.type:
        return inner.type, inner.message
    return type(inner).__name__, str(inner)


def _refuse(kind: str, message: str, *details: Any) -> ApplicationError:
    """An update refused: the client raises the harnessx error named ``kind`` (for
    ``UnknownExecutionKey``, ``details`` holds the key)."""
    return ApplicationError(message, *details, type=kind, non_retryable=True)


class SessionWorkflow:
    """Base of the workflow class ``session_workflow`` binds to a registry."""

    registry: AgentRegistry

    def setup(self, data: dict[str, Any]) -> None:
        self.data = data
        self.data.setdefault("requests", {})
        self.data.setdefault("runs", {})
        self.data.setdefault("event_counts", {})
        self.data.setdefault("cursors", {})
        saved = self.data.get("state")
        self.state: RunState | None = state_from_dict(saved) if saved else None
        self.busy = False
        self.control: ControlRequest | None = None
        self._engine: Engine | None = None
        self._definition: Agent | None = None
        self._lock = asyncio.Lock()
        self._tasks: list[Any] = []
        # What the driver keeps for one execution of a run, for the model activity's
        # condensing: the size the provider reported for the last request and its reply, and
        # whether a short request refused as too long was asked once more. Derived from
        # recorded activity results, so every replay has the same.
        self._last_measured: int | None = None
        self._overflow_retried = False
        # False for the call right after a condensation: the driver calls the model then
        # without counting the request again.
        self._count_next = True

    # ------------------------------------------------------------------ helpers

    @property
    def session_id(self) -> str:
        return str(self.data["session_id"])

    @property
    def settings(self) -> dict[str, Any]:
        return dict(self.data.get("settings") or {})

    def engine(self) -> Engine:
        """The rules of the session's agent, from this worker's registry (built once)."""
        if self._engine is None:
            ref = AgentRef.parse(str(self.data["agent"]))
            if ref not in self.registry:
                known = ", ".join(str(r) for r in self.registry.refs()) or "none"
                raise _refuse(
                    "ConfigurationError",
                    f"unknown agent {ref}: the workers of task queue {workflow.info().task_queue!r} have "
                    f"{known}; register it in their --agents registry",
                )
            try:
                self._definition = self.registry.create(ref)
                self._engine = self._definition.engine(durable=True)
            except Exception as exc:
                raise _refuse(
                    "ConfigurationError",
                    f"building agent {ref} failed on the worker: {type(exc).__name__}: {exc}",
                ) from None
        return self._engine

    def snapshot(self) -> dict[str, Any]:
        data = dict(self.data)
        data["state"] = state_to_dict(self.state) if self.state is not None else None
        return data

    def _seconds(self, name: str, default: float) -> timedelta:
        return timedelta(seconds=float(self.settings.get(name, default)))

    async def commit(self, delta: Delta) -> None:
        """Apply ``delta`` to the run and publish its events (numbered per run)."""
        state = self.state
        assert state is not None
        async with self._lock:
            state.apply(delta)
            counts = self.data["event_counts"]
            events = []
            for event in delta.events:
                counts[state.run_id] = counts.get(state.run_id, 0) + 1
                event.event_id = f"{state.run_id}:{counts[state.run_id]}"
                event.session_id = event.session_id or self.session_id
                events.append(event.to_dict())
            self.data["runs"].setdefault(state.run_id, {})["status"] = state.status.value
            # As the driver announces every commit of a durable run: after it is recorded.
            hooks = [
                self._hook(
                    HookEvent.CHECKPOINT,
                    session_id=state.session_id,
                    run_id=state.run_id,
                    status=state.status.value,
                    phase=checkpoint_phase(state),
                ),
                *(
                    self._hook(HookEvent.TODOS_UPDATED, **copy.deepcopy(event.data))
                    for event in delta.events
                    if event.type is RunEventType.TODOS_UPDATED
                ),
            ]
            last = await self._publish(state.run_id, events, hooks)
            if events:
                # The sink's cursor (it also numbers streamed text): where a follower is done.
                self.data["cursors"][state.run_id] = int(last)

    def _hook(self, event: HookEvent, **data: Any) -> dict[str, Any] | None:
        """A hook to fire on the worker, if the agent listens to ``event`` (its definition is
        the registry's, so this is the same on every replay)."""
        definition = self._definition
        if definition is None or not definition.hooks.has(event):
            return None
        return {"event": event.value, "data": data}

    async def fire(self, *hooks: dict[str, Any] | None) -> None:
        """Fire hooks that belong to no commit (a run starting, an iteration or a run ending)."""
        state = self.state
        assert state is not None
        await self._publish(state.run_id, [], list(hooks))

    async def _publish(self, run_id: str, events: list[dict[str, Any]], hooks: list[Any]) -> int:
        """Publish ``events`` and then fire ``hooks``, in one local activity, retried until
        the event sink takes them: a follower never misses a committed event, and a sink
        outage holds the run at this boundary. Hooks run on the worker, as every agent
        callback does (at least once: a worker lost before Temporal recorded the activity's
        end fires them again on the next)."""
        wanted = [hook for hook in hooks if hook is not None]
        # Histories recorded before hooks were fired here have no activity for them.
        if wanted and not workflow.patched(_HOOKS_PATCH):
            wanted = []
        if not events and not wanted:
            return 0
        request: dict[str, Any] = {"run_id": run_id, "events": events}
        if wanted:
            request.update(agent=self.data["agent"], hooks=wanted)
        return int(
            await workflow.execute_local_activity(
                ACTIVITY_PUBLISH,
                request,
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=5)),
            )
        )

    def _agent_args(self, state: RunState, **extra: Any) -> dict[str, Any]:
        return {
            "agent": self.data["agent"],
            "state": state_to_dict(state),
            "heartbeat_timeout": float(self.settings.get("heartbeat_timeout", 10)),
            **extra,
        }

    async def _cancellable(self, task: Any) -> Any:
        """Await an activity unless cancellation is requested first (then cancel it)."""
        self._tasks.append(task)
        try:
            await workflow.wait_condition(lambda: task.done() or self.control == "cancel")
            if not task.done():
                task.cancel()
                raise _Cancelled
            return await task
        finally:
            self._tasks.remove(task)

    # ------------------------------------------------------------------ driving

    async def main(self) -> None:
        while True:
            await workflow.wait_condition(
                lambda: self.state is not None and self.state.status is RunStatus.RUNNING
            )
            self.busy = True
            try:
                await self.drive()
            finally:
                self.busy = False
                self.control = None
            if workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(
                    lambda: (
                        workflow.all_handlers_finished()
                        and (self.state is None or self.state.status is not RunStatus.RUNNING)
                    )
                )
                workflow.continue_as_new(self.snapshot())

    async def drive(self) -> None:
        state = self.state
        assert state is not None
        self._last_measured, self._overflow_retried, self._count_next = None, False, True
        try:
            engine = self.engine()
        except ApplicationError as exc:
            # Nothing of the agent's can run here: the run fails saying so (any engine can
            # record that).
            await self.commit(
                Agent().engine(durable=True).fail(state, _remote_error(exc.type or "", exc.message))
            )
            return
        refused: dict[str, Any] | None = None
        if _fresh(state):
            message = state.messages[state.history_length].get("content")
            await self.fire(self._hook(HookEvent.AGENT_START, message=message))
            if self._turn_callbacks():
                refused = await self._turn("start", message=message if isinstance(message, str) else "")
        try:
            if refused is not None:
                # An extension that cannot start the turn fails the run, as in the driver.
                raise _remote_error(str(refused["type"]), str(refused["message"]))
            await self._loop(engine, state)
        except (asyncio.CancelledError, workflow.ContinueAsNewError):
            raise
        except Exception as exc:
            # A bug or a definition that cannot be built: the run fails with the reason,
            # and the session's workflow stays usable (a failed run can be resumed).
            workflow.logger.exception("run %s failed in the workflow", state.run_id)
            if not state.status.finished:
                await self.fire(self._hook(HookEvent.ERROR, error=str(exc)))
                await self.commit(engine.fail(state, exc))
        if state.status.finished:
            result = state.result()
            iteration_end = (
                self._hook(HookEvent.LOOP_ITERATION_END, iteration=state.iteration + 1)
                if result.status is RunStatus.COMPLETED
                else None
            )
            agent_end = self._hook(HookEvent.AGENT_END, result=result.to_dict())
            if not self._turn_callbacks():
                await self.fire(iteration_end, agent_end)
                return
            # The driver's order: on_turn_end, LOOP_ITERATION_END, on_turn_complete, AGENT_END.
            if result.status is RunStatus.COMPLETED:
                await self._turn("end", output=result.output)
            await self.fire(iteration_end)
            await self._turn("complete", result=result.to_dict())
            await self.fire(agent_end)

    def _turn_callbacks(self) -> bool:
        """Whether the agent's extensions have turn callbacks to call (its definition is the
        registry's, so this is the same on every replay)."""
        return has_turn_callbacks(self._definition) and workflow.patched(_TURN_CALLBACKS_PATCH)

    async def _turn(self, stage: str, **data: Any) -> dict[str, Any] | None:
        """Call the extensions' turn callbacks of ``stage`` on the worker (a local activity,
        at least once, as hooks). ``start``: what an ``on_turn_start`` raised, or ``None``."""
        request = {"agent": self.data["agent"], "stage": stage, **data}
        refused = await workflow.execute_local_activity(
            ACTIVITY_TURN,
            request,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=5)),
        )
        return dict(refused) if refused else None

    async def _loop(self, engine: Engine, state: RunState) -> None:
        while state.status is RunStatus.RUNNING:
            if self.control == "cancel":
                await self.commit(engine.cancel(state))
                return
            if self.control == "pause":
                await self.commit(engine.pause(state))
                return
            step = engine.next_step(state)
            try:
                await self.perform(engine, state, step)
            except _Cancelled:
                await self.commit(engine.cancel(state))
                return

    async def perform(self, engine: Engine, state: RunState, step: Any) -> None:
        if isinstance(step, Delta):
            iteration = state.iteration
            await self.commit(step)
            if state.iteration != iteration:  # the iteration's tool results are in
                await self.fire(self._hook(HookEvent.LOOP_ITERATION_END, iteration=iteration + 1))
        elif isinstance(step, CallModel):
            await self.call_model(engine, state)
        elif isinstance(step, PrepareTools):
            # Tool middleware ran in the model activity, on the reply's calls.
            await self.commit(engine.prepare_tools(state, list(step.calls)))
        elif isinstance(step, Dispatch):
            await self.dispatch(engine, state, step.keys)
        elif isinstance(step, CompleteResult):
            await self.complete_result(engine, state, step.key)
        elif isinstance(step, Stop):
            return
        elif isinstance(step, AskApproval):  # pragma: no cover - durable engines never ask
            raise AssertionError("a durable run does not ask an approver")
        else:  # pragma: no cover
            raise TypeError(f"unknown engine step {step!r}")

    async def call_model(self, engine: Engine, state: RunState) -> None:
        condensing: dict[str, Any] = {}
        # Histories recorded before condensing ran on Temporal replay without it.
        if workflow.patched(_CONDENSING_PATCH):
            condensing = {
                "condense": True,
                "count": self._count_next,
                "last_measured": self._last_measured,
                "overflow_retried": self._overflow_retried,
            }
            self._count_next = True
        task = workflow.start_activity(
            ACTIVITY_MODEL,
            self._agent_args(state, **condensing),
            start_to_close_timeout=self._seconds("model_timeout", 600),
            heartbeat_timeout=self._seconds("heartbeat_timeout", 10),
            # What fails here is a lost (or starved) worker: a provider's errors are values,
            # already retried under the agent's RetryPolicy. Like a safe tool's, every lost
            # attempt is retried (0: no limit), backing off while attempts keep failing; a
            # heartbeat timeout is no reason for the run to fail.
            retry_policy=RetryPolicy(
                maximum_attempts=int(self.settings.get("model_attempts", 0)),
                initial_interval=timedelta(milliseconds=100),
                maximum_interval=timedelta(seconds=30),
            ),
            cancellation_type=workflow.ActivityCancellationType.TRY_CANCEL,
        )
        try:
            outcome = await self._cancellable(task)
        except ActivityError as exc:
            kind, message = _cause(exc)
            outcome = {"error": {"type": kind, "message": message}}
        for condensed in outcome.get("condensed") or []:
            # What the activity condensed (before its call, or after the call was refused as
            # too long), committed and announced as the driver commits and announces it.
            usage = condensed.get("usage")
            patch = RunPatch(usage=TokenUsage.from_dict(usage)) if usage is not None else RunPatch()
            await self.commit(Delta(state.phase, messages=list(condensed["messages"]), run=patch))
            if condensed.get("hook") is not None:
                await self.fire(self._hook(HookEvent.CONTEXT_CONDENSED, **condensed["hook"]))
        again = outcome.get("again")
        if again:
            # Condensed before the call (which comes next, not counted again), or room made
            # for a request refused as too long (asked again, as the driver's loop does).
            self._count_next = again != "condensed"
            self._overflow_retried = bool(outcome.get("overflow_retried", self._overflow_retried))
            return
        if "error" in outcome:
            error = outcome["error"]
            await self.commit(engine.fail(state, _remote_error(error["type"], error["message"])))
            return
        response = response_from_dict(outcome["response"])
        if response.usage is not None and response.usage.input_tokens:
            self._last_measured = response.usage.input_tokens + response.usage.output_tokens
        state.attempt = int(outcome.get("attempt", state.attempt))  # (older activities: no label)
        if response.stop_reason == StopReason.MAX_TOKENS:
            # Histories recorded before a reply cut off at its budget was asked again ended
            # the run there: they replay as they were decided.
            engine.recover_truncation = workflow.patched(_TRUNCATION_PATCH)
        if not response.tool_calls and not response.text.strip():
            # Likewise for an empty reply, which ended the run before it was asked to go on.
            engine.recover_empty = workflow.patched(_EMPTY_REPLY_PATCH)
            engine.remind_plan = workflow.patched(_PLAN_REMINDER_PATCH)
        if response.stop_reason == StopReason.PAUSE_TURN:
            # And for a paused turn, which was continued without a bound.
            engine.recover_pauses = workflow.patched(_PAUSE_PATCH)
        await self.commit(engine.model_responded(state, response))
        await self._recovering(engine, state, response, dict(outcome.get("budgets") or {}))

    async def _recovering(
        self, engine: Engine, state: RunState, response: Any, budgets: dict[str, Any]
    ) -> None:
        """Fire the RECOVERY hooks of the reply just recorded, as the driver does after its
        commit: the engine decides them from the state (the same on every replay), and the
        model activity reported the budgets they name (recorded in its result)."""
        hooks = [
            self._hook(
                HookEvent.RECOVERY,
                reason=recovery.reason,
                attempt=recovery.attempt,
                reply_budget=budgets.get("raised" if recovery.raised_budget else "request"),
            )
            for recovery in engine.recoveries(state, response)
        ]
        wanted = [hook for hook in hooks if hook is not None]
        # Histories recorded before these hooks fired here have no activity for them.
        if wanted and workflow.patched(_RECOVERY_HOOKS_PATCH):
            await self.fire(*wanted)

    def _start_tool(self, state: RunState, key: str) -> Any:
        entry = state.tools[key]
        # A manual call whose activity is lost is never sent again by Temporal: its outcome
        # is unknown, and a person settles it (resolve_tool). Its tool has no ToolRetry.
        manual = entry.policy == ReplayPolicy.MANUAL
        retry = RetryPolicy(maximum_attempts=1) if manual else self._tool_retry_policy(entry.call.name)
        return workflow.start_activity(
            ACTIVITY_TOOL,
            # The whole state: a built-in tool reads the conversation (read_tool_result).
            self._agent_args(state, key=key),
            start_to_close_timeout=self._seconds("tool_timeout", 3600),
            heartbeat_timeout=self._seconds("heartbeat_timeout", 10),
            retry_policy=retry,
            cancellation_type=workflow.ActivityCancellationType.TRY_CANCEL,
            activity_id=tool_activity_id(key, entry.attempt),
        )

    def _tool_retry_policy(self, name: str) -> RetryPolicy:
        """Temporal's retry policy for a ``safe``/``idempotent`` tool: its ``ToolRetry``'s
        back-off (the same waits ``ToolRetry.wait_for`` gives), with no attempt limit.

        Two kinds of failed attempt come here: a lost worker, which is always retried
        (nothing else would finish the call), and a transient failure the activity reports
        as a retryable ``ApplicationError`` while the tool's ``ToolRetry.attempts`` allow
        another try (its last try's failure is the call's error result, as in every
        binding). The activity counts tries by its attempt, a lost one included."""
        self.engine()
        tool = self._definition.tools.get(name) if self._definition is not None else None
        tool_retry = (tool.effective_retry() if tool is not None else None) or ToolRetry()
        first = max(tool_retry.backoff_seconds, 0.01)
        return RetryPolicy(
            initial_interval=timedelta(seconds=first),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=max(first, tool_retry.max_backoff_seconds)),
            maximum_attempts=0,
        )

    async def dispatch(self, engine: Engine, state: RunState, keys: tuple[str, ...]) -> None:
        prepared = [e for e in state.entries() if e.status is ToolStatus.PREPARED]
        # Histories recorded before 0.9.1's batches replay with the batches they were
        # decided with, each call's result middleware after the batch (as a batch of one
        # call still runs: nothing differs there).
        overlap = len(prepared) > 1 and workflow.patched(_SERIAL_BESIDE_PATCH)
        if not overlap:
            keys = engine.exclusive_batch(prepared)
        tasks: dict[str, Any] = {}
        pending: dict[str, Any] = {}

        async def start(keys: tuple[str, ...]) -> None:
            # Dispatch intent first, as in every binding: the calls are 'started' before
            # any runs.
            await self.commit(engine.dispatched(state, keys))
            for key in keys:
                task = self._start_tool(state, key)
                tasks[key] = pending[key] = task
                self._tasks.append(task)

        try:
            await start(keys)
            while pending:
                await workflow.wait_condition(
                    lambda: any(t.done() for t in pending.values()) or self.control == "cancel"
                )
                if self.control == "cancel":
                    for task in pending.values():
                        task.cancel()
                    raise _Cancelled
                for key in [k for k, t in pending.items() if t.done()]:
                    task = pending.pop(key)
                    await self.commit(await self._tool_outcome(engine, state, key, task))
                    if (
                        overlap
                        and state.status is RunStatus.RUNNING
                        and state.tools[key].status is ToolStatus.RAW_COMPLETED
                    ):
                        # Each call's result middleware as it returns, as the driver does.
                        await self.complete_result(engine, state, key)
                if overlap and self.control != "pause" and state.status is RunStatus.RUNNING:
                    # The next serial call, or a concurrent one that waited for room.
                    more = engine.startable(state)
                    if more:
                        await start(more)
        finally:
            for task in tasks.values():
                self._tasks.remove(task)

    async def _tool_outcome(self, engine: Engine, state: RunState, key: str, task: Any) -> Delta:
        try:
            outcome = task.result()
        except ActivityError as exc:
            entry = state.tools[key]
            if entry.policy != ReplayPolicy.MANUAL:
                kind, message = _cause(exc)
                return engine.fail(state, _remote_error(kind, f"tool call {key} failed: {message}"))
            # Lost (worker gone, heartbeat timed out). Its attempt may have run the tool and
            # recorded the outcome before the server lost its completion: then that is the
            # call's outcome. Histories recorded before this lookup have none.
            recorded = None
            if workflow.patched(_RECORDED_OUTCOME_PATCH):
                recorded = await self._recorded_outcome(key, entry.attempt)
            if recorded is None:
                # Nothing recorded: the engine's own recovery rule makes it uncertain, with
                # the same recovery_required event as after a crash.
                recovered = engine.recover(_tool_view(state, key), may_have_streamed=False)
                assert recovered is not None
                return Delta(Phase.RAW_RESULT, tools=recovered.tools, events=recovered.events)
            outcome = recorded
        if "not_started" in outcome:
            error = outcome["not_started"]
            failed = engine.fail(state, _remote_error(error["type"], error["message"]))
            entry = state.tools[key]
            failed.tools.append(entry.moved(status=ToolStatus.PREPARED, attempt=entry.attempt - 1))
            return failed
        state.tools[key] = state.tools[key].moved(attempt=int(outcome["attempt"]))
        if "timeout" in outcome:
            return engine.timed_out(state, key, str(outcome["timeout"]))
        result = ToolResult.from_dict(outcome["result"])
        return engine.raw_result(state, key, result)

    async def _recorded_outcome(self, key: str, attempt: int) -> dict[str, Any] | None:
        """The outcome a lost attempt of this dispatch recorded in the event sink, if any.
        A sink that does not answer leaves the call uncertain (a person settles it)."""
        info = workflow.info()
        dispatch = dispatch_id(info.workflow_id, info.run_id, tool_activity_id(key, attempt))
        try:
            found = await workflow.execute_local_activity(
                ACTIVITY_OUTCOME,
                {"dispatch": dispatch},
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=3, maximum_interval=timedelta(seconds=2)),
            )
        except ActivityError as exc:
            workflow.logger.warning("reading the outcome of %s failed; it is uncertain: %s", dispatch, exc)
            return None
        return dict(found) if found else None

    async def complete_result(self, engine: Engine, state: RunState, key: str) -> None:
        outcome = await workflow.execute_local_activity(
            ACTIVITY_RESULT,
            self._agent_args(state, key=key),
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
        )
        if "error" in outcome:
            error = outcome["error"]
            await self.commit(engine.fail(state, _remote_error(error["type"], error["message"])))
            return
        await self.commit(engine.completed_result(state, key, ToolResult.from_dict(outcome["result"])))

    # ---------------------------------------------------------------- requests

    def run_record(self, run_id: str) -> dict[str, Any]:
        state = self.state
        record = dict(self.data["runs"].get(run_id) or {})
        if state is not None and state.run_id == run_id:
            record["result"] = state.result().to_dict()
            record["status"] = state.status.value
            record["phase"] = state.phase.value
            record["iteration"] = state.iteration
        record["cursor"] = self.data["cursors"].get(run_id, 0)
        record["busy"] = self.busy and state is not None and state.run_id == run_id
        return record

    def conversation(self, run_id: str) -> list[dict[str, Any]] | None:
        """The latest run's conversation as shown to the model (content blocks), as
        ``backend.latest_run()`` gives it; ``None`` for another run (the workflow keeps the
        latest run's state only)."""
        state = self.state
        if state is None or state.run_id != run_id:
            return None
        return to_blocks(view(state.messages))

    def check_submit(self, request: dict[str, Any]) -> None:
        self.engine()  # refuses an agent this worker cannot build
        prior = self.data["requests"].get(request.get("request_id") or "")
        if prior is not None:
            if self.data["runs"][prior].get("message") != request["message"]:
                raise _refuse(
                    "ConfigurationError",
                    f"request_id {request['request_id']!r} was already used in session {self.session_id} "
                    "with a different message; use a new request_id for a new request",
                )
            return
        state = self.state
        if self.busy or (state is not None and state.status in UNFINISHED_STATUSES):
            assert state is not None
            raise _refuse(
                "SessionBusyError",
                f"session {self.session_id} already has an unfinished run ({state.run_id}, "
                f"{state.status.value}): resume, resolve or cancel it first",
            )

    async def submit(self, request: dict[str, Any]) -> dict[str, Any]:
        request_id = request.get("request_id") or ""
        prior = self.data["requests"].get(request_id) if request_id else None
        if prior is not None:
            return {"run_id": prior, "existing": True}
        run_id = str(request["run_id"])
        previous = self.state
        history = list(previous.messages) if previous is not None else []
        if previous is not None:
            self._finish_summary(previous)
        state = RunState(
            session_id=self.session_id, run_id=run_id, messages=history, history_length=len(history)
        )
        if request_id:
            self.data["requests"][request_id] = run_id
        self.data["runs"][run_id] = {"request_id": request_id or None, "message": request["message"]}
        self.state = state
        self.control = None
        await self.commit(self.engine().start(state, str(request["message"])))
        return {"run_id": run_id, "existing": False}

    def _finish_summary(self, state: RunState) -> None:
        summary = self.data["runs"].setdefault(state.run_id, {})
        summary["status"] = state.status.value
        summary["result"] = state.result().to_dict()
        for name in list(summary):
            if name not in (*_SUMMARY_FIELDS, "status", "result"):
                summary.pop(name)

    async def resume(self) -> dict[str, Any]:
        state = self.state
        if state is None or (state.status.finished and state.status is not RunStatus.FAILED):
            return {"run_id": None}
        if self.busy:
            return {"run_id": state.run_id, "following": True}
        engine = self.engine()
        recovered = engine.recover(state, may_have_streamed=False)
        if recovered is not None:
            await self.commit(recovered)
        reopened = engine.reopen(state)
        if reopened is not None:
            await self.commit(reopened)
        self.control = None
        return {"run_id": state.run_id}

    def check_decision(self, request: dict[str, Any]) -> None:
        state = self.state
        key = str(request["key"])
        wanted = ToolStatus.APPROVAL if request["kind"] == "approve" else ToolStatus.UNCERTAIN
        if state is None:
            raise _refuse("UnknownExecutionKey", f"session {self.session_id} has no run to decide for", key)
        try:
            expect_waiting(state, key, wanted)  # the refusals a store-backed runtime gives
        except (UnknownExecutionKey, ResolutionError) as exc:
            raise _refuse(type(exc).__name__, str(exc), key) from None
        if self.busy:
            raise _refuse(
                "RuntimeStateError",
                f"run {state.run_id} is being driven; decide once it waits (its result says so)",
            )

    async def decide(self, request: dict[str, Any]) -> None:
        state = self.state
        assert state is not None
        engine = self.engine()
        key = str(request["key"])
        if request["kind"] == "approve":
            await self.commit(engine.approve(state, key, bool(request["allow"])))
            return
        result = ToolResult.from_dict(request["result"]) if request.get("result") else None
        delta = engine.resolve(
            state, key, result=result, retry=bool(request.get("retry")), abort=bool(request.get("abort"))
        )
        await self.commit(delta)

    async def set_control(self, request: dict[str, Any]) -> None:
        action = control_request(request["action"])
        state = self.state
        if action is None or state is None or state.status not in UNFINISHED_STATUSES:
            return  # an action no client sends is ignored
        if self.busy:
            self.control = action
            if action == "cancel":
                for task in list(self._tasks):
                    task.cancel()
                # Cancellation interrupts model calls and tool waits: wait for the run to stop.
                await workflow.wait_condition(lambda: not self.busy)
            return
        engine = self.engine()
        if action == "cancel":
            await self.commit(engine.cancel(state))
            if state.status.finished:
                # A waiting run ended here, not in drive(): its end is announced as a driven
                # run's is (the extensions' on_turn_complete, then AGENT_END).
                result = state.result().to_dict()
                if self._turn_callbacks():
                    await self._turn("complete", result=result)
                if workflow.patched(_CANCELLED_AGENT_END_PATCH):
                    await self.fire(self._hook(HookEvent.AGENT_END, result=result))
        elif state.status is RunStatus.RUNNING:  # pragma: no cover - a running run is busy
            await self.commit(engine.pause(state))

    def request_pause(self, request: dict[str, Any]) -> None:
        """A client stopped (``stop()``): its run pauses at the next boundary, as a pause
        request would, unless the run has ended or another one has started since."""
        state = self.state
        run_id = request.get("run_id")
        if state is None or state.status is not RunStatus.RUNNING or (run_id and run_id != state.run_id):
            return
        # A cancel already asked for is stronger; drive() reads this at its next boundary.
        if self.control is None:
            self.control = "pause"


def _tool_view(state: RunState, key: str) -> RunState:
    """The state as a tool activity needs it: the run's ids and this one entry."""
    return RunState(
        session_id=state.session_id,
        run_id=state.run_id,
        status=state.status,
        phase=state.phase,
        iteration=state.iteration,
        tools={key: state.tools[key]},
    )


# The registry of each task queue this process's workers serve. The SDK instantiates the
# workflow class itself (module-level classes only), so an instance finds its agents by the
# task queue it runs on; the last worker built for a queue in this process sets it. A
# replayer runs on a queue of its own: it uses the registry bound to "*".
_REGISTRIES: dict[str, AgentRegistry] = {}
ANY_QUEUE = "*"


def bind_registry(task_queue: str, registry: AgentRegistry) -> None:
    _REGISTRIES[task_queue] = registry


def _registry() -> AgentRegistry:
    queue = workflow.info().task_queue
    registry = _REGISTRIES.get(queue) or _REGISTRIES.get(ANY_QUEUE)
    if registry is None:  # pragma: no cover - build_worker binds the queue first
        raise RuntimeError(f"no agent registry is bound to task queue {queue!r} in this worker")
    return registry


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class SessionWorkflowV1(SessionWorkflow):
    @workflow.init
    def __init__(self, data: dict[str, Any]) -> None:
        self.registry = _registry()
        self.setup(data)

    @workflow.run
    async def run(self, data: dict[str, Any]) -> None:
        await self.main()

    @workflow.update(name="submit")
    async def submit_update(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self.submit(request)

    @submit_update.validator
    def _validate_submit(self, request: dict[str, Any]) -> None:
        self.check_submit(request)

    @workflow.update(name="resume")
    async def resume_update(self) -> dict[str, Any]:
        return await self.resume()

    @workflow.update(name="decide")
    async def decide_update(self, request: dict[str, Any]) -> None:
        await self.decide(request)

    @decide_update.validator
    def _validate_decide(self, request: dict[str, Any]) -> None:
        self.check_decision(request)

    @workflow.update(name="control")
    async def control_update(self, request: dict[str, Any]) -> None:
        await self.set_control(request)

    @workflow.signal(name="pause")
    def pause_signal(self, request: dict[str, Any]) -> None:
        self.request_pause(request)

    @workflow.query(name="run")
    def run_query(self, run_id: str) -> dict[str, Any]:
        return self.run_record(run_id)

    @workflow.query(name="latest")
    def latest_query(self) -> dict[str, Any] | None:
        return self.run_record(self.state.run_id) if self.state is not None else None

    @workflow.query(name="conversation")
    def conversation_query(self, run_id: str) -> list[dict[str, Any]] | None:
        return self.conversation(run_id)
