"""The Temporal binding beside the pool, with real worker processes on both sides.

    python bench/temporal.py              # temporal server start-dev + Redis, and a throwaway PostgreSQL 15

Reports:

- a run with one tool call (a new session, the model's tool call, the tool, the answer),
  end to end as a client sees it (``start`` + ``run``), p50/p99 over ``--runs`` runs one
  after another: on Temporal (one ``harness-worker --temporal``, events through Redis) and
  on the pool (one ``harness-worker`` and a supervisor on PostgreSQL, fsync on);
- SIGKILL -> the tool running again on another worker, on Temporal, for each heartbeat
  timeout in ``--heartbeat-timeouts`` (Temporal notices a lost worker when its activity's
  heartbeat is overdue; the pool's figure, about 0.2 s, is in ``bench/pool.py``).

The Temporal server is the development server (SQLite persistence) on loopback; a
production cluster adds its own network and persistence latency.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import machine
from pool import BIN, ROOT, Fleet, live_workers, percentile

from harnessx import AgentRef, AgentRuntime

ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),  # chaos.agents
}


def temporal_worker(target: str, redis_url: str, queue: str, folder: Path, ledger: Path) -> Any:
    log = open(folder / f"temporal-worker-{uuid.uuid4().hex[:6]}.log", "wb")  # noqa: SIM115
    process = subprocess.Popen(
        [
            str(BIN / "harness-worker"),
            "--temporal", target,
            "--task-queue", queue,
            "--events-url", redis_url,
            "--agents", "chaos.agents:registry",
            "--concurrency", "8",
            "--metrics-addr", "off",
            "--log-level", "WARNING",
        ],
        stdout=log, stderr=subprocess.STDOUT, env={**ENV, "HX_LEDGER": str(ledger)},
    )  # fmt: skip
    log.close()
    return process


async def one_tool_runs(make_runtime: Any, runs: int) -> list[float]:
    samples = []
    for index in range(runs + 2):
        runtime = make_runtime()
        started = time.perf_counter()
        await runtime.start()
        result = await runtime.run(f"job {index}")
        elapsed = time.perf_counter() - started
        await runtime.stop()
        assert result.ok, result
        if index >= 2:  # the first runs warm the connections and the worker up
            samples.append(elapsed)
    return samples


def lines(ledger: Path) -> list[dict[str, Any]]:
    import json

    return (
        [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]
        if ledger.exists()
        else []
    )


async def temporal_kills(
    target: str, redis_url: str, folder: Path, heartbeat: float, kills: int
) -> list[float]:
    from harnessx.temporal import RedisEvents, TemporalBackend

    queue = f"bench-kill-{uuid.uuid4().hex[:6]}"
    ledger = folder / f"kills-{heartbeat}.jsonl"
    backend = await TemporalBackend.connect(
        target, events=RedisEvents(redis_url), task_queue=queue, heartbeat_timeout=heartbeat
    )
    workers = [temporal_worker(target, redis_url, queue, folder, ledger) for _ in range(2)]
    samples = []
    try:
        async with backend:
            for trial in range(kills):
                runtime = AgentRuntime(AgentRef("slow", "v1"), backend=backend)
                handle = await runtime.submit(f"kill {trial}")
                while not (first := [x for x in lines(ledger) if x["key"].startswith(handle.run_id)]):
                    await asyncio.sleep(0.005)
                victim = next(w for w in workers if w.pid == first[0]["pid"])
                killed = time.time()
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                while not [
                    x for x in lines(ledger) if x["key"].startswith(handle.run_id) and x["attempt"] > 1
                ]:
                    await asyncio.sleep(0.002)
                again = [x for x in lines(ledger) if x["key"].startswith(handle.run_id) and x["attempt"] > 1]
                samples.append(again[0]["t"] - killed)
                assert (await handle.result()).ok
                workers.remove(victim)
                workers.append(temporal_worker(target, redis_url, queue, folder, ledger))
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    return samples


def _row(samples: list[float]) -> str:
    p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
    return f"{p50:.3f} | {p99:.3f} | {max(samples):.3f} | {len(samples)}"


async def main(args: argparse.Namespace) -> None:
    args.machine_reading = machine.reading()  # before any server or worker starts
    from harnessx.temporal import RedisEvents, TemporalBackend
    from harnessx.testing import RedisServer, TemporalDevServer, ThrowawayCluster

    with tempfile.TemporaryDirectory() as name, ExitStack() as stack:
        folder = Path(name)
        server = stack.enter_context(TemporalDevServer(root=folder / "temporal"))
        redis = stack.enter_context(RedisServer(root=folder / "redis"))
        # Temporal
        queue = f"bench-{uuid.uuid4().hex[:6]}"
        worker = temporal_worker(server.target, redis.url, queue, folder, folder / "ledger-t.jsonl")
        backend = await TemporalBackend.connect(
            server.target, events=RedisEvents(redis.url), task_queue=queue
        )
        try:
            async with backend:
                on_temporal = await one_tool_runs(
                    lambda: AgentRuntime(AgentRef("safe", "v1"), backend=backend), args.runs
                )
        finally:
            worker.kill()
            worker.wait()
        # The pool on PostgreSQL
        dsn = stack.enter_context(ThrowawayCluster(durable=True)).dsn
        # The DSN in the environment: a password on a command line is visible to every user.
        store_args, store_env = ["--schema", "harnessx_temporal_bench"], {"HARNESSX_DSN": dsn}
        subprocess.run(
            [str(BIN / "harnessx"), "migrate", *store_args],
            check=True,
            capture_output=True,
            env={**os.environ, **store_env},
        )
        from harnessx._processes import open_store

        store = open_store(
            dsn=dsn, sqlite_path="", schema="harnessx_temporal_bench", lease_seconds=30.0, auto_migrate=False
        )
        async with store:
            fleet = Fleet(store_args, folder, store_env)
            try:
                fleet.spawn("harness-supervisor")
                fleet.worker()
                await live_workers(store, 1)
                on_pool = await one_tool_runs(
                    lambda: AgentRuntime(AgentRef("safe", "v1"), backend=store, execution="pool"), args.runs
                )
            finally:
                fleet.stop()
        kills = {
            heartbeat: await temporal_kills(server.target, redis.url, folder, heartbeat, args.kills)
            for heartbeat in args.heartbeat_timeouts
        }
    servers = "Temporal: start-dev (server 1.32, SQLite); pool: PostgreSQL 15"
    print(f"{machine.describe(args.machine_reading)}; {servers}")
    print()
    print("| a run with one tool call, start + run (s) | p50 | p99 | max | n |")
    print("|---|---|---|---|---|")
    for label, samples in (
        ("Temporal (1 worker, Redis events)", on_temporal),
        ("pool (1 worker, PostgreSQL)", on_pool),
    ):
        print(f"| {label} | {_row(samples)} |")
    print()
    print("| Temporal: SIGKILL -> tool running again (s) | p50 | p99 | max | n |")
    print("|---|---|---|---|---|")
    for heartbeat, samples in kills.items():
        print(f"| heartbeat_timeout={heartbeat:g} s | {_row(samples)} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--kills", type=int, default=5, help="kills per heartbeat timeout")
    parser.add_argument(
        "--heartbeat-timeouts",
        type=lambda text: [float(x) for x in text.split(",")],
        default=[2.0, 5.0, 10.0],
    )
    asyncio.run(main(parser.parse_args()))
