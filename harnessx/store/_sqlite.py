"""``SQLiteBackend``: the embedded store for one host.

All SQLite calls run on the backend's own single thread, so the event loop never blocks
on disk. The database is in WAL mode with ``synchronous=FULL``: a committed checkpoint
survives a power cut. Several processes on one host may share the file; writers take
``BEGIN IMMEDIATE`` and wait on SQLite's busy timeout.

Liveness: each backend instance holds an exclusive ``flock`` on
``<db>.owners/<process_id>.lock`` for as long as it is open. The kernel drops the lock
when the process dies, however it dies, so a claimer can tell a crashed holder from a
live one at once instead of waiting for its lease to expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from harnessx._errors import (
    ConfigurationError,
    CorruptStateError,
)
from harnessx._events import RunEvent
from harnessx._journal import JournalRecord
from harnessx._results import RunStatus
from harnessx._runlog import event_position
from harnessx._state import UNCHANGED, Delta, RunState
from harnessx.store._codec import (
    Answers,
    answers_of,
    decode_state,
    dumps,
    event_data,
    events_from_rows,
    fill_calls,
    has_result_refs,
    journal_record_from_row,
    loads,
    result_keys,
    run_record,
    run_values,
    tool_entry_bodies,
    tool_entry_values,
)
from harnessx.store._core import (
    Row,
    final_tool_result,
    lease_lost,
    no_run,
    no_session,
    not_recorded,
    not_this_sessions_run,
    nothing_to_claim,
    request_taken,
    session_exists,
    session_held,
    session_record,
    too_many_records,
    unfinished_run,
    worker_info,
)
from harnessx.store._deadlines import LeaseDeadlines
from harnessx.store._queries import load_queries
from harnessx.store._records import (
    ControlRequest,
    IncidentSnapshot,
    Leadership,
    Lease,
    LoadedRun,
    NewSession,
    Orphan,
    Owner,
    PoolScan,
    Recovery,
    RunRecord,
    StuckRun,
    WorkerInfo,
    leadership_lost,
    listed_status,
)
from harnessx.store._scheduling import Schedule
from harnessx.store._sqlite_bell import WorkBell, ring
from harnessx.store._sqlite_console import SQLiteConsole
from harnessx.store._sqlite_file import SQLiteFile
from harnessx.store._sqlite_lifecycle import SQLiteLifecycle
from harnessx.store._sqlite_scheduling import SQLiteScheduling
from harnessx.store._sqlite_stops import StopPoller
from harnessx.store._waiters import RunWaiters

__all__ = ["SQLiteBackend"]

T = TypeVar("T")
Q = load_queries("sqlite")
# How often a process holding leases looks for pause/cancel requests (wait_for_control).
_CONTROL_POLL = 0.25


class SQLiteBackend(SQLiteConsole, SQLiteScheduling, SQLiteLifecycle, SQLiteFile):
    """Durable state in one SQLite file. Use as ``async with SQLiteBackend(path) as backend``."""

    dialect = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str] = ".agent_sessions/runtime.sqlite3",
        *,
        auto_migrate: bool = True,
        lease_seconds: float = 30.0,
        busy_timeout: float = 30.0,
        synchronous: str = "FULL",
        read_only: bool = False,
    ) -> None:
        if str(path) == ":memory:":
            raise ConfigurationError(
                "SQLiteBackend needs a file path: an in-memory database cannot be resumed after a crash"
            )
        if lease_seconds <= 0:
            raise ConfigurationError("lease_seconds must be positive")
        if synchronous.upper() not in ("FULL", "EXTRA", "NORMAL"):
            raise ConfigurationError("synchronous must be FULL, EXTRA or NORMAL")
        self.path = Path(path)
        self.auto_migrate = auto_migrate
        self.lease_seconds = lease_seconds
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous.upper()
        # Read-only: for inspecting (`harnessx status`/`events`): opens an existing database
        # without creating, migrating or locking anything, even on a read-only file system.
        self.read_only = read_only
        if read_only:
            self.auto_migrate = False
        self.process_id = uuid.uuid4().hex
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._user_conn: sqlite3.Connection | None = None
        self._liveness: int | None = None
        self._closed = False
        self._waiters = RunWaiters()
        self._stops = StopPoller(
            lambda runs: self._all("looking at the runs waited on", "stopped_runs", json.dumps(runs)),
            self._waiters,
        )
        self._leaderships: dict[str, tuple[int, Leadership]] = {}  # role -> (locked fd, term)
        self._deadlines = LeaseDeadlines(lease_seconds)
        self._bell: WorkBell | None = None  # listening once this process waits for work

    def __repr__(self) -> str:
        return f"SQLiteBackend({str(self.path)!r})"

    @property
    def _where(self) -> str:
        return str(self.path)

    # ------------------------------------------------------------ lifecycle

    # ------------------------------------------------------------ execution

    # ------------------------------------------------------------- sessions

    async def create_session(
        self, session_id: str, agent_ref: str | None, fingerprint: dict[str, Any], *, recording: bool = False
    ) -> None:
        def body(conn: sqlite3.Connection) -> None:
            values = (session_id, agent_ref, dumps(fingerprint), time.time(), int(recording))
            try:
                conn.execute(Q["insert_session"], values)
            except sqlite3.IntegrityError as exc:
                raise session_exists(session_id) from exc

        await self._call(self._write, body)

    # --------------------------------------------------------------- leases

    async def _take_lease(self, session_id: str, owner: str) -> Lease:
        def body(conn: sqlite3.Connection) -> Lease:
            row = conn.execute(Q["get_session"], (session_id,)).fetchone()
            if row is None:
                raise nothing_to_claim(session_id, self._where)
            current, expires = row[3], row[5]
            now = time.time()
            held = current and current != owner and expires is not None and expires > now
            if held and self._owner_alive(current):
                raise session_held(session_id, expires - now)
            (generation,) = conn.execute(
                Q["take_lease"], (owner, now + self.lease_seconds, session_id)
            ).fetchone()
            return Lease(session_id, owner, int(generation))

        lease: Lease = await self._call(self._write, body)
        return lease

    async def _renew_rows(self, leases: list[Lease]) -> list[Row]:
        named = dumps([[lease.session_id, lease.owner, lease.generation] for lease in leases])

        def body(conn: sqlite3.Connection) -> list[Row]:
            return list(conn.execute(Q["renew_leases"], (time.time() + self.lease_seconds, named)).fetchall())

        return await self._call(self._write, body)

    async def process_alive(self, owner: str) -> bool:
        return await self._call(lambda conn: self._owner_alive(owner))

    def _owner_alive(self, owner: str) -> bool:
        return self._process_alive(Owner.process_of(owner))

    def _process_alive(self, process_id: str) -> bool:
        if process_id == self.process_id:
            return not self._closed
        path = self.owners_dir / f"{process_id}.lock"
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        # We got the lock: its owner is gone. Tidy its file.
        path.unlink(missing_ok=True)
        return False

    # ----------------------------------------------------------------- runs

    def _fence(
        self, conn: sqlite3.Connection, lease: Lease, new_messages: int, status: str | None = None
    ) -> int:
        """Fence a write by ``lease``; ``status``: the run status it writes (one other than
        running clears the session's pause/cancel request, but for a cancel on a run that
        pauses or waits)."""
        row = conn.execute(
            Q["fence"], (new_messages, status, lease.session_id, lease.owner, lease.generation, time.time())
        ).fetchone()
        if row is None:
            raise lease_lost(lease)
        return int(row[0])

    def _append(
        self,
        conn: sqlite3.Connection,
        lease: Lease,
        state: RunState,
        delta: Delta,
        events: list[RunEvent],
        journal: Sequence[JournalRecord],
    ) -> None:
        now = time.time()
        values = run_values(state, delta)
        count = self._fence(conn, lease, len(delta.messages), values[0])
        first = count - len(delta.messages) + 1
        for offset, message in enumerate(delta.messages):
            conn.execute(
                Q["insert_message"],
                (state.session_id, first + offset, state.run_id, dumps(message), lease.generation),
            )
        for entry in delta.tools:
            conn.execute(Q["upsert_tool_call"], tool_entry_values(entry, state.run_id, lease.generation, now))
            for kind, body in tool_entry_bodies(entry):
                conn.execute(Q["upsert_tool_result"], (entry.execution_key, kind, state.run_id, body))
        answers = answers_of(delta.messages, first, values)
        last_seq = self._insert_events(conn, lease, events, now, result_keys(delta.tools), answers)
        self._insert_journal(conn, lease, state.run_id, journal)
        if delta.run.status is UNCHANGED and values[0] == RunStatus.RUNNING.value:
            # Only the holder of the lease writes a driven run's status, so the row says
            # running too, and stays in or out of the queue as it is.
            progress = (*values[1:], last_seq, lease.generation, now, state.run_id)
            conn.execute(Q["update_run_progress"], progress)
        else:
            conn.execute(
                Q["update_run"],
                (*values, last_seq, lease.generation, now, values[0], state.run_id),
            )

    def _insert_events(
        self,
        conn: sqlite3.Connection,
        lease: Lease,
        events: list[RunEvent],
        now: float,
        keys: Mapping[str, str] | None = None,
        answers: Answers | None = None,
    ) -> int:
        last = 0
        for event in events:
            seq = int(event.cursor or 0)
            conn.execute(
                Q["insert_event"],
                (
                    event.run_id,
                    seq,
                    event.event_id,
                    event.type.value,
                    event.step_id,
                    event.attempt_id,
                    event_data(event, keys, answers),
                    lease.generation,
                    now,
                ),
            )
            last = max(last, seq)
        return last

    def _insert_journal(
        self, conn: sqlite3.Connection, lease: Lease, run_id: str, journal: Sequence[JournalRecord]
    ) -> None:
        if not journal:
            return
        # The lease holder is the run's only writer, inside this write transaction.
        (last,) = conn.execute(Q["journal_tail"], (run_id,)).fetchone()
        for seq, record in enumerate(journal, int(last) + 1):
            conn.execute(
                Q["insert_journal"],
                (
                    run_id,
                    seq,
                    record.id,
                    record.kind,
                    record.step_id,
                    record.attempt_id,
                    record.execution_key,
                    record.recorded_at,
                    dumps(record.payload),
                    lease.generation,
                ),
            )

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
        def body(conn: sqlite3.Connection) -> None:
            self._insert_run(conn, lease, run_id, request_id, message, delta, queued, journal, schedule)

        await self._call(self._write, body)
        if queued and not (schedule and schedule.wait):  # a delayed run waits for a poll
            self._ring()
        self._notify(run_id)

    def _insert_run(
        self,
        conn: sqlite3.Connection,
        lease: Lease,
        run_id: str,
        request_id: str | None,
        message: str,
        delta: Delta,
        queued: bool,
        journal: Sequence[JournalRecord],
        schedule: Schedule | None = None,
    ) -> None:
        session_id = lease.session_id
        plan = (schedule or Schedule()) if queued else Schedule()
        now = time.time()
        history_length = self._fence(conn, lease, 0)
        try:
            conn.execute(
                Q["insert_run"],
                (
                    run_id,
                    session_id,
                    request_id,
                    message,
                    history_length,
                    lease.generation,
                    now,
                    now,
                    now if queued else None,
                    plan.priority,
                    plan.concurrency_key,
                    plan.group,
                    now + plan.wait if plan.wait else None,
                ),
            )
        except sqlite3.IntegrityError as exc:
            raise _run_conflict(exc, session_id, request_id) from exc
        fresh = RunState(session_id=session_id, run_id=run_id, history_length=history_length)
        self._append(conn, lease, fresh, delta, delta.events, journal)
        if queued:
            conn.execute(Q["release_lease"], (session_id, lease.owner, lease.generation))

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
        owner = self.owner_for(holder)

        def body(conn: sqlite3.Connection) -> Lease:
            now = time.time()
            values = (session.id, session.agent_ref, dumps(session.fingerprint), now, int(session.recording))
            try:
                conn.execute(Q["insert_session"], values)
            except sqlite3.IntegrityError as exc:
                raise session_exists(session.id) from exc
            (generation,) = conn.execute(
                Q["take_lease"], (owner, now + self.lease_seconds, session.id)
            ).fetchone()
            lease = Lease(session.id, owner, int(generation))
            self._insert_run(conn, lease, run_id, request_id, message, delta, queued, journal, schedule)
            return lease

        sent = self._sent()
        lease: Lease = await self._call(self._write, body)
        if not queued:
            self._extended([lease], sent)
        elif not (schedule and schedule.wait):  # a delayed run waits for a poll
            self._ring()
        self._notify(run_id)
        return lease

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
        events = [*provisional, *delta.events]

        def body(conn: sqlite3.Connection) -> None:
            self._append(conn, lease, state, delta, events, journal)
            if release:
                conn.execute(Q["release_lease"], (lease.session_id, lease.owner, lease.generation))

        await self._call(self._write, body)
        if release:
            self._deadlines.forget(lease)
        if events:
            self._notify(state.run_id)

    async def append_events(
        self, lease: Lease, run_id: str, events: list[RunEvent], journal: Sequence[JournalRecord] = ()
    ) -> None:
        def body(conn: sqlite3.Connection) -> None:
            now = time.time()
            self._fence(conn, lease, 0)
            last = self._insert_events(conn, lease, events, now)
            self._insert_journal(conn, lease, run_id, journal)
            conn.execute(Q["set_event_count"], (last, now, run_id, last))

        if events:
            await self._call(self._write, body)
            self._notify(run_id)

    def _notify(self, run_id: str) -> None:
        self._waiters.wake(run_id)

    async def wait_for_events(self, run_id: str, max_wait: float) -> None:
        """Return when this process commits events for ``run_id``, or after ``timeout``
        (other processes' commits are seen by polling: SQLite has no notifications)."""
        async with self._waiters.waiting(run_id) as waiter:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.wait(), max_wait)

    async def wait_until_stopped(self, run_id: str, max_wait: float) -> RunRecord | None:
        """See the protocol and ``StopPoller``: one statement per ``max_wait`` looks at every
        run this process waits on; this process's own commits wake a waiter at once."""
        return await self._stops.until_stopped(run_id, max_wait, lambda: self.get_run(run_id, messages=False))

    async def aclose(self) -> None:
        await self._stops.aclose()
        if self._bell is not None:
            self._bell.close()
            self._bell = None  # opened again, the store is a new process with a new bell
        await super().aclose()

    async def load_state(self, run_id: str) -> RunState:
        return await self._call(self._reading(lambda conn: self._load(conn, run_id)))

    async def load_run(self, run_id: str) -> LoadedRun | None:
        def read(conn: sqlite3.Connection) -> LoadedRun | None:
            row = conn.execute(Q["get_run"], (run_id,)).fetchone()
            if row is None:
                return None
            record = run_record(row)
            session = conn.execute(Q["get_session"], (record.session_id,)).fetchone()
            if session is None:
                return None
            kept = tuple(str(bucket) for (bucket,) in conn.execute(Q["run_rate_holds"], (run_id,)))
            try:
                return LoadedRun(record, session_record(session), self._load(conn, run_id), rate_holds=kept)
            except CorruptStateError as exc:
                return LoadedRun(record, session_record(session), None, exc, kept)

        return await self._call(self._reading(read))

    def _load(self, conn: sqlite3.Connection, run_id: str) -> RunState:
        row = conn.execute(Q["get_run"], (run_id,)).fetchone()
        if row is None:
            raise no_run(run_id, self._where)
        record = run_record(row)
        bodies = [body for (body,) in conn.execute(Q["session_messages"], (record.session_id,))]
        tools = conn.execute(Q["run_tool_calls"], (run_id,)).fetchall()
        results = {}
        if has_result_refs(tools):
            results = {
                (key, kind): body for key, kind, body in conn.execute(Q["run_tool_results"], (run_id,))
            }
        return decode_state(record, bodies, tools, results)

    @staticmethod
    def _reading(body: Callable[[sqlite3.Connection], T]) -> Callable[[sqlite3.Connection], T]:
        """``body`` in one read transaction, so everything it reads is from the same commit."""

        def read(conn: sqlite3.Connection) -> T:
            conn.execute("BEGIN")
            try:
                return body(conn)
            finally:
                conn.execute("COMMIT")

        return read

    # ------------------------------------------------------ flight recorder

    async def incident_snapshot(
        self, session_id: str, run_id: str, *, max_records: int = 100_000
    ) -> IncidentSnapshot:
        def body(conn: sqlite3.Connection) -> IncidentSnapshot:
            row = conn.execute(Q["get_session"], (session_id,)).fetchone()
            if row is None:
                raise no_session(session_id, self._where)
            session = session_record(row)
            run = conn.execute(Q["get_run"], (run_id,)).fetchone()
            if run is None or run_record(run).session_id != session_id:
                raise not_this_sessions_run(session_id, run_id)
            if not session.recording:
                raise not_recorded(session_id)
            rows = conn.execute(Q["read_journal"], (run_id, max_records + 1)).fetchall()
            if len(rows) > max_records:
                raise too_many_records(run_id, max_records)
            state = self._load(conn, run_id)
            records = [journal_record_from_row(r, session_id, run_id) for r in rows]
            return IncidentSnapshot(state, records, session)

        return await self._call(self._reading(body))

    # ----------------------------------------------------------------- pool

    async def requeue(self, lease: Lease, run_id: str) -> None:
        def body(conn: sqlite3.Connection) -> None:
            self._fence(conn, lease, 0)
            conn.execute(Q["requeue_run"], (time.time(), run_id))

        await self._call(self._write, body)
        self._ring()

    async def defer_start(
        self, lease: Lease, run_id: str, *, attempts: int, retry_in: float, events: list[RunEvent]
    ) -> None:
        def body(conn: sqlite3.Connection) -> None:
            now = time.time()
            self._fence(conn, lease, 0)
            last = self._append_numbered(conn, lease, run_id, events, now)
            conn.execute(Q["defer_start"], (attempts, now, now + retry_in, last, now, run_id))

        await self._call(self._write, body)
        self._notify(run_id)

    async def clear_start_attempts(self, lease: Lease, run_id: str) -> None:
        def body(conn: sqlite3.Connection) -> None:
            self._fence(conn, lease, 0)
            conn.execute(Q["clear_start_attempts"], (run_id,))

        await self._call(self._write, body)

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
        def body(conn: sqlite3.Connection) -> None:
            now = time.time()
            self._fence(conn, lease, 0, status)
            last = self._append_numbered(conn, lease, run_id, events, now)
            values = (
                status,
                stop_reason,
                dumps(error) if error else None,
                last,
                lease.generation,
                now,
                run_id,
            )
            conn.execute(Q["end_run"], values)

        await self._call(self._write, body)
        self._notify(run_id)

    def _append_numbered(
        self, conn: sqlite3.Connection, lease: Lease, run_id: str, events: list[RunEvent], now: float
    ) -> int:
        """Insert ``events`` after the run's last one (numbering them); the new last seq."""
        (last,) = conn.execute(Q["last_event_seq"], (run_id,)).fetchone()
        for offset, event in enumerate(events, 1):
            event.cursor = str(int(last) + offset)
        return max(int(last), self._insert_events(conn, lease, events, now))

    async def wait_for_work(self, max_wait: float) -> bool:
        # SQLite cannot notify other processes: the processes that queue runs ring this one's
        # bell (_sqlite_bell), and the claim loop's back-off polls for what they miss.
        if self._bell is None:
            self._bell = WorkBell(self.process_id)
        return await self._bell.wait(max_wait)

    def _ring(self) -> None:
        """Wake the stores of this database waiting for work (after a commit that queued a run)."""
        ring(self.owners_dir)

    async def register_worker(self, worker: WorkerInfo) -> None:
        now = time.time()
        values = (worker.id, worker.host, worker.pid, dumps(worker.agents), worker.concurrency, now, now)
        await self._call(self._write, lambda conn: conn.execute(Q["register_worker"], values))

    async def worker_heartbeat(self, worker_id: str, *, draining: bool) -> None:
        values = (time.time(), 1 if draining else 0, worker_id)
        await self._call(self._write, lambda conn: conn.execute(Q["worker_heartbeat"], values))

    async def stop_worker(self, worker_id: str) -> None:
        await self._call(self._write, lambda conn: conn.execute(Q["stop_worker"], (time.time(), worker_id)))

    async def _worker_rows(self) -> list[tuple[Row, bool]]:
        def body(conn: sqlite3.Connection) -> list[tuple[Row, bool]]:
            # One statement; then each worker's liveness lock file (no SQL).
            rows = conn.execute(Q["running_workers"]).fetchall()
            return [(row, self._process_alive(str(row[0]))) for row in rows]

        return await self._call(body)

    async def find_orphans(self) -> list[Orphan]:
        now = time.time()
        rows = await self._call(lambda conn: conn.execute(Q["leased_sessions"]).fetchall())
        return self._orphans(
            (sid, owner, gen, ref, expires is not None and expires <= now)
            for sid, owner, gen, expires, ref in rows
        )

    def _orphans(self, leased: Iterable[Sequence[Any]]) -> list[Orphan]:
        """Of the ``(session, owner, generation, agent_ref, expired)`` leases, those whose
        holder lost its liveness lock ('dead') or that expired: one lock probe per process."""
        alive: dict[str, bool] = {}
        found = []
        for session_id, owner, generation, agent_ref, expired in leased:
            process = Owner.process_of(owner)
            if process not in alive:
                alive[process] = self._process_alive(process)
            if not alive[process]:
                found.append(Orphan(session_id, owner, int(generation), agent_ref, "dead"))
            elif expired:
                found.append(Orphan(session_id, owner, int(generation), agent_ref, "expired"))
        return found

    def _check_term(self, conn: sqlite3.Connection, term: Leadership) -> None:
        """Inside a leader's write transaction: refuse it unless ``term`` is still the latest."""
        if conn.execute(Q["term_holds"], (term.role, term.epoch, term.holder)).fetchone() is None:
            raise leadership_lost(term)

    async def recover_orphan(self, term: Leadership, orphan: Orphan, *, requeue: bool) -> Recovery | None:
        def body(conn: sqlite3.Connection) -> Recovery | None:
            self._check_term(conn, term)
            # Writers are serialized, so this is before any later term's start (its clock).
            at = time.time()
            dropped = conn.execute(
                Q["drop_orphan_lease"], (orphan.session_id, orphan.owner, orphan.generation)
            ).fetchone()
            if dropped is None:
                return None  # someone else got there first, or the holder renewed it
            if not requeue:
                return Recovery(None, at)
            row = conn.execute(Q["requeue_session"], (at, orphan.session_id, orphan.generation)).fetchone()
            return Recovery(str(row[0]) if row else None, at)

        recovery: Recovery | None = await self._call(self._write, body)
        if recovery is not None and recovery.run_id is not None:
            self._ring()
        return recovery

    async def mark_worker_dead(self, term: Leadership, worker_id: str) -> float | None:
        def body(conn: sqlite3.Connection) -> float | None:
            self._check_term(conn, term)
            at = time.time()
            marked = conn.execute(Q["stop_worker"], (at, worker_id)).rowcount
            return at if marked else None

        return await self._call(self._write, body)

    async def try_leadership(self, role: str) -> Leadership | None:
        """Hold ``role`` by a lock file beside the database (it dies with the process), then
        take the role's next epoch in a write transaction."""
        if role in self._leaderships:
            return self._leaderships[role][1]
        path = self.path.with_name(f"{self.path.name}.{role}.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            # The time is read inside the transaction, so after every earlier leader write.
            epoch, since = await self._call(
                self._write,
                lambda conn: conn.execute(
                    Q["take_leadership"], (role, self.process_id, time.time())
                ).fetchone(),
            )
        except BaseException:
            os.close(fd)
            raise
        term = Leadership(role, self.process_id, int(epoch), float(since))
        self._leaderships[role] = (fd, term)
        return term

    async def holds_leadership(self, term: Leadership) -> bool:
        held = self._leaderships.get(term.role)
        if held is None or held[1] != term:
            return False
        # The file lock is only lost with the process, but the file can be removed under it
        # (and a new one locked by another process): the stored epoch tells.
        row = await self._call(lambda conn: conn.execute(Q["leadership_term"], (term.role,)).fetchone())
        if row is not None and (int(row[0]), str(row[1])) == (term.epoch, term.holder):
            return True
        await self.release_leadership(term)
        return False

    async def pool_scan(self, term: Leadership, tracked: Sequence[str]) -> PoolScan:
        held = self._leaderships.get(term.role)
        if held is None or held[1] != term:
            return PoolScan(holds=False)
        args = (term.role, time.time(), dumps(list(tracked)))
        latest, leased, workers, runs = await self._call(
            lambda conn: conn.execute(Q["pool_scan"], args).fetchone()
        )
        latest = loads(latest, "the leadership term") if latest is not None else None
        if latest is None or (int(latest[0]), str(latest[1])) != (term.epoch, term.holder):
            await self.release_leadership(term)  # as holds_leadership: the stored epoch tells
            return PoolScan(holds=False)
        return PoolScan(
            holds=True,
            orphans=self._orphans(loads(leased, "the leased sessions")),
            workers=[
                worker_info(row, self._process_alive(str(row[0]))) for row in loads(workers, "the workers")
            ],
            tracked={
                run_id: (status, bool(leased_again))
                for run_id, status, leased_again in loads(runs, "the tracked runs")
            },
        )

    async def wait_for_control(self, max_wait: float) -> bool:
        # SQLite cannot notify other processes: look for requests on this process's leases.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait
        while (left := deadline - loop.time()) > 0:
            await asyncio.sleep(min(_CONTROL_POLL, left))
            if deadline - loop.time() <= 0:
                break  # the caller's renewal is due: it takes any request, no look needed
            if await self.pending_controls():
                return True
        return False

    async def set_control(self, session_id: str, control: ControlRequest) -> bool:
        row = await self._call(
            self._write, lambda conn: conn.execute(Q["set_control"], (control, session_id)).fetchone()
        )
        return row is not None

    async def release_leadership(self, term: Leadership) -> None:
        held = self._leaderships.get(term.role)
        if held is not None and held[1] == term:
            del self._leaderships[term.role]
            os.close(held[0])

    async def stuck_runs(self, older_than: float, limit: int = 100) -> list[StuckRun]:
        cutoff = time.time() - older_than
        rows = await self._call(lambda conn: conn.execute(Q["stuck_runs"], (cutoff, limit)).fetchall())
        return [
            StuckRun(run_id, session_id, listed_status(status), at) for run_id, session_id, status, at in rows
        ]

    async def read_events(self, run_id: str, after: int | str = 0, limit: int = 500) -> list[RunEvent]:
        after = event_position(after)

        def body(conn: sqlite3.Connection) -> list[RunEvent]:
            # One statement, so one snapshot: the results events refer to are joined in.
            rows = conn.execute(Q["read_events"], (run_id, after, limit)).fetchall()
            events, missing = events_from_rows(rows, after)
            if missing:  # stored before 0.2: fill the calls in from the run's tool calls
                fill_calls(events, missing, conn.execute(Q["run_tool_calls"], (run_id,)).fetchall())
            return events

        return await self._call(body)

    def _final_result(self, conn: sqlite3.Connection, key: str) -> str | None:
        return final_tool_result(key, conn.execute(Q["tool_call_results"], (key,)).fetchall())

    async def tool_result(self, session_id: str, tool_call_id: str) -> str | None:
        """The whole final result of the session's latest answered call with this id."""

        def body(conn: sqlite3.Connection) -> str | None:
            row = conn.execute(Q["session_tool_call"], (session_id, tool_call_id)).fetchone()
            return self._final_result(conn, str(row[0])) if row else None

        return await self._call(self._reading(body))


def _run_conflict(exc: sqlite3.IntegrityError, session_id: str, request_id: str | None) -> Exception:
    if "request_id" in str(exc):
        return request_taken(session_id, request_id)
    return unfinished_run(session_id)
