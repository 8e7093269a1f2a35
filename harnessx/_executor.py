"""Driving durable runs under leases: shared by ``AgentRuntime`` and the pool worker.

An ``Execution`` is one run being driven in this process. Its lease is renewed by the
shared ``LeaseKeeper``; if the store stops confirming it, the execution is cancelled at
once and its ``result()`` raises ``LeaseLostError``. When it ends, the lease is released
(after requeueing the run, for a hand-off), so any process can continue the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from harnessx._agent import Agent
from harnessx._committer import RunFeed, StoreCommitter
from harnessx._driver import Driver, RunControl
from harnessx._engine import step_id
from harnessx._errors import LeaseLostError, StorageError
from harnessx._events import RunEvent, RunEventType
from harnessx._journal import RunJournal, step_of
from harnessx._leases import LeaseKeeper
from harnessx._rate_gate import LEAD_SECONDS, RateGate
from harnessx._results import RunResult, RunStatus
from harnessx._state import Delta, RunState
from harnessx.providers._base import TokenUsage
from harnessx.store._protocol import Lease, RunRecord, Store
from harnessx.store._records import ControlRequest

__all__ = ["Execution", "RunExecutor"]

logger = logging.getLogger("harnessx.executor")


@dataclass
class Execution:
    session_id: str
    run_id: str
    lease: Lease
    control: RunControl
    feed: RunFeed
    start_seq: int
    task: asyncio.Task[RunResult]


class RunExecutor:
    """Starts executions and records one-off decisions, always under a lease."""

    def __init__(
        self,
        store: Store,
        keeper: LeaseKeeper,
        *,
        flush_interval: float = 0.05,
        flush_max: int = 64,
        rates: RateGate | None = None,
        rate_hold_seconds: float | None = None,
    ) -> None:
        self.store = store
        self.keeper = keeper
        self.flush_interval = flush_interval
        self.flush_max = flush_max
        # Model calls of every run driven here obey the fleet's rate limits (docs/scheduling.md).
        self.rates = rates or RateGate(store)
        # A pool worker's runs give their slot back during a longer wait for rate budget.
        self.rate_hold_seconds = rate_hold_seconds

    def launch(
        self,
        agent: Agent,
        lease: Lease,
        state: RunState,
        *,
        last_seq: int,
        resumed: bool,
        recording: bool = False,
        stream: bool = True,
        pending: ControlRequest | None = None,
        rate_holds: tuple[str, ...] = (),
    ) -> Execution:
        """Drive ``state`` under ``lease``; ``recording``: the session is flight-recorded;
        ``stream``: the model's text is recorded as it is written (text deltas), for
        followers of the run's events; ``pending``: the pause/cancel request the claimed
        session already carries (the run acts on it at once); ``rate_holds``: the buckets
        whose rate reservation is kept for the run (``LoadedRun.rate_holds``)."""
        control = RunControl()
        feed = RunFeed(first_seq=last_seq + 1)
        task = asyncio.create_task(
            self._execute(
                agent, lease, state, control, feed, last_seq, resumed, recording, stream, pending, rate_holds
            ),
            name=f"harnessx-run-{state.run_id}",
        )
        return Execution(state.session_id, state.run_id, lease, control, feed, last_seq, task)

    def driver(
        self,
        agent: Agent,
        committer: StoreCommitter,
        control: RunControl,
        lease: Lease,
        *,
        stream: bool = True,
    ) -> Driver:
        return Driver(
            engine=agent.engine(durable=True),
            settings=agent.run_settings(),
            provider=lambda: agent.provider,
            committer=committer,
            control=control,
            fencing_token=lease.generation,
            journal=committer.journal,
            rates=self.rates,
            rate_hold_seconds=self.rate_hold_seconds,
            stream=stream,
        )

    async def commit_once(
        self,
        agent: Agent,
        lease: Lease,
        state: RunState,
        delta: Delta,
        last_seq: int,
        *,
        journal: RunJournal | None = None,
    ) -> None:
        """Commit a single boundary outside a drive (a decision, a pause of an idle run);
        ``journal`` (a recorded session) holds what to record with it."""
        committer = StoreCommitter(self.store, lease, last_seq=last_seq, journal=journal)
        await self.driver(agent, committer, RunControl(), lease).commit(state, delta)

    async def end_run(
        self,
        lease: Lease,
        record: RunRecord,
        status: RunStatus,
        stop_reason: str,
        error: dict[str, str] | None = None,
        state: RunState | None = None,
    ) -> RunResult:
        """End a run that cannot be driven (its state does not load, or its agent cannot be
        built), with an ``error`` event when there is an error and the closing ``run_result``
        every follower waits for. ``state``, when it did load, supplies the pending calls."""
        if state is not None:
            result = state.result()
            result.status, result.stop_reason, result.error = status, stop_reason, error
        else:
            data = record.result
            try:
                usage = TokenUsage.from_dict(data.get("usage"))
            except (TypeError, ValueError):
                usage = TokenUsage()
            result = RunResult(
                session_id=record.session_id,
                run_id=record.id,
                output=str(data.get("output") or ""),
                status=status,
                stop_reason=stop_reason,
                usage=usage,
                error=error,
                usage_incomplete=bool(data.get("usage_incomplete")),
            )
        events = [] if error is None else [self._run_event(record, RunEventType.ERROR, error["message"])]
        events.append(self._run_event(record, RunEventType.RUN_RESULT, result))
        await self.store.end_run(
            lease, record.id, status=status.value, stop_reason=stop_reason, error=error, events=events
        )
        return result

    @staticmethod
    def _run_event(record: RunRecord, kind: RunEventType, data: object) -> RunEvent:
        iteration = record.result.get("iteration")
        step = step_id(iteration) if isinstance(iteration, int) else ""
        return RunEvent(kind, data, record.session_id, record.id, step, "")

    async def _journal(self, state: RunState, last_seq: int, resumed: bool) -> RunJournal:
        """The journal of this execution of a recorded run, numbering model attempts on from
        those of earlier executions."""
        attempts = 0
        if resumed:
            attempts = await self.store.count_journal(state.run_id, "model.started", step_of(state.iteration))
        journal = RunJournal(state, attempts=attempts)
        # A run a worker takes from the queue for the first time is not a resume.
        if resumed and (last_seq > 0 or attempts > 0):
            journal.note("run.resumed", {"previous_status": state.status.value})
        return journal

    async def _execute(
        self,
        agent: Agent,
        lease: Lease,
        state: RunState,
        control: RunControl,
        feed: RunFeed,
        last_seq: int,
        resumed: bool,
        recording: bool,
        stream: bool,
        pending: ControlRequest | None,
        rate_holds: tuple[str, ...] = (),
    ) -> RunResult:
        me = asyncio.current_task()
        lost = False

        def on_lost(_: Lease) -> None:
            nonlocal lost
            lost = True
            if me is not None:
                me.cancel()

        def on_control(_: Lease, request: ControlRequest) -> None:
            control.request(request)

        self.keeper.hold(lease, on_lost, on_control, pending)
        requeued = False
        committer: StoreCommitter | None = None
        try:
            journal = await self._journal(state, last_seq, resumed) if recording else None
            committer = StoreCommitter(
                self.store,
                lease,
                last_seq=last_seq,
                feed=feed,
                flush_interval=self.flush_interval,
                flush_max=self.flush_max,
                journal=journal,
                on_release=lambda: self.keeper.drop(lease),
            )
            driver = self.driver(agent, committer, control, lease, stream=stream)
            driver.rate_holds = frozenset(rate_holds)
            if journal is not None and journal.has_notes:
                # run.resumed, also when neither recovery nor reopening has anything to commit.
                await driver.commit(state, Delta(state.phase))
            if resumed:
                # First settle what a dead driver left in flight, then reopen a paused,
                # waiting or failed run; each is its own committed boundary.
                # A run with no events yet (fresh from the queue) cannot have streamed.
                recovered = driver.engine.recover(state, may_have_streamed=last_seq > 0)
                if recovered is not None:
                    await driver.commit(state, recovered)
                reopened = driver.engine.reopen(state)
                if reopened is not None:
                    await driver.commit(state, reopened)
            result = await driver.drive(state)
            held = driver.held
            if held is not None and state.status is RunStatus.RUNNING:
                # Waiting long for rate budget: back to the queue, claimable again shortly
                # before the start its reservation (kept for it) gives it.
                await committer.flush()
                delay = held.remaining() - LEAD_SECONDS
                await self.store.hold_rate(lease, state.run_id, held.bucket, held.start, delay)
                requeued = True
            elif control.handoff_requested and state.status is RunStatus.RUNNING:
                # Drained at a boundary: put the run back for another worker, now.
                await committer.flush()
                await self.store.requeue(lease, state.run_id)
                requeued = True
            return result
        except asyncio.CancelledError:
            if lost:
                raise LeaseLostError(
                    f"lost the lease on session {lease.session_id}; another process owns the run now"
                ) from None
            if control.handoff_requested and state.status is RunStatus.RUNNING:
                # A drain that ran out of time: the run stops mid-step, but it must not be
                # lost. Recovery on the next worker settles what was in flight.
                try:
                    await self.store.requeue(lease, state.run_id)
                    requeued = True
                    logger.warning(
                        "run %s was cut off mid-step by the drain timeout and requeued; the next "
                        "worker settles what was in flight",
                        state.run_id,
                    )
                except StorageError as exc:
                    logger.warning(
                        "run %s was cut off by the drain timeout and could not be requeued (%s); "
                        "its lease expires and the supervisor requeues it",
                        state.run_id,
                        exc,
                    )
            raise
        finally:
            self.keeper.drop(lease)
            feed.close()
            released = committer is not None and committer.released  # with the last checkpoint
            if not released and (requeued or state.status is not RunStatus.RUNNING):
                with contextlib.suppress(StorageError):
                    await self.store.release(lease)
            # After the release: a follower that sees the feed close finds the session free.
            feed.close()
            # Otherwise the run stopped mid-way (lease lost or expired, the store failing):
            # the lease is left to expire so that the supervisor sees an orphan and requeues
            # the run, and resume() can take it over. Releasing it here would leave a
            # running run that nothing holds and nothing will ever pick up.
