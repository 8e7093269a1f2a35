"""Retention, erasure and archives on SQLite (a part of ``SQLiteBackend``).

Every step is one write transaction (``BEGIN IMMEDIATE``), and SQLite has one writer at a
time: a prune batch holds up every other commit to the file while it runs, so its batches
are small (see ``harnessx/_retention.py``), and they commit without waiting for the disk
(``synchronous=NORMAL`` for that transaction alone: a batch lost to a power failure is
consistent, and the next pass removes its sessions again; anything archived was fsynced
first), which shortens how long a batch holds the lock (docs/benchmarks.md: a batch of 20
sessions at 100,000 runs of history, p50 2.5-3.2 ms with the fsync, 1.9-2.2 ms without).
Deleting leaves free pages in the file; a database created by this version uses
incremental vacuum, and ``reclaim_space`` gives them back a few at a time (each step moves
pages, about 0.1 ms each, while holding the lock).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from harnessx._errors import ConfigurationError, SessionBusyError
from harnessx.store._archive import TABLES, ArchiveRecord, build_records, unknown_columns, why_not_restored
from harnessx.store._codec import dumps
from harnessx.store._compaction import plan
from harnessx.store._core import newer_record, unfinished_blocks_erasure
from harnessx.store._lifecycle import Fact, judge
from harnessx.store._protocol import Archiver, Compaction, Leadership, PruneBatch, PruneCursor
from harnessx.store._queries import load_queries

__all__ = ["SQLiteLifecycle"]

T = TypeVar("T")
Q = load_queries("sqlite")

# Children first: foreign keys are checked statement by statement.
_DELETES = (
    ("tool_results", Q["delete_tool_results"]),
    ("tool_calls", Q["delete_tool_calls"]),
    ("events", Q["delete_events"]),
    ("journal", Q["delete_journal"]),
    ("messages", Q["delete_messages"]),
    ("audit", Q["delete_audit"]),
    ("runs", Q["delete_runs"]),
    ("sessions", Q["delete_sessions"]),
)

# Each archived table's rows of a set of sessions, in the order they are restored.
_EXPORTS = {
    "sessions": Q["export_sessions"],
    "runs": Q["export_runs"],
    "messages": Q["export_messages"],
    "tool_calls": Q["export_tool_calls"],
    "tool_results": Q["export_tool_results"],
    "events": Q["export_events"],
    "journal": Q["export_journal"],
    "audit": Q["export_audit"],
}

# Pages per incremental-vacuum transaction (256 KiB of 4 KiB pages: about 6 ms of lock on a
# quiet machine; 256 pages held it 20-30 ms), steps per reclaim_space call, and the pause
# between steps, which lets other writers in.
_VACUUM_STEP = 64
_VACUUM_STEPS = 32
_VACUUM_PAUSE = 0.005


class SQLiteLifecycle:
    """Mixed into ``SQLiteBackend``, whose ``_call`` runs a function on the database thread
    and ``_write`` makes it one write transaction."""

    if TYPE_CHECKING:
        path: Path
        synchronous: str

        async def _call(self, fn: Callable[..., T], *args: Any) -> T: ...

        def _write(self, conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], T]) -> T: ...

        def _owner_alive(self, owner: str) -> bool: ...

        def _check_term(self, conn: sqlite3.Connection, term: Leadership) -> None: ...

        @staticmethod
        def _reading(body: Callable[[sqlite3.Connection], T]) -> Callable[[sqlite3.Connection], T]: ...

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
        def body(conn: sqlite3.Connection) -> PruneBatch:
            if term is not None:
                self._check_term(conn, term)
            now = time.time()
            cutoff = now - older_than
            at, sid = after if after is not None else (float("-inf"), "")
            found = conn.execute(Q["prune_candidates"], (cutoff, at, sid, now, limit)).fetchall()
            ids = [str(row[0]) for row in found]
            facts = [
                Fact(str(i), bool(free), bool(unfinished), float(last), float(last) < cutoff, status)
                for i, free, unfinished, last, status in conn.execute(
                    Q["prune_facts"], (dumps(ids), now)
                ).fetchall()
            ]
            verdict = judge(facts, statuses)
            rows: dict[str, int] = {}
            if not dry_run:
                for session_id, when in verdict.recheck:
                    conn.execute(Q["set_prune_check"], (now if when is None else when, session_id))
                if verdict.eligible:
                    if archive is not None:
                        archive(self._export(conn, verdict.eligible, now))
                    rows = self._delete(conn, verdict.eligible)
            cursor = (float(found[-1][1]), ids[-1]) if len(found) == limit else None
            return PruneBatch(verdict.eligible, rows, len(found), cursor)

        if dry_run:
            return await self._call(self._reading(body))
        return await self._call(self._unsynced, lambda conn: self._write(conn, body))

    def _unsynced(self, conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], T]) -> T:
        """``body`` with its commits not waiting for the disk (see the module's docstring)."""
        conn.execute("PRAGMA synchronous=NORMAL")
        try:
            return body(conn)
        finally:
            conn.execute(f"PRAGMA synchronous={self.synchronous}")

    def _delete(self, conn: sqlite3.Connection, session_ids: Sequence[str]) -> dict[str, int]:
        named = dumps(list(session_ids))
        conn.execute(Q["forget_compactable_sessions"], (named,))  # not a row the session owns
        return {table: conn.execute(query, (named,)).rowcount for table, query in _DELETES}

    async def compact_events(self, older_than: float, *, limit: int) -> Compaction:
        cutoff = time.time() - older_than

        def waiting(conn: sqlite3.Connection) -> bool:
            return conn.execute(Q["compaction_waiting"], (cutoff,)).fetchone() is not None

        # Looked at first without the write lock: most passes find nothing due.
        if not await self._call(waiting):
            return Compaction(0, 0, 0, False)

        def body(conn: sqlite3.Connection) -> Compaction:
            due = conn.execute(Q["compaction_due"], (cutoff, limit)).fetchall()
            # One writer: no prune or erasure can remove a run until this transaction ends.
            finished = {str(run_id): int(last) for run_id, done, last in due if done}
            pieces = (
                conn.execute(Q["streamed_pieces"], (dumps(list(finished)),)).fetchall() if finished else []
            )
            written = plan(pieces, finished)
            conn.executemany(Q["compact_keep"], [(data, run_id, seq) for run_id, seq, data in written.kept])
            rows = conn.executemany(Q["compact_gone"], written.gone).rowcount
            conn.executemany(Q["count_compacted"], [(n, run_id) for run_id, n in written.removed.items()])
            conn.execute(Q["forget_compactable"], (dumps([str(row[0]) for row in due]),))
            runs = len({run_id for run_id, _, _ in written.kept})
            return Compaction(len(due), runs, rows, len(due) == limit)

        # As a prune batch: committed without waiting for the disk (redone if lost).
        return await self._call(self._unsynced, lambda conn: self._write(conn, body))

    async def delete_session(self, session_id: str) -> dict[str, int] | None:
        def body(conn: sqlite3.Connection) -> dict[str, int] | None:
            row = conn.execute(Q["lock_session"], (session_id,)).fetchone()
            if row is None:
                return None
            owner, expires, unfinished = row
            if unfinished is not None:
                raise unfinished_blocks_erasure(session_id, unfinished)
            leased = owner is not None and expires is not None and expires > time.time()
            if leased and self._owner_alive(owner):
                raise SessionBusyError(
                    f"session {session_id} is held by a live process (its lease expires in "
                    f"{expires - time.time():.0f} s): try again once it lets go"
                )
            return self._delete(conn, [session_id])

        return await self._call(self._write, body)

    async def session_page(self, after: str, limit: int) -> list[str]:
        rows = await self._call(lambda conn: conn.execute(Q["session_page"], (after, limit)).fetchall())
        return [str(row[0]) for row in rows]

    async def export_sessions(self, session_ids: Sequence[str]) -> list[dict[str, Any]]:
        ids = list(session_ids)
        return await self._call(self._reading(lambda conn: self._export(conn, ids, time.time())))

    def _export(self, conn: sqlite3.Connection, session_ids: list[str], now: float) -> list[dict[str, Any]]:
        named = dumps(session_ids)
        rows = {table: _dicts(conn.execute(_EXPORTS[table], (named,))) for table in TABLES}
        (version,) = conn.execute("SELECT max(version) FROM harnessx_migrations").fetchone()
        return build_records(rows, source={"dialect": "sqlite", "schema_version": version}, exported_at=now)

    async def import_session(self, record: ArchiveRecord) -> bool:
        def body(conn: sqlite3.Connection) -> bool:
            if conn.execute(Q["session_exists"], (record.session_id,)).fetchone() is not None:
                return False
            columns = {table: _columns(conn, table) for table in TABLES}
            unknown = unknown_columns(record, columns)
            if unknown:
                raise newer_record(record.session_id, str(self.path), unknown)
            for table, rows in record.tables():
                for row in rows:
                    values = dict(row)
                    if table == "sessions":
                        # Restored sessions are kept at least one retention period from now.
                        values["prune_check_at"] = time.time()
                    names = list(values)
                    sql = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})"
                    try:
                        conn.execute(sql, [values[name] for name in names])
                    except sqlite3.IntegrityError as exc:
                        raise ConfigurationError(
                            f"session {record.session_id}'s record cannot be restored into {self.path}: "
                            f"{exc} ({why_not_restored(str(exc))})"
                        ) from None
            return True

        return await self._call(self._write, body)

    async def prune_workers(self, term: Leadership, older_than: float, limit: int = 1000) -> int:
        def body(conn: sqlite3.Connection) -> int:
            self._check_term(conn, term)
            return conn.execute(Q["prune_workers"], (time.time() - older_than, limit)).rowcount

        return await self._call(self._write, body)

    async def oldest_activity(self) -> float | None:
        row = await self._call(lambda conn: conn.execute(Q["oldest_prune_check"]).fetchone())
        return None if row[0] is None else float(row[0])

    async def maintain_partitions(self, ahead: float, *, grace: float = 2 * 86400.0) -> None:
        return None  # a SQLite file has no partitions: retention deletes rows in batches

    async def reclaim_space(self) -> int:
        """Up to ``_VACUUM_STEPS`` short steps of incremental vacuum, each its own write
        transaction with a pause after it; the pages given back (0: none were free, or the
        database was not created for incremental vacuum). Call it again while it gives some."""
        (mode,) = await self._call(lambda conn: conn.execute("PRAGMA auto_vacuum").fetchone())
        if mode != 2:  # INCREMENTAL: only a database created so can give pages back
            return 0
        reclaimed = 0
        for _ in range(_VACUUM_STEPS):
            freed = await self._call(self._unsynced, _vacuum_step)
            if not freed:
                break
            reclaimed += freed
            await asyncio.sleep(_VACUUM_PAUSE)
        return reclaimed


def _vacuum_step(conn: sqlite3.Connection) -> int:
    (before,) = conn.execute("PRAGMA freelist_count").fetchone()
    if not before:
        return 0
    # executescript steps the pragma to the end (a plain execute frees one page).
    conn.executescript(f"PRAGMA incremental_vacuum({_VACUUM_STEP})")
    (after,) = conn.execute("PRAGMA freelist_count").fetchone()
    return int(before) - int(after)


def _dicts(cursor: sqlite3.Cursor) -> list[dict[str, Any]]:
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")]
