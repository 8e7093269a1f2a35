"""harnessx._health: the /metrics, /healthz, /readyz server and --metrics-addr parsing."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from harnessx._health import HealthServer, parse_address

METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class Probe:
    """What the server's callables report; tests flip the fields."""

    health: str | None = None
    readiness: str | None = None
    metrics_payload: bytes = b"# HELP up Up.\n# TYPE up gauge\nup 1.0\n"
    fail: bool = False

    def metrics(self) -> tuple[bytes, str]:
        if self.fail:
            raise RuntimeError("collector broke")
        return self.metrics_payload, METRICS_TYPE

    def healthy(self) -> str | None:
        if self.fail:
            raise RuntimeError("check broke")
        return self.health

    def ready(self) -> str | None:
        return self.readiness


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
async def server(probe: Probe) -> AsyncIterator[HealthServer]:
    async with HealthServer(
        "127.0.0.1",
        0,
        metrics=probe.metrics,
        healthy=probe.healthy,
        ready=probe.ready,
        read_timeout=0.3,
    ) as running:
        yield running


async def exchange(port: int, raw: bytes) -> bytes:
    """Sends ``raw`` and returns everything the server writes before closing."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        return await read_until_closed(reader)
    finally:
        writer.close()


async def read_until_closed(reader: asyncio.StreamReader) -> bytes:
    # A server closing with unread input sends a reset, which is as closed as it gets.
    try:
        async with asyncio.timeout(5):
            return await reader.read()
    except ConnectionResetError:
        return b""


def parse(raw: bytes) -> Response:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    version, status, _reason = status_line.split(" ", 2)
    assert version == "HTTP/1.1"
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(": ")
        headers[name.lower()] = value
    return Response(int(status), headers, body)


async def get(port: int, path: str, method: str = "GET") -> Response:
    request = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: test\r\n\r\n"
    return parse(await exchange(port, request.encode()))


async def test_start_picks_a_free_port(server: HealthServer) -> None:
    assert server.port > 0


async def test_metrics_payload_and_content_type(server: HealthServer, probe: Probe) -> None:
    response = await get(server.port, "/metrics")
    assert response.status == 200
    assert response.body == probe.metrics_payload
    assert response.headers["content-type"] == METRICS_TYPE
    assert response.headers["content-length"] == str(len(probe.metrics_payload))
    assert response.headers["connection"] == "close"


async def test_metrics_from_prometheus_client_over_httpx(probe: Probe) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.Counter("harnessx_test_events", "Events.", registry=registry).inc(3)

    def metrics() -> tuple[bytes, str]:
        return prometheus_client.generate_latest(registry), prometheus_client.CONTENT_TYPE_LATEST

    async with (
        HealthServer("127.0.0.1", 0, metrics=metrics, healthy=probe.healthy, ready=probe.ready) as server,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client,
    ):
        response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == prometheus_client.CONTENT_TYPE_LATEST
    assert "harnessx_test_events_total 3.0" in response.text


async def test_healthz_reports_ok_then_the_reason(server: HealthServer, probe: Probe) -> None:
    response = await get(server.port, "/healthz")
    assert (response.status, response.body) == (200, b"ok\n")
    assert response.headers["content-type"] == "text/plain; charset=utf-8"

    probe.health = "database unreachable"
    response = await get(server.port, "/healthz")
    assert (response.status, response.body) == (503, b"database unreachable\n")


async def test_readyz_follows_its_own_check(server: HealthServer, probe: Probe) -> None:
    probe.readiness = "draining"
    assert (await get(server.port, "/healthz")).status == 200
    response = await get(server.port, "/readyz")
    assert (response.status, response.body) == (503, b"draining\n")
    probe.readiness = None
    assert (await get(server.port, "/readyz")).status == 200


async def test_query_string_is_ignored(server: HealthServer) -> None:
    assert (await get(server.port, "/healthz?verbose=1")).status == 200


async def test_unknown_path_is_404(server: HealthServer) -> None:
    assert (await get(server.port, "/nope")).status == 404
    assert (await get(server.port, "/")).status == 404


async def test_other_methods_are_405(server: HealthServer) -> None:
    for method in ("POST", "DELETE", "PUT"):
        response = await get(server.port, "/healthz", method=method)
        assert response.status == 405
        assert response.headers["allow"] == "GET, HEAD"


async def test_head_sends_headers_without_body(server: HealthServer, probe: Probe) -> None:
    response = await get(server.port, "/metrics", method="HEAD")
    assert response.status == 200
    assert response.body == b""
    assert response.headers["content-length"] == str(len(probe.metrics_payload))

    probe.health = "broken"
    response = await get(server.port, "/healthz", method="HEAD")
    assert (response.status, response.body) == (503, b"")


async def test_failing_callables_become_error_responses(server: HealthServer, probe: Probe) -> None:
    probe.fail = True
    metrics = await get(server.port, "/metrics")
    assert metrics.status == 500
    health = await get(server.port, "/healthz")
    assert (health.status, health.body) == (503, b"health check raised RuntimeError\n")
    probe.fail = False
    assert (await get(server.port, "/metrics")).status == 200


@pytest.mark.parametrize(
    "garbage",
    [
        b"GARBAGE\r\n\r\n",
        b"\x00\x01\x02\xff\xfe\r\n\r\n",
        b"GET /healthz\r\n\r\n",
        b"GET /healthz SPDY/3\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n",  # half-closed before the blank line
    ],
)
async def test_garbage_gets_400_and_the_server_survives(server: HealthServer, garbage: bytes) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(garbage)
    writer.write_eof()
    async with asyncio.timeout(5):
        raw = await reader.read()
    writer.close()
    assert parse(raw).status == 400
    assert (await get(server.port, "/healthz")).status == 200


async def test_client_that_closes_at_once_is_harmless(server: HealthServer) -> None:
    _reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.close()
    assert (await get(server.port, "/healthz")).status == 200


async def test_oversized_request_line_and_headers(probe: Probe) -> None:
    async with HealthServer(
        "127.0.0.1",
        0,
        metrics=probe.metrics,
        healthy=probe.healthy,
        ready=probe.ready,
        max_line_bytes=256,
        max_header_bytes=1024,
    ) as server:
        long_line = f"GET /{'a' * 1000} HTTP/1.1\r\n\r\n".encode()
        assert parse(await exchange(server.port, long_line)).status == 414
        many_headers = b"GET /healthz HTTP/1.1\r\n" + b"".join(
            f"X-Filler-{i}: {'b' * 100}\r\n".encode() for i in range(20)
        )
        assert parse(await exchange(server.port, many_headers + b"\r\n")).status == 431
        assert (await get(server.port, "/healthz")).status == 200


async def test_silent_client_is_dropped_without_blocking_others(server: HealthServer) -> None:
    started = time.monotonic()
    silent_reader, silent_writer = await asyncio.open_connection("127.0.0.1", server.port)
    # Others are served while the silent client still holds its connection.
    assert (await get(server.port, "/healthz")).status == 200
    assert time.monotonic() - started < server.read_timeout
    assert await read_until_closed(silent_reader) == b""  # closed by the server, no response
    assert time.monotonic() - started >= server.read_timeout * 0.9
    silent_writer.close()
    assert (await get(server.port, "/healthz")).status == 200


async def test_dripping_client_gets_no_more_than_the_read_timeout(server: HealthServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    started = time.monotonic()
    writer.write(b"GET /healthz HTTP/1.1\r\n")
    closed = asyncio.create_task(read_until_closed(reader))
    # One header byte at a time would keep a per-read timeout alive for ever.
    while not closed.done() and time.monotonic() - started < 5:
        with contextlib.suppress(ConnectionError):
            writer.write(b"X")
            await writer.drain()
        await asyncio.sleep(0.02)
    assert await closed == b""
    assert time.monotonic() - started < server.read_timeout * 3
    writer.close()


async def open_connections(server: HealthServer, count: int) -> None:
    """Waits until the server is serving ``count`` connections (accepting one takes a loop turn or two)."""
    for _ in range(500):
        if len(server._connections) == count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"server never reached {count} open connections")


async def test_connections_over_the_limit_are_closed(probe: Probe) -> None:
    async with HealthServer(
        "127.0.0.1", 0, metrics=probe.metrics, healthy=probe.healthy, ready=probe.ready, max_connections=1
    ) as server:
        _held_reader, held_writer = await asyncio.open_connection("127.0.0.1", server.port)
        await open_connections(server, 1)
        assert await exchange(server.port, b"GET /healthz HTTP/1.1\r\n\r\n") == b""
        held_writer.close()
        await open_connections(server, 0)
        assert (await get(server.port, "/healthz")).status == 200


async def test_stop_does_not_wait_for_idle_clients(probe: Probe) -> None:
    server = HealthServer(
        "127.0.0.1", 0, metrics=probe.metrics, healthy=probe.healthy, ready=probe.ready, read_timeout=30
    )
    loop_errors: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: loop_errors.append(context))
    await server.start()
    port = server.port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await open_connections(server, 1)
    async with asyncio.timeout(5):
        await server.stop()
    assert await read_until_closed(reader) == b""
    writer.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
    await server.stop()  # a second stop is harmless
    await asyncio.sleep(0.01)  # let done-callbacks of the abandoned connection run
    assert loop_errors == []


async def test_start_twice_is_an_error(server: HealthServer) -> None:
    with pytest.raises(RuntimeError):
        await server.start()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.0.0.0:9464", ("0.0.0.0", 9464)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("localhost:8080", ("localhost", 8080)),
        (":9464", ("0.0.0.0", 9464)),
        ("[::1]:9464", ("::1", 9464)),
        ("[::]:80", ("::", 80)),
        (" 10.0.0.1:65535 ", ("10.0.0.1", 65535)),
    ],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "9464", "host", "host:", "host:port", "host:70000", "host:-1", "::1:9464", "[]:80", "[::1:80"],
)
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="expected HOST:PORT, :PORT or \\[IPV6\\]:PORT"):
        parse_address(text)


async def test_health_reasons_are_redacted(server: HealthServer, probe: Probe) -> None:
    probe.health = "cannot connect to postgresql://app:hunter2@db/x"
    response = await get(server.port, "/healthz")
    assert (response.status, response.body) == (503, b"cannot connect to postgresql://app:***@db/x\n")
