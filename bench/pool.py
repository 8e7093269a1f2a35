"""Pool benchmarks with real harness-worker and harness-supervisor processes.

    python bench/pool.py                         # a throwaway PostgreSQL 15 cluster, fsync on
    python bench/pool.py --dsn postgresql://…    # an existing server
    python bench/pool.py --sqlite                # the embedded store instead

Reports, side by side:

- kill -> resume: a worker is SIGKILLed while its run is inside a tool call; the time until
  that call starts again on another worker (p50/p99 over --kills kills; target < 1 s);
- claim latency: from a run's creation to its first committed event, read from the
  database's own timestamps (p50/p99 over --claims runs submitted one by one to idle workers);
- throughput: checkpointed steps per second with 1, 2 and 4 workers (8 boundaries per run:
  model reply, prepared tools, dispatch, raw result, completed result, next model call,
  model reply, finish; committed in 6 transactions, the completed result with the next
  model call and the last reply with the finish), and submissions per second while those
  workers run (each a new pool runtime's start() and submit(), one after another from this
  process);
- submissions per second with no worker running (--runs of them; they stay queued);
- CPU per step during each throughput measurement, which the machine's load moves far less
  than the rate: the workers' (``/proc/<pid>/stat``), the database server's (PostgreSQL: the
  postmaster and its children, when the server runs on this machine) and this process's own
  (the submitter and the result waiters). On a machine of N cores, N seconds of CPU per
  second is the most there is: 1 / (CPU per step) x N bounds the steps per second.

``--parts`` picks what to measure (default: kills,claims,throughput,submissions).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import machine

from harnessx import AgentRef, AgentRuntime
from harnessx.store._protocol import Store

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
STEPS_PER_RUN = 8
TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int, children: bool = False) -> float:
    """CPU seconds of a live process (user + system), with its waited-for children's when
    ``children``; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    # fields[0] is the state (field 3): utime, stime, cutime, cstime are fields 14-17.
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICKS


def server_cpu(postmaster: int | None) -> float:
    """CPU seconds of a PostgreSQL server: the postmaster, its live children and the ones it
    has reaped (backends of closed connections)."""
    if postmaster is None:
        return 0.0
    total = process_cpu(postmaster, children=True)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(stat[1]) == postmaster:
            total += (int(stat[11]) + int(stat[12])) / TICKS
    return total


@dataclass
class CpuPerStep:
    """Milliseconds of CPU per checkpointed step, by process."""

    workers: float
    server: float | None
    submitter: float

    @property
    def total(self) -> float:
        return self.workers + (self.server or 0.0) + self.submitter


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Fleet:
    """Worker and supervisor processes against one store.

    ``store_env`` carries a PostgreSQL DSN (``HARNESSX_DSN``): on a command line its password
    would be visible to every user of the machine."""

    def __init__(self, store_args: list[str], folder: Path, store_env: dict[str, str] | None = None) -> None:
        self.store_args = store_args
        self.folder = folder
        self.ledger = folder / "ledger.jsonl"
        self.processes: list[subprocess.Popen[bytes]] = []
        self.env = {
            **os.environ,
            **(store_env or {}),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),  # chaos.agents
            "HX_LEDGER": str(self.ledger),
        }

    def spawn(self, kind: str, *extra: str) -> subprocess.Popen[bytes]:
        command = [
            str(BIN / kind),
            *self.store_args,
            "--metrics-addr",
            "off",
            "--log-level",
            "WARNING",
            *extra,
        ]
        log = open(self.folder / f"{kind}-{len(self.processes)}.log", "wb")  # noqa: SIM115
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        log.close()
        self.processes.append(process)
        return process

    def worker(self, concurrency: int = 8) -> subprocess.Popen[bytes]:
        return self.spawn(
            "harness-worker", "--agents", "chaos.agents:registry", "--concurrency", str(concurrency)
        )

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        self.processes.clear()

    def lines(self) -> list[dict[str, Any]]:
        if not self.ledger.exists():
            return []
        return [json.loads(line) for line in self.ledger.read_text().splitlines() if line.strip()]


async def live_workers(store: Store, count: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        alive = [w for w in await store.running_workers() if w.alive]
        if len(alive) >= count:
            return
        await asyncio.sleep(0.02)
    raise RuntimeError(f"{count} workers did not come up")


async def submit(store: Store, agent: str, message: str) -> Any:
    runtime = AgentRuntime(AgentRef(agent, "v1"), backend=store, execution="pool")
    await runtime.start()
    handle = await runtime.submit(message)
    return runtime, handle


async def bench_kills(store: Store, fleet: Fleet, kills: int) -> list[float]:
    fleet.spawn("harness-supervisor", "--scan-interval", "0.05")
    workers = [fleet.worker(), fleet.worker()]
    samples = []
    for trial in range(kills):
        await live_workers(store, 2)
        runtime, handle = await submit(store, "slow", f"kill {trial}")
        prefix = handle.run_id
        while not (first := [line for line in fleet.lines() if line["key"].startswith(prefix)]):
            await asyncio.sleep(0.005)
        victim = next(w for w in workers if w.pid == first[0]["pid"])
        killed = time.time()
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        while not (
            again := [
                line for line in fleet.lines() if line["key"].startswith(prefix) and line["attempt"] > 1
            ]
        ):
            await asyncio.sleep(0.002)
        samples.append(again[0]["t"] - killed)
        await handle.result()
        await runtime.stop()
        workers.remove(victim)
        workers.append(fleet.worker())
    fleet.stop()
    return samples


async def bench_claims(store: Store, fleet: Fleet, claims: int, timestamps: Any) -> list[float]:
    fleet.worker()
    fleet.worker()
    await live_workers(store, 2)
    await asyncio.sleep(1.0)  # let both workers settle into their idle polling
    run_ids = []
    for index in range(claims):
        runtime, handle = await submit(store, "safe", f"claim {index}")
        await handle.result()
        await runtime.stop()
        run_ids.append(handle.run_id)
        await asyncio.sleep(0.05)  # idle again before the next one
    fleet.stop()
    return [first - created for created, _, first in await timestamps(run_ids)]


async def bench_throughput(
    store: Store, fleet: Fleet, workers: int, runs: int, postmaster: int | None
) -> tuple[float, float, CpuPerStep]:
    """Checkpointed steps per second, submissions per second while the workers run, and the
    CPU each step cost."""
    pool = [fleet.worker(concurrency=8) for _ in range(workers)]
    await live_workers(store, workers)
    await asyncio.sleep(0.5)  # past the workers' start-up (imports, first statements)
    cpu_before = (
        sum(process_cpu(p.pid) for p in pool),
        server_cpu(postmaster),
        time.process_time(),
    )
    started = time.perf_counter()
    submitted = [await submit(store, "safe", f"throughput {i}") for i in range(runs)]
    submitting = time.perf_counter() - started
    await asyncio.gather(*(handle.result() for _, handle in submitted))
    elapsed = time.perf_counter() - started
    cpu_after = (
        sum(process_cpu(p.pid) for p in pool),
        server_cpu(postmaster),
        time.process_time(),
    )
    for runtime, _ in submitted:
        await runtime.stop()
    fleet.stop()
    steps = runs * STEPS_PER_RUN
    spent = [(after - before) * 1000 / steps for after, before in zip(cpu_after, cpu_before, strict=True)]
    worker_ms, server_ms, submitter_ms = spent
    cpu = CpuPerStep(worker_ms, server_ms if postmaster is not None else None, submitter_ms)
    return steps / elapsed, runs / submitting, cpu


async def bench_submissions(store: Store, runs: int) -> float:
    """Submissions per second with no worker running: the submitting process alone."""
    started = time.perf_counter()
    for index in range(runs):
        runtime, _ = await submit(store, "safe", f"queued {index}")
        await runtime.stop()
    return runs / (time.perf_counter() - started)


def sqlite_timestamps(path: Path) -> Any:
    import sqlite3

    async def read(run_ids: list[str]) -> list[tuple[float, float, float]]:
        with sqlite3.connect(path) as conn:
            rows = []
            for run_id in run_ids:
                created = conn.execute("SELECT created_at FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
                claimed = conn.execute(
                    "SELECT MIN(claimed_at) FROM run_claims WHERE run_id = ?", (run_id,)
                ).fetchone()[0]
                first = conn.execute(
                    "SELECT MIN(created_at) FROM events WHERE run_id = ?", (run_id,)
                ).fetchone()[0]
                rows.append((created, claimed, first))
            return rows

    return read


async def postgres_postmaster(dsn: str) -> int | None:
    """The server's postmaster pid when it runs on this machine (its backend's parent)."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        backend = await conn.fetchval("SELECT pg_backend_pid()")
        try:  # while the backend lives
            stat = Path(f"/proc/{backend}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return None  # another machine (or container)
    finally:
        await conn.close()
    parent = int(stat[1])
    return parent if b"postgres" in Path(f"/proc/{parent}/cmdline").read_bytes() else None


def postgres_timestamps(dsn: str, schema: str) -> Any:
    import asyncpg

    async def read(run_ids: list[str]) -> list[tuple[float, float, float]]:
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch(
                "SELECT extract(epoch FROM r.created_at)::float8, "
                f'(SELECT extract(epoch FROM min(c.claimed_at))::float8 FROM "{schema}".run_claims c '
                "WHERE c.run_id = r.id), "
                "extract(epoch FROM min(e.created_at))::float8 "
                f'FROM "{schema}".runs r JOIN "{schema}".events e ON e.run_id = r.id '
                "WHERE r.id = ANY($1::text[]) GROUP BY r.id, r.created_at",
                run_ids,
            )
            return [(row[0], row[1], row[2]) for row in rows]
        finally:
            await conn.close()

    return read


async def main(args: argparse.Namespace) -> None:
    args.machine_reading = machine.reading()  # before any server or worker starts
    with tempfile.TemporaryDirectory() as folder_name, ExitStack() as stack:
        folder = Path(folder_name)
        store_env: dict[str, str] = {}
        postmaster: int | None = None
        if args.sqlite:
            database = folder / "pool.sqlite3"
            store_args = ["--sqlite", str(database)]
            label = "SQLite (WAL, synchronous=FULL)"
            timestamps = sqlite_timestamps(database)
        else:
            dsn = args.dsn
            label = "PostgreSQL (given DSN)"
            if dsn is None:
                from harnessx.testing import ThrowawayCluster

                dsn = stack.enter_context(ThrowawayCluster(durable=True)).dsn
                label = "PostgreSQL 15 (loopback, fsync on)"
            store_args = ["--schema", "harnessx_pool_bench"]
            store_env = {"HARNESSX_DSN": dsn}
            timestamps = postgres_timestamps(dsn, "harnessx_pool_bench")
            postmaster = await postgres_postmaster(dsn)
        subprocess.run(
            [str(BIN / "harnessx"), "migrate", *store_args],
            check=True,
            capture_output=True,
            env={**os.environ, **store_env},
        )
        from harnessx._processes import open_store

        store = open_store(
            dsn=store_env.get("HARNESSX_DSN"),
            sqlite_path=str(folder / "pool.sqlite3"),  # used without a DSN
            schema="harnessx_pool_bench",
            lease_seconds=30.0,
            auto_migrate=False,
        )
        async with store:
            fleet = Fleet(store_args, folder, store_env)
            parts = set(args.parts.split(","))
            kills: list[float] = []
            claims: list[float] = []
            throughput: dict[int, tuple[float, float, CpuPerStep]] = {}
            alone = None
            try:
                if "kills" in parts:
                    kills = await bench_kills(store, fleet, args.kills)
                if "claims" in parts:
                    claims = await bench_claims(store, fleet, args.claims, timestamps)
                if "throughput" in parts:
                    for n in args.workers:
                        throughput[n] = await bench_throughput(store, fleet, n, args.runs, postmaster)
                if "submissions" in parts:
                    alone = await bench_submissions(store, args.runs)
            finally:
                fleet.stop()
    print(f"store: {label}; {machine.describe(args.machine_reading)}")
    print()
    print("| measure | p50 | p99 | max | n |")
    print("|---|---|---|---|---|")
    if kills:
        print(
            f"| SIGKILL -> call running again on another worker (s) | {percentile(kills, 0.5):.3f} | "
            f"{percentile(kills, 0.99):.3f} | {max(kills):.3f} | {len(kills)} |"
        )
    if claims:
        print(
            f"| claim latency, creation -> first event (s) | {percentile(claims, 0.5):.3f} | "
            f"{percentile(claims, 0.99):.3f} | {max(claims):.3f} | {len(claims)} |"
        )
    print()
    print(
        "| workers | checkpointed steps / s | submissions / s meanwhile | runs "
        "| CPU per step (ms): workers | server | submitter | total |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for count, (rate, submissions, cpu) in throughput.items():
        server = "—" if cpu.server is None else f"{cpu.server:.3f}"
        print(
            f"| {count} | {rate:.0f} | {submissions:.0f} | {args.runs} | {cpu.workers:.3f} | {server} "
            f"| {cpu.submitter:.3f} | {cpu.total:.3f} |"
        )
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if alone is not None:
        print(f"\nsubmissions / s with no worker running: {alone:.0f} ({args.runs} runs)")
    if kills:
        print(f"\n(mean kill -> resume {statistics.mean(kills):.3f} s)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", help="PostgreSQL DSN (default: a throwaway cluster)")
    parser.add_argument("--sqlite", action="store_true", help="benchmark the SQLite store instead")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--claims", type=int, default=50)
    parser.add_argument("--runs", type=int, default=200, help="runs per throughput measurement")
    parser.add_argument("--workers", type=lambda s: [int(n) for n in s.split(",")], default=[1, 2, 4])
    parser.add_argument("--parts", default="kills,claims,throughput,submissions")
    asyncio.run(main(parser.parse_args()))
