"""The PostgreSQL store's schema (a part of ``PostgresBackend``): migrating and verifying
it, moving a database of the original harnessx aside, and the advice that names the command
to run or the privilege to grant when the role may not do what is needed.
"""

from __future__ import annotations

import logging
import shlex

from harnessx._errors import (
    ConfigurationError,
    SchemaError,
)
from harnessx.store._migrations import (
    Migration,
    MigrationReport,
    check_applied,
    check_objects,
    load_migrations,
    pending,
    report,
)
from harnessx.store._original import (
    OriginalSession,
    original_database_error,
    original_schema_name,
    read_postgres,
)
from harnessx.store._pg_driver import (
    DRIVER_ERRORS,
    asyncpg,
    close_quietly,
)
from harnessx.store._pg_execution import DEFAULT_SCHEMA, PostgresExecution, quote_ident, runtime_grants
from harnessx.store._pg_types import Connection
from harnessx.store._queries import load_queries

__all__ = ["PostgresSchema", "check_schema_name"]

logger = logging.getLogger("harnessx.store.postgres")

Q = load_queries("postgres")

_MAX_IDENTIFIER_BYTES = 63  # PostgreSQL silently truncates longer names
# The longest a migration's clean-up waits for a lock (as long as the migrations themselves
# wait for theirs: 0018 sets the same in its parts).
_LOCK_WAIT = "5s"


def check_schema_name(schema: str) -> None:
    if not isinstance(schema, str) or not schema or "\x00" in schema:
        raise ConfigurationError("schema must be a non-empty string without NUL characters")
    if schema.startswith("pg_") or schema == "information_schema":
        raise ConfigurationError(
            f"schema {schema!r} is one of PostgreSQL's own (pg_* and information_schema are reserved "
            f"for the system): give harnessx a schema of its own, e.g. the default {DEFAULT_SCHEMA!r}"
        )
    if len(schema.encode("utf-8")) > _MAX_IDENTIFIER_BYTES:
        raise ConfigurationError(
            f"schema name {schema!r} is longer than PostgreSQL's {_MAX_IDENTIFIER_BYTES}-byte limit"
        )


class PostgresSchema(PostgresExecution):
    """Migrations and their checks, on a connection of their own or a pooled one."""

    @property
    def _recreate(self) -> str:
        return (
            f"start over, losing every session in it: DROP SCHEMA {quote_ident(self.schema)} CASCADE, "
            f"then run {self._migrate_command}"
        )

    async def migrate(self, *, validate_only: bool = False) -> MigrationReport:
        """Apply the migrations this database lacks (also run by ``initialize`` by default).
        Works on a backend that was never opened, e.g. from the ``harnessx migrate`` command.
        ``validate_only=True`` changes nothing (no privilege to create is needed): it raises
        ``SchemaError`` when the schema is missing, older or altered."""
        work = self._validate_on if validate_only else self._migrate_on
        if self._pool is not None:
            return await self._run("migrating the schema", work)
        conn = await self._with_retries("connecting", lambda within: self._connect("migrate", within))
        try:
            with self._translated("migrating the schema"):
                return await work(conn)
        finally:
            await close_quietly(conn)

    async def prepare_from_original(self) -> str:
        """Move the original harnessx's tables out of this schema (``ALTER SCHEMA ... RENAME``
        to ``<schema>_0_9_1``; nothing is deleted) and return where they are now: done
        already, that is where they are. Call before ``migrate`` on a backend not yet open."""
        moved = original_schema_name(self.schema)
        conn = await self._with_retries("connecting", lambda within: self._connect("migrate", within))
        try:
            with self._translated("moving the original harnessx's tables aside"):
                if await conn.fetchval(Q["original_layout"], self.schema):
                    if await conn.fetchval(Q["schema_exists"], moved):
                        raise SchemaError(
                            f"{self._where} holds the original harnessx's tables, and schema {moved!r}, "
                            "where they would go, exists already: rename or drop that schema first"
                        )
                    await conn.execute(
                        f"ALTER SCHEMA {quote_ident(self.schema)} RENAME TO {quote_ident(moved)}"
                    )
                    logger.info("moved the original harnessx's schema %s to %s", self.schema, moved)
                elif not await conn.fetchval(Q["original_layout"], moved):
                    raise ConfigurationError(
                        f"neither schema {self.schema!r} nor {moved!r} on {self._dsn.redacted} holds a "
                        "database of the original harnessx 0.9.1: check --schema and HARNESSX_DSN"
                    )
        finally:
            await close_quietly(conn)
        return moved

    async def read_original_sessions(self, where: str) -> list[OriginalSession]:
        """The original harnessx's sessions in schema ``where``, with their runs."""
        conn = await self._with_retries("connecting", lambda within: self._connect("import", within))
        try:
            with self._translated("reading the original harnessx's sessions"):
                return await read_postgres(conn, where)
        finally:
            await close_quietly(conn)

    async def _validate_on(self, conn: Connection) -> MigrationReport:
        await self._verify_on(conn)
        return report(self._where, await self._read_applied(conn) or {}, [])

    async def _read_applied(self, conn: Connection) -> dict[int, str] | None:
        user, schema_exists, usage, table_exists = await conn.fetchrow(Q["schema_state"], self.schema)
        if schema_exists and not usage:
            # Without USAGE the search path skips the schema, and every table in it reads as
            # missing: say what is missing instead.
            raise SchemaError(self._usage_advice(user, table_exists))
        if not table_exists:
            return None
        return {int(v): str(c) for v, c in await conn.fetch(Q["applied_migrations"])}

    def _usage_advice(self, user: str, migrated: bool) -> str:
        grants = runtime_grants(self.schema, user)
        if migrated:
            return (
                f"role {user!r} may not use schema {self.schema!r} on {self._dsn.redacted} (no USAGE "
                f"privilege on it; its owner has migrated it): as the schema's owner, run: {grants}"
            )
        return (
            f"role {user!r} may not use schema {self.schema!r} on {self._dsn.redacted} (no USAGE "
            f"privilege on it): GRANT USAGE, CREATE ON SCHEMA {quote_ident(self.schema)} TO "
            f"{quote_ident(user)} to let it migrate, or have the schema's owner run "
            f"{self._migrate_command} and then: {grants}"
        )

    async def _check_objects(self, conn: Connection) -> None:
        present = {str(name) for (name,) in await conn.fetch(Q["schema_objects"], self.schema)}
        check_objects("postgres", present, self._where, self._recreate)

    async def _migrate_on(self, conn: Connection) -> MigrationReport:
        # Fast path without locks or DDL, so an up-to-date schema needs no CREATE privilege.
        applied = await self._read_applied(conn)
        if applied is None:
            await self._refuse_original(conn)
        if applied is not None:
            check_applied("postgres", applied, self._where, self._recreate)
            if not pending("postgres", applied):
                await self._check_objects(conn)
                return report(self._where, applied, [])
        # Parts a migration runs before the transaction, each on its own (see _migrations):
        # those of every migration this database lacked when we looked.
        waiting = pending("postgres", applied or {})
        if any(migration.before for migration in waiting):
            await self._check_may_migrate(conn)
        running: Migration | None = None
        try:
            for running in waiting:
                for part in running.before:
                    await conn.execute(part)
            running = None
            # A transaction of a running worker can deadlock with it (0018's swap holds events
            # and then wants runs): the server fails one of the two, and the migrations'
            # transaction, changing nothing until it commits, can simply go again.
            done = await self._until_no_conflict("migrating the schema", lambda: self._apply(conn))
        except Exception as exc:
            undone = await self._take_back(conn, waiting)
            if isinstance(exc, asyncpg.exceptions.LockNotAvailableError):
                raise await self._lock_advice(conn, exc, running, waiting, undone) from exc
            raise
        for migration in done.applied:
            for part in migration.after:
                try:
                    await conn.execute(part)
                except DRIVER_ERRORS as exc:  # applied all the same: what it does is done again later
                    logger.warning(
                        "migration %04d_%s: a part after its commit failed (%s); it is done later",
                        migration.version,
                        migration.name,
                        self._describe(exc),
                    )
        return done

    async def _take_back(self, conn: Connection, waiting: list[Migration]) -> list[Migration]:
        """Run the on-failure parts of the migrations that were pending (each takes back what
        its parts before the transaction left, if they left anything); the migrations whose
        part could not run. Each waits at most _LOCK_WAIT for its locks: one waiting longer
        (for the transaction that made the migration fail, say) would hold up every statement
        on the table behind it."""
        failed = []
        for migration in waiting:
            if migration.on_failure is None:
                continue
            try:
                async with conn.transaction():
                    await conn.execute(f"SET LOCAL lock_timeout = '{_LOCK_WAIT}'")
                    await conn.execute(migration.on_failure)
            except DRIVER_ERRORS as exc:
                logger.warning(
                    "migration %04d_%s: taking back its first parts after the failure failed (%s)",
                    migration.version,
                    migration.name,
                    self._describe(exc),
                )
                failed.append(migration)
        return failed

    async def _lock_advice(
        self,
        conn: Connection,
        exc: BaseException,
        running: Migration | None,
        waiting: list[Migration],
        undone: list[Migration],
    ) -> SchemaError:
        """A migration waited its longest for a lock on a table others were using: name the
        migration, the sessions that hold locks on the schema's tables (longest transaction
        first), and what to do."""
        if running is not None:
            which = f"migration {running.version:04d}_{running.name}"
        else:
            names = ", ".join(f"{m.version:04d}_{m.name}" for m in waiting)
            which = f"the migrations' transaction (applying {names})"
        try:
            holders = [tuple(row) for row in await conn.fetch(Q["lock_holders"], self.schema)]
        except DRIVER_ERRORS:  # the advice goes out without the list
            holders = []
        described = "; ".join(
            f"pid {pid} ({app or 'no application name'}, {state or 'state hidden'}"
            + (f", its transaction open {age:.0f} s" if age is not None else "")
            + f", a lock on {table})"
            for pid, app, state, age, table in holders
        )
        held = f" Sessions holding locks on its tables now: {described}." if described else ""
        if undone:
            names = ", ".join(f"{m.version:04d}_{m.name}" for m in undone)
            left = (
                f" What {names} did before its transaction stays (its clean-up needs the same lock): "
                "run the migration again soon, it resumes from there (docs/operations.md, "
                "'Partitioned events')."
            )
        else:
            left = " Nothing was changed."
        return SchemaError(
            f"{which} on {self._where} could not take a lock within {_LOCK_WAIT}: another transaction "
            f"is using a table it changes ({self._describe(exc)}).{left}{held} Let that transaction end "
            "(a long report, or a session left idle in transaction; SELECT pg_terminate_backend(pid) "
            f"ends one), then run {self._migrate_command} again."
        )

    async def _apply(self, conn: Connection) -> MigrationReport:
        async with conn.transaction():
            # Concurrent starters queue here; each re-reads what the previous one applied.
            await conn.execute(Q["lock_migrations"], f"harnessx:migrate:{self.schema}")
            await self._check_may_migrate(conn)
            if not await conn.fetchval(Q["schema_exists"], self.schema):
                await conn.execute(f"CREATE SCHEMA {quote_ident(self.schema)}")
            await conn.execute(Q["create_migrations_table"])
            applied = await self._read_applied(conn) or {}
            check_applied("postgres", applied, self._where, self._recreate)
            done = pending("postgres", applied)
            for migration in done:
                await conn.execute(migration.body)
                await conn.execute(
                    Q["record_migration"], migration.version, migration.name, migration.checksum
                )
                logger.info("applied migration %04d_%s to %s", migration.version, migration.name, self._where)
            for migration in done:
                if migration.last:
                    await conn.execute(migration.last)
        return report(self._where, applied, done)

    async def _check_may_migrate(self, conn: Connection) -> None:
        """Name the privilege to grant before DDL fails with a bare 'permission denied'."""
        user, database, on_database, on_schema = await conn.fetchrow(Q["privileges"], self.schema)
        role = quote_ident(user)
        if on_schema is None and not on_database:
            raise SchemaError(
                f"role {user!r} may not create schema {self.schema!r} in database {database!r} on "
                f"{self._dsn.redacted}: GRANT CREATE ON DATABASE {quote_ident(database)} TO {role}, or "
                f"create the schema as its owner (CREATE SCHEMA {quote_ident(self.schema)} AUTHORIZATION "
                f"{role}), or have a privileged role run {self._migrate_command} (and then grant this "
                f"role what running sessions needs: {runtime_grants(self.schema, user)})"
            )
        if on_schema is False:
            raise SchemaError(
                f"role {user!r} may not create tables in schema {self.schema!r} on {self._dsn.redacted}: "
                f"GRANT USAGE, CREATE ON SCHEMA {quote_ident(self.schema)} TO {role}, or have the schema's "
                f"owner run {self._migrate_command} (and then grant this role what running sessions "
                f"needs: {runtime_grants(self.schema, user)})"
            )

    async def _refuse_original(self, conn: Connection) -> None:
        if await conn.fetchval(Q["original_layout"], self.schema):
            raise original_database_error(self._where, self._from_original_command)

    @property
    def _from_original_command(self) -> str:
        command = "harnessx migrate --from-original"
        if self.schema != DEFAULT_SCHEMA:
            command += f" --schema {shlex.quote(self.schema)}"
        return f"'{command}' with HARNESSX_DSN set to {self._dsn.redacted}"

    async def _verify_on(self, conn: Connection) -> None:
        latest = load_migrations("postgres")[-1].version
        applied = await self._read_applied(conn)
        if applied is None:
            await self._refuse_original(conn)
            raise SchemaError(
                f"{self._where} has no harnessx schema (version 0; this harnessx needs version {latest}): "
                f"run {self._migrate_command} or open the backend with auto_migrate=True"
            )
        check_applied("postgres", applied, self._where, self._recreate)
        if pending("postgres", applied):
            raise SchemaError(
                f"{self._where} is at schema version {max(applied, default=0)}, this harnessx needs "
                f"version {latest}: run {self._migrate_command}"
            )
        await self._check_objects(conn)
