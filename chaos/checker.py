"""Invariants, checked after the fact from what the database and the effects ledger hold.

Everything here is a pure function of a ``Dataset``: rows read from the harnessx tables,
the invocation lines and effects rows the tools wrote, and what the suite itself did
(runs submitted, faults injected, decisions taken). Tests build datasets by hand, with
violations planted in the data, to show that each check can fail.

Terms: a *generation* is a lease's fencing token; every committed row records the one
that wrote it, and every tool invocation records the token it ran under. An invocation's
raw result is *committed* when a ``tool_call_complete`` event for its key exists at the
invocation's generation.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from harnessx._results import FINISHED_STATUSES

__all__ = [
    "INVARIANTS",
    "Dataset",
    "Decision",
    "Effect",
    "EventRow",
    "Fault",
    "Invocation",
    "Leadership",
    "LeaseLoss",
    "MessageRow",
    "PrunedSession",
    "RunRow",
    "SessionRow",
    "ToolCallRow",
    "Violation",
    "check",
]

INVARIANTS: dict[str, str] = {
    "runs-settle": "every submitted run exists and ends terminal or awaiting input (none lost, none stuck)",
    "dense-events": "each run's events are numbered 1..n without gaps or repeats (a compacted row holds "
    "the numbers of its pieces); event ids are unique",
    "no-stale-writes": "no row was committed by a generation older than one that already wrote the run",
    "dispatch-first": "every tool invocation ran under a committed dispatch intent of its own generation",
    "no-reexecution": "a tool whose raw result was committed is never invoked again",
    "idempotent-once": "an idempotent tool's effect is applied exactly once per execution key",
    "replay-only-after-fault": "safe/idempotent calls repeat only across a fault or a lost lease",
    "manual-uncertain": "an interrupted manual call surfaces as uncertain and reruns only on a retry",
    "approvals-honoured": "each approval is honoured once; a declined call never runs",
    "single-leader": "every leader term has an epoch of its own, and a leader writes only under its own "
    "epoch and before the next term began (database clock)",
    "ledger-readable": "every effects-ledger line can be read",
    "prune-finished-only": "retention removed only sessions whose every run had finished",
}

PROVISIONAL = frozenset({"text_delta", "thinking_delta"})
# What retention may remove: sessions whose every run has one of these statuses.
PRUNABLE = frozenset(status.value for status in FINISHED_STATUSES)
FINAL_STATUSES = frozenset({"completed", "failed", "cancelled", "awaiting_input"})


# ----------------------------------------------------------------------------- the data


@dataclass(frozen=True)
class RunRow:
    id: str
    session_id: str
    status: str
    event_count: int
    generation: int


@dataclass(frozen=True)
class SessionRow:
    id: str
    generation: int


@dataclass(frozen=True)
class EventRow:
    run_id: str
    seq: int
    event_id: str
    type: str
    generation: int
    created_at: float
    key: str | None = None  # data["execution_key"] of tool events
    attempt: int | None = None  # data["attempt"] of tool events
    # Streamed text compacted into this row: the cursors of the pieces before it it holds.
    merged: int = 0


@dataclass(frozen=True)
class MessageRow:
    session_id: str
    seq: int
    run_id: str
    generation: int


@dataclass(frozen=True)
class ToolCallRow:
    execution_key: str
    run_id: str
    policy: str
    status: str
    approved: bool
    generation: int


@dataclass(frozen=True)
class PrunedSession:
    """A session retention removed (found in its archive, gone from the database), with the
    status each of its runs had when it was archived."""

    session_id: str
    run_statuses: tuple[str, ...]


@dataclass(frozen=True)
class Invocation:
    """One call of a tool handler, from the ledger: ``ended`` is ``None`` if it was cut off."""

    inv: str
    key: str
    tool: str
    policy: str
    attempt: int
    token: int
    pid: int
    started: float
    ended: float | None = None
    outcome: str | None = None

    @property
    def run_id(self) -> str:
        return self.key.split(":", 1)[0]


@dataclass(frozen=True)
class Effect:
    key: str
    inv: str
    token: int
    pid: int
    outcome: str  # applied | deduplicated | rejected_stale
    t: float


@dataclass(frozen=True)
class Fault:
    """A fault the suite injected. ``pids`` are the processes it hit (``None``: all of them,
    e.g. a database restart); ``sessions`` the ``(session, generation)`` leases they held."""

    id: int
    kind: str
    started: float
    ended: float
    pids: tuple[int, ...] | None
    sessions: tuple[tuple[str, int], ...] = ()

    def hits(self, pid: int) -> bool:
        return self.pids is None or pid in self.pids


@dataclass(frozen=True)
class Decision:
    """What the suite decided on a waiting call: approve, decline, retry or result. ``t`` is
    taken before the decision is sent."""

    key: str
    action: str
    t: float


@dataclass(frozen=True)
class LeaseLoss:
    """A lease the supervisor took from its holder (dead or expired), or a worker reported lost."""

    session_id: str
    generation: int


@dataclass(frozen=True)
class Leadership:
    """From a supervisor's log: it became the leader (``lead``) or wrote as the leader:
    recovered an orphan (``act``) or marked a worker dead (``mark``). ``epoch`` is the term's fencing
    token; ``db_time`` the database's clock when the term began (``lead``) or inside the
    write's transaction (``act``); ``t`` the time of the log line, which can lag both."""

    supervisor: str
    kind: str  # lead | act | mark
    t: float
    epoch: int | None = None
    db_time: float | None = None


@dataclass
class Dataset:
    submitted: list[str]
    runs: list[RunRow] = field(default_factory=list)
    sessions: list[SessionRow] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)
    messages: list[MessageRow] = field(default_factory=list)
    tool_calls: list[ToolCallRow] = field(default_factory=list)
    pruned: list[PrunedSession] = field(default_factory=list)  # its rows are in the lists above
    invocations: list[Invocation] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    lease_losses: list[LeaseLoss] = field(default_factory=list)
    leadership: list[Leadership] = field(default_factory=list)
    lease_seconds: float = 2.0
    unreadable_ledger_lines: int = 0


@dataclass(frozen=True)
class Violation:
    invariant: str
    subject: str  # a run id, execution key, event id...
    detail: str

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.subject}: {self.detail}"


# ----------------------------------------------------------------------------- checking


def check(data: Dataset, *, expect_completed: bool = False) -> list[Violation]:
    """Every invariant over ``data``; an empty list means all hold. ``expect_completed``
    also flags runs that settled but did not complete (the suite answers every question,
    so each of its runs should)."""
    index = _Index(data)
    return [
        *check_runs(data, expect_completed=expect_completed),
        *check_event_streams(data),
        *check_generations(data, index),
        *check_dispatch_first(data, index),
        *check_raw_results(data, index),
        *check_idempotent_effects(data, index),
        *check_replays(data, index),
        *check_manual_calls(data, index),
        *check_approvals(data, index),
        *check_single_leader(data),
        *check_ledger(data),
        *check_pruned(data),
    ]


class _Index:
    """Lookups shared by the checks."""

    def __init__(self, data: Dataset) -> None:
        self.runs = {run.id: run for run in data.runs}
        self.sessions = {session.id: session for session in data.sessions}
        self.events_by_run: dict[str, list[EventRow]] = defaultdict(list)
        self.events_by_key: dict[str, list[EventRow]] = defaultdict(list)
        for event in data.events:
            self.events_by_run[event.run_id].append(event)
            if event.key is not None:
                self.events_by_key[event.key].append(event)
        for events in self.events_by_run.values():
            events.sort(key=lambda e: e.seq)
        self.invocations: dict[str, list[Invocation]] = defaultdict(list)
        for invocation in sorted(data.invocations, key=lambda i: i.started):
            self.invocations[invocation.key].append(invocation)
        self.tool_calls = {row.execution_key: row for row in data.tool_calls}
        self.decisions: dict[str, list[Decision]] = defaultdict(list)
        for decision in sorted(data.decisions, key=lambda d: d.t):
            self.decisions[decision.key].append(decision)
        self.lease_losses = {(loss.session_id, loss.generation) for loss in data.lease_losses}

    def of_type(self, key: str, kind: str) -> list[EventRow]:
        return [e for e in self.events_by_key.get(key, []) if e.type == kind]

    def committed(self, key: str, generation: int) -> bool:
        """Did ``generation`` commit a raw result for ``key``?"""
        return any(e.generation == generation for e in self.of_type(key, "tool_call_complete"))

    def resolved_by_result(self, key: str) -> bool:
        return any(d.action == "result" for d in self.decisions.get(key, []))

    def policy(self, key: str) -> str | None:
        row = self.tool_calls.get(key)
        if row is not None:
            return row.policy
        invocations = self.invocations.get(key)
        return invocations[0].policy if invocations else None

    def session_of(self, key: str) -> str | None:
        run = self.runs.get(key.split(":", 1)[0])
        return run.session_id if run else None

    def run_completed(self, key: str) -> bool:
        run = self.runs.get(key.split(":", 1)[0])
        return run is not None and run.status == "completed"


def check_runs(data: Dataset, *, expect_completed: bool = False) -> Iterable[Violation]:
    runs = {run.id: run for run in data.runs}
    for run_id in data.submitted:
        run = runs.get(run_id)
        if run is None:
            yield Violation("runs-settle", run_id, "submitted, but no such run is stored: lost")
        elif run.status not in FINAL_STATUSES:
            yield Violation("runs-settle", run_id, f"still {run.status} when the suite ended: stuck")
        elif expect_completed and run.status != "completed":
            yield Violation("runs-settle", run_id, f"ended {run.status}, though every question was answered")


def check_event_streams(data: Dataset) -> Iterable[Violation]:
    by_run: dict[str, list[int]] = defaultdict(list)
    for event in data.events:
        # A compacted row holds the pieces of the cursors before its own (harnessx compact).
        by_run[event.run_id].extend(range(event.seq - event.merged, event.seq + 1))
    for run in data.runs:
        seqs = sorted(by_run.get(run.id, []))
        repeated = sorted(seq for seq, n in Counter(seqs).items() if n > 1)
        if repeated:
            yield Violation(
                "dense-events", run.id, f"event sequence numbers {repeated} appear more than once"
            )
        top = seqs[-1] if seqs else 0
        missing = sorted(set(range(1, top + 1)) - set(seqs))
        if missing:
            yield Violation("dense-events", run.id, f"gap in the event stream: {_few(missing)} missing")
        if top != run.event_count:
            yield Violation(
                "dense-events", run.id, f"run records {run.event_count} events, the stream ends at {top}"
            )
    for event_id, n in Counter(e.event_id for e in data.events).items():
        if n > 1:
            yield Violation("dense-events", event_id, f"event id stored {n} times")


def check_generations(data: Dataset, index: _Index) -> Iterable[Violation]:
    for run_id, events in index.events_by_run.items():
        run = index.runs.get(run_id)
        session = index.sessions.get(run.session_id) if run else None
        highest = 0
        for event in events:
            if event.generation < highest:
                yield Violation(
                    "no-stale-writes",
                    run_id,
                    f"event {event.seq} ({event.type}) written by generation {event.generation} "
                    f"after generation {highest} had written",
                )
            highest = max(highest, event.generation)
        if session is not None and highest > session.generation:
            yield Violation(
                "no-stale-writes", run_id, f"written by generation {highest}, never claimed on its session"
            )
        durable = [e.generation for e in events if e.type not in PROVISIONAL]
        if run is not None and durable and run.generation < max(durable):
            yield Violation(
                "no-stale-writes",
                run_id,
                f"run row last written by generation {run.generation}, older than its events' {max(durable)}",
            )
    by_session: dict[str, list[MessageRow]] = defaultdict(list)
    for message in data.messages:
        by_session[message.session_id].append(message)
    for session_id, messages in by_session.items():
        highest = 0
        for message in sorted(messages, key=lambda m: m.seq):
            if message.generation < highest:
                yield Violation(
                    "no-stale-writes",
                    session_id,
                    f"message {message.seq} written by generation {message.generation} after {highest}",
                )
            highest = max(highest, message.generation)
    for row in data.tool_calls:
        written = [e.generation for e in index.events_by_key.get(row.execution_key, [])]
        if written and row.generation < max(written):
            yield Violation(
                "no-stale-writes",
                row.execution_key,
                f"tool call row written by generation {row.generation} after generation {max(written)} "
                "had moved it",
            )


def check_dispatch_first(data: Dataset, index: _Index) -> Iterable[Violation]:
    for invocation in data.invocations:
        intents = index.of_type(invocation.key, "tool_call_start")
        if not any(e.generation == invocation.token and e.attempt == invocation.attempt for e in intents):
            yield Violation(
                "dispatch-first",
                invocation.key,
                f"invoked (attempt {invocation.attempt}, generation {invocation.token}, "
                f"pid {invocation.pid}) without a committed dispatch intent of that attempt and generation",
            )


def check_raw_results(data: Dataset, index: _Index) -> Iterable[Violation]:
    for key, events in index.events_by_key.items():
        completes = sorted((e for e in events if e.type == "tool_call_complete"), key=lambda e: e.seq)
        if not completes:
            continue
        if len(completes) > 1:
            generations = [e.generation for e in completes]
            yield Violation(
                "no-reexecution", key, f"raw result committed {len(completes)} times {generations}"
            )
        committed_by = completes[0].generation
        invocations = index.invocations.get(key, [])
        for invocation in invocations:
            if invocation.token > committed_by:
                yield Violation(
                    "no-reexecution",
                    key,
                    f"invoked again by generation {invocation.token} (pid {invocation.pid}) after generation "
                    f"{committed_by} had committed its raw result",
                )
        if index.resolved_by_result(key):
            continue  # an operator supplied the result; no invocation committed it
        finished = [i for i in invocations if i.token == committed_by and i.ended is not None]
        if not finished:
            yield Violation(
                "no-stale-writes",
                key,
                f"raw result committed by generation {committed_by}, but no call under that token finished",
            )
        elif all(i.outcome == "rejected_stale" for i in finished):
            yield Violation(
                "no-stale-writes",
                key,
                f"generation {committed_by} committed the result of a call the effects table "
                "refused as stale",
            )


def check_idempotent_effects(data: Dataset, index: _Index) -> Iterable[Violation]:
    applied = Counter(effect.key for effect in data.effects if effect.outcome == "applied")
    keys = set(applied) | set(index.invocations) | set(index.tool_calls)
    for key in sorted(keys):
        policy = index.policy(key)
        count = applied.get(key, 0)
        if policy == "idempotent":
            if count > 1:
                yield Violation("idempotent-once", key, f"effect applied {count} times")
            elif (
                count == 0 and index.of_type(key, "tool_call_complete") and not index.resolved_by_result(key)
            ):
                yield Violation("idempotent-once", key, "raw result committed but the effect never applied")
        elif policy == "manual" and count > 1:
            yield Violation("manual-uncertain", key, f"manual effect applied {count} times")


def check_replays(data: Dataset, index: _Index) -> Iterable[Violation]:
    grace = 2 * data.lease_seconds + 2.0
    for key, started in index.invocations.items():
        # Attempts follow each other by generation: a stale holder that starts late is
        # still the earlier attempt.
        invocations = sorted(started, key=lambda i: (i.token, i.started))
        for token, n in Counter(i.token for i in invocations).items():
            if n > 1:
                yield Violation(
                    "replay-only-after-fault", key, f"invoked {n} times under one lease (generation {token})"
                )
        if invocations[0].policy not in ("safe", "idempotent"):
            continue
        session = index.session_of(key)
        for earlier, later in itertools.pairwise(invocations):
            if earlier.token == later.token:
                continue  # reported above
            if (session, earlier.token) in index.lease_losses:
                continue
            if any(
                f.hits(earlier.pid) and f.started <= later.started and f.ended + grace >= earlier.started
                for f in data.faults
            ):
                continue
            yield Violation(
                "replay-only-after-fault",
                key,
                f"{earlier.policy} call repeated by generation {later.token} (pid {later.pid}), though the "
                f"attempt of generation {earlier.token} (pid {earlier.pid}) met no fault and kept its lease",
            )


def check_manual_calls(data: Dataset, index: _Index) -> Iterable[Violation]:
    for key, started in index.invocations.items():
        if started[0].policy != "manual":
            continue
        invocations = sorted(started, key=lambda i: (i.token, i.started))
        recovered = [e.generation for e in index.of_type(key, "recovery_required")]
        for invocation in invocations:
            if index.committed(key, invocation.token):
                continue
            if not any(generation > invocation.token for generation in recovered):
                yield Violation(
                    "manual-uncertain",
                    key,
                    f"manual call of generation {invocation.token} (pid {invocation.pid}) was cut off before "
                    "its result committed and never surfaced as uncertain",
                )
        retries = [d.t for d in index.decisions.get(key, []) if d.action == "retry"]
        for earlier, later in itertools.pairwise(invocations):
            # Each repeat needs its own retry decision, taken after the earlier call began.
            allowed = next((t for t in retries if earlier.started <= t <= later.started), None)
            if allowed is None:
                yield Violation(
                    "manual-uncertain",
                    key,
                    f"manual call invoked again (generation {later.token}) without a retry decision",
                )
            else:
                retries.remove(allowed)


def check_approvals(data: Dataset, index: _Index) -> Iterable[Violation]:
    asked = {e.key for e in data.events if e.type == "approval_required" and e.key is not None}
    for key in sorted(asked):
        decisions = index.decisions.get(key, [])
        approvals = [d for d in decisions if d.action == "approve"]
        declines = [d for d in decisions if d.action == "decline"]
        invocations = index.invocations.get(key, [])
        row = index.tool_calls.get(key)
        if not approvals and not declines:
            if invocations or index.run_completed(key):
                yield Violation("approvals-honoured", key, "went ahead although nobody answered its approval")
            continue
        if approvals and declines:
            yield Violation("approvals-honoured", key, "both approved and declined")
        if declines:
            if invocations:
                yield Violation("approvals-honoured", key, f"declined, yet invoked {len(invocations)} times")
            if row is not None and row.approved:
                yield Violation("approvals-honoured", key, "declined, yet stored as approved")
            continue
        if row is not None and not row.approved:
            yield Violation("approvals-honoured", key, "approved, but the stored call is not marked approved")
        first = approvals[0].t
        early = [i for i in invocations if i.started < first]
        if early:
            yield Violation("approvals-honoured", key, f"invoked {len(early)} times before it was approved")
        if not invocations and index.run_completed(key) and not index.resolved_by_result(key):
            yield Violation("approvals-honoured", key, "approved, but never invoked")
        if index.policy(key) == "manual":
            retries = sum(1 for d in decisions if d.action == "retry")
            if len(invocations) > len(approvals) + retries:
                yield Violation(
                    "approvals-honoured",
                    key,
                    f"invoked {len(invocations)} times on {len(approvals)} approval(s) and {retries} retries",
                )
    for row in data.tool_calls:
        if row.approved and row.execution_key not in asked:
            yield Violation("approvals-honoured", row.execution_key, "marked approved but never asked for")


@dataclass(frozen=True)
class _Term:
    epoch: int
    supervisor: str
    began: float  # database clock


def check_single_leader(data: Dataset) -> Iterable[Violation]:
    """Leadership is a fenced term. Each term has an epoch of its own, later epochs begin
    later, and a leader's write carries the epoch it took and committed before the next term
    began. Both times are the database's: the store orders a takeover after every write of
    the term it ends, while a log line can be written well after its commit."""
    terms: dict[int, _Term] = {}
    for lead in sorted((e for e in data.leadership if e.kind == "lead"), key=lambda e: e.t):
        if lead.epoch is None or lead.db_time is None:
            yield Violation("single-leader", lead.supervisor, "became leader without an epoch")
        elif lead.epoch in terms:
            yield Violation(
                "single-leader",
                lead.supervisor,
                f"took epoch {lead.epoch}, which supervisor {terms[lead.epoch].supervisor} had taken",
            )
        else:
            terms[lead.epoch] = _Term(lead.epoch, lead.supervisor, lead.db_time)
    ordered = sorted(terms.values(), key=lambda term: term.epoch)
    for earlier, later in itertools.pairwise(ordered):
        if later.began < earlier.began:
            yield Violation(
                "single-leader", later.supervisor, f"epoch {later.epoch} began before epoch {earlier.epoch}"
            )
    reported: set[tuple[str, int]] = set()
    for act in sorted((e for e in data.leadership if e.kind != "lead"), key=lambda e: e.t):
        if act.epoch is None or act.db_time is None:
            yield Violation("single-leader", act.supervisor, "wrote as the leader without an epoch")
            continue
        term = terms.get(act.epoch)
        if term is None or term.supervisor != act.supervisor:
            yield Violation(
                "single-leader",
                act.supervisor,
                f"wrote as the leader of epoch {act.epoch}, which it never took",
            )
            continue
        successor = min((t for t in ordered if t.epoch > act.epoch), key=lambda t: t.began, default=None)
        if (
            successor is not None
            and act.db_time >= successor.began
            and (act.supervisor, act.epoch) not in reported
        ):
            reported.add((act.supervisor, act.epoch))
            yield Violation(
                "single-leader",
                act.supervisor,
                f"wrote as the leader of epoch {act.epoch} {act.db_time - successor.began:.3f} s after "
                f"supervisor {successor.supervisor} had begun epoch {successor.epoch} (database clock)",
            )


def check_ledger(data: Dataset) -> Iterable[Violation]:
    if data.unreadable_ledger_lines:
        yield Violation(
            "ledger-readable", "ledger", f"{data.unreadable_ledger_lines} lines could not be read or matched"
        )


def check_pruned(data: Dataset) -> Iterable[Violation]:
    for session in data.pruned:
        unfinished = sorted(set(session.run_statuses) - PRUNABLE)
        if unfinished:
            yield Violation(
                "prune-finished-only",
                session.session_id,
                f"removed by retention with a run {', '.join(unfinished)}",
            )


def _few(values: list[int], limit: int = 8) -> str:
    shown = ", ".join(map(str, values[:limit]))
    return shown + (f" and {len(values) - limit} more" if len(values) > limit else "")
