"""Databases written by the original harnessx 0.9.1: recognising them, and reading them.

The original keeps its state in the same places this harnessx does by default (SQLite at
``.agent_sessions/runtime.sqlite3``, PostgreSQL schema ``harness_x``), under table names
this schema also uses (``sessions``, ``runs``, ``events``) but with another layout: a JSON
``payload`` per session and per run holding the whole run state. A store that finds that
layout says what it is (``original_database_error``) instead of failing halfway through its
first migration with "relation sessions already exists".

``harnessx migrate --from-original`` moves the original's tables aside without deleting
anything (SQLite: each table renamed with the prefix ``harnessx_0_9_1_``; PostgreSQL: the
schema renamed to ``<schema>_0_9_1``), creates this harnessx's schema in their place, and
imports the sessions (``harnessx._from_original``), reading them with the functions here.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harnessx._errors import SchemaError, StorageError

if TYPE_CHECKING:
    from harnessx.store._pg_types import Connection

__all__ = [
    "ORIGINAL_TABLES",
    "SQLITE_PREFIX",
    "OriginalRun",
    "OriginalSession",
    "move_aside_sqlite",
    "original_database_error",
    "original_schema_name",
    "read_postgres",
    "read_sqlite",
    "sqlite_layout",
]

# The original's tables, in an order that renames or drops referencing tables first.
ORIGINAL_TABLES = (
    "journal",
    "events",
    "snapshots",
    "tool_outcomes",
    "approvals",
    "steps",
    "runs",
    "artifacts",
    "sessions",
    "schema_versions",
)
SQLITE_PREFIX = "harnessx_0_9_1_"
_SUFFIX = "_0_9_1"


@dataclass
class OriginalRun:
    """One run as the original stored it: its state dict and every tool entry it recorded."""

    id: str
    request_id: str
    status: str
    state: dict[str, Any]
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class OriginalSession:
    id: str
    payload: dict[str, Any]
    runs: list[OriginalRun] = field(default_factory=list)


def original_schema_name(schema: str) -> str:
    return f"{schema}{_SUFFIX}"


def original_database_error(where: str, command: str) -> SchemaError:
    """``command``: how to run ``harnessx migrate --from-original`` on this database."""
    return SchemaError(
        f"{where} holds the database of the original harnessx 0.9.1 (its tables sessions, runs, events "
        "with a JSON payload per row), which this harnessx does not read in place. To continue its "
        f"sessions here, run {command}: it keeps the original's tables (renamed), creates this "
        "harnessx's schema and imports every session, so that unfinished runs can be resumed. Or "
        "point this harnessx at another database (another SQLite file, or another PostgreSQL schema)."
    )


def sqlite_layout(conn: sqlite3.Connection) -> str | None:
    """``"original"`` when the original's tables are here in place, ``"moved"`` when only
    its renamed tables are, else ``None``."""
    names = {str(n) for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if {"schema_versions", "sessions", "runs"} <= names and "harnessx_migrations" not in names:
        columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(sessions)")}
        if "payload" in columns:
            return "original"
    if {f"{SQLITE_PREFIX}sessions", f"{SQLITE_PREFIX}runs"} <= names:
        return "moved"
    return None


def move_aside_sqlite(path: Path) -> None:
    """Rename the original's tables in ``path`` (one transaction), freeing their names."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if sqlite_layout(conn) != "original":
                raise StorageError(f"{path} does not hold the original harnessx's tables in place")
            present = {str(n) for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            for table in ORIGINAL_TABLES:
                if table in present:
                    conn.execute(f'ALTER TABLE "{table}" RENAME TO "{SQLITE_PREFIX}{table}"')
            # The original's index runs_session moves with its table; no name of ours collides.
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()


def _decoded(text: Any, what: str) -> Any:
    if isinstance(text, dict | list):
        return text
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise StorageError(
            f"the original harnessx's {what} is not JSON ({exc}); it cannot be imported"
        ) from exc


def _assemble(
    sessions: Sequence[tuple[Any, Any]],
    runs: Sequence[tuple[Any, Any, Any, Any, Any]],
    entries: Sequence[tuple[Any, Any, Any]],
) -> list[OriginalSession]:
    """Sessions with their runs, in the order they ran (each later run's conversation
    extends the one before), and each run's recorded tool entries (a completed outcome wins
    over an earlier approval or dispatch record)."""
    found = {
        str(sid): OriginalSession(str(sid), _decoded(payload, f"session {sid}")) for sid, payload in sessions
    }
    by_run: dict[str, OriginalRun] = {}
    for run_id, session_id, request_id, status, payload in runs:
        session = found.get(str(session_id))
        if session is None:
            continue
        run = OriginalRun(str(run_id), str(request_id), str(status), _decoded(payload, f"run {run_id}"))
        session.runs.append(run)
        by_run[run.id] = run
    for run_id, key, payload in entries:
        owner = by_run.get(str(run_id))
        entry = _decoded(payload, f"tool entry {key}")
        if owner is not None and isinstance(entry, dict):
            previous = owner.entries.get(str(key))
            if previous is None or _rank(entry) >= _rank(previous):
                owner.entries[str(key)] = entry
    for session in found.values():
        session.runs.sort(
            key=lambda r: (len(r.state.get("messages") or []), r.id == session.payload.get("last_run_id"))
        )
    return list(found.values())


_RANKS = {"prepared": 0, "approval": 1, "started": 2, "uncertain": 3, "raw_completed": 4, "completed": 5}


def _rank(entry: dict[str, Any]) -> int:
    return _RANKS.get(str(entry.get("status")), -1)


def read_sqlite(path: Path, prefix: str = SQLITE_PREFIX) -> list[OriginalSession]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        sessions = conn.execute(f'SELECT id, payload FROM "{prefix}sessions"').fetchall()
        runs = conn.execute(
            f'SELECT id, session_id, request_id, status, payload FROM "{prefix}runs"'
        ).fetchall()
        entries = [
            *conn.execute(f'SELECT run_id, id, payload FROM "{prefix}approvals"').fetchall(),
            *conn.execute(f'SELECT run_id, id, payload FROM "{prefix}tool_outcomes"').fetchall(),
        ]
    finally:
        conn.close()
    return _assemble(sessions, runs, entries)


async def read_postgres(conn: Connection, schema: str) -> list[OriginalSession]:
    """The original's sessions in ``schema``, read on an asyncpg connection."""
    qualified = '"' + schema.replace('"', '""') + '"'
    sessions = await conn.fetch(f"SELECT id, payload::text FROM {qualified}.sessions")
    runs = await conn.fetch(f"SELECT id, session_id, request_id, status, payload::text FROM {qualified}.runs")
    entries = [
        *await conn.fetch(f"SELECT run_id, id, payload::text FROM {qualified}.approvals"),
        *await conn.fetch(f"SELECT run_id, id, payload::text FROM {qualified}.tool_outcomes"),
    ]
    return _assemble([tuple(r) for r in sessions], [tuple(r) for r in runs], [tuple(r) for r in entries])
