"""harnessx._http_server: uvicorn inside the running loop, under deadlines and a connection cap.

Real sockets on loopback throughout. The tests assert what clients get (answers, closed
connections), never how long it took: every wait is for a condition, bounded only so that a
broken server fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from types import FrameType

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from harnessx._http_server import ConnectionLimits, HttpServer, ListenError, listen

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class App:
    """A small application: ``/healthz`` answers at once, ``/block`` waits for ``release``,
    ``/big`` streams more than any socket buffer holds."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.blocked = 0

    def asgi(self) -> Starlette:
        async def healthz(request: Request) -> Response:
            return PlainTextResponse("ok\n")

        async def block(request: Request) -> Response:
            self.blocked += 1
            await self.release.wait()
            return PlainTextResponse("released\n")

        async def big(request: Request) -> Response:
            async def chunks() -> AsyncIterator[bytes]:
                for _ in range(256):
                    yield b"x" * (1 << 20)

            return StreamingResponse(chunks())

        return Starlette(routes=[Route("/healthz", healthz), Route("/block", block), Route("/big", big)])


@contextlib.asynccontextmanager
async def serving(app: App, **limits: float | int | None) -> AsyncIterator[HttpServer]:
    async with HttpServer(
        app.asgi(),
        listen("127.0.0.1", 0),
        limits=ConnectionLimits(**limits),  # type: ignore[arg-type]
    ) as server:
        yield server


async def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Waits for ``condition``; the bound only turns a hang into a failure."""
    async with asyncio.timeout(30):
        while not condition():
            await asyncio.sleep(0.01)
    assert condition(), what


async def connect(port: int) -> Connection:
    return await asyncio.open_connection("127.0.0.1", port)


def closed_by_server(connection: Connection) -> bool:
    reader, _ = connection
    return reader.at_eof() or reader.exception() is not None


async def probe(port: int, path: str = "/healthz") -> int:
    """One request on a fresh connection, as a kubelet probe does; the status it gets."""
    reader, writer = await connect(port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n".encode())
        async with asyncio.timeout(30):
            raw = await reader.read()
    finally:
        writer.close()
    assert raw, "the server closed the probe's connection without an answer"
    return int(raw.split(b" ", 2)[1])


async def probes_answer(port: int, count: int = 20) -> None:
    statuses = [await probe(port) for _ in range(count)]
    assert statuses == [200] * count


def close_all(connections: list[Connection]) -> None:
    for _, writer in connections:
        writer.close()


# ---------------------------------------------------------------------------------------------
# Clients that hold connections cannot starve a probe
# ---------------------------------------------------------------------------------------------


async def test_200_silent_connections_do_not_starve_probes_and_are_closed() -> None:
    app = App()
    async with serving(app, head_timeout=1.0, max_connections=64) as server:
        silent = [await connect(server.port) for _ in range(200)]
        await wait_until(lambda: server.connections == 64, "the server fills up to its cap")
        await probes_answer(server.port)
        assert server.connections <= 64
        # None of them ever sent a byte; the server lets none stay for ever.
        await wait_until(lambda: all(closed_by_server(c) for c in silent), "silent connections closed")
        assert server.connections == 0
        await probes_answer(server.port, 3)
        close_all(silent)


async def drip(connection: Connection, first: bytes) -> None:
    """Sends ``first``, then one byte every 20 ms, as a slowloris client does, until cut off."""
    _, writer = connection
    writer.write(first)
    with contextlib.suppress(ConnectionError):
        while not closed_by_server(connection):
            writer.write(b"X")
            await writer.drain()
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("after_a_response", [False, True], ids=["fresh", "kept-alive"])
async def test_dripping_clients_do_not_starve_probes_and_are_cut_off(after_a_response: bool) -> None:
    app = App()
    async with serving(app, head_timeout=0.5, max_connections=64) as server:
        connections = []
        for _ in range(50):
            connection = await connect(server.port)
            if after_a_response:
                # A kept-alive connection gets no more for its next request head than a new
                # one. Asked at once: one left idle while the others are opened may be
                # closed before its first request (its head timeout) on a busy machine.
                reader, writer = connection
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                await reader.readuntil(b"ok\n")
            connections.append(connection)
        drips = [asyncio.create_task(drip(c, b"GET /healthz HTTP/1.1\r\nX-Slow: ")) for c in connections]
        await probes_answer(server.port)
        await wait_until(lambda: all(task.done() for task in drips), "every dripping client cut off")
        await asyncio.gather(*drips)
        assert all(closed_by_server(c) for c in connections)
        await probes_answer(server.port, 3)
        close_all(connections)


async def test_200_kept_alive_connections_do_not_starve_probes_and_are_closed() -> None:
    app = App()
    async with serving(app, head_timeout=1.0, max_connections=256) as server:
        kept: list[Connection] = []
        for _ in range(200):
            reader, writer = await connect(server.port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            await reader.readuntil(b"ok\n")
            kept.append((reader, writer))
        await probes_answer(server.port)
        await wait_until(lambda: all(closed_by_server(c) for c in kept), "idle kept-alive connections closed")
        close_all(kept)


async def test_a_full_server_makes_room_by_closing_its_oldest_idle_connection() -> None:
    app = App()
    async with serving(app, head_timeout=60.0, max_connections=4) as server:
        idle = [await connect(server.port) for _ in range(4)]
        await wait_until(lambda: server.connections == 4, "four connections open")
        assert await probe(server.port) == 200
        await wait_until(lambda: closed_by_server(idle[0]), "the oldest idle connection closed")
        assert not any(closed_by_server(c) for c in idle[1:])
        close_all(idle)


async def test_when_every_connection_is_busy_a_newcomer_is_turned_away() -> None:
    app = App()
    async with serving(app, head_timeout=60.0, max_connections=4) as server:
        busy = [await connect(server.port) for _ in range(4)]
        for _, writer in busy:
            writer.write(b"GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
        await wait_until(lambda: app.blocked == 4, "four requests in flight")
        reader, writer = await connect(server.port)
        async with asyncio.timeout(30):
            with contextlib.suppress(ConnectionError):
                assert await reader.read() == b""  # closed without an answer
        writer.close()
        app.release.set()
        for reader, _ in busy:
            assert (await reader.readuntil(b"released\n")).startswith(b"HTTP/1.1 200")
        await probes_answer(server.port, 3)
        close_all(busy)


async def test_a_client_that_stops_reading_a_response_is_cut_off() -> None:
    app = App()
    async with serving(app, head_timeout=0.5, response_timeout=0.5) as server:
        _reader, writer = await connect(server.port)
        writer.write(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")  # and never read the 256 MB
        await wait_until(lambda: server.connections == 1, "the request is in flight")
        await probes_answer(server.port, 3)
        await wait_until(lambda: server.connections == 0, "the stalled download cut off")
        writer.close()


async def test_a_long_request_head_gets_400_and_the_server_survives() -> None:
    app = App()
    async with serving(app, max_head_bytes=2048) as server:
        reader, writer = await connect(server.port)
        writer.write(
            b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-F%d: %s\r\n" % (i, b"y" * 100) for i in range(40))
        )
        writer.write(b"\r\n")
        async with asyncio.timeout(30):
            raw = await reader.read()
        writer.close()
        assert raw.startswith(b"HTTP/1.1 400")
        await probes_answer(server.port, 3)


@pytest.mark.parametrize(
    "garbage",
    [b"GARBAGE\r\n\r\n", b"\x00\x01\x02\xff\xfe\r\n\r\n", b"GET /healthz SPDY/3\r\n\r\n"],
)
async def test_garbage_gets_400_and_the_server_survives(garbage: bytes) -> None:
    app = App()
    async with serving(app) as server:
        reader, writer = await connect(server.port)
        writer.write(garbage)
        async with asyncio.timeout(30):
            raw = await reader.read()
        writer.close()
        assert raw.startswith(b"HTTP/1.1 400")
        await probes_answer(server.port, 3)


# ---------------------------------------------------------------------------------------------
# Living inside the host process
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def own_sigterm_handler() -> Iterator[Callable[[int, FrameType | None], None]]:
    def host_handler(signum: int, frame: FrameType | None) -> None:
        pass

    previous = signal.signal(signal.SIGTERM, host_handler)
    try:
        yield host_handler
    finally:
        signal.signal(signal.SIGTERM, previous)


async def test_the_host_keeps_its_signal_handlers() -> None:
    interrupt = signal.getsignal(signal.SIGINT)
    with own_sigterm_handler() as host_handler:
        async with serving(App()) as server:
            assert await probe(server.port) == 200
            assert signal.getsignal(signal.SIGTERM) is host_handler
            assert signal.getsignal(signal.SIGINT) is interrupt
        assert signal.getsignal(signal.SIGTERM) is host_handler


async def test_stop_cuts_off_idle_dripping_and_stalled_clients_without_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop_errors: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: loop_errors.append(context))
    app = App()
    server = HttpServer(app.asgi(), listen("127.0.0.1", 0), limits=ConnectionLimits(head_timeout=60.0))
    await server.start()
    port = server.port
    idle = await connect(server.port)
    dripping = await connect(server.port)
    dripper = asyncio.create_task(drip(dripping, b"GET /healthz HTTP/1.1\r\n"))
    stalled = await connect(server.port)
    stalled[1].write(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
    await wait_until(lambda: server.connections == 3, "three connections open")
    await server.stop()
    await wait_until(lambda: closed_by_server(idle), "the idle connection closed")
    await dripper
    with pytest.raises(OSError):
        await connect(port)
    await server.stop()  # a second stop is harmless
    close_all([idle, dripping, stalled])
    await asyncio.sleep(0.05)  # let the loop run the callbacks of what was cut off
    assert loop_errors == []
    assert [r for r in caplog.records if r.levelno >= 40] == []


def test_on_uvloop_idle_dripping_and_stalled_clients_are_cut_off_and_probes_answer() -> None:
    """The services run on uvloop, whose transports are not asyncio's: the same guarantees."""
    uvloop = pytest.importorskip("uvloop")

    async def scenario() -> None:
        app = App()
        async with serving(app, head_timeout=0.5, response_timeout=0.5, max_connections=32) as server:
            silent = [await connect(server.port) for _ in range(100)]
            dripping = await connect(server.port)
            dripper = asyncio.create_task(drip(dripping, b"GET /healthz HTTP/1.1\r\n"))
            _, stalled = await connect(server.port)
            stalled.write(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            await probes_answer(server.port)
            await wait_until(lambda: all(closed_by_server(c) for c in silent), "silent connections closed")
            await dripper
            await wait_until(lambda: server.connections == 0, "the stalled download cut off")
            close_all([*silent, dripping])
            stalled.close()

    uvloop.run(scenario())


async def test_start_twice_is_an_error() -> None:
    async with serving(App()) as server:
        with pytest.raises(RuntimeError, match="already started"):
            await server.start()


async def test_a_server_never_started_closes_its_sockets_on_stop() -> None:
    sockets = listen("127.0.0.1", 0)
    server = HttpServer(App().asgi(), sockets)
    await server.stop()
    assert all(sock.fileno() == -1 for sock in sockets)


# ---------------------------------------------------------------------------------------------
# listen()
# ---------------------------------------------------------------------------------------------


def test_listen_on_a_port_in_use_names_it() -> None:
    [taken] = listen("127.0.0.1", 0)
    try:
        port = taken.getsockname()[1]
        with pytest.raises(ListenError) as caught:
            listen("127.0.0.1", port)
        assert caught.value.errno == errno.EADDRINUSE
        assert str(caught.value).startswith(f"cannot listen on 127.0.0.1:{port}: ")
    finally:
        taken.close()


def test_listen_on_localhost_binds_every_address_on_one_port() -> None:
    sockets = listen("localhost", 0)
    try:
        assert {sock.getsockname()[1] for sock in sockets} == {sockets[0].getsockname()[1]}
        assert {sock.family for sock in sockets} <= {socket.AF_INET, socket.AF_INET6}
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.parametrize("host", ["10.255.255.1", "nosuchhost.invalid"])
def test_listen_on_an_address_of_another_host_fails_clearly(host: str) -> None:
    with pytest.raises(ListenError, match=f"cannot listen on {host}:9"):
        listen(host, 9)


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError):
        ConnectionLimits(head_timeout=0)
    with pytest.raises(ValueError):
        ConnectionLimits(max_connections=0)
