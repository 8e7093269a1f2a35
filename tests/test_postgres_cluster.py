"""The PostgreSQL test fixtures and ThrowawayCluster themselves."""

from __future__ import annotations

from pathlib import Path

import pytest

from harnessx.testing import ThrowawayCluster, run_psql


def test_postgres_dsn_and_pg_database_answer(postgres_dsn: str, pg_database: str) -> None:
    assert run_psql(postgres_dsn, "SELECT 1").strip() == "1"
    assert run_psql(pg_database, "SELECT 1").strip() == "1"
    assert run_psql(pg_database, "SELECT current_database()").strip() == pg_database.rsplit("/", 1)[1]
    # The database is fresh and writable.
    run_psql(pg_database, "CREATE TABLE t (x int); INSERT INTO t VALUES (41)")
    assert run_psql(pg_database, "SELECT x + 1 FROM t").strip() == "42"


def test_pg_databases_are_isolated(pg_database: str) -> None:
    assert run_psql(pg_database, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").strip() == "0"


@pytest.mark.slow  # a cluster of its own, restarted twice
def test_cluster_survives_fast_and_immediate_restart(pg_bin_dir: Path) -> None:
    with ThrowawayCluster(pg_bin_dir) as pg:
        root = pg.data_dir.parent
        assert root.is_dir() and str(root).startswith("/tmp/")
        assert (root.stat().st_mode & 0o777) == 0o700
        dsn = pg.create_database("chaos", template="template0")
        run_psql(dsn, "CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
        port = pg.port

        pg.restart("fast")
        assert pg.port == port
        assert pg.psql("SELECT 1").strip() == "1"
        run_psql(dsn, "INSERT INTO t VALUES (2)")

        pg.restart("immediate")  # crash + WAL recovery
        assert pg.psql("SELECT 1").strip() == "1"
        assert run_psql(dsn, "SELECT sum(x) FROM t").strip() == "3"

        pg.stop()
        assert not pg.is_running()
        pg.start()
        assert pg.is_running()
    assert not root.exists()


@pytest.mark.slow  # a cluster of its own
def test_a_cluster_starts_with_the_settings_it_is_given(pg_bin_dir: Path) -> None:
    # What a benchmark needs of its server, e.g. bench/scheduling.py --statements.
    settings = {"shared_preload_libraries": "pg_stat_statements", "cluster_name": "two words"}
    with ThrowawayCluster(pg_bin_dir, settings=settings) as pg:
        assert pg.psql("SHOW shared_preload_libraries").strip() == "pg_stat_statements"
        assert pg.psql("SHOW cluster_name").strip() == "two words"
