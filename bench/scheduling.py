"""Scheduling benchmarks: what priorities, concurrency limits, fair shares and model rate
limits cost the pool, with real harness-worker processes.

    python bench/scheduling.py                      # a throwaway PostgreSQL 15 cluster, fsync on
    python bench/scheduling.py --sqlite             # the embedded store instead
    python bench/scheduling.py --queued 100000      # the size of the deep queue (default)

Reports, side by side, with scheduling *off* (plain submissions, no limits) and *on* (every
run with a priority from -5 to 5, a concurrency key of 50 under a `key:*` limit that never
binds but every claim checks, the key as its fair-share tenant, and a model rate limit on
`scripted/*` that every model call reserves from without waiting):

- claim latency: from a run's creation to its first committed event, runs submitted one by
  one to two idle workers, after pauses that spread the submissions across the idle
  workers' polls (p50/p99; the database's own timestamps), and its p50 split at the claim
  (``run_claims.claimed_at``): the wait to be claimed, and the claimed run's way to its first
  commit (load, the first model call, its rate reservation);
- throughput: checkpointed steps per second with two workers, 8 boundaries (6 commits) a run;
- the deep queue: --queued runs waiting across 1,000 keys (limit 2 each) and 1,000 tenants,
  or as many plain runs: the claim statement's latency (``claim_queued`` of 8, p50/p99) and
  two workers' steps per second while they drain it.

``--modes`` adds the parts of *on* alone: ``sched`` (priorities, the key's limit and its
tenant, no rate limit) and ``rate`` (plain runs, the rate limit only), to say which part costs
what. The rounds alternate (off, on, off, on, ...) on one fleet of two workers (a round
switches the store's limits and waits until every worker has read them), and each figure is
the median of its rounds, so that a machine's drift weighs on every mode alike. ``--profile DIR`` records each
throughput round's workers with py-spy (``pip install py-spy``; root or ptrace rights) into
DIR as collapsed stacks, to read where a worker's time goes. ``--statements`` (PostgreSQL, the
benchmark's own cluster) loads ``pg_stat_statements`` (``track = all``, with planning) and
reports, by mode, what each run cost the server in statements: those the clients sent (round
trips), those run inside them (functions, triggers), the plans made, and the claim's and the
rate reservation's statements (calls a run, server milliseconds a call). The counts do not
depend on the machine's load; the milliseconds do (lock waits included), and tracking every
statement costs CPU in every mode.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import machine
from pool import BIN, STEPS_PER_RUN, Fleet, live_workers, percentile, postgres_timestamps, sqlite_timestamps

from harnessx import AgentRef, AgentRuntime
from harnessx._rate_gate import REFRESH_SECONDS
from harnessx.store._protocol import Store

KEYS = 50
DEEP_KEYS = 1000
MODES = {
    # mode: (priorities, keys and tenants under a limit; a model rate limit)
    "off": (False, False),
    "on": (True, True),
    "sched": (True, False),
    "rate": (False, True),
}


async def scheduled(store: Store, mode: str, index: int) -> tuple[AgentRuntime, Any]:
    runtime = AgentRuntime(AgentRef("safe", "v1"), backend=store, execution="pool")
    await runtime.start()
    if MODES[mode][0]:
        key = f"key:{index % KEYS}"
        handle = await runtime.submit(f"job {index}", priority=random.randint(-5, 5), concurrency_key=key)
    else:
        handle = await runtime.submit(f"job {index}")
    return runtime, handle


async def set_limits(store: Store, mode: str) -> None:
    keyed, rated = MODES[mode]
    if keyed:
        await store.set_concurrency_limit("key:*", 10_000)
    else:
        await store.remove_concurrency_limit("key:*")
    if rated:
        await store.set_rate_limit("scripted/*", 1e9, 1e12)
    else:
        await store.remove_rate_limit("scripted/*")


def profile(folder: Path | None, name: str, workers: list[subprocess.Popen[bytes]]) -> list[Any]:
    """py-spy recording each worker into ``folder`` until ``stop_profiles`` (nothing without
    a folder)."""
    if folder is None:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    spy = Path(sys.executable).parent / "py-spy"
    return [
        subprocess.Popen(
            [str(spy), "record", "--pid", str(w.pid), "--format", "raw", "--rate", "200", "--nonblocking",
             "-o", str(folder / f"{name}-worker{i}.txt")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i, w in enumerate(workers)
    ]  # fmt: skip


def stop_profiles(spies: list[Any]) -> None:
    for spy in spies:
        spy.send_signal(signal.SIGINT)  # py-spy writes what it recorded, then exits
    for spy in spies:
        spy.wait(timeout=60)


async def switch_to(store: Store, mode: str) -> None:
    """Set the mode's limits and wait until every worker's rate gate has read them (it reads
    them again when its copy is 5 s old), then drive a few runs unmeasured."""
    await set_limits(store, mode)
    await asyncio.sleep(REFRESH_SECONDS + 1.0)
    for index in range(4):
        runtime, handle = await scheduled(store, mode, index)
        await handle.result()
        await runtime.stop()


async def claim_latency(
    store: Store, mode: str, claims: int, timestamps: Any
) -> list[tuple[float, float, float]]:
    """Each run's creation, first claim and first event (seconds, the database's clock)."""
    run_ids = []
    for index in range(claims):
        runtime, handle = await scheduled(store, mode, index)
        await handle.result()
        await runtime.stop()
        run_ids.append(handle.run_id)
        # Idle workers poll at 20, 60, 140 ms ... after their last run (SQLite cannot wake
        # them), so a fixed pause times the poll's phase: a mode whose run ends a few ms
        # later lands past a poll and waits for the next (1.2-1.3x on SQLite for the same
        # claim). A pause drawn from the whole back-off, the same in every mode and round,
        # makes the modes meet the polls alike.
        await asyncio.sleep(random.Random(f"claim {index}").uniform(0.05, 0.35))
    return list(await timestamps(run_ids))


def _cpu(pid: int, children: bool = False) -> float:
    """CPU seconds a process used (with ``children``: also its children that exited)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


def database_cpu(postmaster: int | None) -> float:
    """CPU seconds the PostgreSQL cluster used so far: the postmaster, the backends it reaped
    and those alive (0 without a cluster of the benchmark's own)."""
    if postmaster is None:
        return 0.0
    total = _cpu(postmaster, children=True)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if parent == postmaster:
                total += _cpu(int(entry.name))
    return total


STATEMENT_SETTINGS = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "all",
    "pg_stat_statements.track_planning": "on",
    "pg_stat_statements.max": "10000",
}
# What a statement's text says it is, for the report (pg_stat_statements keeps the text).
CLAIM, RESERVATION = "harnessx_claim_runs(", "harnessx_reserve_rate("
RELEASE = "given_back = b.given_back + c.credit"  # a rate lease given back on its own (release_rate)


class Statements:
    """pg_stat_statements on the benchmark's own cluster, read around each throughput round."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def _run(self, query: str) -> list[Any]:
        import asyncpg

        conn = await asyncpg.connect(self.dsn)
        try:
            return list(await conn.fetch(query))
        finally:
            await conn.close()

    async def install(self) -> None:
        await self._run("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    async def reset(self) -> None:
        await self._run("SELECT pg_stat_statements_reset()")

    async def read(self, runs: int) -> dict[str, float]:
        """What the round's runs cost the server, per run (and the claim's and the
        reservation's server milliseconds a call)."""
        rows = await self._run(
            "SELECT toplevel, query, calls, plans, total_exec_time FROM pg_stat_statements "
            "WHERE query NOT LIKE '%pg_stat_statements%'"
        )
        found = {"sent": 0.0, "inside": 0.0, "plans": 0.0, "claims": 0.0, "claim_ms": 0.0}
        found.update({"reservations": 0.0, "reservation_ms": 0.0, "releases": 0.0, "release_ms": 0.0})
        for toplevel, query, calls, plans, spent in rows:
            found["sent" if toplevel else "inside"] += calls
            found["plans"] += plans
            for kind, marker in (("claim", CLAIM), ("reservation", RESERVATION), ("release", RELEASE)):
                if toplevel and marker in query:
                    found[f"{kind}s"] += calls
                    found[f"{kind}_ms"] += spent
        for kind in ("claim", "reservation", "release"):
            found[f"{kind}_ms"] = found[f"{kind}_ms"] / found[f"{kind}s"] if found[f"{kind}s"] else 0.0
        for key in ("sent", "inside", "plans", "claims", "reservations", "releases"):
            found[key] /= runs
        return found


async def throughput(
    store: Store,
    mode: str,
    runs: int,
    workers: list[Any],
    postmaster: int | None,
    spied: Path | None = None,
    name: str = "",
    statements: Statements | None = None,
) -> tuple[float, float, float, dict[str, float]]:
    """Steps per second, the workers' and the database's CPU milliseconds per step, and
    (with ``statements``) what the runs cost the server in statements."""
    spies = profile(spied, name, workers)
    if statements is not None:
        await statements.reset()
    cpu = (sum(_cpu(w.pid) for w in workers), database_cpu(postmaster))
    started = time.perf_counter()
    submitted = [await scheduled(store, mode, index) for index in range(runs)]
    await asyncio.gather(*(handle.result() for _, handle in submitted))
    elapsed = time.perf_counter() - started
    used = (sum(_cpu(w.pid) for w in workers) - cpu[0], database_cpu(postmaster) - cpu[1])
    stop_profiles(spies)
    counted = await statements.read(runs) if statements is not None else {}
    for runtime, _ in submitted:
        await runtime.stop()
    steps = runs * STEPS_PER_RUN
    return steps / elapsed, used[0] * 1000 / steps, used[1] * 1000 / steps, counted


# --------------------------------------------------------------------- the deep queue


class Database:
    """Plain SQL on the benchmark's database (to copy a template run many times)."""

    def __init__(self, sqlite: Path | None, dsn: str | None, schema: str) -> None:
        self.sqlite, self.dsn, self.schema = sqlite, dsn, schema

    async def columns(self, table: str) -> list[str]:
        if self.sqlite is not None:
            import sqlite3

            with sqlite3.connect(self.sqlite) as conn:
                return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
        rows = await self.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 "
            "AND is_identity = 'NO' AND is_generated = 'NEVER' ORDER BY ordinal_position",
            self.schema,
            table,
        )
        return [str(row[0]) for row in rows]

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        if self.sqlite is not None:
            import sqlite3

            with sqlite3.connect(self.sqlite) as conn:
                return conn.execute(query, args).fetchall()
        import asyncpg

        conn = await asyncpg.connect(self.dsn, server_settings={"search_path": self.schema})
        try:
            return list(await conn.fetch(query, *args))
        finally:
            await conn.close()

    async def execute(self, query: str) -> None:
        if self.sqlite is not None:
            import sqlite3

            with sqlite3.connect(self.sqlite) as conn:
                conn.execute(query)
            return
        import asyncpg

        conn = await asyncpg.connect(self.dsn, server_settings={"search_path": self.schema})
        try:
            await conn.execute(query)
        finally:
            await conn.close()


async def fill_queue(store: Store, db: Database, count: int, on: bool) -> float:
    """``count`` queued runs of agent safe@v1, copies of one submitted through the store:
    across 1,000 keys and tenants with priorities (on), or plain (off). Seconds it took."""
    started = time.perf_counter()
    runtime = AgentRuntime(AgentRef("safe", "v1"), backend=store, execution="pool")
    session = await runtime.start()
    handle = await runtime.submit("deep job")
    await runtime.stop()
    run_id = handle.run_id
    numbers = (
        f"WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {count - 1}) "
        if db.sqlite is not None
        else ""
    )
    series = "g" if db.sqlite is not None else f"generate_series(1, {count - 1}) AS g(n)"
    cat = "||"
    renamed = {
        "sessions": {"id": f"id {cat} '-' {cat} g.n"},
        "runs": {"id": f"id {cat} '-' {cat} g.n", "session_id": f"session_id {cat} '-' {cat} g.n"},
        "messages": {"session_id": f"session_id {cat} '-' {cat} g.n"},
        "events": {"run_id": f"run_id {cat} '-' {cat} g.n", "event_id": f"event_id {cat} '-' {cat} g.n"},
    }
    if on:
        renamed["runs"].update(
            {
                "concurrency_key": f"'key:' {cat} (g.n % {DEEP_KEYS})",
                "tenant": f"'key:' {cat} (g.n % {DEEP_KEYS})",
                "priority": "(g.n % 11) - 5",
            }
        )
    where = {
        "sessions": f"id = '{session}'",
        "runs": f"id = '{run_id}'",
        "messages": f"session_id = '{session}'",
        "events": f"run_id = '{run_id}'",
    }
    for table in ("sessions", "runs", "messages", "events"):
        columns = await db.columns(table)
        values = ", ".join(renamed[table].get(column, column) for column in columns)
        await db.execute(
            f"{numbers}INSERT INTO {table} ({', '.join(columns)}) "
            f"SELECT {values} FROM {table}, {series} WHERE {where[table]}"
        )
    return time.perf_counter() - started


async def deep_claims(store: Store, claims: int) -> list[float]:
    samples = []
    for _ in range(claims):
        started = time.perf_counter()
        taken = await store.claim_queued("bench-claimer", ["safe@v1"], 8)
        samples.append(time.perf_counter() - started)
        for lease, _ in taken:
            await store.release(lease)  # the run leaves the queue and stops driving
    return samples


async def deep_throughput(store: Store, fleet: Fleet, db: Database, seconds: float) -> float:
    for _ in range(2):
        fleet.worker(concurrency=8)
    await live_workers(store, 2)
    await asyncio.sleep(5.0)  # past the start
    done = "SELECT count(*) FROM runs WHERE status = 'completed'"
    first = (await db.fetch(done))[0][0]
    started = time.perf_counter()
    await asyncio.sleep(seconds)
    last = (await db.fetch(done))[0][0]
    elapsed = time.perf_counter() - started
    fleet.stop()
    return (last - first) * STEPS_PER_RUN / elapsed


# --------------------------------------------------------------------------- main


async def one_store(
    args: argparse.Namespace, folder: Path, dsn: str | None, schema: str
) -> tuple[Store, list[str], dict[str, str], Any]:
    """A migrated store, and what worker processes need to reach it: their store options and
    environment (a PostgreSQL DSN goes in ``HARNESSX_DSN``, not on a command line)."""
    from harnessx._processes import open_store

    database = folder / f"{schema}.sqlite3"
    store_args = ["--sqlite", str(database)] if args.sqlite else ["--schema", schema]
    store_env = {} if args.sqlite or dsn is None else {"HARNESSX_DSN": dsn}
    subprocess.run(
        [str(BIN / "harnessx"), "migrate", *store_args],
        check=True,
        capture_output=True,
        env={**os.environ, **store_env},
    )
    store = open_store(
        dsn=None if args.sqlite else dsn,
        sqlite_path=str(database),
        schema=schema,
        lease_seconds=30.0,
        auto_migrate=False,
    )
    if args.sqlite:
        timestamps = sqlite_timestamps(database)
    else:
        assert dsn is not None
        timestamps = postgres_timestamps(dsn, schema)
    return store, store_args, store_env, timestamps


def report_rounds(args: argparse.Namespace, label: str, rounds: dict[str, dict[str, list[Any]]]) -> None:
    modes = args.modes
    others = [m for m in modes if m != "off"]
    print(f"store: {label}; {machine.describe(args.machine_reading)}")
    print()
    print(f"| measure | {' | '.join(modes)} | {' | '.join(f'{m} / off' for m in others)} |")
    print(f"|---|{'---|' * (len(modes) + len(others))}")

    def row(what: str, values: dict[str, float], scale: float, digits: int) -> None:
        cells = [f"{values[m] * scale:.{digits}f}" for m in modes]
        ratios = [f"{values[m] / values['off']:.2f}" for m in others]
        print(f"| {what} | {' | '.join(cells)} | {' | '.join(ratios)} |")

    def latency(first: int, last: int, q: float) -> dict[str, float]:
        return {
            m: statistics.median(percentile([t[last] - t[first] for t in r], q) for r in rounds["claims"][m])
            for m in modes
        }

    for name, q in (("p50", 0.5), ("p99", 0.99)):
        row(f"claim latency {name}, creation -> first event (ms)", latency(0, 2, q), 1000, 1)
    # Where the p50 goes: waiting to be claimed, then the claimed run's way to its first commit.
    row("of it, p50: creation -> claim (ms)", latency(0, 1, 0.5), 1000, 1)
    row("of it, p50: claim -> first event (ms)", latency(1, 2, 0.5), 1000, 1)
    values = {m: statistics.median(rounds["steps"][m]) for m in modes}
    row(f"checkpointed steps / s, 2 workers, {args.runs} runs", values, 1, 0)
    # CPU per step: what a mode costs, much less swayed by a shared machine than a rate.
    values = {m: statistics.median(rounds["worker_cpu"][m]) for m in modes}
    row("workers' CPU per checkpointed step (ms)", values, 1, 3)
    if any(rounds["db_cpu"]["off"]):
        values = {m: statistics.median(rounds["db_cpu"][m]) for m in modes}
        row("database's CPU per checkpointed step (ms)", values, 1, 3)
    if rounds["statements"]["off"]:
        print()
        heads = " | ".join([*modes, *(f"{m} / off" for m in others)])
        print(f"| statements (pg_stat_statements, a run) | {heads} |")
        print(f"|---|{'---|' * (len(modes) + len(others))}")
        for key, what, digits in (
            ("sent", "statements sent (round trips)", 2),
            ("inside", "statements run inside them", 2),
            ("plans", "plans made", 2),
            ("claims", "claims", 2),
            ("claim_ms", "a claim, server ms", 3),
            ("reservations", "rate reservations", 2),
            ("reservation_ms", "a reservation, server ms", 3),
            ("releases", "rate leases given back on their own", 2),
        ):
            values = {m: statistics.median(r[key] for r in rounds["statements"][m]) for m in modes}
            cells = [f"{values[m]:.{digits}f}" for m in modes]
            ratios = [f"{values[m] / values['off']:.2f}" if values["off"] else "-" for m in others]
            print(f"| {what} | {' | '.join(cells)} | {' | '.join(ratios)} |")
    # Each round against the off rounds either side of it (the machine drifts).
    print()
    for m in others:
        paired = [
            on_ / statistics.mean(rounds["steps"]["off"][i : i + 2])
            for i, on_ in enumerate(rounds["steps"][m])
        ]
        print(f"{m}: steps/s rounds {[round(s) for s in rounds['steps'][m]]}, "
              f"each / its neighbouring off rounds {[f'{p:.2f}' for p in paired]}")  # fmt: skip
    print(
        f"off: steps/s rounds {[round(s) for s in rounds['steps']['off']]}\n"
        f"(each figure: the median of {args.rounds} rounds; {args.claims} claims a round)"
    )


async def main(args: argparse.Namespace) -> None:
    args.machine_reading = machine.reading()  # before any server or worker starts
    rounds: dict[str, dict[str, list[Any]]] = {
        "claims": {m: [] for m in args.modes},
        "steps": {m: [] for m in args.modes},
        "worker_cpu": {m: [] for m in args.modes},
        "db_cpu": {m: [] for m in args.modes},
        "statements": {m: [] for m in args.modes},
    }
    deep: dict[bool, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as folder_name, ExitStack() as stack:
        folder = Path(folder_name)
        dsn = None
        postmaster: int | None = None
        label = "SQLite (WAL, synchronous=FULL)"
        if not args.sqlite:
            from harnessx.testing import ThrowawayCluster

            if args.dsn is None:
                settings = STATEMENT_SETTINGS if args.statements else None
                cluster = stack.enter_context(ThrowawayCluster(durable=True, settings=settings))
                dsn = cluster.dsn
                postmaster = int((cluster.data_dir / "postmaster.pid").read_text().split()[0])
            else:
                dsn = args.dsn
            label = "PostgreSQL 15 (loopback, fsync on)" if args.dsn is None else "PostgreSQL (given DSN)"
        store, store_args, store_env, timestamps = await one_store(args, folder, dsn, "sched_bench")
        statements = Statements(dsn) if args.statements and dsn is not None else None
        if statements is not None:
            await statements.install()
        async with store:
            fleet = Fleet(store_args, folder, store_env)
            try:
                # One fleet for every round: the modes differ in the store's limits and in
                # what is submitted, so a round switches the limits, not the processes.
                workers = [fleet.worker(concurrency=8) for _ in range(2)] if args.rounds else []
                await live_workers(store, len(workers))
                for index in range(args.rounds):
                    for mode in args.modes:
                        await switch_to(store, mode)
                        rounds["claims"][mode].append(
                            await claim_latency(store, mode, args.claims, timestamps)
                        )
                        name = f"{mode}{index}"
                        steps, worker_cpu, db_cpu, counted = await throughput(
                            store, mode, args.runs, workers, postmaster, args.profile, name, statements
                        )
                        rounds["steps"][mode].append(steps)
                        rounds["worker_cpu"][mode].append(worker_cpu)
                        rounds["db_cpu"][mode].append(db_cpu)
                        if counted:
                            rounds["statements"][mode].append(counted)
            finally:
                fleet.stop()
        if args.rounds:
            report_rounds(args, label, rounds)
        if args.queued:
            for on in (False, True):
                schema = f"sched_deep_{'on' if on else 'off'}"
                store, store_args, store_env, _ = await one_store(args, folder, dsn, schema)
                db = Database(folder / f"{schema}.sqlite3" if args.sqlite else None, dsn, schema)
                async with store:
                    if on:
                        await store.set_concurrency_limit("key:*", 2)
                    filled = await fill_queue(store, db, args.queued, on)
                    claims = await deep_claims(store, args.deep_claims)
                    fleet = Fleet(store_args, folder, store_env)
                    try:
                        steps = await deep_throughput(store, fleet, db, args.drain_seconds)
                    finally:
                        fleet.stop()
                deep[on] = {"filled": filled, "claims": claims, "steps": steps}
    if deep:
        print()
        print(f"| {args.queued:,} queued runs | plain | 1,000 keys (limit 2), 1,000 tenants, priorities |")
        print("|---|---|---|")
        for name, q in (("p50", 0.5), ("p99", 0.99)):
            cells = [f"{percentile(deep[on]['claims'], q) * 1000:.1f}" for on in (False, True)]
            print(f"| claim of 8, statement {name} (ms) | {cells[0]} | {cells[1]} |")
        steps = [f"{deep[on]['steps']:.0f}" for on in (False, True)]
        print(f"| checkpointed steps / s, 2 workers draining | {steps[0]} | {steps[1]} |")
        print(f"| time to fill the queue (s) | {deep[False]['filled']:.0f} | {deep[True]['filled']:.0f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", help="PostgreSQL DSN (default: a throwaway cluster)")
    parser.add_argument("--sqlite", action="store_true", help="benchmark the SQLite store instead")
    parser.add_argument("--claims", type=int, default=30, help="claims per latency round")
    parser.add_argument("--runs", type=int, default=150, help="runs per throughput round")
    parser.add_argument(
        "--rounds",
        type=int,
        default=8,
        help="off/on rounds (0: only the deep queue); on a shared 2-core machine a ratio's median "
        "needs about 8 to say anything at 10 %% (with 4, off alone moved by half between runs)",
    )
    parser.add_argument("--queued", type=int, default=100_000, help="runs in the deep queue (0: skip it)")
    parser.add_argument("--deep-claims", type=int, default=100)
    parser.add_argument("--drain-seconds", type=float, default=15.0)
    parser.add_argument(
        "--modes",
        type=lambda text: ["off", *(m for m in text.split(",") if m != "off")],
        default=["off", "on"],
        help="the modes each round measures, of off,on,sched,rate (off always; default off,on)",
    )
    parser.add_argument("--profile", type=Path, help="record throughput rounds' workers with py-spy here")
    parser.add_argument(
        "--statements",
        action="store_true",
        help="count each mode's statements a run with pg_stat_statements (PostgreSQL, its own cluster)",
    )
    parsed = parser.parse_args()
    if parsed.statements and (parsed.sqlite or parsed.dsn):
        parser.error("--statements needs the benchmark's own PostgreSQL cluster (no --sqlite, no --dsn)")
    if unknown := set(parsed.modes) - set(MODES):
        parser.error(f"unknown --modes {sorted(unknown)}: pick from {','.join(MODES)}")
    asyncio.run(main(parsed))
