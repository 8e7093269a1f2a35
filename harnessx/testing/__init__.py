"""Testing helpers that ship with harnessx: a throwaway PostgreSQL cluster for tests,
benchmarks and the chaos suite (no Docker needed; the server binaries must be installed)."""

from __future__ import annotations

from harnessx.testing._cluster import (
    ClusterError,
    ThrowawayCluster,
    dsn_with_database,
    find_pg_bin,
    free_port,
    quote_ident,
    run_psql,
)

__all__ = [
    "ClusterError",
    "ThrowawayCluster",
    "dsn_with_database",
    "find_pg_bin",
    "free_port",
    "quote_ident",
    "run_psql",
]
