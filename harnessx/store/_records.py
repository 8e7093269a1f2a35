"""What the store reads and writes, as values: leases and their owners, sessions, runs,
workers, leadership terms, listings and the records of the console and of retention.

Dialect-free: both backends build these from their rows (``_core``), and every caller of
the ``Store`` protocol (``_protocol``) reads them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from harnessx._errors import CorruptStateError, LeadershipLostError
from harnessx._results import RunStatus
from harnessx._state import RunState, ToolEntry

__all__ = [
    "CONTROL_REQUESTS",
    "Action",
    "ControlRequest",
    "Archiver",
    "IncidentSnapshot",
    "LeaderState",
    "Lease",
    "Leadership",
    "LoadedRun",
    "Login",
    "NewSession",
    "Orphan",
    "Owner",
    "Compaction",
    "Partitions",
    "PoolScan",
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
    "StuckRun",
    "WorkerInfo",
    "control_request",
    "leadership_lost",
    "listed_status",
    "with_step_tools",
]


@dataclass(frozen=True)
class Owner:
    """Who holds a lease: the process (its store's ``process_id``, the unit of liveness)
    and the holder inside it (a runtime, a worker's slot). Stored as ``<process>/<holder>``;
    this type is the only place that builds or parses that text."""

    process: str
    holder: str = ""

    def __str__(self) -> str:
        return f"{self.process}/{self.holder}"

    @classmethod
    def parse(cls, text: str) -> Owner:
        """The owner a stored ``lease_owner`` names (a text without ``/``: a process alone)."""
        process, _, holder = text.partition("/")
        return cls(process, holder)

    @staticmethod
    def process_of(text: str) -> str:
        """The process part of a stored owner."""
        return text.partition("/")[0]

    @staticmethod
    def range_of(process: str) -> tuple[str, str]:
        """``(low, high)``: every owner of ``process`` sorts in ``[low, high)`` (``'0'``
        follows ``'/'``), so a query finds a process's leases by an index range scan."""
        return f"{process}/", f"{process}0"


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


ControlRequest = Literal["pause", "cancel"]
"""What another process asks of the one driving a session's run (``sessions.control``)."""

CONTROL_REQUESTS: tuple[ControlRequest, ...] = ("pause", "cancel")


def control_request(stored: object) -> ControlRequest | None:
    """A session's stored control request; ``None`` for none, and for text that no harnessx
    writes (which, as ever, nothing acts on)."""
    if stored == "pause":
        return "pause"
    if stored == "cancel":
        return "cancel"
    return None


def listed_status(stored: object) -> RunStatus:
    """A listed run's stored status as a ``RunStatus``. Text no harnessx writes stands for a
    run that cannot go on, so a listing shows it as failed, as loading the run does (a
    listing never fails on one bad row)."""
    try:
        return RunStatus(stored)
    except ValueError:
        return RunStatus.FAILED


@dataclass
class SessionRecord:
    id: str
    agent_ref: str | None
    fingerprint: dict[str, Any]
    lease_owner: str | None
    generation: int
    lease_expires_at: float | None
    control: ControlRequest | None
    recording: bool = False
    """Whether the session's runs are flight-recorded (fixed when it is created)."""


# Our phases by the original harnessx's names for the same boundaries. The original's
# phase names the step that comes next: once the calls are prepared (an approval stop
# included) that is "tools".
_ORIGINAL_PHASES = {
    "prepare_model_call": "prepare_model",
    "model_call": "model",
    "prepare_tools": "tools",
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

    It is also a read-only mapping with the keys of the original harnessx's run state
    (``record["status"]``, ``["run_id"]``, ``["phase"]`` by the original's phase names,
    ``["iterations"]``, ``["output"]``, ...): ``backend.latest_run()`` and ``get_run()``
    return one, as the original returns its state dict. ``["tools"]`` is the current step's
    tool calls in the original's entry form while the run is between a model's tool calls
    and its next model call (``tools``; empty otherwise, as in the original), read only
    then. ``["messages"]`` is the run's conversation as it stood at its last message
    (``conversation``, content blocks, as shown to the model), in a record read whole;
    this harnessx's own reads, which poll, ask for the row alone (``messages=False``).
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
    conversation: list[dict[str, Any]] | None = None

    @property
    def in_tools_step(self) -> bool:
        """Whether the run stands between a model's tool calls and its next model call."""
        return self.phase in _TOOL_PHASES

    @property
    def stopped(self) -> bool:
        """Whether its execution has stopped: neither running nor waiting in the queue (it may
        still be finishing while its process holds the session)."""
        return self.status is not RunStatus.RUNNING and not self.queued

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
        if self.conversation is not None:
            state["messages"] = self.conversation
        if self.status in (RunStatus.RUNNING, RunStatus.AWAITING_INPUT):
            # The original's state has no outcome yet: state.get("output") is None.
            for key in ("output", "stop_reason", "error"):
                del state[key]
        return state

    def __getitem__(self, key: str) -> Any:
        if key == "messages" and self.conversation is None:
            why = (
                f"its conversation does not decode ({self.problem})"
                if self.problem
                else "it was read without its conversation (messages=False)"
            )
            raise KeyError(
                f"this record of run {self.id} has no 'messages': {why}; read the run whole with "
                f"'await backend.get_run({self.id!r})', or its state with "
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
    run_status: RunStatus | None  # text as ``RunStatus`` (a str enum); ``.value`` to show it
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


@dataclass
class Compaction:
    """One bounded step of compacting finished runs' streamed text (``Store.compact_events``).

    ``examined``: runs taken from those waiting; ``runs``: runs whose rows changed; ``rows``:
    event rows removed (merged into the row after them); ``more``: a full batch, so more may
    be waiting."""

    examined: int
    runs: int
    rows: int
    more: bool


@dataclass
class Partitions:
    """The time partitions of a partitioned table (PostgreSQL's events; ``Store.maintain_partitions``).

    ``count``: its day partitions; ``covered_until``: the end of the newest, epoch seconds
    (rows of runs made after it cannot be stored; ``None`` without any); ``made``: partitions
    this call made; ``dropped``: those it dropped (every run of their day gone); ``purged``:
    rows of pruned runs it deleted one by one (their day kept); ``problem``: why dropping
    failed, if it did (the rest was done); ``dropped_rows``: the rows the dropped days held,
    as the prunes of their runs counted them."""

    table: str
    count: int
    covered_until: float | None
    made: int = 0
    dropped: list[str] = field(default_factory=list)
    purged: int = 0
    problem: str | None = None
    dropped_rows: int = 0


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
class PoolScan:
    """What one supervisor scan reads, all in one statement: whether the leader's ``term``
    still holds (its lock and the latest stored epoch), the orphan leases (as
    ``find_orphans``), the running workers with their liveness (as ``running_workers``), and,
    for each run whose recovery the leader tracks, its status and whether its session is
    leased again (``tracked``; a run or session that is gone is absent). Nothing but
    ``holds`` is read once the term is known not to hold."""

    holds: bool
    orphans: list[Orphan] = field(default_factory=list)
    workers: list[WorkerInfo] = field(default_factory=list)
    tracked: dict[str, tuple[str, bool]] = field(default_factory=dict)


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
    status: RunStatus
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
        """The status as plain text (``queued`` for a pool run nothing drives yet)."""
        return "queued" if self.queued else self.status.value


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
    status: RunStatus
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
    and its state, or ``problem``, why the state cannot be read (nothing may drive it);
    ``rate_holds``: the buckets whose rate reservation is kept for it (it gave its slot back
    to wait for budget), which its next model call of each takes from the store."""

    record: RunRecord
    session: SessionRecord
    state: RunState | None
    problem: CorruptStateError | None = None
    rate_holds: tuple[str, ...] = ()


@dataclass
class Renewal:
    """The outcome of one heartbeat: which leases still hold, and the pause/cancel requests
    on their sessions (``controls``, by session). A request is returned by every renewal
    until the commit that stops the run clears it, so a renewal whose reply was lost loses
    none; the holder acts on each once (``LeaseKeeper``)."""

    held: set[str]
    lost: set[str]
    controls: dict[str, ControlRequest]
