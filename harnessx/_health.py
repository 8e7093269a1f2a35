"""``/metrics``, ``/healthz`` and ``/readyz`` for the long-running processes (harness-worker,
harness-supervisor), over a minimal HTTP/1.1 server, so a probe or a scraper never depends on the
health of anything heavier; and ``parse_address`` for their ``--metrics-addr``."""

from __future__ import annotations

import asyncio
import http
import logging
from collections.abc import Callable, Mapping
from types import TracebackType
from urllib.parse import urlsplit

from harnessx._redaction import redact

__all__ = ["HealthServer", "parse_address"]

logger = logging.getLogger("harnessx.service")

MetricsSource = Callable[[], tuple[bytes, str]]
# None when all is well, otherwise the reason, which becomes the 503 body.
Check = Callable[[], str | None]

_TEXT = "text/plain; charset=utf-8"


class _Reject(Exception):
    """A request the server answers with an error status instead of routing it."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Hangup(Exception):
    """The peer went away before sending anything worth answering."""


class HealthServer:
    """Serves ``GET /metrics``, ``/healthz`` and ``/readyz`` (and HEAD) on ``host:port``.

    Every response closes the connection: probes and scrapers open one per request anyway,
    and it keeps the server free of keep-alive state. A client gets ``read_timeout`` seconds
    in total to send its request head, so a stalled or dripping client cannot pin a
    connection slot; at most ``max_connections`` are served at once and extra ones are
    closed straight away. Nothing a client sends can raise into the event loop.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        metrics: MetricsSource,
        healthy: Check,
        ready: Check,
        read_timeout: float = 5.0,
        write_timeout: float = 5.0,
        max_line_bytes: int = 8 * 1024,
        max_header_bytes: int = 32 * 1024,
        max_connections: int = 64,
    ) -> None:
        self.host = host
        self._requested_port = port
        self._metrics = metrics
        self._healthy = healthy
        self._ready = ready
        self.read_timeout = read_timeout
        self.write_timeout = write_timeout
        self.max_line_bytes = max_line_bytes
        self.max_header_bytes = max_header_bytes
        self.max_connections = max_connections
        self._server: asyncio.Server | None = None
        self._bound_port: int | None = None
        self._connections: set[asyncio.Task[object]] = set()

    @property
    def port(self) -> int:
        """The bound port once started (port 0 asks the OS for a free one), else the requested one."""
        return self._bound_port if self._bound_port is not None else self._requested_port

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("HealthServer is already started")
        # The stream limit caps a single line: readline() refuses longer ones instead of
        # buffering whatever a client sends.
        self._server = await asyncio.start_server(
            self._on_connection, self.host, self._requested_port, limit=self.max_line_bytes
        )
        self._bound_port = int(self._server.sockets[0].getsockname()[1])
        logger.info("health server listening on %s:%d", self.host, self._bound_port)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        # Requests in flight are cheap to abandon; waiting for a slow client would delay
        # shutdown by up to read_timeout.
        pending = list(self._connections)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await server.wait_closed()

    async def __aenter__(self) -> HealthServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        try:
            if task is None or self._server is None or len(self._connections) >= self.max_connections:
                return
            self._connections.add(task)
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            # stop() (or loop shutdown) abandoned the request. Nothing awaits this task, which
            # belongs to start_server, and Python 3.11 reports a cancelled one as an
            # "unhandled exception in client_connected_cb", so it ends normally instead.
            pass
        except Exception as exc:
            # Resets, broken pipes and the like: the peer's problem, not a server fault.
            logger.debug("health server: connection dropped: %r", exc)
        finally:
            if task is not None:
                self._connections.discard(task)
            # close() flushes what is buffered before closing the socket; awaiting
            # wait_closed() would only let a client that does not read hold this task.
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(self.read_timeout):
                method, target = await self._read_head(reader)
        except (TimeoutError, _Hangup):
            return
        except _Reject as rejected:
            await self._respond(writer, rejected.status, b"", _TEXT, head_only=False)
            return
        head_only = method == "HEAD"
        if method not in ("GET", "HEAD"):
            await self._respond(writer, 405, b"", _TEXT, head_only=False, extra={"Allow": "GET, HEAD"})
            return
        status, body, content_type = self._route(urlsplit(target).path)
        await self._respond(writer, status, body, content_type, head_only=head_only)

    async def _read_head(self, reader: asyncio.StreamReader) -> tuple[str, str]:
        """Reads the request line and skips the headers; returns (method, target)."""
        line = await self._read_line(reader, too_long=414)
        if not line:
            raise _Hangup
        parts = line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not line.endswith(b"\n"):
            raise _Reject(400)
        header_bytes = 0
        while True:
            header = await self._read_line(reader, too_long=431)
            header_bytes += len(header)
            if header_bytes > self.max_header_bytes:
                raise _Reject(431)
            if not header.endswith(b"\n"):
                raise _Reject(400)  # the client half-closed in the middle of its headers
            if header in (b"\r\n", b"\n"):
                return parts[0], parts[1]

    @staticmethod
    async def _read_line(reader: asyncio.StreamReader, *, too_long: int) -> bytes:
        try:
            return await reader.readline()
        except ValueError:
            # StreamReader's way of saying the line exceeded the stream limit.
            raise _Reject(too_long) from None

    def _route(self, path: str) -> tuple[int, bytes, str]:
        if path == "/metrics":
            return self._render_metrics()
        if path == "/healthz":
            return self._render_check(self._healthy, "health")
        if path == "/readyz":
            return self._render_check(self._ready, "readiness")
        return 404, b"not found\n", _TEXT

    def _render_metrics(self) -> tuple[int, bytes, str]:
        try:
            payload, content_type = self._metrics()
        except Exception:
            logger.exception("health server: collecting metrics failed")
            return 500, b"collecting metrics failed\n", _TEXT
        return 200, payload, content_type

    @staticmethod
    def _render_check(check: Check, what: str) -> tuple[int, bytes, str]:
        try:
            reason = check()
        except Exception as exc:
            # A check that cannot tell is a failed check: the probe should see it.
            logger.warning("health server: %s check raised", what, exc_info=True)
            reason = f"{what} check raised {type(exc).__name__}"
        if reason is None:
            return 200, b"ok\n", _TEXT
        # Probe endpoints are often reachable from outside; a reason quoting an error must
        # not hand out the DSN it failed to connect with.
        text = redact(reason.rstrip("\n") or "unavailable")
        return 503, text.encode() + b"\n", _TEXT

    async def _respond(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        content_type: str,
        *,
        head_only: bool,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        if not body and status >= 400:
            body = f"{http.HTTPStatus(status).phrase.lower()}\n".encode()
        headers = {
            "Content-Type": content_type,
            "Content-Length": str(len(body)),
            "Cache-Control": "no-store",
            "Connection": "close",
            **(extra or {}),
        }
        lines = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        writer.write(head if head_only else head + body)
        # A client that stops reading must not hold the connection open for ever.
        async with asyncio.timeout(self.write_timeout):
            await writer.drain()


def parse_address(text: str) -> tuple[str, int]:
    """``"host:port"``, ``":port"`` (all IPv4 interfaces) or ``"[v6addr]:port"`` as (host, port)."""
    expected = (
        f"invalid listen address {text!r}: expected HOST:PORT, :PORT or [IPV6]:PORT (e.g. 0.0.0.0:9464)"
    )
    host, sep, port_text = text.strip().rpartition(":")
    if not sep:
        raise ValueError(expected)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if not host:
            raise ValueError(expected)
    elif ":" in host or "[" in host or "]" in host:
        raise ValueError(expected)  # an IPv6 address needs its brackets
    elif not host:
        host = "0.0.0.0"
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(expected)
    return host, int(port_text)
