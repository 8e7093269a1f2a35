"""Retention, erasure and archives on PostgreSQL (a part of ``PostgresBackend``).

A prune batch is one short transaction: it locks its candidate sessions (``FOR UPDATE SKIP
LOCKED``, so it never waits for a claim or another pruner, and no run can start in a locked
session), reads what decides their fate in a statement of its own (so it sees every commit
before the lock), and deletes those that qualify in one statement. It locks only sessions
nobody holds a lease on, so a checkpoint, a queue claim or a lease renewal never waits for
it; a process claiming one of those very sessions waits the batch's few milliseconds and then
finds it gone.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Collection, Sequence
from typing import Any, TypeVar

from harnessx._errors import ConfigurationError, SessionBusyError
from harnessx.store._archive import TABLES, ArchiveRecord, build_records, unknown_columns, why_not_restored
from harnessx.store._compaction import plan
from harnessx.store._core import newer_record, unfinished_blocks_erasure
from harnessx.store._lifecycle import Fact, judge
from harnessx.store._pg_execution import PostgresExecution
from harnessx.store._pg_partitions import id_ms
from harnessx.store._pg_types import Connection
from harnessx.store._protocol import (
    Archiver,
    Compaction,
    Leadership,
    PruneBatch,
    PruneCursor,
    leadership_lost,
)
from harnessx.store._queries import load_queries, when

__all__ = ["PostgresLifecycle"]

T = TypeVar("T")
Q = load_queries("postgres")
_DELETED = ("sessions", "runs", "messages", "tool_calls", "tool_results", "events", "journal", "audit")
_EARLIEST = "-infinity"

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


class PostgresLifecycle(PostgresExecution):
    """Mixed into ``PostgresBackend``, whose ``_run`` runs an operation on a pooled
    connection with retries (each operation here is one transaction, safe to repeat)."""

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
        at, sid = after if after is not None else (_EARLIEST, "")
        seconds = float(older_than)

        async def batch(conn: Connection) -> PruneBatch:
            async with conn.transaction():
                if term is not None:
                    await _hold(conn, term)
                # A dry run only reads: it locks nothing.
                query = when(Q["prune_candidates"], frozenset() if dry_run else frozenset({"locking"}))
                found = await conn.fetch(query, seconds, str(at), sid, limit)
                ids = [str(row[0]) for row in found]
                facts = [
                    Fact(str(i), bool(free), bool(unfinished), str(last), bool(idle), status)
                    for i, free, unfinished, last, idle, status in await conn.fetch(
                        Q["prune_facts"], ids, seconds
                    )
                ]
                verdict = judge(facts, statuses)
                rows: dict[str, int] = {}
                if not dry_run:
                    if verdict.recheck:
                        await conn.execute(
                            Q["set_prune_check"],
                            [i for i, _ in verdict.recheck],
                            [None if when is None else str(when) for _, when in verdict.recheck],
                        )
                    if verdict.eligible:
                        if archive is not None:
                            records = await self._export(conn, verdict.eligible)
                            await asyncio.to_thread(archive, records)
                        rows = await self._delete(conn, verdict.eligible, Q["prune_sessions"])
                cursor = (str(found[-1][1]), ids[-1]) if len(found) == limit else None
                return PruneBatch(verdict.eligible, rows, len(found), cursor)

        return await self._run("pruning finished sessions", batch)

    async def _delete(
        self, conn: Connection, session_ids: Sequence[str], statement: str = Q["delete_sessions"]
    ) -> dict[str, int]:
        """Erasure deletes every row now; retention (``prune_sessions``) leaves the events of
        the day partitions to go with their day (``_pg_partitions``)."""
        counts = await conn.fetchrow(statement, list(session_ids))
        return {table: int(count) for table, count in zip(_DELETED, counts, strict=True)}

    async def compact_events(self, older_than: float, *, limit: int) -> Compaction:
        async def batch(conn: Connection) -> Compaction:
            async with conn.transaction():
                due = await conn.fetch(Q["compaction_due"], float(older_than), limit)
                held = {str(run_id): int(last) for run_id, locked, _, last in due if locked}
                # A finished run whose session a prune or an erasure holds stays noted.
                done = [str(run_id) for run_id, locked, stored, _ in due if locked or not stored]
                keys = sorted({id_ms(run_id) for run_id in held})
                rows = await conn.fetch(Q["streamed_pieces"], list(held), keys) if held else []
                written = plan([tuple(row) for row in rows], held)
                _, removed = await conn.fetchrow(
                    Q["compact_pieces"],
                    [run_id for run_id, _, _ in written.kept],
                    [seq for _, seq, _ in written.kept],
                    [data for _, _, data in written.kept],
                    [run_id for run_id, _, _ in written.gone],
                    [first for _, first, _ in written.gone],
                    [last for _, _, last in written.gone],
                    done,
                    keys,
                    list(written.removed),
                    list(written.removed.values()),
                )
            runs = len({run_id for run_id, _, _ in written.kept})
            return Compaction(len(due), runs, int(removed), len(due) == limit)

        return await self._run("compacting finished runs", batch)

    async def delete_session(self, session_id: str) -> dict[str, int] | None:
        async def erase(conn: Connection) -> dict[str, int] | None:
            async with conn.transaction():
                row = await conn.fetchrow(Q["lock_session"], session_id)
                if row is None:
                    return None
                held, unfinished = row
                if unfinished is not None:
                    raise unfinished_blocks_erasure(session_id, unfinished)
                if held:
                    raise SessionBusyError(
                        f"session {session_id} is held by another process (an unexpired lease): try "
                        "again once it lets go"
                    )
                return await self._delete(conn, [session_id])

        return await self._run("deleting a session", erase)

    async def session_page(self, after: str, limit: int) -> list[str]:
        rows = await self._run("listing sessions", lambda conn: conn.fetch(Q["session_page"], after, limit))
        return [str(row[0]) for row in rows]

    async def export_sessions(self, session_ids: Sequence[str]) -> list[dict[str, Any]]:
        ids = list(session_ids)

        async def read(conn: Connection) -> list[dict[str, Any]]:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                return await self._export(conn, ids)

        return await self._run("exporting sessions", read)

    async def _export(self, conn: Connection, session_ids: list[str]) -> list[dict[str, Any]]:
        rows = {
            table: [dict(row) for row in await conn.fetch(_EXPORTS[table], session_ids)] for table in TABLES
        }
        version = await conn.fetchval("SELECT max(version) FROM harnessx_migrations")
        return build_records(
            rows, source={"dialect": "postgres", "schema_version": version}, exported_at=time.time()
        )

    async def import_session(self, record: ArchiveRecord) -> bool:
        async def restore(conn: Connection) -> bool:
            async with conn.transaction():
                if await conn.fetchval(Q["session_exists"], record.session_id) is not None:
                    return False
                types = await _column_types(conn)
                unknown = unknown_columns(record, {table: list(columns) for table, columns in types.items()})
                if unknown:
                    raise newer_record(record.session_id, self._where, unknown)
                for table, rows in record.tables():
                    for row in rows:
                        if table == "runs":
                            await conn.execute(Q["forget_pruned_run"], str(row["id"]))
                            # The run's day may have been dropped since it was archived.
                            await conn.fetchval(Q["event_partition_for"], str(row["id"]))
                        columns = types[table]
                        values = {name: value for name, value in row.items() if columns[name] != "identity"}
                        if table == "sessions":
                            # Restored sessions are kept at least one retention period from now.
                            values["prune_check_at"] = None
                        await _insert(conn, table, values, types[table], record.session_id)
                return True

        return await self._run("importing a session", restore)

    async def prune_workers(self, term: Leadership, older_than: float, limit: int = 1000) -> int:
        async def prune(conn: Connection) -> int:
            async with conn.transaction():
                await _hold(conn, term)
                status = await conn.execute(Q["prune_workers"], float(older_than), limit)
            return int(status.split()[-1])

        return await self._run("forgetting stopped workers", prune)

    async def oldest_activity(self) -> float | None:
        value = await self._run(
            "reading the oldest activity", lambda conn: conn.fetchval(Q["oldest_prune_check"])
        )
        return None if value is None or value == float("-inf") else float(value)

    async def reclaim_space(self) -> int:
        return 0  # autovacuum makes deleted rows' space reusable; nothing to give back by hand


async def _column_types(conn: Connection) -> dict[str, dict[str, str]]:
    """Each archived table's columns: ``time``, ``bool``, ``int``, ``float``, ``json``,
    ``text`` or ``identity`` (generated by the database, never inserted)."""
    types: dict[str, dict[str, str]] = {table: {} for table in TABLES}
    for table, column, data_type, identity in await conn.fetch(Q["column_types"]):
        types[table][column] = "identity" if identity else _kind(data_type)
    return types


def _kind(data_type: str) -> str:
    if data_type.startswith("timestamp"):
        return "time"
    if data_type == "boolean":
        return "bool"
    if data_type in ("bigint", "integer", "smallint"):
        return "int"
    if data_type in ("double precision", "real", "numeric"):
        return "float"
    if data_type in ("json", "jsonb"):
        return data_type
    return "text"


def _value(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "time":
        return dt.datetime.fromtimestamp(float(value), dt.UTC)
    if kind == "bool":
        return bool(value)
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    return str(value)


async def _hold(conn: Connection, term: Leadership) -> None:
    """Inside a leader's transaction: its term holds until the transaction ends, or it is refused."""
    if await conn.fetchval(Q["hold_term"], term.role, term.epoch, term.holder) is None:
        raise leadership_lost(term)


async def _insert(
    conn: Connection, table: str, values: dict[str, Any], types: dict[str, str], session_id: str
) -> None:
    names = list(values)
    # A NULL prune_check_at: the database clock now (see import_session).
    placeholders = [
        f"coalesce(${i}, clock_timestamp())" if name == "prune_check_at" else f"${i}::{_cast(types[name])}"
        for i, name in enumerate(names, 1)
    ]
    sql = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(placeholders)})"
    try:
        await conn.execute(sql, *[_value(types[name], values[name]) for name in names])
    except Exception as exc:  # the driver's integrity errors (class 23), whatever their class
        if not str(getattr(exc, "sqlstate", "")).startswith("23"):
            raise
        raise ConfigurationError(
            f"session {session_id}'s record cannot be restored: {table}: {exc} ({why_not_restored(str(exc))})"
        ) from None


def _cast(kind: str) -> str:
    return {
        "time": "timestamptz",
        "bool": "boolean",
        "int": "bigint",
        "float": "float8",
        "json": "json",
        "jsonb": "jsonb",
    }.get(kind, "text")
