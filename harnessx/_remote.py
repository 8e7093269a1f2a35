"""``AgentRuntime`` over a remote backend (``remote = True``: Temporal).

A remote backend runs the agent elsewhere (a Temporal worker builds it from its registry),
so the runtime holds no agent code and no lease: each verb is a request to the session's
coordinator, and handles follow the backend's event stream. ``AgentRuntime(...)`` with
such a backend is a ``RemoteRuntime``; everything a program calls is the same.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload

from harnessx._agent import Agent
from harnessx._config import AgentConfig, RuntimeState
from harnessx._errors import ConfigurationError, ResolutionError, RuntimeStateError, UnknownExecutionKey
from harnessx._events import RunEvent
from harnessx._handle import RunHandle
from harnessx._registry import AgentRef, AgentRegistry
from harnessx._results import PendingTool, RunResult, ToolResult
from harnessx._runtime import AgentRuntime, RuntimeConfig, is_remote
from harnessx._state import ExecutionKey
from harnessx._submission import submission_for
from harnessx.store._records import ControlRequest

if TYPE_CHECKING:
    from harnessx._recorder import BundleLimits, ExportPolicy
    from harnessx._tools import ToolRegistry

__all__ = ["RemoteBackend", "RemoteRuntime"]


class RemoteBackend(Protocol):
    """What ``RemoteRuntime`` asks of a remote backend (``TemporalBackend`` implements it)."""

    remote: bool

    async def initialize(self) -> None: ...

    async def create_session(self, session_id: str, agent: AgentRef) -> None: ...

    async def session_agent(self, session_id: str) -> AgentRef | None: ...

    async def submit(self, session_id: str, message: str, request_id: str | None) -> str: ...

    async def resume(self, session_id: str) -> str | None: ...

    async def decide(self, session_id: str, decision: dict[str, Any]) -> None: ...

    async def control(self, session_id: str, action: ControlRequest) -> None: ...

    async def request_pause(self, session_id: str, run_id: str | None) -> None: ...

    async def latest_result(self, session_id: str) -> RunResult | None: ...

    async def session_of(self, run_id: str) -> str | None: ...

    async def wait_result(self, session_id: str, run_id: str) -> RunResult: ...

    def follow(self, session_id: str, run_id: str, after: str) -> AsyncIterator[RunEvent]: ...


class RemoteRuntime(AgentRuntime):
    """The runtime of a remote backend. Built by ``AgentRuntime(...)``; see the module."""

    def __init__(
        self,
        agent: Agent | AgentRef | None = None,
        *,
        backend: Any = None,
        registry: AgentRegistry | None = None,
        agent_config: AgentConfig | None = None,
        runtime_config: RuntimeConfig | None = None,
        execution: Literal["local", "pool"] = "local",
        recording: bool | None = None,
        tool_registrar: Callable[[ToolRegistry], object] | None = None,
    ) -> None:
        if backend is None or not is_remote(backend):  # pragma: no cover - AgentRuntime chooses
            raise ConfigurationError("RemoteRuntime needs a remote backend")
        if tool_registrar is not None:
            raise ConfigurationError(
                "tool_registrar does not apply here: the workers define the agent; register its tools "
                "in their AgentRegistry factory"
            )
        if not isinstance(agent, AgentRef):
            raise ConfigurationError(
                f"{type(backend).__name__} runs agents on its workers, built from their registry: pass "
                "AgentRef(name, version) (for example AgentRuntime(AgentRef('assistant', 'v1'), "
                "backend=backend)) and register the factory on the workers, not an Agent"
            )
        if agent_config is not None:
            raise ConfigurationError(
                "agent_config does not apply to an AgentRef: the workers define the agent"
            )
        if recording:
            raise ConfigurationError(
                f"flight recording needs a SQLite or PostgreSQL backend (SQLiteBackend, PostgresBackend); "
                f"{type(backend).__name__} keeps no journal"
            )
        self.execution = execution
        self._submission = submission_for(execution)
        self.config = runtime_config or RuntimeConfig()
        self._ref = agent
        self._agent = None
        self._registry = registry or AgentRegistry()
        self._remote: RemoteBackend = backend
        self._owns_backend = False
        self._session_id = None
        self._state = RuntimeState.INITIALIZING
        self._last_status: dict[str, Any] | None = None
        self._known: dict[str, Any] | None = None
        self._active = None
        self._keeper = None
        self._executor = None
        self._ready_done = False
        self._recording_requested = recording
        self.recording = False
        # Which session each run this runtime handed out belongs to (handles name runs only).
        self._run_sessions: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"AgentRuntime(agent={self._ref!r}, session_id={self._session_id!r}, backend=remote)"

    @property
    def agent(self) -> Agent:
        """A bare agent: the definition lives on the workers (as in pool mode)."""
        if self._agent is None:
            self._agent = Agent()
        return self._agent

    @property
    def backend(self) -> Any:
        return self._remote

    async def _ready_remote(self) -> RemoteBackend:
        if self._state is RuntimeState.STOPPED:
            raise RuntimeStateError("this runtime is stopped; create a new AgentRuntime")
        if not self._ready_done:
            await self._remote.initialize()
            self._ready_done = True
        return self._remote

    async def start(self, session_id: str | None = None) -> str:
        import uuid

        remote = await self._ready_remote()
        sid = session_id or uuid.uuid4().hex
        assert self._ref is not None
        await remote.create_session(sid, self._ref)
        self._bind(sid)
        return sid

    def _bind(self, session_id: str) -> None:
        self._session_id = session_id
        self._state = RuntimeState.RUNNING

    async def stop(self) -> dict[str, Any]:
        """Stop this client and return its status (``state`` ``"stopped"``). The session's
        run pauses at its next boundary (active tools settle on the workers), as a local
        runtime's does; ``resume()`` continues it. Returns once the request is recorded,
        without waiting for the pause, nor for a worker: ``"run"`` is what this runtime
        last knew of the session's runs, as a local runtime's (what ``status()`` last read,
        or the result it waited for last; ``None`` when it knows neither), since reading it
        anew would ask a worker."""
        if self._state is RuntimeState.STOPPED:
            assert self._last_status is not None
            return self._last_status
        sid = self._session_id
        try:
            if sid is not None and self._ready_done:
                await self._remote.request_pause(sid, self._last_run(sid))
        finally:
            self._state = RuntimeState.STOPPED
            last: dict[str, Any] = {"session_id": sid or "", "run": None}
            if self._known is not None and self._known["session_id"] == sid:
                last = dict(self._known)
            self._last_status = {**last, "state": RuntimeState.STOPPED.value}
            if self._agent is not None:
                await self._agent.aclose()
        return self._last_status

    def _last_run(self, session_id: str) -> str | None:
        """The last run of ``session_id`` this runtime handed out (``None``: the current one)."""
        runs = [run for run, sid in self._run_sessions.items() if sid == session_id]
        return runs[-1] if runs else None

    # ---------------------------------------------------------------- runs

    async def submit(
        self,
        message: str,
        *,
        request_id: str | None = None,
        priority: int | None = None,
        concurrency_key: str | None = None,
        tenant: str | None = None,
        not_before: dt.datetime | dt.timedelta | None = None,
        stream: bool = True,
    ) -> RunHandle:
        # ``stream`` is accepted for the API's sake: the workers decide how they call the model.
        if not isinstance(message, str):
            raise ConfigurationError(f"message must be a str, got {type(message).__name__}")
        if (
            priority is not None
            or concurrency_key is not None
            or tenant is not None
            or not_before is not None
        ):
            raise ConfigurationError(
                "priority, concurrency_key, tenant and not_before schedule runs for the SQL worker pool "
                "(SQLiteBackend, PostgresBackend with execution='pool'); a Temporal backend schedules "
                "its workflows itself: leave them out"
            )
        remote = await self._ready_remote()
        if self._session_id is None:
            await self.start()
        sid = self._session_id
        assert sid is not None
        run_id = await remote.submit(sid, message, request_id)
        return self._handle(sid, run_id)

    def _handle(self, session_id: str, run_id: str) -> RunHandle:
        self._run_sessions[run_id] = session_id
        return RunHandle(self, session_id, run_id)

    async def resume(self, session_id: str) -> RunHandle | None:
        remote = await self._ready_remote()
        found = await remote.session_agent(session_id)
        if found is None:
            raise ConfigurationError(
                f"no session {session_id!r} on this Temporal namespace: check the id, and that this runtime "
                "connects to the same cluster and namespace as the one that started it"
            )
        if found != self._ref:
            raise ConfigurationError(
                f"cannot use session {session_id} with agent {self._ref}: it runs agent {found}; "
                f"bind it with AgentRef({found.name!r}, {found.version!r})"
            )
        self._bind(session_id)
        run_id = await remote.resume(session_id)
        return self._handle(session_id, run_id) if run_id else None

    # ----------------------------------------------------------- decisions

    @overload
    async def approve(
        self, target: str | PendingTool, *, allow: bool = ..., resume: Literal[False] = ...
    ) -> None: ...

    @overload
    async def approve(
        self, target: str | PendingTool, *, allow: bool = ..., resume: Literal[True]
    ) -> RunResult: ...

    @overload
    async def approve(
        self, target: str | PendingTool, *, allow: bool = ..., resume: bool
    ) -> RunResult | None: ...

    async def approve(
        self, target: str | PendingTool, *, allow: bool = True, resume: bool = False
    ) -> RunResult | None:
        key = target.execution_key if isinstance(target, PendingTool) else str(target)
        session_id = await self._decide_remote(key, {"kind": "approve", "key": key, "allow": allow})
        return await self._finish_resume(session_id) if resume else None

    async def resolve_tool(
        self,
        target: str | PendingTool,
        *,
        result: ToolResult | None = None,
        retry: bool = False,
        abort: bool = False,
    ) -> None:
        if (result is not None) + bool(retry) + bool(abort) != 1:
            raise ResolutionError("pass exactly one of result=ToolResult(...), retry=True or abort=True")
        key = target.execution_key if isinstance(target, PendingTool) else str(target)
        decision = {
            "kind": "resolve",
            "key": key,
            "result": result.to_dict() if result is not None else None,
            "retry": retry,
            "abort": abort,
        }
        await self._decide_remote(key, decision)

    async def _decide_remote(self, key: str, decision: dict[str, Any]) -> str:
        remote = await self._ready_remote()
        run_id = ExecutionKey.run_of(key)
        session_id = self._run_sessions.get(run_id) or await remote.session_of(run_id) or self._session_id
        if session_id is None:
            raise UnknownExecutionKey(
                f"no run has a tool call with execution key {key!r}: bind this runtime to its session first "
                "(start(session_id) or resume(session_id))"
            )
        self._bind(session_id)
        await remote.decide(session_id, decision)
        return session_id

    # ------------------------------------------------------------ controls

    async def _control(self, request: ControlRequest) -> None:
        remote = await self._ready_remote()
        await remote.control(self._require_session(), request)

    async def status(self) -> dict[str, Any]:
        remote = await self._ready_remote()
        sid = self._require_session()
        result = await remote.latest_result(sid)
        self._known = {"session_id": sid, "run": result}
        return {"session_id": sid, "state": self._state.value, "run": result}

    async def export_incident(
        self,
        run_id: str,
        *,
        destination: str | Path,
        policy: ExportPolicy | None = None,
        limits: BundleLimits | None = None,
    ) -> Path:
        raise ConfigurationError(
            "incident bundles are exported from a recorded SQLite or PostgreSQL session; on Temporal, "
            "the workflow's history is the record (temporal workflow show)"
        )

    # ----------------------------------------------------------- observing

    def _session_for(self, run_id: str) -> str:
        session_id = self._run_sessions.get(run_id) or self._session_id
        if session_id is None:  # pragma: no cover - handles come from a bound runtime
            raise RuntimeStateError("this runtime is not bound to a session")
        return session_id

    async def _follow(
        self, run_id: str, after: str, session_id: str | None = None
    ) -> AsyncIterator[RunEvent]:
        remote = await self._ready_remote()
        async for event in remote.follow(self._session_for(run_id), run_id, after):
            yield event

    async def _await_result(self, run_id: str, start_seq: int) -> RunResult:
        remote = await self._ready_remote()
        result = await remote.wait_result(self._session_for(run_id), run_id)
        self._remember(result)
        return result
