"""``harness-supervisor``: recover orphaned runs. Run two for a standby; one leads."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import click

from harnessx._errors import HarnessError
from harnessx._health import health_app
from harnessx._http_server import HttpServer
from harnessx._logging import configure_logging
from harnessx._processes import (
    install_signal_handlers,
    listen_for_metrics,
    log_options,
    metrics_option,
    open_store,
    run_event_loop,
    serving_message,
    start_logging,
    store_options,
)
from harnessx._redaction import redact
from harnessx._retention import RetentionPolicy, default_batch, parse_duration
from harnessx._systemd import SystemdNotifier
from harnessx.store._protocol import Store
from supervisor._metrics import SupervisorMetrics
from supervisor._supervisor import Supervisor, SupervisorConfig

__all__ = ["main"]

logger = logging.getLogger("supervisor")


@click.command(context_settings={"show_default": True, "max_content_width": 100})
@store_options
@metrics_option(default="127.0.0.1:9465")
@click.option(
    "--scan-interval",
    envvar="HARNESSX_SCAN_INTERVAL",
    default=0.1,
    type=click.FloatRange(min=0.01),
    help="Seconds between orphan scans [env HARNESSX_SCAN_INTERVAL].",
)
@click.option(
    "--stuck-after",
    envvar="HARNESSX_STUCK_AFTER",
    default=3600.0,
    type=click.FloatRange(min=1),
    help="Report unfinished runs not updated for this many seconds [env HARNESSX_STUCK_AFTER].",
)
@click.option(
    "--retention",
    envvar="HARNESSX_RETENTION",
    callback=lambda ctx, param, value: _duration(ctx, param, value),
    metavar="DURATION",
    help="Remove finished sessions idle for longer than this (30d, 12h...), continuously, in short "
    "batches [env HARNESSX_RETENTION; default: off, keep everything].",
)
@click.option(
    "--retention-interval",
    envvar="HARNESSX_RETENTION_INTERVAL",
    default=60.0,
    type=click.FloatRange(min=1),
    help="Seconds between retention passes [env HARNESSX_RETENTION_INTERVAL].",
)
@click.option(
    "--retention-batch",
    envvar="HARNESSX_RETENTION_BATCH",
    type=click.IntRange(1, 10_000),
    help="Sessions per retention transaction [env HARNESSX_RETENTION_BATCH; default: 200 on "
    "PostgreSQL, 20 on SQLite].",
)
@click.option(
    "--archive",
    envvar="HARNESSX_ARCHIVE_DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help="With --retention: write each session to a JSON-lines file in this folder before removing "
    "it [env HARNESSX_ARCHIVE_DIR].",
)
@click.option(
    "--compact-after",
    envvar="HARNESSX_COMPACT_AFTER",
    default="1h",
    callback=lambda ctx, param, value: _duration_or_off(ctx, param, value),
    metavar="DURATION|off",
    help="Compact the streamed text of runs that finished this long ago (each stretch of text "
    "pieces stored as one event; every cursor reads the same text), after each retention pass; "
    "off keeps every piece [env HARNESSX_COMPACT_AFTER].",
)
@click.option(
    "--compact-batch",
    envvar="HARNESSX_COMPACT_BATCH",
    type=click.IntRange(1, 10_000),
    help="Runs per compaction transaction [env HARNESSX_COMPACT_BATCH; default: 100 on PostgreSQL, "
    "5 on SQLite].",
)
@click.option(
    "--worker-retention",
    envvar="HARNESSX_WORKER_RETENTION",
    default="1d",
    show_default=True,
    callback=lambda ctx, param, value: _duration(ctx, param, value),
    metavar="DURATION",
    help="Forget workers that stopped this long ago [env HARNESSX_WORKER_RETENTION].",
)
@log_options
def main(
    dsn: str | None,
    sqlite_path: str,
    schema: str,
    metrics_addr: tuple[str, int] | None,
    scan_interval: float,
    stuck_after: float,
    retention: float | None,
    retention_interval: float,
    retention_batch: int | None,
    archive: Path | None,
    compact_after: float | None,
    compact_batch: int | None,
    worker_retention: float,
    log_format: str,
    log_level: str,
) -> None:
    """Find runs whose worker died or whose lease expired, fence the old holder out, and requeue
    them for the pool. Only the leader acts; others wait as standbys."""
    # Logging, and with it redaction, comes first: whatever fails below is reported through it.
    start_logging(log_format, log_level)
    sockets = listen_for_metrics(metrics_addr)
    try:
        # The supervisor never migrates: the schema is the workers' and the operator's.
        store = open_store(
            dsn=dsn, sqlite_path=sqlite_path, schema=schema, lease_seconds=30.0, auto_migrate=False
        )
    except (HarnessError, ValueError) as exc:
        raise click.UsageError(redact(str(exc))) from exc
    configure_logging(
        "json" if log_format == "json" else "text", log_level, static={"supervisor_id": store.process_id}
    )
    if archive is not None and retention is None:
        raise click.UsageError("--archive is where --retention writes what it removes: give --retention too")
    policy = None
    if retention is not None:
        policy = RetentionPolicy(retention, batch=retention_batch or default_batch(store), archive=archive)
    config = SupervisorConfig(
        scan_interval=scan_interval,
        stuck_after=stuck_after,
        retention=policy,
        retention_interval=retention_interval,
        compact_after=compact_after,
        compact_batch=compact_batch,
        worker_retention=worker_retention,
    )
    try:
        run_event_loop(_serve(store, config, sockets))
    except HarnessError as exc:
        logger.error("supervisor stopped: %s", exc)
        raise SystemExit(1) from exc


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None or value == "":
        return None
    try:
        return parse_duration(value)
    except HarnessError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _duration_or_off(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is not None and value.strip().lower() in ("off", "0", "none", "never"):
        return None
    return _duration(ctx, param, value)


async def _serve(store: Store, config: SupervisorConfig, sockets: list[socket.socket] | None) -> None:
    notifier = SystemdNotifier()
    metrics = SupervisorMetrics()
    async with store:
        supervisor = Supervisor(store, config, metrics=metrics)

        def stop() -> None:
            notifier.stopping()
            supervisor.stop()

        install_signal_handlers(stop)
        server = None
        if sockets is not None:
            app = health_app(
                metrics.registry, healthy=supervisor.health_problem, ready=supervisor.readiness_problem
            )
            server = HttpServer(app, sockets)
            await server.start()
            logger.info("%s", serving_message(sockets))
        else:
            logger.info("not serving /metrics, /healthz, /readyz (--metrics-addr off)")
        notifier.ready("supervisor running")
        try:
            await supervisor.run()
        finally:
            if server is not None:
                await server.stop()
    logger.info("supervisor stopped")
