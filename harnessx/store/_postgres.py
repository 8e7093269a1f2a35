"""``PostgresBackend``: the store for a pool of processes spread over several machines.

Same protocol and semantics as ``SQLiteBackend``; what differs is where the work happens:

- **Checkpoints in one statement.** ``create_run``, ``commit`` and ``append_events`` are
  one execution of the ``checkpoint`` query, a data-modifying ``WITH`` whose every write
  joins its fence (the UPDATE of the session row): it checks the lease and writes every
  row in one transaction and one round trip. When the lease no longer holds it writes
  nothing and fails with SQLSTATE ``HX001`` (here ``LeaseLostError``). A running run's
  phase and event count alone go to the session row (schema 3); the first such
  checkpoint after the lease changed hands is refused (``HX003``, nothing written) and
  sent again whole, which writes the run row too.
- **Leases by the database clock**, so hosts with skewed clocks agree on expiry. The pool
  claims queued runs with one ``FOR UPDATE SKIP LOCKED`` statement.
- **Liveness by advisory lock.** Each instance holds a session-level advisory lock keyed
  to its ``process_id`` on a connection of its own for as long as it is open. When the
  process dies, even by SIGKILL, the server drops the connection and the lock at once, so
  ``claim``, ``process_alive`` and ``find_orphans`` can tell a crashed holder from a live
  one without waiting for its lease to expire. Leadership (``try_leadership``) is another
  advisory lock on that connection, taken in one statement with the role's next epoch
  (table ``leadership``); every write the leader makes as leader is fenced by that epoch.
- **Notifications.** A checkpoint that adds events fires one ``pg_notify`` and queueing a
  run fires another, inside the committing transaction; ``wait_for_events`` and
  ``wait_for_work`` listen on a connection of their own, on each channel only once
  something waits on it (``_pg_notifications``), and fall back to plain waiting (the
  caller polls) whenever it is down. A notification is only ever a hint.
- **Transient errors are retried** (tenacity, exponential back-off). Every operation is
  safe to repeat, even when a reply was lost after the server committed: reads trivially;
  a checkpoint carries a unique id the statement applies at most once; a queue claim finds
  what its lost attempt took; re-claiming one's own lease only moves it to a newer
  generation. asyncpg errors become harnessx errors in one place, ``_translated``, with
  the original as ``__cause__``.
- **No password in any message.** Only the redacted DSN (``user:***@host``) is shown, and
  driver messages are scrubbed of the password before they are quoted.

The liveness and listener connections need session semantics: point the DSN at the
server or at a session-mode pooler, not at PgBouncer in transaction mode.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import uuid
from collections.abc import Sequence
from typing import Any, TypeVar

from harnessx._errors import (
    ConfigurationError,
    CorruptStateError,
)
from harnessx._events import RunEvent
from harnessx._journal import JournalRecord
from harnessx._results import RunStatus
from harnessx._runlog import event_position
from harnessx._state import Delta, RunState, ToolEntry
from harnessx.store._codec import (
    decode_state,
    dumps,
    event_data,
    events_from_rows,
    fill_calls,
    has_result_refs,
    journal_record_from_row,
    loads,
    run_record,
    run_values,
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
    session_exists,
    session_held,
    session_record,
    too_many_records,
    worker_info,
)
from harnessx.store._deadlines import LeaseDeadlines
from harnessx.store._pg_checkpoint import (
    PROGRESS_NOT_HELD,
    SESSION_EXISTS,
    Checkpoint,
    checkpoint,
    group,
    journal_columns,
)
from harnessx.store._pg_console import PostgresConsole
from harnessx.store._pg_driver import (
    CONNECT_TIMEOUT,
    DRIVER_ERRORS,
    TRANSIENT,
    asyncpg,
    close_quietly,
)
from harnessx.store._pg_dsn import check_dsn, redact_dsn
from harnessx.store._pg_execution import DEFAULT_SCHEMA, runtime_grants
from harnessx.store._pg_group_commit import GroupCommit
from harnessx.store._pg_lifecycle import PostgresLifecycle
from harnessx.store._pg_liveness import PostgresLiveness
from harnessx.store._pg_notifications import Interest, Notifications
from harnessx.store._pg_partitions import PostgresPartitions
from harnessx.store._pg_scheduling import PostgresScheduling, rate_reservation
from harnessx.store._pg_schema import check_schema_name
from harnessx.store._pg_types import Connection, Pool
from harnessx.store._queries import load_queries
from harnessx.store._records import (
    ControlRequest,
    IncidentSnapshot,
    Leadership,
    Lease,
    LoadedRun,
    NewSession,
    Orphan,
    PoolScan,
    Recovery,
    RunRecord,
    StuckRun,
    WorkerInfo,
    leadership_lost,
    listed_status,
)
from harnessx.store._scheduling import Claims, RateAsk, Schedule

__all__ = ["PostgresBackend", "redact_dsn", "runtime_grants"]

logger = logging.getLogger("harnessx.store.postgres")

T = TypeVar("T")
Q = load_queries("postgres")

_PROGRESS_HINTS = 10_000  # sessions whose progress this process remembers holding


# --------------------------------------------------------------------------- backend


class PostgresBackend(
    PostgresConsole, PostgresScheduling, PostgresLifecycle, PostgresPartitions, PostgresLiveness
):
    """Durable state in PostgreSQL. Use as ``async with PostgresBackend(dsn) as backend``.

    Tables live in ``schema`` (created if needed when ``auto_migrate`` is true; otherwise
    the schema is verified and a missing, older, newer or altered one is refused).
    """

    dialect = "postgres"

    def __init__(
        self,
        dsn: str | None = None,
        *,
        connection_string: str | None = None,
        schema: str = DEFAULT_SCHEMA,
        auto_migrate: bool = True,
        lease_seconds: float = 30,
        pool_size: int = 10,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        # ``connection_string`` is 0.9.1's name for the DSN, kept so its programs run unchanged.
        if connection_string is not None:
            if dsn is not None:
                raise ConfigurationError("give the DSN once: as dsn or as connection_string, not both")
            dsn = connection_string
        if dsn is None:
            raise ConfigurationError(
                "PostgresBackend needs a DSN (a postgresql:// URL) as its first argument"
            )
        if not isinstance(dsn, str):
            raise ConfigurationError("dsn must be a str (a postgresql:// URL)")
        self._dsn = check_dsn(dsn)
        self._raw_dsn = dsn  # only ever handed to asyncpg
        check_schema_name(schema)
        if lease_seconds <= 0:
            raise ConfigurationError("lease_seconds must be positive")
        if pool_size < 1:
            raise ConfigurationError("pool_size must be at least 1")
        if not connect_timeout > 0:
            raise ConfigurationError("connect_timeout must be positive (seconds)")
        self.schema = schema
        self.auto_migrate = auto_migrate
        self.lease_seconds = float(lease_seconds)
        self.pool_size = pool_size
        # Bounds one connection attempt, and opening the backend with all its attempts.
        self.connect_timeout = float(connect_timeout)
        self.process_id = uuid.uuid4().hex
        self._pool: Pool | None = None
        self._liveness: Connection | None = None
        # Its channels (our schema's LISTEN/NOTIFY channels) are read when the backend opens.
        self._notifications = Notifications(
            lambda: self._connect("listener", self.connect_timeout),
            self._watch_run,
            DRIVER_ERRORS,
            self._dsn.scrub,
        )
        self._open_lock = asyncio.Lock()
        self._liveness_lock = asyncio.Lock()
        self._background: set[asyncio.Task[None]] = set()
        # role -> (the connection holding its lock, the term taken with it)
        self._leaderships: dict[str, tuple[Connection, Leadership]] = {}
        # session -> (owner, generation, run): the lease under which this process last wrote
        # that run's progress to the session row. The row lets go of it whenever the lease
        # changes hands, so under any other lease a progress-only checkpoint is sent whole
        # at once rather than refused first (HX003). Only a hint: absent means "send whole".
        self._progress: dict[str, tuple[str, int, str]] = {}
        self._deadlines = LeaseDeadlines(self.lease_seconds)
        self._liveness_losses = 0  # a deadline counts only if no loss came between send and reply
        # A running run's checkpoints, several sessions' in one statement when they queue up;
        # the groups go on a connection of their own (opened with the first).
        self._group_connection: list[Connection | None] = [None]
        self._group = GroupCommit(
            lambda point: self._commit_alone(point, grouping=True),
            self._commit_alone,
            self._commit_together,
            lambda point: lease_lost(point.lease),
        )
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresBackend({self._dsn.redacted!r}, schema={self.schema!r})"

    @property
    def redacted_dsn(self) -> str:
        return self._dsn.redacted

    # ------------------------------------------------------------ lifecycle

    async def initialize(self) -> None:
        """Open the pool, migrate (or verify) the schema and take the liveness lock."""
        async with self._open_lock:
            if self._pool is not None:
                return
            if self._closed:
                # Opened again after aclose() (a second ``async with``, as harnessx 0.9.1
                # allows): as a new process, so that the leases this one held before it
                # closed count as a dead holder's and are recovered, not taken for live ones.
                self._closed = False
                self.process_id = uuid.uuid4().hex
                self._progress.clear()
            logger.info("connecting to %s (connect timeout %g s)", self._where, self.connect_timeout)
            try:
                self._pool = await self._with_retries("connecting", self._create_pool)
                if self.auto_migrate:
                    await self._run("migrating the schema", self._migrate_on)
                else:
                    await self._run("verifying the schema", self._verify_on)
                channels = await self._run(
                    "reading the notification channels", lambda conn: conn.fetchrow(Q["channels"])
                )
                (
                    self._notifications.events_channel,
                    self._notifications.work_channel,
                    self._notifications.control_channel,
                ) = channels
                await self._hold_liveness()
            except BaseException:
                await self._shutdown()
                raise

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._shutdown()

    async def _shutdown(self) -> None:
        for retaking in list(self._background):
            retaking.cancel()
        await self._group.close()
        grouping, self._group_connection[0] = self._group_connection[0], None
        await close_quietly(grouping)
        await self._notifications.close()
        liveness, self._liveness = self._liveness, None
        self._leaderships.clear()
        pool, self._pool = self._pool, None
        # Closing the liveness connection drops the lock: from now on we count as dead.
        for resource in (liveness, pool):
            await close_quietly(resource)

    # ------------------------------------------------------------ migrations

    # ------------------------------------------------------------ execution

    # ------------------------------------------------------------ liveness

    async def pool_scan(self, term: Leadership, tracked: Sequence[str]) -> PoolScan:
        if not await self._lock_held(term):
            return PoolScan(holds=False)
        latest, orphans, workers, runs = await self._run(
            "scanning the pool", lambda conn: conn.fetchrow(Q["pool_scan"], term.role, list(tracked))
        )
        if not await self._is_latest(term, latest):
            return PoolScan(holds=False)
        return PoolScan(
            holds=True,
            orphans=[Orphan(sid, owner, int(gen), ref, reason) for sid, owner, gen, ref, reason in orphans],
            workers=[worker_info(row, bool(row[8])) for row in workers],
            tracked={run_id: (status, bool(leased)) for run_id, status, leased in runs},
        )

    async def wait_for_control(self, max_wait: float) -> bool:
        return await self._notifications.wait_for_control(max_wait)

    async def set_control(self, session_id: str, control: ControlRequest) -> bool:
        async def write(conn: Any) -> bool:
            # The row lock first: a checkpoint in flight commits before the check reads the run.
            async with conn.transaction():
                await conn.fetchval(Q["lock_session_row"], session_id)
                return await conn.fetchval(Q["set_control"], control, session_id) is not None

        return await self._run("setting a control request", write)

    # ------------------------------------------------------------- sessions

    async def create_session(
        self, session_id: str, agent_ref: str | None, fingerprint: dict[str, Any], *, recording: bool = False
    ) -> None:
        body = dumps(fingerprint)
        attempts = 0

        async def insert(conn: Connection) -> None:
            nonlocal attempts
            attempts += 1
            if await conn.fetchval(Q["insert_session"], session_id, agent_ref, body, recording) is not None:
                return
            # A retry whose first attempt committed finds its own row: same content, not a clash.
            if attempts > 1 and await self._same_session(conn, session_id, agent_ref, fingerprint):
                return
            raise session_exists(session_id)

        await self._run("creating a session", insert)

    async def _same_session(
        self, conn: Connection, session_id: str, agent_ref: str | None, fingerprint: dict[str, Any]
    ) -> bool:
        row = await conn.fetchrow(Q["get_session"], session_id)
        return row is not None and row[1] == agent_ref and loads(row[2], "session fingerprint") == fingerprint

    # --------------------------------------------------------------- leases

    async def _take_lease(self, session_id: str, owner: str) -> Lease:
        row = await self._run(
            "claiming a session",
            lambda conn: conn.fetchrow(Q["take_lease"], session_id, owner, self.lease_seconds),
        )
        if row is None:
            raise nothing_to_claim(session_id, self._where)
        generation, busy_seconds = row
        if generation is None:
            raise session_held(session_id, busy_seconds)
        return Lease(session_id, owner, int(generation))

    async def _renew_rows(self, leases: list[Lease]) -> list[Row]:
        ids, owners, generations = (
            [lease.session_id for lease in leases],
            [lease.owner for lease in leases],
            [lease.generation for lease in leases],
        )
        async with self._group.exclusive:  # never while a group of checkpoints is in flight
            rows = await self._run(
                "renewing leases",
                lambda conn: conn.fetch(Q["renew_leases"], self.lease_seconds, ids, owners, generations),
            )
        return [tuple(row) for row in rows]

    def _forget(self, lease: Lease) -> None:
        self._progress.pop(lease.session_id, None)
        self._deadlines.forget(lease)

    # ----------------------------------------------------------------- runs

    async def _checkpoint(
        self,
        lease: Lease,
        run_id: str,
        *,
        messages: Sequence[dict[str, Any]] = (),
        tools: Sequence[ToolEntry] = (),
        events: Sequence[RunEvent] = (),
        run: tuple[Any, ...] | None = None,
        new_run: dict[str, Any] | None = None,
        progress_only: bool = False,
        journal: Sequence[JournalRecord] = (),
        release: bool = False,
        first_seq: int | None = None,
    ) -> None:
        """One checkpoint (see ``_pg_checkpoint``), alone or with others' (``_pg_group_commit``).
        Its id makes a retry after a lost connection harmless: the statement applies a
        checkpoint id at most once. ``release``: it gives the lease up too."""
        held = (lease.owner, lease.generation, run_id)
        point = Checkpoint(
            lease,
            run_id,
            # One id, whichever statements carry it: a retry after a lost reply finds it applied.
            secrets.token_hex(16),
            messages=messages,
            tools=tools,
            events=events,
            run=run,
            new_run=new_run,
            events_channel=self._notifications.events_channel,
            work_channel=self._notifications.work_channel,
            progress_only=progress_only and self._progress.get(lease.session_id) == held,
            journal=journal,
            release=release,
            first_seq=first_seq,
        )
        self._progress.pop(lease.session_id, None)  # unknown until the statement commits
        if point.groupable:
            await self._group.commit(point)
        else:
            await self._commit_alone(point)
        if release:
            self._deadlines.forget(lease)
        elif not (new_run and new_run["queued"]):  # a queued run's checkpoint gave the lease up
            if len(self._progress) >= _PROGRESS_HINTS:
                self._progress.clear()  # leases lost without a release leave theirs behind
            self._progress[lease.session_id] = held
        if events or new_run:
            self._notifications.wake_run(run_id)  # local followers at once; others hear the NOTIFY
        if new_run and new_run["queued"]:
            self._notifications.wake_work()

    async def _commit_alone(self, point: Checkpoint, *, grouping: bool = False) -> None:
        """``point`` in a statement of its own; ``grouping``: sent by the group commit, which
        uses its own connection once it has one (a process that has grouped checkpoints has
        them prepared there)."""
        first = checkpoint(point)

        async def write(conn: Connection) -> Any:
            try:
                return await conn.fetchval(first[0], *first[1])
            except asyncpg.PostgresError as exc:
                if exc.sqlstate != PROGRESS_NOT_HELD:
                    raise
            # The session row holds another run's progress, or none (a run in flight when
            # schema 3 was applied): nothing was written; send it whole.
            whole = checkpoint(point, progress_only=False)
            return await conn.fetchval(whole[0], *whole[1])

        new_run = point.new_run
        if grouping and self._group_connection[0] is not None:
            await self._run_on_own(
                "committing a checkpoint", write, self._group_connection, lease=point.lease
            )
            return
        await self._run(
            "committing a checkpoint",
            write,
            lease=point.lease,
            request_id=new_run.get("request_id") if new_run else None,
        )

    async def _commit_together(self, points: Sequence[Checkpoint]) -> list[str] | None:
        """Several sessions' checkpoints in one statement: each one's answer, or ``None``
        when the statement was refused as a whole (nothing written; see _pg_group_commit)."""
        text, args = group(points)

        async def write(conn: Connection) -> list[str] | None:
            try:
                return [answer for (answer,) in await conn.fetch(text, *args)]
            except asyncpg.PostgresError as exc:
                if isinstance(exc, TRANSIENT):
                    raise
                logger.info("a group of %d checkpoints was refused (%s); each goes alone", len(points), exc)
                return None

        return await self._run_on_own("committing checkpoints", write, self._group_connection)

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
        fresh = RunState(session_id=lease.session_id, run_id=run_id)
        await self._checkpoint(
            lease,
            run_id,
            messages=delta.messages,
            tools=delta.tools,
            events=delta.events,
            run=run_values(fresh, delta),
            new_run={
                "request_id": request_id,
                "request_message": message,
                "queued": queued,
                "schedule": schedule,
            },
            journal=journal,
        )

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
        if delta.tools:  # no first boundary has any; the statement writes none
            await self.create_session(
                session.id, session.agent_ref, session.fingerprint, recording=session.recording
            )
            lease = await self.claim(session.id, holder)
            await self.create_run(
                lease, run_id, request_id, message, delta, queued=queued, journal=journal, schedule=schedule
            )
            return lease
        plan = (schedule or Schedule()) if queued else Schedule()
        # A new session's first lease: generation 1, as a claim of a session never held gives.
        lease = Lease(session.id, self.owner_for(holder), 1)
        events = delta.events
        rows = [
            (int(e.cursor or 0), e.event_id, e.type.value, e.step_id, e.attempt_id, event_data(e))
            for e in events
        ]
        args = (
            session.id,
            lease.owner,
            lease.generation,
            secrets.token_hex(16),
            run_id,
            [dumps(m) for m in delta.messages],
            session.agent_ref,
            dumps(session.fingerprint),
            session.recording,
            self.lease_seconds,
            message,
            request_id,
            queued,
            self._notifications.work_channel if queued else None,
            *run_values(RunState(session_id=session.id, run_id=run_id), delta),
            *(list(column) for column in (zip(*rows, strict=True) if rows else [()] * 6)),
            max((row[0] for row in rows), default=0),
            *journal_columns(journal),
            plan.priority,
            plan.concurrency_key,
            plan.group,
            plan.wait,
        )

        async def write(conn: Connection) -> None:
            try:
                await conn.fetchval(Q["create_session_run"], *args)
            except asyncpg.PostgresError as exc:
                if exc.sqlstate == SESSION_EXISTS:
                    raise ConfigurationError(f"session {session.id!r} already exists") from None
                raise

        if not queued:
            await self._keep_liveness()  # never hold a lease while others can see this process as dead
        sent = self._sent()
        await self._run("creating a session and its first run", write, request_id=request_id)
        if queued:
            self._notifications.wake_work()
        else:
            self._extended([lease], sent)
            self._progress[session.id] = (lease.owner, lease.generation, run_id)  # the row holds it
        self._notifications.wake_run(run_id)
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
        await self._checkpoint(
            lease,
            state.run_id,
            messages=delta.messages,
            tools=delta.tools,
            events=[*provisional, *delta.events],
            run=run_values(state, delta),
            # A run that stops running always has its row written: only a running run's
            # progress may be ahead of its row (see migration 0003).
            progress_only=delta.run.empty and state.status is RunStatus.RUNNING,
            journal=journal,
            release=release,
            # The lease holder is the session's only writer: its conversation is the stored one.
            first_seq=len(state.messages) + 1,
        )

    async def append_events(
        self, lease: Lease, run_id: str, events: list[RunEvent], journal: Sequence[JournalRecord] = ()
    ) -> None:
        if events:
            # Only a running run streams provisional events.
            await self._checkpoint(lease, run_id, events=events, progress_only=True, journal=journal)

    async def load_state(self, run_id: str) -> RunState:
        loaded = await self.load_run(run_id)
        if loaded is None:
            raise no_run(run_id, self._where)
        if loaded.problem is not None:
            raise loaded.problem
        assert loaded.state is not None
        return loaded.state

    async def load_run(self, run_id: str) -> LoadedRun | None:
        row = await self._run("loading a run", lambda conn: conn.fetchrow(Q["load_run"], run_id))
        if row is None:
            return None
        *columns, session, bodies, tools, results, holds = tuple(row)
        record = run_record(columns)
        kept = tuple(str(bucket) for bucket in holds)
        try:
            state = decode_state(record, bodies, tools, {(key, kind): text for key, kind, text in results})
        except CorruptStateError as exc:
            return LoadedRun(record, session_record(tuple(session)), None, exc, kept)
        return LoadedRun(record, session_record(tuple(session)), state, rate_holds=kept)

    async def _load(self, conn: Connection, run_id: str) -> RunState:
        row = await conn.fetchrow(Q["get_run"], run_id)
        if row is None:
            raise no_run(run_id, self._where)
        record = run_record(tuple(row))
        bodies = await conn.fetch(Q["session_messages"], record.session_id)
        tools = [tuple(r) for r in await conn.fetch(Q["run_tool_calls"], run_id)]
        results = {}
        if has_result_refs(tools):
            results = {
                (key, kind): text for key, kind, text in await conn.fetch(Q["run_tool_results"], run_id)
            }
        return decode_state(record, [body for (body,) in bodies], tools, results)

    async def incident_snapshot(
        self, session_id: str, run_id: str, *, max_records: int = 100_000
    ) -> IncidentSnapshot:
        async def read(conn: Connection) -> IncidentSnapshot:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                row = await conn.fetchrow(Q["get_session"], session_id)
                if row is None:
                    raise no_session(session_id, self._where)
                session = session_record(tuple(row))
                run = await conn.fetchrow(Q["get_run"], run_id)
                if run is None or run["session_id"] != session_id:
                    raise not_this_sessions_run(session_id, run_id)
                if not session.recording:
                    raise not_recorded(session_id)
                rows = await conn.fetch(Q["read_journal"], run_id, max_records + 1)
                if len(rows) > max_records:
                    raise too_many_records(run_id, max_records)
                state = await self._load(conn, run_id)
            records = [journal_record_from_row(tuple(r), session_id, run_id) for r in rows]
            return IncidentSnapshot(state, records, session)

        return await self._run("reading a recorded run", read)

    async def read_events(self, run_id: str, after: int | str = 0, limit: int = 500) -> list[RunEvent]:
        after = event_position(after)

        async def read(conn: Connection) -> list[RunEvent]:
            # One statement, so one snapshot: the results events refer to are joined in.
            rows = [tuple(r) for r in await conn.fetch(Q["read_events"], run_id, after, limit)]
            events, missing = events_from_rows(rows, after)
            if missing:  # stored before 0.2: fill the calls in from the run's tool calls
                tools = await conn.fetch(Q["run_tool_calls"], run_id)
                fill_calls(events, missing, [tuple(r) for r in tools])
            return events

        return await self._run("reading events", read)

    async def _final_result(self, conn: Connection, key: str) -> str | None:
        return final_tool_result(key, await conn.fetch(Q["tool_call_results"], key))

    async def tool_result(self, session_id: str, tool_call_id: str) -> str | None:
        """The whole final result of the session's latest answered call with this id."""

        async def read(conn: Connection) -> str | None:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                key = await conn.fetchval(Q["session_tool_call"], session_id, tool_call_id)
                return await self._final_result(conn, str(key)) if key is not None else None

        return await self._run("reading a tool result", read)

    # ----------------------------------------------------------------- pool

    async def requeue(self, lease: Lease, run_id: str) -> None:
        held, _ = await self._run(
            "requeueing a run",
            lambda conn: conn.fetchrow(
                Q["requeue_run"], lease.session_id, lease.owner, lease.generation, run_id
            ),
        )
        if not held:
            raise lease_lost(lease)
        self._notifications.wake_work()

    async def defer_start(
        self, lease: Lease, run_id: str, *, attempts: int, retry_in: float, events: list[RunEvent]
    ) -> None:
        await self._settle(lease, run_id, Q["defer_start"], (attempts, float(retry_in)), events)

    async def clear_start_attempts(self, lease: Lease, run_id: str) -> None:
        await self._run(
            "clearing failed start attempts",
            lambda conn: conn.execute(
                Q["clear_start_attempts"], lease.session_id, lease.owner, lease.generation, run_id
            ),
        )

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
        args = (status, stop_reason, dumps(error) if error else None)
        await self._settle(lease, run_id, Q["end_run"], args, events)

    async def _settle(
        self, lease: Lease, run_id: str, query: str, args: tuple[Any, ...], events: list[RunEvent]
    ) -> None:
        """``defer_start`` or ``end_run``: fenced, the events numbered after the run's last,
        applied at most once however often a lost reply makes the call repeat."""
        call_id = secrets.token_hex(16)
        columns = (
            [e.event_id for e in events],
            [e.type.value for e in events],
            [e.step_id for e in events],
            [e.attempt_id for e in events],
            [event_data(e) for e in events],
        )
        _, first, _ = await self._run(
            "settling a run that cannot be driven",
            lambda conn: conn.fetchrow(
                query, lease.session_id, lease.owner, lease.generation, run_id, *args, call_id, *columns
            ),
            lease=lease,
        )
        for offset, event in enumerate(events):
            event.cursor = str(int(first) + offset)
        self._notifications.wake_run(run_id)

    async def claim_queued(
        self, holder: str, agent_refs: list[str] | None, limit: int, *, rate: RateAsk | None = None
    ) -> Claims:
        owner = self.owner_for(holder)
        ask = (None, 0, 0, 0.0) if rate is None else (rate.bucket, rate.tokens, rate.calls, float(rate.slack))
        claim_id = uuid.uuid4().hex
        attempts = 0
        await self._keep_liveness()

        async def claim(conn: Connection) -> list[Any]:
            # One statement with SKIP LOCKED: concurrent workers never wait for, or get, the
            # same run. If an attempt committed but its reply was lost, its leases would be
            # renewed by this process forever while nobody drives the runs: a retry first
            # collects what the lost attempt took.
            nonlocal attempts
            attempts += 1
            if attempts > 1:
                taken = await conn.fetch(Q["claimed_by"], owner, claim_id)
                if taken:
                    return list(taken)
            args = (owner, agent_refs, limit, self.lease_seconds, claim_id, *ask)
            return list(await conn.fetch(Q["claim_queued"], *args))

        sent = self._sent()
        rows = await self._run("claiming queued runs", claim)
        if any(len(row) > 4 and row[4] is False for row in rows):
            # The server holds no liveness lock of ours although our connection for it looks
            # open: take it again before the next claim (nothing was taken).
            self._liveness_missing()
            return Claims([], 0)
        # A retry that found its lost attempt's runs has no lease to report: its calls, if
        # granted, stay spent, which errs on the limit's side.
        leased = next((row[5] for row in rows if len(row) > 5 and row[5] is not None), None)
        claimed = Claims(
            [(Lease(str(sid), owner, int(gen)), str(run_id)) for run_id, sid, gen, *_ in rows if run_id],
            sum(int(row[3] or 0) for row in rows if len(row) > 3 and row[0] is None),
            None if leased is None else rate_reservation(tuple(leased)),
        )
        self._extended([lease for lease, _ in claimed], sent)
        return claimed

    async def wait_for_work(self, max_wait: float) -> bool:
        """Return soon after a run is queued in any process (LISTEN), or after ``max_wait``
        seconds; without a listener this is plain waiting (the claim loop polls)."""
        return await self._notifications.wait_for_work(max_wait)

    async def register_worker(self, worker: WorkerInfo) -> None:
        args = (worker.id, worker.host, worker.pid, dumps(worker.agents), worker.concurrency)
        await self._run("registering a worker", lambda conn: conn.execute(Q["register_worker"], *args))

    async def worker_heartbeat(self, worker_id: str, *, draining: bool) -> None:
        await self._run(
            "recording a worker heartbeat",
            lambda conn: conn.execute(Q["worker_heartbeat"], worker_id, draining),
        )

    async def stop_worker(self, worker_id: str) -> None:
        await self._run("stopping a worker", lambda conn: conn.execute(Q["stop_worker"], worker_id))

    async def _worker_rows(self) -> list[tuple[Row, bool]]:
        rows = await self._all("listing workers", "running_workers")
        return [(row, bool(row[8])) for row in rows]

    async def find_orphans(self) -> list[Orphan]:
        rows = await self._run("scanning for orphans", lambda conn: conn.fetch(Q["find_orphans"]))
        return [
            Orphan(sid, owner, int(gen), agent_ref, reason) for sid, owner, gen, agent_ref, reason in rows
        ]

    async def recover_orphan(self, term: Leadership, orphan: Orphan, *, requeue: bool) -> Recovery | None:
        holds, dropped, run_id, _, at = await self._run(
            "recovering an orphan",
            lambda conn: conn.fetchrow(
                Q["recover_orphan"],
                orphan.session_id,
                orphan.owner,
                orphan.generation,
                requeue,
                term.role,
                term.epoch,
                term.holder,
            ),
        )
        if not holds:
            raise leadership_lost(term)
        if not dropped:
            return None  # someone else got there first, or the holder renewed it
        if run_id is not None:
            self._notifications.wake_work()
        return Recovery(None if run_id is None else str(run_id), float(at))

    async def mark_worker_dead(self, term: Leadership, worker_id: str) -> float | None:
        holds, marked, at = await self._run(
            "marking a worker dead",
            lambda conn: conn.fetchrow(Q["mark_worker_dead"], worker_id, term.role, term.epoch, term.holder),
        )
        if not holds:
            raise leadership_lost(term)
        return float(at) if marked else None

    async def stuck_runs(self, older_than: float, limit: int = 100) -> list[StuckRun]:
        rows = await self._run(
            "listing stuck runs", lambda conn: conn.fetch(Q["stuck_runs"], float(older_than), limit)
        )
        return [
            StuckRun(run_id, session_id, listed_status(status), at) for run_id, session_id, status, at in rows
        ]

    # --------------------------------------------------------------- events

    async def _watch_run(self, run_id: str, seconds: float, interest: Interest = "watch") -> None:
        query = Q["watch_run"] if interest == "watch" else Q["await_run"]
        await self._run("announcing a followed run", lambda conn: conn.execute(query, run_id, seconds))

    async def wait_for_events(self, run_id: str, max_wait: float) -> None:
        """Return soon after a checkpoint of ``run_id`` commits in any process (LISTEN), or
        after ``max_wait`` seconds; without a listener this is plain waiting."""
        await self._notifications.wait_for_run(run_id, max_wait)

    async def wait_until_stopped(self, run_id: str, max_wait: float) -> RunRecord | None:
        """See the protocol: the checkpoint that stops the run notifies (``await_run``), the
        others do not; the waiter is in place before the row is read."""
        return await self._notifications.until_stopped(
            run_id,
            max_wait,
            lambda: self.get_run(run_id, messages=False),
            lambda record: record is None or record.stopped,
        )
