"""Retention: removing finished sessions older than a cutoff, in bounded batches.

``harnessx prune`` runs one pass; ``harness-supervisor --retention`` runs one pass every
``interval`` on the leader. A pass walks the sessions whose last known activity is older
than the cutoff in order, ``batch`` at a time, each batch its own short transaction
(``Store.prune``), pausing between batches so that a pass never holds the database for
long; a session still in use is set aside until it may qualify (see ``store/_lifecycle``),
so a pass costs what became old enough since the last one. With ``archive`` every session
is written to a JSON-lines file in that folder (``harnessx import`` restores it) and made
durable before the batch that removes it commits.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from harnessx._errors import ConfigurationError
from harnessx._results import FINISHED_STATUSES
from harnessx.store._protocol import Leadership, PruneBatch, PruneCursor, Store

__all__ = [
    "PARTITIONS_AHEAD",
    "ArchiveWriter",
    "PassReport",
    "RetentionPolicy",
    "default_batch",
    "format_duration",
    "parse_duration",
    "prune_pass",
    "statuses_of",
]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
# Sessions per batch: one PostgreSQL batch's locks are on idle sessions only, so it may be
# larger; SQLite has one writer, and a batch holds off every commit to the file while it runs.
_BATCH = {"postgres": 200, "sqlite": 20}
# How far ahead the day partitions of PostgreSQL's events are made (the supervisor, a prune).
PARTITIONS_AHEAD = 7 * 86400.0


def parse_duration(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or a sum such as ``1d12h``, in seconds."""
    cleaned = str(text).strip().lower().replace(" ", "")
    if not cleaned or _DURATION.sub("", cleaned):
        raise ConfigurationError(
            f"{text!r} is not a duration: give a number and a unit, s m h d or w (30d, 12h, 1d12h)"
        )
    seconds = sum(float(n) * _UNITS[unit] for n, unit in _DURATION.findall(cleaned))
    if seconds <= 0:
        raise ConfigurationError(f"{text!r} is no time at all: give a positive duration such as 30d")
    return seconds


def format_duration(seconds: float) -> str:
    for unit in ("w", "d", "h", "m"):
        if seconds >= _UNITS[unit] and seconds % _UNITS[unit] == 0:
            return f"{int(seconds // _UNITS[unit])}{unit}"
    return f"{seconds:g}s"


def default_batch(store: Store) -> int:
    return _BATCH.get(store.dialect, 20)


@dataclass(frozen=True)
class RetentionPolicy:
    """What a pass removes: finished sessions idle for more than ``older_than`` seconds
    (with ``statuses``, only those whose latest run has one of them), ``batch`` sessions
    per transaction, ``pause`` seconds between batches; ``archive``: a folder to write them
    to first."""

    older_than: float
    batch: int = 20
    pause: float = 0.01
    statuses: frozenset[str] | None = None
    archive: Path | None = None

    def __post_init__(self) -> None:
        if not self.older_than > 0:
            raise ConfigurationError("the retention cutoff must be a positive duration")
        if self.batch < 1:
            raise ConfigurationError("the retention batch must be at least 1 session")
        if self.statuses is not None:
            wrong = sorted(set(self.statuses) - set(FINISHED_STATUSES))
            if wrong:
                raise ConfigurationError(
                    f"{', '.join(wrong)}: only finished sessions are pruned; give statuses among "
                    f"{', '.join(FINISHED_STATUSES)}"
                )


@dataclass
class PassReport:
    """What a pass did (or, in a dry run, would do)."""

    sessions: int = 0
    rows: Counter[str] = field(default_factory=Counter)
    examined: int = 0
    batches: int = 0
    seconds: float = 0.0
    archived_to: Path | None = None
    sample: list[str] = field(default_factory=list)  # the first sessions removed, for the report

    def describe(self, policy: RetentionPolicy, *, dry_run: bool = False) -> str:
        cutoff = format_duration(policy.older_than)
        verb = "would prune" if dry_run else "pruned"
        text = (
            f"{verb} {self.sessions} finished session(s) idle for more than {cutoff} "
            f"({self.examined} looked at, {self.batches} batch(es), {self.seconds:.2f} s)"
        )
        if self.rows:
            text += ": " + ", ".join(f"{count} {table}" for table, count in sorted(self.rows.items()))
        if self.archived_to is not None:
            text += f"; archived to {self.archived_to}"
        return text


class ArchiveWriter:
    """Appends archive records to one new file in ``folder`` (created on the first record),
    each batch flushed and fsynced before its sessions are deleted."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path: Path | None = None
        self._file: TextIO | None = None

    def __call__(self, records: list[dict[str, Any]]) -> None:
        if self._file is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
            self.path = self.folder / f"harnessx-archive-{stamp}-{os.getpid()}.jsonl"
            # "x": never append to (or replace) a file someone else wrote.
            self._file = open(self.path, "x", encoding="utf-8")  # noqa: SIM115 - closed by close()
        for record in records:
            self._file.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


async def prune_pass(
    store: Store,
    policy: RetentionPolicy,
    *,
    dry_run: bool = False,
    term: Leadership | None = None,
    stopping: asyncio.Event | None = None,
    on_batch: Callable[[PruneBatch, float], None] | None = None,
) -> PassReport:
    """One pass over every session old enough, in batches; stops early when ``stopping``
    is set (the next pass continues). ``on_batch(batch, seconds)`` after each batch.
    ``LeadershipLostError`` (with ``term``) once another leader has taken over."""
    report = PassReport()
    writer = ArchiveWriter(policy.archive) if policy.archive is not None and not dry_run else None
    started = time.perf_counter()
    cursor: PruneCursor | None = None
    try:
        while stopping is None or not stopping.is_set():
            began = time.perf_counter()
            batch = await store.prune(
                policy.older_than,
                limit=policy.batch,
                statuses=policy.statuses,
                after=cursor,
                dry_run=dry_run,
                term=term,
                archive=writer,
            )
            report.batches += 1
            report.examined += batch.examined
            report.sessions += len(batch.pruned)
            report.rows.update(batch.rows)
            report.sample.extend(batch.pruned[: max(0, 20 - len(report.sample))])
            if on_batch is not None:
                on_batch(batch, time.perf_counter() - began)
            cursor = batch.cursor
            if cursor is None:
                break
            if policy.pause > 0:
                await asyncio.sleep(policy.pause)
        if not dry_run and report.sessions:
            # The file's free pages back to the file system, a few at a time (SQLite).
            while (stopping is None or not stopping.is_set()) and await store.reclaim_space():
                pass
    finally:
        if writer is not None:
            writer.close()
            report.archived_to = writer.path
    report.seconds = time.perf_counter() - started
    return report


def statuses_of(values: Collection[str]) -> frozenset[str] | None:
    """``--status`` values as a policy's statuses (none given: every finished status)."""
    return frozenset(values) if values else None
