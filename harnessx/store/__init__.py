"""Durable stores: the protocol the runtime writes through, and its implementations."""

from __future__ import annotations

from harnessx.store._protocol import Lease, Renewal, RunRecord, SessionRecord, SessionSummary, Store
from harnessx.store._sqlite import SQLiteBackend

__all__ = ["Lease", "Renewal", "RunRecord", "SQLiteBackend", "SessionRecord", "SessionSummary", "Store"]
