"""Sessions as archive records: one self-describing JSON object per session, with everything
it owns (``harnessx export``, ``harnessx prune --archive``, ``harnessx import``).

A record holds the session's row and the rows of every table that belongs to it, each as a
mapping of column name to value, in a form both dialects read back: times as epoch seconds,
JSON columns as their stored text (verbatim, so that a restored run replays exactly what it
saw), booleans as the source keeps them (``true``/``false``, or SQLite's 1/0; both read
back). What only matters while a session is in use is left out: its lease, pause/cancel
request, last checkpoint id, a follower's watch, the progress overlay (a running run's
progress is folded into its row), and ids the database generates. So a
record restores into a database of either dialect, at the same or a later schema; a record
with columns the database lacks (it came from a newer harnessx) is refused, never cut down.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harnessx._errors import ConfigurationError

__all__ = [
    "FORMAT",
    "LEFT_OUT",
    "RUN_TABLES",
    "SESSION_TABLES",
    "TABLES",
    "VERSION",
    "ArchiveRecord",
    "build_records",
    "canonical",
    "parse_record",
    "unknown_columns",
    "why_not_restored",
]

FORMAT = "harnessx.session"
VERSION = 1

# Tables a session owns, in the order rows are inserted on import (a row's references first).
SESSION_TABLES = ("runs", "messages", "audit")  # rows keyed by session_id
RUN_TABLES = ("tool_calls", "tool_results", "events", "journal")  # rows keyed by run_id
TABLES = ("sessions", "runs", "messages", "tool_calls", "tool_results", "events", "journal", "audit")

# Columns that describe a session in use, not what it holds; never archived.
LEFT_OUT = {
    "sessions": frozenset(
        {
            "lease_owner",
            "lease_expires_at",
            "control",
            "control_sent",
            "last_checkpoint",
            "watched_until",
            "awaited_until",
            "current_run",
            "current_phase",
            "current_event_count",
            "current_updated_at",
            "prune_check_at",
        }
    ),
    "runs": frozenset({"created_seq", "claimed_by", "now_phase", "now_event_count", "now_updated_at"}),
}


def canonical(value: Any) -> Any:
    """A column value as a record holds it: datetimes as epoch seconds; JSON-safe scalars."""
    if isinstance(value, dt.datetime):
        if value in (dt.datetime.max, dt.datetime.min):
            return None
        return value.timestamp()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _row(table: str, row: Mapping[str, Any]) -> dict[str, Any]:
    skip = LEFT_OUT.get(table, frozenset())
    return {name: canonical(value) for name, value in row.items() if name not in skip}


def build_records(
    rows: Mapping[str, Sequence[Mapping[str, Any]]], *, source: Mapping[str, Any], exported_at: float
) -> list[dict[str, Any]]:
    """One record per session row in ``rows["sessions"]``, with its rows of every other table
    (``rows[table]``: mappings of column name to value, in the order they are to be restored)."""
    records: dict[str, dict[str, Any]] = {}
    for session in rows.get("sessions", ()):
        body = _row("sessions", session)
        records[str(session["id"])] = {
            "format": FORMAT,
            "version": VERSION,
            "exported_at": exported_at,
            "source": dict(source),
            "session": body,
            **{table: [] for table in TABLES[1:]},
        }
    run_session: dict[str, str] = {}
    for run in rows.get("runs", ()):
        run_session[str(run["id"])] = str(run["session_id"])
    for table in TABLES[1:]:
        for row in rows.get(table, ()):
            owner = str(row["session_id"]) if table in SESSION_TABLES else run_session.get(str(row["run_id"]))
            record = records.get(owner) if owner is not None else None
            if record is None:
                continue  # not a row of an exported session (a run of another one)
            record[table].append(_run_row(row) if table == "runs" else _row(table, row))
    return list(records.values())


def _run_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A run as readers see it: on PostgreSQL a running run's phase, event count and last
    write may be ahead of its row (the session's progress overlay, read as ``now_*``)."""
    body = _row("runs", row)
    for name in ("phase", "event_count", "updated_at"):
        if f"now_{name}" in row and row[f"now_{name}"] is not None:
            body[name] = canonical(row[f"now_{name}"])
    return body


@dataclass
class ArchiveRecord:
    """A parsed, checked archive record: the session's row and its rows per table."""

    session_id: str
    session: dict[str, Any]
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def tables(self) -> Iterable[tuple[str, list[dict[str, Any]]]]:
        """Every table's rows in the order they are inserted, the session's row first."""
        yield "sessions", [self.session]
        for table in TABLES[1:]:
            yield table, self.rows.get(table, [])

    @property
    def last_active(self) -> float:
        """The record's latest activity (its newest run write, else its creation), epoch seconds."""
        times = [float(self.session.get("created_at") or 0.0)]
        times += [float(run.get("updated_at") or 0.0) for run in self.rows.get("runs", [])]
        return max(times)


def parse_record(line: str, where: str) -> ArchiveRecord:
    """A line of an archive file, checked; ``ConfigurationError`` naming ``where`` (e.g.
    ``file.jsonl line 3``) and what is wrong, otherwise."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{where} is not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigurationError(
            f'{where} is not a harnessx session record (no "format": "{FORMAT}"): give a file '
            "written by 'harnessx export' or 'harnessx prune --archive'"
        )
    version = data.get("version")
    if not isinstance(version, int) or version < 1:
        raise ConfigurationError(f"{where} has no valid record version")
    if version > VERSION:
        raise ConfigurationError(
            f"{where} is a version {version} record; this harnessx reads version {VERSION}: "
            "import it with the harnessx that wrote it, or a newer one"
        )
    session = data.get("session")
    if not isinstance(session, dict) or not isinstance(session.get("id"), str) or not session["id"]:
        raise ConfigurationError(f"{where} has no session row with an id")
    session_id = session["id"]
    rows: dict[str, list[dict[str, Any]]] = {}
    for table in TABLES[1:]:
        found = data.get(table, [])
        if not isinstance(found, list) or not all(isinstance(row, dict) for row in found):
            raise ConfigurationError(f"{where}: {table!r} must be a list of rows")
        rows[table] = found
    runs = {run.get("id") for run in rows["runs"]}
    for table, found in rows.items():
        for row in found:
            if table in SESSION_TABLES and row.get("session_id") != session_id:
                raise ConfigurationError(f"{where}: a {table} row belongs to another session")
            if table in RUN_TABLES and row.get("run_id") not in runs:
                raise ConfigurationError(f"{where}: a {table} row belongs to a run the record lacks")
    return ArchiveRecord(session_id, session, rows)


def unknown_columns(record: ArchiveRecord, known: Mapping[str, Iterable[str]]) -> list[str]:
    """``table.column`` names the record has and the database's tables lack."""
    missing: set[str] = set()
    for table, rows in record.tables():
        columns = set(known.get(table, ()))
        for row in rows:
            missing.update(f"{table}.{name}" for name in row if name not in columns)
    return sorted(missing)


def why_not_restored(error: str) -> str:
    """What a constraint a restored row broke means, in words."""
    text = error.lower()
    if "unique" in text or "duplicate" in text:
        return "a row with the same id belongs to another session in this database"
    if "null" in text:
        return (
            "the record lacks a value this table needs: restore whole records as 'harnessx export' wrote them"
        )
    return "the record does not fit this database's tables"
