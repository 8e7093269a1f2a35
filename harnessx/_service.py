"""Plumbing shared by the long-running processes (harness-worker, harness-supervisor).

Three small pieces with no dependencies beyond the standard library:

* ``HealthServer``: ``/metrics``, ``/healthz`` and ``/readyz`` over a minimal HTTP/1.1 server, so
  a probe or a scraper never depends on the health of anything heavier.
* ``configure_logging``: JSON or text lines on stderr, carrying run context bound with
  ``log_context`` / ``bind_log_context``, with secrets scrubbed by ``Redactor``.
* ``SystemdNotifier``: the sd_notify datagram protocol (readiness, watchdog, status).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import http
import json
import logging
import os
import re
import socket
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from types import MappingProxyType, TracebackType
from typing import Literal, TextIO
from urllib.parse import urlsplit

__all__ = [
    "HealthServer",
    "parse_address",
    "configure_logging",
    "log_context",
    "bind_log_context",
    "Redactor",
    "redact",
    "SystemdNotifier",
]

logger = logging.getLogger("harnessx.service")

# ---------------------------------------------------------------------------------------------
# Health and metrics endpoint
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# Logging
# ---------------------------------------------------------------------------------------------

# Shown first and in this order; any other bound or extra field follows.
_KNOWN_FIELDS = ("worker_id", "session_id", "run_id", "generation", "execution_key")
# Keys of the line itself, which a field must not overwrite.
_LINE_KEYS = frozenset({"ts", "level", "logger", "message", "error"})
# Attributes every LogRecord has; anything else on a record came from ``extra=`` or the context.
_RECORD_ATTRS = frozenset(
    {*vars(logging.LogRecord("", 0, "", 0, "", None, None)), "message", "asctime", "taskName"}
)

_NO_FIELDS: Mapping[str, object] = MappingProxyType({})
_context: contextvars.ContextVar[Mapping[str, object]] = contextvars.ContextVar(
    "harnessx_log_context", default=_NO_FIELDS
)


def _merged(fields: Mapping[str, object]) -> Mapping[str, object]:
    """The current context with ``fields`` applied; a None value unbinds the field."""
    merged = {**_context.get(), **fields}
    return MappingProxyType({key: value for key, value in merged.items() if value is not None})


@contextlib.contextmanager
def log_context(**fields: object) -> Iterator[None]:
    """Adds ``fields`` to every log line of the current context until the block exits.

    Tasks created inside the block copy the context, so their lines carry the fields too.
    """
    token = _context.set(_merged(fields))
    try:
        yield
    finally:
        _context.reset(token)


def bind_log_context(**fields: object) -> None:
    """Adds ``fields`` for the rest of the current context (e.g. for the rest of a task)."""
    _context.set(_merged(fields))


# --- redaction ---

_URL_PASSWORD = re.compile(r"(?P<prefix>[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:)[^@\s/]+@")
# A name containing one of these words names a secret. The word must not run on into lowercase
# letters, so ``input_tokens`` is left alone while ``access_token`` and ``apiKey`` are caught.
_SECRET_NAME = r"""[\w-]*?
    (?:password|passwd|secret|token|api[_-]?key|authorization)
    (?-i:(?![a-z0-9]))[\w-]*"""
_SECRET_FIELD = re.compile(_SECRET_NAME, re.IGNORECASE | re.VERBOSE)
# A secret-named key in any of key=value, key: value, "key": "value" or 'key': 'value'.
_SECRET_PAIR = re.compile(
    rf"""
    (?P<key>(?<![\w-]){_SECRET_NAME})
    (?P<sep>["']?\s*[:=]\s*)
    (?:
        (?P<quote>["'])(?:(?!(?P=quote))[^\\]|\\.)*(?P=quote)
      | (?P<scheme>(?:bearer|basic|token)\s+)?[^\s"',;&}})\]]+
    )
    """,
    re.IGNORECASE | re.VERBOSE,
)
_API_KEY = re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{8,}")
_MASK = "***"


def _mask_pair(match: re.Match[str]) -> str:
    quote = match["quote"] or ""
    return f"{match['key']}{match['sep']}{quote}{match['scheme'] or ''}{_MASK}{quote}"


def redact(text: str) -> str:
    """``text`` with URL passwords, values of secret-named keys and ``sk-`` API keys masked."""
    text = _URL_PASSWORD.sub(rf"\g<prefix>{_MASK}@", text)
    text = _SECRET_PAIR.sub(_mask_pair, text)
    return _API_KEY.sub(f"sk-{_MASK}", text)


def _redact_value(key: str, value: object) -> object:
    if value is not None and _SECRET_FIELD.fullmatch(key):
        return _MASK
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {str(k): _redact_value(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value("", item) for item in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    # Anything else is rendered with str() by the formatters, and a repr can quote a secret
    # (a settings object holding a DSN), so it is rendered and scrubbed here.
    return redact(str(value))


class Redactor(logging.Filter):
    """Scrubs secrets from a record's message, traceback and extra fields, in place.

    Install it on handlers (a logger's own filters skip records propagated from children).
    It never rejects a record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            # Bad %-arguments: leave the record as it is so the handler reports the mistake.
            return True
        record.msg, record.args = redact(message), None
        if _exception_text(record):
            record.exc_text = redact(record.exc_text or "")
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        for key, value in _fields(record).items():
            setattr(record, key, _redact_value(key, value))
        return True


class _ContextFilter(logging.Filter):
    """Copies static and context-bound fields onto the record while still in the caller's context.

    A field passed with ``extra=`` wins over a bound one of the same name.
    """

    def __init__(self, static: Mapping[str, str]) -> None:
        super().__init__()
        self.static = dict(static)

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in {**self.static, **_context.get()}.items():
            if key not in _RECORD_ATTRS and not hasattr(record, key):
                setattr(record, key, value)
        return True


def _fields(record: logging.LogRecord) -> dict[str, object]:
    """The record's non-standard attributes, known context fields first."""
    extra = {key: value for key, value in vars(record).items() if key not in _RECORD_ATTRS}
    ordered = {key: extra.pop(key) for key in _KNOWN_FIELDS if key in extra}
    ordered.update((key, value) for key, value in extra.items() if not key.startswith("_"))
    return ordered


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _exception_text(record: logging.LogRecord) -> str | None:
    """The record's traceback as text, rendered once and cached where logging caches it."""
    if record.exc_info and not record.exc_text:
        record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
    return record.exc_text


def _error_text(record: logging.LogRecord) -> str | None:
    parts = [part for part in (_exception_text(record), record.stack_info) if part]
    return "\n".join(parts) or None


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _fields(record).items():
            line[f"field_{key}" if key in _LINE_KEYS else key] = value
        error = _error_text(record)
        if error:
            line["error"] = error
        return json.dumps(line, ensure_ascii=False, default=str)


_PLAIN_VALUE = re.compile(r"[^\s\"'=\\]+")


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = f"{_timestamp(record)} {record.levelname:<7} {record.name}: {record.getMessage()}"
        for key, value in _fields(record).items():
            shown = str(value)
            # Quote what would otherwise break the key=value reading of the line.
            if not _PLAIN_VALUE.fullmatch(shown):
                shown = json.dumps(shown, ensure_ascii=False)
            text += f" {key}={shown}"
        error = _error_text(record)
        # The traceback goes on the following lines, as a human reader expects it.
        return f"{text}\n{error}" if error else text


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is at the time, so redirections made later still apply."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass  # StreamHandler assigns it; the live sys.stderr is used instead


def configure_logging(
    fmt: Literal["json", "text"],
    level: str = "INFO",
    *,
    static: dict[str, str] | None = None,
) -> None:
    """Sends the root logger's output to stderr as JSON or text lines, secrets redacted.

    ``static`` fields (say ``worker_id``) go on every line. Calling it again replaces the
    handler it installed before; handlers installed by anyone else are left alone.
    """
    formatters: dict[str, Callable[[], logging.Formatter]] = {"json": _JsonFormatter, "text": _TextFormatter}
    if fmt not in formatters:
        raise ValueError(f"log format must be 'json' or 'text', not {fmt!r}")
    levels = logging.getLevelNamesMapping()
    if level.upper() not in levels:
        raise ValueError(f"unknown log level {level!r}: expected one of {', '.join(sorted(levels))}")
    handler = _StderrHandler()
    handler.setFormatter(formatters[fmt]())
    # Context first, so the fields it adds are redacted as well.
    handler.addFilter(_ContextFilter(static or {}))
    handler.addFilter(Redactor())
    root = logging.getLogger()
    for previous in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(previous)
    root.addHandler(handler)
    root.setLevel(levels[level.upper()])


# ---------------------------------------------------------------------------------------------
# systemd notification
# ---------------------------------------------------------------------------------------------


class SystemdNotifier:
    """Talks the sd_notify protocol to the service manager named by ``$NOTIFY_SOCKET``.

    Without ``NOTIFY_SOCKET`` (not started by systemd, or not ``Type=notify``) every call
    is a no-op. Sending never raises and never blocks: a lost notification is logged at
    debug level, because failing the service over it would be worse.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self._address = self._socket_address(env.get("NOTIFY_SOCKET", ""))
        self._watchdog_usec = env.get("WATCHDOG_USEC", "")
        self._watchdog_pid = env.get("WATCHDOG_PID", "")

    @staticmethod
    def _socket_address(value: str) -> str | None:
        if not value:
            return None
        # systemd writes abstract-namespace sockets with a leading "@" for the NUL byte.
        return "\0" + value[1:] if value.startswith("@") else value

    @property
    def enabled(self) -> bool:
        return self._address is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between ``watchdog()`` calls: half of ``WatchdogSec=``, or None if not enabled."""
        if self._watchdog_pid and self._watchdog_pid != str(os.getpid()):
            return None  # the watchdog is meant for another process (we were forked or exec'd)
        try:
            usec = int(self._watchdog_usec)
        except ValueError:
            return None
        return usec / 2 / 1_000_000 if usec > 0 else None

    def ready(self, status: str | None = None) -> bool:
        return self.notify("READY=1", *self._status(status))

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")

    def status(self, text: str) -> bool:
        return self.notify(*self._status(text))

    @staticmethod
    def _status(text: str | None) -> list[str]:
        # One assignment per line in the datagram, so a newline would end the status early.
        return [] if text is None else ["STATUS=" + " ".join(text.splitlines())]

    def notify(self, *assignments: str) -> bool:
        """Sends ``KEY=value`` assignments in one datagram; True if it was sent."""
        for assignment in assignments:
            if "=" not in assignment or "\n" in assignment:
                raise ValueError(f"not a KEY=value notification: {assignment!r}")
        if self._address is None or not assignments:
            return False
        payload = "\n".join(assignments).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                # A full receive queue must not stall the event loop; the message is dropped.
                sock.setblocking(False)
                sock.sendto(payload, self._address)
        except OSError as exc:
            logger.debug("sd_notify %r to %r failed: %s", assignments, self._address, exc)
            return False
        return True
