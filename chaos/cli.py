"""``python -m chaos``: run the fault scenarios against real processes and check the outcome.

Two profiles. The default (full) one submits ``--runs`` runs in all, split evenly over the
scenarios, each scenario injecting faults for ``--duration`` seconds. ``--quick`` is the
CI profile: both backends unless ``--backend`` says otherwise, a few dozen runs and about
ten seconds of faults per scenario. Exit status: 0 when every invariant held, 1 on any
violation (or a scenario that could not run), 2 on a usage or set-up error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import shlex
import shutil
import sys
import tempfile
import time
import traceback
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import click

from chaos.report import Report
from chaos.runner import ScenarioResult, Settings, run_scenario
from chaos.scenarios import SCENARIOS, applicable
from harnessx._errors import HarnessError
from harnessx._retention import parse_duration
from harnessx.testing import ClusterError, ThrowawayCluster, run_psql

__all__ = ["main"]


@dataclass(frozen=True)
class Profile:
    runs_per_scenario: int | None  # quick: per scenario; full: --runs in all
    runs_total: int | None
    workers: int
    concurrency: int
    duration: float
    pace: float
    settle_timeout: float
    tool_ms: tuple[int, int]
    kills_mid_tool: int = 0  # per backend, in kill-worker


FULL = Profile(
    None, 1000, workers=4, concurrency=6, duration=90, pace=1.5, settle_timeout=120, tool_ms=(50, 600)
)
# CI asks for at least ten kills mid-tool per backend: kill-worker goes on until they landed,
# however slow the machine, rather than stop at its time with fewer.
QUICK = Profile(
    25,
    None,
    workers=3,
    concurrency=6,
    duration=10,
    pace=0.5,
    settle_timeout=30,
    tool_ms=(50, 400),
    kills_mid_tool=10,
)


def _tool_ms(_: click.Context, __: click.Parameter, value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    low, _comma, high = value.partition(",")
    try:
        parsed = int(low), int(high or low)
    except ValueError:
        raise click.BadParameter("expected LOW,HIGH in milliseconds, e.g. 50,600") from None
    if not 0 <= parsed[0] <= parsed[1]:
        raise click.BadParameter("expected 0 <= LOW <= HIGH")
    return parsed


def _duration(_: click.Context, __: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except HarnessError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command(context_settings={"show_default": True, "max_content_width": 100})
@click.option(
    "--runs", type=click.IntRange(min=1), help="Runs in all, split over the scenarios [full: 1000]."
)
@click.option(
    "--workers", type=click.IntRange(min=1), help="Worker processes kept running [full: 4, quick: 3]."
)
@click.option("--concurrency", type=click.IntRange(min=1), help="Runs each worker drives at once [6].")
@click.option(
    "--duration", type=click.FloatRange(min=1), help="Seconds of faults per scenario [full: 90, quick: 10]."
)
@click.option(
    "--pace", type=click.FloatRange(min=0.05), help="Seconds between faults [full: 1.5, quick: 0.5]."
)
@click.option("--seed", default=1, type=int, help="Seeds plans, tool times, decisions and fault timing.")
@click.option(
    "--backend",
    type=click.Choice(["postgres", "sqlite", "both"]),
    help="Store under test [full: postgres, quick: both].",
)
@click.option(
    "--dsn", envvar="CHAOS_DSN", help="PostgreSQL server to use; default: start a throwaway cluster."
)
@click.option(
    "--scenario",
    "scenarios",
    default="all",
    help=f"'all' or a comma-separated list of: {', '.join(SCENARIOS)}.",
)
@click.option("--quick", is_flag=True, help="The CI profile: a few minutes for both backends.")
@click.option(
    "--report-dir",
    default="chaos-report",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where chaos-report.json and chaos-report.md are written.",
)
@click.option(
    "--work-dir", type=click.Path(file_okay=False, path_type=Path), help="Logs, ledgers, databases [temp]."
)
@click.option("--lease-seconds", default=2.0, type=click.FloatRange(min=0.5), help="Worker lease length.")
@click.option(
    "--tool-ms", callback=_tool_ms, help="Tool call durations LOW,HIGH in ms [full: 50,600, quick: 50,400]."
)
@click.option(
    "--settle-timeout", type=click.FloatRange(min=1), help="Seconds to wait for runs after the faults."
)
@click.option(
    "--min-kills-mid-tool",
    type=click.IntRange(min=0),
    help="kill-worker keeps going past --duration (submitting more runs) until this many of its "
    "kills landed mid-tool, for at most max(120, 4 x duration) s [full: 0, quick: 10].",
)
@click.option(
    "--retention",
    callback=_duration,
    metavar="DURATION",
    help="Run the supervisors with retention at this cutoff (5s, 1m...), archiving what they prune; "
    "the checker verifies pruned sessions from the archive [default: off].",
)
@click.option(
    "--retention-interval",
    default=1.0,
    type=click.FloatRange(min=1),
    help="With --retention: seconds between the supervisor's retention passes.",
)
@click.option("--durable/--no-durable", default=True, help="fsync on in the throwaway cluster.")
@click.option(
    "--fsync-ledger", is_flag=True, help="fsync every effects-ledger line (survives a machine crash)."
)
@click.option("-v", "--verbose", is_flag=True, help="Log what the suite does.")
def main(
    runs: int | None,
    workers: int | None,
    concurrency: int | None,
    duration: float | None,
    pace: float | None,
    seed: int,
    backend: str | None,
    dsn: str | None,
    scenarios: str,
    quick: bool,
    report_dir: Path,
    work_dir: Path | None,
    lease_seconds: float,
    tool_ms: tuple[int, int] | None,
    settle_timeout: float | None,
    min_kills_mid_tool: int | None,
    retention: float | None,
    retention_interval: float,
    durable: bool,
    fsync_ledger: bool,
    verbose: bool,
) -> None:
    """Kill, pause, cut off and restart harnessx workers, supervisors and PostgreSQL while
    runs are in flight, then prove from the database and an external effects ledger that
    nothing was lost or done twice."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s"
    )
    # The drivers complain about every reconnect while the suite restarts the server on
    # purpose; what matters ends up in the report.
    for noisy in ("asyncpg", "harnessx"):
        logging.getLogger(noisy).setLevel(logging.INFO if verbose else logging.ERROR)
    profile = QUICK if quick else FULL
    names = list(SCENARIOS) if scenarios == "all" else [n.strip() for n in scenarios.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not names:
        raise click.BadParameter(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    backends = {"both": ["sqlite", "postgres"], None: ["sqlite", "postgres"] if quick else ["postgres"]}.get(
        backend, [str(backend)]
    )
    report = Report(
        command="python -m chaos " + shlex.join(sys.argv[1:]),
        settings={},
        started=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )
    began = time.monotonic()
    temporary = work_dir is None
    folder = work_dir or Path(tempfile.mkdtemp(prefix="harnessx-chaos-"))
    with ExitStack() as stack:
        for backend_name in backends:
            cluster: ThrowawayCluster | None = None
            server = dsn
            if backend_name == "postgres" and server is None:
                try:
                    cluster = stack.enter_context(ThrowawayCluster(durable=durable))
                except (ClusterError, OSError) as exc:
                    click.echo(f"error: cannot start a throwaway PostgreSQL cluster: {exc}", err=True)
                    raise SystemExit(2) from exc
                server = cluster.dsn
            if backend_name == "postgres" and server is not None:
                report.database = _server_version(server, durable if cluster else None)
            runnable = []
            for name in names:
                why = applicable(SCENARIOS[name], backend_name, own_cluster=cluster is not None)
                if why is None:
                    runnable.append(name)
                else:
                    report.skipped[f"{backend_name}/{name}"] = why
            if not runnable:
                continue
            if profile.runs_per_scenario is not None and runs is None:
                shares = [profile.runs_per_scenario] * len(runnable)
            else:
                # --runs in all: an even split, the remainder to the first scenarios.
                base, extra = divmod(runs or profile.runs_total or 1, len(runnable))
                shares = [max(1, base + (1 if i < extra else 0)) for i in range(len(runnable))]
            settings = Settings(
                backend=backend_name,
                dsn=server if backend_name == "postgres" else None,
                runs=shares[0],
                workers=workers or profile.workers,
                concurrency=concurrency or profile.concurrency,
                duration=duration or profile.duration,
                seed=seed,
                lease_seconds=lease_seconds,
                tool_ms=tool_ms or profile.tool_ms,
                pace=pace or profile.pace,
                settle_timeout=settle_timeout or profile.settle_timeout,
                folder=folder,
                cluster=cluster,
                fsync=fsync_ledger,
                min_kills_mid_tool=profile.kills_mid_tool
                if min_kills_mid_tool is None
                else min_kills_mid_tool,
                retention=retention,
                retention_interval=retention_interval,
            )
            report.settings[backend_name] = {
                "runs": sum(shares),
                "workers": settings.workers,
                "concurrency": settings.concurrency,
                "duration": settings.duration,
                "pace": settings.pace,
                "lease_seconds": settings.lease_seconds,
                "tool_ms": list(settings.tool_ms),
                "min_kills_mid_tool": settings.min_kills_mid_tool,
                "retention": retention,
                "retention_interval": retention_interval if retention is not None else None,
                "seed": seed,
                "scenarios": runnable,
            }
            for name, share in zip(runnable, shares, strict=True):
                click.echo(
                    f"== {backend_name}/{name}: {share} runs, {settings.workers} workers, "
                    f"{settings.duration:.0f} s of faults",
                    err=True,
                )
                result = _run_one(name, dataclasses.replace(settings, runs=share))
                report.results.append(result)
                click.echo(
                    f"   {result.runs} runs, {result.statuses.get('completed', 0)} completed, "
                    f"{result.faults_total} faults ({result.kills_mid_tool} kills mid-tool), "
                    + (f"{result.pruned_sessions} sessions pruned, " if retention is not None else "")
                    + f"{len(result.violations)} violation(s), {result.seconds:.0f} s",
                    err=True,
                )
                if result.error:
                    click.echo(f"   the scenario failed: {result.error}", err=True)
    report.seconds = time.monotonic() - began
    click.echo(report.table())
    as_json, as_md = report.write(report_dir)
    click.echo(f"\nreport: {as_json} and {as_md}")
    if report.ok and temporary:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        click.echo(f"logs, ledgers and databases kept in {folder}")
    raise SystemExit(0 if report.ok else 1)


def _run_one(name: str, settings: Settings) -> ScenarioResult:
    try:
        return asyncio.run(run_scenario(SCENARIOS[name], settings))
    except Exception as exc:
        failed = ScenarioResult(name, settings.backend)
        failed.error = f"{type(exc).__name__}: {exc}"
        failed.notes.append(traceback.format_exc()[-3000:])
        return failed


def _server_version(dsn: str, durable: bool | None) -> str:
    try:
        version = run_psql(dsn, "SHOW server_version").strip()
    except ClusterError:
        return "PostgreSQL (version unknown)"
    where = "the suite's throwaway cluster" if durable is not None else "the server given by --dsn"
    fsync = "" if durable is None else (", fsync on" if durable else ", fsync off")
    return f"PostgreSQL {version} ({where}{fsync})"
