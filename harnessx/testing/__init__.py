"""Testing helpers that ship with harnessx: a throwaway PostgreSQL cluster, a Temporal dev
server and a Redis server for tests, benchmarks and the chaos suite (no Docker needed; the
server binaries must be installed)."""

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
from harnessx.testing._services import (
    RedisServer,
    ServiceError,
    TemporalDevServer,
    find_redis_server,
    find_temporal_cli,
)

__all__ = [
    "ClusterError",
    "RedisServer",
    "ServiceError",
    "TemporalDevServer",
    "ThrowawayCluster",
    "dsn_with_database",
    "find_pg_bin",
    "find_redis_server",
    "find_temporal_cli",
    "free_port",
    "quote_ident",
    "run_psql",
]
