"""Loading history into a store: copies of real finished sessions, made with SQL.

Benchmarks and plan tests need a database that holds a great many finished runs in the
shapes real runs leave. ``replicate`` takes sessions that real runs left (templates, each
with one finished run) and inserts ``copies`` of them, cycling through the templates, with
new ids (wherever a row or its JSON names the template's session or run, the copy names its
own), every time shifted back so that the copies spread evenly over the last ``days``, and
``prune_check_at`` at each copy's last activity, as retention would leave it. Every column
of every table is copied, whatever later migrations add. With ``ordered`` the ids are version
7 UUIDs made at the copy's time, as harnessx makes them (event and record ids at their run's
time), so that on PostgreSQL a copy's events belong to the day partition of its time (see
``day_partitions``); otherwise 32 random-looking hex digits, as ids of versions before
time-ordered ids (their events belong to ``events_legacy``).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from typing import Any

from harnessx.store._pg_types import Connection

__all__ = ["day_partitions", "replicate"]

_TABLES = ("sessions", "runs", "messages", "tool_calls", "tool_results", "events", "journal", "audit")
_BY_SESSION = {"sessions": "id", "runs": "session_id", "messages": "session_id", "audit": "session_id"}
_GENERATED = {"created_seq"}  # PostgreSQL's identity column: the database numbers copies itself
_LEFT_NULL = {
    "lease_owner",
    "lease_expires_at",
    "control",
    "last_checkpoint",
    "watched_until",
    "current_run",
    "current_phase",
    "current_event_count",
    "current_updated_at",
    "claimed_by",
    "queued_at",
    "not_before",
}


async def day_partitions(store: Any, days: float) -> int:
    """On PostgreSQL, a partition of events for each UTC day of the last ``days`` (and one day
    more), as a database partitioned for that long has them, so that history loaded with
    ``ordered`` ids lands in them: ``events_legacy``, which a new database has end at today,
    is made to end before them. Its rows must all be older. Returns the partitions made (0 on
    SQLite, which has none)."""
    if store.dialect != "postgres":
        return 0
    day_ms = 86_400_000

    async def make(conn: Connection) -> int:
        now_ms = int(await conn.fetchval("SELECT extract(epoch FROM now()) * 1000"))
        first = (now_ms - int(days * day_ms)) // day_ms * day_ms - day_ms
        async with conn.transaction():
            if await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM events_legacy WHERE harnessx_id_ms(run_id) >= $1)", first
            ):
                raise ValueError("events_legacy holds events of the days to partition: load a new store")
            await conn.execute("ALTER TABLE events DETACH PARTITION events_legacy")
            await conn.execute("ALTER TABLE events_legacy DROP CONSTRAINT IF EXISTS events_before_partitions")
            await conn.execute(
                f"ALTER TABLE events ATTACH PARTITION events_legacy FOR VALUES FROM (MINVALUE) TO ({first})"
            )
            made = 0
            for day in range(first, now_ms, day_ms):
                made += bool(
                    await conn.fetchval("SELECT harnessx_event_partition_for($1)", _uuid7_text(day, "day"))
                )
            return made

    made: int = await store._run("making partitions for the history", make)
    return made


def _uuid7_at(run_id: str, seed: Any) -> str:
    """A version 7 UUID made at the millisecond of ``run_id`` (one), its other bits from both."""
    return _uuid7_text(int(run_id[:8] + run_id[9:13], 16), f"{run_id}{seed}")


def _uuid7_text(ms: int, seed: str) -> str:
    """A version 7 UUID made at Unix millisecond ``ms``, its other bits from ``seed``."""
    digits = f"{ms:012x}" + _md5(seed)
    return f"{digits[:8]}-{digits[8:12]}-7{digits[12:15]}-8{digits[15:18]}-{digits[18:30]}"


async def replicate(
    store: Any,
    templates: Sequence[str],
    copies: int,
    *,
    days: float = 30.0,
    ordered: bool = False,
    chunk: int = 20_000,
) -> None:
    """Insert ``copies`` copies of the sessions ``templates`` (each with one finished run)."""
    if store.dialect == "postgres":
        await store._run(
            "loading history", lambda conn: _postgres(conn, templates, copies, days, ordered, chunk)
        )
    else:
        await store._call(lambda conn: _sqlite(conn, templates, copies, days, ordered, chunk))


# ------------------------------------------------------------------------------ SQLite


def _md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def _sqlite(
    conn: sqlite3.Connection, templates: Sequence[str], copies: int, days: float, ordered: bool, chunk: int
) -> None:
    conn.create_function("hx_md5", 1, _md5, deterministic=True)
    conn.create_function("hx_uuid7_at", 2, _uuid7_at, deterministic=True)
    columns = {
        t: [(r[1], str(r[2]).upper()) for r in conn.execute(f"PRAGMA table_info({t})")] for t in _TABLES
    }
    runs = _template_runs(conn.execute, templates, "?")
    conn.execute("DROP TABLE IF EXISTS temp.hx_map")
    conn.execute(
        "CREATE TEMP TABLE hx_map (old_session TEXT, old_run TEXT, new_session TEXT, new_run TEXT, "
        "shift REAL, ended REAL)"
    )
    span = days * 86400.0
    for start in range(0, copies, chunk):
        count = min(chunk, copies - start)
        conn.execute("BEGIN")
        conn.execute("DELETE FROM temp.hx_map")
        rows = []
        for n in range(start, start + count):
            old_session, old_run, ended = runs[n % len(runs)]
            shift = span * (copies - n) / copies + 60.0
            born_ms = int((ended - shift) * 1000)
            if ordered:
                new_session, new_run = _uuid7_text(born_ms, f"s{n}"), _uuid7_text(born_ms, f"r{n}")
            else:
                new_session, new_run = _md5(f"s{n}"), _md5(f"r{n}")
            rows.append((old_session, old_run, new_session, new_run, shift, ended - shift))
        conn.executemany("INSERT INTO temp.hx_map VALUES (?, ?, ?, ?, ?, ?)", rows)
        for table in _TABLES:
            names = [name for name, _ in columns[table]]
            values = [_sqlite_value(table, name, kind, ordered) for name, kind in columns[table]]
            key = (
                f"t.{_BY_SESSION[table]} = m.old_session" if table in _BY_SESSION else "t.run_id = m.old_run"
            )
            conn.execute(
                f"INSERT INTO {table} ({', '.join(names)}) SELECT {', '.join(values)} "
                f"FROM {table} t JOIN temp.hx_map m ON {key}"
            )
        conn.execute("COMMIT")
    conn.execute("ANALYZE")


def _sqlite_value(table: str, name: str, kind: str, ordered: bool) -> str:
    if name in _LEFT_NULL:
        return "NULL"
    if name == "prune_check_at":
        return "m.ended"  # the copy's last activity, as retention leaves a finished session
    if (table, name) in (("sessions", "id"),) or name == "session_id":
        return "m.new_session"
    if (table, name) == ("runs", "id") or name == "run_id":
        return "m.new_run"
    if name in ("event_id", "id"):
        if ordered:  # at the run's time, as harnessx's own (UUIDv7) event and record ids
            return f"hx_uuid7_at(m.new_run, t.{name})"
        return f"hx_md5(m.new_run || t.{name})"
    if name.endswith("_at") and kind == "REAL":
        return f"t.{name} - m.shift"
    if kind == "TEXT":
        return f"replace(replace(t.{name}, m.old_run, m.new_run), m.old_session, m.new_session)"
    return f"t.{name}"


# -------------------------------------------------------------------------- PostgreSQL


async def _postgres(
    conn: Connection, templates: Sequence[str], copies: int, days: float, ordered: bool, chunk: int
) -> None:
    columns: dict[str, list[tuple[str, str]]] = {t: [] for t in _TABLES}
    for table, name, kind in await conn.fetch(
        "SELECT table_name::text, column_name::text, data_type::text FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = ANY ($1::text[]) ORDER BY ordinal_position",
        list(_TABLES),
    ):
        if name not in _GENERATED:
            columns[table].append((name, kind))
    rows = [tuple(r) for r in await conn.fetch(_TEMPLATE_RUNS.format(p="ANY ($1::text[])"), list(templates))]
    _check_templates(rows, templates)
    await conn.execute("DROP TABLE IF EXISTS pg_temp.hx_map")
    await conn.execute(
        "CREATE TEMP TABLE hx_map (old_session text, old_run text, new_session text, new_run text, "
        "shift interval, ended timestamptz)"
    )
    if ordered:
        digits = "lpad(to_hex((extract(epoch FROM t.ended - t.shift) * 1000)::bigint), 12, '0') || md5({})"
        session_id, run_id = (_uuid7_sql(digits.format(f"'{kind}' || t.n")) for kind in "sr")
    else:
        session_id, run_id = "md5('s' || t.n)", "md5('r' || t.n)"
    for start in range(0, copies, chunk):
        count = min(chunk, copies - start)
        async with conn.transaction():
            await conn.execute("TRUNCATE pg_temp.hx_map")
            await conn.execute(
                f"""
                INSERT INTO pg_temp.hx_map
                SELECT t.session_id, t.run_id, {session_id}, {run_id}, t.shift, t.ended - t.shift
                FROM (
                    SELECT n, tpl.session_id, tpl.run_id, tpl.ended,
                           make_interval(secs => $2 * ($3 - n)::float8 / $3 + 60) AS shift
                    FROM generate_series($4::bigint, $5::bigint) n
                    JOIN unnest($1::text[], $6::text[], $7::timestamptz[]) WITH ORDINALITY
                         AS tpl (session_id, run_id, ended, k) ON tpl.k = n % $8 + 1
                ) t
                """,
                [r[0] for r in rows],
                days * 86400.0,
                copies,
                start,
                start + count - 1,
                [r[1] for r in rows],
                [r[2] for r in rows],
                len(rows),
            )
            for table in _TABLES:
                names = [name for name, _ in columns[table]]
                values = [_postgres_value(table, name, kind, ordered) for name, kind in columns[table]]
                key = (
                    f"t.{_BY_SESSION[table]} = m.old_session"
                    if table in _BY_SESSION
                    else "t.run_id = m.old_run"
                )
                await conn.execute(
                    f"INSERT INTO {table} ({', '.join(names)}) SELECT {', '.join(values)} "
                    f"FROM {table} t JOIN pg_temp.hx_map m ON {key}"
                )
    await conn.execute("ANALYZE")


def _postgres_value(table: str, name: str, kind: str, ordered: bool) -> str:
    if name in _LEFT_NULL:
        return "NULL"
    if name == "prune_check_at":
        return "m.ended"  # the copy's last activity, as retention leaves a finished session
    if (table, name) == ("sessions", "id") or name == "session_id":
        return "m.new_session"
    if (table, name) == ("runs", "id") or name == "run_id":
        return "m.new_run"
    if name in ("event_id", "id"):
        if ordered:  # at the run's time, as harnessx's own (UUIDv7) event and record ids
            return _uuid7_sql(
                f"substr(m.new_run, 1, 8) || substr(m.new_run, 10, 4) || md5(m.new_run || t.{name})"
            )
        return f"md5(m.new_run || t.{name})"
    if kind.startswith("timestamp"):
        return f"t.{name} - m.shift"
    if kind in ("json", "jsonb", "text"):
        text = f"replace(replace(t.{name}::text, m.old_run, m.new_run), m.old_session, m.new_session)"
        return text if kind == "text" else f"({text})::{kind}"
    return f"t.{name}"


# ------------------------------------------------------------------------------ shared


def _uuid7_sql(digits: str) -> str:
    """SQL for a version 7 UUID's text from SQL ``digits`` (30 hex digits or more, the Unix
    milliseconds' 12 first): the layout of ``_uuid7_text``."""
    return (
        f"(SELECT substr(d, 1, 8) || '-' || substr(d, 9, 4) || '-7' || substr(d, 13, 3) || '-8' || "
        f"substr(d, 16, 3) || '-' || substr(d, 19, 12) FROM (SELECT {digits} AS d) AS x)"
    )


_TEMPLATE_RUNS = """
SELECT r.session_id, r.id, r.updated_at FROM runs r
WHERE r.session_id = {p} AND r.status IN ('completed', 'cancelled', 'failed')
"""


def _template_runs(execute: Any, templates: Sequence[str], p: str) -> list[tuple[str, str, float]]:
    rows: list[tuple[str, str, float]] = []
    for session_id in templates:
        rows.extend(tuple(r) for r in execute(_TEMPLATE_RUNS.format(p=p), (session_id,)).fetchall())
    _check_templates(rows, templates)
    return rows


def _check_templates(rows: Sequence[tuple[Any, ...]], templates: Sequence[str]) -> None:
    sessions = [row[0] for row in rows]
    if sorted(sessions) != sorted(templates) or len(set(sessions)) != len(sessions):
        raise ValueError("every template must be a session with exactly one finished run")
