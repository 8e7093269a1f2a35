"""Testing helpers that ship with harnessx: a throwaway PostgreSQL cluster, a Temporal dev
server and a Redis server for tests, benchmarks and the chaos suite (no Docker needed; the
server binaries must be installed), and a real model server (llama.cpp's llama-server,
built by bench/real_model_setup.sh); and the store conformance kit, the checks any ``Store``
implementation must pass (``STORE_CHECKS``), and the event sink conformance kit, the
checks an event sink of the Temporal binding must pass (``EVENT_SINK_CHECKS``)."""

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
from harnessx.testing._conformance import (
    STORE_CHECKS,
    StoreCheck,
    StoreConformanceError,
    StoreFactory,
    check_store,
)
from harnessx.testing._llama import LlamaServer, LlamaServerError, real_model_dir
from harnessx.testing._services import (
    RedisServer,
    ServiceError,
    TemporalDevServer,
    find_redis_server,
    find_temporal_cli,
)
from harnessx.testing._sink_conformance import (
    EVENT_SINK_CHECKS,
    EventSinkCheck,
    EventSinkConformanceError,
    EventSinkFactory,
    check_event_sink,
)

__all__ = [
    "EVENT_SINK_CHECKS",
    "STORE_CHECKS",
    "ClusterError",
    "EventSinkCheck",
    "EventSinkConformanceError",
    "EventSinkFactory",
    "LlamaServer",
    "LlamaServerError",
    "RedisServer",
    "ServiceError",
    "StoreCheck",
    "StoreConformanceError",
    "StoreFactory",
    "TemporalDevServer",
    "ThrowawayCluster",
    "check_event_sink",
    "check_store",
    "dsn_with_database",
    "find_pg_bin",
    "find_redis_server",
    "find_temporal_cli",
    "free_port",
    "quote_ident",
    "real_model_dir",
    "run_psql",
]
