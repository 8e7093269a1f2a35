"""Migrating a loaded PostgreSQL database to partitioned events while it is written to.

    python bench/partitions.py                        # 1,000,000 events on a throwaway cluster
    python bench/partitions.py --events 4000000 --per-run 20
    python bench/partitions.py --dsn postgresql://…   # an existing server (a scratch schema)

It makes the database as a release before partitioned events left it (every migration but
``partitioned_events`` and ``dropped_event_days``), loads ``--events`` events (``--per-run``
per run, one session per run, version 7 ids spread over the last 30 days) with SQL, vacuums
and analyses, and then, while a writer appends one event at a time to a few live runs and
reads their last page (what a checkpoint and a follower do), times:

- the migration's parts before its transaction: adding the ``CHECK`` constraint (an instant
  under its lock) and validating it (a read of the whole table under a lock that lets reads
  and writes go on): what grows with the table;
- the migrations' transaction (the renames, the attach that the constraint spares a read,
  the day partitions, then ``dropped_event_days``): what the writer may wait for;
- the writer's statement latency (p50, p99, max) during each, next to the same just before.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from contextlib import ExitStack
from typing import Any

import asyncpg

from harnessx.store import PostgresBackend
from harnessx.store._migrations import load_migrations
from harnessx.store._queries import load_queries
from harnessx.testing import ThrowawayCluster, dsn_with_database, run_psql

Q = load_queries("postgres")
SCHEMA = "hx_partitions_bench"
PARTITIONING = ("partitioned_events", "dropped_event_days")

# A version 7 id (as text) from a Unix millisecond and a number, in SQL.
_ID = (
    "(lpad(to_hex({ms}), 12, '0') || '7' || substr(md5({n}::text), 1, 3) || '8'"
    " || substr(md5({n}::text), 4, 15))"
)


def v7(ms: str, n: str) -> str:
    hexed = _ID.format(ms=ms, n=n)
    return (
        f"(substr({hexed}, 1, 8) || '-' || substr({hexed}, 9, 4) || '-' || substr({hexed}, 13, 4) || '-' "
        f"|| substr({hexed}, 17, 4) || '-' || substr({hexed}, 21, 12))"
    )


async def unpartitioned(conn: asyncpg.Connection) -> None:
    await conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    async with conn.transaction():
        await conn.execute(f"CREATE SCHEMA {SCHEMA}")
        await conn.execute(f"SET LOCAL search_path = {SCHEMA}")
        await conn.execute(Q["create_migrations_table"])
        for migration in load_migrations("postgres"):
            if migration.name in PARTITIONING:
                continue
            await conn.execute(migration.body)
            await conn.execute(Q["record_migration"], migration.version, migration.name, migration.checksum)


async def load(conn: asyncpg.Connection, events: int, per_run: int) -> None:
    runs = max(1, events // per_run)
    now_ms = int(time.time() * 1000)
    span = 30 * 86_400_000
    ms = f"({now_ms - span} + n::bigint * {span} / {runs})"
    run_id = v7(ms, "n")
    await conn.execute(f"""
        CREATE TEMP TABLE ids AS SELECT n, {run_id} AS id FROM generate_series(1, {runs}) n;
        INSERT INTO sessions (id, fingerprint, message_count) SELECT id, '{{}}', 0 FROM ids;
        INSERT INTO runs (id, session_id, request_message, status, phase, history_length, generation,
                          created_at, updated_at, event_count)
        SELECT id, id, 'hi', 'completed', 'finish', 0, 1, now(), now(), {per_run} FROM ids;
        INSERT INTO events (run_id, seq, event_id, type, step_id, attempt_id, data, generation, created_at)
        SELECT i.id, s, i.id || ':' || s, 'text_delta', 's', 'a', '{{"text": "sixteen chars..."}}', 1, now()
        FROM ids i, generate_series(1, {per_run}) s;
        DROP TABLE ids;
    """)  # fmt: skip
    await conn.execute("VACUUM ANALYZE events")
    await conn.execute("VACUUM ANALYZE runs")


_LIVE_RUN = (
    "INSERT INTO runs (id, session_id, request_message, status, phase, history_length, generation, "
    "created_at, updated_at) VALUES ($1, $1, 'hi', 'running', 'p', 0, 1, now(), now())"
)
# What a checkpoint appends and a follower reads (valid on both layouts).
_APPEND = (
    "INSERT INTO events (run_id, seq, event_id, type, step_id, attempt_id, data, generation, created_at) "
    "VALUES ($1, $2, $3, 'text_delta', 's', 'a', '{}', 1, now())"
)
_PAGE = "SELECT seq, data::text FROM events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT 50"


class Writer:
    """Appends one event at a time to live runs and reads their last page, timing each."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.samples: list[tuple[float, float]] = []  # (when, seconds)
        self.errors: list[str] = []
        self._stop = asyncio.Event()

    async def run(self) -> None:
        conn = await asyncpg.connect(self.dsn, server_settings={"search_path": SCHEMA})
        try:
            live = [f"0{n:07x}-0000-4000-8000-000000000000" for n in range(4)]
            for run_id in live:
                await conn.execute(
                    "INSERT INTO sessions (id, fingerprint, message_count) VALUES ($1, '{}', 0)", run_id
                )
                await conn.execute(_LIVE_RUN, run_id)
            seq = 0
            while not self._stop.is_set():
                seq += 1
                for run_id in live:
                    began = time.perf_counter()
                    try:
                        await conn.execute(_APPEND, run_id, seq, f"{run_id}:{seq}")
                        await conn.fetch(_PAGE, run_id, max(0, seq - 50))
                    except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                        self.errors.append(str(exc))
                    self.samples.append((time.perf_counter(), time.perf_counter() - began))
                await asyncio.sleep(0.002)
        finally:
            await conn.close()

    def stop(self) -> None:
        self._stop.set()

    def between(self, start: float, end: float) -> list[float]:
        return [s for at, s in self.samples if start <= at <= end]


def describe(samples: list[float]) -> str:
    if not samples:
        return "no statements"
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"{len(samples)} statements, p50 {statistics.median(ordered) * 1000:.2f} ms, "
        f"p99 {p99 * 1000:.2f} ms, max {ordered[-1] * 1000:.1f} ms"
    )


async def bench(dsn: str, events: int, per_run: int) -> dict[str, Any]:
    conn = await asyncpg.connect(dsn)
    try:
        await unpartitioned(conn)
        began = time.perf_counter()
        await conn.execute(f"SET search_path = {SCHEMA}")
        await load(conn, events, per_run)
        loaded = time.perf_counter() - began
        size = await conn.fetchval("SELECT pg_size_pretty(pg_total_relation_size('events'))")
    finally:
        await conn.close()
    print(f"loaded {events:,} events ({per_run} a run) in {loaded:.1f} s: events is {size}", flush=True)
    writer = Writer(dsn)
    writing = asyncio.create_task(writer.run())
    await asyncio.sleep(3)
    idle = (time.perf_counter() - 2.0, time.perf_counter())
    (partitioned,) = [m for m in load_migrations("postgres") if m.name == "partitioned_events"]
    conn = await asyncpg.connect(dsn, server_settings={"search_path": SCHEMA})
    try:
        parts = []
        for part in partitioned.before:
            start = time.perf_counter()
            await conn.execute(part)
            parts.append((start, time.perf_counter()))
    finally:
        await conn.close()
    start = time.perf_counter()
    report = await PostgresBackend(dsn, schema=SCHEMA).migrate()
    swapped = (start, time.perf_counter())
    await asyncio.sleep(2)
    after = (time.perf_counter() - 2.0, time.perf_counter())
    writer.stop()
    await writing
    result = {
        "events": events,
        "add constraint": parts[0][1] - parts[0][0],
        "validate": parts[1][1] - parts[1][0],
        "transaction": swapped[1] - swapped[0],
        "applied": [f"{m.version:04d}_{m.name}" for m in report.applied],
        "errors": writer.errors,
    }
    print(f"  writer before:            {describe(writer.between(*idle))}")
    print(f"  add constraint NOT VALID: {result['add constraint'] * 1000:.1f} ms; writer: "
          f"{describe(writer.between(*parts[0]))}")  # fmt: skip
    during = describe(writer.between(*parts[1]))
    print(f"  validate (reads go on):   {result['validate']:.2f} s; writer: {during}")
    print(f"  migrate (swap, then days):{result['transaction'] * 1000:.1f} ms; writer: "
          f"{describe(writer.between(*swapped))}")  # fmt: skip
    print(f"  writer after:             {describe(writer.between(*after))}")
    print(f"  applied {', '.join(result['applied'])}; writer errors: {len(writer.errors)}", flush=True)
    for error in writer.errors[:3]:
        print(f"  error: {error}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--per-run", type=int, default=20)
    parser.add_argument("--dsn", help="an existing server (the schema hx_partitions_bench is replaced)")
    args = parser.parse_args()
    with ExitStack() as stack:
        if args.dsn:
            dsn = args.dsn
        else:
            cluster = stack.enter_context(ThrowawayCluster(durable=True))
            run_psql(cluster.dsn, "CREATE DATABASE bench")
            dsn = dsn_with_database(cluster.dsn, "bench")
        result = asyncio.run(bench(dsn, args.events, args.per_run))
    sys.exit(1 if result["errors"] else 0)


if __name__ == "__main__":
    main()
