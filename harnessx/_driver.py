"""The driver: performs the engine's effects and commits every boundary, in order.

One loop, used unchanged by a plain ``Agent`` (in-memory log) and by ``AgentRuntime``
(a fenced store). The invariant it keeps: an effect starts only after the boundary before
it is committed — dispatch intent before a tool runs, the raw result before middleware.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from harnessx._builtin_tools import RunView, planning_guidance, render_todos, run_view_scope, todos_of
from harnessx._config import Limits
from harnessx._context_fit import fit_context
from harnessx._engine import AskApproval, CallModel, CompleteResult, Dispatch, Engine, Stop
from harnessx._errors import LeaseLostError, ProviderError, StorageError
from harnessx._events import RunEvent, RunEventType
from harnessx._hooks import HookEvent, Hooks
from harnessx._journal import RunJournal
from harnessx._middleware import Middleware, ModelRequest
from harnessx._policies import ProgressPolicy
from harnessx._rate_gate import Admission, RateGate
from harnessx._results import RunResult, RunStatus, ToolResult
from harnessx._runlog import Committer
from harnessx._state import Delta, RunState, ToolStatus
from harnessx._tools import PermissionManager, RetryWanted, ToolContext, ToolRegistry, tool_context_scope
from harnessx.providers._base import LLMProvider, ProviderResponse, StreamChunk, call_create

__all__ = ["Driver", "RunControl", "RunSettings", "announce_checkpoint", "current_agent"]

logger = logging.getLogger("harnessx.driver")

T = TypeVar("T")

_agent_context: contextvars.ContextVar[Any] = contextvars.ContextVar("harnessx_agent", default=None)


def current_agent() -> Any:
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

    def request_pause(self, reason: str = "paused") -> None:
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


async def announce_checkpoint(hooks: Hooks, agent: Any, state: RunState) -> None:
    """``HookEvent.CHECKPOINT`` with exactly the keys the public contract names."""
    if hooks.has(HookEvent.CHECKPOINT):
        data = {
            "session_id": state.session_id,
            "run_id": state.run_id,
            "status": state.status.value,
            "phase": state.phase.value,
        }
        await hooks.emit(HookEvent.CHECKPOINT, agent, data)


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
    hooks: Hooks
    middleware: Middleware
    offered_tools: list[str] | None = None
    agent: Any = None
    progress: ProgressPolicy | None = None
    limits: Limits | None = None


class Driver:
    """Drives one run until it finishes or stops to wait."""

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

    async def commit(self, state: RunState, delta: Delta) -> None:
        """Commit ``delta``, apply it to ``state``, and announce the checkpoint."""
        await self.committer.commit(state, delta)
        state.apply(delta)
        await announce_checkpoint(self.settings.hooks, self.settings.agent, state)
        todos_updated = getattr(HookEvent, "TODOS_UPDATED", None)
        if todos_updated is not None:
            for event in delta.events:
                if event.type is RunEventType.TODOS_UPDATED:
                    await self.settings.hooks.emit(todos_updated, self.settings.agent, dict(event.data))

    async def drive(self, state: RunState) -> RunResult:
        hooks, agent = self.settings.hooks, self.settings.agent
        await hooks.emit(HookEvent.RUN_START, agent, {"session_id": state.session_id, "run_id": state.run_id})
        try:
            await self._loop(state)
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
            logger.exception("run %s failed unexpectedly", state.run_id)
            await hooks.emit(HookEvent.ERROR, agent, {"run_id": state.run_id, "error": str(exc)})
            if not state.status.finished:
                if self.journal is not None:
                    self.journal.command_failed(state, exc)
                await self.commit(state, self.engine.fail(state, exc))
        result = state.result()
        await hooks.emit(HookEvent.RUN_END, agent, {"result": result})
        return result

    async def _loop(self, state: RunState) -> None:
        while state.status is RunStatus.RUNNING:
            if self.control.cancel_requested:
                await self.commit(state, self.engine.cancel(state))
                return
            if self.control.handoff_requested:
                return
            if self.control.pause_requested:
                await self.commit(state, self.engine.pause(state, self.control.pause_reason))
                return
            step = self.engine.next_step(state)
            try:
                await self._perform(state, step)
            except _Cancelled:
                await self.commit(state, self.engine.cancel(state))
                return

    async def _perform(self, state: RunState, step: Any) -> None:
        if isinstance(step, Delta):
            await self.commit(state, step)
        elif isinstance(step, CallModel):
            await self._call_model(state)
        elif isinstance(step, Dispatch):
            await self._dispatch(state, step.keys)
        elif isinstance(step, CompleteResult):
            await self._complete_result(state, step.key)
        elif isinstance(step, AskApproval):
            await self._ask_approval(state, step.keys)
        elif isinstance(step, Stop):
            return
        else:  # pragma: no cover - the engine returns only the steps above
            raise TypeError(f"unknown engine step {step!r}")

    # ------------------------------------------------------------------ model

    async def _call_model(self, state: RunState) -> None:
        settings = self.settings
        request = await self.model_request(state)
        admission = None
        if self.rates is not None:
            admission = await self.rates.admit(self._provider(), request)
            if (
                admission is not None
                and admission.wait > 0
                and not await self._wait_for_budget(state, admission)
            ):
                return  # a pause, cancel or hand-off came first: the loop acts on it, no call made
        journal = self.journal
        if journal is not None:
            # The request is committed before the provider sees it: a crash during the call
            # still shows what was asked.
            journal.model_started(state, request.provider_kwargs())
            await self.commit(state, Delta(state.phase))
        try:
            response = await self._cancellable(self.model_response(state, request))
        except _Cancelled:
            if journal is not None:
                journal.model_interrupted()
            raise
        except (LeaseLostError, StorageError):
            raise  # writing streamed text failed: the store's problem, not the model's (see drive)
        except Exception as exc:
            logger.warning("model call for run %s failed: %s", state.run_id, exc)
            if journal is not None:
                journal.model_failed(exc)
            await self.commit(state, self.engine.model_failed(state, exc))
            return
        if admission is not None and self.rates is not None and response.usage is not None:
            await self.rates.settle(admission, response.usage)
        await settings.hooks.emit(HookEvent.MODEL_RESPONSE, settings.agent, {"response": response})
        if journal is not None:
            # No response middleware yet: the reply is the same at every stage.
            for stage in ("response", "processed", "completed"):
                journal.model_replied(response, stage=stage)
        await self.commit(state, self.engine.model_responded(state, response))

    async def _wait_for_budget(self, state: RunState, admission: Admission) -> bool:
        """Wait for the start a rate limit gave this call, with nothing open to the vendor
        (the lease is renewed meanwhile), behind a ``waiting`` event that says why and until
        when. The event is written while the wait runs, so that a slow write does not make
        the call late. ``False`` if a pause, cancel or hand-off ended the wait (the
        reservation is spent)."""
        step = f"model:{state.iteration}"
        data = {
            "on": "rate_limit",
            "bucket": admission.bucket,
            "seconds": round(admission.wait, 3),
            "until": round(admission.start, 3),  # by the store's clock, like a run's not_before
        }
        event = RunEvent(RunEventType.WAITING, data, state.session_id, state.run_id, step, step)
        await self.committer.provisional(state, event)
        written = asyncio.ensure_future(self.committer.flush())
        try:
            waited = await self.control.wait_unless_stopped(admission.remaining())
        finally:
            await written  # the committer takes one write at a time
        return waited

    # The effects on their own, without a commit: the Temporal binding performs them in its
    # activities and makes the engine's transitions in the workflow.

    async def model_request(self, state: RunState) -> ModelRequest:
        """The request for the state's next model call, after request middleware."""
        settings = self.settings
        final = self.engine.final_call(state)
        system = settings.system_prompt
        guidance = planning_guidance(settings.tools)
        if guidance:
            system = f"{system}\n\n{guidance}" if system else guidance
        # The one last call of a run at its limit is asked for an answer, not more work.
        offered = [] if final else settings.tools.specs(settings.offered_tools)
        limit = settings.limits.max_context_tokens if settings.limits is not None else None
        request = ModelRequest(
            model=settings.model,
            messages=_with_task_reminder(fit_context(state.messages, limit, system, offered)),
            system=system,
            tools=offered,
            max_tokens=settings.max_tokens,
            temperature=settings.temperature,
        )
        request = await settings.middleware.apply_request(request)
        await settings.hooks.emit(HookEvent.MODEL_REQUEST, settings.agent, {"request": request})
        return request

    async def model_response(self, state: RunState, request: ModelRequest) -> ProviderResponse:
        """The model's reply; streamed text goes to the committer as provisional events."""
        provider = self._provider()
        kwargs = request.provider_kwargs()
        stream = getattr(provider, "stream", None)
        if stream is None:
            return await self._noticed(state, call_create(provider, **kwargs))
        response: ProviderResponse | None = None
        step_id = f"model:{state.iteration}"
        async for chunk in self._noticed_stream(state, stream(**kwargs)):
            if chunk.kind in ("text_delta", "thinking_delta") and chunk.data:
                kind = RunEventType(chunk.kind)
                event = RunEvent(
                    kind, {"text": str(chunk.data)}, state.session_id, state.run_id, step_id, step_id
                )
                await self.committer.provisional(state, event)
            elif chunk.kind == "response":
                response = chunk.data
        if not isinstance(response, ProviderResponse):
            raise ProviderError(f"{type(provider).__name__}.stream() ended without a 'response' chunk")
        return response

    async def _noticed(self, state: RunState, work: Awaitable[T]) -> T:
        """Await a model call, adding a ``waiting`` event to the run stream while it is
        silent (``ProgressPolicy``). Notices only: nothing is cancelled."""
        policy = self.settings.progress
        if policy is None or not policy.enabled or policy.first_after_seconds is None:
            return await work
        task = asyncio.ensure_future(work)
        try:
            waited = 0.0
            delay = policy.first_after_seconds
            while True:
                done, _ = await asyncio.wait({task}, timeout=delay)
                if done:
                    return task.result()
                waited += delay
                await self._waiting_notice(state, waited)
                delay = policy.repeat_every_seconds
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def _waiting_notice(self, state: RunState, seconds: float) -> None:
        step = f"model:{state.iteration}"
        event = RunEvent(
            RunEventType.WAITING,
            {"on": "model", "seconds": round(seconds, 1)},
            state.session_id,
            state.run_id,
            step,
            step,
        )
        await self.committer.provisional(state, event)

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

    async def _dispatch(self, state: RunState, keys: tuple[str, ...]) -> None:
        # Dispatch intent is durable before any tool runs: a crash from here on leaves
        # the calls 'started', which recovery settles by replay policy.
        intent = self.engine.dispatched(state, keys)
        if self.journal is not None:
            self.journal.tools_dispatched(intent)
        await self.commit(state, intent)
        tasks: dict[asyncio.Future[Any], str] = {
            asyncio.ensure_future(self.invoke_tool(state, key)): key for key in keys
        }
        cancel_wait: asyncio.Future[Any] = asyncio.ensure_future(self.control.cancelled())
        try:
            pending = set(tasks)
            while pending:
                done, _ = await asyncio.wait(pending | {cancel_wait}, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task is cancel_wait:
                        continue
                    pending.discard(task)
                    outcome = task.result()
                    if isinstance(outcome, TimeoutError):
                        delta = self.engine.timed_out(state, tasks[task], str(outcome))
                    else:
                        delta = self.engine.raw_result(state, tasks[task], outcome)
                    if self.journal is not None:
                        self.journal.tools_returned(delta)
                    await self.commit(state, delta)
                if cancel_wait in done:
                    if self.journal is not None:
                        self.journal.tools_interrupted(state.tools[tasks[task]] for task in pending)
                    raise _Cancelled
        finally:
            cancel_wait.cancel()
            for task in tasks:
                if not task.done():
                    task.cancel()

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
        hooks, agent = self.settings.hooks, self.settings.agent
        await hooks.emit(HookEvent.TOOL_START, agent, {"call": entry.call, "execution_key": key})
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
                    result = await tool.invoke(entry.call.input, entry.call.id)
                else:
                    outcome = await tool.try_once(entry.call.input, entry.call.id, attempt=try_number)
                    if isinstance(outcome, RetryWanted):
                        return outcome
                    result = outcome
        except TimeoutError as exc:
            return exc
        finally:
            _agent_context.reset(agent_token)
        await hooks.emit(
            HookEvent.TOOL_END, agent, {"call": entry.call, "execution_key": key, "result": result}
        )
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
        delta = self.engine.completed_result(state, key, final)
        if self.journal is not None:
            self.journal.tools_processed(delta)
        await self.commit(state, delta)

    async def processed_result(self, state: RunState, key: str) -> ToolResult:
        """Entry ``key``'s committed raw result after result middleware (an error result if
        the middleware fails)."""
        entry = state.tools[key]
        raw = entry.raw_result or ToolResult(entry.call.id, "", True)
        try:
            return await self.settings.middleware.apply_result(entry.call, raw)
        except Exception as exc:
            logger.exception("result middleware failed for %s", key)
            return ToolResult(entry.call.id, f"Error: result middleware failed: {exc}", True)

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


def _with_task_reminder(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's messages with the open task list shown at the end of the last user or
    tool message: at the tail, not in the system prompt, so the cached prefix stays put."""
    todos = todos_of(messages)
    if not todos or all(item["status"] == "completed" for item in todos):
        return list(messages)
    out = list(messages)
    for index in range(len(out) - 1, -1, -1):
        message = out[index]
        if message.get("role") in ("user", "tool") and isinstance(message.get("content"), str):
            out[index] = {**message, "content": f"{message['content']}\n\n{render_todos(todos)}"}
            break
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
        self._timer: asyncio.TimerHandle | None = loop.call_at(self._last + self._first, self._fire)

    def active(self) -> None:
        self._last = self._loop.time()
        self._noticed_at = None

    def _fire(self) -> None:
        now = self._loop.time()
        due = self._last + self._first if self._noticed_at is None else self._noticed_at + self._repeat
        if now >= due:
            self._queue.put_nowait(("tick", now - self._last))
            self._noticed_at = now
            due = now + self._repeat
        self._timer = self._loop.call_at(due, self._fire)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
