"""The session row every checkpoint updates stays a HOT update (PostgreSQL, schema 13).

An UPDATE is heap-only (no index entry written) when it changes no indexed column and its
page has room; migration 13 leaves room (fillfactor 70) and vacuums sessions sooner. These
tests check what makes that hold: a run changes an indexed column of its session only when
it is claimed and released, never at a checkpoint; the settings are there on a fresh schema;
and a database of schema 12 takes them while a checkpoint holds its session row locked.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import asyncpg
from durable_support import make_agent

from harnessx import AgentRuntime
from harnessx.store import PostgresBackend

SCHEMA = "harness_x"
SETTINGS = {
    "fillfactor": "70",
    "autovacuum_vacuum_scale_factor": "0.02",
    "autovacuum_analyze_scale_factor": "0.05",
}


async def fetch(dsn: str, query: str, *args: Any) -> list[Any]:
    conn = await asyncpg.connect(dsn, server_settings={"search_path": SCHEMA})
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


async def options(dsn: str) -> dict[str, str]:
    (row,) = await fetch(dsn, "SELECT reloptions FROM pg_class WHERE oid = 'sessions'::regclass")
    return dict(option.split("=", 1) for option in row[0] or [])


async def test_a_fresh_schema_keeps_room_on_session_pages(pg_database: str) -> None:
    async with PostgresBackend(pg_database):
        pass
    assert await options(pg_database) == SETTINGS


async def test_a_run_changes_an_indexed_session_column_only_when_claimed_and_released(
    pg_database: str,
) -> None:
    async with PostgresBackend(pg_database):
        pass
    columns = [
        row[0]
        for row in await fetch(
            pg_database,
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = $1 AND table_name = 'sessions'",
            SCHEMA,
        )
    ]
    found = await fetch(
        pg_database,
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'sessions'",
        SCHEMA,
    )
    definitions = " ".join(row[0] for row in found)
    indexed = [c for c in columns if re.search(rf"\b{c}\b", definitions)]
    assert {"id", "lease_owner"} <= set(indexed)
    changed = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in indexed)
    conn = await asyncpg.connect(pg_database, server_settings={"search_path": SCHEMA})
    try:
        await conn.execute(f"""
            CREATE TABLE session_updates (indexed boolean NOT NULL, changed text NOT NULL);
            CREATE FUNCTION count_session_update() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO session_updates VALUES ({changed}, CASE
                    WHEN OLD.lease_owner IS DISTINCT FROM NEW.lease_owner THEN 'lease_owner' ELSE '' END);
                RETURN NEW;
            END $$;
            CREATE TRIGGER count_session_update BEFORE UPDATE ON sessions FOR EACH ROW
                EXECUTE FUNCTION count_session_update();
        """)  # fmt: skip
    finally:
        await conn.close()
    async with PostgresBackend(pg_database) as backend:
        runtime = AgentRuntime(make_agent(policy="safe"), backend=backend)
        async with runtime:
            assert (await runtime.run("Write the EMEA report.")).ok
            assert (await runtime.run("And APAC.")).ok
    rows = await fetch(pg_database, "SELECT indexed, changed FROM session_updates")
    assert len(rows) > 6  # checkpoints, two runs' worth
    # The only updates no HOT update can be: taking the lease and giving it back.
    assert [r["changed"] for r in rows if r["indexed"]] == ["lease_owner"] * sum(r["indexed"] for r in rows)
    assert sum(r["indexed"] for r in rows) <= 4


async def test_a_schema_12_database_takes_the_settings_while_a_checkpoint_holds_a_row(
    pg_database: str,
) -> None:
    async with PostgresBackend(pg_database) as backend:
        runtime = AgentRuntime(make_agent(policy="safe"), backend=backend)
        async with runtime:
            assert (await runtime.run("Write the EMEA report.")).ok
            session_id = runtime.session_id
    # The database as schema 12 left it.
    conn = await asyncpg.connect(pg_database, server_settings={"search_path": SCHEMA})
    await conn.execute(
        "ALTER TABLE sessions RESET (fillfactor, autovacuum_vacuum_scale_factor, "
        "autovacuum_analyze_scale_factor); DELETE FROM harnessx_migrations WHERE version = 13"
    )
    assert await options(pg_database) == {}
    # A checkpoint in flight: its transaction has updated the session row and not committed.
    checkpoint = conn.transaction()
    await checkpoint.start()
    await conn.execute("UPDATE sessions SET message_count = message_count WHERE id = $1", session_id)
    try:
        # Migrates without waiting for the checkpoint (a lock that conflicted would wait for it).
        upgrading = PostgresBackend(pg_database)
        try:
            await asyncio.wait_for(upgrading.initialize(), 30)
        finally:
            await upgrading.aclose()
    finally:
        await checkpoint.rollback()
        await conn.close()
    assert await options(pg_database) == SETTINGS
    async with PostgresBackend(pg_database) as backend:
        runtime = AgentRuntime(make_agent(policy="safe"), backend=backend)
        await runtime.start(session_id)
        try:
            assert (await runtime.run("And APAC.")).ok
        finally:
            await runtime.stop()
