"""``harness-worker``: run a pool worker. Every option also reads a ``HARNESSX_*`` variable."""

from __future__ import annotations

import asyncio
import logging

import click
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from harness_workers._metrics import WorkerMetrics
from harness_workers._worker import Worker, WorkerConfig
from harnessx._errors import HarnessError
from harnessx._health import HealthServer, parse_address
from harnessx._logging import configure_logging
from harnessx._processes import (
    install_signal_handlers,
    load_object,
    log_options,
    metrics_option,
    open_store,
    run_event_loop,
    store_options,
)
from harnessx._registry import AgentRegistry
from harnessx._systemd import SystemdNotifier
from harnessx.store._protocol import Store

__all__ = ["main"]

logger = logging.getLogger("harness_workers")


@click.command(context_settings={"show_default": True, "max_content_width": 100})
@store_options
@click.option(
    "--agents",
    "agents_path",
    envvar="HARNESSX_AGENTS",
    required=True,
    help="module:attribute naming an AgentRegistry [env HARNESSX_AGENTS].",
)
@click.option(
    "--concurrency",
    envvar="HARNESSX_CONCURRENCY",
    default=4,
    type=click.IntRange(min=1),
    help="Runs driven at once [env HARNESSX_CONCURRENCY].",
)
@metrics_option(default="127.0.0.1:9464")
@click.option(
    "--lease-seconds",
    envvar="HARNESSX_LEASE_SECONDS",
    default=30.0,
    type=click.FloatRange(min=0.1),
    help="Lease length; renewed every third of it [env HARNESSX_LEASE_SECONDS].",
)
@click.option(
    "--drain-timeout",
    envvar="HARNESSX_DRAIN_TIMEOUT",
    default=60.0,
    type=click.FloatRange(min=0),
    help="Seconds SIGTERM waits for runs to reach a boundary [env HARNESSX_DRAIN_TIMEOUT].",
)
@log_options
@click.option(
    "--migrate/--no-migrate",
    envvar="HARNESSX_MIGRATE",
    default=False,
    help="Create or upgrade the schema first (default: only verify it) [env HARNESSX_MIGRATE].",
)
def main(
    dsn: str | None,
    sqlite_path: str,
    schema: str,
    agents_path: str,
    concurrency: int,
    metrics_addr: str,
    lease_seconds: float,
    drain_timeout: float,
    log_format: str,
    log_level: str,
    migrate: bool,
) -> None:
    """Claim queued harnessx runs and drive them. SIGTERM drains: runs are handed back at their
    next boundary and the worker exits 0; a second signal exits at once."""
    try:
        registry = load_object(agents_path, "--agents")
        if not isinstance(registry, AgentRegistry):
            raise click.UsageError(
                f"--agents {agents_path} is a {type(registry).__name__}, not an AgentRegistry"
            )
        address = None if metrics_addr == "off" else parse_address(metrics_addr)
        store = open_store(
            dsn=dsn, sqlite_path=sqlite_path, schema=schema, lease_seconds=lease_seconds, auto_migrate=migrate
        )
    except (HarnessError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    configure_logging(
        "json" if log_format == "json" else "text", log_level, static={"worker_id": store.process_id}
    )
    config = WorkerConfig(concurrency=concurrency, drain_timeout=drain_timeout)
    try:
        run_event_loop(_serve(store, registry, config, address))
    except HarnessError as exc:
        logger.error("worker stopped: %s", exc)
        raise SystemExit(1) from exc
    except RuntimeError as exc:
        logger.error("worker stopped: %s", exc)
        raise SystemExit(1) from exc


async def _serve(
    backend: Store, registry: AgentRegistry, config: WorkerConfig, address: tuple[str, int] | None
) -> None:
    notifier = SystemdNotifier()
    metrics = WorkerMetrics()
    async with backend:
        worker = Worker(backend, registry, config, metrics=metrics, on_heartbeat=notifier.watchdog)

        def stop() -> None:
            notifier.stopping()
            worker.drain()

        install_signal_handlers(stop)
        server = None
        if address is not None:
            server = HealthServer(
                address[0],
                address[1],
                metrics=lambda: (generate_latest(metrics.registry), CONTENT_TYPE_LATEST),
                healthy=worker.health_problem,
                ready=worker.readiness_problem,
            )
            await server.start()
            logger.info("serving /metrics, /healthz, /readyz on %s:%d", address[0], server.port)
        run = asyncio.create_task(worker.run())
        registered = asyncio.create_task(worker.registered.wait())
        await asyncio.wait({run, registered}, return_when=asyncio.FIRST_COMPLETED)
        registered.cancel()
        if worker.registered.is_set():
            notifier.ready(f"worker {worker.id}: {config.concurrency} slots")
        try:
            await run
        finally:
            if server is not None:
                await server.stop()
    logger.info("worker %s stopped", worker.id)
