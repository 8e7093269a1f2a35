"""The SQLite store's file (a part of ``SQLiteBackend``): opening it in WAL mode,
migrating and verifying its schema, its liveness lock, and the one thread every SQLite call
runs on, where driver errors become harnessx errors.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import sqlite3
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from harnessx._errors import (
    ConfigurationError,
    SchemaError,
    StorageError,
)
from harnessx.store._core import (
    Row,
    StoreCore,
)
from harnessx.store._migrations import MigrationReport, check_applied, check_objects, pending, report
from harnessx.store._original import (
    SQLITE_PREFIX,
    OriginalSession,
    move_aside_sqlite,
    original_database_error,
    read_sqlite,
    sqlite_layout,
)
from harnessx.store._queries import load_queries
from harnessx.store._records import (
    Leadership,
)

__all__ = ["SQLiteFile"]

T = TypeVar("T")
Q = load_queries("sqlite")

_OBJECTS = "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS harnessx_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    checksum   TEXT NOT NULL,
    applied_at REAL NOT NULL
)"""


class SQLiteFile(StoreCore):
    """The base of ``SQLiteBackend``'s parts: its file, its thread and its schema."""

    # Set by SQLiteBackend.__init__.
    path: Path
    auto_migrate: bool
    busy_timeout: float
    synchronous: str
    read_only: bool
    process_id: str
    _executor: ThreadPoolExecutor | None
    _conn: sqlite3.Connection | None
    _user_conn: sqlite3.Connection | None
    _liveness: int | None
    _leaderships: dict[str, tuple[int, Leadership]]

    @property
    def owners_dir(self) -> Path:
        return self.path.with_name(self.path.name + ".owners")

    async def initialize(self) -> None:
        if self._conn is not None:
            return
        if self._closed:
            # Opened again after aclose() (a second ``async with``, as harnessx 0.9.1
            # allows): as a new process, so that the leases this one held before it closed
            # count as a dead holder's and are recovered, not taken for live ones.
            self._closed = False
            self.process_id = uuid.uuid4().hex
        if self.auto_migrate:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif not self.path.exists():
            # Only migrating creates a database: a mistyped path is an error, not a new file.
            raise SchemaError(
                f"no SQLite database at {self.path}: check the path, or create one with "
                f"'{self._migrate_command}'"
            )
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harnessx-sqlite")
        try:
            await self._call(self._open)
            if self.auto_migrate:
                await self._call(self._migrate)
            else:
                await self._call(self._verify)
        except BaseException:
            await self._shutdown()
            raise
        if not self.read_only:
            self._hold_liveness_lock()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._user_conn is not None:
            self._user_conn.close()
            self._user_conn = None
        await self._shutdown()
        for fd, _ in self._leaderships.values():
            os.close(fd)  # drops the lock; the term is fenced by the next taker's epoch
        self._leaderships.clear()
        if self._liveness is not None:
            lock_path = self.owners_dir / f"{self.process_id}.lock"
            os.close(self._liveness)  # closing the descriptor drops the flock
            self._liveness = None
            lock_path.unlink(missing_ok=True)

    async def _shutdown(self) -> None:
        if self._executor is None:
            return
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await asyncio.get_running_loop().run_in_executor(self._executor, conn.close)
        self._executor.shutdown(wait=True)
        self._executor = None

    async def prepare_from_original(self) -> str:
        """Rename the original harnessx's tables in this file (prefix ``harnessx_0_9_1_``;
        nothing is deleted) and return that prefix: done already, the prefix of the tables
        found. Call before ``migrate`` on a backend not yet open."""

        def move() -> str:
            if not self.path.exists():
                raise ConfigurationError(
                    f"{self.path} does not exist: nothing of the original harnessx to import"
                )
            conn = sqlite3.connect(self.path)
            try:
                layout = sqlite_layout(conn)
            finally:
                conn.close()
            if layout == "original":
                move_aside_sqlite(self.path)
            elif layout != "moved":
                raise ConfigurationError(
                    f"{self.path} holds no database of the original harnessx 0.9.1: check --sqlite"
                )
            return SQLITE_PREFIX

        return await asyncio.to_thread(move)

    async def read_original_sessions(self, where: str) -> list[OriginalSession]:
        """The original harnessx's sessions in the tables of prefix ``where``."""
        return await asyncio.to_thread(read_sqlite, self.path, where)

    @property
    def conn(self) -> sqlite3.Connection | None:
        """A connection of your own to this database file (``None`` until the backend is
        open), as the original harnessx exposes one: reading through it is safe; writing
        bypasses the lease fences that keep runs consistent. Closed with the backend."""
        if self._conn is None:
            return None
        if self._user_conn is None:
            self._user_conn = sqlite3.connect(self.path, timeout=self.busy_timeout, check_same_thread=False)
        return self._user_conn

    async def migrate(self, *, validate_only: bool = False) -> MigrationReport:
        """Apply the migrations this database lacks (also run by ``initialize`` by default).
        Works on a backend that was never opened, e.g. from the ``harnessx migrate`` command:
        it creates the file and its folder if needed. ``validate_only=True`` changes nothing:
        it raises ``SchemaError`` when the schema is missing, older or altered."""
        if validate_only:
            return await self._validated()
        if self._executor is not None:
            return await self._call(self._migrate)
        if self._closed or self.read_only:
            raise StorageError("this SQLiteBackend is closed or read-only: it cannot migrate")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harnessx-sqlite")
        try:
            await self._call(self._open)
            return await self._call(self._migrate)
        finally:
            await self._shutdown()

    def _open(self) -> None:
        try:
            if self.read_only:
                conn = self._connect_read_only()
            else:
                conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
                if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:
                    # A new database keeps the pages deleting frees for incremental vacuum (see
                    # reclaim_space); it can only be chosen before the first table, and WAL.
                    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
                conn.execute("PRAGMA journal_mode=WAL").fetchone()
                conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as exc:
            may = "read it" if self.read_only else "write to it and to its folder"
            raise StorageError(
                f"cannot open SQLite database {self.path} ({exc}): check that the path is a harnessx "
                f"database and that this user may {may}"
            ) from exc
        self._conn = conn

    def _connect_read_only(self) -> sqlite3.Connection:
        """``mode=ro``; on a read-only file system also ``immutable``, since SQLite cannot
        create the WAL index there and nothing can change the file under us anyway."""
        uri = f"{self.path.resolve().as_uri()}?mode=ro"
        if os.statvfs(self.path).f_flag & os.ST_RDONLY:
            uri += "&immutable=1"
        return sqlite3.connect(uri, uri=True, timeout=self.busy_timeout, isolation_level=None)

    def _applied(self, conn: sqlite3.Connection) -> dict[int, str] | None:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'harnessx_migrations'"
        ).fetchone()
        if not exists:
            return None
        return {int(v): str(c) for v, c in conn.execute("SELECT version, checksum FROM harnessx_migrations")}

    def _migrate(self, conn: sqlite3.Connection) -> MigrationReport:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if sqlite_layout(conn) == "original":
                raise original_database_error(str(self.path), self._from_original_command)
            conn.execute(_MIGRATIONS_TABLE)
            applied = self._applied(conn) or {}
            check_applied("sqlite", applied, str(self.path), self._recreate)
            done = pending("sqlite", applied)
            for migration in done:
                for statement in _statements(migration.sql):
                    conn.execute(statement)
                conn.execute(
                    Q["record_migration"],
                    (migration.version, migration.name, migration.checksum, time.time()),
                )
            if not done:
                self._check_objects(conn)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return report(str(self.path), applied, done)

    def _check_objects(self, conn: sqlite3.Connection) -> None:
        present = {str(name) for (name,) in conn.execute(_OBJECTS)}
        check_objects("sqlite", present, str(self.path), self._recreate)

    async def _validated(self) -> MigrationReport:
        """``migrate(validate_only=True)``: the checks ``auto_migrate=False`` makes, no change."""
        if self._executor is not None:
            await self._call(self._verify)
            return await self._call(lambda conn: report(str(self.path), self._applied(conn) or {}, []))
        if not self.path.exists():
            raise SchemaError(f"{self.path} does not exist: run '{self._migrate_command}' to create it")
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harnessx-sqlite")
        try:
            await self._call(self._open)
            await self._call(self._verify)
            return await self._call(lambda conn: report(str(self.path), self._applied(conn) or {}, []))
        finally:
            await self._shutdown()

    def _verify(self, conn: sqlite3.Connection) -> None:
        applied = self._applied(conn)
        if applied is None and sqlite_layout(conn) == "original":
            raise original_database_error(str(self.path), self._from_original_command)
        if applied is None:
            raise SchemaError(
                f"{self.path} has no harnessx schema: run '{self._migrate_command}' or open the backend "
                "with auto_migrate=True"
            )
        check_applied("sqlite", applied, str(self.path), self._recreate)
        missing = pending("sqlite", applied)
        if missing:
            raise SchemaError(
                f"{self.path} is at schema version {max(applied, default=0)}, this harnessx needs "
                f"{missing[-1].version}: run '{self._migrate_command}'"
            )
        self._check_objects(conn)

    @property
    def _migrate_command(self) -> str:
        return f"harnessx migrate --sqlite {self.path}"

    @property
    def _from_original_command(self) -> str:
        return f"'harnessx migrate --from-original --sqlite {self.path}'"

    @property
    def _recreate(self) -> str:
        return (
            f"start over, losing every session in it: move {self.path} (and any -wal and -shm file "
            f"beside it) aside, then run '{self._migrate_command}'"
        )

    def _hold_liveness_lock(self) -> None:
        self.owners_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.owners_dir / f"{self.process_id}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._liveness = fd

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._executor is None:
            raise StorageError("the SQLiteBackend is not open: use 'async with' or await initialize()")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._guarded, fn, args)

    def _guarded(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        conn = self._conn
        if conn is None and fn != self._open:
            raise StorageError("the SQLiteBackend is closed")
        try:
            return fn(conn, *args) if fn != self._open else fn()
        except (sqlite3.OperationalError, sqlite3.DatabaseError) as exc:
            raise _translate(exc, self.path) from exc

    def _write(self, conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], T]) -> T:
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = body(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    # The core's primitives (``_core``): one named statement on the database thread.

    async def _one(self, what: str, query: str, *args: Any) -> Row | None:
        row: Row | None = await self._call(lambda conn: conn.execute(Q[query], args).fetchone())
        return row

    async def _all(self, what: str, query: str, *args: Any) -> list[Row]:
        return await self._call(lambda conn: conn.execute(Q[query], args).fetchall())

    async def _change(self, what: str, query: str, *args: Any) -> None:
        await self._call(self._write, lambda conn: conn.execute(Q[query], args))


def _statements(script: str) -> list[str]:
    """Split a migration into statements: up to each ';' that completes one (SQLite's own
    test, so a trigger's body, whose statements end in ';' too, stays whole)."""
    statements, pending = [], ""
    for line in script.splitlines():
        if line.strip().startswith("--"):
            continue
        pending += line + "\n"
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip():
        statements.append(pending.strip())
    return statements


def _translate(exc: sqlite3.Error, path: Path) -> StorageError:
    text = str(exc)
    if "no such table" in text or "no such column" in text:
        return SchemaError(
            f"{path} is missing part of the harnessx schema ({text}): run 'harnessx migrate --sqlite "
            f"{path}', which adds what is missing, or says how to repair it when migrating cannot"
        )
    if "locked" in text or "busy" in text:
        return StorageError(
            f"{path} stayed locked by another process longer than the busy timeout ({text}); retry"
        )
    return StorageError(f"SQLite error on {path}: {text}")
