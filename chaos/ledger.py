"""The external effects ledger: what the workload's tools really did, outside harnessx.

Two parts, both on local disk beside the run's database:

- **Invocation lines**: every tool call appends a ``start`` line before it does anything
  and an ``end`` line when it returns, to ``<dir>/<pid>.jsonl`` (one file per process, one
  ``write(2)`` per line on an ``O_APPEND`` descriptor, so a SIGKILL never leaves half a
  line and two processes never interleave). A ``start`` without an ``end`` is a call that
  was cut off. The lines survive a process kill (they are in the kernel's page cache);
  ``fsync=True`` also makes them survive a machine crash, which the suite does not cause.
- **The effects table** (SQLite, shared by all processes on the host): the side effects of
  ``idempotent`` and ``manual`` tools. It is the "external system" of the fencing story:
  it remembers the highest fencing token seen per execution key and rejects an effect
  carrying an older one (a zombie's), and an ``idempotent`` tool's adapter applies its
  effect only once per key. Every attempt is a row — ``applied``, ``deduplicated`` or
  ``rejected_stale`` — so the checker can count what was applied.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "EffectsTable",
    "InvocationLog",
    "LedgerReader",
    "read_invocations",
]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS fences (key TEXT PRIMARY KEY, token INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS effects (
        id      INTEGER PRIMARY KEY,
        key     TEXT NOT NULL,
        tool    TEXT NOT NULL,
        policy  TEXT NOT NULL,
        inv     TEXT NOT NULL,
        token   INTEGER NOT NULL,
        pid     INTEGER NOT NULL,
        outcome TEXT NOT NULL CHECK (outcome IN ('applied', 'deduplicated', 'rejected_stale')),
        output  TEXT NOT NULL,
        t       REAL NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS effects_key ON effects (key)",
)


class InvocationLog:
    """Appends this process's invocation lines."""

    def __init__(self, directory: Path, *, fsync: bool = False) -> None:
        self.directory = directory
        self.fsync = fsync
        self._fd: int | None = None
        self._pid = 0

    def _descriptor(self) -> int:
        pid = os.getpid()
        if self._fd is None or pid != self._pid:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / f"{pid}.jsonl"
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._pid = pid
        return self._fd

    def write(self, record: dict[str, Any]) -> None:
        fd = self._descriptor()
        os.write(fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
        if self.fsync:
            os.fsync(fd)


class EffectsTable:
    """The effects side table. Each method is one short transaction on its own connection
    (tools call it from threads; the suite from its investigation of uncertain calls)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _connect(self) -> sqlite3.Connection:
        # A long busy timeout: a SIGSTOPped process may hold the write lock for a while.
        conn = sqlite3.connect(self.path, timeout=120, isolation_level=None)
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    def create(self) -> None:
        conn = self._connect()
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            for statement in _SCHEMA:
                conn.execute(statement)
        finally:
            conn.close()

    def register(self, key: str, token: int) -> None:
        """Tell the external system that ``token`` now acts on ``key``: from here on any
        effect with an older token is refused."""
        conn = self._connect()
        try:
            conn.execute(
                "INSERT INTO fences (key, token) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET token = max(token, excluded.token)",
                (key, token),
            )
        finally:
            conn.close()

    def apply(self, *, key: str, tool: str, policy: str, inv: str, token: int, pid: int, output: str) -> str:
        """Apply a tool's effect; returns ``applied``, ``deduplicated`` or ``rejected_stale``."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute("SELECT token FROM fences WHERE key = ?", (key,)).fetchone()
                fence = int(row[0]) if row else 0
                done = conn.execute(
                    "SELECT 1 FROM effects WHERE key = ? AND outcome = 'applied' LIMIT 1", (key,)
                ).fetchone()
                if token < fence:
                    outcome = "rejected_stale"
                elif policy == "idempotent" and done is not None:
                    outcome = "deduplicated"
                else:
                    # A manual tool has no idempotency of its own: a second call applies again,
                    # which is exactly what the checker looks for.
                    outcome = "applied"
                conn.execute(
                    "INSERT INTO effects (key, tool, policy, inv, token, pid, outcome, output, t) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (key, tool, policy, inv, token, pid, outcome, output, time.time()),
                )
                conn.execute(
                    "INSERT INTO fences (key, token) VALUES (?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET token = max(token, excluded.token)",
                    (key, token),
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return outcome
        finally:
            conn.close()

    def investigate(self, key: str, token: int) -> str | None:
        """What an operator does before settling an uncertain call: fence the key at
        ``token`` (newer than any holder that could still be running it) and, in the same
        transaction, look for an applied effect. Returns that effect's output, or ``None``
        when nothing was applied (and now nothing older can be)."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(
                    "INSERT INTO fences (key, token) VALUES (?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET token = max(token, excluded.token)",
                    (key, token),
                )
                row = conn.execute(
                    "SELECT output FROM effects WHERE key = ? AND outcome = 'applied' ORDER BY id LIMIT 1",
                    (key,),
                ).fetchone()
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return str(row[0]) if row else None
        finally:
            conn.close()

    def rows(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        conn = self._connect()
        try:
            conn.row_factory = sqlite3.Row
            return [dict(row) for row in conn.execute("SELECT * FROM effects ORDER BY id")]
        finally:
            conn.close()


@dataclass
class _Tail:
    offset: int = 0
    partial: bytes = b""


class LedgerReader:
    """Follows the invocation files while the suite runs, to time kills: which process has a
    tool call in flight right now (a ``start`` without its ``end``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._tails: dict[int, _Tail] = {}
        self._open: dict[int, dict[str, float]] = {}  # pid -> invocation id -> started

    def _follow(self, pid: int) -> None:
        path = self.directory / f"{pid}.jsonl"
        tail = self._tails.setdefault(pid, _Tail())
        try:
            with path.open("rb") as handle:
                handle.seek(tail.offset)
                data = handle.read()
        except FileNotFoundError:
            return
        tail.offset += len(data)
        lines = (tail.partial + data).split(b"\n")
        tail.partial = lines.pop()
        inflight = self._open.setdefault(pid, {})
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # the checker counts unreadable lines; timing kills can do without
            if record["e"] == "start":
                inflight[record["inv"]] = float(record["t"])
            else:
                inflight.pop(record["inv"], None)

    def in_flight(self, pid: int) -> int:
        """How many tool calls process ``pid`` has started and not finished."""
        self._follow(pid)
        return len(self._open.get(pid, {}))

    def cut_off(self, pid: int, before: float) -> int:
        """How many tool calls process ``pid`` started before ``before`` (epoch seconds) and
        never finished. Asked once the process is gone: the calls its kill cut off, which
        therefore cannot have had their raw results committed."""
        self._follow(pid)
        return sum(1 for started in self._open.get(pid, {}).values() if started <= before)


def read_invocations(directory: Path) -> tuple[list[dict[str, Any]], int]:
    """Every invocation, its ``start`` merged with its ``end`` (``ended`` is ``None`` for a
    call that was cut off), and the number of unreadable lines."""
    starts: dict[str, dict[str, Any]] = {}
    ends: dict[str, dict[str, Any]] = {}
    bad = 0
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_bytes().split(b"\n"):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                bad += 1
                continue
            (starts if record.get("e") == "start" else ends)[record["inv"]] = record
    merged = []
    for inv, start in starts.items():
        end = ends.get(inv)
        merged.append(
            {
                **start,
                "ended": float(end["t"]) if end else None,
                "outcome": end.get("outcome") if end else None,
            }
        )
    bad += sum(1 for inv in ends if inv not in starts)
    return merged, bad
