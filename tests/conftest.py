"""Session-wide PostgreSQL for tests, and the backend a durable test runs on.

``postgres_dsn`` is ``$HARNESSX_TEST_DSN`` if set, otherwise a throwaway cluster started
once per session (see ``harnessx.testing``). When PostgreSQL is unavailable the tests
that need it are skipped with the reason, or fail when ``CI=true`` or
``HARNESSX_REQUIRE_POSTGRES=1``. ``pg_database`` gives each test its own fresh database.
``target`` runs a test once per backend: a real SQLite file and a real PostgreSQL database.

Tests that take seconds are marked ``slow``, so that ``pytest -m "not slow"`` runs the rest
quickly: every test of the tiers in ``SLOW_TIERS`` (child processes, servers, a browser, the
original harnessx), every test marked ``process``, and the few elsewhere that are marked
``slow`` by hand (over about 2 s; measure with ``pytest --durations=30``).
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import NoReturn

import pytest
from durable_support import BackendTarget

from harnessx.testing import (
    ClusterError,
    ThrowawayCluster,
    dsn_with_database,
    find_pg_bin,
    quote_ident,
    run_psql,
)

_db_counter = itertools.count(1)

TESTS = Path(__file__).resolve().parent
# Folders under tests/ whose every test is slow: real worker and supervisor processes, kill -9,
# Chromium, a Temporal dev server, Prometheus, systemd tools, the original harnessx 0.9.1, a
# real model in llama-server (a -m on the command line replaces addopts' "not realmodel").
SLOW_TIERS = frozenset({"chaos", "compat", "deploy", "process", "realmodel", "temporal"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = item.path.relative_to(TESTS).parts[0] if item.path.is_relative_to(TESTS) else ""
        if tier in SLOW_TIERS or item.get_closest_marker("process") is not None:
            item.add_marker(pytest.mark.slow)


def postgres_required() -> bool:
    return (
        os.environ.get("CI", "").lower() in ("true", "1")
        or os.environ.get("HARNESSX_REQUIRE_POSTGRES") == "1"
    )


def postgres_unavailable(reason: str) -> NoReturn:
    """Fail (CI / HARNESSX_REQUIRE_POSTGRES=1) or skip, always with the reason."""
    if postgres_required():
        pytest.fail(f"PostgreSQL is required here but unavailable: {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL unavailable: {reason} (set HARNESSX_TEST_DSN or install postgresql)")


@pytest.fixture(scope="session")
def pg_bin_dir() -> Path:
    """Directory with initdb/pg_ctl, for tests that run clusters of their own."""
    try:
        found = find_pg_bin()
    except ClusterError as exc:
        postgres_unavailable(str(exc))
    if found is None:
        postgres_unavailable("PostgreSQL server binaries (initdb, pg_ctl) not found; set HARNESSX_PG_BIN")
    return found


@pytest.fixture(scope="session")
def postgres_dsn(request: pytest.FixtureRequest) -> Iterator[str]:
    """DSN of a server where the ``postgres`` role may create databases."""
    configured = os.environ.get("HARNESSX_TEST_DSN")
    if configured:
        yield configured
        return
    bin_dir: Path = request.getfixturevalue("pg_bin_dir")
    with ExitStack() as stack:
        try:
            cluster = stack.enter_context(ThrowawayCluster(bin_dir))
        except (ClusterError, OSError) as exc:
            postgres_unavailable(f"could not start a throwaway cluster from {bin_dir}: {exc}")
        yield cluster.dsn


@pytest.fixture
def pg_database(postgres_dsn: str) -> Iterator[str]:
    """DSN of a fresh, empty database (``TEMPLATE template0``), dropped after the test."""
    name = f"hx_test_{next(_db_counter)}_{uuid.uuid4().hex[:8]}"
    run_psql(postgres_dsn, f"CREATE DATABASE {quote_ident(name)} TEMPLATE template0")
    try:
        yield dsn_with_database(postgres_dsn, name)
    finally:
        run_psql(postgres_dsn, f"DROP DATABASE IF EXISTS {quote_ident(name)} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> BackendTarget:
    """Where a durable test's state lives; the test runs once on each backend."""
    if request.param == "sqlite":
        return BackendTarget("sqlite", str(tmp_path / "runtime.sqlite3"))
    return BackendTarget("postgres", request.getfixturevalue("pg_database"))
