"""The connection-cutting proxy: it forwards, drops and black-holes as the scenarios expect."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from waiting import wait_until

from chaos.db import Target
from chaos.proxy import Proxy


class Echo:
    """An echo server that closes every connection it served when it stops."""

    def __init__(self) -> None:
        self.writers: list[asyncio.StreamWriter] = []
        self.served = 0  # connections whose handler has ended
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._echo, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _echo(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            with contextlib.suppress(ConnectionError):
                while data := await reader.read(1024):
                    writer.write(data)
                    await writer.drain()
            writer.close()
        finally:
            self.served += 1

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.close()
        await wait_until(lambda: self.served == len(self.writers), "the handlers to see their connections go")


async def roundtrip(port: int, payload: bytes, within: float = 2.0) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(payload)), within)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def test_forwards_then_drops_then_heals() -> None:
    echo = Echo()
    proxy = Proxy(("127.0.0.1", await echo.start()))
    port = await proxy.start()
    try:
        assert await roundtrip(port, b"hello") == b"hello"
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        proxy.drop()
        # An open connection is reset, and a new one is refused at once.
        assert await asyncio.wait_for(reader.read(10), 2) == b""
        writer.close()
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            await roundtrip(port, b"x")
        proxy.heal()
        assert await roundtrip(port, b"again") == b"again"
    finally:
        await proxy.close()
        await echo.stop()


async def test_a_black_hole_holds_traffic_until_it_heals() -> None:
    echo = Echo()
    proxy = Proxy(("127.0.0.1", await echo.start()))
    port = await proxy.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        proxy.blackhole()
        writer.write(b"ping")
        await writer.drain()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readexactly(4), 0.3)
        proxy.heal()
        assert await asyncio.wait_for(reader.readexactly(4), 2) == b"ping"  # delivered, as TCP would
        writer.close()
    finally:
        await proxy.close()
        await echo.stop()


def test_a_dsn_is_pointed_at_the_proxy() -> None:
    target = Target("postgres", "postgresql://u:p%40ss@db.example:6432/app?sslmode=disable", "s")
    assert target.address() == ("db.example", 6432)
    assert target.via(5555) == "postgresql://u:p%40ss@127.0.0.1:5555/app?sslmode=disable"
    # The DSN, password and all, goes to the processes in their environment, never on their
    # command lines.
    assert target.store_args() == ["--schema", "s"]
    assert target.store_env("dsn") == {"HARNESSX_DSN": "dsn"}
    assert target.store_env() == {"HARNESSX_DSN": target.location}
    assert Target("sqlite", "/x.db").store_env() == {}
