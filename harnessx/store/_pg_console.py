"""What the operator console reads and records, on PostgreSQL (a part of ``PostgresBackend``)."""

from __future__ import annotations

import datetime as dt
from typing import Any, TypeVar

from harnessx._state import ToolEntry
from harnessx.store._codec import dumps, has_result_refs, run_row, tool_entries
from harnessx.store._listing import list_query
from harnessx.store._pg_execution import PostgresExecution
from harnessx.store._pg_types import Connection
from harnessx.store._protocol import (
    Action,
    Leadership,
    Login,
    RunFilter,
    RunKey,
    RunPage,
    leadership_lost,
)
from harnessx.store._queries import load_queries

__all__ = ["PostgresConsole"]

T = TypeVar("T")
Q = load_queries("postgres")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _timestamp(value: float | int, exact: bool = False) -> dt.datetime:
    """Epoch seconds (a filter), or with ``exact`` epoch microseconds (a cursor), as a
    timestamptz parameter; microseconds are converted without a float in between."""
    if exact:
        return _EPOCH + dt.timedelta(microseconds=int(value))
    return dt.datetime.fromtimestamp(float(value), dt.UTC)


class PostgresConsole(PostgresExecution):
    """Mixed into ``PostgresBackend``, whose ``_run`` runs an operation on a pooled
    connection with retries."""

    async def list_runs(self, where: RunFilter, *, limit: int = 50, before: RunKey | None = None) -> RunPage:
        query = list_query("postgres", where, limit=limit, before=before, time=_timestamp)
        rows = await self._run("listing runs", lambda conn: conn.fetch(query.sql, *query.args))
        runs = [run_row(tuple(row)) for row in rows[:limit]]
        return RunPage(runs, runs[-1].key if len(rows) > limit else None)

    async def tool_calls(self, run_id: str) -> list[ToolEntry]:
        async def read(conn: Connection) -> tuple[list[tuple[Any, ...]], dict[tuple[str, str], str]]:
            # The calls and their large results from one snapshot.
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                rows = [tuple(r) for r in await conn.fetch(Q["run_tool_calls"], run_id)]
                if not has_result_refs(rows):
                    return rows, {}
                found = await conn.fetch(Q["run_tool_results"], run_id)
                return rows, {(key, kind): text for key, kind, text in found}

        rows, bodies = await self._run("reading tool calls", read)
        return tool_entries(run_id, rows, bodies)

    async def record_scan(self, term: Leadership, *, scans: int, recovered: int) -> None:
        status = await self._run(
            "recording a scan",
            lambda conn: conn.execute(Q["record_scan"], scans, recovered, term.role, term.epoch, term.holder),
        )
        if status == "UPDATE 0":
            raise leadership_lost(term)

    async def add_action(self, action: Action) -> None:
        args = (
            action.id,
            action.actor,
            action.via,
            action.action,
            action.session_id,
            action.run_id,
            action.execution_key,
            dumps(action.detail),
        )
        action.at = await self._run(
            "recording an operator action", lambda conn: conn.fetchval(Q["insert_action"], *args)
        )

    async def finish_action(self, action: Action) -> None:
        args = (action.id, action.outcome, dumps(action.detail))
        await self._run("recording how an action ended", lambda conn: conn.execute(Q["finish_action"], *args))

    async def add_login(self, id_hash: str, name: str, role: str, token_id: str, seconds: float) -> None:
        async def add(conn: Connection) -> None:
            await conn.execute(Q["purge_logins"])
            await conn.execute(Q["insert_login"], id_hash, name, role, token_id, float(seconds))

        await self._run("recording a sign-in", add)

    async def get_login(self, id_hash: str) -> Login | None:
        row = await self._run("reading a sign-in", lambda conn: conn.fetchrow(Q["get_login"], id_hash))
        return None if row is None else Login(str(row[0]), str(row[1]), str(row[2]), bool(row[3]))

    async def end_login(self, id_hash: str) -> None:
        await self._run("ending a sign-in", lambda conn: conn.execute(Q["end_login"], id_hash))
