"""The activities of the session workflow: everything that touches the world.

Each one builds the run's agent from the worker's registry and performs one effect through
the same ``Driver`` methods as the other bindings (``model_request``/``model_response``,
``invoke_tool``, ``processed_result``), so hooks, middleware, streaming and the tool's own
retries behave as everywhere else. None of them decides anything: they report outcomes,
and the workflow turns each into the engine's transition.

Model and tool activities heartbeat from a side task while they work, so a worker that
dies is noticed within the heartbeat timeout and Temporal schedules the next attempt on
another worker (or, for a ``manual`` tool, none: the workflow makes the call uncertain).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from harnessx._agent import Agent
from harnessx._driver import Driver, served_by
from harnessx._engine import step_id
from harnessx._errors import ConfigurationError, ContextOverflowError
from harnessx._events import RunEvent, RunEventType
from harnessx._extensions import turn_completed, turn_ended, turn_started
from harnessx._hooks import HookEvent
from harnessx._logging import log_context
from harnessx._overflow import condense_if_due, is_context_overflow, recover_overflow
from harnessx._rate_gate import RateGate
from harnessx._registry import AgentRef, AgentRegistry
from harnessx._results import RunResult, ToolResult
from harnessx._state import Delta, RunState
from harnessx._tools import RetryWanted
from harnessx.providers._base import StopReason, TokenUsage
from harnessx.temporal._codec import jsonable, response_to_dict, state_from_dict
from harnessx.temporal._events import EventSink
from harnessx.temporal._workflow import (
    ACTIVITY_MODEL,
    ACTIVITY_OUTCOME,
    ACTIVITY_PUBLISH,
    ACTIVITY_RESULT,
    ACTIVITY_TOOL,
    ACTIVITY_TURN,
    dispatch_id,
)

if TYPE_CHECKING:
    from harnessx.temporal._worker import TemporalWorkerMetrics

__all__ = ["SessionActivities"]

logger = logging.getLogger("harnessx.temporal.activities")


class _DeltaPublisher:
    """The committer a model activity's driver streams into: text deltas go to the event
    sink at once; the activity commits nothing (the workflow does)."""

    def __init__(self, events: EventSink) -> None:
        self.events = events
        self.broken = False

    async def commit(self, state: RunState, delta: Delta) -> None:  # pragma: no cover - unused
        raise AssertionError("a Temporal activity commits nothing; the workflow does")

    async def confirm(self) -> None:
        return None  # no lease to confirm: Temporal decides which worker runs an activity

    async def flush(self) -> None:
        return None  # each event is published as it comes

    async def pending_cancel(self) -> bool:
        return False  # the workflow receives a cancel, as a signal

    async def provisional(self, state: RunState, event: RunEvent) -> None:
        if self.broken:
            return
        try:
            await self.events.publish(state.run_id, [event])
        except Exception as exc:
            # Streamed text is provisional: the run goes on without it (the reply's
            # text_complete carries the whole text), and this attempt stops streaming.
            self.broken = True
            logger.warning("streaming text of run %s stopped: %s", state.run_id, exc)


class _ModelCommitter(_DeltaPublisher):
    """A model activity's committer: streams text deltas as ``_DeltaPublisher`` does, and
    records what condensing commits (a view message, with the summary's usage) for the
    workflow, which commits it from the activity's result before the reply: the history
    holds the condensation, so every replay shows the conversation as the model saw it."""

    def __init__(self, events: EventSink) -> None:
        super().__init__(events)
        self.condensed: list[dict[str, Any]] = []

    async def commit(self, state: RunState, delta: Delta) -> None:
        if delta.tools or delta.events or delta.phase is not state.phase:
            raise AssertionError("a model activity commits only condensations; the workflow does the rest")
        usage = delta.run.usage
        self.condensed.append(
            {
                "messages": jsonable(delta.messages),
                "usage": usage.to_dict() if isinstance(usage, TokenUsage) else None,
            }
        )


class _ModelDriver(Driver):
    """The driver of a model activity: a condensation's ``CONTEXT_CONDENSED`` hook goes with
    the condensation to the workflow, which fires it once it has committed it, as the driver
    fires it after its commit."""

    committer: _ModelCommitter

    async def hook(self, event: HookEvent, **data: Any) -> None:
        if event is HookEvent.CONTEXT_CONDENSED and self.committer.condensed:
            self.committer.condensed[-1]["hook"] = data
            return
        await super().hook(event, **data)


class SessionActivities:
    """The activities a Temporal worker registers, bound to its registry and event sink."""

    def __init__(
        self,
        registry: AgentRegistry,
        events: EventSink,
        *,
        metrics: TemporalWorkerMetrics | None = None,
        rates: RateGate | None = None,
    ) -> None:
        self.registry = registry
        self.events = events
        self.metrics = metrics
        # The fleet's model rate limits, from a store the workers share (TemporalBackend's
        # rate_limits): each model activity reserves its call's start, as a pool worker does.
        self.rates = rates
        self._agents: dict[str, Agent] = {}

    @contextlib.contextmanager
    def rate_waits_counted(self) -> Iterator[None]:
        """While the worker runs, its metrics count the model calls its rate gate makes wait
        (the gate is this process's for the store, so only while this worker uses it)."""
        rates, metrics = self.rates, self.metrics
        if rates is None or metrics is None:
            yield
            return
        rates.observers.append(metrics.rate_waits.observe)
        try:
            yield
        finally:
            rates.observers.remove(metrics.rate_waits.observe)

    def definitions(self) -> list[Callable[..., Any]]:
        return [self.model, self.tool, self.result, self.publish, self.outcome, self.turn]

    async def aclose(self) -> None:
        if self.rates is not None:
            await self.rates.flush()  # the tokens the last calls owe the buckets (logged if not)
        agents, self._agents = list(self._agents.values()), {}
        for agent in agents:
            with contextlib.suppress(Exception):
                await agent.aclose()

    def _agent(self, ref: str) -> Agent:
        """One agent per reference and worker: its provider (and connections) are shared by
        the runs this worker serves, as in the pool."""
        agent = self._agents.get(ref)
        if agent is None:
            agent = self.registry.create(AgentRef.parse(ref))
            self._agents[ref] = agent
        return agent

    @contextlib.contextmanager
    def _tracked(self, kind: str, state: RunState) -> Iterator[None]:
        """Metrics and log context of one activity attempt (every line names the run)."""
        info = activity.info()
        metrics = self.metrics
        with log_context(session_id=state.session_id, run_id=state.run_id, attempt=info.attempt):
            if metrics is None:
                yield
                return
            if info.attempt > 1:
                metrics.retries.labels(kind=kind).inc()
            active = metrics.active.labels(kind=kind)
            active.inc()
            started = time.monotonic()
            outcome = "error"
            try:
                yield
                outcome = "ok"
            finally:
                active.dec()
                metrics.duration.labels(kind=kind).observe(time.monotonic() - started)
                metrics.activities.labels(kind=kind, outcome=outcome).inc()

    @contextlib.asynccontextmanager
    async def _heartbeating(self, args: dict[str, Any]) -> AsyncIterator[None]:
        # Four beats per heartbeat timeout (the session's setting), at most every 2 s: a
        # cancellation reaches the activity with a beat's answer. The SDK throttles what it
        # actually sends to the server.
        every = max(0.05, min(2.0, float(args.get("heartbeat_timeout", 10)) / 4))

        async def beat() -> None:
            while True:
                activity.heartbeat()
                await asyncio.sleep(every)

        task = asyncio.create_task(beat())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _driver(
        self,
        agent: Agent,
        committer: Any = None,
        fencing_token: int | None = None,
        kind: type[Driver] = Driver,
    ) -> Driver:
        return kind(
            engine=agent.engine(durable=True),
            settings=agent.run_settings(),
            provider=lambda: agent.provider,
            committer=committer or _DeltaPublisher(self.events),
            fencing_token=fencing_token,
            rates=self.rates,
            # The workflow records every boundary and announces its CHECKPOINT.
            checkpoints=False,
        )

    # ---------------------------------------------------------------- model

    @activity.defn(name=ACTIVITY_MODEL)
    async def model(self, args: dict[str, Any]) -> dict[str, Any]:
        state = state_from_dict(args["state"])
        with self._tracked("model", state):
            return await self._model(state, args)

    async def _model(self, state: RunState, args: dict[str, Any]) -> dict[str, Any]:
        """The model's reply to the run's conversation, or the error it failed with.

        An attempt after the first (the worker running the last one was lost) first tells
        followers to drop the text it streamed (``attempt_reset``)."""
        info = activity.info()
        agent = _definition(self._agent, str(args["agent"]))
        step = step_id(state.iteration)

        async def reset(attempt: int, label: str) -> None:
            # Followers drop what the failed attempt streamed.
            event = RunEvent(
                RunEventType.ATTEMPT_RESET,
                {"attempt": attempt},
                state.session_id,
                state.run_id,
                step,
                str(attempt),
                event_id=f"{state.run_id}:reset:{info.workflow_run_id}:{info.activity_id}:{label}",
            )
            await self.events.publish(state.run_id, [event])

        if info.attempt > 1:  # the worker running the last attempt was lost
            await reset(info.attempt - 1, str(info.attempt))
        # Condensing (Limits.max_context_tokens, a request refused as too long) happens here,
        # as the driver does it, when the workflow asks for it (its patch marker). A
        # condensation goes back to the workflow at once, without the call: it commits it
        # (and fires its hook), then asks for the call, not counted again, as the driver
        # calls the model right after condensing.
        condensing = bool(args.get("condense"))
        committer = _ModelCommitter(self.events)
        driver = self._driver(agent, committer, kind=_ModelDriver)
        driver.last_measured = args.get("last_measured")
        driver.overflow_retried = bool(args.get("overflow_retried"))

        async def attempting(attempt: int) -> None:
            return None

        admission = None
        request = None

        async def retrying(attempt: int, exc: BaseException) -> None:
            await driver.vendor_refused(admission, exc)  # a 429's Retry-After pauses the bucket
            await reset(attempt, f"{info.attempt}.{attempt}")

        async with self._heartbeating(args):
            try:
                if condensing and args.get("count", True):
                    await condense_if_due(driver, state)
                    if committer.condensed:
                        return {"again": "condensed", "condensed": committer.condensed}
                request = await driver.model_request(state)
                # Under the fleet's rate limits (when the worker has them), the call waits
                # for its start here, heartbeating, with no request open to the vendor. The
                # wait is a waiting event; cancelling the activity ends it.
                admission, _ = await driver.admit_call(state, request)
                # Transient failures are retried here, under the agent's RetryPolicy, as in
                # the other bindings.
                reply = await driver.model_reply(state, request, attempting=attempting, retrying=retrying)
                driver.settle_call(admission, reply)
                response = await driver.processed_response(reply)
                # Tool middleware is agent code, so it runs here too: the workflow prepares
                # the calls as they come back.
                response.tool_calls = await driver.prepared_calls(list(response.tool_calls))
            except Exception as failure:
                # The run fails with this error, as in the other bindings. Reported as a
                # value, so Temporal does not call the model again.
                exc: BaseException = failure
                await driver.vendor_refused(admission, exc)
                if condensing and request is not None and is_context_overflow(exc):
                    try:
                        if await recover_overflow(driver, state, exc, request):
                            # Room made (or a refusal taken as spurious): the workflow commits
                            # what was condensed and asks again, as the driver's loop does.
                            return {
                                "again": "overflow",
                                "condensed": committer.condensed,
                                "overflow_retried": driver.overflow_retried,
                            }
                    except ContextOverflowError as overflow:
                        exc = overflow
                logger.warning("model call for run %s failed: %s", state.run_id, exc)
                await agent.hooks.fire(HookEvent.ERROR, agent, error=str(exc))
                return {"error": {"type": type(exc).__name__, "message": str(exc)}}
        await agent.hooks.fire(
            HookEvent.LLM_RESPONSE,
            agent,
            response=response,
            stop_reason=response.stop_reason,
            provider=served_by(agent.provider),
        )
        # The budgets a RECOVERY hook names: the workflow decides whether the reply is
        # recovered (the engine's rule, as the driver does after its commit) and fires it.
        budgets: dict[str, int | None] = {"request": request.max_tokens}
        if response.stop_reason == StopReason.MAX_TOKENS:
            budgets["raised"] = await driver.raised_budget(state)
        # The attempt that answered labels the run's events from here on, as in the driver.
        return {"response": response_to_dict(response), "attempt": state.attempt, "budgets": budgets}

    # ---------------------------------------------------------------- tools

    @activity.defn(name=ACTIVITY_TOOL)
    async def tool(self, args: dict[str, Any]) -> dict[str, Any]:
        state = state_from_dict(args["state"])
        with self._tracked("tool", state):
            return await self._tool(state, args)

    async def _tool(self, state: RunState, args: dict[str, Any]) -> dict[str, Any]:
        """Run one dispatched tool call and return its raw result.

        The call's attempt counts every dispatch and every Temporal retry (a lost worker's
        and a transient failure's); it is also the
        fencing token ``current_tool_context()`` carries (it only grows for one execution
        key, so a late effect of a lost attempt can be refused by a ledger).

        The outcome is recorded in the event sink before it is returned: if the Temporal
        server loses this attempt's completion (an overloaded server drops the write), it
        times the attempt out and starts another of the same dispatch, on any worker, and
        that one returns the recorded outcome instead of running the tool again."""
        key = str(args["key"])
        info = activity.info()
        try:
            agent = _definition(self._agent, str(args["agent"]))
        except ApplicationError as exc:
            return {"not_started": {"type": exc.type or "ConfigurationError", "message": exc.message}}
        entry = state.tools[key]
        attempt = entry.attempt + info.attempt - 1
        dispatch = dispatch_id(info.workflow_id or "", info.workflow_run_id or "", info.activity_id)
        async with self._heartbeating(args):
            # Only a later attempt can find one: the first of a dispatch has nothing before it.
            recorded = await self._recorded_outcome(dispatch) if info.attempt > 1 else None
            if recorded is not None:
                logger.warning(
                    "tool call %s (%s) attempt %d: returning the outcome attempt %s recorded (its "
                    "completion never reached Temporal: the server lost it, or its worker was lost "
                    "just after the tool returned); the tool does not run again",
                    key,
                    entry.policy,
                    attempt,
                    recorded.get("attempt"),
                )
                if self.metrics is not None:
                    self.metrics.outcomes_reused.inc()
                return recorded
            state.tools[key] = entry.moved(attempt=attempt)
            driver = self._driver(agent, fencing_token=attempt)
            # One try per activity attempt: a transient failure (TransientToolError, a
            # connection error, a retried timeout or error result) is Temporal's to retry,
            # under the retry policy the workflow built from the tool's ToolRetry; the try
            # number is this dispatch's activity attempt, so a lost attempt counts too.
            # Nothing is recorded for it, so the next attempt runs the tool again.
            result = await driver.invoke_tool(state, key, try_number=info.attempt)
            if isinstance(result, RetryWanted):
                logger.warning(
                    "tool call %s (%s) attempt %d failed transiently; Temporal retries it: %s: %s",
                    key,
                    entry.policy,
                    attempt,
                    result.kind,
                    result.message,
                )
                raise ApplicationError(
                    f"tool call {key} failed transiently: {result.kind}: {result.message}",
                    type=result.kind,
                    non_retryable=False,
                )
            if isinstance(result, TimeoutError):
                # The engine decides what a call with an unknown outcome means (timed_out).
                outcome: dict[str, Any] = {
                    "timeout": str(result) or f"tool call {key} timed out",
                    "attempt": attempt,
                }
            else:
                logger.info(
                    "tool call %s (%s) attempt %d: %s",
                    key,
                    entry.policy,
                    attempt,
                    "error result" if result.is_error else "ok",
                )
                if self.metrics is not None:
                    self.metrics.tool_ended(entry.policy, result.is_error)
                outcome = {"result": result.to_dict(), "attempt": attempt}
            await self._record_outcome(dispatch, outcome)
        return outcome

    async def _recorded_outcome(self, dispatch: str) -> dict[str, Any] | None:
        """What an earlier attempt of ``dispatch`` recorded. With the sink unreachable the
        tool runs again: a ``safe``/``idempotent`` tool may (only this second fault makes
        it), and a ``manual`` one is never attempted twice."""
        try:
            return await self.events.recorded_outcome(dispatch)
        except Exception as exc:
            logger.warning("reading the outcome of %s failed; the tool runs again: %s", dispatch, exc)
            return None

    async def _record_outcome(self, dispatch: str, outcome: dict[str, Any]) -> None:
        """Record the tool's outcome for a later attempt of the same dispatch. Shielded: the
        tool has run, so a cancellation now (a drain's deadline) must not lose what it did
        for the attempt Temporal starts next. A failure is logged and the outcome returned
        all the same (only a completion lost as well would run the tool again)."""
        try:
            await asyncio.shield(self.events.record_outcome(dispatch, outcome))
        except Exception as exc:
            logger.warning("recording the outcome of %s failed: %s", dispatch, exc)

    @activity.defn(name=ACTIVITY_RESULT)
    async def result(self, args: dict[str, Any]) -> dict[str, Any]:
        """A committed raw result after the agent's result middleware."""
        state = state_from_dict(args["state"])
        with self._tracked("result", state):
            agent = _definition(self._agent, str(args["agent"]))
            key = str(args["key"])
            try:
                processed: ToolResult = await self._driver(agent).processed_result(state, key)
            except Exception as exc:
                # A result middleware that raises fails the run (a resume runs it again).
                logger.warning("result middleware failed for %s: %s", key, exc)
                return {"error": {"type": type(exc).__name__, "message": str(exc)}}
            await agent.hooks.fire(
                HookEvent.TOOL_CALL_END, agent, tool_call=state.tools[key].call, result=processed
            )
            return {"result": processed.to_dict()}

    # --------------------------------------------------------------- events

    @activity.defn(name=ACTIVITY_PUBLISH)
    async def publish(self, args: dict[str, Any]) -> int:
        """Publish a boundary's events, then fire the agent's hooks the workflow names."""
        events = [RunEvent.from_dict(e) for e in args["events"]]
        last = await self.events.publish(str(args["run_id"]), events) if events else 0
        if self.metrics is not None:
            # Every stop of a run (finished, waiting, paused) publishes its run_result: an
            # execution ended, as the pool worker counts them.
            for published in events:
                if published.type is RunEventType.RUN_RESULT and isinstance(published.data, RunResult):
                    self.metrics.runs_finished.labels(status=published.data.status.value).inc()
        hooks = args.get("hooks") or []
        if hooks:
            agent = _definition(self._agent, str(args["agent"]))
            for hook in hooks:
                event = HookEvent(hook["event"])
                data = dict(hook["data"])
                if event is HookEvent.AGENT_END:
                    data["result"] = RunResult.from_dict(data["result"])
                await agent.hooks.fire(event, agent, **data)
        return last

    @activity.defn(name=ACTIVITY_TURN)
    async def turn(self, args: dict[str, Any]) -> dict[str, str] | None:
        """Call the agent's extensions' turn callbacks of ``args["stage"]``. What an
        ``on_turn_start`` raised is returned for the workflow to fail the run with (raised,
        it would be retried); the other callbacks' failures are logged, as in the driver."""
        agent = _definition(self._agent, str(args["agent"]))
        stage = str(args["stage"])
        if stage == "start":
            try:
                await turn_started(agent, str(args.get("message") or ""))
            except Exception as exc:
                logger.warning("extension on_turn_start failed: %s: %s", type(exc).__name__, exc)
                return {"type": type(exc).__name__, "message": str(exc)}
        elif stage == "end":
            await turn_ended(agent, str(args.get("output") or ""))
        elif stage == "complete":
            await turn_completed(agent, RunResult.from_dict(args["result"]))
        return None

    @activity.defn(name=ACTIVITY_OUTCOME)
    async def outcome(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """The outcome recorded for a dispatch whose activity the workflow saw lost (a
        ``manual`` call: Temporal does not attempt it again), or ``None``."""
        dispatch = str(args["dispatch"])
        found = await self.events.recorded_outcome(dispatch)
        if found is not None:
            logger.warning(
                "tool dispatch %s was lost to Temporal after its attempt %s recorded an outcome; "
                "that is the call's outcome (it does not become uncertain)",
                dispatch,
                found.get("attempt"),
            )
            if self.metrics is not None:
                self.metrics.outcomes_reused.inc()
        return found


def _definition(build: Callable[[str], Agent], ref: str) -> Agent:
    """The agent for ``ref``; an unknown reference is a failure no retry can mend."""
    try:
        return build(ref)
    except ConfigurationError as exc:
        raise ApplicationError(str(exc), type="ConfigurationError", non_retryable=True) from None
