"""The pool worker: one readable claim loop plus named, watched side tasks.

A worker claims queued runs (one statement per claim), drives up to ``concurrency`` of
them at once through the same ``RunExecutor`` as ``AgentRuntime``, renews every lease it
holds in one statement per heartbeat, and relays pause/cancel requests. ``drain()`` stops
claiming and hands every run back at its next boundary (requeued, lease released), so
another worker continues it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from harness_workers._metrics import WorkerMetrics
from harness_workers._starting import StartPolicy, retry_notice
from harnessx._agent import Agent
from harnessx._errors import ConfigurationError, CorruptStateError, HarnessError, LeaseLostError
from harnessx._executor import Execution, RunExecutor
from harnessx._hooks import HookContext, HookEvent
from harnessx._leases import LeaseKeeper
from harnessx._logging import bind_log_context
from harnessx._rate_gate import HOLD_SECONDS
from harnessx._registry import AgentRef, AgentRegistry
from harnessx._results import RunStatus
from harnessx._state import RunState
from harnessx.store._protocol import Lease, RunRecord, SessionRecord, Store, WorkerInfo

__all__ = ["Worker", "WorkerConfig"]

logger = logging.getLogger("harness_workers.worker")


@dataclass
class WorkerConfig:
    """``renew_interval`` defaults to a third of the store's lease; the drain waits at most
    ``drain_timeout`` for runs to reach a boundary; ``start`` says how often a run whose
    agent cannot be built is tried again (``harness_workers._starting``)."""

    concurrency: int = 4
    poll_min: float = 0.02
    poll_max: float = 0.25
    renew_interval: float | None = None
    stats_interval: float = 2.0
    drain_timeout: float = 60.0
    start: StartPolicy = field(default_factory=StartPolicy)
    host: str = field(default_factory=socket.gethostname)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ConfigurationError(f"concurrency must be at least 1, got {self.concurrency}")


class Worker:
    """Drives queued runs of the agents in ``registry``."""

    def __init__(
        self,
        store: Store,
        registry: AgentRegistry,
        config: WorkerConfig | None = None,
        *,
        metrics: WorkerMetrics | None = None,
        on_heartbeat: Callable[[], object] | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.config = config or WorkerConfig()
        self.metrics = metrics or WorkerMetrics()
        self._on_heartbeat = on_heartbeat
        self.holder = f"worker-{uuid.uuid4().hex[:8]}"
        self.keeper = LeaseKeeper(
            store, self.config.renew_interval, on_renewal=self._renewed, on_failure=self._heartbeat_died
        )
        # A run that must wait long for model rate budget gives its slot back meanwhile.
        self.executor = RunExecutor(store, self.keeper, rate_hold_seconds=HOLD_SECONDS)
        self.executor.rates.observers.append(self.metrics.rate_waits.observe)
        self.active: dict[str, Execution] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._draining = False
        self.registered = asyncio.Event()
        self._fatal: str | None = None
        self._last_beat = 0.0

    @property
    def id(self) -> str:
        return self.store.process_id

    @property
    def agent_refs(self) -> list[str]:
        return [str(ref) for ref in self.registry.refs()]

    # ------------------------------------------------------------ health

    def health_problem(self) -> str | None:
        """``None`` while healthy; otherwise why (for ``/healthz``)."""
        if self._fatal:
            return self._fatal
        interval = self.keeper.interval
        if self.registered.is_set() and time.monotonic() - self._last_beat > 3 * interval + 5:
            return f"no successful heartbeat for {time.monotonic() - self._last_beat:.0f} s"
        return None

    def readiness_problem(self) -> str | None:
        """``None`` when the worker takes work (for ``/readyz``)."""
        if not self.registered.is_set():
            return "not registered yet"
        if self._draining:
            return "draining"
        return self.health_problem()

    # -------------------------------------------------------------- main

    async def run(self) -> None:
        """Register, claim and drive until drained. The store must be initialized."""
        await self.store.register_worker(
            WorkerInfo(self.id, self.config.host, os.getpid(), self.agent_refs, self.config.concurrency)
        )
        # What this worker's registry says of its agents' pool runs (default priority,
        # max_concurrent): the store applies it to every claim and submission.
        await self.store.publish_agent_defaults(
            {
                str(ref): (defaults.priority, defaults.max_concurrent)
                for ref in self.registry.refs()
                for defaults in [self.registry.defaults(ref)]
            }
        )
        await self.executor.rates.refresh()  # the first model calls find the fleet's rate limits read
        self.registered.set()
        self._last_beat = time.monotonic()
        self.metrics.info.labels(worker_id=self.id, host=self.config.host).set(1)
        self.metrics.up.set(1)
        self.metrics.slots.set(self.config.concurrency)
        logger.info(
            "worker %s registered; agents %s; concurrency %d",
            self.id,
            self.agent_refs,
            self.config.concurrency,
        )
        side = [
            self._side("heartbeat", self._heartbeat_loop),
            self._side("queue-stats", self._stats_loop),
        ]
        try:
            await self._claim_loop()
            await self._drain_runs()
        finally:
            for task in side:
                task.cancel()
            await asyncio.gather(*side, return_exceptions=True)
            await self.executor.rates.flush()  # the tokens its last calls owe the buckets (logged if not)
            await self.keeper.aclose()
            with contextlib.suppress(HarnessError):
                await self.store.stop_worker(self.id)
            self.metrics.up.set(0)
        if self._fatal:
            raise RuntimeError(self._fatal)

    def drain(self) -> None:
        """Stop claiming and hand every run back at its next boundary."""
        if not self._draining:
            logger.info("worker %s draining %d runs", self.id, len(self.active))
        self._draining = True
        self.metrics.draining.set(1)
        for execution in self.active.values():
            execution.control.request_handoff()
        self._wake.set()

    async def _claim_loop(self) -> None:
        idle = self.config.poll_min
        while not self._draining:
            free = self.config.concurrency - len(self._tasks)
            claimed: list[tuple[Lease, str]] = []
            if free > 0:
                # The first model calls of the runs it takes: a lease for them rides on the
                # claim (RateGate.ahead), rather than each call asking on its way.
                ask = self.executor.rates.ahead(free)
                leased = None
                try:
                    claims = await self.store.claim_queued(self.holder, self.agent_refs, free, rate=ask)
                except HarnessError as exc:
                    logger.warning("claim failed: %s", exc)
                else:
                    claimed = list(claims)
                    leased = claims.rate
                    self.metrics.runs_deferred.inc(claims.deferred)
                finally:
                    if ask is not None:
                        self.executor.rates.taken(ask, leased)
            for lease, run_id in claimed:
                self._start(lease, run_id)
            if claimed:
                idle = self.config.poll_min
                if len(claimed) >= free:
                    continue  # no slot left: the wait below is for one to come free
                # Fewer than asked for: the queue had no more that this worker may take
                # now, so another claim at once would find nothing, and would compete with
                # the loads of the runs just claimed. A run queued meanwhile wakes the wait
                # (SQLite's bell keeps it; PostgreSQL's notification is kept for the next
                # wait), and the poll catches what neither announces.
            # Nothing to do: wait for a finished run, a queue notification, or the next
            # poll, backing off while idle.
            self._wake.clear()
            woken = asyncio.ensure_future(self._wake.wait())
            queued = asyncio.ensure_future(self.store.wait_for_work(idle))
            await asyncio.wait({woken, queued}, return_when=asyncio.FIRST_COMPLETED)
            notified = (
                queued.done() and not queued.cancelled() and queued.exception() is None and queued.result()
            )
            for waiter in (woken, queued):
                waiter.cancel()
            await asyncio.gather(woken, queued, return_exceptions=True)
            # A notification can arrive a moment before the run is claimable (a hand-off's
            # session not yet released, say): look again soon rather than backing off.
            idle = self.config.poll_min if notified else min(idle * 2, self.config.poll_max)

    async def _drain_runs(self) -> None:
        for execution in self.active.values():
            execution.control.request_handoff()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=self.config.drain_timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    # --------------------------------------------------------------- runs

    def _start(self, lease: Lease, run_id: str) -> None:
        self.metrics.runs_claimed.inc()
        task = asyncio.create_task(self._drive(lease, run_id), name=f"drive-{run_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drive(self, lease: Lease, run_id: str) -> None:
        # Every line logged by this task (and the run's task it starts) names the run.
        bind_log_context(run_id=run_id, session_id=lease.session_id, generation=lease.generation)
        agent: Agent | None = None
        launched = False
        try:
            ready = await self._prepare(lease, run_id)
            if ready is None:
                return  # settled without starting (see _starting); nothing left to drive
            agent, state, record, session, rate_holds = ready
            logger.info("claimed run %s", run_id)
            execution = self.executor.launch(
                agent,
                lease,
                state,
                last_seq=record.event_count,
                resumed=True,
                recording=session.recording,
                pending=session.control,
                rate_holds=rate_holds,
            )
            launched = True
            self.active[run_id] = execution
            self.metrics.active_runs.set(len(self.active))
            if self._draining:
                execution.control.request_handoff()
            result = await execution.task
            self.metrics.runs_finished.labels(status=result.status.value).inc()
            logger.info("run %s %s", run_id, result.status.value)
        except LeaseLostError:
            await self._lease_lost(lease, run_id)
        except asyncio.CancelledError:
            if not launched:
                # Cut off before the run started (a drain that ran out of time): it must
                # not wait for its lease to expire. The executor does this once launched.
                with contextlib.suppress(HarnessError):
                    await self.store.requeue(lease, run_id)
                    await self.store.release(lease)
            raise
        except Exception as exc:
            self.metrics.runs_errored.labels(reason=type(exc).__name__).inc()
            if launched:
                logger.exception("run %s could not be driven", run_id)
            else:
                # The store failed while the run was being prepared: nothing could record
                # an outcome. Its lease expires and the supervisor requeues it.
                logger.warning(
                    "run %s could not be started (%s: %s); its lease is left to expire, then the "
                    "supervisor requeues it",
                    run_id,
                    type(exc).__name__,
                    exc,
                )
        finally:
            self.active.pop(run_id, None)
            self.metrics.active_runs.set(len(self.active))
            if agent is not None:
                await agent.aclose()
            self._wake.set()

    async def _prepare(
        self, lease: Lease, run_id: str
    ) -> tuple[Agent, RunState, RunRecord, SessionRecord, tuple[str, ...]] | None:
        """The run's agent, state, row and session (is it flight-recorded, is a pause or
        cancel request waiting on it) and the buckets whose rate reservation is kept for it,
        ready to drive; ``None`` once a run that cannot be
        started is settled (failed, or queued again for a later attempt). Store failures
        propagate (see ``harness_workers._starting``)."""
        loaded = await self.store.load_run(run_id)  # row, session and state in one read
        if loaded is None:
            logger.error("run %s was deleted from the store after this worker claimed it", run_id)
            return None
        record, session = loaded.record, loaded.session
        if loaded.problem is not None:
            await self._end_unreadable(lease, record, loaded.problem)
            return None
        state = loaded.state
        assert state is not None
        try:
            agent = self.registry.create(AgentRef.parse(session.agent_ref or ""))
            agent.hooks.on(HookEvent.TOOL_CALL_END, self._count_tool(agent))
        except Exception as exc:
            await self._start_failed(lease, record, state, session.agent_ref, exc)
            return None
        if record.start_attempts:
            await self.store.clear_start_attempts(lease, run_id)
        return agent, state, record, session, loaded.rate_holds

    async def _end_unreadable(self, lease: Lease, record: RunRecord, exc: CorruptStateError) -> None:
        self.metrics.start_failures.labels(cause="corrupt_state", outcome="failed").inc()
        logger.error("run %s failed: %s", record.id, exc)
        error = {"type": type(exc).__name__, "message": str(exc)}
        await self.executor.end_run(lease, record, RunStatus.FAILED, "", error)
        await self.store.release(lease)

    async def _start_failed(
        self, lease: Lease, record: RunRecord, state: RunState, agent_ref: str | None, exc: Exception
    ) -> None:
        policy = self.config.start
        attempt = record.start_attempts + 1
        cause = f"{type(exc).__name__}: {exc}"
        if attempt >= policy.attempts:
            self.metrics.start_failures.labels(cause="agent", outcome="failed").inc()
            message = (
                f"gave up after {attempt} attempts to start the run: the worker's registry could not "
                f"build agent {agent_ref} ({cause}); fix the agent's factory, then resume the session"
            )
            logger.error("run %s failed: %s", record.id, message, exc_info=exc)
            error = {"type": type(exc).__name__, "message": message}
            await self.executor.end_run(lease, record, RunStatus.FAILED, "", error, state)
        else:
            self.metrics.start_failures.labels(cause="agent", outcome="retried").inc()
            retry_in = policy.retry_in(attempt)
            logger.warning(
                "run %s could not start (attempt %d of %d): the registry could not build agent %s (%s); "
                "trying again in %.0f s",
                record.id,
                attempt,
                policy.attempts,
                agent_ref,
                cause,
                retry_in,
                exc_info=exc,
            )
            error = {"type": type(exc).__name__, "message": f"agent {agent_ref} could not be built: {exc}"}
            notice = retry_notice(record, attempt, policy, error, self.id)
            await self.store.defer_start(
                lease, record.id, attempts=attempt, retry_in=retry_in, events=[notice]
            )
        await self.store.release(lease)

    async def _lease_lost(self, lease: Lease, run_id: str) -> None:
        self.metrics.fenced_writes.inc()
        try:
            gone = (
                await self.store.get_session(lease.session_id) is None
                or await self.store.get_run(run_id) is None
            )
        except HarnessError:
            gone = False
        if gone:
            self.metrics.runs_errored.labels(reason="deleted").inc()
            logger.error(
                "run %s stopped: its session %s was deleted from the store while this worker drove it; "
                "nothing more can be recorded for it (its followers are told it no longer exists)",
                run_id,
                lease.session_id,
            )
        else:
            self.metrics.runs_errored.labels(reason="lease_lost").inc()
            logger.warning("run %s stopped: lease lost to another process", run_id)

    def _count_tool(self, agent: Agent) -> Callable[[HookContext], None]:
        def count(context: HookContext) -> None:
            call, result = context.data["tool_call"], context.data["result"]
            tool = agent.tools.get(call.name)
            policy = tool.replay_policy.value if tool else "unknown"
            self.metrics.tool_calls.labels(policy=policy, outcome="error" if result.is_error else "ok").inc()

        return count

    # --------------------------------------------------------- side tasks

    def _side(self, name: str, loop: Callable[[], object]) -> asyncio.Task[None]:
        async def watched() -> None:
            try:
                await loop()  # type: ignore[misc]
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Without its heartbeat a worker would run unfenced: stop instead.
                self._fatal = f"side task {name} died: {exc!r}"
                logger.exception("side task %s died; stopping the worker", name)
                self.drain()

        return asyncio.create_task(watched(), name=f"worker-{name}")

    def _renewed(self, ok: bool, seconds: float, lost: int) -> None:
        self.metrics.lease_renewals.labels(outcome="ok" if ok else "error").inc()
        if ok:
            self.metrics.renewal_latency.observe(seconds)
            self.metrics.leases_lost.inc(lost)
            self._last_beat = time.monotonic()

    def _heartbeat_died(self, exc: BaseException) -> None:
        # Without renewals this worker's runs would go on unfenced: stop instead.
        self._fatal = f"lease heartbeat died: {exc!r}"
        for execution in self.active.values():
            execution.task.cancel()
        self.drain()

    async def _heartbeat_loop(self) -> None:
        """The worker row's heartbeat (leases are renewed by the keeper's own beat)."""
        while True:
            await asyncio.sleep(self.keeper.interval)
            try:
                await self.store.worker_heartbeat(self.id, draining=self._draining)
            except HarnessError as exc:
                logger.warning("worker heartbeat failed: %s", exc)
                continue
            if not self.active:
                self._last_beat = time.monotonic()
            if self._on_heartbeat is not None:
                self._on_heartbeat()

    # The stats loop outlives store errors (a database restart or failover that
    # lasts longer than the store's own retries): it logs and tries again at its next turn,
    # as the heartbeat and the claim loop do, rather than stop the worker.

    async def _stats_loop(self) -> None:
        known = set(self.agent_refs)
        reported: set[str] = set()
        while True:
            try:
                stats = await self.store.queue_stats()
            except HarnessError as exc:
                logger.warning("reading queue stats failed: %s", exc)
                await asyncio.sleep(self.config.stats_interval)
                continue
            self.metrics.queue_depth.set(stats.depth)
            oldest = stats.oldest_queued_at
            self.metrics.queue_oldest.set(max(0.0, time.time() - oldest) if oldest is not None else 0.0)
            unknown = {str(ref): count for ref, (count, _) in stats.by_agent.items() if str(ref) not in known}
            self.metrics.set_unknown_agents(unknown)
            new = sorted(set(unknown) - reported, key=lambda ref: (-unknown[ref], ref))
            if new:  # one line, however many references a client made up
                more = f" and {len(new) - 5} more" if len(new) > 5 else ""
                logger.warning(
                    "%d queued runs need agents this worker does not know: %s%s",
                    sum(unknown[ref] for ref in new),
                    ", ".join(new[:5]),
                    more,
                )
            reported = set(unknown)
            await asyncio.sleep(self.config.stats_interval)
