"""Numbered, checksummed migrations shipped with the package.

A database records each applied migration's version and checksum. Opening a database
whose recorded checksums differ from ours (tampered), or that has versions we do not
know (written by a newer harnessx), raises ``SchemaError`` saying what to do.

A PostgreSQL migration runs in the one transaction that applies every pending migration. One
that must not hold its locks while it reads a large table (validating a constraint) may begin
with parts of its own, each after a line ``-- harnessx: before``: they run first, each as a
transaction of its own, while running workers go on, and must be safe to run again (a
migration that failed after them runs them again). ``-- harnessx: body`` starts what runs in
the transaction; ``-- harnessx: last`` what runs in it after every pending migration's body
(so that a lock it takes is held only until the commit right after); ``-- harnessx: after``
what runs once it committed, each part on its own (it must be safe to run again, and what it
does must be done by something else too should the process stop before it); a part after
``-- harnessx: on failure`` runs when a part before the commit failed (one of the parts before
the transaction, or the transaction), to take back what the parts before it left behind; it
waits at most 5 s for a lock (a longer wait would hold up every statement on the table behind
it), and what it could not take back stays for the next migration to resume from.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from harnessx._errors import SchemaError

__all__ = [
    "Migration",
    "MigrationReport",
    "check_applied",
    "check_objects",
    "expected_objects",
    "load_migrations",
    "pending",
    "report",
]

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_MARKER = re.compile(r"^-- harnessx: (before|body|last|after|on failure)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()

    @property
    def before(self) -> tuple[str, ...]:
        """The parts that run before the transaction, each on its own, in order."""
        return tuple(text for kind, text in _parts(self.sql) if kind == "before")

    @property
    def body(self) -> str:
        """What runs in the migrations' transaction (the whole file without parts)."""
        return "".join(text for kind, text in _parts(self.sql) if kind == "body")

    @property
    def last(self) -> str:
        """What runs in the transaction after every pending migration's body."""
        return "".join(text for kind, text in _parts(self.sql) if kind == "last")

    @property
    def after(self) -> tuple[str, ...]:
        """The parts that run after the transaction committed, each on its own, in order."""
        return tuple(text for kind, text in _parts(self.sql) if kind == "after")

    @property
    def on_failure(self) -> str | None:
        found = [text for kind, text in _parts(self.sql) if kind == "on failure"]
        return found[0] if found else None


def _parts(sql: str) -> list[tuple[str, str]]:
    """The file cut at its marker lines, as (kind, text) in order: text under no marker is
    the body (the whole of a migration without markers)."""
    parts: list[tuple[str, str]] = []
    kind, start = "body", 0
    for match in _MARKER.finditer(sql):
        parts.append((kind, sql[start : match.start()]))
        kind, start = match.group(1), match.end()
    parts.append((kind, sql[start:]))
    return [(kind, text) for kind, text in parts if text.strip()]


@dataclass(frozen=True)
class MigrationReport:
    """What ``migrate()`` did: the schema version before and after, and what it applied."""

    where: str
    before: int
    after: int
    applied: tuple[Migration, ...] = ()

    def describe(self) -> str:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in self.applied)
        if not self.applied:
            return f"{self.where} is already at schema version {self.after}: nothing to apply"
        if self.before == 0:
            return f"created the harnessx schema (version {self.after}) in {self.where}: applied {names}"
        return f"upgraded {self.where} from schema version {self.before} to {self.after}: applied {names}"


def report(where: str, applied: dict[int, str], done: list[Migration]) -> MigrationReport:
    before = max(applied, default=0)
    return MigrationReport(where, before, max([before, *(m.version for m in done)]), tuple(done))


@cache
def load_migrations(dialect: str) -> tuple[Migration, ...]:
    folder = resources.files("harnessx.store").joinpath("migrations", dialect)
    found = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"{dialect} migrations are not numbered 1..n: {[m.version for m in found]}")
    return tuple(found)


def check_applied(dialect: str, applied: dict[int, str], where: str, recreate: str) -> None:
    """Refuse a database written by a newer harnessx or with altered migrations.

    ``recreate`` says how to start this database over (dialect-specific), for damage that
    migrating cannot repair: it is the only advice that works besides a backup."""
    known = {m.version: m for m in load_migrations(dialect)}
    newest = max(known)
    newer = sorted(v for v in applied if v not in known)
    if newer:
        raise SchemaError(
            f"{where} has schema version {max(newer)}, newer than this harnessx knows ({newest}): "
            "upgrade harnessx on this host; do not run an older version against this database"
        )
    for version, checksum in applied.items():
        if known[version].checksum != checksum:
            raise SchemaError(
                f"{where}: migration {version:04d}_{known[version].name} was altered after it was applied "
                f"(checksum mismatch), which migrating cannot repair: restore the database from a backup, "
                f"or {recreate}"
            )


def check_objects(dialect: str, present: set[str], where: str, recreate: str) -> None:
    """Refuse a fully migrated schema that lacks a table, view or function its migrations
    created: someone dropped it, and migrating again would not bring it back."""
    missing = sorted(expected_objects(dialect) - present)
    if missing:
        raise SchemaError(
            f"{where} has every harnessx migration applied but lacks {', '.join(missing)} (dropped by "
            f"hand?), which migrating cannot repair: restore the database from a backup, or {recreate}"
        )


_CREATES = re.compile(
    r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(TABLE|VIEW|FUNCTION)\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)",
    re.IGNORECASE | re.MULTILINE,
)
_DROPS = re.compile(
    r"^\s*DROP\s+(TABLE|VIEW|FUNCTION)\s+(?:IF\s+EXISTS\s+)?(\w+)", re.IGNORECASE | re.MULTILINE
)


@cache
def expected_objects(dialect: str) -> frozenset[str]:
    """The tables, views and functions the migrations leave behind, by name."""
    present: set[str] = set()
    for migration in load_migrations(dialect):
        created = {name.lower() for _, name in _CREATES.findall(migration.sql)}
        dropped = {name.lower() for _, name in _DROPS.findall(migration.sql)}
        present = (present - dropped) | created
    return frozenset(present)


def pending(dialect: str, applied: dict[int, str]) -> list[Migration]:
    return [m for m in load_migrations(dialect) if m.version not in applied]
