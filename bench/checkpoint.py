"""Checkpoint cost, next to the floor measured in the same run on the same store.

    python bench/checkpoint.py                       # SQLite, and PostgreSQL if available
    python bench/checkpoint.py --dsn postgresql://…  # an existing PostgreSQL server
    python bench/checkpoint.py --backends sqlite

For each backend it reports:

- floor: SQLite, a single-row commit (``BEGIN IMMEDIATE; UPDATE …; COMMIT``) on the
  backend's own thread; PostgreSQL, a bare fenced single-row ``UPDATE`` through the pool;
- checkpoint: one boundary commit as the runtime makes it (a tool's raw result: a tool entry
  moved plus one event, fenced), and its ratio to the floor; then the same boundary had it
  also changed a run field (as a model call's usage does), which writes the run row too
  (on PostgreSQL a phase change alone goes to the session row); floor commits and both
  kinds of checkpoint take turns;
- run: a whole run with one tool call and an answer (eight boundaries in six commits), in one
  runtime that starts a new session per run;
- fresh run: the same in the seed's pattern, everything set up per request: a new agent,
  a new ``AgentRuntime`` (``async with``), ``await runtime.run(prompt)``;
- round trips: how many a fresh run makes to the store, counted on the wire after warm-up
  (PostgreSQL: through a loopback proxy; SQLite: calls to the backend's database thread,
  with its durable commits), see ``harnessx.testing._round_trips``; deterministic;
- late/early: the median checkpoint cost of turns 181-200 of a long session over that of
  turns 1-20 of a fresh one, the two sessions taking turns (each turn is a run with one
  tool call, so turn 200 carries ~800 messages).

Without ``--dsn`` a throwaway PostgreSQL cluster is started with its durable defaults
(fsync on), using ``harnessx.testing.ThrowawayCluster``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import machine

from harnessx import Agent, AgentRuntime, ProviderResponse, ScriptedProvider, SQLiteBackend, ToolCall
from harnessx._events import RunEvent, RunEventType
from harnessx._results import ToolResult
from harnessx._state import Delta, Phase, RunPatch, RunState, ToolEntry, ToolStatus
from harnessx.store._protocol import Lease, Store
from harnessx.testing._round_trips import PostgresRoundTrips, SQLiteRoundTrips

ROOT = Path(__file__).resolve().parents[1]


async def timed(work: Callable[[], Awaitable[Any]], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        await work()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def median(samples: list[float]) -> float:
    return statistics.median(samples)


async def floor_sqlite(backend: SQLiteBackend, lease: Lease) -> Callable[[], Awaitable[None]]:
    def setup(conn: Any) -> None:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id INTEGER PRIMARY KEY, v INTEGER)")
        conn.execute("INSERT OR IGNORE INTO bench_floor VALUES (1, 0)")

    await backend._call(setup)

    def one(conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE bench_floor SET v = v + 1 WHERE id = 1")
        conn.execute("COMMIT")

    return lambda: backend._call(one)


async def floor_postgres(backend: Any, lease: Lease) -> Callable[[], Awaitable[None]]:
    sql = (
        "UPDATE sessions SET message_count = message_count WHERE id = $1 AND lease_owner = $2 "
        "AND generation = $3 AND lease_expires_at > now()"
    )

    async def one() -> None:
        async with backend._pool.acquire() as conn:
            await conn.execute(sql, lease.session_id, lease.owner, lease.generation)

    return one


def checkpoint_maker(
    store: Store, lease: Lease, state: RunState, first_seq: int
) -> Callable[[bool], Callable[[], Awaitable[None]]]:
    """Boundaries like a tool's raw result: one tool entry moves, one event is appended.
    Each call builds the next delta and returns the commit to time: building the delta is
    the engine's work, not the store's (CheckpointTimer times the runtime's commits alike).
    ``run_row``: the delta also sets a run field (as a model call's usage does), so the run
    row is written too; otherwise only the phase moves, which PostgreSQL keeps on the
    session row the fence writes anyway."""
    seq = first_seq
    entry = ToolEntry(
        execution_key=f"{state.run_id}:0:bench",
        iteration=0,
        index=0,
        call=ToolCall("bench", "write_report", {"region": "EMEA"}),
        policy="manual",
        status=ToolStatus.STARTED,
        attempt=1,
    )

    def next_commit(run_row: bool = False) -> Callable[[], Awaitable[None]]:
        nonlocal seq, entry
        seq += 1
        entry = entry.moved(status=ToolStatus.RAW_COMPLETED, raw_result=ToolResult("bench", "ok " * 20))
        event = RunEvent(
            RunEventType.TOOL_CALL_COMPLETE,
            entry.call,  # the payload the engine gives this event
            state.session_id,
            state.run_id,
        )
        event.cursor = str(seq)
        changed = RunPatch(iteration=state.iteration) if run_row else RunPatch()
        delta = Delta(Phase.RAW_RESULT, tools=[entry], events=[event], run=changed)
        return lambda: store.commit(lease, state, delta, [])

    return next_commit


async def floor_and_checkpoints(
    floor: Callable[[], Awaitable[None]],
    next_commit: Callable[[bool], Callable[[], Awaitable[None]]],
    repeat: int,
) -> tuple[list[float], list[float], list[float]]:
    """Floor commits and both kinds of checkpoint in turn, so that all see the same machine:
    on a shared VM, timing one block after the other lets drift between the blocks into the
    ratio."""
    floor_ms: list[float] = []
    checkpoint_ms: list[float] = []
    run_row_ms: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        await floor()
        floor_ms.append((time.perf_counter() - start) * 1000)
        for run_row, samples in ((False, checkpoint_ms), (True, run_row_ms)):
            commit = next_commit(run_row)
            start = time.perf_counter()
            await commit()
            samples.append((time.perf_counter() - start) * 1000)
    return floor_ms, checkpoint_ms, run_row_ms


def bench_agent() -> Agent:
    def script(request: Any) -> ProviderResponse | str:
        if not request.tool_results:  # the request before the tool's answer
            return ProviderResponse(
                text="Writing.", tool_calls=[ToolCall("c", "write_report", {"region": "EMEA"})]
            )
        return "Report written."

    agent = Agent(provider=ScriptedProvider(script, chunk_size=64))

    @agent.tools.register()
    def write_report(region: str) -> str:
        """Write a report.

        Args:
            region: Region.
        """
        return f"report for {region}"

    return agent


async def fresh_run(store: Store) -> None:
    """One request in the seed's pattern: agent and runtime made for it, closed after it."""
    async with AgentRuntime(bench_agent(), backend=store) as runtime:
        await runtime.run("Write the EMEA report.")


async def sqlite_round_trips(store: SQLiteBackend) -> str:
    await fresh_run(store)
    with SQLiteRoundTrips(store) as counter:
        await fresh_run(store)
    return f"{counter.count} ({counter.commits} commits)"


async def postgres_round_trips(dsn: str, schema: str) -> str:
    from harnessx.store import PostgresBackend

    async with PostgresRoundTrips(dsn) as proxy, PostgresBackend(proxy.dsn, schema=schema) as store:
        for _ in range(2):
            await fresh_run(store)  # every statement prepared once
        proxy.reset()
        await fresh_run(store)
        return str(proxy.count)


class CheckpointTimer:
    """Times each commit the runtime makes, by wrapping the store's ``commit``."""

    def __init__(self, store: Any) -> None:
        self.samples: list[float] = []
        self._commit = store.commit

        async def timed_commit(*args: Any, **kwargs: Any) -> None:
            start = time.perf_counter()
            await self._commit(*args, **kwargs)
            self.samples.append((time.perf_counter() - start) * 1000)

        store.commit = timed_commit


async def measure(
    store: Store,
    label: str,
    floor: Callable[[Lease], Awaitable[Callable[[], Awaitable[None]]]],
    args: Any,
    round_trips: Callable[[], Awaitable[str]],
) -> dict[str, Any]:
    runtime = AgentRuntime(bench_agent(), backend=store)
    session_id = await runtime.start()
    await runtime.run("warm up")
    await runtime.stop()

    # The timed boundaries belong to a running run, as every tool's raw result does.
    lease = await store.claim(session_id, "bench")
    request = {"role": "user", "content": "Write the EMEA report."}
    start = Delta(Phase.PREPARE_MODEL_CALL, messages=[request])
    run_id = uuid.uuid4().hex
    await store.create_run(lease, run_id, None, request["content"], start)
    state = await store.load_state(run_id)
    floor_ms, checkpoint_ms, run_row_ms = await floor_and_checkpoints(
        await floor(lease), checkpoint_maker(store, lease, state, 0), args.repeat
    )
    await store.release(lease)

    run_ms: list[float] = []
    async with AgentRuntime(bench_agent(), backend=store) as per_run:
        for _ in range(args.runs):
            await per_run.start()
            run_ms += await timed(lambda: per_run.run("Write the EMEA report."), 1)

    fresh_ms: list[float] = []
    for _ in range(args.runs):
        fresh_ms += await timed(lambda: fresh_run(store), 1)
    trips = await round_trips()

    timer = CheckpointTimer(store)

    async def turn(session: AgentRuntime) -> list[float]:
        before = len(timer.samples)
        await session.run("Write the EMEA report.")
        return timer.samples[before:]

    # The long session's last 20 turns alternate with a fresh session's first 20, so both
    # windows see the same machine: measured one after the other, a background burst in
    # one window (autovacuum, a server checkpoint, the shared VM) decides the ratio.
    early: list[float] = []
    late: list[float] = []
    async with (
        AgentRuntime(bench_agent(), backend=store) as long_session,
        AgentRuntime(bench_agent(), backend=store) as fresh_session,
    ):
        for _ in range(args.turns - 20):
            await turn(long_session)
        for _ in range(20):
            early += await turn(fresh_session)
            late += await turn(long_session)
    return {
        "backend": label,
        "floor": median(floor_ms),
        "checkpoint": median(checkpoint_ms),
        "run_row": median(run_row_ms),
        "run": median(run_ms),
        "fresh": median(fresh_ms),
        "round_trips": trips,
        "early": median(early),
        "late": median(late),
    }


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"checkpoints: {args.repeat} per backend; runs: {args.runs}; long session: {args.turns} turns")
    print(machine.describe(args.machine_reading))
    print()
    print(
        "| backend | floor (ms) | checkpoint (ms) | checkpoint / floor | checkpoint - floor (ms) "
        "| writing the run row too (ms) | run with 1 tool call (ms) | fresh run (ms) "
        "| round trips per fresh run | late/early turn |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['backend']} | {row['floor']:.3f} | {row['checkpoint']:.3f} | "
            f"{row['checkpoint'] / row['floor']:.2f}x | {row['checkpoint'] - row['floor']:.3f} | "
            f"{row['run_row']:.3f} ({row['run_row'] / row['floor']:.2f}x) | "
            f"{row['run']:.2f} | {row['fresh']:.2f} | {row['round_trips']} | "
            f"{row['late'] / row['early']:.2f} "
            f"({row['early']:.3f} -> {row['late']:.3f} ms) |"
        )


async def main(args: argparse.Namespace) -> None:
    args.machine_reading = machine.reading()  # before any server or worker starts
    rows = []
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        if "sqlite" in args.backends:
            async with SQLiteBackend(Path(folder) / "bench.sqlite3") as sqlite:
                rows.append(
                    await measure(
                        sqlite,
                        "SQLite (WAL, synchronous=FULL)",
                        lambda lease: floor_sqlite(sqlite, lease),
                        args,
                        lambda: sqlite_round_trips(sqlite),
                    )
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

            async with PostgresBackend(dsn, schema="harnessx_bench") as postgres:
                rows.append(
                    await measure(
                        postgres,
                        label,
                        lambda lease: floor_postgres(postgres, lease),
                        args,
                        lambda: postgres_round_trips(dsn, "harnessx_bench"),
                    )
                )
    print_table(rows, args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", help="PostgreSQL DSN (default: a throwaway cluster)")
    parser.add_argument("--backends", default="sqlite,postgres", type=lambda s: s.split(","))
    parser.add_argument("--repeat", type=int, default=2000, help="checkpoints and floor commits to time")
    parser.add_argument("--runs", type=int, default=100, help="whole runs to time")
    parser.add_argument("--turns", type=int, default=200, help="turns of the long session")
    asyncio.run(main(parser.parse_args()))
