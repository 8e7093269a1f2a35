"""Counting a store's round trips, for tests and benchmarks: a deterministic cost figure.

PostgreSQL: ``PostgresRoundTrips`` is a loopback proxy in front of a server that reads the
client's side of the wire protocol. After each ``Sync`` (extended protocol: bind and
execute), ``Flush`` (asyncpg's parse and describe) and simple ``Query`` message the client
waits for the server's answer: one round trip each. Preparing a statement the connection has not seen yet is
a round trip of its own, so count after a warm-up when a steady state is what is wanted.
The proxy answers an ``SSLRequest`` itself ("no"), so the client talks plain text to it.

SQLite: ``SQLiteRoundTrips`` counts a backend's calls to its database thread (each is one
hop there and back, SQLite's round trip) and the transactions they run.

Both keep, per round trip, the statements it carried (``trips``), to say *which* ones when a
count is not the one expected.

``PostgresRoundTrips.withhold_reply(marker)`` also loses a reply, for real: the next
statement whose text contains ``marker`` reaches the server, which runs (and commits) it, but
nothing the server says on that connection from then on reaches the client; ``cut()`` then
resets it, as a connection that dropped after the commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["PostgresRoundTrips", "SQLiteRoundTrips"]

_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104
_CANCEL_REQUEST = 80877102


def _first_line(sql: str) -> str:
    """A statement, short: its first meaningful line (after comments), collapsed."""
    for line in sql.splitlines():
        line = line.strip()
        if line and not line.startswith("--"):
            return re.sub(r"\s+", " ", line)[:100]
    return sql[:100]


@dataclass
class _Trips:
    trips: list[list[str]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.trips)

    def reset(self) -> None:
        self.trips.clear()

    def describe(self) -> str:
        """One line per round trip, with its statements."""
        return "\n".join(f"{n:3d}. {' | '.join(trip) or '?'}" for n, trip in enumerate(self.trips, 1))


@dataclass(eq=False)
class _Link:
    """One proxied connection: its two writers, and whether its replies are withheld."""

    writers: tuple[asyncio.StreamWriter, asyncio.StreamWriter]
    withheld: bool = False


class PostgresRoundTrips(_Trips):
    """``async with PostgresRoundTrips(dsn) as proxy``: connect to ``proxy.dsn``, read
    ``proxy.count`` (``proxy.reset()`` to start a measurement)."""

    def __init__(self, dsn: str) -> None:
        super().__init__()
        parts = urlsplit(dsn)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._parts = parts
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self.dsn = ""
        self._withhold: str | None = None
        self._withholding: set[_Link] = set()
        self.withheld = asyncio.Event()  # set once a statement's reply is being withheld

    def withhold_reply(self, marker: str) -> None:
        """Withhold the reply to the next statement whose text contains ``marker`` (and all
        that follows on its connection) until ``cut()``."""
        self._withhold = marker
        self.withheld.clear()

    def cut(self) -> int:
        """Reset the connections whose replies are withheld; how many there were."""
        links, self._withholding = self._withholding, set()
        for link in links:
            for writer in link.writers:
                writer.transport.abort()
        return len(links)

    async def __aenter__(self) -> PostgresRoundTrips:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        netloc = self._parts.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{port}"
        netloc_new = f"{netloc[0]}@{host}" if len(netloc) == 2 else host
        self.dsn = urlunsplit(self._parts._replace(netloc=netloc_new))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        for pipe in list(self._pipes):
            pipe.cancel()
        for pipe in list(self._pipes):
            with contextlib.suppress(BaseException):
                await pipe
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self._upstream)
        except OSError:
            client_w.close()
            return
        link = _Link((client_w, server_w))
        up = asyncio.create_task(self._client_to_server(client_r, client_w, server_w, link))
        down = asyncio.create_task(self._copy(server_r, client_w, link))
        for task in (up, down):
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (up, down):
                task.cancel()
            for writer in (client_w, server_w):
                writer.close()

    @staticmethod
    async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link) -> None:
        while data := await reader.read(65536):
            if link.withheld:
                continue  # the client has had every earlier reply: this is the withheld one's
            writer.write(data)
            await writer.drain()

    async def _client_to_server(
        self,
        reader: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        writer: asyncio.StreamWriter,
        link: _Link,
    ) -> None:
        # Untyped start-up messages until the StartupMessage itself.
        while True:
            (length,) = struct.unpack("!i", await reader.readexactly(4))
            body = await reader.readexactly(length - 4)
            (code,) = struct.unpack("!i", body[:4])
            if code in (_SSL_REQUEST, _GSSENC_REQUEST):
                client_w.write(b"N")  # plain text to this proxy
                await client_w.drain()
                continue
            writer.write(struct.pack("!i", length) + body)
            await writer.drain()
            if code == _CANCEL_REQUEST:
                return
            break
        names: dict[str, str] = {}  # prepared statement name -> its text
        pending: list[str] = []  # statements since the last Sync
        while True:
            kind = await reader.readexactly(1)
            (length,) = struct.unpack("!i", await reader.readexactly(4))
            body = await reader.readexactly(length - 4)
            if kind == b"P":  # Parse: name, query
                name, _, rest = body.partition(b"\x00")
                sql = rest.partition(b"\x00")[0].decode("utf-8", "replace")
                names[name.decode()] = sql
                pending.append("prepare " + _first_line(sql))
            elif kind == b"B":  # Bind: portal, statement
                _, _, rest = body.partition(b"\x00")
                statement = rest.partition(b"\x00")[0].decode()
                sql = names.get(statement, statement)
                pending.append(_first_line(sql))
                if self._withhold is not None and self._withhold in sql:
                    # Before the server sees it: all it says from now on is this statement's.
                    self._withhold = None
                    link.withheld = True
                    self._withholding.add(link)
                    self.withheld.set()
            elif kind in (b"S", b"H"):  # Sync, Flush (asyncpg prepares so): now it waits
                self.trips.append(pending)
                pending = []
            elif kind == b"Q":  # a simple query: one round trip
                self.trips.append([_first_line(body.rstrip(b"\x00").decode("utf-8", "replace"))])
            writer.write(kind + struct.pack("!i", length) + body)
            await writer.drain()
            if kind == b"X":  # Terminate
                return


class SQLiteRoundTrips(_Trips):
    """Counts ``backend``'s calls to its database thread (``count``), the transactions they
    ran (``transactions``) and the durable commits among them (``commits``), while entered."""

    def __init__(self, backend: Any) -> None:
        super().__init__()
        self._backend = backend
        self._original: Callable[..., Any] | None = None
        self.transactions = 0
        self.commits = 0

    def reset(self) -> None:
        super().reset()
        self.transactions = self.commits = 0

    def __enter__(self) -> SQLiteRoundTrips:
        backend = self._backend
        original = self._original = backend._guarded
        counter = self

        def guarded(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
            conn = backend._conn
            trip: list[str] = []
            counter.trips.append(trip)
            writing = False

            def trace(sql: str) -> None:
                nonlocal writing
                first = _first_line(sql)
                trip.append(first)
                word = first.split(" ", 1)[0].upper()
                if word == "BEGIN":
                    counter.transactions += 1
                    writing = "IMMEDIATE" in first.upper()
                elif word == "COMMIT" and writing:
                    counter.commits += 1

            if conn is not None:
                conn.set_trace_callback(trace)
            try:
                return original(fn, args)
            finally:
                if conn is not None:
                    conn.set_trace_callback(None)

        backend._guarded = guarded
        return self

    def __exit__(self, *exc: object) -> None:
        if self._original is not None:
            del self._backend._guarded  # the class's method again
            self._original = None
