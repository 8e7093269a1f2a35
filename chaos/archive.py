"""What the supervisor's retention removed while a scenario ran, read from its archive.

With ``--retention`` the suite's supervisors run with ``--archive`` (one folder per scenario):
every session they prune is written there, and made durable, before the transaction that
deletes it commits. So a finished session gone from the database is still checked, from the
rows its archive record holds, by the same invariants as a session the database still holds.
A record whose session is still in the database describes a prune that did not commit (its
batch rolled back, e.g. in a server restart): the database wins. A session archived twice
(a batch rolled back, the session used again, pruned later) is read from its latest record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from harnessx._errors import ConfigurationError
from harnessx.store._archive import ArchiveRecord, parse_record

__all__ = ["ArchiveReader"]


@dataclass
class ArchiveReader:
    """Reads the archive files in ``folder`` as they grow: only whole lines (a supervisor
    killed mid-write leaves a partial last line, and its batch never committed)."""

    folder: Path
    records: dict[str, ArchiveRecord] = field(default_factory=dict)  # session id -> latest
    unreadable: list[str] = field(default_factory=list)
    _offsets: dict[Path, int] = field(default_factory=dict)
    _stamps: dict[str, float] = field(default_factory=dict)

    def refresh(self) -> dict[str, ArchiveRecord]:
        for path in sorted(self.folder.glob("*.jsonl")) if self.folder.is_dir() else []:
            offset = self._offsets.get(path, 0)
            with path.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            whole = chunk[: chunk.rfind(b"\n") + 1]
            for line in whole.decode("utf-8", errors="replace").splitlines():
                if not line.strip():
                    continue
                where = f"{path.name} at byte {offset}"
                try:
                    record = parse_record(line, where)
                except ConfigurationError as exc:
                    self.unreadable.append(str(exc))
                    continue
                stamp = _exported_at(line)
                if stamp >= self._stamps.get(record.session_id, float("-inf")):
                    self._stamps[record.session_id] = stamp
                    self.records[record.session_id] = record
            self._offsets[path] = offset + len(whole)
        return self.records

    def run_statuses(self) -> dict[str, str]:
        """Every archived run's status, by run id."""
        return {
            str(run["id"]): str(run["status"])
            for record in self.refresh().values()
            for run in record.rows.get("runs", [])
        }


def _exported_at(line: str) -> float:
    value = json.loads(line).get("exported_at")
    return float(value) if isinstance(value, int | float) else 0.0
