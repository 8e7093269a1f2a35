"""Fault scenarios: each one is a named coroutine that injects its kind of fault into a
running pool until the scenario's time is up (or the workload is done).

A scenario never waits for the system to recover: it records each fault (what, when,
which processes, which leases they held) and moves on; the checker and the timings read
the outcome from the database afterwards. Whatever a scenario breaks it repairs before
returning (a stopped process is continued, a proxy healed), even when cancelled.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from chaos.checker import Fault
from chaos.db import Database
from chaos.fleet import Fleet, Proc
from chaos.ledger import LedgerReader
from harnessx.testing import ThrowawayCluster

__all__ = ["SCENARIOS", "Scenario", "ScenarioContext", "applicable"]


@dataclass
class ScenarioContext:
    fleet: Fleet
    db: Database
    ledger: LedgerReader
    rng: random.Random
    deadline: float  # time.monotonic() when faults stop
    lease_seconds: float
    pace: float  # seconds between faults of the quickest kind
    workload_done: asyncio.Event
    folder: Path
    cluster: ThrowawayCluster | None = None
    # Keep injecting faults past the deadline until this many kills landed mid-tool (the
    # scenarios that kill workers), but never past ``hard_deadline``.
    min_kills_mid_tool: int = 0
    hard_deadline: float = float("inf")
    kills_mid_tool: int = 0
    faults: list[Fault] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def short_of_kills(self) -> bool:
        """Whether the scenario still owes kills mid-tool (and has time left for them); the
        workload keeps submitting runs meanwhile, so there are tool calls to land in."""
        return self.kills_mid_tool < self.min_kills_mid_tool and time.monotonic() < self.hard_deadline

    def active(self) -> bool:
        if self.workload_done.is_set() or time.monotonic() >= self.hard_deadline:
            return False
        return time.monotonic() < self.deadline or self.short_of_kills()

    async def nap(self, low: float, high: float) -> bool:
        """Sleep a random ``low..high`` seconds (cut short at the deadline); then ``active()``."""
        wait = self.rng.uniform(low, high)
        if not self.short_of_kills():
            wait = min(wait, max(0.0, self.deadline - time.monotonic()))
        await asyncio.sleep(wait)
        return self.active()

    def record(
        self,
        kind: str,
        started: float,
        ended: float,
        pids: tuple[int, ...] | None,
        sessions: list[tuple[str, int]],
    ) -> Fault:
        fault = Fault(len(self.faults) + 1, kind, started, ended, pids, tuple(sessions))
        self.faults.append(fault)
        with (self.folder / "faults.jsonl").open("a") as out:
            out.write(json.dumps(asdict(fault)) + "\n")
        return fault

    async def leases_of(self, proc: Proc | None) -> list[tuple[str, int]]:
        """The ``(session, generation)`` leases a worker holds (all leases for ``None``)."""
        if proc is None:
            rows = await self.db.fetch("leased")
        elif proc.process_id is None:
            return []
        else:
            rows = await self.db.fetch("leased_by", proc.process_id)
        return [(str(sid), int(gen)) for sid, gen in rows]

    async def victim(self, *, in_tool: bool, within: float = 3.0) -> Proc | None:
        """A registered worker; with ``in_tool``, preferably one with a tool call in flight
        right now (a ledger ``start`` without its ``end``)."""
        deadline = time.monotonic() + within
        while True:
            workers = [w for w in self.fleet.workers() if w.process_id is not None and not w.stopped]
            if not workers:
                if time.monotonic() > deadline:
                    return None
            elif not in_tool:
                return self.rng.choice(workers)
            else:
                busy = [w for w in workers if self.ledger.in_flight(w.pid) > 0]
                if busy:
                    return self.rng.choice(busy)
                if time.monotonic() > deadline:
                    return self.rng.choice(workers)
            await asyncio.sleep(0.005)

    async def kill_worker(self, proc: Proc, kind: str) -> None:
        held = await self.leases_of(proc)
        started = time.time()
        self.fleet.signal(proc, signal.SIGKILL)
        exited = await self.fleet.wait_exit(proc, 10) is not None
        self.record(kind, started, started, (proc.pid,), held)
        # Counted as the report will count it (chaos.timings): a call started before the
        # kill that never finished. Only once the process is gone is its ledger final.
        if exited and self.ledger.cut_off(proc.pid, before=started):
            self.kills_mid_tool += 1
        await self.replace_worker()

    async def replace_worker(self) -> Proc:
        replacement = await self.fleet.spawn_worker()
        await self.fleet.wait_registered(self.db, [replacement])
        return replacement


Scenario = Callable[[ScenarioContext], Awaitable[None]]


@dataclass(frozen=True)
class ScenarioInfo:
    name: str
    run: Scenario
    summary: str
    postgres_only: bool = False
    needs_cluster: bool = False  # must be a server the suite started (it restarts it)
    proxied: bool = False  # workers reach the database through a suite-controlled proxy
    kills_mid_tool: bool = False  # owes the profile's kills mid-tool (``--min-kills-mid-tool``)


SCENARIOS: dict[str, ScenarioInfo] = {}


def scenario(
    name: str,
    summary: str,
    *,
    postgres_only: bool = False,
    needs_cluster: bool = False,
    proxied: bool = False,
    kills_mid_tool: bool = False,
) -> Callable[[Scenario], Scenario]:
    def register(run: Scenario) -> Scenario:
        SCENARIOS[name] = ScenarioInfo(
            name, run, summary, postgres_only, needs_cluster, proxied, kills_mid_tool
        )
        return run

    return register


def applicable(info: ScenarioInfo, backend: str, own_cluster: bool) -> str | None:
    """Why ``info`` cannot run here, or ``None`` if it can."""
    if info.postgres_only and backend != "postgres":
        return "PostgreSQL only"
    if info.needs_cluster and not own_cluster:
        return "needs a server the suite starts itself (no --dsn)"
    return None


# ------------------------------------------------------------------------- scenarios


@scenario(
    "kill-worker", "kill -9 a random worker, mostly while it is inside a tool call", kills_mid_tool=True
)
async def kill_worker(ctx: ScenarioContext) -> None:
    while await ctx.nap(0.3 * ctx.pace, ctx.pace):
        # Four kills in five are timed by the ledger: a tool has started and not returned,
        # so its raw result cannot have been committed yet. The rest land anywhere.
        victim = await ctx.victim(in_tool=ctx.rng.random() < 0.8 or ctx.short_of_kills())
        if victim is not None:
            await ctx.kill_worker(victim, "kill-worker")
    if ctx.kills_mid_tool < ctx.min_kills_mid_tool:
        ctx.notes.append(
            f"only {ctx.kills_mid_tool} of the {ctx.min_kills_mid_tool} kills mid-tool wanted landed "
            "before the scenario's time bound"
        )


@scenario("pause-worker", "SIGSTOP a worker past its lease, then SIGCONT the zombie")
async def pause_worker(ctx: ScenarioContext) -> None:
    while await ctx.nap(0.5 * ctx.pace, 1.5 * ctx.pace):
        victim = await ctx.victim(in_tool=True)
        if victim is None:
            continue
        held = await ctx.leases_of(victim)
        started = time.time()
        ctx.fleet.signal(victim, signal.SIGSTOP)
        try:
            # Past the lease and a supervisor scan, so the lease is taken away while the
            # process still believes it holds it.
            await asyncio.sleep(ctx.lease_seconds * 1.5 + 0.5)
        finally:
            ctx.fleet.signal(victim, signal.SIGCONT)
        ctx.record("pause-worker", started, time.time(), (victim.pid,), held)


@scenario(
    "cut-connections",
    "drop or black-hole one worker's PostgreSQL traffic through a loopback proxy",
    postgres_only=True,
    proxied=True,
)
async def cut_connections(ctx: ScenarioContext) -> None:
    modes = ["blackhole", "drop"]
    while await ctx.nap(0.5 * ctx.pace, 1.5 * ctx.pace):
        victim = await ctx.victim(in_tool=True)
        if victim is None or victim.proxy is None:
            continue
        mode = modes[len(ctx.faults) % 2]
        held = await ctx.leases_of(victim)
        started = time.time()
        if mode == "drop":
            victim.proxy.drop()
        else:
            victim.proxy.blackhole()
        try:
            # A cut longer than the lease: the supervisor must hand its runs over.
            await asyncio.sleep(ctx.lease_seconds * 1.5 + 0.5)
        finally:
            victim.proxy.heal()
        ctx.record(f"cut-{mode}", started, time.time(), (victim.pid,), held)


@scenario("kill-supervisor", "kill -9 the supervisor leader, then a worker the standby must recover")
async def kill_supervisor(ctx: ScenarioContext) -> None:
    while await ctx.nap(0.5 * ctx.pace, 1.5 * ctx.pace):
        leader = ctx.fleet.leader()
        if leader is None:
            continue
        started = time.time()
        ctx.fleet.signal(leader, signal.SIGKILL)
        await ctx.fleet.wait_exit(leader, 10)
        ctx.record("kill-supervisor", started, started, (leader.pid,), [])
        ctx.fleet.spawn_supervisor()  # the next standby
        # Orphans made now can only be recovered once a standby has taken over.
        victim = await ctx.victim(in_tool=True)
        if victim is not None:
            await ctx.kill_worker(victim, "kill-worker-after-leader")


@scenario(
    "restart-postgres",
    "restart PostgreSQL under load, alternating fast and immediate shutdowns",
    postgres_only=True,
    needs_cluster=True,
)
async def restart_postgres(ctx: ScenarioContext) -> None:
    cluster = ctx.cluster
    assert cluster is not None
    modes = ["fast", "immediate"]
    while await ctx.nap(1.5 * ctx.pace, 3 * ctx.pace):
        mode = modes[len(ctx.faults) % 2]
        held = await ctx.leases_of(None)
        started = time.time()
        await asyncio.to_thread(cluster.restart, mode)  # type: ignore[arg-type]
        ctx.record(f"restart-{mode}", started, time.time(), None, held)


@scenario("rolling-restart", "SIGTERM every worker in turn after starting its replacement (a deploy)")
async def rolling_restart(ctx: ScenarioContext) -> None:
    while await ctx.nap(0.2 * ctx.pace, 0.5 * ctx.pace):
        for old in list(ctx.fleet.workers()):
            if not ctx.active():
                return
            await ctx.replace_worker()
            held = await ctx.leases_of(old)
            started = time.time()
            ctx.fleet.signal(old, signal.SIGTERM)
            code = await ctx.fleet.wait_exit(old, ctx.fleet.drain_timeout + 10)
            ctx.record("sigterm", started, time.time(), (old.pid,), held)
            if code != 0:
                ctx.notes.append(f"{old.name} exited {code} after SIGTERM (expected 0)")
            await ctx.nap(0.1 * ctx.pace, 0.3 * ctx.pace)
