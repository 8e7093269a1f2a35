"""Read-only SQL the suite runs against the harnessx tables, for SQLite and PostgreSQL.

The suite writes run state only through ``AgentRuntime``; this module only reads: which
runs wait for the suite, which sessions a process holds at the moment of a fault, and
afterwards every row the checker needs. Reads on PostgreSQL ride out a server restart
(the suite restarts it on purpose) by retrying until the server is back.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import sqlite3
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

__all__ = ["Database", "Target", "open_database", "to_epoch"]

# name -> (SQLite, PostgreSQL); the same arguments in the same order for both.
QUERIES: dict[str, tuple[str, str]] = {
    # On PostgreSQL a running run's progress may be ahead of its row (schema 3): read it as
    # harnessx does, through runs_now.
    "runs": (
        "SELECT id, session_id, status, event_count, generation FROM runs",
        "SELECT id, session_id, status, event_count, generation FROM runs_now",
    ),
    "sessions": ("SELECT id, generation FROM sessions", "SELECT id, generation FROM sessions"),
    "events": (
        "SELECT run_id, seq, event_id, type, generation, created_at, data, step_id, attempt_id FROM events",
        # Retention leaves the events of a pruned run until their day is dropped (schema 22):
        # they are in its archive, and no longer the store's.
        "SELECT run_id, seq, event_id, type, generation, created_at, data, step_id, attempt_id FROM events e "
        "WHERE NOT EXISTS (SELECT 1 FROM pruned_runs p WHERE p.run_id = e.run_id)",
    ),
    "messages": (
        "SELECT session_id, seq, run_id, generation FROM messages",
        "SELECT session_id, seq, run_id, generation FROM messages",
    ),
    "tool_calls": (
        "SELECT execution_key, run_id, policy, status, approved, generation FROM tool_calls",
        "SELECT execution_key, run_id, policy, status, approved, generation FROM tool_calls",
    ),
    # Runs only the suite can move on: waiting or failed, not queued, nobody driving them.
    "needs_suite": (
        "SELECT r.id, r.session_id, r.status FROM runs r JOIN sessions s ON s.id = r.session_id "
        "WHERE r.status IN ('awaiting_input', 'failed', 'paused') AND r.queued_at IS NULL "
        "AND (s.lease_owner IS NULL OR s.lease_expires_at < ?)",
        "SELECT r.id, r.session_id, r.status FROM runs r JOIN sessions s ON s.id = r.session_id "
        "WHERE r.status IN ('awaiting_input', 'failed', 'paused') AND r.queued_at IS NULL "
        "AND (s.lease_owner IS NULL OR s.lease_expires_at < to_timestamp($1))",
    ),
    "completed_runs": (
        "SELECT id FROM runs WHERE status = 'completed'",
        "SELECT id FROM runs WHERE status = 'completed'",
    ),
    # Process ids are hex, so LIKE needs no escaping.
    "leased_by": (
        "SELECT id, generation FROM sessions WHERE lease_owner LIKE ? || '/%'",
        "SELECT id, generation FROM sessions WHERE lease_owner LIKE $1 || '/%'",
    ),
    "leased": (
        "SELECT id, generation FROM sessions WHERE lease_owner IS NOT NULL",
        "SELECT id, generation FROM sessions WHERE lease_owner IS NOT NULL",
    ),
    "worker_of_pid": (
        "SELECT id FROM workers WHERE pid = ? ORDER BY started_at DESC LIMIT 1",
        "SELECT id FROM workers WHERE pid = $1 ORDER BY started_at DESC LIMIT 1",
    ),
}


@dataclass(frozen=True)
class Target:
    """Where one scenario's harnessx state lives: a SQLite file, or a schema on a server."""

    kind: Literal["sqlite", "postgres"]
    location: str  # a path, or a postgresql:// DSN
    schema: str = "harness_x"

    def store_args(self) -> list[str]:
        """Arguments for ``harness-worker`` / ``harness-supervisor``. A PostgreSQL DSN is not
        one of them (see ``store_env``)."""
        if self.kind == "sqlite":
            return ["--sqlite", self.location]
        return ["--schema", self.schema]

    def store_env(self, dsn: str | None = None) -> dict[str, str]:
        """Environment for those processes: the DSN as ``HARNESSX_DSN``, since a command line
        is visible to every user of the machine and a DSN may carry a password; ``dsn``
        overrides the address (a worker behind a proxy)."""
        if self.kind == "sqlite":
            return {}
        return {"HARNESSX_DSN": dsn or self.location}

    def address(self) -> tuple[str, int]:
        parts = urlsplit(self.location)
        return parts.hostname or "127.0.0.1", parts.port or 5432

    def via(self, port: int) -> str:
        """The DSN with its host and port replaced by ``127.0.0.1:port``."""
        parts = urlsplit(self.location)
        userinfo, at, _ = parts.netloc.rpartition("@")
        return urlunsplit(parts._replace(netloc=f"{userinfo}{at}127.0.0.1:{port}"))


def to_epoch(value: Any) -> float:
    if isinstance(value, dt.datetime):
        return value.timestamp()
    return float(value)


class Database(ABC):
    dialect: str

    @abstractmethod
    async def fetch(self, name: str, *args: Any) -> list[tuple[Any, ...]]: ...

    @abstractmethod
    async def close(self) -> None: ...


class SQLiteDatabase(Database):
    dialect = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path

    def _fetch(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.path, timeout=120)
        try:
            return [tuple(row) for row in conn.execute(sql, args)]
        finally:
            conn.close()

    async def fetch(self, name: str, *args: Any) -> list[tuple[Any, ...]]:
        return await asyncio.to_thread(self._fetch, QUERIES[name][0], args)

    async def close(self) -> None:
        return None


class PostgresDatabase(Database):
    dialect = "postgres"

    def __init__(self, dsn: str, schema: str, *, outage_budget: float = 120.0) -> None:
        self.dsn = dsn
        self.schema = schema
        self.outage_budget = outage_budget
        self._pool: Any = None

    async def _connect(self) -> Any:
        import asyncpg  # type: ignore[import-untyped]

        return await asyncpg.create_pool(
            self.dsn,
            min_size=1,
            max_size=4,
            timeout=10,
            server_settings={"search_path": self.schema, "application_name": "chaos-suite"},
        )

    async def fetch(self, name: str, *args: Any) -> list[tuple[Any, ...]]:
        import asyncpg

        transient = (
            OSError,
            TimeoutError,
            asyncpg.PostgresConnectionError,
            asyncpg.CannotConnectNowError,
            asyncpg.AdminShutdownError,
            asyncpg.CrashShutdownError,
            asyncpg.InterfaceError,
            asyncpg.exceptions.InternalClientError,
        )
        deadline = time.monotonic() + self.outage_budget
        pause = 0.05
        while True:
            try:
                if self._pool is None:
                    self._pool = await self._connect()
                rows = await self._pool.fetch(QUERIES[name][1], *args)
                return [tuple(row) for row in rows]
            except transient:
                # The server is restarting (on purpose): wait for it, with a fresh pool.
                if time.monotonic() > deadline:
                    raise
                pool, self._pool = self._pool, None
                if pool is not None:
                    pool.terminate()
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


def open_database(target: Target) -> Database:
    if target.kind == "sqlite":
        return SQLiteDatabase(Path(target.location))
    return PostgresDatabase(target.location, target.schema)
