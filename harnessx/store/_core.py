"""The dialect-free half of both stores: what a store does around its SQL.

``StoreCore`` is the base of ``SQLiteBackend`` and ``PostgresBackend``. It owns what does
not depend on the database: the owner format (``Owner``), lease bookkeeping (when a lease
certainly still holds, by this process's clock), how rows become records, the reads that
are one named statement and a decoding, and the error texts both dialects raise. Each
backend gives it a few primitives: ``_one`` / ``_all`` / ``_change`` run one named statement
of its dialect's ``sql/<dialect>.sql`` (SQLite on its thread, PostgreSQL on a pooled
connection with retries), plus the statements whose logic is the dialect's own (taking and
renewing leases, listing workers with their liveness).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self

from harnessx._condense import view
from harnessx._errors import (
    ConfigurationError,
    CorruptStateError,
    LeaseLostError,
    SessionBusyError,
    StorageError,
)
from harnessx._messages import to_blocks
from harnessx._state import ToolEntry
from harnessx.store._codec import action_from_row, final_result, loads, run_record
from harnessx.store._deadlines import LeaseDeadlines
from harnessx.store._records import (
    Action,
    ControlRequest,
    LeaderState,
    Lease,
    Owner,
    QueueStats,
    Renewal,
    RunRecord,
    SessionRecord,
    SessionSummary,
    WorkerInfo,
    control_request,
    listed_status,
    with_step_tools,
)
from harnessx.store._scheduling import RunSchedule

__all__ = [
    "Row",
    "StoreCore",
    "final_tool_result",
    "listed_worker",
    "lease_lost",
    "newer_record",
    "no_run",
    "no_session",
    "nothing_to_claim",
    "not_recorded",
    "not_this_sessions_run",
    "request_taken",
    "session_exists",
    "session_held",
    "session_record",
    "session_summary",
    "too_many_records",
    "unfinished_blocks_erasure",
    "unfinished_run",
    "worker_info",
]

Row = Sequence[Any]
"""A row as both dialects' primitives return it: its columns in the statement's order."""


# ------------------------------------------------------------------ error texts


def lease_lost(lease: Lease) -> LeaseLostError:
    """The error of a write refused because ``lease`` no longer holds."""
    return LeaseLostError(
        f"lease on session {lease.session_id} (generation {lease.generation}) no longer holds; "
        "another process took the session over, nothing was written"
    )


def session_exists(session_id: str) -> ConfigurationError:
    return ConfigurationError(f"session {session_id!r} already exists")


def session_held(session_id: str, seconds: float) -> SessionBusyError:
    return SessionBusyError(
        f"session {session_id} is held by another live process until its lease expires "
        f"(in {seconds:.0f} s); wait for it to finish or stop that process"
    )


def request_taken(session_id: str, request_id: str | None) -> SessionBusyError:
    return SessionBusyError(f"session {session_id} already has a run for request_id {request_id!r}")


def unfinished_run(session_id: str) -> SessionBusyError:
    return SessionBusyError(
        f"session {session_id} already has an unfinished run: "
        "resume, cancel or finish it before submitting another"
    )


def nothing_to_claim(session_id: str, where: str) -> ConfigurationError:
    return ConfigurationError(f"no session {session_id!r} in {where}")


def no_run(run_id: str, where: str) -> StorageError:
    return StorageError(f"no run {run_id!r} in {where}")


def unfinished_blocks_erasure(session_id: str, run_id: str) -> SessionBusyError:
    return SessionBusyError(
        f"session {session_id} has an unfinished run {run_id}: cancel it first "
        "(harnessx cancel), or delete with --force / force=True, which cancels it"
    )


def newer_record(session_id: str, where: str, unknown: Sequence[str]) -> ConfigurationError:
    return ConfigurationError(
        f"session {session_id}'s record has columns {where} lacks "
        f"({', '.join(unknown)}): it comes from a newer harnessx; migrate this database "
        "with that harnessx's 'harnessx migrate', then import again"
    )


def no_session(session_id: str, where: str) -> StorageError:
    return StorageError(f"no session {session_id!r} in {where}: check the session id")


def not_this_sessions_run(session_id: str, run_id: str) -> StorageError:
    return StorageError(
        f"session {session_id} has no run {run_id!r}: pass a run id of this session "
        "(result.run_id, or 'harnessx sessions')"
    )


def not_recorded(session_id: str) -> StorageError:
    return StorageError(
        f"flight recording was not enabled for session {session_id}: only runs of sessions "
        "started with AgentRuntime(..., recording=True) can be exported"
    )


def too_many_records(run_id: str, max_records: int) -> StorageError:
    return StorageError(
        f"run {run_id} has more journal records than the record limit ({max_records}): "
        "export it with a larger BundleLimits(max_records=...)"
    )


# ------------------------------------------------------------------ row decoding


def session_record(row: Row) -> SessionRecord:
    sid, agent_ref, fingerprint, owner, generation, expires, control, recording = row
    return SessionRecord(
        sid,
        agent_ref,
        loads(fingerprint, f"session {sid} fingerprint") or {},
        owner,
        int(generation),
        expires,
        control_request(control),
        bool(recording),
    )


def session_summary(row: Row) -> SessionSummary:
    session_id, agent_ref, created_at, run_id, run_status, updated_at, queued = row
    status = None if run_status is None else listed_status(run_status)
    return SessionSummary(session_id, agent_ref, created_at, run_id, status, updated_at, bool(queued))


def final_tool_result(key: str, rows: Sequence[Row]) -> str | None:
    """A tool call's whole final result from its ``tool_call_results`` rows (``None``: no
    such call)."""
    if not rows:
        return None
    bodies = {(key, kind): text for _, _, kind, text in rows if kind is not None}
    return final_result(rows[0][0], rows[0][1], key, bodies)


def listed_worker(row: Row) -> WorkerInfo:
    """A ``list_workers`` row as a worker, with when it stopped and the leases it holds."""
    worker = worker_info(row, alive=None)
    worker.stopped_at, worker.leases = row[8], int(row[9])
    return worker


def worker_info(row: Row, alive: bool | None) -> WorkerInfo:
    """A worker from a row whose first eight columns are the ``workers`` table's."""
    wid, host, pid, agents, concurrency, started, beat, draining = row[:8]
    return WorkerInfo(
        wid,
        host,
        pid,
        loads(agents, f"worker {wid}") or [],
        concurrency,
        started,
        beat,
        bool(draining),
        alive=alive,
    )


# ------------------------------------------------------------------ the core


class StoreCore:
    """What both backends share above their SQL (see the module's docstring)."""

    process_id: str
    lease_seconds: float
    _deadlines: LeaseDeadlines
    _closed: bool
    # Times this process lost its liveness (PostgreSQL: its lock's connection dropped; a
    # SQLite process holds its lock file until it dies). A lease extended by a request sent
    # before a loss may have been taken over since, so the request's time does not count.
    _liveness_losses = 0

    # -------------------------------------------------- the dialect's primitives

    @property
    def _where(self) -> str:
        """The database, as messages name it (never with a secret)."""
        raise NotImplementedError

    async def _one(self, what: str, query: str, *args: Any) -> Row | None:
        """The first row of the named statement (read on its own)."""
        raise NotImplementedError

    async def _all(self, what: str, query: str, *args: Any) -> list[Row]:
        """Every row of the named statement (read on its own)."""
        raise NotImplementedError

    async def _change(self, what: str, query: str, *args: Any) -> None:
        """The named statement, committed on its own."""
        raise NotImplementedError

    async def _take_lease(self, session_id: str, owner: str) -> Lease:
        """Take the session for ``owner`` for ``lease_seconds`` with a generation bump (see
        ``claim``), in one transaction."""
        raise NotImplementedError

    async def _renew_rows(self, leases: list[Lease]) -> list[Row]:
        """Extend the leases that still hold: ``(session_id, owner, generation, control)``
        of each."""
        raise NotImplementedError

    async def _worker_rows(self) -> list[tuple[Row, bool]]:
        """The ``running_workers`` rows, each with whether its process is alive."""
        raise NotImplementedError

    async def _keep_liveness(self) -> None:
        """Before a lease is taken or extended: make sure others cannot see this process as
        dead (PostgreSQL re-takes a lost liveness lock). Nothing to do on SQLite."""

    def _live(self) -> bool:
        """Whether this process's liveness certainly holds right now."""
        return True

    def _forget(self, lease: Lease) -> None:
        """This process no longer holds ``lease`` (released, lost, given up)."""
        self._deadlines.forget(lease)

    # -------------------------------------------------- opening and closing

    if TYPE_CHECKING:

        async def initialize(self) -> None: ...

        async def aclose(self) -> None: ...

        async def tool_calls(self, run_id: str) -> list[ToolEntry]: ...

    @classmethod
    async def connect(cls, *args: Any, **kwargs: Any) -> Self:
        """The store built from these arguments, opened."""
        store = cls(*args, **kwargs)
        await store.initialize()
        return store

    async def __aenter__(self) -> Self:
        await self.initialize()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -------------------------------------------------- leases

    def owner_for(self, holder: str) -> str:
        """Lease owners are ``<process_id>/<holder>``: liveness is per process."""
        return str(Owner(self.process_id, holder))

    def _sent(self) -> tuple[float, int]:
        """When a request that extends leases is sent, and the liveness losses seen so far."""
        return time.monotonic(), self._liveness_losses

    def _extended(self, leases: Sequence[Lease], sent: tuple[float, int]) -> None:
        at, losses = sent
        # Had liveness gone in between, others may have taken the leases already.
        if losses == self._liveness_losses:
            for lease in leases:
                self._deadlines.extended(lease, at)

    def lease_deadline(self, lease: Lease) -> float:
        if not self._live():
            return 0.0  # others may see this process as dead right now
        return self._deadlines.until(lease)

    async def claim(self, session_id: str, holder: str) -> Lease:
        owner = self.owner_for(holder)
        # Never hold a lease while others can see this process as dead.
        await self._keep_liveness()
        sent = self._sent()
        lease = await self._take_lease(session_id, owner)
        self._extended([lease], sent)
        return lease

    async def renew(self, leases: list[Lease]) -> Renewal:
        await self._keep_liveness()
        sent = self._sent()
        rows = await self._renew_rows(leases)
        still = {(sid, owner, int(gen)) for sid, owner, gen, _ in rows}
        held = {
            lease.session_id for lease in leases if (lease.session_id, lease.owner, lease.generation) in still
        }
        self._extended([lease for lease in leases if lease.session_id in held], sent)
        for lease in leases:
            if lease.session_id not in held:
                self._deadlines.forget(lease)
        controls = {sid: request for sid, _, _, control in rows if (request := control_request(control))}
        return Renewal(held=held, lost={lease.session_id for lease in leases} - held, controls=controls)

    async def release(self, lease: Lease) -> None:
        self._forget(lease)
        await self._change(
            "releasing a lease", "release_lease", lease.session_id, lease.owner, lease.generation
        )

    async def pending_controls(self) -> dict[str, ControlRequest]:
        low, high = Owner.range_of(self.process_id)
        rows = await self._all("reading control requests", "pending_controls", low, high)
        return {str(sid): request for sid, control in rows if (request := control_request(control))}

    # -------------------------------------------------- sessions

    async def get_session(self, session_id: str) -> SessionRecord | None:
        row = await self._one("reading a session", "get_session", session_id)
        return session_record(row) if row is not None else None

    async def recent_sessions(self, limit: int) -> list[SessionSummary]:
        return [session_summary(row) for row in await self._all("listing sessions", "recent_sessions", limit)]

    async def session_summary(self, session_id: str) -> SessionSummary | None:
        row = await self._one("reading a session", "session_summary", session_id)
        return None if row is None else session_summary(row)

    # -------------------------------------------------- runs

    async def _with_step_tools(self, record: RunRecord) -> RunRecord:
        """``record`` with its current step's tool calls, when it stands in one. A call that
        does not decode leaves them out: a record is still read (``load_state`` refuses the run)."""
        if not record.in_tools_step:
            return record
        try:
            entries = await self.tool_calls(record.id)
        except CorruptStateError:
            return record
        return with_step_tools(record, entries)

    async def _with_conversation(self, record: RunRecord) -> RunRecord:
        """``record`` with the run's conversation as it stood at its last message (content
        blocks, as shown to the model). One that does not decode is left out, and the
        record says why (``problem``): a record is still read."""
        rows = await self._all("reading a run's conversation", "run_messages", record.session_id, record.id)
        try:
            messages = [loads(body, f"message of session {record.session_id}") for (body,) in rows]
            record.conversation = to_blocks(view(messages))
        except (CorruptStateError, AttributeError, TypeError, ValueError) as exc:
            record.problem = record.problem or str(exc)
        return record

    async def get_run(self, run_id: str, *, messages: bool = True) -> RunRecord | None:
        row = await self._one("reading a run", "get_run", run_id)
        if row is None:
            return None
        record = await self._with_step_tools(run_record(row))
        return await self._with_conversation(record) if messages else record

    async def find_run(self, session_id: str, request_id: str) -> RunRecord | None:
        row = await self._one("finding a run", "find_run", session_id, request_id)
        return run_record(row) if row else None

    async def latest_run(self, session_id: str, *, messages: bool = True) -> RunRecord | None:
        row = await self._one("reading the latest run", "latest_run", session_id)
        if row is None:
            return None
        record = await self._with_step_tools(run_record(row))
        return await self._with_conversation(record) if messages else record

    async def count_journal(self, run_id: str, kind: str, step_id: str) -> int:
        row = await self._one("counting journal records", "count_journal", run_id, kind, step_id)
        assert row is not None  # a count has a row
        return int(row[0])

    # -------------------------------------------------- the pool

    async def running_workers(self) -> list[WorkerInfo]:
        return [worker_info(row, alive) for row, alive in await self._worker_rows()]

    async def queue_stats(self) -> QueueStats:
        rows = await self._all("reading queue stats", "queue_stats")
        return QueueStats({ref: (int(count), float(oldest)) for ref, count, oldest in rows})

    async def schedule_of(self, run_id: str) -> RunSchedule | None:
        row = await self._one("reading a run's schedule", "run_schedule", run_id)
        if row is None:
            return None
        rid, priority, key, tenant, queued_at, not_before, claimed_at = row
        return RunSchedule(str(rid), int(priority), key, str(tenant), queued_at, not_before, claimed_at)

    # -------------------------------------------------- the console's reads

    async def count_runs(self) -> dict[str, int]:
        rows = await self._all("counting runs", "count_runs")
        return {str(status): int(count) for status, count in rows}

    async def list_workers(self, limit: int = 200) -> list[WorkerInfo]:
        return [listed_worker(row) for row in await self._all("listing workers", "list_workers", limit)]

    async def leader_states(self) -> list[LeaderState]:
        return [LeaderState(*row) for row in await self._all("reading leadership", "leadership_state")]

    async def run_actions(self, run_id: str, limit: int = 200) -> list[Action]:
        return [
            action_from_row(row) for row in await self._all("reading actions", "run_actions", run_id, limit)
        ]

    async def recent_actions(self, limit: int = 100) -> list[Action]:
        return [action_from_row(row) for row in await self._all("reading actions", "recent_actions", limit)]
