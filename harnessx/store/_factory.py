"""The one store factory: a DSN (or a SQLite file's path) in, the store it names out.

Every command (``harnessx``, ``harness-worker``, ``harness-supervisor``, ``harnessx
console``) opens its store through ``store_for``. What it accepts:

- ``postgresql://...`` or ``postgres://...``: ``PostgresBackend`` (asyncpg imported then);
- ``sqlite:///relative/path`` or ``sqlite:////absolute/path`` (SQLAlchemy's form: the path
  is what follows the third slash), also ``sqlite:path``: ``SQLiteBackend``;
- anything without a ``scheme://``: the path of a SQLite file.

Another scheme is refused naming only the scheme: a DSN may hold a password.
"""

from __future__ import annotations

import re

from harnessx._errors import ConfigurationError
from harnessx.store._protocol import Store
from harnessx.store._sqlite import SQLiteBackend

__all__ = ["store_for"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def store_for(
    dsn: str,
    *,
    schema: str = "harness_x",
    lease_seconds: float = 30.0,
    auto_migrate: bool = True,
    read_only: bool = False,
    connect_timeout: float | None = None,
) -> Store:
    """The store ``dsn`` names, not yet opened (see the module's docstring).

    ``read_only``: for inspecting; it creates and migrates nothing (a missing SQLite file
    is an error) and reads even from a read-only file system. ``schema`` and
    ``connect_timeout`` (``None``: ``PostgresBackend``'s default) apply to PostgreSQL."""
    match = _SCHEME.match(dsn)
    scheme = match.group(1).lower() if match else None
    path = dsn
    if scheme in ("postgresql", "postgres"):
        from harnessx.store import PostgresBackend
        from harnessx.store._pg_driver import CONNECT_TIMEOUT

        backend: Store = PostgresBackend(
            dsn,
            schema=schema,
            lease_seconds=lease_seconds,
            auto_migrate=auto_migrate and not read_only,
            connect_timeout=CONNECT_TIMEOUT if connect_timeout is None else connect_timeout,
        )
        return backend
    if scheme == "sqlite":
        path = _sqlite_path(dsn[len("sqlite:") :])
    elif match is not None and dsn[match.end() :].startswith("//"):
        raise ConfigurationError(
            f"harnessx has no store for {scheme}:// DSNs: give postgresql://user:password@host:5432/"
            "database or sqlite:///path/to/file.sqlite3 (the value given is not shown, as it may hold "
            "a password)"
        )
    return SQLiteBackend(path, lease_seconds=lease_seconds, auto_migrate=auto_migrate, read_only=read_only)


def _sqlite_path(rest: str) -> str:
    """The file a SQLite DSN names, from what follows ``sqlite:``."""
    if rest.startswith("//"):
        if not rest.startswith("///"):
            # sqlite://host/path names a host: a SQLite file has none.
            raise ConfigurationError(
                "a SQLite DSN is sqlite:///relative/path or sqlite:////absolute/path (three slashes, "
                "then the file's path)"
            )
        rest = rest[3:]
    if not rest:
        raise ConfigurationError(
            "the SQLite DSN names no file: give sqlite:///relative/path or sqlite:////absolute/path"
        )
    return rest
