"""``harness-worker --temporal TARGET``: the pool worker's command, serving a Temporal queue.

The pool command parses the options and loads ``--agents``; this module takes it from there
(imported only then, so the pool worker never loads the Temporal SDK).
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from harnessx._errors import ConfigurationError, HarnessError
from harnessx._registry import AgentRegistry
from harnessx._systemd import SystemdNotifier
from harnessx.temporal._backend import TemporalBackend
from harnessx.temporal._events import RedisEvents
from harnessx.temporal._worker import serve

if TYPE_CHECKING:
    from harnessx.store._protocol import Store

__all__ = ["run_temporal_worker"]

logger = logging.getLogger("harness_workers.temporal")


def run_temporal_worker(
    *,
    target: str,
    namespace: str,
    task_queue: str,
    events_url: str | None,
    registry: AgentRegistry,
    concurrency: int,
    drain_timeout: float,
    sockets: list[socket.socket] | None,
    run_event_loop: Callable[[object], object],
    install_signal_handlers: Callable[[Callable[[], None]], None],
    rate_limits: Store | None = None,
) -> None:
    """Serve ``task_queue`` until SIGTERM; errors are ``HarnessError`` for the command.
    ``rate_limits``: a store (not opened yet) whose model rate limits the calls obey."""
    if not events_url:
        raise ConfigurationError(
            "--temporal needs --events-url redis://HOST:PORT/DB (or HARNESSX_EVENTS_URL): where the "
            "workers publish run events for clients to follow"
        )
    notifier = SystemdNotifier()

    async def main() -> None:
        async with contextlib.AsyncExitStack() as stack:
            if rate_limits is not None:
                await stack.enter_async_context(rate_limits)
            await serve_queue(rate_limits)

    async def serve_queue(limits: Store | None) -> None:
        backend = await TemporalBackend.connect(
            target,
            namespace=namespace,
            task_queue=task_queue,
            events=RedisEvents(events_url),
            registry=registry,
            rate_limits=limits,
        )

        def on_signal(stop: Callable[[], None]) -> None:
            def first() -> None:
                notifier.stopping()
                stop()

            install_signal_handlers(first)

        await serve(
            backend,
            concurrency=concurrency,
            drain_timeout=drain_timeout,
            sockets=sockets,
            on_ready=notifier.ready,
            install_signals=on_signal,
        )

    try:
        run_event_loop(main())
    except RuntimeError as exc:
        raise HarnessError(str(exc)) from exc
