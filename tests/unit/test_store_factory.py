"""The one store factory: a DSN or a path in, the store it names out; bad DSNs refused
clearly, without quoting them (a DSN may hold a password)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harnessx import ConfigurationError
from harnessx.store import PostgresBackend, SQLiteBackend
from harnessx.store._factory import store_for


@pytest.mark.parametrize(
    ("dsn", "path"),
    [
        ("runs/state.sqlite3", "runs/state.sqlite3"),
        ("/var/lib/harnessx/state.sqlite3", "/var/lib/harnessx/state.sqlite3"),
        ("sqlite:///runs/state.sqlite3", "runs/state.sqlite3"),
        ("sqlite:////var/lib/harnessx/state.sqlite3", "/var/lib/harnessx/state.sqlite3"),
        ("sqlite:runs/state.sqlite3", "runs/state.sqlite3"),
        ("SQLite:///runs/state.sqlite3", "runs/state.sqlite3"),
    ],
)
def test_a_path_or_a_sqlite_dsn_opens_that_file(dsn: str, path: str) -> None:
    store = store_for(dsn, lease_seconds=7.0, read_only=True)
    assert isinstance(store, SQLiteBackend)
    assert store.path == Path(path) and store.lease_seconds == 7.0 and store.read_only


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_a_postgresql_dsn_opens_postgresql_with_the_options(scheme: str) -> None:
    dsn = f"{scheme}://app:pw@127.0.0.1:1/app"
    store = store_for(dsn, schema="other", connect_timeout=3.0, read_only=True)
    assert isinstance(store, PostgresBackend)
    assert (store.schema, store.connect_timeout, store.auto_migrate) == ("other", 3.0, False)
    assert "pw" not in repr(store)


@pytest.mark.parametrize(
    ("dsn", "advice"),
    [
        ("mysql://root:Hunter2Secret@db/app", "no store for mysql://"),
        ("sqlite://Hunter2Secret/app.sqlite3", "three slashes"),
        ("sqlite:///", "names no file"),
        ("sqlite:", "names no file"),
    ],
)
def test_a_dsn_no_store_serves_is_refused_without_quoting_it(dsn: str, advice: str) -> None:
    with pytest.raises(ConfigurationError, match=advice) as refused:
        store_for(dsn)
    assert "Hunter2Secret" not in str(refused.value)
    assert "sqlite:///" in str(refused.value)
