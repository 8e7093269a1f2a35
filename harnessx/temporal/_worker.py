"""The Temporal worker: the session workflow and its activities, with the pool's metrics.

``build_worker`` makes the ``temporalio`` worker (what ``TemporalBackend.worker()``
returns); ``serve`` runs one as a process (``harness-worker --temporal TARGET``): logs
like the pool worker's, ``/metrics`` ``/healthz`` ``/readyz``, and SIGTERM drains (no new
tasks; activities in flight get ``--drain-timeout`` to finish, then are cancelled, and
Temporal retries them elsewhere).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from temporalio.converter import DataConverter
from temporalio.worker import Replayer, Worker

from harnessx._rate_gate import RateGate, RateWaitMetrics
from harnessx._registry import AgentRegistry
from harnessx.temporal._activities import SessionActivities
from harnessx.temporal._workflow import ANY_QUEUE, SessionWorkflowV1, bind_registry

if TYPE_CHECKING:
    from harnessx.temporal._backend import TemporalBackend

__all__ = ["TemporalWorkerMetrics", "build_worker", "replayer", "serve"]

logger = logging.getLogger("harness_workers.temporal")

_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class TemporalWorkerMetrics:
    """The pool worker's metrics that apply on Temporal, and the activities' own.

    Claims, leases and the queue belong to Temporal there (its server and SDK metrics
    report them); ``harnessx_worker_*``, ``harnessx_concurrency_slots``,
    ``harnessx_tool_calls``, ``harnessx_runs_finished`` and ``harnessx_rate_limit_wait*``
    keep their pool meaning.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.info = Gauge(
            "harnessx_worker_info",
            "Constant 1, labelled with this worker's identity.",
            ["worker_id", "host"],
            registry=r,
        )
        self.up = Gauge("harnessx_worker_up", "1 while the worker runs; 0 once it has stopped.", registry=r)
        self.draining = Gauge(
            "harnessx_worker_draining", "1 while the worker drains after SIGTERM.", registry=r
        )
        self.slots = Gauge(
            "harnessx_concurrency_slots", "Activities this worker may run at once.", registry=r
        )
        self.tool_calls = Counter(
            "harnessx_tool_calls",
            "Tool invocations, by replay policy and outcome.",
            ["policy", "outcome"],
            registry=r,
        )
        self.activities = Counter(
            "harnessx_temporal_activities",
            "Activities this worker ran, by kind (model, tool, result, publish) and outcome.",
            ["kind", "outcome"],
            registry=r,
        )
        self.active = Gauge(
            "harnessx_temporal_activities_active", "Activities running now, by kind.", ["kind"], registry=r
        )
        self.retries = Counter(
            "harnessx_temporal_activity_retries",
            "Activity attempts after the first (an earlier attempt failed or its worker was lost).",
            ["kind"],
            registry=r,
        )
        self.outcomes_reused = Counter(
            "harnessx_temporal_tool_outcomes_reused",
            "Tool calls settled by the outcome an attempt recorded after Temporal lost that attempt's "
            "completion (a safe call not run again, a manual one not left uncertain).",
            registry=r,
        )
        self.duration = Histogram(
            "harnessx_temporal_activity_seconds",
            "Time one activity attempt took, by kind.",
            ["kind"],
            buckets=_DURATION_BUCKETS,
            registry=r,
        )

        self.runs_finished = Counter(
            "harnessx_runs_finished",
            "Executions that ended, by the run's status at the end (each run's stop this worker published).",
            ["status"],
            registry=r,
        )
        # As the pool worker's: the model calls this worker's rate limits made wait.
        self.rate_waits = RateWaitMetrics(r)

    def tool_ended(self, policy: str, is_error: bool) -> None:
        self.tool_calls.labels(policy=policy, outcome="error" if is_error else "ok").inc()


class _Worker(Worker):
    """A ``temporalio`` worker that closes the agents its activities built when it stops."""

    def __init__(self, *args: Any, activities_owner: SessionActivities, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._owner = activities_owner

    async def run(self) -> None:
        with self._owner.rate_waits_counted():
            try:
                await super().run()
            finally:
                await self._owner.aclose()


def build_worker(
    backend: TemporalBackend,
    *,
    metrics: TemporalWorkerMetrics | None = None,
    max_concurrent_activities: int = 16,
    drain_timeout: float = 60.0,
    identity: str | None = None,
    sticky_timeout: float = 2.0,
    **options: Any,
) -> Worker:
    rates = None if backend.rate_limits is None else RateGate.shared(backend.rate_limits)
    activities = SessionActivities(backend.registry, backend.events, metrics=metrics, rates=rates)
    if metrics is not None:
        metrics.slots.set(max_concurrent_activities)
    bind_registry(backend.task_queue, backend.registry)
    return _Worker(
        backend.client,
        task_queue=backend.task_queue,
        workflows=[SessionWorkflowV1],
        activities=activities.definitions(),
        activities_owner=activities,
        max_concurrent_activities=max_concurrent_activities,
        graceful_shutdown_timeout=timedelta(seconds=drain_timeout),
        identity=identity,
        # A workflow task that waited this long for the worker that ran the workflow last
        # (killed, say) goes to any worker of the queue (the SDK's default is 10 s).
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=sticky_timeout),
        **options,
    )


def replayer(registry: AgentRegistry, data_converter: DataConverter | None = None) -> Replayer:
    """A ``Replayer`` of session histories with the agents of ``registry`` (for checking
    that a new worker version replays the histories of runs in flight)."""
    bind_registry(ANY_QUEUE, registry)
    return Replayer(workflows=[SessionWorkflowV1], data_converter=data_converter or DataConverter.default)


class TemporalWorkerProcess:
    """One worker process: health for the probes, drain on the first signal."""

    def __init__(self, worker: Worker, metrics: TemporalWorkerMetrics, identity: str) -> None:
        self.worker = worker
        self.metrics = metrics
        self.identity = identity
        self.started = asyncio.Event()
        self._draining = False
        self._fatal: str | None = None
        self._shutdown: asyncio.Task[None] | None = None

    def health_problem(self) -> str | None:
        return self._fatal

    def readiness_problem(self) -> str | None:
        if not self.started.is_set():
            return "not polling yet"
        if self._draining:
            return "draining"
        return self._fatal

    def drain(self) -> None:
        if not self._draining:
            logger.info("worker %s draining", self.identity)
        self._draining = True
        self.metrics.draining.set(1)
        self._shutdown = asyncio.get_running_loop().create_task(self.worker.shutdown())

    async def run(self) -> None:
        self.metrics.info.labels(worker_id=self.identity, host=socket.gethostname()).set(1)
        self.metrics.up.set(1)
        self.started.set()
        try:
            await self.worker.run()
        except Exception as exc:
            self._fatal = f"the Temporal worker stopped: {exc}"
            raise
        finally:
            self.metrics.up.set(0)


async def serve(
    backend: TemporalBackend,
    *,
    concurrency: int,
    drain_timeout: float,
    sockets: list[socket.socket] | None,
    on_ready: Callable[[str], object] | None = None,
    install_signals: Callable[[Callable[[], None]], None] | None = None,
) -> None:
    """Run a Temporal worker until drained (the first SIGTERM/SIGINT)."""
    from harnessx._health import health_app
    from harnessx._http_server import HttpServer
    from harnessx._processes import serving_message

    metrics = TemporalWorkerMetrics()
    identity = f"{os.getpid()}@{socket.gethostname()}"
    async with backend:
        worker = build_worker(
            backend,
            metrics=metrics,
            max_concurrent_activities=concurrency,
            drain_timeout=drain_timeout,
            identity=identity,
        )
        process = TemporalWorkerProcess(worker, metrics, identity)
        if install_signals is not None:
            install_signals(process.drain)
        server = None
        if sockets is not None:
            app = health_app(
                metrics.registry, healthy=process.health_problem, ready=process.readiness_problem
            )
            server = HttpServer(app, sockets)
            await server.start()
            logger.info("%s", serving_message(sockets))
        logger.info(
            "temporal worker %s polling task queue %s; agents %s; %d activity slots",
            identity,
            backend.task_queue,
            [str(ref) for ref in backend.registry.refs()],
            concurrency,
        )
        if on_ready is not None:
            on_ready(f"temporal worker {identity}: task queue {backend.task_queue}")
        try:
            await process.run()
        finally:
            if server is not None:
                await server.stop()
    logger.info("temporal worker %s stopped", identity)
