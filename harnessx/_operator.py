"""An operator's actions on runs, from the console or the terminal.

Each action is written to the audit trail (who, when, what) *before* it is carried out, and
its outcome after, so a process that dies in between leaves a record whose outcome is
unknown rather than a decision nobody recorded. Every action goes through the runtime's own
verbs (``AgentRuntime.approve``, ``resolve_tool``, ``cancel``, ``pause``, ``resume``); there
is no second implementation of any of them here. No agent code is needed: decisions and
controls are computed from the stored run alone, and a session with an agent reference (a
pool session) is continued by requeueing it for any worker, as a pool runtime's
``resume()`` does. A session started with an ``Agent`` instance is continued by the
application that owns it.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import uuid
from dataclasses import dataclass
from typing import Any

from harnessx._errors import ConfigurationError, HarnessError, UnknownExecutionKey
from harnessx._registry import AgentRef
from harnessx._results import UNFINISHED_STATUSES, RunStatus, ToolResult
from harnessx._runtime import AgentRuntime
from harnessx._state import ExecutionKey, ToolStatus
from harnessx.store._protocol import Action, RunRecord, SessionRecord, Store
from harnessx.store._records import ControlRequest

__all__ = ["ACTIONS", "Done", "Operator", "default_actor"]

ACTIONS = (
    "approve",
    "decline",
    "resolve_result",
    "resolve_retry",
    "resolve_abort",
    "cancel",
    "pause",
    "resume",
)
_MAX_ACTOR = 200


def default_actor() -> str:
    """Who acts from a terminal: the OS user (``--as NAME`` says otherwise)."""
    with contextlib.suppress(Exception):  # no passwd entry in some containers
        return getpass.getuser()
    return f"uid {os.getuid()}"


@dataclass
class Done:
    """What an action did: its audit record and a sentence for the operator."""

    action: Action
    message: str
    requeued: bool = False


class _DecidingRuntime(AgentRuntime):
    """A runtime with no agent definition that records decisions and controls on any
    session. It never drives a run: what it commits is computed from the stored state
    alone (the engine's ``approve``/``resolve``/``pause``/``cancel`` read nothing else), so
    the definition check a driving runtime makes does not apply."""

    checks_definition = False


class Operator:
    """Carries out ``actor``'s actions on ``store``; ``via`` says from where (console, api, cli)."""

    def __init__(self, store: Store, actor: str, via: str) -> None:
        actor = " ".join(str(actor).split())
        if not actor or len(actor) > _MAX_ACTOR:
            raise ConfigurationError(
                f"an operator needs a name of 1 to {_MAX_ACTOR} characters, got {actor!r}"
            )
        self.store = store
        self.actor = actor
        self.via = via

    # ---------------------------------------------------------------- decisions

    async def approve(self, execution_key: str, *, allow: bool = True) -> Done:
        """Approve (or decline) a call awaiting approval; a pool run is requeued once it has
        no undecided call left."""
        record, session = await self._pending(execution_key, ToolStatus.APPROVAL, "awaiting approval")
        action = self._action("approve" if allow else "decline", record, execution_key)

        async def act(runtime: _DecidingRuntime) -> str:
            await runtime.approve(execution_key, allow=allow)
            return "approved" if allow else "declined (the model sees 'Permission denied')"

        return await self._decide(action, session, record, act)

    async def resolve(
        self,
        execution_key: str,
        *,
        result: str | None = None,
        is_error: bool = False,
        retry: bool = False,
        abort: bool = False,
    ) -> Done:
        """Settle an uncertain call: record ``result`` (what really happened), accept another
        invocation (``retry``), or ``abort`` the run (it ends cancelled; nothing is undone)."""
        if (result is not None) + bool(retry) + bool(abort) != 1:
            raise ConfigurationError("give exactly one of a result, retry or abort")
        record, session = await self._pending(execution_key, ToolStatus.UNCERTAIN, "uncertain")
        kind = "resolve_result" if result is not None else "resolve_retry" if retry else "resolve_abort"
        detail = {"result": result, "is_error": is_error} if result is not None else {}
        action = self._action(kind, record, execution_key, detail)
        outcome = ToolResult(content=result, is_error=is_error) if result is not None else None

        async def act(runtime: _DecidingRuntime) -> str:
            await runtime.resolve_tool(execution_key, result=outcome, retry=retry, abort=abort)
            if abort:
                return "aborted: the run ended cancelled (the call's effect is still unknown)"
            return "recorded the call's result" if result is not None else "the call will be invoked again"

        return await self._decide(action, session, record, act)

    async def _decide(self, action: Action, session: SessionRecord, record: RunRecord, act: Any) -> Done:
        async with self._recorded(action):
            runtime = _DecidingRuntime(backend=self.store)
            try:
                said = await act(runtime)
            finally:
                await runtime.aclose()
            requeued = await self._continue(session, record.id)
            action.detail["requeued"] = requeued
        return Done(action, f"{said}{self._continued(session, requeued, record.id)}", requeued)

    async def _continue(self, session: SessionRecord, run_id: str) -> bool:
        """Requeue a pool run that waits for nothing any more (as ``approve(..., resume=True)``)."""
        after = await self.store.get_run(run_id, messages=False)
        if session.agent_ref is None or after is None or after.status is not RunStatus.AWAITING_INPUT:
            return False
        if any(entry.pending() for entry in await self.store.tool_calls(run_id)):
            return False  # one decision per call, then one resume
        await self._requeue(session)
        return True

    def _continued(self, session: SessionRecord, requeued: bool, run_id: str) -> str:
        if requeued:
            return "; the run is queued for any worker"
        if session.agent_ref is None:
            return (
                "; the application that started this session continues it "
                f"(AgentRuntime.resume({session.id!r}))"
            )
        return ""

    # ----------------------------------------------------------------- controls

    async def cancel(self, session_id: str) -> Done:
        """Cancel the session's unfinished run, even one whose state cannot be read."""
        session, record = await self._unfinished(session_id, "cancel")
        action = self._action("cancel", record)
        async with self._recorded(action):
            await self._control(session, "cancel")
            after = await self.store.latest_run(session_id, messages=False)
        if after is not None and after.status is RunStatus.CANCELLED:
            return Done(action, f"cancelled run {record.id}")
        return Done(action, f"asked the process driving run {record.id} to cancel it at its next boundary")

    async def pause(self, session_id: str) -> Done:
        """Pause the session's running run at its next boundary."""
        session, record = await self._unfinished(session_id, "pause")
        if record.status is not RunStatus.RUNNING:
            raise ConfigurationError(
                f"run {record.id} is {record.status.value}, not running: there is nothing to pause"
            )
        action = self._action("pause", record)
        async with self._recorded(action):
            await self._control(session, "pause")
            after = await self.store.latest_run(session_id, messages=False)
        if after is not None and after.status is RunStatus.PAUSED:
            return Done(action, f"paused run {record.id}")
        return Done(action, f"asked the process driving run {record.id} to pause it at its next boundary")

    async def resume(self, session_id: str) -> Done:
        """Continue a pool session's paused, failed or waiting run: requeue it for any worker."""
        session, record = await self._unfinished(session_id, "resume", also=(RunStatus.FAILED,))
        if session.agent_ref is None:
            raise ConfigurationError(
                f"session {session_id} was started with an Agent instance, not an agent reference: "
                f"only the application that owns it can resume it (AgentRuntime.resume({session_id!r}))"
            )
        action = self._action("resume", record)
        async with self._recorded(action):
            await self._requeue(session)
        return Done(action, f"run {record.id} is queued for any worker", True)

    async def _control(self, session: SessionRecord, request: ControlRequest) -> None:
        runtime = _DecidingRuntime(backend=self.store)
        try:
            await runtime.start(session.id)  # the stored session, as it was started
            await (runtime.cancel() if request == "cancel" else runtime.pause())
        finally:
            await runtime.aclose()

    async def _requeue(self, session: SessionRecord) -> None:
        assert session.agent_ref is not None
        pool = AgentRuntime(AgentRef.parse(session.agent_ref), backend=self.store, execution="pool")
        try:
            await pool.resume(session.id)
        finally:
            await pool.aclose()

    # ------------------------------------------------------------------ helpers

    async def _pending(self, key: str, status: ToolStatus, wanted: str) -> tuple[RunRecord, SessionRecord]:
        run_id = ExecutionKey.run_of(key)
        record = await self.store.get_run(run_id, messages=False)
        if record is None:
            raise UnknownExecutionKey(f"no run has a tool call with execution key {key!r}")
        entry = next((e for e in await self.store.tool_calls(run_id) if e.execution_key == key), None)
        if entry is None or entry.status is not status:
            now = f"it is {entry.status.value}" if entry is not None else "there is no such call"
            raise UnknownExecutionKey(f"no tool call {wanted} has execution key {key!r} ({now})")
        session = await self.store.get_session(record.session_id)
        assert session is not None  # a run's session is never deleted
        return record, session

    async def _unfinished(
        self, session_id: str, verb: str, also: tuple[RunStatus, ...] = ()
    ) -> tuple[SessionRecord, RunRecord]:
        session = await self.store.get_session(session_id)
        if session is None:
            raise ConfigurationError(f"no session {session_id!r} in this store: check the id")
        record = await self.store.latest_run(session_id, messages=False)
        if record is None or record.status not in (*UNFINISHED_STATUSES, *also):
            shown = "no run" if record is None else f"its latest run is {record.status.value}"
            raise ConfigurationError(f"nothing to {verb}: session {session_id} has {shown}")
        return session, record

    def _action(
        self, kind: str, record: RunRecord, key: str | None = None, detail: dict[str, Any] | None = None
    ) -> Action:
        return Action(
            id=uuid.uuid4().hex,
            actor=self.actor,
            via=self.via,
            action=kind,
            session_id=record.session_id,
            run_id=record.id,
            execution_key=key,
            detail=dict(detail or {}),
        )

    @contextlib.asynccontextmanager
    async def _recorded(self, action: Action) -> Any:
        """The action in the audit trail before it is carried out, its outcome after."""
        await self.store.add_action(action)
        try:
            yield
        except HarnessError as exc:
            await self._finish(action, f"refused: {exc}")
            raise
        except BaseException as exc:
            await self._finish(action, f"failed: {type(exc).__name__}")
            raise
        await self._finish(action, "ok")

    async def _finish(self, action: Action, outcome: str) -> None:
        action.outcome = outcome
        with contextlib.suppress(HarnessError):  # the action's own error is the one to report
            await self.store.finish_action(action)
