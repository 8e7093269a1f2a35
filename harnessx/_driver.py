"""The driver: performs the engine's effects and commits every boundary, in order.

One loop, used unchanged by a plain ``Agent`` (in-memory log) and by ``AgentRuntime``
(a fenced store). The invariant it keeps: an effect starts only after the boundary before
it is committed — dispatch intent before a tool runs, the raw result before middleware.
It also owns the one retry path for model calls, whatever the provider, and fires the
hooks.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, assert_never, overload

import httpx

from harnessx._builtin_tools import (
    RunView,
    render_todos,
    run_view_scope,
    system_prompt_with_guidance,
    todos_timeline,
)
from harnessx._condense import view
from harnessx._config import Limits, RetryPolicy
from harnessx._context_fit import estimated_tokens, fit_context
from harnessx._engine import (
    AskApproval,
    CallModel,
    CompleteResult,
    Dispatch,
    Engine,
    PrepareTools,
    Step,
    Stop,
    step_id,
    truncation_recoveries,
)
from harnessx._errors import (
    ContextOverflowError,
    IncompleteStreamError,
    LeaseLostError,
    MalformedToolInputError,
    ProviderError,
    StorageError,
)
from harnessx._events import RunEvent, RunEventType
from harnessx._extensions import prompt_additions, turn_completed, turn_ended, turn_started
from harnessx._hooks import HookEvent, HookManager
from harnessx._journal import RunJournal
from harnessx._messages import request_messages
from harnessx._middleware import MiddlewarePipeline, ModelRequest
from harnessx._model_limits import (
    learn_model_limits,
    reply_budget,
    reply_limit_from_error,
    resolve_model_limits,
)
from harnessx._overflow import condense_if_due, is_context_overflow, recover_overflow
from harnessx._policies import ProgressPolicy, PromptCachePolicy
from harnessx._prompt_cache import build_hint, offer_cache
from harnessx._rate_gate import Admission, RateGate, bucket_of
from harnessx._results import RunResult, RunStatus, ToolResult
from harnessx._retry import is_rate_limited, is_transient, retry_after
from harnessx._runlog import Committer
from harnessx._state import Delta, Phase, RunState, ToolStatus
from harnessx._tools import PermissionManager, RetryWanted, ToolContext, ToolRegistry, tool_context_scope
from harnessx._waiting import await_with_notices
from harnessx.providers._base import (
    LLMProvider,
    ProviderResponse,
    StopReason,
    StreamChunk,
    ToolCall,
    ToolCallDelta,
    call_create,
    given_blocks,
    streams_natively,
)
from harnessx.store._records import ControlRequest

if TYPE_CHECKING:
    from harnessx._agent import Agent

__all__ = [
    "Driver",
    "RunControl",
    "RunSettings",
    "announce_checkpoint",
    "checkpoint_phase",
    "current_agent",
    "served_by",
]

logger = logging.getLogger("harnessx.driver")

# Tokens of the model's window a counted request always leaves its reply, however full.
_CONTEXT_SAFETY = 1_024

T = TypeVar("T")

_agent_context: contextvars.ContextVar[Agent | None] = contextvars.ContextVar("harnessx_agent", default=None)


def current_agent() -> Agent | None:
    """The agent whose tool call is running, or ``None`` outside one."""
    return _agent_context.get()


class RunControl:
    """Pause/cancel requests for a run being driven; waking the driver when one arrives."""

    def __init__(self) -> None:
        self.pause_requested = False
        self.pause_reason = "paused"
        self.cancel_requested = False
        self.handoff_requested = False
        self._signal = asyncio.Event()
        # Set by any request to stop (never cleared): ends a wait for model rate budget.
        self._stopping = asyncio.Event()

    def request_pause(self, reason: str = "") -> None:
        """Pause at the next boundary; ``reason`` becomes the run's stop reason (``timeout``
        for ``RuntimeConfig.max_session_duration_seconds``)."""
        if not self.pause_requested:
            self.pause_reason = reason
        self.pause_requested = True
        self._signal.set()
        self._stopping.set()

    def request_handoff(self) -> None:
        """Stop at the next boundary *without* changing the run's status (a worker drains:
        the run stays runnable for another process)."""
        self.handoff_requested = True
        self._stopping.set()

    def request_cancel(self) -> None:
        self.cancel_requested = True
        self._signal.set()
        self._stopping.set()

    def request(self, request: ControlRequest) -> None:
        """Act on a control request another process left on the session."""
        match request:
            case "pause":
                self.request_pause()
            case "cancel":
                self.request_cancel()
            case _:
                assert_never(request)

    async def wait_unless_stopped(self, seconds: float) -> bool:
        """Wait ``seconds``; ``False`` as soon as a pause, cancel or hand-off is requested."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            return True
        return False

    async def cancelled(self) -> None:
        """Returns once cancellation is requested."""
        while not self.cancel_requested:
            await self._signal.wait()
            self._signal.clear()


_TOOL_PHASES = frozenset({Phase.PREPARE_TOOLS, Phase.DISPATCH, Phase.RAW_RESULT, Phase.COMPLETED_RESULT})


def checkpoint_phase(state: RunState) -> str:
    """The phase a ``CHECKPOINT`` hook reports, in harnessx 0.9.1's names: what comes next
    (``prepare_model``, ``prepare_tools``, ``tools``, ``finish``) or ``result`` when the
    run completed."""
    phase = state.phase
    if phase is Phase.PREPARE_MODEL_CALL:
        return "prepare_model"
    if phase is Phase.MODEL_CALL:
        last = state.last_assistant() or {}
        return "prepare_tools" if last.get("tool_calls") else "finish"
    if phase in _TOOL_PHASES:
        return "tools"
    return "result" if state.status is RunStatus.COMPLETED else "finish"


async def announce_checkpoint(hooks: HookManager, agent: Agent | None, state: RunState) -> None:
    """``HookEvent.CHECKPOINT`` with exactly the keys the public contract names."""
    if hooks.has(HookEvent.CHECKPOINT):
        await hooks.fire(
            HookEvent.CHECKPOINT,
            agent,
            session_id=state.session_id,
            run_id=state.run_id,
            status=state.status.value,
            phase=checkpoint_phase(state),
        )


class _Cancelled(Exception):
    """Internal: cancellation arrived while an effect was running."""


@dataclass
class RunSettings:
    """What the driver needs from an agent definition."""

    model: str
    system_prompt: str
    max_tokens: int | None
    temperature: float | None
    tools: ToolRegistry
    permissions: PermissionManager
    hooks: HookManager
    middleware: MiddlewarePipeline
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    offered_tools: list[str] | None = None
    agent: Agent | None = None
    progress: ProgressPolicy | None = None
    limits: Limits | None = None
    prompt_cache: PromptCachePolicy | None = None


class Driver:
    """Drives one run until it finishes or stops to wait.

    ``stream`` says whether the caller follows the reply as it is written: then the model
    is called through ``provider.stream`` and its text deltas become events.
    ``checkpoints`` announces each commit with ``HookEvent.CHECKPOINT`` (a durable run's).
    """

    def __init__(
        self,
        *,
        engine: Engine,
        settings: RunSettings,
        provider: Callable[[], LLMProvider],
        committer: Committer,
        control: RunControl | None = None,
        fencing_token: int | None = None,
        journal: RunJournal | None = None,
        rates: RateGate | None = None,
        rate_hold_seconds: float | None = None,
        stream: bool = True,
        checkpoints: bool = True,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self._provider = provider
        self.committer = committer
        self.control = control or RunControl()
        self.fencing_token = fencing_token
        # A recorded run's journal (the committer writes what is noted here with each commit).
        self.journal = journal
        # Fleet-wide model rate limits (durable runs in a store): each call reserves its start.
        self.rates = rates
        # A pool run's longer wait for budget gives its worker slot back (None: it waits in
        # place); ``held`` is then the reservation the run goes back to the queue with.
        self.rate_hold_seconds = rate_hold_seconds
        self.held: Admission | None = None
        # The buckets whose reservation is kept for this run (it gave its slot back to wait
        # for budget; the worker read them as it loaded the run): its next call of each
        # takes it from the store. Every other call may come from the gate's lease.
        self.rate_holds: frozenset[str] = frozenset()
        self._admitted = False  # its first model call is an opening one (RateGate.ahead)
        self.stream = stream
        self.checkpoints = checkpoints
        self._sleep = sleep
        # A short request refused as too long is asked once more in a run (_overflow).
        self.overflow_retried = False
        # The size the provider reported for the last request and its reply (input plus
        # output tokens), so that a request clearly within the window is not counted again.
        self.last_measured: int | None = None
        # The longest a reply of this run took to start (a provider that sends its first
        # event promptly): later calls wait stream_first_event_growth times that for theirs.
        self.slowest_first_event: float | None = None
        # The provider's count of the next request, when it was counted (_overflow).
        self.counted_tokens: int | None = None

    async def commit(self, state: RunState, delta: Delta) -> None:
        """Commit ``delta``, apply it to ``state``, and announce the checkpoint (a durable
        run's; a run in memory has none) and any change of the task list."""
        await self.committer.commit(state, delta)
        await self._applied(state, delta)

    async def commit_with_next(
        self, state: RunState, delta: Delta, between: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Commit ``delta``, and with it, in the same transaction, the boundary that follows
        it when only computation lies between the two (``_pure_successor``): a round trip
        fewer, and nothing lost, since a crash before the one commit leaves the run where a
        crash before the first of two would, and everything after it is computed again.
        Each boundary is still applied and announced on its own, in order, with ``between``
        (the hooks due after ``delta``) between them, as if they had been two commits."""
        successor = self._pure_successor(state, delta)
        if successor is None:
            await self.commit(state, delta)
        else:
            await self.committer.commit(state, delta.then(successor))
            await self._applied(state, delta)
        if between is not None:
            await between()
        if successor is not None:
            iteration = state.iteration
            await self._applied(state, successor)
            await self._stepped(state, successor, iteration)

    def _pure_successor(self, state: RunState, delta: Delta) -> Delta | None:
        """The boundary the loop would commit next after ``delta``, when nothing but the
        engine's computation comes between them: no call of the step still to run, answer
        or decide, no stop or hand-off asked for, the engine's next step a ``Delta``."""
        if self.journal is not None:
            return None  # a recorded run's journal keeps a checkpoint record per boundary
        control = self.control
        if control.cancel_requested or control.pause_requested or control.handoff_requested:
            return None
        if self.held is not None:
            return None
        after = state.after(delta)
        if after.status is not RunStatus.RUNNING:
            return None
        if any(entry.status is not ToolStatus.COMPLETED for entry in after.entries()):
            return None
        try:
            step = self.engine.next_step(after)
        except Exception:
            # Whatever the engine cannot decide, it meets again once ``delta`` is committed
            # on its own, in the loop, where it failed before boundaries went together.
            return None
        return step if isinstance(step, Delta) else None

    async def _applied(self, state: RunState, delta: Delta) -> None:
        """Apply committed ``delta`` to ``state`` and fire what its commit announces."""
        state.apply(delta)
        if self.checkpoints:
            await announce_checkpoint(self.settings.hooks, self.settings.agent, state)
        for event in delta.events:
            if event.type is RunEventType.TODOS_UPDATED:
                await self._hook(HookEvent.TODOS_UPDATED, **copy.deepcopy(event.data))

    async def _stepped(self, state: RunState, step: Delta, iteration: int) -> None:
        """The hooks due once the engine's boundary ``step`` is committed (``iteration``:
        the run's before it)."""
        if step.repetition is not None:
            period, laps, tool = step.repetition
            await self._hook(HookEvent.REPETITION, period=period, laps=laps, tool=tool)
        if state.iteration != iteration:  # the iteration's tool results are in
            await self._hook(HookEvent.LOOP_ITERATION_END, iteration=iteration + 1)

    async def _hook(self, event: HookEvent, **data: Any) -> None:
        await self.settings.hooks.fire(event, self.settings.agent, **data)

    # What _overflow (the driver's condensing) uses of it.
    hook = _hook

    def provider(self) -> LLMProvider:
        return self._provider()

    async def cancellable(self, work: Awaitable[T]) -> T:
        return await self._cancellable(work)

    async def sleep(self, seconds: float) -> None:
        await self._sleep(seconds)

    @staticmethod
    def is_cancel(exc: BaseException) -> bool:
        return isinstance(exc, _Cancelled)

    async def drive(self, state: RunState) -> RunResult:
        fresh = _fresh(state)
        message = state.messages[state.history_length].get("content") if fresh else None
        if fresh:
            await self._hook(HookEvent.AGENT_START, message=message)
        try:
            if fresh:
                # Inside the try: an extension that cannot start the turn fails the run.
                await turn_started(self.settings.agent, message if isinstance(message, str) else "")
            await self._loop(state)
            if state.status in (RunStatus.PAUSED, RunStatus.AWAITING_INPUT) and (
                self.control.cancel_requested or await self.committer.pending_cancel()
            ):
                # A cancel that came while the run was pausing or beginning to wait (the
                # commit that stopped it was decided before) wins: never overtaken by a pause.
                await self.commit(state, self.engine.cancel(state))
        except (LeaseLostError, asyncio.CancelledError):
            # Fenced out or torn down: nothing more may be written for this run.
            raise
        except StorageError:
            # The store failed, after its own retries. The write that failed may or may not
            # have applied, so this state may be behind or ahead of the database: writing
            # the run's failure from it would leave a gap in its events, or a failed run with
            # tool calls in flight. The run stays running; its next holder (a worker once
            # the lease expires, or resume()) loads it from the database and recovers.
            raise
        except Exception as exc:
            logger.exception("run %s failed", state.run_id)
            if not state.status.finished:
                await self._hook(HookEvent.ERROR, error=str(exc))
                if self.journal is not None:
                    self.journal.command_failed(state, exc)
                await self.commit(state, self.engine.fail(state, exc))
        result = state.result()
        if result.status.finished:
            if result.status is RunStatus.COMPLETED:
                await turn_ended(self.settings.agent, result.output)
                await self._hook(HookEvent.LOOP_ITERATION_END, iteration=state.iteration + 1)
            await turn_completed(self.settings.agent, result)
            await self._hook(HookEvent.AGENT_END, result=result)
        return result

    async def _loop(self, state: RunState) -> None:
        while state.status is RunStatus.RUNNING:
            if self.control.cancel_requested:
                await self.commit(state, self.engine.cancel(state))
                return
            if self.control.handoff_requested or self.held is not None:
                return  # the executor queues the run again
            if self.control.pause_requested:
                await self.commit(state, self.engine.pause(state, self.control.pause_reason))
                return
            step = self.engine.next_step(state)
            try:
                await self._perform(state, step)
            except _Cancelled:
                await self.commit(state, self.engine.cancel(state))
                return

    async def _perform(self, state: RunState, step: Step) -> None:
        match step:
            case Delta():
                iteration = state.iteration
                await self.commit(state, step)
                await self._stepped(state, step, iteration)
            case CallModel():
                await self._call_model(state)
            case PrepareTools(calls=calls):
                await self._prepare_tools(state, list(calls))
            case Dispatch(keys=keys):
                await self._dispatch(state, keys)
            case CompleteResult(key=key):
                await self._complete_result(state, key)
            case AskApproval(keys=keys):
                await self._ask_approval(state, keys)
            case Stop():
                return
            case _:
                assert_never(step)

    # ------------------------------------------------------------------ model

    async def model_request(self, state: RunState) -> ModelRequest:
        """The next model call's request: the conversation as providers receive it (content
        blocks), through the request middleware. (The Temporal binding makes it in an
        activity too.)"""
        settings = self.settings
        await self._hook(HookEvent.LOOP_ITERATION_START, iteration=state.iteration + 1)
        system, offered = self.request_frame(state)
        middleware = settings.middleware
        budget = await self._fitted(await self.reply_tokens(state))
        # The conversation as shown (condensed where it was: _condense), old tool results
        # cleared to leave the reply its room in the window.
        fitted = fit_context(view(state.messages), self.context_room(budget), system, offered)
        messages, tools = await middleware.process_llm_request(
            request_messages(_with_task_reminders(fitted, state.messages)), offered
        )
        request = ModelRequest(
            model=settings.model,
            messages=messages,
            system=system,
            tools=tools,
            # As 0.9.1: unset, the budget is the model's (harnessx.models), not the vendor's.
            max_tokens=budget,
            temperature=settings.temperature,
        )
        request = await middleware.process_model_request(request)
        request.cache = build_hint(
            settings.prompt_cache, request.model, request.system or None, request.tools, request.messages
        )
        return request

    def request_frame(self, state: RunState) -> tuple[str, list[dict[str, Any]]]:
        """The next request's system prompt and the tools it offers."""
        settings = self.settings
        system = system_prompt_with_guidance(settings.system_prompt, settings.tools)
        if settings.agent is not None and settings.agent.prompt_providers:
            system = prompt_additions(system, settings.agent.prompt_providers)
        # The one last call of a run at its limit is asked for an answer, not more work.
        offered = [] if self.engine.final_call(state) else settings.tools.specs(settings.offered_tools)
        return system, offered

    async def _fitted(self, budget: int) -> int:
        """``budget`` fitted into what the counted request leaves of the model's window (as
        0.9.1: room for a reply of at least ``_CONTEXT_SAFETY`` tokens is kept); as it is when
        the request was not counted."""
        counted = self.counted_tokens
        if not counted:
            return budget
        window = (await resolve_model_limits(self.known_provider(), self.settings.model)).context_window
        room = window - counted - _CONTEXT_SAFETY
        return max(min(budget, room), min(budget, _CONTEXT_SAFETY))

    def context_room(self, reply_tokens: int) -> int | None:
        """What ``Limits.max_context_tokens`` leaves the request once the reply has its
        share (the window holds both); None without a limit."""
        limits = self.settings.limits
        window = limits.max_context_tokens if limits is not None else None
        return None if window is None else max(1, window - max(0, reply_tokens))

    async def reply_tokens(self, state: RunState) -> int:
        """The next model call's reply budget."""
        return await self._reply_budget(state, raised=truncation_recoveries(state))

    async def _reply_budget(self, state: RunState, *, raised: int) -> int:
        settings = self.settings
        return await reply_budget(self.known_provider(), settings.model, settings.max_tokens, raised=raised)

    async def admit_call(self, state: RunState, request: ModelRequest) -> tuple[Admission | None, bool]:
        """Reserve ``request``'s start under the fleet's rate limits and wait for it (no
        limits: at once). ``(admission, go)``; ``go`` is False when the call is not to be
        made now: a pause, cancel or hand-off ended the wait, or the run gives its worker
        slot back for a longer wait (``held``). Every binding calls the model through this."""
        if self.rates is None:
            return None, True
        hold = self.rate_hold_seconds
        run_id = None
        if hold is not None and self.rate_holds:  # only a pool run has a kept reservation
            bucket = bucket_of(self._provider(), request.model)
            if bucket in self.rate_holds:
                run_id = state.run_id
        opening, self._admitted = not self._admitted, True
        admission = await self.rates.admit(self._provider(), request, run_id, opening=opening)
        if run_id is not None and admission is not None:
            self.rate_holds -= {admission.bucket}  # taken (or, gone meanwhile, not there)
        if admission is None or admission.wait <= 0:
            return admission, True
        if hold is not None and not admission.held and admission.wait > hold:
            await self._give_slot_back(state, admission)
            return admission, False
        return admission, await self._wait_for_budget(state, admission)

    def settle_call(self, admission: Admission | None, response: ProviderResponse) -> None:
        """The reply's tokens settle its reservation (owed, sent off the call's path)."""
        if admission is not None and self.rates is not None and response.usage is not None:
            self.rates.settle(admission, response.usage)

    async def _call_model(self, state: RunState) -> None:
        self.counted_tokens = None
        await condense_if_due(self, state)
        request = await self.model_request(state)
        admission, go = await self.admit_call(state, request)
        if not go:
            return  # no call made: the loop acts on the stop request, or the executor requeues
        journal = self.journal

        async def attempting(attempt: int) -> None:
            if journal is not None:
                # The request is committed before the provider sees it: a crash during the
                # call still shows what was asked.
                journal.model_started(state, request.provider_kwargs())
                await self.commit(state, Delta(state.phase))

        async def retrying(attempt: int, exc: BaseException) -> None:
            if journal is not None:
                journal.model_failed(exc)
            await self.vendor_refused(admission, exc)
            # Whatever the failed attempt streamed is void; its usage may not be known.
            await self.commit(state, self.engine.attempt_reset(state, attempt))

        try:
            response = await self.model_reply(state, request, attempting=attempting, retrying=retrying)
        except _Cancelled:
            if journal is not None:
                journal.model_interrupted()
            raise
        except (LeaseLostError, StorageError):
            raise  # writing streamed text failed: the store's problem, not the model's (see drive)
        except Exception as failure:
            exc: BaseException = failure
            if journal is not None:
                journal.model_failed(exc)
            await self.vendor_refused(admission, exc)
            if is_context_overflow(exc):
                try:
                    if await recover_overflow(self, state, exc, request):
                        return  # made room (or a spurious refusal): the loop asks again
                except ContextOverflowError as overflow:
                    exc = overflow
            logger.warning("model call for run %s failed: %s", state.run_id, exc)
            await self._hook(HookEvent.ERROR, error=str(exc))
            await self.commit(state, self.engine.fail(state, exc))
            return
        self.settle_call(admission, response)
        if response.usage is not None and response.usage.input_tokens:
            self.last_measured = response.usage.input_tokens + response.usage.output_tokens
        middleware = self.settings.middleware
        if journal is not None:
            journal.model_replied(response, stage="response")
        response = await self.processed_response(response)
        if journal is not None:
            journal.model_replied(response, stage="processed")
            journal.model_replied(response, stage="completed")
        await self._hook(
            HookEvent.LLM_RESPONSE,
            response=response,
            stop_reason=response.stop_reason,
            provider=served_by(self.known_provider()),
        )
        if self.stream and middleware.rewrites_responses and response.text:
            # Middleware rewrote the reply, so it reaches the stream whole, as rewritten.
            await self._provisional(state, RunEventType.TEXT_DELTA, response.text)

        async def recovering() -> None:
            for recovery in self.engine.recoveries(state, response):
                budget = await self.raised_budget(state) if recovery.raised_budget else request.max_tokens
                await self._hook(
                    HookEvent.RECOVERY, reason=recovery.reason, attempt=recovery.attempt, reply_budget=budget
                )

        await self.commit_with_next(state, self.engine.model_responded(state, response), recovering)

    async def raised_budget(self, state: RunState) -> int:
        """The reply budget of the call after a reply of ``state``'s run is cut off at its
        budget and asked again (raised once more than the call's)."""
        return await self._reply_budget(state, raised=truncation_recoveries(state) + 1)

    async def vendor_refused(self, admission: Admission | None, exc: BaseException) -> None:
        """A vendor's own limit refused a call the fleet's limit let through (429 with
        Retry-After): the whole fleet's calls of the bucket wait that out, not only this
        call's retry (which waits it too, under the RetryPolicy)."""
        if admission is None or self.rates is None:
            return
        provider = self.known_provider()
        seconds = retry_after(exc, provider)
        if seconds is not None and is_rate_limited(exc, provider):
            await self.rates.pause(admission, seconds)

    def _waiting_event(self, state: RunState, admission: Admission, **more: Any) -> RunEvent:
        data = {
            "on": "rate_limit",
            "bucket": admission.bucket,
            "seconds": round(admission.wait, 3),
            "until": round(admission.start, 3),  # by the store's clock, like a run's not_before
            **more,
        }
        return RunEvent(
            RunEventType.WAITING,
            data,
            state.session_id,
            state.run_id,
            step_id(state.iteration),
            str(state.attempt),
        )

    async def _give_slot_back(self, state: RunState, admission: Admission) -> None:
        """A pool run's wait for budget is longer than ``rate_hold_seconds``: rather than
        keep a worker slot doing nothing, the run goes back to the queue until shortly
        before its start, its reservation kept for it (the executor does both). The event
        says so (``requeued``)."""
        await self.committer.provisional(state, self._waiting_event(state, admission, requeued=True))
        self.held = admission

    async def _wait_for_budget(self, state: RunState, admission: Admission) -> bool:
        """Wait for the start a rate limit gave this call, with nothing open to the vendor
        (the lease is renewed meanwhile), behind a ``waiting`` event that says why and until
        when. The event is written while the wait runs, so that a slow write does not make
        the call late. ``False`` if a pause, cancel or hand-off ended the wait (the
        reservation is spent)."""
        await self.committer.provisional(state, self._waiting_event(state, admission))
        written = asyncio.ensure_future(self.committer.flush())
        try:
            waited = await self.control.wait_unless_stopped(admission.remaining())
        finally:
            await written  # the committer takes one write at a time
        return waited

    async def processed_response(self, response: ProviderResponse) -> ProviderResponse:
        """The model's reply after response middleware (``after_llm_call``). Signed thinking,
        redacted thinking and the provider's own blocks must reach the next request as the
        provider sent them, so a middleware that changes them fails the run (as 0.9.1),
        rather than its next request being refused."""
        protected = _protected(given_blocks(response))
        processed = _canonical(await self.settings.middleware.process_llm_response(response))
        if _protected(given_blocks(processed)) != protected:
            raise ValueError("Response middleware cannot change signed or opaque provider content")
        return processed

    async def model_reply(
        self,
        state: RunState,
        request: ModelRequest,
        *,
        attempting: Callable[[int], Awaitable[None]],
        retrying: Callable[[int, BaseException], Awaitable[None]],
    ) -> ProviderResponse:
        """The model's reply to ``request``, with every provider's transient failures retried
        under the run's ``RetryPolicy`` (the one retry path: the providers make one attempt
        per call). ``attempting(n)`` runs before attempt ``n``; ``retrying(n, error)`` after
        attempt ``n`` failed and before the wait for the next. The last failure is raised."""
        retry = self.settings.retry
        attempt, waited, lowered, reasked = 1, 0.0, False, False
        while True:
            state.attempt = attempt
            await self._hook(
                HookEvent.LLM_REQUEST,
                system=request.system or None,
                model=request.model,
                max_tokens=request.max_tokens,
                temperature=request.temperature,
                stream=self.stream,
                message_count=len(request.messages),
                tool_count=len(request.tools),
                prefix_key=request.cache.prefix_key if request.cache and request.cache.enabled else None,
            )
            await attempting(attempt)
            try:
                return await self._cancellable(self.model_response(state, request))
            except (_Cancelled, LeaseLostError, StorageError):
                raise
            except Exception as exc:
                provider = self.known_provider()
                limit = None if lowered else self._reply_limit(exc, request, provider)
                if limit is not None:
                    # Refused for the budget, before any output: ask again within the limit
                    # the refusal named (as 0.9.1; once, and not a retry attempt).
                    lowered, request.max_tokens = True, limit
                    await self._hook(HookEvent.RECOVERY, reason="reply_limit", attempt=1, reply_budget=limit)
                    continue
                if isinstance(exc, MalformedToolInputError) and not reasked:
                    # A provider could not read a tool call's arguments, nor tell which call it
                    # was: the request was fine, the reply was not, so it is asked for once more
                    # (0.9.1's recovery; what it streamed is void, as after a failed attempt).
                    reasked = True
                    await self._hook(
                        HookEvent.RECOVERY,
                        reason="malformed_tool_input",
                        attempt=1,
                        reply_budget=request.max_tokens,
                    )
                    await retrying(attempt, exc)
                    attempt += 1
                    continue
                wait = retry.wait_for(attempt, retry_after(exc, provider))
                if self._spent(retry, attempt, exc, provider, waited, wait):
                    raise
                # Routine, and reported by the RETRY hook and attempt_reset: not a warning (a
                # program of harnessx 0.9.1 prints nothing here).
                logger.info(
                    "model call for run %s failed (%s); retrying in %.2fs (attempt %d)",
                    state.run_id,
                    exc,
                    wait,
                    attempt + 1,
                )
                await self._hook(
                    HookEvent.RETRY,
                    kind="model",
                    name=request.model,
                    attempt=attempt,
                    next_attempt=attempt + 1,
                    wait_seconds=wait,
                    error=str(exc),
                    provider=served_by(provider),
                )
                await retrying(attempt, exc)
                attempt, waited = attempt + 1, waited + wait
                if wait:
                    # A long back-off (a server's Retry-After) says so on the run stream.
                    await self._cancellable(self._noticed(state, self._sleep(wait), on="retry"))

    def _reply_limit(self, exc: BaseException, request: ModelRequest, provider: Any) -> int | None:
        """The lower reply budget ``exc`` (a refusal) allows, if it names one; a model's own
        limit is remembered for the provider, so later calls and runs ask for no more."""
        named = reply_limit_from_error(exc)
        if named is None or not 0 < named[0] < (request.max_tokens or 0):
            return None
        limit, model_limit = named
        if model_limit:
            learn_model_limits(request.model, provider=provider, max_output=limit)
        logger.info(
            "reply budget %s refused for run's model %s; asking within %d",
            request.max_tokens,
            request.model,
            limit,
        )
        return limit

    @staticmethod
    def _spent(
        retry: RetryPolicy, attempt: int, exc: BaseException, provider: Any, waited: float, wait: float
    ) -> bool:
        """Whether failed attempt number ``attempt`` was the last one ``retry`` allows. A rate
        limit gets the deeper ``rate_limit_attempts`` while the time slept stays within
        ``rate_limit_budget_seconds``."""
        if not is_transient(exc, provider) or (_timed_out(exc) and not retry.retry_on_timeout):
            return True
        limited = is_rate_limited(exc, provider)
        return retry.spent(attempt, rate_limited=limited, waited=waited, next_wait=wait)

    def known_provider(self) -> LLMProvider | None:
        """The provider, or None when there is none to be had (the model call failed on it)."""
        try:
            return self._provider()
        except Exception:
            return None

    async def _provisional(self, state: RunState, kind: RunEventType, data: Any) -> None:
        event = RunEvent(
            kind, data, state.session_id, state.run_id, step_id(state.iteration), str(state.attempt)
        )
        await self.committer.provisional(state, event)

    async def model_response(self, state: RunState, request: ModelRequest) -> ProviderResponse:
        """The model's reply; streamed text goes to the committer as provisional events."""
        provider = self._provider()
        kwargs = request.provider_kwargs()
        promptly = bool(getattr(provider, "first_event_promptly", False))
        # A provider that sends its first event as soon as the model starts is streamed even
        # when nobody follows the reply, so that the stall deadlines bound run() too (as
        # 0.9.1); others keep create() there (a gateway or a test double may have only that).
        if not self.stream and not (promptly and streams_natively(provider)):
            return await self._noticed(
                state, call_create(provider, **offer_cache(provider.create, kwargs, request.cache))
            )
        deltas = self.stream and not self.settings.middleware.rewrites_responses
        response: ProviderResponse | None = None
        chunks = self._deadlined(
            provider.stream(**offer_cache(provider.stream, kwargs, request.cache)),
            first=self._first_event_deadline(state, request, promptly, streams_natively(provider)),
            idle=self.settings.retry.stream_idle_timeout_seconds if streams_natively(provider) else None,
        )
        async for chunk in self._noticed_stream(state, chunks):
            if chunk.kind == "response":
                response = chunk.data
            elif not deltas or not chunk.data:
                continue
            elif chunk.kind in ("text_delta", "thinking_delta"):
                await self._provisional(state, RunEventType(chunk.kind), str(chunk.data))
            elif chunk.kind == "tool_call_delta" and isinstance(chunk.data, ToolCallDelta):
                await self._provisional(state, RunEventType.TOOL_CALL_DELTA, chunk.data)
        if not isinstance(response, ProviderResponse):
            raise ProviderError(
                f"{type(provider).__name__}.stream() ended without a 'response' chunk", retryable=True
            )
        return response

    def _first_event_deadline(
        self, state: RunState, request: ModelRequest, promptly: bool, native: bool
    ) -> float | None:
        """How long this attempt may wait for the stream's first event: the idle limit,
        unless the provider sends one as soon as the model starts (``first_event_promptly``;
        a quiet start elsewhere may be a model thinking). Then ``RetryPolicy.first_event_timeout``
        for the request's size and the attempt, or longer after a slow start seen in this run."""
        retry = self.settings.retry
        if not native:
            return None  # the base stream() awaits create(): nothing arrives before the end
        if not promptly:
            return retry.stream_idle_timeout_seconds
        size = estimated_tokens(request.messages, request.system, request.tools)
        deadline = retry.first_event_timeout(size, max(1, state.attempt))
        growth = float(retry.stream_first_event_growth)
        if deadline is None or not self.slowest_first_event or growth <= 1.0:
            return deadline
        learned = self.slowest_first_event * growth
        idle = retry.stream_idle_timeout_seconds
        return max(deadline, learned if idle is None else min(learned, idle))

    async def _deadlined(
        self, chunks: AsyncIterator[StreamChunk], *, first: float | None, idle: float | None
    ) -> AsyncIterator[StreamChunk]:
        """``chunks``, ended with ``IncompleteStreamError`` (retried like a dropped
        connection) when the first chunk takes longer than ``first`` or a later one longer
        than ``idle`` after the one before. Only the wait for the provider is timed, never
        the consumer's work between chunks."""
        iterator = chunks.__aiter__()
        if first is None and idle is None:
            try:
                async for chunk in iterator:
                    yield chunk
            finally:
                await _aclose(iterator)
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        limit, waiting_first = first, True
        try:
            while True:
                timer = asyncio.timeout(limit)
                try:
                    async with timer:
                        chunk = await anext(iterator)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    if not timer.expired():
                        raise  # the provider's own timeout, not a stall
                    where = "of the request" if waiting_first else "of the previous chunk"
                    raise IncompleteStreamError(
                        f"the model's stream stalled: nothing arrived within {limit:g} s {where}"
                    ) from None
                if waiting_first:
                    took = loop.time() - started
                    self.slowest_first_event = max(self.slowest_first_event or 0.0, took)
                    limit, waiting_first = idle, False
                yield chunk
        finally:
            await _aclose(iterator)

    async def _noticed(self, state: RunState, work: Awaitable[T], *, on: str = "model") -> T:
        """Await a model call (or the wait before the next attempt, ``on="retry"``), adding
        a ``waiting`` event to the run stream while it is silent (``ProgressPolicy``).
        Notices only: nothing is cancelled."""

        async def notice(kind: RunEventType, data: dict[str, Any]) -> None:
            await self._provisional(state, kind, data)

        return await await_with_notices(work, self.settings.progress, notice, on=on)

    async def _waiting_notice(self, state: RunState, seconds: float) -> None:
        await self._provisional(state, RunEventType.WAITING, {"on": "model", "seconds": round(seconds, 1)})

    async def _noticed_stream(
        self, state: RunState, chunks: AsyncIterator[StreamChunk]
    ) -> AsyncIterator[StreamChunk]:
        """A provider's stream, its silences noticed like ``_noticed``'s.

        One task reads the stream into a queue and a timer adds a tick to it when nothing
        came for a while; this task takes both from the queue in order and writes the
        notices itself, so they are ordered with the stream's own events. (A task and a
        wait per chunk cost more than the rest of the driver's work on a chunk.)"""
        policy = self.settings.progress
        if policy is None or not policy.enabled or policy.first_after_seconds is None:
            iterator = chunks.__aiter__()
            try:
                async for chunk in iterator:
                    yield chunk
            finally:
                await _aclose(iterator)
            return
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        watch = _SilenceWatch(loop, policy, queue)
        pump = asyncio.ensure_future(_pump(chunks, queue, watch))
        try:
            while True:
                kind, item = await queue.get()
                if kind == "chunk":
                    yield item
                elif kind == "tick":
                    await self._waiting_notice(state, item)
                elif kind == "failed":
                    raise item
                else:
                    return
        finally:
            watch.stop()
            if not pump.done():
                pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)

    # ------------------------------------------------------------------ tools

    async def _prepare_tools(self, state: RunState, calls: list[ToolCall]) -> None:
        await self.commit(state, self.engine.prepare_tools(state, await self.prepared_calls(calls)))

    async def prepared_calls(self, calls: list[ToolCall]) -> list[ToolCall]:
        """The model's calls after tool middleware (``before_tool_execution``)."""
        middleware = self.settings.middleware
        prepared = []
        for call in calls:
            changed = await middleware.process_tool_call(call)
            if not isinstance(changed, ToolCall) or changed.id != call.id:
                raise ValueError(
                    f"tool middleware changed call {call.id!r} into {changed!r}: it must return a "
                    "ToolCall with the same id"
                )
            prepared.append(changed)
        return prepared

    async def _dispatch(self, state: RunState, keys: tuple[str, ...]) -> None:
        tasks: dict[asyncio.Future[Any], str] = {}
        pending: set[asyncio.Future[Any]] = set()

        async def start(keys: tuple[str, ...]) -> None:
            # Dispatch intent is durable before any tool runs: a crash from here on leaves
            # the calls 'started', which recovery settles by replay policy.
            intent = self.engine.dispatched(state, keys)
            if self.journal is not None:
                self.journal.tools_dispatched(intent)
            await self.commit(state, intent)
            for key in keys:
                task = asyncio.ensure_future(self.invoke_tool(state, key))
                tasks[task] = key
                pending.add(task)

        await start(keys)
        # A failure of result middleware fails the run, but only once every call in flight
        # has returned and its raw result is committed (nothing that ran is lost).
        failure: Exception | None = None
        cancel_wait: asyncio.Future[Any] = asyncio.ensure_future(self.control.cancelled())
        try:
            while pending:
                done, _ = await asyncio.wait(pending | {cancel_wait}, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task is cancel_wait:
                        continue
                    pending.discard(task)
                    key = tasks[task]
                    outcome = task.result()
                    if isinstance(outcome, TimeoutError):
                        delta = self.engine.timed_out(state, key, str(outcome))
                    else:
                        delta = self.engine.raw_result(state, key, outcome)
                    if self.journal is not None:
                        self.journal.tools_returned(delta)
                    await self.commit(state, delta)
                    if (
                        failure is None
                        and self.engine.overlap_serial
                        and state.tools[key].status is ToolStatus.RAW_COMPLETED
                    ):
                        # Each call's result middleware runs as it returns (0.9.1's order):
                        # the next serial call sees its result.
                        try:
                            await self._complete_result(state, key)
                        except Exception as exc:
                            failure = exc
                if cancel_wait in done:
                    if self.journal is not None:
                        self.journal.tools_interrupted(state.tools[tasks[task]] for task in pending)
                    raise _Cancelled
                if failure is None and self._may_start_more():
                    # The next serial call, or a concurrent one that waited for room.
                    more = self.engine.startable(state)
                    if more:
                        await start(more)
            if failure is not None:
                raise failure
        finally:
            cancel_wait.cancel()
            for task in tasks:
                if not task.done():
                    task.cancel()

    def _may_start_more(self) -> bool:
        """Whether a batch in flight may start its calls still waiting: not once the run
        is to stop (a pause or a hand-off stops before the next call starts)."""
        control = self.control
        return (
            self.engine.overlap_serial
            and not (control.pause_requested or control.handoff_requested)
            and self.held is None
        )

    @overload
    async def invoke_tool(
        self, state: RunState, key: str, *, try_number: None = None
    ) -> ToolResult | TimeoutError: ...

    @overload
    async def invoke_tool(
        self, state: RunState, key: str, *, try_number: int
    ) -> ToolResult | TimeoutError | RetryWanted: ...

    async def invoke_tool(
        self, state: RunState, key: str, *, try_number: int | None = None
    ) -> ToolResult | TimeoutError | RetryWanted:
        """Call the tool of entry ``key`` (dispatched: its intent is committed); a timeout
        is returned, for the engine's ``timed_out``. With ``try_number``, only that one try
        of the call runs, and a transient failure with tries left comes back as
        ``RetryWanted`` (the Temporal binding retries it as an activity attempt)."""
        entry = state.tools[key]
        tool = self.settings.tools.get(entry.call.name)
        if tool is None:
            return ToolResult(entry.call.id, f"Error: tool '{entry.call.name}' is not registered", True)
        context = ToolContext(
            session_id=state.session_id,
            run_id=state.run_id,
            execution_key=key,
            attempt=entry.attempt,
            tool_name=tool.name,
            tool_call_id=entry.call.id,
            fencing_token=self.fencing_token,
        )
        agent = self.settings.agent
        if self.settings.hooks.has(HookEvent.TOOL_CALL_START):  # a copy only for a listener
            await self._hook(HookEvent.TOOL_CALL_START, tool_call=copy.deepcopy(entry.call))
        view = RunView(
            messages=lambda: _with_current_results(state),
            lookup_result=lambda result_id: self._lookup_result(state, result_id),
            max_result_chars=self.settings.limits.max_result_chars if self.settings.limits else 12_000,
        )
        # Right before the call: a dispatch whose reply came late (a stalled connection)
        # must not start a tool that another process has taken over meanwhile.
        await self.committer.confirm()
        agent_token = _agent_context.set(agent)
        try:
            with tool_context_scope(context), run_view_scope(view):
                if try_number is None:

                    async def retrying(attempt: int, wanted: RetryWanted) -> None:
                        await self._hook(
                            HookEvent.RETRY,
                            kind="tool",
                            name=tool.name,
                            attempt=attempt,
                            next_attempt=attempt + 1,
                            wait_seconds=wanted.delay,
                            error=wanted.message,
                            provider=None,
                        )

                    result = await tool.invoke(entry.call.input, entry.call.id, on_retry=retrying)
                else:
                    outcome = await tool.try_once(entry.call.input, entry.call.id, attempt=try_number)
                    if isinstance(outcome, RetryWanted):
                        return outcome
                    result = outcome
        except TimeoutError as exc:
            return exc
        finally:
            _agent_context.reset(agent_token)
        return result

    async def _lookup_result(self, state: RunState, result_id: str) -> str | None:
        """The whole text of a tool result by its call id: this run's, then the agent's
        memory (a plain run), then the store (a durable run)."""
        for entry in sorted(state.tools.values(), key=lambda e: (e.iteration, e.index), reverse=True):
            final = entry.result or entry.raw_result
            if entry.call.id == result_id and final is not None:
                return final.content
        memory = getattr(self.settings.agent, "memory", None)
        found = memory.stored_result(result_id) if memory is not None else None
        if found is not None:
            return str(found)
        lookup = getattr(self.committer, "lookup_result", None)
        return await lookup(state.session_id, result_id) if lookup is not None else None

    async def _complete_result(self, state: RunState, key: str) -> None:
        final = await self.processed_result(state, key)
        if self.settings.hooks.has(HookEvent.TOOL_CALL_END):  # a copy only for a listener
            await self._hook(
                HookEvent.TOOL_CALL_END, tool_call=copy.deepcopy(state.tools[key].call), result=final
            )
        delta = self.engine.completed_result(state, key, final)
        if self.journal is not None:
            self.journal.tools_processed(delta)
        await self.commit_with_next(state, delta)

    async def processed_result(self, state: RunState, key: str) -> ToolResult:
        """Entry ``key``'s committed raw result after result middleware. A middleware that
        raises fails the run, as in harnessx 0.9.1, with the raw result committed: a resume
        runs the middleware again."""
        entry = state.tools[key]
        raw = entry.raw_result or ToolResult(entry.call.id, "", True)
        final = await self.settings.middleware.process_tool_result(
            ToolResult(raw.tool_call_id, raw.content, raw.is_error), entry.call
        )
        if not isinstance(final, ToolResult) or final.tool_call_id != entry.call.id:
            raise ValueError(
                f"result middleware returned {final!r} for call {entry.call.id!r}: it must return a "
                "ToolResult with the same tool_call_id"
            )
        return final

    async def _ask_approval(self, state: RunState, keys: tuple[str, ...]) -> None:
        answers: dict[str, bool] = {}
        for key in keys:
            call = state.tools[key].call
            check = self.settings.permissions.check_permission(call, self.settings.tools.get(call.name))
            answers[key] = bool(await self._cancellable(check))
        delta = self.engine.approvals_answered(state, answers)
        if self.journal is not None:
            for key, allowed in answers.items():
                self.journal.tools_resolved(delta, [key], allow=allowed)
        await self.commit(state, delta)

    async def _cancellable(self, work: Awaitable[T]) -> T:
        """Await ``work`` unless cancellation is requested first."""
        task = asyncio.ensure_future(work)
        cancel_wait = asyncio.ensure_future(self.control.cancelled())
        try:
            done, _ = await asyncio.wait({task, cancel_wait}, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                return task.result()
            raise _Cancelled
        finally:
            cancel_wait.cancel()
            if not task.done():
                task.cancel()


def _with_task_reminders(shown: list[dict[str, Any]], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation to send (``shown``: the engine's form) with the open task list after
    each turn a model call answered, as it stood then, and the current one at the end, as
    harnessx 0.9.1 shows it: a text block after the tool results, at the tail rather than in
    the system prompt. Each copy stays where it was first sent, so each request extends the
    one before and the cached prefix stays put; the conversation itself is not changed.
    ``messages`` is the whole conversation (``shown`` may be condensed: see _condense)."""
    timeline = todos_timeline(messages)
    position = {id(m): i for i, m in enumerate(messages)}
    latest = timeline[-1] if timeline else []
    out: list[dict[str, Any]] = []
    for index, message in enumerate(shown):
        out.append(message)
        following = shown[index + 1] if index + 1 < len(shown) else None
        answered = following is None or following.get("role") == "assistant"
        if message.get("role") == "assistant" or not answered:
            continue
        at = position.get(id(message))
        todos = latest if following is None else (timeline[at] if at is not None else [])
        if todos and not all(item["status"] == "completed" for item in todos):
            # A user message of its own; request_messages joins it to the turn it follows.
            out.append({"role": "user", "content": render_todos(todos)})
    return out


def _with_current_results(state: RunState) -> list[dict[str, Any]]:
    """The conversation plus the answers of this step's calls that already have one."""
    extra = []
    for entry in state.entries():
        if entry.status is ToolStatus.COMPLETED and entry.result is not None:
            extra.append(
                {
                    "role": "tool",
                    "tool_call_id": entry.call.id,
                    "name": entry.call.name,
                    "content": entry.result.content,
                    "is_error": entry.result.is_error,
                }
            )
    return [*state.messages, *extra]


def _timed_out(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or was caused by, a timeout."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, TimeoutError | httpx.TimeoutException):
            return True
        exc, seen = exc.__cause__, seen + 1
    return False


def _fresh(state: RunState) -> bool:
    """A run that has done nothing yet but record its user message."""
    return (
        state.phase is Phase.PREPARE_MODEL_CALL
        and state.iteration == 0
        and len(state.messages) == state.history_length + 1
    )


def _protected(content: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Copies of the blocks of a reply that only the provider may write: signed thinking,
    redacted thinking and the provider's own blocks (``provider``: a server tool's call and
    result, sent back to it verbatim)."""
    kept = []
    for block in content or []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind in ("redacted_thinking", "provider") or (kind == "thinking" and "signature" in block):
            kept.append(copy.deepcopy(block))
    return kept


def _canonical(response: Any) -> ProviderResponse:
    """The reply as middleware left it, as a ``ProviderResponse``."""
    if isinstance(response, ProviderResponse):
        return response
    return ProviderResponse(
        text=getattr(response, "text", "") or "",
        tool_calls=list(getattr(response, "tool_calls", None) or []),
        thinking=getattr(response, "thinking", None),
        stop_reason=getattr(response, "stop_reason", StopReason.END_TURN),
        usage=getattr(response, "usage", None),
    )


def served_by(provider: Any) -> str:
    """The name of the provider that answered (a chain reports the member it used)."""
    return str(
        getattr(provider, "last_served", None) or getattr(provider, "name", "") or type(provider).__name__
    )


async def _aclose(iterator: Any) -> None:
    closer = getattr(iterator, "aclose", None)
    if closer is not None:
        await closer()


async def _pump(
    chunks: AsyncIterator[StreamChunk], queue: asyncio.Queue[tuple[str, Any]], watch: _SilenceWatch
) -> None:
    """Read a provider's stream into ``queue``: each chunk, then its end or its error."""
    iterator = chunks.__aiter__()
    try:
        async for chunk in iterator:
            watch.active()
            queue.put_nowait(("chunk", chunk))
        queue.put_nowait(("end", None))
    except Exception as exc:
        queue.put_nowait(("failed", exc))
    finally:
        await _aclose(iterator)


class _SilenceWatch:
    """A timer that puts ``("tick", seconds silent)`` into a queue after
    ``first_after_seconds`` without activity, then every ``repeat_every_seconds``. It is
    rescheduled only when it fires, not at every chunk."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, policy: ProgressPolicy, queue: asyncio.Queue[tuple[str, Any]]
    ) -> None:
        assert policy.first_after_seconds is not None
        self._loop = loop
        self._first = policy.first_after_seconds
        self._repeat = policy.repeat_every_seconds
        self._queue = queue
        self._last = loop.time()
        self._noticed_at: float | None = None
        self._silent = 0.0
        self._timer: asyncio.TimerHandle | None = loop.call_at(self._last + self._first, self._fire)

    def active(self) -> None:
        self._last = self._loop.time()
        self._noticed_at = None

    def _fire(self) -> None:
        now = self._loop.time()
        due = self._last + self._first if self._noticed_at is None else self._noticed_at + self._repeat
        if now >= due:
            # The silence as scheduled (first_after_seconds, then one repeat more each time),
            # as harnessx 0.9.1 reports it: a timer that fires late on a busy loop does not
            # add its lateness.
            self._silent = self._first if self._noticed_at is None else self._silent + self._repeat
            self._queue.put_nowait(("tick", self._silent))
            self._noticed_at = now
            due = now + self._repeat
        self._timer = self._loop.call_at(due, self._fire)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
