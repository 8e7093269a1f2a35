"""``TemporalBackend``: durable runs on a Temporal cluster, driven by Temporal workers.

The client side of the binding. ``AgentRuntime(AgentRef(...), backend=TemporalBackend)``
turns every verb into a workflow update or query of the session's workflow
(``harnessx-session:<id>``), and follows events from the event sink (``RedisEvents``).
``await backend.worker()`` builds the Temporal worker that runs the workflows and their
activities with the agents of ``registry``.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import time
import uuid
import weakref
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Self

from temporalio.client import (
    Client,
    RPCTimeoutOrCancelledError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.service import RPCError

from harnessx import _errors
from harnessx._errors import ConfigurationError, StorageError
from harnessx._events import RunEvent, RunEventType
from harnessx._registry import AgentRef, AgentRegistry, agents
from harnessx._results import RunResult, RunStatus
from harnessx._runlog import parse_cursor
from harnessx.store._records import ControlRequest, RunRecord
from harnessx.temporal._artifacts import ArtifactCodec, ArtifactStore, data_converter
from harnessx.temporal._events import EventSink
from harnessx.temporal._workflow import WORKFLOW_NAME, workflow_id

if TYPE_CHECKING:
    from temporalio.worker import Worker

    from harnessx.store._protocol import Store

__all__ = ["DEFAULT_TASK_QUEUE", "TemporalBackend"]

DEFAULT_TASK_QUEUE = "harness-x-v1"
_MEMO_AGENT = "harnessx_agent"
# Errors an update refuses with, raised on the client as the same harnessx class.
_REFUSALS = (
    "ConfigurationError",
    "SessionBusyError",
    "UnknownExecutionKey",
    "ResolutionError",
    "RuntimeStateError",
)


class TemporalBackend:
    """Runs on Temporal. ``events`` is where followers read a run's events.

    ``heartbeat_timeout`` is how long a model or tool activity may go without a heartbeat
    before Temporal gives up on its worker (the next attempt of a ``safe``/``idempotent``
    tool starts then; a ``manual`` one becomes uncertain). It is written into each new
    session, so the workflow's schedule stays deterministic.
    """

    remote = True

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str = DEFAULT_TASK_QUEUE,
        events: EventSink,
        artifact_store: ArtifactStore | None = None,
        registry: AgentRegistry | None = None,
        heartbeat_timeout: float = 10.0,
        model_timeout: float = 600.0,
        tool_timeout: float = 3600.0,
        poll_interval: float = 0.5,
        rate_limits: Store | None = None,
    ) -> None:
        if events is None:
            raise ConfigurationError("TemporalBackend needs events=RedisEvents(url): where run events go")
        if heartbeat_timeout <= 0 or model_timeout <= 0 or tool_timeout <= 0:
            raise ConfigurationError("TemporalBackend timeouts must be positive")
        self._client: Client | None = client
        self.task_queue = task_queue
        self.events = events
        self.artifact_store = artifact_store
        self.registry = registry or agents
        self.settings = {
            "heartbeat_timeout": float(heartbeat_timeout),
            "model_timeout": float(model_timeout),
            "tool_timeout": float(tool_timeout),
        }
        self.poll_interval = poll_interval
        # A store the fleet shares (harnessx limits rate ... against it): this backend's
        # workers' model calls obey its rate limits (docs/scheduling.md). Not closed here.
        self.rate_limits = rate_limits
        self._owns_client = False
        # connect()'s own Temporal runtime (the Rust core's thread pool), shut down by aclose().
        self._runtime: Runtime | None = None

    @property
    def client(self) -> Client:
        """The ``temporalio`` client. One ``connect()`` made is gone once the backend is closed."""
        if self._client is None:
            raise ConfigurationError(
                "this TemporalBackend is closed (its Temporal client went with it): connect a new one"
            )
        return self._client

    def __repr__(self) -> str:
        return f"TemporalBackend(task_queue={self.task_queue!r}, events={self.events!r})"

    @classmethod
    async def connect(
        cls,
        target: str,
        *,
        events: EventSink,
        namespace: str = "default",
        artifact_store: ArtifactStore | None = None,
        runtime: Runtime | None = None,
        **kwargs: Any,
    ) -> TemporalBackend:
        """Connect to the Temporal frontend at ``target`` (``host:port``).

        The client runs on a Temporal ``Runtime`` of its own (``runtime=``: on yours, which
        nothing here shuts down), and ``aclose()`` shuts that runtime down."""
        # Why a runtime of its own: the Rust core's threads complete each call's asyncio
        # future while holding the GIL, and let go of it halfway (the loop's self-pipe
        # write). Should the program return from asyncio.run in that gap, the interpreter
        # starts finalizing, and that thread, taking the GIL back, aborts the process
        # ("PyGILState_Release: ... finalizing", temporalio/sdk-python#300). Only dropping
        # the runtime joins those threads, and the process-wide default one is never
        # dropped; this one is, in aclose(), while the event loop still runs.
        own_runtime = Runtime(telemetry=TelemetryConfig()) if runtime is None else None
        try:
            client = await Client.connect(
                target,
                namespace=namespace,
                data_converter=data_converter(artifact_store),
                runtime=runtime or own_runtime,
            )
        except RuntimeError as exc:
            raise ConfigurationError(
                f"cannot connect to Temporal at {target!r} (namespace {namespace!r}): {exc}; check that "
                "the frontend runs there (temporal server start-dev, or your cluster's address)"
            ) from None
        backend = cls(client, events=events, artifact_store=artifact_store, **kwargs)
        backend._owns_client = True
        backend._runtime = own_runtime
        return backend

    async def __aenter__(self) -> Self:
        await self.initialize()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def initialize(self) -> None:
        if self.artifact_store is not None:
            codec = self.client.data_converter.payload_codec
            if not isinstance(codec, ArtifactCodec):
                raise ConfigurationError(
                    "artifact_store= needs a client whose data converter offloads to it: use "
                    "TemporalBackend.connect(), or Client.connect(data_converter=data_converter(store))"
                )
        await self.events.initialize()

    async def aclose(self) -> None:
        """Close the event sink, and the client ``connect()`` made (nothing of a client
        passed in)."""
        try:
            await self.events.aclose()
        finally:
            if self._owns_client:
                await self._release_client()

    async def _release_client(self) -> None:
        """Let go of the client ``connect()`` made, and shut its runtime down now.

        The runtime shuts down (its threads joined, with the GIL released, so a thread that
        is completing a future finishes first) when the last reference to it goes: the
        client's and the runtime object's. ``temporalio``'s client refers to itself (its
        interceptor chain), so a collection pass frees it; a client the program still holds
        keeps the runtime until then."""
        self._client = None
        runtime, self._runtime = self._runtime, None
        if runtime is None:
            return
        dropped = weakref.ref(runtime)
        del runtime
        # One pass through the loop first: the callback that last woke this task (a call's
        # completion) is held until the loop's next pass, and a failed call's future holds
        # its traceback, whose frames hold the client.
        await asyncio.sleep(0)
        if dropped() is not None:
            gc.collect()

    async def worker(self, **options: Any) -> Worker:
        """A Temporal worker for this task queue and registry (``async with`` runs it)."""
        from harnessx.temporal._worker import build_worker

        return build_worker(self, **options)

    # -------------------------------------------------------------- sessions

    def handle(self, session_id: str) -> WorkflowHandle[Any, Any]:
        return self.client.get_workflow_handle(workflow_id(session_id))

    async def create_session(self, session_id: str, agent: AgentRef) -> None:
        data = {"session_id": session_id, "agent": str(agent), "settings": dict(self.settings)}
        try:
            await self.client.start_workflow(
                WORKFLOW_NAME,
                data,
                id=workflow_id(session_id),
                task_queue=self.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                memo={_MEMO_AGENT: str(agent)},
            )
        except WorkflowAlreadyStartedError:
            found = await self.session_agent(session_id)
            if found != agent:
                raise ConfigurationError(
                    f"session {session_id} exists with agent {found}; bind it with AgentRef "
                    f"{found} or start a new session"
                ) from None
        except RPCError as exc:
            raise _unreachable(self, exc) from None

    async def session_agent(self, session_id: str) -> AgentRef | None:
        """The agent a session was started with (from its memo: no worker needed)."""
        try:
            described = await self.handle(session_id).describe()
        except RPCError as exc:
            if "not found" in str(exc).lower():
                return None
            raise _unreachable(self, exc) from None
        memo = await described.memo()
        ref = memo.get(_MEMO_AGENT)
        return AgentRef.parse(str(ref)) if ref else None

    # ----------------------------------------------------------------- runs

    async def submit(self, session_id: str, message: str, request_id: str | None) -> str:
        run_id = uuid.uuid4().hex
        request = {"run_id": run_id, "message": message, "request_id": request_id}
        # Temporal answers a repeated update id with the first outcome, without asking the
        # workflow: the id names the message too, so a reused request_id with another
        # message reaches the workflow, which refuses it.
        digest = hashlib.sha256(message.encode()).hexdigest()[:16]
        update_id = f"submit:{request_id}:{digest}" if request_id else f"submit:{run_id}"
        outcome = await self._update(session_id, "submit", request, update_id=update_id)
        return str(outcome["run_id"])

    async def resume(self, session_id: str) -> str | None:
        outcome = await self._update(session_id, "resume", None)
        run_id = outcome.get("run_id")
        return str(run_id) if run_id else None

    async def decide(self, session_id: str, decision: dict[str, Any]) -> None:
        await self._update(session_id, "decide", decision)

    async def control(self, session_id: str, action: ControlRequest) -> None:
        await self._update(session_id, "control", {"action": action})

    async def request_pause(self, session_id: str, run_id: str | None) -> None:
        """Ask run ``run_id`` (``None``: the session's current run) to pause at its next
        boundary, without waiting. A signal, not an update: Temporal records it even while
        no worker is up, and the workflow applies it when one runs."""
        try:
            await self.handle(session_id).signal("pause", {"run_id": run_id})
        except RPCError as exc:
            raise _missing_or_unreachable(self, session_id, exc) from None

    async def run_record(self, session_id: str, run_id: str) -> dict[str, Any]:
        return dict(await self._query(session_id, "run", run_id))

    async def latest_run(self, session_id: str, *, messages: bool = True) -> RunRecord | None:
        """The session's latest run as the stores return it (``None`` before its first run):
        a ``RunRecord``, read as the original harnessx's state mapping (``["status"]``,
        ``["phase"]`` by the original's phase names, ``["output"]``, ``["messages"]``, ...).
        Read from the session's workflow, as 0.9.1's ``TemporalBackend.latest_run()`` does;
        ``messages=False`` leaves the conversation out (one query instead of two)."""
        record = await self._query(session_id, "latest")
        if not record or "phase" not in record:
            return None  # no run yet, or a workflow of a build before this query said more
        result = dict(record.get("result") or {})
        result["iteration"] = int(record.get("iteration", 0))
        conversation = None
        if messages:
            # A query of its own: the status polls read "latest" and need no conversation.
            conversation = await self._query(session_id, "conversation", str(result.get("run_id", "")))
        return RunRecord(
            id=str(result.get("run_id", "")),
            session_id=session_id,
            request_id=record.get("request_id"),
            request_message=str(record.get("message", "")),
            status=RunStatus(record["status"]),
            phase=str(record["phase"]),
            event_count=int(record.get("cursor", 0)),
            result=result,
            conversation=conversation,
        )

    async def latest_result(self, session_id: str) -> RunResult | None:
        record = await self._query(session_id, "latest")
        return RunResult.from_dict(record["result"]) if record and record.get("result") else None

    async def session_of(self, run_id: str) -> str | None:
        """The session of a run, read from its first event (``None`` without events)."""
        first = await self.events.read(run_id, 0, limit=1)
        return first[0].session_id if first else None

    async def wait_result(self, session_id: str, run_id: str) -> RunResult:
        """The run's result once it stops running (finished, waiting or paused).

        A query costs a workflow task on a worker (a replay of the history if no worker has
        the workflow cached), so this asks the workflow only when the event stream shows the
        run stopped (every stop publishes ``run_result``), and every ``30 * poll_interval``
        seconds besides, in case the stream is unreachable. Polling the workflow at every
        event starved the workers' query answers under the chaos profile's load."""
        position = 0
        settle = 0.05
        while True:
            record = await self.run_record(session_id, run_id)
            if record.get("status") != "running":
                if not record.get("busy"):
                    return RunResult.from_dict(record["result"])
                # Stopped; the workflow is finishing that step (a moment): look again soon.
                await asyncio.sleep(settle)
                settle = min(settle * 2, self.poll_interval)
                continue
            settle = 0.05
            # The stop comes after what the workflow had published when it answered.
            position = max(position, int(record.get("cursor", 0)))
            position = await self._until_run_result(run_id, position, self.poll_interval * 30)

    async def _until_run_result(self, run_id: str, position: int, within: float) -> int:
        """Read the run's events after ``position`` until a ``run_result`` or ``within``
        seconds; the position reached."""
        deadline = time.monotonic() + within
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                events = await self.events.read(run_id, position)
                for event in events:
                    position = int(event.cursor or position)
                    if event.type is RunEventType.RUN_RESULT:
                        return position
                if not events:
                    await self.events.wait(run_id, position, remaining)
            except StorageError:
                # The stream is down: ask the workflow instead, at a slow pace.
                await asyncio.sleep(min(remaining, self.poll_interval * 4))
                break
        return position

    async def follow(self, session_id: str, run_id: str, after: str) -> AsyncIterator[RunEvent]:
        """Events behind ``after`` until the run's current execution has ended."""
        position = parse_cursor(after)
        result_at = -1
        looked = False
        while True:
            events = await self.events.read(run_id, position)
            for event in events:
                position = int(event.cursor or position)
                yield event
                if event.type is RunEventType.RUN_RESULT:
                    result_at = position
            if events:
                continue
            # A query costs a workflow task: asked after the run_result, and once for a
            # follower that starts behind everything there is.
            if result_at == position or not looked:
                looked = True
                record = await self.run_record(session_id, run_id)
                if record.get("status") != "running" and int(record.get("cursor", 0)) <= position:
                    if result_at == position:
                        return
                    # Started behind the run's last event (its last cursor, say): the run as it
                    # stands, as a store's follower gets it, so a reconnect loop ends.
                    result = await self.wait_result(session_id, run_id)
                    yield RunEvent(
                        RunEventType.RUN_RESULT,
                        result,
                        session_id,
                        run_id,
                        event_id=f"{run_id}:result:{result.status.value}",
                    )
                    return
            await self.events.wait(run_id, position, self.poll_interval * 4)

    # -------------------------------------------------------------- plumbing

    async def _update(
        self, session_id: str, name: str, arg: Any, *, update_id: str | None = None
    ) -> dict[str, Any]:
        handle = self.handle(session_id)
        try:
            if arg is None:
                outcome = await handle.execute_update(name, id=update_id)
            else:
                outcome = await handle.execute_update(name, arg, id=update_id)
        except WorkflowUpdateFailedError as exc:
            raise _refusal(exc.cause) from None
        except RPCTimeoutOrCancelledError as exc:
            raise _update_cut_off(self, session_id, name, exc) from None
        except RPCError as exc:
            raise _missing_or_unreachable(self, session_id, exc) from None
        return dict(outcome or {})

    async def _query(self, session_id: str, name: str, *args: Any) -> Any:
        try:
            return await self.handle(session_id).query(
                name, *args, rpc_timeout=timedelta(seconds=30), reject_condition=None
            )
        except WorkflowQueryFailedError as exc:
            raise StorageError(f"reading session {session_id} from Temporal failed: {exc}") from None
        except RPCError as exc:
            raise _missing_or_unreachable(self, session_id, exc) from None


def _refusal(cause: BaseException | None) -> Exception:
    """The harnessx error an update's refusal names (ConfigurationError if unnamed)."""
    if isinstance(cause, ApplicationError) and cause.type in _REFUSALS:
        if cause.type == "UnknownExecutionKey" and cause.details:
            return _errors.UnknownExecutionKey(cause.details[0], cause.message)
        cls: type[Exception] = getattr(_errors, cause.type)
        return cls(cause.message)
    message = getattr(cause, "message", None) or str(cause)
    return StorageError(f"the session's workflow refused the request: {message}")


def _update_cut_off(
    backend: TemporalBackend, session_id: str, name: str, exc: RPCTimeoutOrCancelledError
) -> BaseException:
    """What a request cut off before its answer raises.

    The SDK reports both the caller's own cancellation and the server giving up on the
    call (its deadline, or a restart cancelling it) as ``RPCTimeoutOrCancelledError``. The
    first stays a cancellation, so ``asyncio.wait_for`` and task groups behave; the second
    is a ``StorageError`` like any unanswered request, which a caller may retry."""
    if isinstance(exc.__cause__, asyncio.CancelledError):
        return exc.__cause__
    return StorageError(
        f"Temporal gave up on the {name!r} request to session {session_id} before it was answered "
        f"(the cluster was busy or restarting); try again: a submit with the same request_id is the "
        f"same run. If it keeps happening, check the cluster and the workers of task queue "
        f"{backend.task_queue!r}"
    )


def _missing_or_unreachable(backend: TemporalBackend, session_id: str, exc: RPCError) -> Exception:
    if "not found" in str(exc).lower():
        return ConfigurationError(
            f"no session {session_id!r} on Temporal (task queue {backend.task_queue!r}): check the id and "
            "the namespace, or start it with AgentRuntime.start()"
        )
    return _unreachable(backend, exc)


def _unreachable(backend: TemporalBackend, exc: RPCError) -> Exception:
    return StorageError(
        f"Temporal did not answer ({exc.status.name}: {exc.message}); check the cluster, and that a "
        f"worker polls task queue {backend.task_queue!r} (harness-worker --temporal ...)"
    )
