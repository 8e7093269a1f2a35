"""Orphan recovery: one active leader finds dead or expired lease holders and requeues.

The leader drops such a lease with a generation bump (so a zombie that wakes up is fenced
out of every write) and puts the session's running run back in the queue, where a worker
claims it. It never runs agent code. Standbys retry leadership every ``leader_retry``.

Leadership is fenced like a lease: taking it takes the role's next epoch in the store, and
every write the leader makes as leader (recovering an orphan, marking a worker dead) carries
its term and is refused by the database once a newer epoch exists (``LeadershipLostError``),
so a leader deposed without knowing it (its lock gone with a server restart) cannot act.
The check before each scan only makes it step down sooner; it does not make it safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass

from harnessx._compaction import COMPACT_AFTER, compact_pass, default_compact_batch
from harnessx._errors import HarnessError, LeadershipLostError
from harnessx._results import UNFINISHED_STATUSES
from harnessx._retention import PARTITIONS_AHEAD, PassReport, RetentionPolicy, prune_pass
from harnessx.store._protocol import Leadership, Orphan, Owner, PruneBatch, Store, WorkerInfo
from supervisor._metrics import SupervisorMetrics

__all__ = ["ROLE", "Supervisor", "SupervisorConfig"]

ROLE = "supervisor"
logger = logging.getLogger("supervisor")


@dataclass
class SupervisorConfig:
    scan_interval: float = 0.1
    leader_retry: float = 0.5
    stuck_after: float = 3600.0
    stuck_interval: float = 30.0
    # How often the leader records its scans on its leadership row (for the operator console).
    record_interval: float = 1.0
    # How often the leader reads the queue by priority band and key (one GROUP BY of the queue).
    shape_interval: float = 5.0
    # Queue statistics are metrics, not recovery: read once a second, not at every scan.
    queue_interval: float = 1.0
    # Workers that stopped (or were found dead) this long ago are forgotten, checked this often.
    worker_retention: float = 86400.0
    housekeeping_interval: float = 60.0
    # PostgreSQL's events partitions (one per day) are kept made this far ahead, checked at
    # each housekeeping; fewer than partitions_warn seconds covered is logged as an error.
    # Past days none of whose runs is left are dropped then; events retention left of runs
    # pruned more than partitions_grace ago, in a day that is kept, are deleted row by row.
    partitions_ahead: float = PARTITIONS_AHEAD
    partitions_warn: float = 86400.0
    partitions_grace: float = 2 * 86400.0
    # Retention (off by default): a pass over finished sessions every retention_interval.
    retention: RetentionPolicy | None = None
    retention_interval: float = 60.0
    # Compacting the streamed text of runs that finished more than compact_after seconds ago
    # (None: off), compact_batch runs a transaction (None: the store's default), after each
    # retention pass (or every retention_interval without retention).
    compact_after: float | None = COMPACT_AFTER
    compact_batch: int | None = None


@dataclass
class _Pending:
    run_id: str
    session_id: str
    detected: float


class Supervisor:
    def __init__(
        self,
        store: Store,
        config: SupervisorConfig | None = None,
        *,
        metrics: SupervisorMetrics | None = None,
    ):
        self.store = store
        self.config = config or SupervisorConfig()
        self.metrics = metrics or SupervisorMetrics()
        self.term: Leadership | None = None  # while this supervisor leads
        self._stopping = asyncio.Event()
        self._pending: dict[str, _Pending] = {}
        # "Never": the first scan does each job. (0.0 would mean "at boot" on the monotonic
        # clock, so a machine up for less than a job's interval skipped it until then.)
        self._last_stuck = float("-inf")
        self._last_shape = float("-inf")
        self._last_scan_ok = time.monotonic()
        self._store_problem: str | None = None  # why the last leadership attempt or scan failed
        self._standing_by = False  # said so in the log
        # This term's scans and requeued orphans, recorded for operators every record_interval.
        self._scans = 0
        self._recovered = 0
        self._last_record = float("-inf")
        self._last_queue = float("-inf")
        self._last_housekeeping = float("-inf")
        self._last_retention = float("-inf")
        self._retaining: asyncio.Task[None] | None = None

    @property
    def is_leader(self) -> bool:
        return self.term is not None

    def stop(self) -> None:
        self._stopping.set()

    def health_problem(self) -> str | None:
        if self.is_leader and time.monotonic() - self._last_scan_ok > max(
            10.0, 50 * self.config.scan_interval
        ):
            return f"no successful scan for {time.monotonic() - self._last_scan_ok:.0f} s"
        return None

    def readiness_problem(self) -> str | None:
        """Why this supervisor can neither lead nor stand by, if it cannot: it keeps trying,
        and restarting it would not bring the store back."""
        return self.health_problem() or self._store_problem

    async def run(self) -> None:
        try:
            while not self._stopping.is_set():
                term = await self._lead()
                if term is None:
                    await self._sleep(self.config.leader_retry)
                    continue
                try:
                    if not await self.scan(term):
                        continue  # stepped down: try to lead again at once
                    self._last_scan_ok = time.monotonic()
                    self._store_problem = None
                    self._start_retention(term)
                except LeadershipLostError as exc:
                    self.metrics.writes_refused.inc()
                    await self._step_down(term, f"the store refused a write: {exc}")
                except HarnessError as exc:
                    # Not ready at once: noticing that the store's connection (and with it
                    # the leadership lock) is gone can take another round of retries.
                    logger.warning("scan failed: %s", exc)
                    self._store_problem = f"scans fail: {exc}"
                await self._sleep(self.config.scan_interval)
        finally:
            await self._stop_retention()
            if self.term is not None:
                with contextlib.suppress(HarnessError):
                    await self.store.release_leadership(self.term)
                self._set_term(None)

    async def _lead(self) -> Leadership | None:
        """This supervisor's term (the scan checks that it still holds), or a new one if it
        can take one; ``None`` while another leads or the store cannot be reached."""
        if self.term is not None:
            return self.term
        try:
            term = await self.store.try_leadership(ROLE)
        except HarnessError as exc:
            # The store is unreachable for longer than its own retries last (a database
            # restart, a failover): keep trying rather than exit, or an orchestrator's
            # restart back-off would leave orphans unrecovered.
            if self._store_problem is None:
                logger.warning("cannot take or check leadership, trying again: %s", exc)
            self._store_problem = f"cannot reach the store: {exc}"
            return None
        if self._store_problem is not None:
            logger.info("the store is reachable again")
            self._store_problem = None
        if term is not None and self.term is None:
            logger.info(
                "this supervisor is now the leader (epoch %d)",
                term.epoch,
                extra={"leader_epoch": term.epoch, "db_time": term.since},
            )
            self._last_scan_ok = time.monotonic()
        elif term is None and not self._standing_by:
            logger.info("another supervisor leads: standing by")
        self._standing_by = term is None
        self._set_term(term)
        return term

    async def _step_down(self, term: Leadership, why: str) -> None:
        logger.warning(
            "this supervisor lost its leadership (epoch %d): %s",
            term.epoch,
            why,
            extra={"leader_epoch": term.epoch},
        )
        self._set_term(None)
        self._pending.clear()  # the next leader tracks what it recovers
        await self._stop_retention()
        with contextlib.suppress(HarnessError):
            await self.store.release_leadership(term)

    def _set_term(self, term: Leadership | None) -> None:
        if term != self.term:
            self._scans = self._recovered = 0
            self._last_record = float("-inf")
        self.term = term
        self.metrics.leader.set(0 if term is None else 1)
        self.metrics.leader_epoch.set(0 if term is None else term.epoch)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def scan(self, term: Leadership) -> bool:
        """One pass as the leader of ``term``: recover orphans, track earlier recoveries,
        count workers, report; ``False`` (stepped down) if the term no longer holds.
        Everything it reads is one statement (``Store.pool_scan``); it writes only what it
        recovers and the periodic reports. ``LeadershipLostError`` when a write finds a
        newer leader (deposed between the read and the write)."""
        started = time.perf_counter()
        view = await self.store.pool_scan(term, list(self._pending))
        if not view.holds:
            # The lock went with a dropped connection, or a newer leader took over.
            await self._step_down(term, "its lock is gone or a newer leader took over")
            return False
        # Tracked before recovering, so that a run requeued now is first looked at next scan.
        self._track_recoveries(view.tracked)
        for orphan in view.orphans:
            await self._recover(term, orphan)
        await self._check_workers(term, view.workers)
        if time.monotonic() - self._last_queue >= self.config.queue_interval:
            await self._queue()
            self._last_queue = time.monotonic()
        if time.monotonic() - self._last_shape >= self.config.shape_interval:
            self.metrics.set_queue_shape(await self.store.queue_shape(), time.time())
            self._last_shape = time.monotonic()
        if time.monotonic() - self._last_housekeeping >= self.config.housekeeping_interval:
            forgotten = await self.store.prune_workers(term, self.config.worker_retention)
            self.metrics.workers_pruned.inc(forgotten)
            await self._partitions()
            self._last_housekeeping = time.monotonic()
        if time.monotonic() - self._last_stuck >= self.config.stuck_interval:
            await self._stuck()
            self._last_stuck = time.monotonic()
        self.metrics.scans.inc()
        self.metrics.scan_seconds.observe(time.perf_counter() - started)
        self._scans += 1
        if time.monotonic() - self._last_record >= self.config.record_interval:
            # Fenced like every leader write: a deposed leader's record is refused.
            await self.store.record_scan(term, scans=self._scans, recovered=self._recovered)
            self._last_record = time.monotonic()
        return True

    async def _partitions(self) -> None:
        """Keep the partitions of events made ahead; a failure is reported, not raised: runs
        go on until the partitions made before run out (the metric shows how long that is)."""
        try:
            state = await self.store.maintain_partitions(
                self.config.partitions_ahead, grace=self.config.partitions_grace
            )
        except HarnessError as exc:
            self.metrics.partition_errors.inc()
            logger.error("making partitions of events failed: %s", exc)
            return
        if state is None:
            return
        if state.problem is not None:
            self.metrics.partition_errors.inc()
            logger.error("%s (their events are deleted row by row after the grace)", state.problem)
        self.metrics.partitions_made.inc(state.made)
        self.metrics.partitions_dropped.inc(len(state.dropped))
        if state.purged or state.dropped_rows:
            # Rows deleted one by one and rows of the days dropped whole alike.
            self.metrics.rows_pruned.labels(table="events").inc(state.purged + state.dropped_rows)
        self.metrics.partitions.set(state.count)
        covered = (state.covered_until or time.time()) - time.time()
        self.metrics.partitions_ahead.set(covered)
        if state.made:
            logger.info("made %d partition(s) of %s", state.made, state.table)
        if covered < self.config.partitions_warn:
            logger.error(
                "partitions of %s cover only the next %.0f s: events of runs made after that "
                "cannot be stored",
                state.table,
                max(covered, 0.0),
            )

    async def _recover(self, term: Leadership, orphan: Orphan) -> None:
        self.metrics.orphans_detected.labels(reason=orphan.reason).inc()
        # Only pool sessions go back to the queue: an application's own runtime resumes
        # its sessions itself; releasing the lease is what it needs from us.
        recovery = await self.store.recover_orphan(term, orphan, requeue=orphan.agent_ref is not None)
        if recovery is None:
            return  # recovered already, or its holder renewed the lease meanwhile
        extra = {
            "session_id": orphan.session_id,
            "generation": orphan.generation,
            "leader_epoch": term.epoch,
            "db_time": recovery.at,
        }
        run_id = recovery.run_id
        if run_id is None:
            logger.info("released %s lease of session %s", orphan.reason, orphan.session_id, extra=extra)
            return
        self.metrics.orphans_recovered.inc()
        self._recovered += 1
        self._pending[run_id] = _Pending(run_id, orphan.session_id, time.monotonic())
        logger.warning(
            "requeued run %s: its holder %s (lease %s)",
            run_id,
            Owner.process_of(orphan.owner),
            orphan.reason,
            extra={**extra, "run_id": run_id},
        )

    def _track_recoveries(self, tracked: dict[str, tuple[str, bool]]) -> None:
        """Requeued runs a worker has claimed since (recovered), or that are gone or
        finished (no longer waited for), as this scan read them."""
        now = time.monotonic()
        for run_id, pending in list(self._pending.items()):
            status, leased = tracked.get(run_id, (None, False))
            if leased:
                self.metrics.recovery_seconds.observe(now - pending.detected)
                del self._pending[run_id]
            elif status not in UNFINISHED_STATUSES:  # gone (None) or finished
                del self._pending[run_id]
        self.metrics.orphans_pending.set(len(self._pending))
        oldest = min((p.detected for p in self._pending.values()), default=None)
        self.metrics.oldest_unrecovered.set(now - oldest if oldest is not None else 0.0)

    async def _check_workers(self, term: Leadership, workers: list[WorkerInfo]) -> None:
        live = 0
        for worker in workers:
            if worker.alive:
                live += 1
                continue
            at = await self.store.mark_worker_dead(term, worker.id)
            if at is None:
                continue  # it stopped meanwhile
            self.metrics.workers_dead.inc()
            logger.warning(
                "worker %s (pid %d on %s) is dead",
                worker.id,
                worker.pid,
                worker.host,
                extra={"leader_epoch": term.epoch, "db_time": at},
            )
        self.metrics.workers_live.set(live)

    async def _queue(self) -> None:
        stats = await self.store.queue_stats()
        self.metrics.queue_depth.set(stats.depth)
        oldest = stats.oldest_queued_at
        self.metrics.queue_oldest.set(max(0.0, time.time() - oldest) if oldest is not None else 0.0)

    async def _stuck(self) -> None:
        stuck = await self.store.stuck_runs(self.config.stuck_after)
        counts = Counter(run.status for run in stuck)
        for status in UNFINISHED_STATUSES:
            self.metrics.stuck_runs.labels(status=status.value).set(counts.get(status, 0))
        for run in stuck[:10]:
            logger.warning(
                "run %s has been %s for %.0f s",
                run.run_id,
                run.status,
                time.time() - run.updated_at,
                extra={"run_id": run.run_id, "session_id": run.session_id},
            )

    # ------------------------------------------------------------ retention

    def _start_retention(self, term: Leadership) -> None:
        """Begin a retention pass, then a compaction pass, beside the scans when they are due:
        they run in their own task, in short batches, so they never delay orphan recovery by
        more than one batch."""
        policy = self.config.retention
        if policy is None and self.config.compact_after is None:
            return
        if self._retaining is not None and not self._retaining.done():
            return
        if time.monotonic() - self._last_retention < self.config.retention_interval:
            return
        self._last_retention = time.monotonic()
        self._retaining = asyncio.get_running_loop().create_task(self._housework(term, policy))

    async def _housework(self, term: Leadership, policy: RetentionPolicy | None) -> None:
        if policy is not None:
            await self._retain(term, policy)
        if self.config.compact_after is not None and not self._stopping.is_set():
            await self._compact(self.config.compact_after)

    async def _compact(self, older_than: float) -> None:
        """A compaction pass; a failure is reported, not raised: the runs stay noted, and
        the next pass takes them."""
        batch = self.config.compact_batch or default_compact_batch(self.store)
        try:
            report = await compact_pass(self.store, older_than, batch=batch, stopping=self._stopping)
        except HarnessError as exc:
            self.metrics.compaction_errors.inc()
            logger.warning("compacting finished runs failed (the next pass continues): %s", exc)
            return
        self.metrics.runs_compacted.inc(report.runs)
        self.metrics.rows_compacted.inc(report.rows)
        if report.runs:
            logger.info("%s", report.describe())

    async def _stop_retention(self) -> None:
        task, self._retaining = self._retaining, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _retain(self, term: Leadership, policy: RetentionPolicy) -> None:
        try:
            report = await prune_pass(
                self.store, policy, term=term, stopping=self._stopping, on_batch=self._pruned
            )
        except LeadershipLostError as exc:
            self.metrics.writes_refused.inc()
            logger.warning("retention stopped: %s", exc, extra={"leader_epoch": term.epoch})
            return
        except HarnessError as exc:
            self.metrics.retention_errors.inc()
            logger.warning("retention pass failed (the next one continues): %s", exc)
            return
        except OSError as exc:  # the archive folder
            self.metrics.retention_errors.inc()
            logger.error("retention pass stopped, nothing unarchived was removed: %s", exc)
            return
        # The gauge first: a pass counted is a pass whose oldest activity is reported (a
        # supervisor stopped between the two left the gauge at 0 with the pass counted).
        await self._oldest_activity()
        self.metrics.retention_pass_seconds.observe(report.seconds)
        if report.sessions:
            self._log_pass(report, policy, term)

    def _pruned(self, batch: PruneBatch, seconds: float) -> None:
        self.metrics.retention_batch_seconds.observe(seconds)
        self.metrics.sessions_pruned.inc(len(batch.pruned))
        for table, count in batch.rows.items():
            if count:
                self.metrics.rows_pruned.labels(table=table).inc(count)

    async def _oldest_activity(self) -> None:
        try:
            oldest = await self.store.oldest_activity()
        except HarnessError as exc:
            logger.warning("reading the oldest session activity failed: %s", exc)
            return
        self.metrics.oldest_retained.set(max(0.0, time.time() - oldest) if oldest is not None else 0.0)

    def _log_pass(self, report: PassReport, policy: RetentionPolicy, term: Leadership) -> None:
        logger.info("%s", report.describe(policy), extra={"leader_epoch": term.epoch})
