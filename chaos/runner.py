"""One scenario from start to verdict.

A fresh database (a SQLite file, or a schema of its own on the server), a fresh ledger and
a fresh fleet; runs submitted evenly over the scenario's duration while its faults are
injected; then the faults stop, the suite waits for every run to settle, drains the
fleet, reads everything back and checks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.archive import ArchiveReader
from chaos.checker import Violation, check
from chaos.dataset import load_dataset
from chaos.db import Target, open_database
from chaos.fleet import Fleet
from chaos.ledger import EffectsTable, LedgerReader
from chaos.scenarios import ScenarioContext, ScenarioInfo
from chaos.timings import fault_stats, percentile
from chaos.workload import KEY_PREFIX, Workload
from harnessx.store._protocol import Store
from harnessx.testing import ThrowawayCluster

__all__ = ["ScenarioResult", "Settings", "run_scenario"]

logger = logging.getLogger("chaos.runner")


@dataclass(frozen=True)
class Settings:
    backend: str  # sqlite | postgres
    dsn: str | None  # the server for postgres
    runs: int  # submitted in this scenario
    workers: int
    concurrency: int
    duration: float  # seconds of faults (and of submissions)
    seed: int
    lease_seconds: float
    tool_ms: tuple[int, int]
    pace: float  # seconds between faults of the quickest kind
    settle_timeout: float
    folder: Path
    cluster: ThrowawayCluster | None = None
    fsync: bool = False
    min_kills_mid_tool: int = 0  # owed by the scenarios that kill workers mid-tool
    # The supervisors' retention (off: None): cutoff and seconds between passes.
    retention: float | None = None
    retention_interval: float = 1.0

    def supervisor_args(self, folder: Path) -> tuple[str, ...]:
        if self.retention is None:
            return ()
        # Compaction too, of runs finished a second ago: it rewrites their events while
        # workers are killed, sessions pruned and archived, and the checker reads them.
        return (
            "--retention", f"{self.retention:g}s",
            "--retention-interval", f"{self.retention_interval:g}",
            "--archive", str(folder / "archive"),
            "--compact-after", "1s",
        )  # fmt: skip

    @property
    def fault_bound(self) -> float:
        """The most seconds of faults a scenario gets while it still owes kills mid-tool: a
        bound by count would otherwise never end on a machine where none can land."""
        return max(120.0, 4 * self.duration)


@dataclass
class ScenarioResult:
    scenario: str
    backend: str
    runs: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    kills_mid_tool: int = 0
    affected_runs: int = 0
    recoveries: int = 0
    resume_p50: float | None = None
    resume_p99: float | None = None
    resume_max: float | None = None
    invocations: int = 0
    repeated_invocations: int = 0
    takeovers: int = 0
    leaders: int = 0
    decisions: dict[str, int] = field(default_factory=dict)
    pruned_sessions: int = 0  # removed by retention while the scenario ran (checked from the archive)
    violations: list[Violation] = field(default_factory=list)
    unexpected_exits: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # the scenario itself could not run to the end
    seconds: float = 0.0

    @property
    def faults_total(self) -> int:
        return sum(self.faults.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "backend": self.backend,
            "runs": self.runs,
            "statuses": self.statuses,
            "faults": self.faults,
            "faults_total": self.faults_total,
            "kills_mid_tool": self.kills_mid_tool,
            "affected_runs": self.affected_runs,
            "recoveries": self.recoveries,
            "resume_seconds": {"p50": self.resume_p50, "p99": self.resume_p99, "max": self.resume_max},
            "invocations": self.invocations,
            "repeated_invocations": self.repeated_invocations,
            "supervisor_takeovers": self.takeovers,
            "leaders_elected": self.leaders,
            "decisions": self.decisions,
            "pruned_sessions": self.pruned_sessions,
            "violations": [
                {"invariant": v.invariant, "subject": v.subject, "detail": v.detail} for v in self.violations
            ],
            "unexpected_exits": self.unexpected_exits,
            "notes": self.notes,
            "error": self.error,
            "seconds": round(self.seconds, 1),
        }


async def _prepare_target(info: ScenarioInfo, settings: Settings, folder: Path) -> Target:
    if settings.backend == "sqlite":
        return Target("sqlite", str(folder / "harness.sqlite3"))
    assert settings.dsn is not None
    schema = f"chaos_{info.name.replace('-', '_')}"
    import asyncpg  # type: ignore[import-untyped]

    conn = await asyncpg.connect(settings.dsn)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()
    return Target("postgres", settings.dsn, schema)


def _open_store(target: Target) -> Store:
    # The suite's own leases (decisions) are short-lived; a longer lease than the workers'
    # keeps a busy suite process from being fenced out of its own decision.
    if target.kind == "sqlite":
        from harnessx import SQLiteBackend

        return SQLiteBackend(target.location, lease_seconds=10)
    from harnessx.store import PostgresBackend

    backend: Store = PostgresBackend(target.location, schema=target.schema, lease_seconds=10, pool_size=4)
    return backend


async def run_scenario(info: ScenarioInfo, settings: Settings) -> ScenarioResult:
    began = time.monotonic()
    folder = settings.folder / f"{settings.backend}-{info.name}"
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "ledger").mkdir(parents=True)
    target = await _prepare_target(info, settings, folder)
    effects = EffectsTable(folder / "effects.sqlite3")
    effects.create()
    store = _open_store(target)
    await store.initialize()  # creates or migrates the schema before any worker starts
    await store.set_concurrency_limit(f"{KEY_PREFIX}*", settings.workers * settings.concurrency)
    db = open_database(target)
    fleet = Fleet(
        target,
        folder,
        env={
            "CHAOS_SEED": str(settings.seed),
            "CHAOS_LEDGER": str(folder / "ledger"),
            "CHAOS_EFFECTS": str(folder / "effects.sqlite3"),
            "CHAOS_TOOL_MS": f"{settings.tool_ms[0]},{settings.tool_ms[1]}",
            "CHAOS_FSYNC": "1" if settings.fsync else "0",
        },
        lease_seconds=settings.lease_seconds,
        concurrency=settings.concurrency,
        proxied=info.proxied,
        supervisor_args=settings.supervisor_args(folder),
    )
    archive = ArchiveReader(folder / "archive") if settings.retention is not None else None
    workload = Workload(store, db, effects, seed=settings.seed, folder=folder, archive=archive)
    result = ScenarioResult(info.name, settings.backend)
    background: list[asyncio.Task[None]] = []
    ctx: ScenarioContext | None = None
    try:
        workers = [await fleet.spawn_worker() for _ in range(settings.workers)]
        fleet.spawn_supervisor()
        await fleet.wait_leader()
        fleet.spawn_supervisor()  # the standby
        await fleet.wait_registered(db, workers)
        ctx = ScenarioContext(
            fleet=fleet,
            db=db,
            ledger=LedgerReader(folder / "ledger"),
            rng=random.Random(f"{settings.seed}:{info.name}"),
            deadline=time.monotonic() + settings.duration,
            lease_seconds=settings.lease_seconds,
            pace=settings.pace,
            workload_done=workload.all_done,
            folder=folder,
            cluster=settings.cluster,
            min_kills_mid_tool=settings.min_kills_mid_tool if info.kills_mid_tool else 0,
            hard_deadline=time.monotonic() + settings.fault_bound,
        )
        background = [
            asyncio.create_task(fleet.keep_capacity(db), name="keep-capacity"),
            asyncio.create_task(workload.settle(), name="settle"),
        ]
        submitting = asyncio.create_task(
            workload.submit(settings.runs, over=settings.duration * 0.8, more=ctx.short_of_kills)
        )
        background.append(submitting)
        await info.run(ctx)
        await submitting
        try:
            await asyncio.wait_for(workload.all_done.wait(), settings.settle_timeout)
        except TimeoutError:
            result.notes.append(
                f"not every run completed within {settings.settle_timeout:.0f} s of the faults"
            )
    finally:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await workload.aclose()
        await fleet.stop_all()
        with contextlib.suppress(Exception):
            await store.aclose()
    faults = ctx.faults if ctx is not None else []
    data = await load_dataset(
        db,
        folder,
        submitted=[s.run_id for s in workload.submitted],
        faults=faults,
        decisions=workload.decisions,
        lease_seconds=settings.lease_seconds,
        archive=archive,
    )
    await db.close()
    stats = fault_stats(data)
    result.runs = len(workload.submitted)
    result.statuses = dict(Counter(run.status for run in data.runs))
    result.faults = dict(stats.faults)
    result.kills_mid_tool = stats.kills_mid_tool
    result.affected_runs = stats.affected_runs
    result.recoveries = stats.recoveries
    result.resume_p50 = percentile(stats.resume_seconds, 50)
    result.resume_p99 = percentile(stats.resume_seconds, 99)
    result.resume_max = max(stats.resume_seconds, default=None)
    result.invocations = len(data.invocations)
    result.repeated_invocations = len(data.invocations) - len({i.key for i in data.invocations})
    result.takeovers = stats.takeovers
    result.leaders = stats.leaders
    result.decisions = dict(workload.counts)
    result.pruned_sessions = len(data.pruned)
    result.violations = check(data, expect_completed=True)
    result.unexpected_exits = list(fleet.unexpected_exits)
    result.notes += ctx.notes if ctx is not None else []
    result.seconds = time.monotonic() - began
    return result
