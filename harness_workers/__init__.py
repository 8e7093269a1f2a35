"""The harnessx worker pool: stateless processes that claim and drive queued runs."""

from __future__ import annotations

from harness_workers._metrics import WorkerMetrics
from harness_workers._worker import Worker, WorkerConfig

__all__ = ["Worker", "WorkerConfig", "WorkerMetrics"]
