"""What the operator console reads and records, on SQLite (a part of ``SQLiteBackend``)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from harnessx._state import ToolEntry
from harnessx.store._codec import dumps, has_result_refs, run_row, tool_entries
from harnessx.store._listing import list_query
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

__all__ = ["SQLiteConsole"]

T = TypeVar("T")
Q = load_queries("sqlite")
_LOGIN_MEMORY = 86400.0  # expired sign-ins are forgotten a day later


class SQLiteConsole:
    """Mixed into ``SQLiteBackend``, whose ``_call`` runs a function on the database thread
    and ``_write`` makes it one write transaction."""

    if TYPE_CHECKING:

        async def _call(self, fn: Callable[..., T], *args: Any) -> T: ...

        def _write(self, conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], T]) -> T: ...

    async def list_runs(self, where: RunFilter, *, limit: int = 50, before: RunKey | None = None) -> RunPage:
        query = list_query("sqlite", where, limit=limit, before=before)
        rows = await self._call(lambda conn: conn.execute(query.sql, query.args).fetchall())
        runs = [run_row(row) for row in rows[:limit]]
        return RunPage(runs, runs[-1].key if len(rows) > limit else None)

    async def tool_calls(self, run_id: str) -> list[ToolEntry]:
        def read(conn: sqlite3.Connection) -> tuple[list[Any], dict[tuple[str, str], str]]:
            conn.execute("BEGIN")  # the calls and their large results from one commit
            try:
                rows = conn.execute(Q["run_tool_calls"], (run_id,)).fetchall()
                if not has_result_refs(rows):
                    return rows, {}
                found = conn.execute(Q["run_tool_results"], (run_id,)).fetchall()
                return rows, {(key, kind): body for key, kind, body in found}
            finally:
                conn.execute("COMMIT")

        rows, bodies = await self._call(read)
        return tool_entries(run_id, rows, bodies)

    async def record_scan(self, term: Leadership, *, scans: int, recovered: int) -> None:
        values = (time.time(), scans, recovered, term.role, term.epoch, term.holder)

        def body(conn: sqlite3.Connection) -> None:
            if conn.execute(Q["record_scan"], values).rowcount == 0:
                raise leadership_lost(term)

        await self._call(self._write, body)

    async def add_action(self, action: Action) -> None:
        action.at = time.time()
        values = (
            action.id,
            action.at,
            action.actor,
            action.via,
            action.action,
            action.session_id,
            action.run_id,
            action.execution_key,
            dumps(action.detail),
        )
        await self._call(self._write, lambda conn: conn.execute(Q["insert_action"], values))

    async def finish_action(self, action: Action) -> None:
        action.finished_at = time.time()
        values = (action.outcome, action.finished_at, dumps(action.detail), action.id)
        await self._call(self._write, lambda conn: conn.execute(Q["finish_action"], values))

    async def add_login(self, id_hash: str, name: str, role: str, token_id: str, seconds: float) -> None:
        def body(conn: sqlite3.Connection) -> None:
            now = time.time()
            conn.execute(Q["purge_logins"], (now - _LOGIN_MEMORY,))
            conn.execute(Q["insert_login"], (id_hash, name, role, token_id, now, now + seconds))

        await self._call(self._write, body)

    async def get_login(self, id_hash: str) -> Login | None:
        row = await self._call(lambda conn: conn.execute(Q["get_login"], (time.time(), id_hash)).fetchone())
        return None if row is None else Login(str(row[0]), str(row[1]), str(row[2]), bool(row[3]))

    async def end_login(self, id_hash: str) -> None:
        values = (time.time(), id_hash)
        await self._call(self._write, lambda conn: conn.execute(Q["end_login"], values))
