"""The store protocol: the only way run state reaches a database.

The runtime is the only caller that writes. Every write that changes a run takes the
caller's ``Lease`` and commits only while that lease still holds (same owner, same
generation, not expired), checked in the same transaction as the write; otherwise it
raises ``LeaseLostError`` and writes nothing. The supervisor's writes are fenced the same
way by its ``Leadership`` term (``LeadershipLostError``).

``Store`` is the composition of one small protocol per concern (sessions and leases, runs
and checkpoints, events, the pool, leadership, scheduling, the console, the data
lifecycle): a caller that needs one concern types against that one. The values they take
and return are in ``_records`` (re-exported here).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from harnessx._events import RunEvent
from harnessx._journal import JournalRecord
from harnessx._state import Delta, RunState, ToolEntry
from harnessx.store._migrations import MigrationReport
from harnessx.store._original import OriginalSession
from harnessx.store._records import (
    Action,
    Archiver,
    Compaction,
    ControlRequest,
    IncidentSnapshot,
    Leadership,
    LeaderState,
    Lease,
    LoadedRun,
    Login,
    NewSession,
    Orphan,
    Owner,
    Partitions,
    PoolScan,
    PruneBatch,
    PruneCursor,
    QueueStats,
    Recovery,
    Renewal,
    RunFilter,
    RunKey,
    RunPage,
    RunRecord,
    RunRow,
    SessionRecord,
    SessionSummary,
    StuckRun,
    WorkerInfo,
    leadership_lost,
    with_step_tools,
)

if TYPE_CHECKING:
    from harnessx.store._archive import ArchiveRecord
    from harnessx.store._scheduling import (
        Claims,
        ConcurrencyLimit,
        QueueShape,
        RateAsk,
        RateBucket,
        RateLimit,
        RateRelease,
        RateReservation,
        RunSchedule,
        Schedule,
        TenantShare,
    )

__all__ = [
    "Action",
    "Archiver",
    "ConsoleStore",
    "EventStore",
    "IncidentSnapshot",
    "LeaderState",
    "Lease",
    "Leadership",
    "LeadershipStore",
    "LifecycleStore",
    "LoadedRun",
    "Login",
    "NewSession",
    "Orphan",
    "Owner",
    "PoolScan",
    "PoolStore",
    "Compaction",
    "Partitions",
    "PruneBatch",
    "PruneCursor",
    "QueueStats",
    "Recovery",
    "Renewal",
    "RunFilter",
    "RunKey",
    "RunPage",
    "RunRecord",
    "RunRow",
    "RunStore",
    "SchedulingStore",
    "SessionRecord",
    "SessionStore",
    "SessionSummary",
    "Store",
    "StoreBase",
    "StuckRun",
    "WorkerInfo",
    "leadership_lost",
    "with_step_tools",
]


class StoreBase(Protocol):
    """What every store has: its identity, its lifetime and its schema."""

    process_id: str
    """Unique per process start; lease owners are ``<process_id>/<holder>``."""
    dialect: str

    async def initialize(self) -> None: ...

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def aclose(self) -> None: ...

    async def prepare_from_original(self) -> str:
        """Move a database of the original harnessx 0.9.1 out of this store's place (nothing
        is deleted) and return where its tables are now (a table prefix, a schema)."""
        ...

    async def read_original_sessions(self, where: str) -> list[OriginalSession]:
        """The original harnessx's sessions found at ``where``."""
        ...

    async def migrate(self, *, validate_only: bool = False) -> MigrationReport:
        """Apply what the database lacks, also on a store that was never opened."""
        ...


class SessionStore(Protocol):
    """Sessions and the leases that fence their writers, and the control requests on them."""

    lease_seconds: float
    """How long a claim or a renewal extends a lease."""

    async def create_session(
        self, session_id: str, agent_ref: str | None, fingerprint: dict[str, Any], *, recording: bool = False
    ) -> None: ...

    async def get_session(self, session_id: str) -> SessionRecord | None: ...

    async def claim(self, session_id: str, holder: str) -> Lease:
        """Take the session for ``holder`` for ``lease_seconds``, bumping its generation.
        ``SessionBusyError`` if another live process holds an unexpired lease."""

    async def renew(self, leases: list[Lease]) -> Renewal:
        """Extend every lease this process holds in one statement; report lost ones."""

    async def release(self, lease: Lease) -> None: ...

    def lease_deadline(self, lease: Lease) -> float:
        """The ``time.monotonic()`` until which ``lease`` certainly still holds, by what this
        process saw: when the claim or renewal that last extended it was sent, plus
        ``lease_seconds`` (0 when unknown, or when the process may have been judged dead
        since). A holder checks it before an effect outside the store (a tool call): a
        reply that came late only shows that the lease held when the server processed it."""

    async def process_alive(self, owner: str) -> bool: ...

    async def set_control(self, session_id: str, control: ControlRequest) -> bool:
        """Ask the process driving the session's run to ``pause`` or ``cancel`` it; ``False``
        (nothing written) unless the session is leased and its run is running. The request's
        one lifecycle: written here (a ``cancel`` is never replaced by a later ``pause``);
        returned by every lease renewal of the holder (``Renewal.controls``) and of whoever
        holds the run next, so a renewal whose reply is lost loses nothing; cleared by the
        commit that stops the run, which has acted on it, so that it never reaches a later
        execution, except a ``cancel`` on a run that pauses or begins to wait for input: the
        driver looks for it after that commit and cancels the run (a cancel is never
        overtaken by a pause)."""

    async def wait_for_control(self, max_wait: float) -> bool:
        """Return soon after a pause/cancel request may have been written for a lease of this
        process (a hint to renew now, which returns it: ``True``), or after ``max_wait``
        seconds (``False``). PostgreSQL hears a notification; SQLite looks every 0.25 s."""

    async def pending_controls(self) -> dict[str, ControlRequest]:
        """Pause/cancel requests no renewal has returned yet, for sessions this process
        holds leases on."""

    async def recent_sessions(self, limit: int) -> list[SessionSummary]: ...

    async def session_summary(self, session_id: str) -> SessionSummary | None: ...


class RunStore(Protocol):
    """Runs and their checkpoints, and what a run's row, state and journal hold."""

    async def create_run(
        self,
        lease: Lease,
        run_id: str,
        request_id: str | None,
        message: str,
        delta: Delta,
        *,
        queued: bool = False,
        journal: Sequence[JournalRecord] = (),
        schedule: Schedule | None = None,
    ) -> None:
        """Insert a run (refused with ``SessionBusyError`` while another is unfinished) and
        commit its first boundary; the run's ``history_length`` is the session's message
        count at that moment. ``queued`` leaves it for a pool worker and gives the lease up
        in the same commit, so that a worker can claim the session as soon as it sees the run;
        ``schedule`` says how it waits there (priority, limits, fair share, delay).
        ``journal`` records (a recorded run) are appended in the same transaction."""

    async def create_session_run(
        self,
        session: NewSession,
        holder: str,
        run_id: str,
        request_id: str | None,
        message: str,
        delta: Delta,
        *,
        queued: bool = False,
        journal: Sequence[JournalRecord] = (),
        schedule: Schedule | None = None,
    ) -> Lease:
        """``create_session``, ``claim`` and ``create_run`` in one transaction (on
        PostgreSQL one statement): the new session's lease goes to ``holder``, or with
        ``queued`` to nobody (the run waits for a pool worker, as ``schedule`` says; the
        lease returned no longer holds). ``ConfigurationError`` if the session exists: then
        nothing is written."""

    async def find_run(self, session_id: str, request_id: str) -> RunRecord | None: ...

    async def latest_run(self, session_id: str, *, messages: bool = True) -> RunRecord | None:
        """The session's newest run (``None``: it has none); ``messages=False`` reads its
        row alone, without the conversation (``RunRecord.conversation``)."""

    async def get_run(self, run_id: str, *, messages: bool = True) -> RunRecord | None:
        """The run (``None``: not in the store); ``messages=False`` reads its row alone,
        without the conversation (``RunRecord.conversation``)."""

    async def load_state(self, run_id: str) -> RunState: ...

    async def load_run(self, run_id: str) -> LoadedRun | None:
        """The run's row, its session and its state in one read (on PostgreSQL one
        statement); ``None`` when the run is not in the store."""

    async def commit(
        self,
        lease: Lease,
        state: RunState,
        delta: Delta,
        provisional: list[RunEvent],
        journal: Sequence[JournalRecord] = (),
        *,
        release: bool = False,
    ) -> None:
        """One checkpoint: ``provisional`` events then the delta's, and ``journal`` records
        numbered on from the run's last, all in one transaction under the lease.
        ``release``: the lease is given back in the same transaction (the run's last write
        in this execution, as ``release`` would)."""

    async def tool_result(self, session_id: str, tool_call_id: str) -> str | None:
        """The whole final result of the session's latest answered call with this tool call
        id (what ``read_tool_result`` reads), or ``None``."""

    async def incident_snapshot(
        self, session_id: str, run_id: str, *, max_records: int = 100_000
    ) -> IncidentSnapshot:
        """A recorded run of ``session_id`` (reads are scoped to it) with its journal, read
        consistently. ``StorageError`` for another session's run, a run not recorded, or a
        journal longer than ``max_records``."""

    async def count_journal(self, run_id: str, kind: str, step_id: str) -> int:
        """How many ``kind`` records a run's journal holds for one model step."""


class EventStore(Protocol):
    """A run's events: appended under the lease, read by cursor, followed."""

    async def append_events(
        self, lease: Lease, run_id: str, events: list[RunEvent], journal: Sequence[JournalRecord] = ()
    ) -> None: ...

    async def read_events(self, run_id: str, after: int | str = 0, limit: int = 500) -> list[RunEvent]:
        """Up to ``limit`` of the run's events after position ``after`` (an event's
        ``cursor``, as text or a number; ``0``: from the first), in order."""

    async def wait_for_events(self, run_id: str, max_wait: float) -> None:
        """Return soon after new events of ``run_id`` commit, or after ``max_wait`` seconds."""

    async def wait_until_stopped(self, run_id: str, max_wait: float) -> RunRecord | None:
        """The run's row as read (``None``: no such run). Unless it has ``stopped``, wait
        after reading it for a commit that may stop its execution, or ``max_wait`` seconds
        (the caller reads again); a backend that hears
        every such commit from other processes may wait longer (PostgreSQL listening: up to
        three seconds). What ``RunHandle.result()`` of a run driven elsewhere waits with: unlike
        ``wait_for_events``, it does not make every checkpoint of the run notify."""


class PoolStore(Protocol):
    """The pool's queue and its workers."""

    async def requeue(self, lease: Lease, run_id: str) -> None:
        """Queue a running run again, fenced by the holder's lease (a drain hand-off)."""

    async def defer_start(
        self, lease: Lease, run_id: str, *, attempts: int, retry_in: float, events: list[RunEvent]
    ) -> None:
        """A worker claimed the run and could not start it (its agent could not be built):
        record ``attempts`` (the consecutive failed starts so far) and queue the run again,
        claimable no sooner than ``retry_in`` seconds from now. ``events`` (saying so) are
        appended after the run's last; this call sets their cursors. Fenced by ``lease``;
        applied at most once even when a lost reply makes the call repeat."""

    async def clear_start_attempts(self, lease: Lease, run_id: str) -> None:
        """The run has started: earlier failed starts no longer count. Fenced by ``lease``."""

    async def end_run(
        self,
        lease: Lease,
        run_id: str,
        *,
        status: str,
        stop_reason: str,
        error: dict[str, str] | None,
        events: list[RunEvent],
    ) -> None:
        """End a run without loading its state (it cannot be loaded, or its agent cannot be
        built): set its status, stop reason and error, take it off the queue, and append
        ``events`` after its last event (this call sets their cursors). Fenced by ``lease``;
        applied at most once even when a lost reply makes the call repeat."""

    async def claim_queued(
        self, holder: str, agent_refs: list[str] | None, limit: int, *, rate: RateAsk | None = None
    ) -> Claims:
        """Claim up to ``limit`` queued runs whose sessions are free, as ``(lease, run_id)``:
        tenants in fair-share order, each tenant's runs by rank (priority and age), none whose
        concurrency key or agent already has as many runs driving as its limit allows, none
        before its ``not_before`` (see docs/scheduling.md). One transaction: the limits are
        checked and the runs taken atomically. ``rate``: a lease of the taken runs' first
        model calls to reserve in the same transaction (``lease_ahead``: at most one call a
        run taken, none that would wait), answered in ``Claims.rate``."""

    async def wait_for_work(self, max_wait: float) -> bool:
        """Return soon after a run is queued (a wake-up hint: ``True``), or after ``max_wait``
        seconds (``False``)."""

    async def register_worker(self, worker: WorkerInfo) -> None: ...

    async def worker_heartbeat(self, worker_id: str, *, draining: bool) -> None: ...

    async def stop_worker(self, worker_id: str) -> None: ...

    async def running_workers(self) -> list[WorkerInfo]: ...

    async def queue_stats(self) -> QueueStats: ...


class LeadershipStore(Protocol):
    """The supervisor's terms and the writes they fence: orphans, dead workers, scans."""

    async def try_leadership(self, role: str) -> Leadership | None:
        """Become the one holder of ``role`` without waiting, taking its next epoch in the
        same transaction; the term while held (the same one again if already held), else
        ``None``. The hold dies with this process (file lock / advisory lock)."""

    async def holds_leadership(self, term: Leadership) -> bool:
        """Whether ``term`` still holds: its lock is held (a dropped database connection
        loses it) and no newer epoch is stored."""

    async def pool_scan(self, term: Leadership, tracked: Sequence[str]) -> PoolScan:
        """One supervisor scan's reads as leader of ``term`` in one statement (see
        ``PoolScan``); ``tracked``: the runs it requeued and waits to see claimed. Like
        ``holds_leadership``, a term found deposed is let go of."""

    async def release_leadership(self, term: Leadership) -> None: ...

    async def find_orphans(self) -> list[Orphan]:
        """Leases whose holder process is dead, or that expired."""

    async def recover_orphan(self, term: Leadership, orphan: Orphan, *, requeue: bool) -> Recovery | None:
        """Drop the orphan's lease with a generation bump (fencing the old holder out) and,
        with ``requeue``, queue its session's running run. ``None`` if the lease is no longer
        the orphan's (recovered already, or renewed). Fenced by ``term``."""

    async def mark_worker_dead(self, term: Leadership, worker_id: str) -> float | None:
        """Record that a worker died; the database clock of the write, or ``None`` if it was
        already marked stopped. Fenced by ``term``."""

    async def stuck_runs(self, older_than: float, limit: int = 100) -> list[StuckRun]: ...

    async def record_scan(self, term: Leadership, *, scans: int, recovered: int) -> None:
        """The leader's scans and recoveries so far in ``term``, for operators to read.
        Fenced by ``term`` (``LeadershipLostError``)."""


class SchedulingStore(Protocol):
    """Limits, fair shares and model rate limits the pool's claim obeys (``_scheduling``)."""

    async def schedule_of(self, run_id: str) -> RunSchedule | None:
        """How a run is scheduled (``None``: no such run)."""

    async def set_concurrency_limit(self, pattern: str, max_running: int) -> None:
        """At most ``max_running`` runs of a key (each key a ``prefix*`` pattern matches;
        ``agent:NAME@VERSION``: an agent's runs) drive at once. Replaces an earlier limit."""

    async def remove_concurrency_limit(self, pattern: str) -> bool:
        """Remove an operator's limit; whether there was one."""

    async def concurrency_limits(self) -> list[ConcurrencyLimit]:
        """Every limit (operators' and registries'), with usage for exact keys."""

    async def publish_agent_defaults(self, defaults: dict[str, tuple[int | None, int | None]]) -> None:
        """A worker's registry: per agent reference, its default priority and max_concurrent."""

    async def set_tenant_weight(self, tenant: str, weight: float) -> None: ...

    async def tenant_shares(self) -> list[TenantShare]: ...

    async def queue_shape(self) -> QueueShape:
        """Queued runs by priority band and concurrency key, for metrics."""

    async def set_rate_limit(
        self,
        pattern: str,
        requests_per_minute: float | None,
        tokens_per_minute: float | None,
        burst_seconds: float = 0.0,
    ) -> None:
        """Every worker together starts at most ``requests_per_minute`` model calls, of at
        most ``tokens_per_minute`` tokens, per minute in each ``provider/model`` bucket
        ``pattern`` names (a trailing ``*``: each bucket it matches gets that rate)."""

    async def remove_rate_limit(self, pattern: str) -> bool:
        """Remove a rate limit; whether there was one."""

    async def rate_limits(self) -> list[RateLimit]: ...

    async def rate_buckets(self) -> list[RateBucket]:
        """Every bucket used so far, the limit governing it and its waits."""

    async def reserve_rate(
        self,
        bucket: str,
        tokens: int,
        settle: int = 0,
        run_id: str | None = None,
        calls: int = 1,
        slack: float = 0.0,
        release: RateRelease | None = None,
    ) -> RateReservation | None:
        """Reserve the start of one model call of about ``tokens`` tokens in ``bucket``:
        how long to wait before starting it (``wait``, 0: now) and when that is (``start``,
        by the store's clock); ``None`` when no limit governs the bucket. Atomic across the
        fleet: every reservation gets a start of its own. ``settle``: tokens earlier calls of
        the bucket used beyond (negative: short of) their reservations, settled first, in
        the same statement (see ``settle_rate``). ``run_id``: the reservation kept for that
        run (``hold_rate``), if there is one, is taken instead (``held``).

        ``calls`` > 1 asks for a lease: up to that many calls' starts of ``tokens`` each,
        the first as above and each further one only while it may also start within
        ``slack`` seconds of now (``granted`` says how many). ``release``: a lease's unspent
        calls given back first, in the same statement (see ``release_rate``)."""

    async def release_rate(self, bucket: str, release: RateRelease, settle: int = 0) -> None:
        """Give a lease's unspent calls back to ``bucket`` (only the part of their share of
        its schedule still ahead of now), and settle ``settle`` tokens of earlier calls."""

    async def hold_rate(self, lease: Lease, run_id: str, bucket: str, start: float, delay: float) -> None:
        """Pool run ``run_id`` gives its worker slot back while it waits for its rate budget:
        its reservation of ``bucket`` (``start``, the store's clock) is kept for its next
        ``reserve_rate``, and it is queued again, claimable ``delay`` seconds from now.
        Fenced by ``lease`` (``LeaseLostError``)."""

    async def settle_rate(self, bucket: str, tokens: int) -> None:
        """Calls of ``bucket`` used ``tokens`` more (negative: fewer) than they reserved."""

    async def pause_rate(self, bucket: str, seconds: float) -> float | None:
        """No call of ``bucket`` starts in the next ``seconds`` (a vendor's Retry-After), for
        the whole fleet; a later pause already set stands. When the pause ends (the store's
        clock, epoch seconds); ``None`` if the bucket was never reserved from."""


class ConsoleStore(Protocol):
    """The operator console: listings, the audit trail, sign-ins."""

    async def list_runs(self, where: RunFilter, *, limit: int = 50, before: RunKey | None = None) -> RunPage:
        """Runs matching ``where``, newest first, older than ``before`` (a ``RunRow.key``)."""

    async def count_runs(self) -> dict[str, int]:
        """How many runs have each status; ``queued``: how many of the running wait in the queue."""

    async def tool_calls(self, run_id: str) -> list[ToolEntry]:
        """Every tool call of a run, in order (``CorruptStateError`` for a row that does not decode)."""

    async def list_workers(self, limit: int = 200) -> list[WorkerInfo]:
        """Workers, live first then the most recently stopped, with ``leases`` counted."""

    async def leader_states(self) -> list[LeaderState]: ...

    async def add_action(self, action: Action) -> None:
        """Record an operator's action before it is carried out (``at`` is set by the store)."""

    async def finish_action(self, action: Action) -> None:
        """Record how ``action`` ended (its ``outcome``, and its ``detail`` as it is now)."""

    async def run_actions(self, run_id: str, limit: int = 200) -> list[Action]: ...

    async def recent_actions(self, limit: int = 100) -> list[Action]: ...

    async def add_login(self, id_hash: str, name: str, role: str, token_id: str, seconds: float) -> None:
        """A console sign-in valid for ``seconds``; also forgets long-expired ones."""

    async def get_login(self, id_hash: str) -> Login | None: ...

    async def end_login(self, id_hash: str) -> None: ...


class LifecycleStore(Protocol):
    """The data lifecycle: retention, erasure, archives (``_lifecycle``)."""

    async def prune(
        self,
        older_than: float,
        *,
        limit: int,
        statuses: Collection[str] | None = None,
        after: PruneCursor | None = None,
        dry_run: bool = False,
        term: Leadership | None = None,
        archive: Archiver | None = None,
    ) -> PruneBatch:
        """Remove up to ``limit`` finished sessions, with everything they own, whose last
        activity is more than ``older_than`` seconds ago (by the database's clock), in one
        short transaction, continuing a pass after ``after``. A session goes only if it has
        no unfinished run (running, paused, awaiting input), no unexpired lease holds it and,
        with ``statuses``, its latest run has one of them (a session without runs has none).
        ``archive`` receives the records of those about to go (see ``_archive``) before they
        are deleted. ``term``: a leader's prune, fenced (``LeadershipLostError``)."""

    async def delete_session(self, session_id: str) -> dict[str, int] | None:
        """Erase one session and everything it owns; the rows removed per table, ``None`` for
        no such session. ``SessionBusyError`` while it has an unfinished run or an unexpired
        lease holds it (nothing is deleted)."""

    async def session_page(self, after: str, limit: int) -> list[str]:
        """Up to ``limit`` session ids after ``after``, in order (``""``: from the first)."""

    async def export_sessions(self, session_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Archive records of the given sessions (those that exist), read consistently."""

    async def import_session(self, record: ArchiveRecord) -> bool:
        """Restore an archived session in one transaction; ``False`` (nothing written) when a
        session with its id exists. ``ConfigurationError`` for a record this database cannot
        hold (columns it lacks, a run id another session has)."""

    async def prune_workers(self, term: Leadership, older_than: float, limit: int = 1000) -> int:
        """Forget up to ``limit`` workers that stopped more than ``older_than`` seconds ago;
        how many. Fenced by ``term``."""

    async def oldest_activity(self) -> float | None:
        """The oldest last known activity of any session (what retention examines next),
        epoch seconds; ``None`` without sessions."""

    async def maintain_partitions(self, ahead: float, *, grace: float = 2 * 86400.0) -> Partitions | None:
        """Make the time partitions that cover rows of runs made up to ``ahead`` seconds from
        now, drop the past ones none of whose runs is stored, delete the rows retention left
        of runs pruned more than ``grace`` seconds ago, and say what there is (PostgreSQL's
        events, migrations 0018 and 0022; ``None`` on a store without partitions). Safe to call
        from several processes at once."""

    async def compact_events(self, older_than: float, *, limit: int) -> Compaction:
        """Compact the streamed text of up to ``limit`` runs that finished more than
        ``older_than`` seconds ago and wait for it (noted as they finish), oldest first, in one
        short transaction: each stretch of pieces becomes one row, and a reader behind any
        cursor still reads the same text, once (``_compaction``). A run not finished any more
        (resumed) is left as it is; one a prune or an erasure holds is left for the next call.
        Safe to call from several processes at once."""

    async def reclaim_space(self) -> int:
        """Give free pages back to the file system after deleting (SQLite's incremental
        vacuum, a bounded number of short steps); pages freed, so a caller that wants them
        all calls it again while it frees some. PostgreSQL's autovacuum does this: 0."""


class Store(
    StoreBase,
    SessionStore,
    RunStore,
    EventStore,
    PoolStore,
    LeadershipStore,
    SchedulingStore,
    ConsoleStore,
    LifecycleStore,
    Protocol,
):
    """Everything the runtime, the pool, the supervisor and the operators need; both backends
    implement it."""
