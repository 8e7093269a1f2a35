"""Compacting finished runs' streamed text, in bounded batches.

``harness-supervisor`` does it on the leader (``--compact-after``, an hour by default; ``off``
to keep every piece as it was streamed), ``harnessx compact`` once. A pass takes the runs that
finished more than the given time ago, ``batch`` at a time, each batch its own short
transaction (``Store.compact_events``), pausing between batches; what a batch writes and why
every cursor still reads the same text is in ``harnessx/store/_compaction.py``.

An hour, not at once: a reader that follows a run as it streams, or reads it again right after
(a client reconnecting, a test), sees its pieces as they were sent; compacting later changes
only how many events carry the text. On PostgreSQL the space the pieces took in the day's
partition of events is reused by the day's later runs once autovacuum has seen it, which a
compaction days later would not give (that partition takes no more rows).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from harnessx.store._protocol import Compaction, Store

__all__ = ["COMPACT_AFTER", "CompactionReport", "compact_pass", "default_compact_batch"]

# How long after a run finished its streamed text is compacted (harness-supervisor's default).
COMPACT_AFTER = 3600.0
# Runs per batch: a SQLite batch holds off every other commit to the file while it runs
# (5 streamed runs of 60 pieces: about 4 ms of CPU, most of it reading and merging them).
_BATCH = {"postgres": 100, "sqlite": 5}


def default_compact_batch(store: Store) -> int:
    return _BATCH.get(store.dialect, 20)


@dataclass
class CompactionReport:
    """What a pass did: runs taken, runs whose rows changed, event rows removed."""

    examined: int = 0
    runs: int = 0
    rows: int = 0
    batches: int = 0
    seconds: float = 0.0

    def describe(self) -> str:
        return (
            f"compacted the streamed text of {self.runs} finished run(s): {self.rows} event row(s) "
            f"merged into the rows after them ({self.examined} run(s) looked at, {self.batches} "
            f"batch(es), {self.seconds:.2f} s)"
        )


async def compact_pass(
    store: Store,
    older_than: float,
    *,
    batch: int,
    pause: float = 0.01,
    stopping: asyncio.Event | None = None,
    on_batch: Callable[[Compaction, float], None] | None = None,
) -> CompactionReport:
    """Compact every run that finished more than ``older_than`` seconds ago and waits for it,
    ``batch`` runs a transaction; stops early when ``stopping`` is set (the next pass goes
    on). ``on_batch(batch, seconds)`` after each batch."""
    report = CompactionReport()
    started = time.perf_counter()
    while stopping is None or not stopping.is_set():
        began = time.perf_counter()
        step = await store.compact_events(older_than, limit=batch)
        report.batches += 1
        report.examined += step.examined
        report.runs += step.runs
        report.rows += step.rows
        if on_batch is not None:
            on_batch(step, time.perf_counter() - began)
        if not step.more:
            break
        if pause > 0:
            await asyncio.sleep(pause)
    report.seconds = time.perf_counter() - started
    return report
