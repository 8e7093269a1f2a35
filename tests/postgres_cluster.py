"""Kept for the test modules' imports: the cluster lives in ``harnessx.testing``."""

from __future__ import annotations

from harnessx.testing import (
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
