"""Real worker and supervisor processes for the pool tests, and audits read from the database."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from durable_support import BackendTarget

from harnessx import AgentRef, AgentRuntime, RunHandle

__all__ = [
    "Pool",
    "audit_generations",
    "cut_leader_connection",
    "driving_intervals",
    "latest_term",
    "ledger",
    "log_records",
    "most_at_once",
    "submit_many",
]

ROOT = Path(__file__).resolve().parent.parent  # the checkout: the workers load chaos.agents
BIN = Path(sys.executable).parent


def ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def signal(self, signum: int) -> None:
        self.popen.send_signal(signum)

    def wait(self, timeout: float = 30) -> int:
        return self.popen.wait(timeout=timeout)

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def records(self) -> list[dict[str, Any]]:
        return log_records(self.text())


def log_records(text: str) -> list[dict[str, Any]]:
    """The JSON lines of a process log (``HARNESSX_LOG_FORMAT=json``), skipping anything else."""
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


@dataclass
class Pool:
    target: BackendTarget
    folder: Path
    lease_seconds: float = 30.0
    slow_tool: float = 0.0
    processes: list[Process] = field(default_factory=list)

    @property
    def ledger_path(self) -> Path:
        return self.folder / "ledger"

    def hold_tools(self) -> None:
        """From now on the workers' tool calls wait, once in the ledger, until release_tools()."""
        (self.folder / "hold").touch()

    def release_tools(self) -> None:
        (self.folder / "hold").unlink(missing_ok=True)

    def _store_args(self) -> list[str]:
        # A PostgreSQL DSN goes in the environment (_env): on a command line its password
        # would be visible to every user of the machine.
        if self.target.kind == "sqlite":
            return ["--sqlite", self.target.location]
        return []

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            **({"HARNESSX_DSN": self.target.location} if self.target.kind == "postgres" else {}),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "HX_LEDGER": str(self.ledger_path),
            "HX_SLOW_TOOL": str(self.slow_tool),
            "HX_HOLD": str(self.folder / "hold"),
            "HARNESSX_LOG_FORMAT": "json",
        }

    def migrate(self) -> None:
        subprocess.run(
            [str(BIN / "harnessx"), "migrate", *self._store_args()],
            check=True,
            capture_output=True,
            env=self._env(),
        )

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``harnessx ARGS`` against the pool's store (a DSN goes in the environment)."""
        return subprocess.run(
            [str(BIN / "harnessx"), *args, *self._store_args()],
            capture_output=True,
            text=True,
            env=self._env(),
            check=False,
        )

    def _spawn(self, name: str, command: list[str]) -> Process:
        log = self.folder / f"{name}.log"
        handle = open(log, "wb")  # noqa: SIM115 - the child owns it; closed when we reap it
        popen = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=self._env())
        handle.close()
        process = Process(name, popen, log)
        self.processes.append(process)
        return process

    def worker(self, name: str, *, concurrency: int = 8, extra: list[str] | None = None) -> Process:
        return self._spawn(
            name,
            [
                str(BIN / "harness-worker"),
                *self._store_args(),
                "--agents", "chaos.agents:registry",
                "--concurrency", str(concurrency),
                "--lease-seconds", str(self.lease_seconds),
                "--metrics-addr", "off",
                *(extra or []),
            ],
        )  # fmt: skip

    def supervisor(self, name: str, *, extra: list[str] | None = None) -> Process:
        return self._spawn(
            name,
            [str(BIN / "harness-supervisor"), *self._store_args(), "--metrics-addr", "off", *(extra or [])],
        )

    def stop_all(self) -> None:
        for process in self.processes:
            if process.popen.poll() is None:
                process.popen.kill()
            process.popen.wait(timeout=30)

    async def wait_for_workers(self, count: int, within: float = 30) -> None:
        async with self.target.open(auto_migrate=False) as store:
            deadline = time.monotonic() + within
            while len(await store.running_workers()) < count:
                if time.monotonic() > deadline:
                    logs = "\n".join(p.text()[-2000:] for p in self.processes)
                    raise AssertionError(f"{count} workers did not register in time:\n{logs}")
                await asyncio.sleep(0.05)

    async def wait_for_ledger(self, predicate: Any, within: float = 30) -> list[dict[str, Any]]:
        deadline = time.monotonic() + within
        while not predicate(lines := ledger(self.ledger_path)):
            if time.monotonic() > deadline:
                raise AssertionError(f"ledger condition not met; {len(lines)} lines")
            await asyncio.sleep(0.02)
        return lines


async def submit_many(store: Any, policies: list[str]) -> list[tuple[AgentRuntime, RunHandle, str]]:
    submitted = []
    for index, policy in enumerate(policies):
        runtime = AgentRuntime(AgentRef(policy, "v1"), backend=store, execution="pool")
        await runtime.start()
        handle = await runtime.submit(f"job {index}", request_id=f"job-{index}")
        submitted.append((runtime, handle, policy))
    return submitted


async def audit_generations(target: BackendTarget) -> list[str]:
    """Writes whose generation is lower than an earlier write's in the same run: a stale
    holder committed after a newer one had taken over. Returns one line per violation."""
    if target.kind == "sqlite":
        import sqlite3

        with sqlite3.connect(target.location) as conn:
            rows = conn.execute("SELECT run_id, seq, generation FROM events ORDER BY run_id, seq").fetchall()
    else:
        import asyncpg

        conn = await asyncpg.connect(target.location)
        try:
            await conn.execute("SET search_path TO harness_x")
            rows = [
                tuple(r)
                for r in await conn.fetch("SELECT run_id, seq, generation FROM events ORDER BY run_id, seq")
            ]
        finally:
            await conn.close()
    problems = []
    highest: dict[str, int] = {}
    expected: dict[str, int] = {}
    for run_id, seq, generation in rows:
        if generation < highest.get(run_id, 0):
            problems.append(
                f"run {run_id} event {seq} written by generation {generation} after {highest[run_id]}"
            )
        highest[run_id] = max(highest.get(run_id, 0), generation)
        if seq != expected.get(run_id, 0) + 1:
            problems.append(f"run {run_id} has a gap or duplicate at event {seq}")
        expected[run_id] = seq
    return problems


async def latest_term(target: BackendTarget, role: str = "supervisor") -> tuple[int, str] | None:
    """The stored ``(epoch, holder)`` of ``role``'s latest leadership term."""
    if target.kind == "sqlite":
        import sqlite3

        with sqlite3.connect(target.location) as conn:
            row = conn.execute("SELECT epoch, holder FROM leadership WHERE role = ?", (role,)).fetchone()
    else:
        import asyncpg

        conn = await asyncpg.connect(target.location, server_settings={"search_path": "harness_x"})
        try:
            row = await conn.fetchrow("SELECT epoch, holder FROM leadership WHERE role = $1", role)
        finally:
            await conn.close()
    return None if row is None else (int(row[0]), str(row[1]))


# The supervisor role's advisory lock as pg_locks shows it (the key as in find_orphans).
_LEADER_LOCK = """
    FROM pg_catalog.pg_locks l, (SELECT harnessx_liveness_key('leader:supervisor') AS key) k
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.classid = ((k.key >> 32) & 4294967295)::oid AND l.objid = (k.key & 4294967295)::oid
"""


async def cut_leader_connection(dsn: str, within: float = 10) -> None:
    """Terminate the server connection holding the supervisor's leadership lock, as a server
    restart would, without telling its process; return once that connection no longer holds
    it (another may have taken it by then)."""
    import asyncpg

    conn = await asyncpg.connect(dsn, server_settings={"search_path": "harness_x"})
    try:
        cut = [row[0] for row in await conn.fetch(f"SELECT l.pid {_LEADER_LOCK}")]
        assert cut, "no connection holds the leadership lock"
        await conn.execute("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS t(pid)", cut)
        deadline = time.monotonic() + within
        # Until the terminated connection no longer holds it: a standby may take the lock as
        # soon as it is free, faster than this looks (that made "is it free" wait in vain).
        while await conn.fetchval(
            f"SELECT EXISTS (SELECT 1 {_LEADER_LOCK} AND l.pid = ANY ($1::int[]))", cut
        ):
            assert time.monotonic() < deadline, "the terminated connection kept the leadership lock"
            await asyncio.sleep(0.02)
    finally:
        await conn.close()


async def driving_intervals(target: BackendTarget) -> list[tuple[str, str | None, str | None, float, float]]:
    """Every drive of a run as the database recorded it: ``(run_id, concurrency key, agent,
    claimed at, last event at)``, from each claim (``run_claims``) to the last event its lease
    wrote. A drive lasts from its claim until that lease is given up, after its last event,
    so these intervals lie within the drives."""
    query = """
        SELECT c.run_id, r.concurrency_key, r.agent_ref, {claimed}, coalesce(max({created}), {claimed})
        FROM run_claims c JOIN runs r ON r.id = c.run_id
        LEFT JOIN events e ON e.run_id = c.run_id AND e.generation = c.generation
        GROUP BY c.run_id, c.generation, r.concurrency_key, r.agent_ref, c.claimed_at
    """
    if target.kind == "sqlite":
        import sqlite3

        with sqlite3.connect(target.location) as conn:
            rows = conn.execute(query.format(claimed="c.claimed_at", created="e.created_at")).fetchall()
    else:
        import asyncpg

        conn = await asyncpg.connect(target.location, server_settings={"search_path": "harness_x"})
        try:
            statement = query.format(
                claimed="extract(epoch FROM c.claimed_at)::float8",
                created="extract(epoch FROM e.created_at)::float8",
            )
            rows = [tuple(r) for r in await conn.fetch(statement)]
        finally:
            await conn.close()
    return [(str(a), b, c, float(d), float(e)) for a, b, c, d, e in rows]


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The largest number of intervals that overlap at one instant."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = now = 0
    for _, step in edges:  # at equal times an end (-1) sorts before a start: touching is not overlapping
        now += step
        most = max(most, now)
    return most
