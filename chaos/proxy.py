"""A TCP proxy on loopback that the suite controls: a worker's database connections go
through it, so the suite can cut that one worker off from PostgreSQL.

- ``drop()``: every connection is reset at once and new ones are refused (a crashed
  switch, a firewall reset). The server notices, so the worker's liveness lock goes too.
- ``blackhole()``: connections stay open but nothing gets through in either direction, and
  new connections hang (a partition). The server notices nothing: the worker's leases
  simply stop being renewed and expire.
- ``heal()``: traffic flows again; what a black hole held back is delivered, as TCP would
  after a partition heals.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Literal

__all__ = ["Proxy"]

Mode = Literal["open", "blackhole", "drop"]


class Proxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.mode: Mode = "open"
        self.port = 0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._links: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._drops = 0  # how many drops so far: a link opened before one must not survive it

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        self._reset_all()
        self._flowing.set()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def blackhole(self) -> None:
        self.mode = "blackhole"
        self._flowing.clear()

    def drop(self) -> None:
        self.mode = "drop"
        self._drops += 1
        self._reset_all()
        self._flowing.set()  # pumps held by a black hole wake up and find their links gone

    def heal(self) -> None:
        self.mode = "open"
        self._flowing.set()

    def _dropped_since(self, drops: int) -> bool:
        return self.mode == "drop" or self._drops != drops

    def _reset_all(self) -> None:
        for client, server in list(self._links):
            client.transport.abort()
            server.transport.abort()
        self._links.clear()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._link(reader, writer, self._drops))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _link(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter, drops: int
    ) -> None:
        server_out: asyncio.StreamWriter | None = None
        try:
            await self._flowing.wait()  # a new connection into a black hole hangs
            if self._dropped_since(drops):
                return
            try:
                server_in, server_out = await asyncio.open_connection(*self.upstream)
            except OSError:
                return
            # A drop while the upstream leg was opening resets this connection too.
            if self._dropped_since(drops):
                return
            link = (client_out, server_out)
            self._links.add(link)
            pumps = [
                asyncio.create_task(self._pump(client_in, server_out)),
                asyncio.create_task(self._pump(server_in, client_out)),
            ]
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pump in pumps:
                    pump.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
                self._links.discard(link)
        finally:
            # Whatever ended the link (a drop, either side closing, the proxy closing).
            client_out.transport.abort()
            if server_out is not None:
                server_out.transport.abort()

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while True:
                data = await source.read(65536)
                if not data:
                    return
                await self._flowing.wait()
                if sink.transport.is_closing():
                    return
                sink.write(data)
                await sink.drain()
