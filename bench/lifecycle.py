"""The data lifecycle at a loaded history: bytes per run, prune throughput, and what the hot
statements cost on a loaded database next to an empty one.

    python bench/lifecycle.py                                  # SQLite and a throwaway PostgreSQL
    python bench/lifecycle.py --backends postgres --history 200000
    python bench/lifecycle.py --dsn postgresql://…             # an existing server (two schemas)
    python bench/lifecycle.py --sizes-only --runs 100          # bytes per run only, in seconds

For each backend it reports:

- bytes per run, by table (heap, indexes and TOAST on PostgreSQL; b-tree pages from
  ``dbstat`` on SQLite): ``--runs`` real runs of three shapes, each in its own session — a
  tool call and a short answer, a 960-character answer streamed in 16-character pieces, and a
  tool's 8,000-character result (``--sizes-only`` then gives the events' bytes per run as
  stored and compacted, in a store per shape, and stops);
- the load: ``--history`` copies of those sessions made with SQL (``harnessx.testing``'s
  ``replicate``), spread over the last 60 days with version 7 ids of their time (on
  PostgreSQL in a partition of events per day, ``day_partitions``), then vacuumed and
  analysed;
- large/empty: the median cost of a queue claim, a checkpoint (a tool's raw result, as
  ``bench/checkpoint.py`` times it), a lease renewal, the supervisor's scan (queue statistics
  read at every scan, the worst case), ``harnessx status`` (``recent_sessions(20)``) and
  ``queue_stats`` on the loaded store over the same on an "empty" one (the same real runs,
  no history), the two taking turns sample by sample so that both see the same machine;
- the store's size, loaded and empty (tables with their indexes); on PostgreSQL the WAL a
  run writes, empty and loaded taking turns (``--wal-runs`` of each shape);
- the deep queue: ``--queued`` runs waiting in the pool (copies, made with SQL, of one
  submitted through the store) added to both stores, then the supervisor's scan, a claim and
  ``queue_stats`` again, loaded over empty, taking turns (``--queued 0``: skipped);
- prune: ``harnessx prune --older-than 30d`` as a separate process removing the older half of
  the history, its throughput (sessions/s, from its own report), and the p50/p99 of a steady
  stream of checkpoints (``--rate`` a second) on the loaded store while it runs next to the
  same measured just before, idle; on PostgreSQL then the days of events it emptied dropped
  whole (by the same command, after its pass: their count, events, time and the checkpoints
  beside it); then the store's size again (SQLite gives the freed pages back to the file as
  it goes).

A million runs (the issue's figure) on one backend at a time, so that the two stores never
fill the disk together (15.2 GiB on PostgreSQL, measured; SQLite about as much, 1.5 GiB at
100,000 runs)::

    python bench/lifecycle.py --backends sqlite --history 1000000
    python bench/lifecycle.py --backends postgres --history 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from checkpoint import bench_agent, checkpoint_maker

from harnessx import (
    Agent,
    AgentConfig,
    AgentRef,
    AgentRuntime,
    ProviderResponse,
    ScriptedProvider,
    SQLiteBackend,
    ToolCall,
)
from harnessx._compaction import compact_pass, default_compact_batch
from harnessx._ids import uuid7
from harnessx._state import Delta, Phase
from harnessx.testing._history import day_partitions, replicate
from supervisor import Supervisor, SupervisorConfig
from supervisor._supervisor import ROLE

ROOT = Path(__file__).resolve().parents[1]
DAY = 86400.0
HISTORY_DAYS = 60.0  # the history spreads over these; the prune removes what is older than 30


def streaming_agent() -> Agent:
    answer = "".join(f"part {i:03d} of the answer. " for i in range(50))[:960]
    provider = ScriptedProvider([answer], chunk_size=16)
    return Agent(config=AgentConfig(system_prompt="You explain."), provider=provider)


# Text that compresses as prose does, not as a repeated line would (PostgreSQL compresses
# values over 2 KB): words drawn at random from a small vocabulary.
_WORDS = [
    "the",
    "report",
    "region",
    "sales",
    "quarter",
    "growth",
    "margin",
    "customer",
    "order",
    "revenue",
    "cost",
    "team",
]
_rng = random.Random(16)
PAGE = " ".join(_rng.choice(_WORDS) + str(_rng.randrange(1000)) for _ in range(2000))[:8000]


def medium_result_agent() -> Agent:
    """A tool whose 8,000-character result is under both the conversation's preview limit
    (12,000) and the size stored apart (16 KiB): every copy of it is stored whole."""

    def script(request: Any) -> ProviderResponse | str:
        if not request.tool_results:
            return ProviderResponse(text="Fetching.", tool_calls=[ToolCall("c", "fetch_page", {"n": 1})])
        return "Page read."

    agent = Agent(provider=ScriptedProvider(script, chunk_size=64))

    @agent.tools.register()
    def fetch_page(n: int) -> str:
        """Fetch a page.

        Args:
            n: Page number.
        """
        return PAGE

    return agent


SHAPES: dict[str, Callable[[], Agent]] = {
    "tool call + short answer": bench_agent,
    "960-char answer streamed in 16-char pieces": streaming_agent,
    "a tool's 8,000-char result": medium_result_agent,
}


def percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


# ------------------------------------------------------------------------- sizes


async def sizes(store: Any) -> dict[str, int]:
    """Bytes per table, its indexes included."""
    if store.dialect == "postgres":
        rows = await store._run(
            "sizing",
            # A partition counts as its table (events: one partition a day, schema 18).
            lambda conn: conn.fetch(
                "SELECT coalesce(p.relname, c.relname)::text, sum(pg_total_relation_size(c.oid)) "
                "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "LEFT JOIN pg_inherits i ON i.inhrelid = c.oid LEFT JOIN pg_class p ON p.oid = i.inhparent "
                "WHERE n.nspname = current_schema() AND c.relkind = 'r' GROUP BY 1"
            ),
        )
        return {str(name): int(size) for name, size in rows}

    def read(conn: Any) -> dict[str, int]:
        query = (
            "SELECT coalesce(m.tbl_name, d.name), sum(d.pgsize) FROM dbstat d "
            "LEFT JOIN sqlite_master m ON m.name = d.name GROUP BY 1"
        )
        return {str(name): int(size) for name, size in conn.execute(query).fetchall()}

    return dict(await store._call(read))


async def event_bytes(store: Any) -> tuple[int, int]:
    """The events' bytes: on PostgreSQL the table (TOAST included) and its indexes apart, on
    SQLite the table (a b-tree keyed by run and cursor, rows inside) and its index on the
    event id."""
    if store.dialect == "postgres":
        row = await store._run(
            "sizing events",
            lambda conn: conn.fetchrow(
                "SELECT sum(pg_table_size(c.oid)), sum(pg_indexes_size(c.oid)) FROM pg_inherits i "
                "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'events'::regclass"
            ),
        )
        return int(row[0]), int(row[1])

    def read(conn: Any) -> tuple[int, int]:
        rows = dict(conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall())
        index = sum(size for name, size in rows.items() if str(name).startswith("sqlite_autoindex_events"))
        return int(rows.get("events", 0)), int(index)

    result: tuple[int, int] = await store._call(read)
    return result


async def run_shape(store: Any, make: Callable[[], Agent]) -> str:
    async with AgentRuntime(make(), backend=store) as runtime:
        # submit(), not run(): run() records no text deltas (nobody follows its stream).
        handle = await runtime.submit("Write the EMEA report.")
        return (await handle.result()).session_id


async def compaction_sizes(
    opener: Callable[[str], Any], runs: int
) -> dict[str, tuple[float, float, float, float, float]]:
    """Per shape, the events' bytes per run (table, indexes) as stored and with compaction,
    each shape in a store of its own: ``runs`` runs grow the events of an empty store (as
    stored); they are compacted and their space made free to reuse (PostgreSQL: a VACUUM of
    events, as autovacuum would; SQLite keeps freed pages for reuse), then ``runs`` more,
    compacted too, grow them by what compaction keeps of a run (a steady state: each batch of
    pieces fills the space the previous batch freed)."""
    result = {}
    for n, (label, make) in enumerate(SHAPES.items()):
        async with opener(f"compact{n}") as store:
            empty = await event_bytes(store)
            for _ in range(runs):
                await run_shape(store, make)
            stored = await event_bytes(store)
            await compact_pass(store, 0.0, batch=default_compact_batch(store))
            await free_space(store)
            before = await event_bytes(store)
            for _ in range(runs):
                await run_shape(store, make)
            report = await compact_pass(store, 0.0, batch=default_compact_batch(store))
            await free_space(store)
            after = await event_bytes(store)
        result[label] = (
            (stored[0] - empty[0]) / runs,
            (stored[1] - empty[1]) / runs,
            (after[0] - before[0]) / runs,
            (after[1] - before[1]) / runs,
            report.seconds / max(report.examined, 1),
        )
    return result


async def free_space(store: Any) -> None:
    if store.dialect == "postgres":
        await store._run("vacuuming events", lambda conn: conn.execute("VACUUM events"))


async def bytes_per_run(store: Any, runs: int) -> tuple[dict[str, dict[str, float]], list[str]]:
    """Per shape, bytes per run by table; and one session of each shape (the templates)."""
    result: dict[str, dict[str, float]] = {}
    templates = []
    for label, make in SHAPES.items():
        before = await sizes(store)
        for n in range(runs):
            session_id = await run_shape(store, make)
            if n == 0:
                templates.append(session_id)
        after = await sizes(store)
        grown = {t: (after.get(t, 0) - before.get(t, 0)) / runs for t in after}
        result[label] = {t: b for t, b in grown.items() if b > 0}
    return result, templates


async def wal_per_run(store: Any, runs: int) -> float:
    """The WAL a run of each shape writes, on average (PostgreSQL; the server's WAL position
    before and after, with nothing else writing to it meanwhile)."""

    async def position() -> int:
        lsn = await store._run(
            "reading the WAL position", lambda conn: conn.fetchval("SELECT pg_current_wal_lsn() - '0/0'")
        )
        return int(lsn)

    start = await position()
    for _ in range(runs):
        for make in SHAPES.values():
            await run_shape(store, make)
    return (await position() - start) / (runs * len(SHAPES))


async def settle(store: Any) -> None:
    """What a database that grew over months has and a fresh load lacks: vacuumed tables
    and statistics, nothing left to flush (otherwise autovacuum and the server's checkpoint
    run during the measurements)."""
    if store.dialect == "postgres":
        await store._run("vacuuming", lambda conn: conn.execute("VACUUM (ANALYZE)"))
        await store._run("flushing", lambda conn: conn.execute("CHECKPOINT"))
    else:
        await store._call(lambda conn: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)"))


# ------------------------------------------------------------------- large/empty


class Probe:
    """What the timed operations need on one store: a lease on a running run (checkpoints,
    renewals), one queued run (claims), the leader's term (scans)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    async def setup(self) -> None:
        store = self.store
        runtime = AgentRuntime(bench_agent(), backend=store)
        session_id = await runtime.start()
        await runtime.stop()
        self.lease = await store.claim(session_id, "bench")
        request = {"role": "user", "content": "Write the EMEA report."}
        run_id = uuid7()  # as harnessx makes them: on PostgreSQL, its events go to today's partition
        await store.create_run(
            self.lease, run_id, None, request["content"], Delta(Phase.PREPARE_MODEL_CALL, messages=[request])
        )
        self.next_commit = checkpoint_maker(store, self.lease, await store.load_state(run_id), 0)
        pool = AgentRuntime(AgentRef("nobody-serves", "v1"), backend=store, execution="pool")
        await pool.submit("Queued for the claim benchmark.")
        await pool.stop()
        self.holder = "bench-claim"
        self.term = await store.try_leadership(ROLE)
        assert self.term is not None, "another supervisor leads this store"
        self.supervisor = Supervisor(store, SupervisorConfig(queue_interval=0.0, stuck_interval=3600.0))

    async def claim(self) -> float:
        start = time.perf_counter()
        claimed = await self.store.claim_queued(self.holder, None, 1)
        elapsed = time.perf_counter() - start
        for lease, run_id in claimed:
            await self.store.requeue(lease, run_id)
            await self.store.release(lease)
        assert claimed, "the queued run was not claimed"
        return elapsed

    def operations(self) -> dict[str, Callable[[], Awaitable[Any]]]:
        return {
            "claim (claim_queued)": self.claim,
            "checkpoint": lambda: self.next_commit(False)(),
            "lease renewal": lambda: self.store.renew([self.lease]),
            "supervisor scan": lambda: self.supervisor.scan(self.term),
            "harnessx status (recent_sessions 20)": lambda: self.store.recent_sessions(20),
            "queue_stats": self.store.queue_stats,
        }


async def ratios(
    empty: Any, loaded: Any, samples: int, only: tuple[str, ...] = ()
) -> list[tuple[str, float, float]]:
    probes = [Probe(empty), Probe(loaded)]
    for probe in probes:
        await probe.setup()
    ops = [probe.operations() for probe in probes]
    rows = []
    for name in ops[0]:
        if only and not name.startswith(only):
            continue
        timings: list[list[float]] = [[], []]
        for _ in range(samples):
            for side in (0, 1):
                start = time.perf_counter()
                measured = await ops[side][name]()
                elapsed = time.perf_counter() - start
                # A claim times its own statement (not the requeue after it).
                timings[side].append(measured if name.startswith("claim") else elapsed)
        rows.append((name, statistics.median(timings[0]) * 1000, statistics.median(timings[1]) * 1000))
    for probe in probes:
        await probe.store.release(probe.lease)
        await probe.store.release_leadership(probe.term)
    return rows


# -------------------------------------------------------------------- deep queue


async def fill_queue(store: Any, count: int) -> float:
    """``count`` more runs waiting in the pool: copies, made with SQL, of one submitted
    through the store (its session, run, messages and events, with new ids). Seconds taken."""
    started = time.perf_counter()
    runtime = AgentRuntime(AgentRef("nobody-serves", "v1"), backend=store, execution="pool")
    handle = await runtime.submit("Waiting in the deep queue.")
    await runtime.stop()
    session, run = handle.session_id, handle.run_id
    renamed = {
        "sessions": {"id": "id || '-q' || g.n"},
        "runs": {"id": "id || '-q' || g.n", "session_id": "session_id || '-q' || g.n"},
        "messages": {"session_id": "session_id || '-q' || g.n"},
        "events": {"run_id": "run_id || '-q' || g.n", "event_id": "event_id || '-q' || g.n"},
    }
    where = {"sessions": "id = $1", "runs": "id = $1", "messages": "session_id = $1", "events": "run_id = $1"}
    key = {"sessions": session, "runs": run, "messages": session, "events": run}
    if store.dialect == "postgres":

        async def copy(conn: Any) -> None:
            async with conn.transaction():
                for table in renamed:
                    names = [
                        str(r[0])
                        for r in await conn.fetch(
                            "SELECT column_name FROM information_schema.columns WHERE table_schema = "
                            "current_schema() AND table_name = $1 AND is_identity = 'NO' "
                            "AND is_generated = 'NEVER' ORDER BY ordinal_position",
                            table,
                        )
                    ]
                    values = ", ".join(renamed[table].get(n, n) for n in names)
                    await conn.execute(
                        f"INSERT INTO {table} ({', '.join(names)}) SELECT {values} "
                        f"FROM {table}, generate_series(1, {count}) AS g(n) WHERE {where[table]}",
                        key[table],
                    )
            await conn.execute("ANALYZE")

        await store._run("filling the queue", copy)
    else:

        def copy_sqlite(conn: Any) -> None:
            conn.execute("BEGIN IMMEDIATE")
            for table in renamed:
                names = [str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")]
                values = ", ".join(renamed[table].get(n, n) for n in names)
                conn.execute(
                    f"WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {count}) "
                    f"INSERT INTO {table} ({', '.join(names)}) SELECT {values} FROM {table}, g "
                    f"WHERE {where[table].replace('$1', '?')}",
                    (key[table],),
                )
            conn.execute("COMMIT")
            conn.execute("ANALYZE")

        await store._call(copy_sqlite)
    return time.perf_counter() - started


# ------------------------------------------------------------------------- prune


async def checkpoints_while(
    store: Any, busy: Callable[[], bool], at_least: int, rate: float
) -> list[tuple[float, float]]:
    """Checkpoints at ``rate`` a second (a steady stream, as runs make them: back to back,
    SQLite's one writer would starve any other process of the lock) while ``busy()``: each
    one's start (``time.monotonic()``) and milliseconds."""
    probe = Probe(store)
    await probe.setup()
    samples: list[tuple[float, float]] = []
    renewed = time.monotonic()
    due = time.monotonic()
    while busy() or len(samples) < at_least:
        if time.monotonic() - renewed > store.lease_seconds / 3:  # as a worker's heartbeat does
            await store.renew([probe.lease])
            renewed = time.monotonic()
        commit = probe.next_commit(False)
        began = time.monotonic()
        start = time.perf_counter()
        await commit()
        samples.append((began, (time.perf_counter() - start) * 1000))
        if not busy() and len(samples) >= at_least:
            break
        due += 1 / rate
        await asyncio.sleep(max(0.0, due - time.monotonic()))
    await store.release(probe.lease)
    await store.release_leadership(probe.term)
    return samples


async def prune_under_load(
    store: Any, store_args: list[str], env: dict[str, str], idle_samples: int, rate: float
) -> dict[str, Any]:
    idle = [ms for _, ms in await checkpoints_while(store, lambda: False, idle_samples, rate)]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "harnessx",
        "prune",
        "--older-than",
        "30d",
        *store_args,
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    timed = await checkpoints_while(store, lambda: process.returncode is None, 1, rate)
    ended = time.monotonic()
    raw_out, raw_err = await process.communicate()
    out, err = raw_out.decode(), raw_err.decode()
    match = re.match(r"pruned (\d+) finished session\(s\).*?, ([\d.]+) s\)", out)
    if process.returncode != 0 or match is None:
        raise RuntimeError(f"harnessx prune failed: {out}{err}")
    sessions, seconds = int(match.group(1)), float(match.group(2))
    # PostgreSQL: after its pass, harnessx prune drops the days of events none of whose runs
    # is left, and says how many, the events they held and how long that took: the
    # checkpoints of those last seconds ran beside the drop.
    days = re.search(r"dropped (\d+) day\(s\) of events \((\d+) event\(s\)\).*? in ([\d.]+) s", out)
    dropping = float(days.group(3)) if days else 0.0
    during = [ms for at, ms in timed if at < ended - dropping]
    beside_drop = [ms for at, ms in timed if at >= ended - dropping]
    return {
        "sessions": sessions,
        "seconds": seconds,
        "rate": sessions / seconds if seconds else float("inf"),
        "idle": summary(idle),
        "during": summary(during),
        "days": (int(days.group(1)), int(days.group(2)), dropping) if days else None,
        "beside_drop": summary(beside_drop) if beside_drop else None,
    }


def summary(samples: list[float]) -> tuple[float, float, int]:
    """Median, p99 and count of checkpoint times (ms)."""
    return statistics.median(samples), percentile(samples, 0.99), len(samples)


# -------------------------------------------------------------------------- main


async def bench(
    label: str,
    opener: Callable[[str], Any],
    prune_args: Callable[[str], tuple[list[str], dict[str, str]]],
    args: argparse.Namespace,
) -> None:
    print(f"\n## {label}\n", flush=True)
    async with opener("loaded") as loaded, opener("empty") as empty:
        per_run, templates = await bytes_per_run(loaded, args.runs)
        # The empty store holds the same real runs (so that both list 20 sessions), no history.
        await bytes_per_run(empty, args.runs)
        print("bytes per run, by table:")
        for shape, tables in per_run.items():
            total = sum(tables.values())
            parts = ", ".join(
                f"{t} {b / 1024:.1f} KB ({100 * b / total:.0f}%)"
                for t, b in sorted(tables.items(), key=lambda kv: -kv[1])
            )
            print(f"- {shape}: {total / 1024:.1f} KB: {parts}")
        if args.sizes_only:
            print("\nevents, bytes per run (table / indexes), as stored -> compacted (steady state):")
            for shape, (table, index, compact_table, compact_index, seconds) in (
                await compaction_sizes(opener, args.runs)
            ).items():
                print(
                    f"- {shape}: {table / 1024:.1f} / {index / 1024:.1f} KB -> "
                    f"{compact_table / 1024:.1f} / {compact_index / 1024:.1f} KB "
                    f"(compacting took {seconds * 1000:.2f} ms a run)",
                    flush=True,
                )
            return
        start = time.perf_counter()
        # Time-ordered ids, as harnessx makes them; --random-ids: the random ids of earlier
        # versions. On PostgreSQL the time-ordered history lands in a partition of events per
        # day, as in a database partitioned for longer than the history (the random ids, in
        # events_legacy, as in one migrated from a release before partitioned events).
        if not args.random_ids:
            await day_partitions(loaded, HISTORY_DAYS)
        await replicate(loaded, templates, args.history, days=HISTORY_DAYS, ordered=not args.random_ids)
        took = time.perf_counter() - start
        await settle(loaded)
        total = sum((await sizes(loaded)).values())
        print(
            f"\nloaded {args.history} finished runs in {took:.0f} s ({args.history / took:.0f} runs/s); "
            f"database {total / 2**30:.2f} GiB\n",
            flush=True,
        )
        await settle(empty)
        empty_size = sum((await sizes(empty)).values())
        print(f"store size: loaded {total / 2**30:.2f} GiB, empty {empty_size / 2**20:.1f} MiB\n")
        print("| operation | empty (ms) | loaded (ms) | loaded/empty |")
        print("|---|---|---|---|")
        for name, small, large in await ratios(empty, loaded, args.samples):
            print(f"| {name} | {small:.3f} | {large:.3f} | {large / small:.2f}x |", flush=True)
        if loaded.dialect == "postgres":
            sides = [await wal_per_run(store, args.wal_runs) for store in (empty, loaded, empty, loaded)]
            print(
                f"\nWAL per run ({args.wal_runs} runs of each shape, taking turns): empty "
                f"{sides[0] / 1024:.1f} / {sides[2] / 1024:.1f} KB, loaded "
                f"{sides[1] / 1024:.1f} / {sides[3] / 1024:.1f} KB",
                flush=True,
            )
        if args.queued:
            took = sum([await fill_queue(store, args.queued) for store in (empty, loaded)])
            print(f"\nwith {args.queued} more runs queued in both (filled in {took:.0f} s):\n")
            print("| operation, deep queue | empty (ms) | loaded (ms) | loaded/empty |")
            print("|---|---|---|---|")
            deep = ("claim", "supervisor scan", "queue_stats")
            for name, small, large in await ratios(empty, loaded, args.samples, deep):
                print(f"| {name} | {small:.3f} | {large:.3f} | {large / small:.2f}x |", flush=True)
        store_args, env = prune_args("loaded")
        result = await prune_under_load(loaded, store_args, env, args.idle, args.rate)
        await settle(loaded)
        after = sum((await sizes(loaded)).values())
        on_disk = loaded.path.stat().st_size if loaded.dialect == "sqlite" else None
    idle, during = result["idle"], result["during"]
    print(
        f"\nprune --older-than 30d: {result['sessions']} sessions in {result['seconds']:.1f} s "
        f"({result['rate']:.0f} sessions/s); checkpoint p50/p99 idle {idle[0]:.2f}/{idle[1]:.2f} ms "
        f"({idle[2]} samples), during the prune {during[0]:.2f}/{during[1]:.2f} ms ({during[2]} samples)",
        flush=True,
    )
    if result["days"] is not None:
        count, rows, seconds = result["days"]
        beside = result["beside_drop"]
        beside_text = (
            f"{beside[0]:.2f}/{beside[1]:.2f} ms ({beside[2]} samples)" if beside is not None else "no sample"
        )
        print(
            f"then dropped {count} day(s) of events ({rows} events) in {seconds:.2f} s "
            f"({rows / seconds if seconds else 0:.0f} events/s); checkpoint p50/p99 meanwhile {beside_text}",
            flush=True,
        )
    file = f"; the file {on_disk / 2**30:.2f} GiB" if on_disk is not None else ""
    print(f"store size after the prune: {after / 2**30:.2f} GiB{file}", flush=True)


async def main(args: argparse.Namespace) -> None:
    base_env = {k: v for k, v in os.environ.items() if k not in ("HARNESSX_DSN", "HARNESSX_SQLITE")}
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        if "sqlite" in args.backends:

            def sqlite_prune(name: str) -> tuple[list[str], dict[str, str]]:
                return ["--sqlite", str(Path(folder) / f"{name}.sqlite3")], base_env

            await bench(
                "SQLite (WAL, synchronous=FULL)",
                lambda name: SQLiteBackend(Path(folder) / f"{name}.sqlite3"),
                sqlite_prune,
                args,
            )
        if "postgres" in args.backends:
            dsn = args.dsn
            label = "PostgreSQL (given DSN)"
            if dsn is None:
                from harnessx.testing import ThrowawayCluster

                cluster = stack.enter_context(ThrowawayCluster(durable=True))
                dsn = cluster.dsn
                label = "PostgreSQL 15 (loopback, fsync on)"
            from harnessx.store import PostgresBackend

            def postgres_prune(name: str) -> tuple[list[str], dict[str, str]]:
                return ["--schema", f"hx_bench_{name}"], {**base_env, "HARNESSX_DSN": dsn}

            await bench(
                label, lambda name: PostgresBackend(dsn, schema=f"hx_bench_{name}"), postgres_prune, args
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", help="PostgreSQL DSN (default: a throwaway cluster)")
    parser.add_argument("--backends", default="sqlite,postgres", type=lambda s: s.split(","))
    parser.add_argument("--runs", type=int, default=200, help="real runs of each shape (bytes per run)")
    parser.add_argument("--history", type=int, default=100_000, help="finished runs of history to load")
    parser.add_argument("--rate", type=float, default=100.0, help="checkpoints a second around the prune")
    parser.add_argument("--idle", type=int, default=2000, help="checkpoints timed idle, before the prune")
    parser.add_argument("--queued", type=int, default=20_000, help="runs in the deep queue (0: skip it)")
    parser.add_argument(
        "--random-ids", action="store_true", help="load the history with random (uuid4-like) ids"
    )
    parser.add_argument("--sizes-only", action="store_true", help="stop after the bytes per run")
    parser.add_argument(
        "--wal-runs", type=int, default=20, help="runs of each shape timed for WAL per run (PostgreSQL)"
    )
    parser.add_argument("--samples", type=int, default=300, help="timed samples per operation and side")
    asyncio.run(main(parser.parse_args()))
