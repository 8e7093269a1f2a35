"""``harness-worker``: run a pool worker. Every option also reads a ``HARNESSX_*`` variable."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import click

from harness_workers._metrics import WorkerMetrics
from harness_workers._starting import StartPolicy
from harness_workers._worker import Worker, WorkerConfig
from harnessx._errors import ConfigurationError, HarnessError
from harnessx._health import health_app
from harnessx._http_server import HttpServer
from harnessx._logging import configure_logging
from harnessx._processes import (
    install_signal_handlers,
    listen_for_metrics,
    load_object,
    log_options,
    metrics_option,
    open_store,
    run_event_loop,
    serving_message,
    start_logging,
    store_options,
)
from harnessx._redaction import redact
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
@click.option(
    "--start-attempts",
    envvar="HARNESSX_START_ATTEMPTS",
    default=StartPolicy.attempts,
    type=click.IntRange(min=1),
    help="Failed starts in a row (its agent could not be built) after which a run ends failed "
    "[env HARNESSX_START_ATTEMPTS].",
)
@click.option(
    "--start-backoff",
    envvar="HARNESSX_START_BACKOFF",
    default=StartPolicy.backoff,
    type=click.FloatRange(min=0),
    help="Seconds before a failed start is tried again; doubles each time, at most "
    f"{StartPolicy.backoff_max:.0f} s [env HARNESSX_START_BACKOFF].",
)
@log_options
@click.option(
    "--migrate/--no-migrate",
    envvar="HARNESSX_MIGRATE",
    default=False,
    help="Create or upgrade the schema first (default: only verify it) [env HARNESSX_MIGRATE].",
)
@click.option(
    "--temporal",
    "temporal_target",
    envvar="HARNESSX_TEMPORAL",
    default=None,
    metavar="HOST:PORT",
    help="Serve a Temporal task queue instead of the pool (docs/temporal.md) [env HARNESSX_TEMPORAL].",
)
@click.option(
    "--namespace",
    envvar="HARNESSX_TEMPORAL_NAMESPACE",
    default="default",
    help="With --temporal: the namespace [env HARNESSX_TEMPORAL_NAMESPACE].",
)
@click.option(
    "--task-queue",
    envvar="HARNESSX_TEMPORAL_TASK_QUEUE",
    default="harness-x-v1",
    help="With --temporal: the task queue [env HARNESSX_TEMPORAL_TASK_QUEUE].",
)
@click.option(
    "--events-url",
    envvar="HARNESSX_EVENTS_URL",
    default=None,
    help="With --temporal: the Redis URL run events go to [env HARNESSX_EVENTS_URL].",
)
@click.option(
    "--rate-limits/--no-rate-limits",
    envvar="HARNESSX_RATE_LIMITS",
    default=False,
    help="With --temporal: model calls obey the fleet's rate limits kept in the store that --dsn "
    "or --sqlite names, as pool workers' do (docs/scheduling.md) [env HARNESSX_RATE_LIMITS].",
)
def main(
    dsn: str | None,
    sqlite_path: str,
    schema: str,
    agents_path: str,
    concurrency: int,
    metrics_addr: tuple[str, int] | None,
    lease_seconds: float,
    drain_timeout: float,
    start_attempts: int,
    start_backoff: float,
    log_format: str,
    log_level: str,
    migrate: bool,
    temporal_target: str | None,
    namespace: str,
    task_queue: str,
    events_url: str | None,
    rate_limits: bool,
) -> None:
    """Claim queued harnessx runs and drive them. SIGTERM drains: runs are handed back at their
    next boundary and the worker exits 0; a second signal exits at once."""
    # Logging, and with it redaction, comes first: whatever fails below is reported through it.
    start_logging(log_format, log_level)
    sockets = listen_for_metrics(metrics_addr)
    try:
        registry = load_object(agents_path, "--agents")
    except ConfigurationError as exc:
        # The one line says what failed; the traceback (redacted) is there for whoever needs it:
        # in JSON logs, or with --log-level debug.
        level = logging.ERROR if log_format == "json" else logging.DEBUG
        logger.log(level, "%s", exc, exc_info=exc.__cause__)
        raise click.ClickException(str(exc)) from None
    if not isinstance(registry, AgentRegistry):
        raise click.UsageError(f"--agents {agents_path} is a {type(registry).__name__}, not an AgentRegistry")
    if temporal_target is None or rate_limits:
        try:
            store = open_store(
                dsn=dsn,
                sqlite_path=sqlite_path,
                schema=schema,
                lease_seconds=lease_seconds,
                auto_migrate=migrate,
            )
        except (HarnessError, ValueError) as exc:
            raise click.UsageError(redact(str(exc))) from exc
    if temporal_target is not None:
        _serve_temporal(
            temporal_target,
            namespace,
            task_queue,
            events_url,
            registry,
            concurrency,
            drain_timeout,
            sockets,
            store if rate_limits else None,
        )
        return
    configure_logging(
        "json" if log_format == "json" else "text", log_level, static={"worker_id": store.process_id}
    )
    start = StartPolicy(start_attempts, start_backoff, max(start_backoff, StartPolicy.backoff_max))
    config = WorkerConfig(concurrency=concurrency, drain_timeout=drain_timeout, start=start)
    code = 0
    try:
        run_event_loop(_serve(store, registry, config, sockets))
    except (HarnessError, RuntimeError) as exc:
        logger.error("worker stopped: %s", exc)
        code = 1
    _exit_past_running_tools(code)
    if code:
        raise SystemExit(code)


_TOOL_THREADS = "harnessx-tool"


class _ToolThreads(ThreadPoolExecutor):
    """The event loop's default executor, where blocking tool handlers run
    (``asyncio.to_thread``). Shutting it down does not wait for calls still running: when a
    drain runs out of time their runs have already been requeued, and the worker must exit
    rather than wait for a call that may never return."""

    def __init__(self) -> None:
        super().__init__(thread_name_prefix=_TOOL_THREADS)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait=False, cancel_futures=True)


def _exit_past_running_tools(code: int) -> None:
    """Exit now if tool calls cut off by the drain still run in threads (the interpreter
    would otherwise wait for them at exit); otherwise return for a normal exit."""
    busy = [t for t in threading.enumerate() if t.name.startswith(_TOOL_THREADS)]
    for thread in busy:
        thread.join(0.2)  # idle threads leave at once; a call still running does not
    busy = [t for t in busy if t.is_alive()]
    if not busy:
        return
    logger.warning(
        "exiting with %d tool call(s) still running in threads; their runs were requeued when the "
        "drain timed out (raise --drain-timeout above your longest tool call)",
        len(busy),
    )
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _serve_temporal(
    target: str,
    namespace: str,
    task_queue: str,
    events_url: str | None,
    registry: AgentRegistry,
    concurrency: int,
    drain_timeout: float,
    sockets: list[socket.socket] | None,
    rate_limits: Store | None,
) -> None:
    try:
        from harnessx.temporal._cli import run_temporal_worker

        run_temporal_worker(
            target=target,
            namespace=namespace,
            task_queue=task_queue,
            events_url=events_url,
            registry=registry,
            concurrency=concurrency,
            drain_timeout=drain_timeout,
            sockets=sockets,
            run_event_loop=run_event_loop,
            install_signal_handlers=install_signal_handlers,
            rate_limits=rate_limits,
        )
    except ConfigurationError as exc:
        raise click.UsageError(redact(str(exc))) from None
    except HarnessError as exc:
        logger.error("worker stopped: %s", redact(str(exc)))
        raise SystemExit(1) from exc


async def _serve(
    store: Store, registry: AgentRegistry, config: WorkerConfig, sockets: list[socket.socket] | None
) -> None:
    notifier = SystemdNotifier()
    metrics = WorkerMetrics()
    asyncio.get_running_loop().set_default_executor(_ToolThreads())
    async with store:
        worker = Worker(store, registry, config, metrics=metrics, on_heartbeat=notifier.watchdog)

        def stop() -> None:
            notifier.stopping()
            worker.drain()

        install_signal_handlers(stop)
        server = None
        if sockets is not None:
            app = health_app(metrics.registry, healthy=worker.health_problem, ready=worker.readiness_problem)
            server = HttpServer(app, sockets)
            # Serving before the worker claims anything: /readyz says 503 until it is registered.
            await server.start()
            logger.info("%s", serving_message(sockets))
        else:
            logger.info("not serving /metrics, /healthz, /readyz (--metrics-addr off)")
        run = asyncio.create_task(worker.run())
        registered = asyncio.create_task(worker.registered.wait())
        await asyncio.wait({run, registered}, return_when=asyncio.FIRST_COMPLETED)
        registered.cancel()
        if worker.registered.is_set():
            notifier.ready(f"worker {worker.id}: {config.concurrency} slots")
        try:
            await run
        finally:
            # Probes keep their answers (503 on /readyz) until the drain is over.
            if server is not None:
                await server.stop()
    logger.info("worker %s stopped", worker.id)
