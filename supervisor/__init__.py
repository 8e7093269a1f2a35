"""The harnessx supervisor: finds orphaned runs and hands them back to the pool."""

from __future__ import annotations

from supervisor._metrics import SupervisorMetrics
from supervisor._supervisor import Supervisor, SupervisorConfig

__all__ = ["Supervisor", "SupervisorConfig", "SupervisorMetrics"]
