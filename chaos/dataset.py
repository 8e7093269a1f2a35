"""Reading everything the checker needs into a ``Dataset``: the harnessx tables, the
effects ledger, and the lease losses the processes logged."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from chaos.archive import ArchiveReader
from chaos.checker import (
    Dataset,
    Decision,
    Effect,
    EventRow,
    Fault,
    Invocation,
    Leadership,
    LeaseLoss,
    MessageRow,
    PrunedSession,
    RunRow,
    SessionRow,
    ToolCallRow,
)
from chaos.db import Database, to_epoch
from chaos.ledger import EffectsTable, read_invocations

__all__ = ["lease_losses_from_logs", "leadership_from_logs", "load_dataset"]

_LOST = re.compile(r"lost the lease on session (\S+) \(generation (\d+)\)")
_DEAD_WORKER = re.compile(r"worker \S+ \(pid \d+ on .*\) is dead")


async def load_dataset(
    db: Database,
    folder: Path,
    *,
    submitted: list[str],
    faults: list[Fault],
    decisions: list[Decision],
    lease_seconds: float,
    archive: ArchiveReader | None = None,
) -> Dataset:
    """``folder`` holds the scenario's ``ledger/``, ``effects.sqlite3`` and ``logs/``; with
    ``archive``, the sessions retention removed are read from their archive records."""
    invocations, unreadable = read_invocations(folder / "ledger")
    rows = {name: await db.fetch(name) for name in ("runs", "sessions", "events", "messages", "tool_calls")}
    pruned: list[PrunedSession] = []
    if archive is not None:
        stored = {str(session_id) for session_id, _generation in rows["sessions"]}
        for session_id, record in archive.refresh().items():
            if session_id in stored:
                continue  # archived by a batch that did not commit: the database holds it
            pruned.append(PrunedSession(session_id, tuple(str(r["status"]) for r in record.rows["runs"])))
            rows["sessions"].append((session_id, record.session["generation"]))
            for table, columns in _COLUMNS.items():
                rows[table] += [tuple(row[c] for c in columns) for row in record.rows[table]]
        unreadable += len(archive.unreadable)
    return Dataset(
        submitted=submitted,
        runs=[RunRow(str(i), str(s), str(st), int(n), int(g)) for i, s, st, n, g in rows["runs"]],
        sessions=[SessionRow(str(i), int(g)) for i, g in rows["sessions"]],
        events=[_event(row) for row in rows["events"]],
        messages=[MessageRow(str(s), int(q), str(r), int(g)) for s, q, r, g in rows["messages"]],
        tool_calls=[
            ToolCallRow(str(k), str(r), str(p), str(st), bool(a), int(g))
            for k, r, p, st, a, g in rows["tool_calls"]
        ],
        pruned=pruned,
        invocations=[_invocation(record) for record in invocations],
        effects=[
            Effect(
                str(r["key"]), str(r["inv"]), int(r["token"]), int(r["pid"]), str(r["outcome"]), float(r["t"])
            )
            for r in EffectsTable(folder / "effects.sqlite3").rows()
        ],
        faults=faults,
        decisions=decisions,
        lease_losses=lease_losses_from_logs((folder / "logs").glob("*.log")),
        leadership=leadership_from_logs((folder / "logs").glob("supervisor-*.log")),
        lease_seconds=lease_seconds,
        unreadable_ledger_lines=unreadable,
    )


# The columns of chaos.db's queries, as an archive record names them.
_COLUMNS = {
    "runs": ("id", "session_id", "status", "event_count", "generation"),
    "events": (
        "run_id",
        "seq",
        "event_id",
        "type",
        "generation",
        "created_at",
        "data",
        "step_id",
        "attempt_id",
    ),
    "messages": ("session_id", "seq", "run_id", "generation"),
    "tool_calls": ("execution_key", "run_id", "policy", "status", "approved", "generation"),
}


def _event(row: tuple[Any, ...]) -> EventRow:
    run_id, seq, event_id, kind, generation, created_at, data, step_id, attempt_id = row
    payload = json.loads(data) if isinstance(data, str) else data
    key, attempt = _tool_key(str(run_id), str(kind), payload, str(step_id), str(attempt_id))
    return EventRow(
        str(run_id),
        int(seq),
        str(event_id),
        str(kind),
        int(generation),
        to_epoch(created_at),
        key=key,
        attempt=attempt,
        merged=_merged(str(kind), payload),
    )


def _merged(kind: str, payload: Any) -> int:
    """How many pieces of streamed text before its own a compacted row holds."""
    if kind in ("text_delta", "thinking_delta") and isinstance(payload, dict):
        pieces = payload.get("pieces")
        return len(pieces) if isinstance(pieces, list) else 0
    return 0


_CALL_EVENTS = frozenset({"tool_call_start", "tool_call_complete", "tool_result"})


def _tool_key(
    run_id: str, kind: str, payload: Any, step_id: str, attempt_id: str
) -> tuple[str | None, int | None]:
    """The execution key and attempt a tool event is about. A pending call's event carries
    both; a call's own events carry the call (or its result), with the iteration as their
    step and the attempt as their attempt id, and an execution key is ``run:iteration:call``."""
    if not isinstance(payload, dict):
        return None, None
    if "execution_key" in payload:
        attempt = payload.get("attempt")
        return str(payload["execution_key"]), int(attempt) if attempt is not None else None
    if kind in _CALL_EVENTS:
        call_id = payload.get("id", payload.get("tool_call_id"))
        if call_id is not None:
            return f"{run_id}:{step_id}:{call_id}", int(attempt_id) if attempt_id.isdigit() else None
    return None, None


def _invocation(record: dict[str, Any]) -> Invocation:
    return Invocation(
        inv=str(record["inv"]),
        key=str(record["key"]),
        tool=str(record["tool"]),
        policy=str(record["policy"]),
        attempt=int(record["attempt"]),
        token=int(record["token"]),
        pid=int(record["pid"]),
        started=float(record["t"]),
        ended=record["ended"],
        outcome=record["outcome"],
    )


def _records(path: Path) -> Iterable[dict[str, Any]]:
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record


def leadership_from_logs(paths: Iterable[Path]) -> list[Leadership]:
    """When each supervisor became leader and each write it made as the leader (recovering
    an orphan, marking a worker dead), with the epoch and database time it logged."""
    found = []
    for path in paths:
        for record in _records(path):
            message = str(record.get("message", ""))
            if message.startswith("this supervisor is now the leader"):
                kind = "lead"
            elif message.startswith(("requeued run", "released")):
                kind = "act"
            elif _DEAD_WORKER.match(message):
                kind = "mark"
            else:
                continue
            epoch, db_time = record.get("leader_epoch"), record.get("db_time")
            found.append(
                Leadership(
                    str(record.get("supervisor_id", path.stem)),
                    kind,
                    _timestamp(record),
                    epoch=int(epoch) if epoch is not None else None,
                    db_time=float(db_time) if db_time is not None else None,
                )
            )
    return sorted(found, key=lambda e: e.t)


def _timestamp(record: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(str(record["ts"])).timestamp()


def lease_losses_from_logs(paths: Iterable[Path]) -> list[LeaseLoss]:
    """Leases the supervisor took away (``requeued run ...``/``released ... lease``, with the
    session and generation as fields) and leases workers noticed they lost."""
    losses: set[LeaseLoss] = set()
    for path in paths:
        for record in _records(path):
            message = str(record.get("message", ""))
            if record.get("logger") == "supervisor" and "session_id" in record and "generation" in record:
                if message.startswith(("requeued run", "released")):
                    losses.add(LeaseLoss(str(record["session_id"]), int(record["generation"])))
            elif match := _LOST.search(message):
                losses.add(LeaseLoss(match.group(1), int(match.group(2))))
    return sorted(losses, key=lambda loss: (loss.session_id, loss.generation))
