"""``AgentRuntime``: durable runs. Every phase boundary is committed under a fenced lease.

The runtime binds to one session at a time. It drives runs in this process (a task per
run), holding the session's lease only while it drives or records a decision, so another
process can approve, resume or take over as soon as this one lets go or dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast, overload

from harnessx._agent import Agent
from harnessx._committer import RunFeed
from harnessx._config import AgentConfig, Limits, RuntimeState
from harnessx._engine import expect_waiting
from harnessx._errors import (
    ConfigurationError,
    CorruptStateError,
    ResolutionError,
    RuntimeStateError,
    SessionBusyError,
    StorageError,
    UnknownExecutionKey,
)
from harnessx._events import RunEvent, RunEventType
from harnessx._executor import Execution, RunExecutor
from harnessx._extensions import turn_completed
from harnessx._handle import RunHandle
from harnessx._hooks import HookEvent
from harnessx._ids import uuid7
from harnessx._journal import JournalRecord, RunJournal
from harnessx._leases import LeaseKeeper
from harnessx._observe import finished_result, follow_events, until_stopped
from harnessx._policies import check_positive
from harnessx._rate_gate import RateGate
from harnessx._recorder import BundleLimits, ExportPolicy, export_incident
from harnessx._registry import AgentRef, AgentRegistry, agents
from harnessx._results import (
    CLOSED_STATUSES,
    UNFINISHED_STATUSES,
    PendingTool,
    RunResult,
    RunStatus,
    ToolResult,
)
from harnessx._state import Delta, ExecutionKey, RunState, ToolStatus
from harnessx._stream import OnReset, RunStream
from harnessx._submission import submission_for
from harnessx.store._protocol import Lease, NewSession, RunRecord, SessionRecord, Store
from harnessx.store._records import ControlRequest
from harnessx.store._scheduling import Schedule, delay_of
from harnessx.store._sqlite import SQLiteBackend

if TYPE_CHECKING:
    from harnessx._remote import RemoteBackend
    from harnessx._tools import ToolRegistry

__all__ = ["AgentRuntime", "RuntimeConfig"]

logger = logging.getLogger("harnessx.runtime")


def is_remote(backend: object) -> bool:
    """Whether ``backend`` runs agents elsewhere (``remote = True``: Temporal)."""
    return bool(getattr(backend, "remote", False))


# What a resumed run must agree on with the agent that started it.
_COMPATIBILITY_KEYS = ("model", "system_prompt", "tools")


@dataclass
class RuntimeConfig:
    """Runtime settings.

    ``max_session_duration_seconds`` bounds how long this runtime drives runs after it
    binds a session (``start`` or ``resume``): a run still going then stops at its next
    boundary, ``paused`` with stop reason ``timeout`` (resume it to continue). Leases last
    the backend's ``lease_seconds`` and are renewed every ``renew_interval`` seconds
    (default: a third of the lease)."""

    storage_dir: str = ".agent_sessions"
    max_session_duration_seconds: float | None = None
    renew_interval: float | None = None
    poll_interval: float = 0.1
    flush_interval: float = 0.05
    flush_max_events: int = 64

    def __post_init__(self) -> None:
        if not isinstance(self.storage_dir, str) or not self.storage_dir:
            raise ConfigurationError("RuntimeConfig.storage_dir must be a non-empty path")
        if self.max_session_duration_seconds is not None:
            check_positive(self.max_session_duration_seconds, "RuntimeConfig.max_session_duration_seconds")
        if self.renew_interval is not None and self.renew_interval <= 0:
            raise ConfigurationError("RuntimeConfig.renew_interval must be positive")


class AgentRuntime:
    """Drives an agent durably. ``async with`` starts a new session and stops on exit."""

    checks_definition: ClassVar[bool] = True
    """Whether binding a stored session checks it against this runtime's agent (the
    configuration and tool replay policies it was started with). A subclass that never
    drives a run, and commits only decisions and controls computed from the stored run
    alone, sets it to False: it has no definition to compare (the operator's runtime in
    harnessx/_operator.py, which decides for the console and the terminal)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> AgentRuntime:
        # A remote backend (Temporal) runs the agent on its workers: the same verbs, each a
        # request to the session's workflow (harnessx/_remote.py).
        if cls is AgentRuntime and getattr(kwargs.get("backend"), "remote", False):
            from harnessx._remote import RemoteRuntime

            return super().__new__(RemoteRuntime)
        return super().__new__(cls)

    def __init__(
        self,
        agent: Agent | AgentRef | None = None,
        *,
        backend: Store | RemoteBackend | None = None,
        registry: AgentRegistry | None = None,
        agent_config: AgentConfig | None = None,
        runtime_config: RuntimeConfig | None = None,
        execution: Literal["local", "pool"] = "local",
        recording: bool | None = None,
        tool_registrar: Callable[[ToolRegistry], object] | None = None,
    ) -> None:
        """``tool_registrar`` (0.9.1's): with no ``agent``, called with the tools of the
        agent this runtime builds (from ``agent_config``) before it first uses it; if it
        raises, the agent is closed and the error raised from that first use (``start()``)."""
        if recording is not None and not isinstance(recording, bool):
            raise ConfigurationError(f"recording must be True, False or None, got {recording!r}")
        if execution not in ("local", "pool"):
            raise ConfigurationError(f"execution must be 'local' or 'pool', got {execution!r}")
        if execution == "pool" and not isinstance(agent, AgentRef):
            raise ConfigurationError(
                "execution='pool' submits work by reference: pass AgentRef(name, version), which the "
                "workers resolve in their AgentRegistry"
            )
        self.execution = execution
        self._submission = submission_for(execution)
        self.config = runtime_config or RuntimeConfig()
        self._ref = agent if isinstance(agent, AgentRef) else None
        self._agent = agent if isinstance(agent, Agent) else None
        if agent is None:
            self._agent = Agent(config=agent_config)
        elif agent_config is not None or tool_registrar is not None:
            raise ConfigurationError(
                "pass agent_config and tool_registrar only when no agent is given: configure an Agent "
                "or AgentRef where it is defined"
            )
        self._registrar = tool_registrar
        self._registry = registry or agents
        self._owns_backend = backend is None
        assert not is_remote(backend), "AgentRuntime.__new__ makes a RemoteRuntime for a remote backend"
        self._backend: Store = cast(Store, backend) or SQLiteBackend(
            Path(self.config.storage_dir) / "runtime.sqlite3"
        )
        if recording and not callable(getattr(self._backend, "incident_snapshot", None)):
            raise ConfigurationError(
                f"flight recording needs a SQLite or PostgreSQL backend (SQLiteBackend, PostgresBackend); "
                f"{type(self._backend).__name__} keeps no journal"
            )
        self._holder = uuid.uuid4().hex
        self._session_id: str | None = None
        # A session start() bound that is not in the store yet: it is written with its first
        # run, in one statement, or when this runtime stops, binds elsewhere or resumes.
        self._unwritten: NewSession | None = None
        self._state = RuntimeState.INITIALIZING
        self._last_status: dict[str, Any] | None = None
        # The latest status this runtime knows without reading the store (what status()
        # last read, or the result of the run it drove last), for stop() to return.
        self._known: dict[str, Any] | None = None
        self._active: Execution | None = None
        self._keeper: LeaseKeeper | None = None
        self._executor: RunExecutor | None = None
        self._ready_done = False
        # None: as the session says (a new session is not recorded).
        self._recording_requested = recording
        self.recording = bool(recording)
        self._bound_at: float | None = None

    def __repr__(self) -> str:
        return f"AgentRuntime(agent={self._ref or self._agent!r}, session_id={self._session_id!r})"

    # ---------------------------------------------------------- properties

    @property
    def agent(self) -> Agent:
        """The agent this runtime drives. In pool mode the workers hold the real definition;
        this process records decisions with a bare agent (no model, no tools)."""
        if self._agent is None:
            assert self._ref is not None
            self._agent = self._submission.agent(self._ref, self._registry)
        return self._agent

    @property
    def pooled(self) -> bool:
        return self._submission.queued

    @property
    def session_id(self) -> str | None:
        return self._session_id

    @property
    def state(self) -> RuntimeState:
        """``INITIALIZING`` until bound to a session, then ``RUNNING`` (``PAUSED`` after
        ``pause()``), ``STOPPED`` after ``stop()``."""
        return self._state

    @property
    def backend(self) -> Store:
        return self._backend

    # ----------------------------------------------------------- lifecycle

    async def __aenter__(self) -> AgentRuntime:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _ready(self) -> Store:
        if self._state is RuntimeState.STOPPED:
            raise RuntimeStateError("this runtime is stopped; create a new AgentRuntime")
        if not self._ready_done:
            registrar, self._registrar = self._registrar, None
            if registrar is not None and self._agent is not None:
                try:
                    registrar(self._agent.tools)
                except BaseException:
                    await self._agent.aclose()  # this runtime built it: nobody else closes it
                    raise
            await self._backend.initialize()
            self._keeper = LeaseKeeper(self._backend, self.config.renew_interval)
            self._executor = RunExecutor(
                self._backend,
                self._keeper,
                flush_interval=self.config.flush_interval,
                flush_max=self.config.flush_max_events,
                rates=RateGate.shared(self._backend),
            )
            self._ready_done = True
        return self._backend

    async def start(self, session_id: str | None = None) -> str:
        """Bind to a new session (or to ``session_id``, creating it if needed). A new
        session is written with its first run (one round trip for both), or when the
        runtime stops without one."""
        store = await self._ready()
        await self._write_session()
        sid = session_id or uuid7()
        existing = await store.get_session(sid) if session_id else None
        if existing is not None:
            self._check_compatible(sid, existing.fingerprint)
            self._adopt_recording(existing)
            self._bind(sid)
        else:
            fingerprint = self._submission.fingerprint(self)
            ref = str(self._ref) if self._ref else None
            self._bind(sid)
            self._unwritten = NewSession(sid, ref, fingerprint, self.recording)
        return sid

    async def _write_session(self) -> None:
        """Write the new session start() bound, if no run has written it yet."""
        session = self._unwritten
        if session is not None:
            try:
                await self._backend.create_session(
                    session.id, session.agent_ref, session.fingerprint, recording=session.recording
                )
            except ConfigurationError:
                if await self._backend.get_session(session.id) is None:
                    raise
                # Written meanwhile: by an attempt of ours whose reply was lost, or by another
                # process binding the same id; either way it exists, as promised.
            self._unwritten = None

    def _adopt_recording(self, session: SessionRecord) -> None:
        """Record a bound session's runs as it was started to (it cannot change)."""
        wanted = self._recording_requested
        if wanted is not None and wanted != session.recording:
            raise ConfigurationError(
                f"Recording configuration differs from persisted session {session.id}: it was started "
                f"with recording={session.recording}; create the runtime with "
                f"recording={session.recording} or None (as the session says)"
            )
        self.recording = session.recording

    def _bind(self, session_id: str) -> None:
        if self._session_id != session_id and self._active is not None and not self._active.task.done():
            raise RuntimeStateError(
                f"this runtime is driving a run of session {self._session_id}; wait for it or stop() first"
            )
        self._bound_at = time.monotonic()  # max_session_duration_seconds counts from here
        self._session_id = session_id
        self._state = RuntimeState.RUNNING

    async def stop(self) -> dict[str, Any]:
        """Pause local work at its next boundary, release leases, close the agent and any
        backend this runtime created. Returns the status this runtime last knew (what
        ``status()`` last read, or the result of the run it drove or waited for last;
        ``"run"`` ``None`` when it knows neither), with ``state`` ``"stopped"``, without reading the store.
        Safe to call more than once."""
        if self._state is RuntimeState.STOPPED:
            assert self._last_status is not None
            return self._last_status
        last: dict[str, Any] = {"session_id": self._session_id or "", "run": None}
        try:
            active = self._active
            if active is not None and not active.task.done():
                active.control.request_pause()
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await active.task
            await self._write_session()  # a session started without a run still exists after
            if self._known is not None and self._known["session_id"] == self._session_id:
                last = dict(self._known)  # no store read: stopping costs no round trip
        finally:
            if self._keeper is not None:
                await self._keeper.aclose()
            if self._executor is not None:
                await self._executor.rates.flush()  # what its calls owe the rate buckets (logged if not)
            self._state = RuntimeState.STOPPED
            self._last_status = {**last, "state": RuntimeState.STOPPED.value}
            try:
                if self._agent is not None:
                    await self._agent.aclose()
            finally:
                if self._owns_backend:
                    await self._backend.aclose()
        return self._last_status

    async def aclose(self) -> dict[str, Any]:
        """Alias of ``stop()``."""
        return await self.stop()

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
        """Start a run of ``message`` in the bound session and return its handle.

        A pool runtime's run waits in the queue until a worker claims it; how it waits is
        its schedule (docs/scheduling.md): ``priority`` (higher first, ties by age; default:
        the agent's, else 0), ``concurrency_key`` (limits count the runs of a key),
        ``tenant`` (its fair-share group; default: the concurrency key) and ``not_before``
        (a time, or a delay from now, before which no worker claims it).

        ``stream=True`` records the model's text as it is written (``text_delta`` events) for
        followers of ``handle.events()``; ``run()`` passes False. A resumed run streams."""
        if not isinstance(message, str):
            raise ConfigurationError(f"message must be a str, got {type(message).__name__}")
        # By reference the agent is built where it runs: the default limit applies here.
        cap = (self._agent.config.limits if self._agent is not None else Limits()).max_stored_chars
        if len(message) > cap:
            raise ConfigurationError(
                f"the message is {len(message):,} characters, over the {cap:,} a run stores "
                "(Limits.max_stored_chars): send a shorter message (or say where the text is, "
                "for a tool to read), or raise the agent's Limits(max_stored_chars=...)"
            )
        schedule = self._schedule(priority, concurrency_key, tenant, not_before)
        store = await self._ready()
        if self._session_id is None:
            await self.start()
        sid = self._session_id
        assert sid is not None
        new = self._unwritten if self._unwritten is not None and self._unwritten.id == sid else None
        if request_id is not None and new is None:  # a session not written yet has no runs
            existing = await store.find_run(sid, request_id)
            if existing is not None:
                return self._existing_handle(existing, message, request_id)
        if self._active is not None and not self._active.task.done():
            raise SessionBusyError(f"session {sid} already has an unfinished run ({self._active.run_id})")
        run_id = uuid7()
        probe = RunState(session_id=sid, run_id=run_id)
        if new is not None:
            # The session, its lease and the run in one statement.
            start = self.agent.engine(durable=True).start(probe, message)
            journal = await self._run_started(probe, start, message, history=[]) if self.recording else ()
            try:
                lease = await store.create_session_run(
                    new,
                    self._holder,
                    run_id,
                    request_id,
                    message,
                    start,
                    queued=self._submission.queued,
                    journal=journal,
                    schedule=schedule,
                )
            except ConfigurationError:
                found = await store.get_session(sid)
                if found is None:
                    raise
                # Written meanwhile (an earlier submit whose reply was lost, another process
                # binding the same id): go on as start() does with a session it finds.
                self._check_compatible(sid, found.fingerprint)
                self._adopt_recording(found)
                self._unwritten = None
                return await self.submit(message, request_id=request_id)
            self._unwritten = None
            # The run's state is what was written (a new session has no history), so there
            # is nothing to load.
            probe.apply(start)
            return await self._submission.submitted(self, lease, run_id, probe, stream=stream)
        lease = await store.claim(sid, self._holder)
        try:
            start = self.agent.engine(durable=True).start(probe, message)
            journal = await self._run_started(probe, start, message) if self.recording else ()
            await store.create_run(
                lease,
                run_id,
                request_id,
                message,
                start,
                queued=self._submission.queued,
                journal=journal,
                schedule=schedule,
            )
        except BaseException:
            with contextlib.suppress(StorageError):
                await store.release(lease)
            raise
        return await self._submission.submitted(self, lease, run_id, None, stream=stream)

    def _schedule(
        self,
        priority: int | None,
        concurrency_key: str | None,
        tenant: str | None,
        not_before: dt.datetime | dt.timedelta | None,
    ) -> Schedule | None:
        """``submit``'s scheduling options as the store takes them (``None``: none given)."""
        if priority is None and concurrency_key is None and tenant is None and not_before is None:
            return None
        return self._submission.schedule(Schedule(priority, concurrency_key, tenant, delay_of(not_before)))

    async def _run_started(
        self, probe: RunState, start: Delta, message: str, *, history: list[dict[str, Any]] | None = None
    ) -> list[JournalRecord]:
        """A recorded run's first journal records, written with the run: what it was asked,
        in which conversation (``history``: read from the store unless given), by which agent."""
        store = self._backend
        if history is None:
            latest = await store.latest_run(probe.session_id, messages=False)
            history = (await store.load_state(latest.id)).messages if latest is not None else []
        ref = self._ref
        journal = RunJournal(probe)
        journal.note(
            "run.started",
            {
                "message": message,
                "initial_messages": history,
                "agent": {"name": ref.name, "version": ref.version} if ref is not None else None,
                "config": self._submission.recorded_config(self),
            },
        )
        return journal.for_commit(probe, start, start.events)

    def _existing_handle(self, record: RunRecord, message: str, request_id: str) -> RunHandle:
        if record.request_message != message:
            raise ConfigurationError(
                f"request_id {request_id!r} was already used in session {record.session_id} with a different "
                "message; use a new request_id for a new request"
            )
        active = self._active
        if active is not None and active.run_id == record.id:
            return RunHandle(self, record.session_id, record.id, start_seq=active.start_seq, task=active.task)
        start = 0 if record.status in UNFINISHED_STATUSES else max(record.event_count - 1, 0)
        return RunHandle(self, record.session_id, record.id, start_seq=start)

    async def run(self, message: str, *, request_id: str | None = None) -> RunResult:
        """Run ``message`` durably and return its result (an approval stop is ``needs_input``)."""
        handle = await self.submit(message, request_id=request_id, stream=False)
        return await handle.result()

    def run_stream(self, message: str, *, request_id: str | None = None) -> RunStream:
        """Submit ``message`` on first use and stream the run's events."""
        handle: RunHandle | None = None

        async def start() -> None:
            nonlocal handle
            handle = await self.submit(message, request_id=request_id)

        def source(after: str) -> AsyncIterator[RunEvent]:
            assert handle is not None
            return handle.events(after)

        async def result() -> RunResult:
            assert handle is not None
            return await handle.result()

        return RunStream(source, result, start=start)

    async def stream_text(
        self, message: str, *, request_id: str | None = None, on_reset: OnReset | None = None
    ) -> AsyncIterator[str]:
        """The answer's text; raises a ``RunError`` subclass at the end if the run is not ``ok``."""
        async with self.run_stream(message, request_id=request_id) as stream:
            async for chunk in stream.text(on_reset=on_reset):
                yield chunk

    async def resume(self, session_id: str) -> RunHandle | None:
        """Continue the session's latest run; ``None`` if it has none or it is completed or
        cancelled. Raises for a missing session, an incompatible agent, or a session another
        live process holds (``SessionBusyError``)."""
        store = await self._ready()
        await self._write_session()
        session = await store.get_session(session_id)
        if session is None:
            raise StorageError(
                f"no session {session_id!r} in this store: check the id, and that this runtime uses the "
                "same database (and schema) as the one that started it"
            )
        self._check_compatible(session_id, session.fingerprint)
        self._adopt_recording(session)
        self._bind(session_id)
        active = self._active
        if active is not None and not active.task.done():
            return RunHandle(self, session_id, active.run_id, start_seq=active.start_seq, task=active.task)
        record = await store.latest_run(session_id, messages=False)
        if record is None or record.status in CLOSED_STATUSES:
            return None
        try:
            lease = await self._claim(store, session_id)
        except SessionBusyError as busy:
            return self._submission.busy(self, record, busy)
        try:
            handle = await self._submission.resumed(self, lease, record, session.control)
        except BaseException:
            with contextlib.suppress(StorageError):
                await store.release(lease)
            raise
        return handle

    async def _claim(self, store: Store, session_id: str) -> Lease:
        """Claim the session to resume, decide or control its latest run. A holder whose run
        is no longer running has committed its last boundary and is letting go (a worker
        that just paused it, a process recording a decision): wait for it, up to a lease,
        rather than act as if it still drove the run (following a run nobody drives would
        wait for ever). ``SessionBusyError`` while the run is running: someone drives it."""
        deadline = time.monotonic() + store.lease_seconds
        while True:
            try:
                return await store.claim(session_id, self._holder)
            except SessionBusyError:
                record = await store.latest_run(session_id, messages=False)
                if record is None or record.status is RunStatus.RUNNING or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.02)

    def _launch(
        self,
        lease: Lease,
        state: RunState,
        *,
        last_seq: int,
        resumed: bool = False,
        stream: bool = True,
        pending: ControlRequest | None = None,
    ) -> RunHandle:
        assert self._executor is not None
        execution = self._executor.launch(
            self.agent,
            lease,
            state,
            last_seq=last_seq,
            resumed=resumed,
            recording=self.recording,
            stream=stream,
            pending=pending,
        )
        self._active = execution
        execution.task.add_done_callback(self._remember_result)
        execution.task.add_done_callback(lambda task: self._keep_conversation(task, state))
        limit = self.config.max_session_duration_seconds
        if limit is not None and self._bound_at is not None:
            left = max(0.0, limit - (time.monotonic() - self._bound_at))
            timer = asyncio.get_running_loop().call_later(left, execution.control.request_pause, "timeout")
            execution.task.add_done_callback(lambda _: timer.cancel())
        return RunHandle(self, state.session_id, state.run_id, start_seq=last_seq, task=execution.task)

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
        """Record a decision on a call awaiting approval.

        With ``resume=True`` the run then continues, and its ``RunResult`` is returned once
        it finishes or stops again (in pool mode, once a worker has driven it that far). A
        run with several pending calls takes one decision each, then one resume.
        """

        def decide(state: RunState, key: str) -> Delta:
            self._expect(state, key, ToolStatus.APPROVAL)
            return self.agent.engine(durable=True).approve(state, key, allow)

        session_id = await self._decide(target, decide, {"allow": allow})
        return await self._finish_resume(session_id) if resume else None

    @overload
    async def decline(self, target: str | PendingTool, *, resume: Literal[False] = ...) -> None: ...

    @overload
    async def decline(self, target: str | PendingTool, *, resume: Literal[True]) -> RunResult: ...

    @overload
    async def decline(self, target: str | PendingTool, *, resume: bool) -> RunResult | None: ...

    async def decline(self, target: str | PendingTool, *, resume: bool = False) -> RunResult | None:
        """Decline a call awaiting approval: the model sees ``Permission denied``."""
        if resume:
            return await self.approve(target, allow=False, resume=True)
        await self.approve(target, allow=False)
        return None

    async def _finish_resume(self, session_id: str) -> RunResult:
        handle = await self.resume(session_id)
        if handle is not None:
            return await handle.result()
        run = (await self.status())["run"]
        if run is None:
            raise RuntimeStateError(f"session {session_id} has no run to resume")
        assert isinstance(run, RunResult)
        return run

    async def resolve_tool(
        self,
        target: str | PendingTool,
        *,
        result: ToolResult | None = None,
        retry: bool = False,
        abort: bool = False,
    ) -> None:
        """Settle an ``uncertain`` call: a verified ``result``, ``retry=True`` (invoke it
        again) or ``abort=True`` (end the run cancelled; nothing is undone)."""
        if (result is not None) + bool(retry) + bool(abort) != 1:
            raise ResolutionError("pass exactly one of result=ToolResult(...), retry=True or abort=True")

        def decide(state: RunState, key: str) -> Delta:
            self._expect(state, key, ToolStatus.UNCERTAIN)
            if retry and state.status is RunStatus.CANCELLED:
                raise ResolutionError(
                    f"run {state.run_id} was cancelled, so its call cannot be retried: pass the verified "
                    "result=, or start a new run"
                )
            return self.agent.engine(durable=True).resolve(
                state, key, result=result, retry=retry, abort=abort
            )

        await self._decide(target, decide, {"result": result, "retry": retry, "abort": abort})

    @staticmethod
    def _expect(state: RunState, key: str, status: ToolStatus) -> None:
        expect_waiting(state, key, status)

    async def _decide(self, target: str | PendingTool, decide: Any, decision: dict[str, Any]) -> str:
        store = await self._ready()
        key = target.execution_key if isinstance(target, PendingTool) else str(target)
        run_id = ExecutionKey.run_of(key)
        record = await store.get_run(run_id, messages=False)
        if record is None:
            raise UnknownExecutionKey(key, f"no run has a tool call with execution key {key!r}")
        await self._write_session()  # it binds the run's session
        session = await store.get_session(record.session_id)
        assert session is not None
        self._check_compatible(record.session_id, session.fingerprint)
        self._adopt_recording(session)
        self._bind(record.session_id)
        self._refuse_while_driving()
        lease = await self._claim(store, record.session_id)
        try:
            state = await store.load_state(run_id)
            delta = decide(state, key)
            journal = None
            if self.recording:
                journal = RunJournal(state)
                journal.tools_resolved(delta, [key], **decision)
            assert self._executor is not None
            await self._executor.commit_once(
                self.agent, lease, state, delta, record.event_count, journal=journal
            )
            if state.status.finished:
                # A waiting run ended here, not by a driver: its end is announced as a
                # driven run's is (AGENT_END, the extensions' on_turn_complete).
                result = state.result()
                await turn_completed(self.agent, result)
                await self.agent.hooks.fire(HookEvent.AGENT_END, self.agent, result=result)
        finally:
            with contextlib.suppress(StorageError):
                await store.release(lease)
        return record.session_id

    # ------------------------------------------------------------ controls

    async def pause(self) -> None:
        """Stop starting new steps; active tools settle, then the run is ``paused``."""
        await self._control("pause")
        self._state = RuntimeState.PAUSED

    async def cancel(self) -> None:
        """Cancel cooperatively; threads or remote effects may outlive the run."""
        await self._control("cancel")

    async def _control(self, request: ControlRequest) -> None:
        store = await self._ready()
        sid = self._require_session()
        active = self._active
        if active is not None and not active.task.done():
            if request == "pause":
                # Active tools settle first; the handle's result() reports the pause.
                active.control.request_pause()
                return
            active.control.request_cancel()
            # Cancellation interrupts model calls and tool waits, so this is quick.
            with contextlib.suppress(Exception):
                await asyncio.shield(active.task)
            return
        for attempt in itertools.count(1):
            record = await store.latest_run(sid, messages=False)
            if record is None or record.status not in UNFINISHED_STATUSES:
                return
            if request == "pause" and record.status is not RunStatus.RUNNING:
                return
            try:
                lease = await self._claim(store, sid)
                break
            except SessionBusyError:
                # Another live process drives it: its lease renewals bring it the request.
                if await store.set_control(sid, request):
                    return
                # Its run stopped meanwhile and its holder lets go: look again (a holder that
                # keeps a stopped run for longer than a few leases is not letting go).
                if attempt == 3:
                    raise
        assert record is not None and self._executor is not None
        try:
            try:
                state = await store.load_state(record.id)
            except CorruptStateError:
                if request == "pause":
                    raise
                # Its state cannot be read, and cancelling must still work: end it from its
                # row alone (nothing was decided on what the state says).
                await self._executor.end_run(lease, record, RunStatus.CANCELLED, "")
                return
            engine = self.agent.engine(durable=True)
            delta = engine.pause(state) if request == "pause" else engine.cancel(state)
            journal = RunJournal(state) if self.recording else None
            await self._executor.commit_once(
                self.agent, lease, state, delta, record.event_count, journal=journal
            )
            if state.status.finished:
                # A waiting run ended here, not by a driver: its end is announced as a
                # driven run's is (AGENT_END, the extensions' on_turn_complete).
                result = state.result()
                await turn_completed(self.agent, result)
                await self.agent.hooks.fire(HookEvent.AGENT_END, self.agent, result=result)
        finally:
            with contextlib.suppress(StorageError):
                await store.release(lease)

    async def export_incident(
        self,
        run_id: str,
        *,
        destination: str | Path,
        policy: ExportPolicy | None = None,
        limits: BundleLimits | None = None,
    ) -> Path:
        """Write a recorded run of the bound session as an incident bundle (payloads omitted
        unless ``policy`` includes them; see ``export_incident``). Runs nothing."""
        store = await self._ready()
        session_id = self._require_session()
        await self._write_session()
        return await export_incident(store, session_id, run_id, destination, policy=policy, limits=limits)

    async def delete_session(self, session_id: str, *, force: bool = False) -> dict[str, int]:
        """Erase a session and everything it owns (its runs, conversation, tool calls, events,
        journal, operators' actions): a user's right-to-erasure request. Refused
        (``SessionBusyError``) while a run of it is unfinished, unless ``force=True``, which
        cancels that run first (and waits, up to two leases, for a process driving it to
        stop). Returns the rows removed per table."""
        from harnessx._erasure import erase_session
        from harnessx._operator import default_actor

        store = await self._ready()
        active = self._active
        if active is not None and active.session_id == session_id and not active.task.done():
            if not force:
                raise SessionBusyError(
                    f"this runtime is driving run {active.run_id} of session {session_id}: wait for "
                    "it, or delete with force=True, which cancels it"
                )
            active.control.request_cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(active.task)
        deleted = await erase_session(store, session_id, force=force, actor=default_actor(), via="api")
        if self._session_id == session_id:
            self._session_id = None  # the next submit() starts a new session
        return deleted

    async def status(self) -> dict[str, Any]:
        """``{"session_id", "state", "run"}``: ``state`` is this runtime's ``RuntimeState``
        value and ``run`` the latest run's ``RunResult`` (``None`` without a run). A pool
        runtime's status also has ``schedule``: the run's place in the queue (``queued``,
        ``not_before``, ``priority``, ``concurrency_key``, ``tenant``, ``queued_at``,
        ``claimed_at``)."""
        store = await self._ready()
        sid = self._require_session()
        record = await store.latest_run(sid, messages=False)
        run = (await store.load_state(record.id)).result() if record is not None else None
        status: dict[str, Any] = {"session_id": sid, "state": self._state.value, "run": run}
        if record is not None:
            status.update(await self._submission.status_of(store, record))
        self._known = {k: v for k, v in status.items() if k != "state"}
        return status

    def _keep_conversation(self, task: asyncio.Task[RunResult], state: RunState) -> None:
        """``agent.memory`` shows the session's conversation once a run stops, as in harnessx
        0.9.1 (the store stays its record: the next run reads it from there)."""
        if not task.cancelled() and task.exception() is None and state.status is not RunStatus.RUNNING:
            self.agent.memory.replace_engine_messages(list(state.messages))

    def _remember_result(self, task: asyncio.Task[RunResult]) -> None:
        if not task.cancelled() and task.exception() is None:
            self._remember(task.result())

    def _remember(self, result: RunResult) -> None:
        """``result`` is the latest this runtime knows of its session's runs (what ``stop()``
        returns without a read)."""
        self._known = {"session_id": result.session_id, "run": result}

    async def checkpoint(self) -> RunRecord | None:
        """The latest run of the bound session as stored. Every boundary is already
        committed, so there is nothing to save; refused while this runtime drives a run."""
        if self._active is not None and not self._active.task.done():
            raise SessionBusyError("a run is being driven; each of its boundaries is already checkpointed")
        store = await self._ready()
        return await store.latest_run(self._require_session())

    def _refuse_while_driving(self) -> None:
        if self._active is not None and not self._active.task.done():
            raise RuntimeStateError(
                f"run {self._active.run_id} is being driven by this runtime; wait for its result first"
            )

    def _require_session(self) -> str:
        if self._session_id is None:
            raise RuntimeStateError(
                "this runtime is not bound to a session: call start() or resume(session_id)"
            )
        return self._session_id

    def _check_compatible(self, session_id: str, saved: dict[str, Any]) -> None:
        if not self.checks_definition or not saved or not self._submission.compares_definition:
            return
        current = self.agent.fingerprint()
        problems: list[str] = []
        saved_config, current_config = saved.get("config", {}), current["config"]
        for key in _COMPATIBILITY_KEYS:
            if key == "model" and saved_config.get(key) == "":
                continue  # stored before 0.2, when "" meant the provider's default model
            if key in saved_config and saved_config[key] != current_config.get(key):
                problems.append(
                    f"{key}: session has {saved_config[key]!r}, agent has {current_config.get(key)!r}"
                )
        for name, policy in (saved.get("tools") or {}).items():
            now = current["tools"].get(name)
            if now is None:
                problems.append(f"tool '{name}' is not registered on this agent")
            elif now != policy:
                problems.append(f"tool '{name}' replay policy: session has '{policy}', agent has '{now}'")
        if problems:
            raise ConfigurationError(
                f"cannot use session {session_id} with this agent: "
                + "; ".join(problems)
                + ". Resume it with an agent defined like the one that started it."
            )

    # ----------------------------------------------------------- observing

    async def _follow(
        self, run_id: str, after: str, session_id: str | None = None
    ) -> AsyncIterator[RunEvent]:
        store = await self._ready()

        def local_feed() -> RunFeed | None:
            active = self._active
            return active.feed if active is not None and active.run_id == run_id else None

        async for event in follow_events(
            store,
            run_id,
            after,
            poll_interval=self.config.poll_interval,
            local_feed=local_feed,
            session_id=session_id,
        ):
            yield event

    async def _await_result(self, run_id: str, start_seq: int) -> RunResult:
        active = self._active
        session_id = None
        if active is None or active.run_id != run_id:
            # Driven elsewhere (a pool run): wait for it to stop, then read its events once.
            store = await self._ready()
            stopped = await until_stopped(store, run_id, poll_interval=self.config.poll_interval)
            finished = await finished_result(store, stopped, str(start_seq)) if stopped else None
            if finished is not None:
                self._remember(finished)
                return finished
            session_id = stopped.session_id if stopped is not None else None
        last: RunResult | None = None
        async for event in self._follow(run_id, str(start_seq), session_id):
            if event.type is RunEventType.RUN_RESULT:
                last = event.data
        if last is None:
            raise StorageError(f"run {run_id} has no result to report")
        self._remember(last)  # a pool run's result, as a run driven here is remembered
        return last
