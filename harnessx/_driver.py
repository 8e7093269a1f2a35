"""The driver: performs the engine's effects and commits every boundary, in order.

One loop, used unchanged by a plain ``Agent`` (in-memory log) and by ``AgentRuntime``
(a fenced store). The invariant it keeps: an effect starts only after the boundary before
it is committed — dispatch intent before a tool runs, the raw result before middleware.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from harnessx._engine import AskApproval, CallModel, CompleteResult, Dispatch, Engine, Stop
from harnessx._errors import LeaseLostError, ProviderError
from harnessx._events import RunEvent, RunEventType
from harnessx._hooks import HookEvent, Hooks
from harnessx._journal import RunJournal
from harnessx._middleware import Middleware, ModelRequest
from harnessx._results import RunResult, RunStatus, ToolResult
from harnessx._runlog import Committer
from harnessx._state import Delta, RunState
from harnessx._tools import PermissionManager, ToolContext, ToolRegistry, tool_context_scope
from harnessx.providers._base import LLMProvider, ProviderResponse, call_create

__all__ = ["Driver", "RunControl", "RunSettings", "announce_checkpoint"]

logger = logging.getLogger("harnessx.driver")

T = TypeVar("T")


class RunControl:
    """Pause/cancel requests for a run being driven; waking the driver when one arrives."""

    def __init__(self) -> None:
        self.pause_requested = False
        self.cancel_requested = False
        self.handoff_requested = False
        self._signal = asyncio.Event()

    def request_pause(self) -> None:
        self.pause_requested = True
        self._signal.set()

    def request_handoff(self) -> None:
        """Stop at the next boundary *without* changing the run's status (a worker drains:
        the run stays runnable for another process)."""
        self.handoff_requested = True

    def request_cancel(self) -> None:
        self.cancel_requested = True
        self._signal.set()

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
    ) -> None:
        self.engine = engine
        self.settings = settings
        self._provider = provider
        self.committer = committer
        self.control = control or RunControl()
        self.fencing_token = fencing_token
        # A recorded run's journal (the committer writes what is noted here with each commit).
        self.journal = journal

    async def commit(self, state: RunState, delta: Delta) -> None:
        """Commit ``delta``, apply it to ``state``, and announce the checkpoint."""
        await self.committer.commit(state, delta)
        state.apply(delta)
        await announce_checkpoint(self.settings.hooks, self.settings.agent, state)

    async def drive(self, state: RunState) -> RunResult:
        hooks, agent = self.settings.hooks, self.settings.agent
        await hooks.emit(HookEvent.RUN_START, agent, {"session_id": state.session_id, "run_id": state.run_id})
        try:
            await self._loop(state)
        except (LeaseLostError, asyncio.CancelledError):
            # Fenced out or torn down: nothing more may be written for this run.
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
                await self.commit(state, self.engine.pause(state))
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
        request = ModelRequest(
            model=settings.model,
            messages=list(state.messages),
            system=settings.system_prompt,
            tools=settings.tools.specs(settings.offered_tools),
            max_tokens=settings.max_tokens,
            temperature=settings.temperature,
        )
        request = await settings.middleware.apply_request(request)
        await settings.hooks.emit(HookEvent.MODEL_REQUEST, settings.agent, {"request": request})
        journal = self.journal
        if journal is not None:
            # The request is committed before the provider sees it: a crash during the call
            # still shows what was asked.
            journal.model_started(state, request.provider_kwargs())
            await self.commit(state, Delta(state.phase))
        try:
            response = await self._cancellable(self._model_response(state, request))
        except _Cancelled:
            if journal is not None:
                journal.model_interrupted()
            raise
        except Exception as exc:
            logger.warning("model call for run %s failed: %s", state.run_id, exc)
            if journal is not None:
                journal.model_failed(exc)
            await self.commit(state, self.engine.model_failed(state, exc))
            return
        await settings.hooks.emit(HookEvent.MODEL_RESPONSE, settings.agent, {"response": response})
        if journal is not None:
            # No response middleware yet: the reply is the same at every stage.
            for stage in ("response", "processed", "completed"):
                journal.model_replied(response, stage=stage)
        await self.commit(state, self.engine.model_responded(state, response))

    async def _model_response(self, state: RunState, request: ModelRequest) -> ProviderResponse:
        provider = self._provider()
        kwargs = request.provider_kwargs()
        stream = getattr(provider, "stream", None)
        if stream is None:
            return await call_create(provider, **kwargs)
        response: ProviderResponse | None = None
        step_id = f"model:{state.iteration}"
        async for chunk in stream(**kwargs):
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

    # ------------------------------------------------------------------ tools

    async def _dispatch(self, state: RunState, keys: tuple[str, ...]) -> None:
        # Dispatch intent is durable before any tool runs: a crash from here on leaves
        # the calls 'started', which recovery settles by replay policy.
        intent = self.engine.dispatched(state, keys)
        if self.journal is not None:
            self.journal.tools_dispatched(intent)
        await self.commit(state, intent)
        tasks: dict[asyncio.Future[Any], str] = {
            asyncio.ensure_future(self._invoke(state, key)): key for key in keys
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
                    delta = self.engine.raw_result(state, tasks[task], task.result())
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

    async def _invoke(self, state: RunState, key: str) -> ToolResult:
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
        with tool_context_scope(context):
            result = await tool.invoke(entry.call.input)
        await hooks.emit(
            HookEvent.TOOL_END, agent, {"call": entry.call, "execution_key": key, "result": result}
        )
        return result

    async def _complete_result(self, state: RunState, key: str) -> None:
        entry = state.tools[key]
        raw = entry.raw_result or ToolResult(entry.call.id, "", True)
        try:
            final = await self.settings.middleware.apply_result(entry.call, raw)
        except Exception as exc:
            logger.exception("result middleware failed for %s", key)
            final = ToolResult(entry.call.id, f"Error: result middleware failed: {exc}", True)
        delta = self.engine.completed_result(state, key, final)
        if self.journal is not None:
            self.journal.tools_processed(delta)
        await self.commit(state, delta)

    async def _ask_approval(self, state: RunState, keys: tuple[str, ...]) -> None:
        answers: dict[str, bool] = {}
        for key in keys:
            answer = await self._cancellable(self.settings.permissions.ask(state.tools[key].call))
            answers[key] = bool(answer)
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
