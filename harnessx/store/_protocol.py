"""The store protocol: the only way run state reaches a database.

The runtime is the only caller that writes. Every write that changes a run takes the
caller's ``Lease`` and commits only while that lease still holds (same owner, same
generation, not expired), checked in the same transaction as the write; otherwise it
raises ``LeaseLostError`` and writes nothing. The supervisor's writes are fenced the same
way by its ``Leadership`` term (``LeadershipLostError``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from harnessx._errors import CorruptStateError, LeadershipLostError
from harnessx._events import RunEvent
from harnessx._journal import JournalRecord
from harnessx._results import RunStatus
from harnessx._state import Delta, RunState, ToolEntry
from harnessx.store._migrations import MigrationReport
from harnessx.store._original import OriginalSession

if TYPE_CHECKING:
    from harnessx.store._archive import ArchiveRecord
    from harnessx.store._scheduling import (
        Claims,
        ConcurrencyLimit,
        QueueShape,
        RateBucket,
        RateLimit,
        RateReservation,
        RunSchedule,
        Schedule,
        TenantShare,
    )

__all__ = [
    "Action",
    "IncidentSnapshot",
    "LeaderState",
    "Lease",
    "Leadership",
    "LoadedRun",
    "Login",
    "NewSession",
    "Orphan",
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
    "SessionRecord",
    "SessionSummary",
    "Store",
    "StuckRun",
    "WorkerInfo",
    "leadership_lost",
    "with_step_tools",
]


@dataclass(frozen=True)
class Lease:
    """A claim on a session: ``generation`` is the fencing token, larger on every claim."""

    session_id: str
    owner: str
    generation: int


@dataclass(frozen=True)
class NewSession:
    """A session to create together with its first run (``Store.create_session_run``)."""

    id: str
    agent_ref: str | None
    fingerprint: dict[str, Any]
    recording: bool = False


@dataclass(frozen=True)
class Leadership:
    """A term as the one holder of ``role`` (e.g. the supervisor): ``epoch`` is its fencing
    token, larger on every takeover. Every write the holder makes as leader carries the term
    and applies only while the store's latest term of ``role`` is still this one; otherwise
    it raises ``LeadershipLostError`` and writes nothing."""

    role: str
    holder: str  # the store's process_id
    epoch: int
    since: float  # when the term began, by the database's clock (epoch seconds)


def leadership_lost(term: Leadership) -> LeadershipLostError:
    """The error of a leader write refused because ``term`` is no longer the latest."""
    return LeadershipLostError(
        f"this process's {term.role} leadership (epoch {term.epoch}) was taken over by a newer "
        "leader; nothing was written"
    )


@dataclass(frozen=True)
class Recovery:
    """An orphan the leader recovered: the run it requeued (``None``: it only dropped the
    lease), and ``at``, the database's clock inside the recovering transaction, so before
    any later term began."""

    run_id: str | None
    at: float


@dataclass
class SessionRecord:
    id: str
    agent_ref: str | None
    fingerprint: dict[str, Any]
    lease_owner: str | None
    generation: int
    lease_expires_at: float | None
    control: str | None
    recording: bool = False
    """Whether the session's runs are flight-recorded (fixed when it is created)."""


# Our phases by the original harnessx's names for the same boundaries.
_ORIGINAL_PHASES = {
    "prepare_model_call": "prepare_model",
    "model_call": "model",
    "prepare_tools": "prepare_tools",
    "dispatch": "tools",
    "raw_result": "tools",
    "completed_result": "tools",
    "finish": "result",
}
_TOOL_PHASES = frozenset({"prepare_tools", "dispatch", "raw_result", "completed_result"})


@dataclass
class RunRecord(Mapping[str, Any]):
    """A run's row without its conversation: enough to decide what to do with it.

    ``queued``: waiting in the pool's queue. ``start_attempts``: consecutive times a worker
    claimed it and could not start it (see ``Store.defer_start``). ``problem``: what in the
    row does not decode (``load_state`` refuses such a run; the fields that did not decode
    hold defaults here).

    It is also a read-only mapping with the keys of the original harnessx's run state that a
    row holds (``record["status"]``, ``["run_id"]``, ``["phase"]`` by the original's phase
    names, ``["iterations"]``, ``["output"]``, ...): ``backend.latest_run()`` and
    ``get_run()`` return one, as the original returns its state dict. ``["tools"]`` is the
    current step's tool calls in the original's entry form while the run is between a
    model's tool calls and its next model call (``tools``; empty otherwise, as in the
    original), read only then. The conversation is not in it (every poll would read all of
    it): use ``await backend.load_state(run_id)``.
    """

    id: str
    session_id: str
    request_id: str | None
    request_message: str
    status: RunStatus
    phase: str
    event_count: int
    result: dict[str, Any] = field(default_factory=dict)
    queued: bool = False
    start_attempts: int = 0
    problem: str | None = None
    tools: tuple[dict[str, Any], ...] = ()

    @property
    def in_tools_step(self) -> bool:
        """Whether the run stands between a model's tool calls and its next model call."""
        return self.phase in _TOOL_PHASES

    def _state(self) -> dict[str, Any]:
        state = {
            "version": 1,
            "session_id": self.session_id,
            "run_id": self.id,
            "request_id": self.request_id,
            "message": self.request_message,
            "phase": _ORIGINAL_PHASES.get(self.phase, self.phase),
            "status": self.status.value,  # a plain str, as the original's state holds it
            # Model calls made: the engine's iteration counts from 0, and at prepare_model_call
            # the next call is not made yet.
            "iterations": int(self.result.get("iteration", 0)) + (self.phase != "prepare_model_call"),
            "usage": dict(self.result.get("usage") or {}),
            "output": self.result.get("output", ""),
            "stop_reason": self.result.get("stop_reason", ""),
            "error": self.result.get("error"),
            "usage_incomplete": bool(self.result.get("usage_incomplete", False)),
            "tools": [dict(entry) for entry in self.tools],
        }
        if self.status in (RunStatus.RUNNING, RunStatus.AWAITING_INPUT):
            # The original's state has no outcome yet: state.get("output") is None.
            for key in ("output", "stop_reason", "error"):
                del state[key]
        return state

    def __getitem__(self, key: str) -> Any:
        if key == "messages":
            raise KeyError(
                f"a run record has no {key!r}: read the run's conversation with "
                f"'await backend.load_state({self.id!r})'"
            )
        return self._state()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._state())

    def __len__(self) -> int:
        return len(self._state())


def with_step_tools(record: RunRecord, entries: Sequence[ToolEntry]) -> RunRecord:
    """``record`` with ``tools``: those of ``entries`` (the run's tool calls) of its current
    step, in the original's entry form."""
    iteration = record.result.get("iteration", 0)
    record.tools = tuple(entry.original_form() for entry in entries if entry.iteration == iteration)
    return record


@dataclass
class SessionSummary:
    """A session and its latest run, for listings."""

    session_id: str
    agent_ref: str | None
    created_at: float
    run_id: str | None
    run_status: str | None
    updated_at: float | None
    queued: bool = False  # the latest run waits in the pool's queue, claimed by no worker yet


@dataclass
class WorkerInfo:
    """A pool worker process: ``id`` is its backend's ``process_id``."""

    id: str
    host: str
    pid: int
    agents: list[str]
    concurrency: int
    started_at: float = 0.0
    heartbeat_at: float = 0.0
    draining: bool = False
    stopped_at: float | None = None  # when it stopped (or the supervisor found it dead)
    leases: int = 0  # sessions it holds a lease on (``list_workers`` only)
    alive: bool | None = None  # whether its process holds its liveness lock (``running_workers``)


# Where a retention pass continues: the last session it looked at, as (prune_check_at as the
# dialect keeps it exactly, id).
PruneCursor = tuple[float | str, str]


@dataclass
class PruneBatch:
    """One bounded step of retention (``Store.prune``).

    ``pruned``: the sessions removed (in a dry run: that would be); ``rows``: rows removed
    per table (none in a dry run); ``examined``: sessions looked at; ``cursor``: where the
    pass continues, ``None`` once it has looked at every session old enough."""

    pruned: list[str]
    rows: dict[str, int]
    examined: int
    cursor: PruneCursor | None


# Called with the archive records of the sessions a prune is about to remove, inside its
# transaction: when it returns they are deleted, when it raises nothing is.
Archiver = Callable[[list[dict[str, Any]]], None]


@dataclass
class Orphan:
    """A lease whose holder is dead (its liveness lock is gone) or whose lease expired."""

    session_id: str
    owner: str
    generation: int
    agent_ref: str | None
    reason: str  # "dead" or "expired"


@dataclass
class QueueStats:
    """Queued runs: per agent reference, ``(count, oldest queued_at)`` (epoch seconds)."""

    by_agent: dict[str | None, tuple[int, float]]

    @property
    def depth(self) -> int:
        return sum(count for count, _ in self.by_agent.values())

    @property
    def oldest_queued_at(self) -> float | None:
        return min((oldest for _, oldest in self.by_agent.values()), default=None)


# A run's place in the newest-first listing: its creation time as the dialect stores it
# exactly (SQLite: epoch seconds as stored; PostgreSQL: epoch microseconds) and its id.
RunKey = tuple[float | int, str]


@dataclass(frozen=True)
class RunFilter:
    """What a runs listing shows; every field given must match. ``status`` is a run status
    or ``queued`` (a pool run no worker has claimed yet, stored as ``running``, which then
    lists only the runs not queued). Times are epoch seconds: ``created_from`` inclusive,
    ``created_to`` exclusive."""

    status: str | None = None
    agent_ref: str | None = None
    session_id: str | None = None
    run_id: str | None = None
    request_id: str | None = None
    created_from: float | None = None
    created_to: float | None = None


@dataclass
class RunRow:
    """A run as a listing shows it (no conversation, nothing decoded)."""

    id: str
    session_id: str
    agent_ref: str | None
    request_id: str | None
    status: str
    phase: str
    iteration: int
    event_count: int
    stop_reason: str
    created_at: float
    updated_at: float
    queued: bool
    key: RunKey

    @property
    def shown_status(self) -> str:
        return "queued" if self.queued else self.status


@dataclass
class RunPage:
    """One page of a listing, newest first; ``next`` continues with older runs."""

    runs: list[RunRow]
    next: RunKey | None


@dataclass
class LeaderState:
    """A role's latest leadership term and what its leader last recorded of its scans."""

    role: str
    epoch: int
    holder: str
    since: float
    scanned_at: float | None
    scans: int
    recovered: int


@dataclass
class Action:
    """An operator's decision or control on a run (the audit trail).

    ``outcome``: ``ok``, or why it failed; ``None`` while it is being carried out, or when
    the acting process stopped before it learned."""

    id: str
    actor: str
    via: str  # console, api or cli
    action: str  # approve, decline, resolve_result, resolve_retry, resolve_abort, cancel, pause, resume
    session_id: str
    run_id: str | None
    execution_key: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    at: float = 0.0
    outcome: str | None = None
    finished_at: float | None = None


@dataclass(frozen=True)
class Login:
    """A console sign-in: who, with which role and token, and whether it is still valid."""

    name: str
    role: str
    token_id: str
    valid: bool


@dataclass
class StuckRun:
    run_id: str
    session_id: str
    status: str
    updated_at: float


class IncidentSnapshot(NamedTuple):
    """A recorded run as one consistent read: its state (conversation included), its journal
    records in bundle form (``seq`` order, payloads as recorded) and its session."""

    state: RunState
    records: list[dict[str, Any]]
    session: SessionRecord


@dataclass
class LoadedRun:
    """A run as a worker that claimed it starts from, read at once: its row, its session
    and its state, or ``problem``, why the state cannot be read (nothing may drive it)."""

    record: RunRecord
    session: SessionRecord
    state: RunState | None
    problem: CorruptStateError | None = None


@dataclass
class Renewal:
    """The outcome of one heartbeat: which leases still hold, and pending control requests."""

    held: set[str]
    lost: set[str]
    controls: dict[str, str]


class Store(Protocol):
    """Operations the runtime, the pool and the supervisor need; both backends implement it."""

    process_id: str
    """Unique per process start; lease owners are ``<process_id>/<holder>``."""
    lease_seconds: float
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

    # sessions and leases
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

    # runs
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
    ) -> Lease:
        """``create_session``, ``claim`` and ``create_run`` in one transaction (on
        PostgreSQL one statement): the new session's lease goes to ``holder``, or with
        ``queued`` to nobody (the run waits for a pool worker; the lease returned no longer
        holds). ``ConfigurationError`` if the session exists: then nothing is written."""

    async def find_run(self, session_id: str, request_id: str) -> RunRecord | None: ...

    async def latest_run(self, session_id: str) -> RunRecord | None: ...

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def load_state(self, run_id: str) -> RunState: ...

    async def load_run(self, run_id: str) -> LoadedRun | None:
        """The run's row, its session and its state in one read (on PostgreSQL one
        statement); ``None`` when the run is not in the store."""

    async def recent_sessions(self, limit: int) -> list[SessionSummary]: ...

    async def session_summary(self, session_id: str) -> SessionSummary | None: ...

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

    async def append_events(
        self, lease: Lease, run_id: str, events: list[RunEvent], journal: Sequence[JournalRecord] = ()
    ) -> None: ...

    async def read_events(self, run_id: str, after: int, limit: int = 500) -> list[RunEvent]: ...

    async def tool_result(self, session_id: str, tool_call_id: str) -> str | None:
        """The whole final result of the session's latest answered call with this tool call
        id (what ``read_tool_result`` reads), or ``None``."""

    async def wait_for_events(self, run_id: str, max_wait: float) -> None:
        """Return soon after new events of ``run_id`` commit, or after ``max_wait`` seconds."""

    # the flight recorder
    async def incident_snapshot(
        self, session_id: str, run_id: str, *, max_records: int = 100_000
    ) -> IncidentSnapshot:
        """A recorded run of ``session_id`` (reads are scoped to it) with its journal, read
        consistently. ``StorageError`` for another session's run, a run not recorded, or a
        journal longer than ``max_records``."""

    async def count_journal(self, run_id: str, kind: str, step_id: str) -> int:
        """How many ``kind`` records a run's journal holds for one model step."""

    # controls
    async def set_control(self, session_id: str, control: str | None) -> None: ...

    # the pool
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

    async def pending_controls(self) -> dict[str, str]:
        """Pause/cancel requests for sessions this process holds leases on."""

    async def claim_queued(self, holder: str, agent_refs: list[str] | None, limit: int) -> Claims:
        """Claim up to ``limit`` queued runs whose sessions are free, as ``(lease, run_id)``:
        tenants in fair-share order, each tenant's runs by rank (priority and age), none whose
        concurrency key or agent already has as many runs driving as its limit allows, none
        before its ``not_before`` (see docs/scheduling.md). One transaction: the limits are
        checked and the runs taken atomically."""

    # scheduling
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

    # model rate limits
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

    async def reserve_rate(self, bucket: str, tokens: int) -> RateReservation | None:
        """Reserve the start of one model call of about ``tokens`` tokens in ``bucket``:
        how long to wait before starting it (``wait``, 0: now) and when that is (``start``,
        by the store's clock); ``None`` when no limit governs the bucket. Atomic across the
        fleet: every reservation gets a start of its own."""

    async def settle_rate(self, bucket: str, tokens: int) -> None:
        """A call of ``bucket`` used ``tokens`` more (negative: fewer) than it reserved."""

    async def wait_for_work(self, max_wait: float) -> bool:
        """Return soon after a run is queued (a wake-up hint: ``True``), or after ``max_wait``
        seconds (``False``)."""

    async def register_worker(self, worker: WorkerInfo) -> None: ...

    async def worker_heartbeat(self, worker_id: str, *, draining: bool) -> None: ...

    async def stop_worker(self, worker_id: str) -> None: ...

    async def running_workers(self) -> list[WorkerInfo]: ...

    async def find_orphans(self) -> list[Orphan]:
        """Leases whose holder process is dead, or that expired."""

    async def recover_orphan(self, term: Leadership, orphan: Orphan, *, requeue: bool) -> Recovery | None:
        """Drop the orphan's lease with a generation bump (fencing the old holder out) and,
        with ``requeue``, queue its session's running run. ``None`` if the lease is no longer
        the orphan's (recovered already, or renewed). Fenced by ``term``."""

    async def mark_worker_dead(self, term: Leadership, worker_id: str) -> float | None:
        """Record that a worker died; the database clock of the write, or ``None`` if it was
        already marked stopped. Fenced by ``term``."""

    async def queue_stats(self) -> QueueStats: ...

    async def try_leadership(self, role: str) -> Leadership | None:
        """Become the one holder of ``role`` without waiting, taking its next epoch in the
        same transaction; the term while held (the same one again if already held), else
        ``None``. The hold dies with this process (file lock / advisory lock)."""

    async def holds_leadership(self, term: Leadership) -> bool:
        """Whether ``term`` still holds: its lock is held (a dropped database connection
        loses it) and no newer epoch is stored."""

    async def release_leadership(self, term: Leadership) -> None: ...

    async def stuck_runs(self, older_than: float, limit: int = 100) -> list[StuckRun]: ...

    async def record_scan(self, term: Leadership, *, scans: int, recovered: int) -> None:
        """The leader's scans and recoveries so far in ``term``, for operators to read.
        Fenced by ``term`` (``LeadershipLostError``)."""

    # the operator console (reads, the audit trail, sign-ins)
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

    # the data lifecycle: retention, erasure, archives
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

    async def reclaim_space(self) -> int:
        """Give free pages back to the file system after deleting (SQLite's incremental
        vacuum, in short steps); pages freed. PostgreSQL's autovacuum does this: 0."""
