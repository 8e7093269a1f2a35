"""Serving an ASGI application from inside the running event loop: uvicorn, plus the limits it lacks.

One HTTP stack for every process that serves HTTP (the ``/metrics`` ``/healthz`` ``/readyz``
endpoints of harness-worker and harness-supervisor today). The application is any ASGI app
(Starlette here); the server is uvicorn's HTTP/1.1 protocol (h11) running on the caller's loop.

uvicorn alone is not enough for a liveness probe. Measured with uvicorn 0.54 (h11 and
httptools alike): a connection that never sends a byte is kept for ever; a client that sends
its request head one byte at a time is kept for ever too, because every byte cancels the only
timer (``timeout_keep_alive``, which starts after a response); and its one connection limit,
``limit_concurrency``, answers 503 to every request once that many connections are open, so 64
idle connections would fail every probe. ``_GuardedProtocol`` adds what is missing:

* a **deadline per connection** that no trickle of bytes extends: ``head_timeout`` to send a
  complete request head (from the connection's start, and again after each response on a
  kept-alive connection), then ``response_timeout`` for the response to be sent;
* a **connection cap** that makes room instead of refusing: when ``max_connections`` are open, a
  newcomer closes the *oldest connection with no request in flight* (silent, dripping or idle
  kept-alive). A probe's connection is the newest and carries its request at once, so holding
  any number of idle or dripping connections cannot keep it from an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import math
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, cast

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

__all__ = ["RESPONSE_DEADLINE", "ConnectionLimits", "HttpServer", "ListenError", "listen"]

# The ASGI scope extension (a callable taking seconds) that lets an application give the
# response in flight a deadline of its own, e.g. an event stream that lasts minutes.
RESPONSE_DEADLINE = "harnessx.response_deadline"

logger = logging.getLogger("harnessx.http")


@dataclass(frozen=True)
class ConnectionLimits:
    """What one client may hold of the server (seconds and counts)."""

    # A complete request head must arrive within this, however it trickles in.
    head_timeout: float = 5.0
    # Once the head is in, the response must be sent within this (a client that stops reading
    # a response cannot hold its connection for ever). None: no limit, for streaming responses.
    response_timeout: float | None = 10.0
    # Open connections; past it a newcomer closes the oldest one with no request in flight.
    max_connections: int = 64
    # Request line plus headers; h11 answers 400 past it.
    max_head_bytes: int = 16 * 1024
    # On stop, requests in flight get this long to finish before their connections are cut.
    stop_grace: float = 1.0

    def __post_init__(self) -> None:
        if self.head_timeout <= 0 or (self.response_timeout is not None and self.response_timeout <= 0):
            raise ValueError("timeouts must be positive")
        if self.max_connections < 1 or self.max_head_bytes < 1024 or self.stop_grace < 0:
            raise ValueError("max_connections must be >= 1, max_head_bytes >= 1024, stop_grace >= 0")


class ListenError(OSError):
    """``host:port`` cannot be listened on (in use, not this host's, not resolvable, not allowed).

    ``errno`` and ``strerror`` are the system's; ``str()`` names the address.
    """

    def __init__(self, code: int | None, reason: str, host: str, port: int) -> None:
        super().__init__(code, reason)
        self.host, self.port = host, port

    def __str__(self) -> str:
        return f"cannot listen on {self.host}:{self.port}: {self.strerror}"


def listen(host: str, port: int, *, backlog: int = 128) -> list[socket.socket]:
    """Listening sockets for ``host:port``: one per address ``host`` resolves to (``localhost``
    may be both 127.0.0.1 and ::1), all on the same port (port 0 lets the system pick it).

    Binding happens here, before any server exists, so a caller can refuse to start with a
    clear message instead of finding out inside its event loop.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenError(errno.EADDRNOTAVAIL, exc.strerror or str(exc), host, port) from exc
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            # As asyncio's own servers do: a restart may bind while old connections linger.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if len(sockets) > 1:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise ListenError(exc.errno, exc.strerror or str(exc), host, port) from exc
    return sockets


class _GuardedConfig(uvicorn.Config):
    """uvicorn's configuration, carrying the guard its protocol instances share."""

    def __init__(self, app: Any, guard: _Guard, **options: Any) -> None:
        super().__init__(app, **options)
        self.guard = guard


class _Guard:
    """The open connections of one server, oldest first, and the limits they live under."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.open: dict[_GuardedProtocol, None] = {}

    def admit(self, connection: _GuardedProtocol) -> None:
        self.open[connection] = None
        if len(self.open) <= self.limits.max_connections:
            return
        # Make room with the oldest connection that has no request in flight; the newcomer goes
        # only when every other one is busy with a request, which their deadlines end soon.
        victim = next((other for other in self.open if other is not connection and other.idle), connection)
        logger.debug("http: %d connections open, closing one from %s", len(self.open), victim.client)
        self.drop(victim)

    def drop(self, connection: _GuardedProtocol) -> None:
        self.open.pop(connection, None)
        connection.drop()

    def finish_within(self, seconds: float) -> None:
        for connection in list(self.open):
            if connection.idle:
                self.drop(connection)
            else:
                connection.arm(seconds, sooner_only=True)


class _GuardedProtocol(H11Protocol):
    """uvicorn's h11 protocol under a per-connection deadline and the server's connection cap."""

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        if not isinstance(config, _GuardedConfig):
            raise TypeError("_GuardedProtocol needs a _GuardedConfig")
        self.guard = config.guard
        self.deadline: asyncio.TimerHandle | None = None

    @property
    def idle(self) -> bool:
        """No request in flight: waiting for a request head, or for the rest of one."""
        return self.cycle is None or self.cycle.response_complete

    def arm(self, seconds: float | None, *, sooner_only: bool = False) -> None:
        """The connection is dropped ``seconds`` from now unless re-armed (None: never)."""
        due = None if seconds is None else self.loop.time() + seconds
        if sooner_only and self.deadline is not None and (due is None or self.deadline.when() <= due):
            return
        if self.deadline is not None:
            self.deadline.cancel()
        self.deadline = None if due is None else self.loop.call_at(due, self._expired)

    def extend_deadline(self, seconds: float) -> None:
        """The response in flight may take ``seconds`` from now (an event stream)."""
        if not self.idle:
            self.arm(seconds)

    def _expired(self) -> None:
        self.deadline = None
        logger.debug("http: connection from %s missed its deadline", self.client)
        self.guard.drop(self)

    def drop(self) -> None:
        """Closes the connection now. A request in flight, or output a client is not reading,
        is abandoned (a plain close would wait for ever for such a client to read)."""
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        if self.transport.is_closing() or self.transport.get_write_buffer_size() or not self.idle:
            self.transport.abort()
        else:
            self.transport.close()

    # --- the protocol's events ---

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.arm(self.guard.limits.head_timeout)
        self.guard.admit(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        self.guard.open.pop(self, None)
        super().connection_lost(exc)

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle and not self.idle:
            # A complete request head arrived: from now on its response is what is awaited.
            self.arm(self.guard.limits.response_timeout)
            # A streaming response (the console's event streams) may ask for a later deadline;
            # the app has not started yet (its task runs on the loop's next turn).
            assert self.cycle is not None
            scope = cast(dict[str, Any], self.cycle.scope)
            scope.setdefault("extensions", {})[RESPONSE_DEADLINE] = self.extend_deadline

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Kept alive or closing, the connection gets head_timeout more: for the next request
        # head, or for the client to read the rest of this response.
        self.arm(self.guard.limits.head_timeout)


class _EmbeddedServer(uvicorn.Server):
    """uvicorn's server, sharing the process: it leaves signals to the host, says when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The host process owns SIGTERM and SIGINT (a worker drains on the first one); uvicorn
        # would replace those handlers for as long as it serves.
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.listening.set()


class HttpServer:
    """Serves ``app`` on already listening ``sockets`` (see ``listen``) from the running loop.

    ``start()`` returns once connections are accepted; ``stop()`` closes idle connections at
    once, gives requests in flight ``limits.stop_grace`` seconds, and closes the sockets.
    """

    def __init__(
        self, app: Any, sockets: list[socket.socket], *, limits: ConnectionLimits | None = None
    ) -> None:
        if not sockets:
            raise ValueError("HttpServer needs at least one listening socket")
        self.limits = limits or ConnectionLimits()
        self.sockets = list(sockets)
        self.port = int(self.sockets[0].getsockname()[1])
        self._guard = _Guard(self.limits)
        longest = max(self.limits.head_timeout, self.limits.response_timeout or 0.0, self.limits.stop_grace)
        config = _GuardedConfig(
            app,
            self._guard,
            http=_GuardedProtocol,
            ws="none",
            lifespan="off",
            interface="asgi3",
            log_config=None,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            h11_max_incomplete_event_size=self.limits.max_head_bytes,
            # The guard's deadline is the one that counts; uvicorn's own keep-alive timer is
            # set past it so it never closes a connection first.
            timeout_keep_alive=math.ceil(self.limits.head_timeout) + 1,
            # A backstop only: the guard cuts every connection within stop_grace.
            timeout_graceful_shutdown=math.ceil(longest) + 1,
        )
        self._server = _EmbeddedServer(config)
        self._task: asyncio.Task[None] | None = None

    @property
    def connections(self) -> int:
        """Connections open now (for tests and debugging)."""
        return len(self._guard.open)

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("HttpServer is already started")
        self._task = asyncio.create_task(self._server.serve(sockets=self.sockets), name="http-server")
        listening = asyncio.create_task(self._server.listening.wait())
        await asyncio.wait({self._task, listening}, return_when=asyncio.FIRST_COMPLETED)
        if not listening.done():
            listening.cancel()
            await self._task  # raises what stopped it
            raise RuntimeError("the HTTP server stopped while starting")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            for sock in self.sockets:
                sock.close()  # never started: the sockets are still ours to close
            return
        if not task.done():
            self._guard.finish_within(self.limits.stop_grace)
            self._server.should_exit = True
        await task

    async def __aenter__(self) -> HttpServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
