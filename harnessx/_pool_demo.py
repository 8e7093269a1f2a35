"""``harnessx demo --pool``: a supervisor and two workers on SQLite; one worker is killed
with SIGKILL in the middle of a tool call, and every run still completes, each report
written once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harnessx._demo import POOL_AGENT, pool_ledger
from harnessx._registry import AgentRef
from harnessx._results import RunResult
from harnessx._runtime import AgentRuntime
from harnessx.store._sqlite import SQLiteBackend

__all__ = ["REGIONS", "run_pool_demo"]

REGIONS = [
    "EMEA",
    "APAC",
    "AMER",
    "LATAM",
    "DACH",
    "NORDICS",
    "BENELUX",
    "IBERIA",
    "UKI",
    "ANZ",
    "MEA",
    "CEE",
]
Echo = Callable[[str], None]


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def _events(workdir: Path) -> list[dict[str, Any]]:
    path = pool_ledger(workdir)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def run_pool_demo(workdir: Path, runs: int, tool_seconds: float, echo: Echo) -> bool:
    database = workdir / "pool.sqlite3"
    # The walkthrough's own SQLite file, whatever store the caller's environment names.
    env = {k: v for k, v in os.environ.items() if k not in ("HARNESSX_DSN", "HARNESSX_SQLITE")}
    env |= {"HARNESSX_DEMO_DIR": str(workdir), "HARNESSX_DEMO_TOOL_SECONDS": str(tool_seconds)}
    store_args = ["--sqlite", str(database)]
    await asyncio.to_thread(
        subprocess.run, [_bin("harnessx"), "migrate", *store_args], check=True, capture_output=True, env=env
    )
    logs = workdir / "logs"
    logs.mkdir(exist_ok=True)

    def spawn(name: str, command: list[str]) -> subprocess.Popen[bytes]:
        with open(logs / f"{name}.log", "wb") as log:
            return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)

    common = ["--metrics-addr", "off", "--log-format", "text"]
    supervisor = spawn("supervisor", [_bin("harness-supervisor"), *store_args, *common])
    worker_args = ["--agents", "harnessx._demo:pool_registry", "--concurrency", "12", *common]
    workers = {
        name: spawn(name, [_bin("harness-worker"), *store_args, *worker_args])
        for name in ("worker-1", "worker-2")
    }
    names = {process.pid: name for name, process in workers.items()}
    try:
        async with SQLiteBackend(database, auto_migrate=False) as store:
            await _wait_for_workers(store, 2, workdir)
            echo(f"Supervisor and two workers are up (pids {', '.join(str(p) for p in names)}).")
            handles = []
            for region in REGIONS[:runs]:
                runtime = AgentRuntime(
                    AgentRef(POOL_AGENT.name, POOL_AGENT.version), backend=store, execution="pool"
                )
                await runtime.start()
                handles.append((region, runtime, await runtime.submit(f"Write the Q3 report for {region}")))
            echo(f"Submitted {len(handles)} runs to the pool.")
            killed_at, victim = await _kill_mid_tool(workdir, workers, echo)
            outcome: asyncio.Future[list[RunResult]] = asyncio.gather(*(h.result() for _, _, h in handles))
            await _live_view(workdir, outcome, len(handles), names, echo)
            results = await outcome
            for _, runtime, _ in handles:
                await runtime.stop()
    finally:
        for process in [*workers.values(), supervisor]:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in [*workers.values(), supervisor]:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
    return _summary(workdir, handles, results, killed_at, victim, names, echo)


async def _wait_for_workers(store: SQLiteBackend, count: int, workdir: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if len(await store.running_workers()) >= count:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"the workers did not start within 30 s; see {workdir / 'logs'}")


async def _kill_mid_tool(
    workdir: Path, workers: dict[str, subprocess.Popen[bytes]], echo: Echo
) -> tuple[float, int]:
    """SIGKILL the first worker seen inside a tool call (started, not finished)."""
    by_pid = {process.pid: (name, process) for name, process in workers.items()}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        events = _events(workdir)
        finished = {e["key"] for e in events if e["event"] in ("write", "skip")}
        busy = [e["pid"] for e in events if e["event"] == "start" and e["key"] not in finished]
        if busy and busy[0] in by_pid:
            name, process = by_pid[busy[0]]
            process.send_signal(signal.SIGKILL)
            process.wait()
            echo(f"{name} (pid {process.pid}) killed with SIGKILL in the middle of a tool call.")
            return time.time(), process.pid
        await asyncio.sleep(0.01)
    raise RuntimeError("no worker started a tool call within 60 s; see the logs folder")


async def _live_view(
    workdir: Path, outcome: asyncio.Future[Any], total: int, names: dict[int, str], echo: Echo
) -> None:
    started = time.monotonic()
    while not outcome.done():
        events = _events(workdir)
        writes = sum(1 for e in events if e["event"] == "write")
        by_worker = Counter(names.get(e["pid"], str(e["pid"])) for e in events if e["event"] == "start")
        workers = ", ".join(f"{name}: {count} calls" for name, count in sorted(by_worker.items()))
        echo(f"  t={time.monotonic() - started:4.1f}s  reports written {writes}/{total}  ({workers})")
        await asyncio.sleep(0.5)


def _summary(
    workdir: Path,
    handles: list[tuple[str, AgentRuntime, Any]],
    results: list[RunResult],
    killed_at: float,
    victim: int,
    names: dict[int, str],
    echo: Echo,
) -> bool:
    events = _events(workdir)
    starts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    writes = Counter(e["key"] for e in events if e["event"] == "write")
    for event in events:
        if event["event"] == "start":
            starts[event["key"]].append(event)
    recoveries = [
        calls[1]["t"] - killed_at for calls in starts.values() if len(calls) > 1 and calls[0]["pid"] == victim
    ]
    echo("")
    echo(f"{'region':<9} {'status':<10} {'tool calls':<11} {'writes':<7} workers")
    ok = True
    for (region, _, handle), result in zip(handles, results, strict=True):
        key = next((k for k in starts if k.startswith(handle.run_id)), "")
        calls = starts.get(key, [])
        who = " -> ".join(names.get(c["pid"], str(c["pid"])) for c in calls)
        echo(f"{region:<9} {result.status.value:<10} {len(calls):<11} {writes[key]:<7} {who}")
        ok = ok and result.ok and writes[key] == 1
    echo("")
    if recoveries:
        echo(
            f"Recovered {len(recoveries)} interrupted call(s): resumed on another worker "
            f"{statistics.median(recoveries):.2f} s (median), {max(recoveries):.2f} s (max) after the kill."
        )
    echo(f"Every run completed and each report was written once: {'yes' if ok else 'NO'}")
    return ok
