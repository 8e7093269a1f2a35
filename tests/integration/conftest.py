"""Durable-runtime tests run once per backend: a real SQLite file and a real PostgreSQL database."""

from __future__ import annotations

from pathlib import Path

import pytest
from durable_support import BackendTarget


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> BackendTarget:
    if request.param == "sqlite":
        return BackendTarget("sqlite", str(tmp_path / "runtime.sqlite3"))
    return BackendTarget("postgres", request.getfixturevalue("pg_database"))
