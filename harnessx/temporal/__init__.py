"""The Temporal binding: ``TemporalBackend``, ``RedisEvents`` and the worker.

Needs the ``temporal`` extra (``pip install 'harnessx-durable[temporal]'``): importing
``harnessx`` itself never imports the Temporal SDK. See docs/temporal.md.
"""

from __future__ import annotations

try:
    import temporalio  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    from harnessx._errors import ConfigurationError

    raise ConfigurationError(
        "the Temporal binding needs the temporal extra: pip install 'harnessx-durable[temporal]'"
    ) from exc

from harnessx.temporal._artifacts import ArtifactCodec, ArtifactStore, data_converter
from harnessx.temporal._backend import DEFAULT_TASK_QUEUE, TemporalBackend
from harnessx.temporal._events import EventSink, RedisEvents
from harnessx.temporal._worker import TemporalWorkerMetrics, build_worker, replayer

__all__ = [
    "DEFAULT_TASK_QUEUE",
    "ArtifactCodec",
    "ArtifactStore",
    "EventSink",
    "RedisEvents",
    "TemporalBackend",
    "TemporalWorkerMetrics",
    "build_worker",
    "data_converter",
    "replayer",
]
