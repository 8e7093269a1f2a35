"""Reading and ageing a store's rows directly, for the retention and erasure tests."""

from __future__ import annotations

from typing import Any

__all__ = ["TABLES", "age", "all_rows", "rows_of", "sql"]

TABLES = ("sessions", "runs", "messages", "tool_calls", "tool_results", "events", "journal", "audit")

# Each table's rows of one session ($1 / ?: its id).
_OWNED = {
    "sessions": "SELECT count(*) FROM sessions WHERE id = {p}",
    "runs": "SELECT count(*) FROM runs WHERE session_id = {p}",
    "messages": "SELECT count(*) FROM messages WHERE session_id = {p}",
    "audit": "SELECT count(*) FROM audit WHERE session_id = {p}",
    **{
        table: f"SELECT count(*) FROM {table} WHERE run_id IN (SELECT id FROM runs WHERE session_id = {{p}})"
        for table in ("tool_calls", "tool_results", "events", "journal")
    },
}


async def sql(store: Any, statement: str, *args: Any) -> list[tuple[Any, ...]]:
    """Run one statement on the store's own connection (``{p}``, ``{p2}``: its parameters)."""
    if store.dialect == "sqlite":
        text = statement.format(p="?1", p2="?2")
        return await store._call(lambda conn: [tuple(r) for r in conn.execute(text, args).fetchall()])
    text = statement.format(p="$1", p2="$2")
    return await store._run("a test's statement", lambda conn: _fetch(conn, text, args))


async def _fetch(conn: Any, text: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in await conn.fetch(text, *args)]


async def rows_of(store: Any, session_id: str) -> dict[str, int]:
    """How many rows of each table belong to the session."""
    counts = {}
    for table in TABLES:
        ((count,),) = await sql(store, _OWNED[table], session_id)
        counts[table] = int(count)
    return counts


async def all_rows(store: Any) -> dict[str, int]:
    counts = {}
    for table in TABLES:
        ((count,),) = await sql(store, f"SELECT count(*) FROM {table}")
        counts[table] = int(count)
    return counts


async def age(store: Any, session_id: str, days: float) -> None:
    """Make a session look ``days`` older: its creation, its runs' times and what retention
    knows of its activity, as if it had been left alone that long."""
    seconds = days * 86400
    if store.dialect == "sqlite":
        shift = "{col} - {p2}"
        value: Any = seconds
    else:
        shift = "{col} - make_interval(secs => {p2})"
        value = float(seconds)
    sessions = ", ".join(f"{c} = {shift.format(col=c, p2='{p2}')}" for c in ("created_at", "prune_check_at"))
    runs = ", ".join(f"{c} = {shift.format(col=c, p2='{p2}')}" for c in ("created_at", "updated_at"))
    await sql(store, f"UPDATE sessions SET {sessions} WHERE id = {{p}}", session_id, value)
    await sql(store, f"UPDATE runs SET {runs} WHERE session_id = {{p}}", session_id, value)
