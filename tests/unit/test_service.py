"""harnessx._service: the health/metrics server, logging setup and the sd_notify client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import httpx
import pytest

from harnessx._service import (
    HealthServer,
    Redactor,
    SystemdNotifier,
    bind_log_context,
    configure_logging,
    log_context,
    parse_address,
    redact,
)

# ---------------------------------------------------------------------------------------------
# HealthServer
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# Logging
# ---------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


log = logging.getLogger("harnessx.test_service")


def json_lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in capsys.readouterr().err.splitlines()]


def test_json_lines_carry_the_fields(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json", static={"worker_id": "w-1"})
    log.info("hello %s", "world", extra={"session_id": "s-1", "generation": 3})
    log.debug("not shown at INFO")
    [line] = json_lines(capsys)
    ts = line.pop("ts")
    assert isinstance(ts, str) and ts.endswith("Z")
    assert abs(time.time() - _epoch(ts)) < 60
    assert line == {
        "level": "INFO",
        "logger": "harnessx.test_service",
        "message": "hello world",
        "worker_id": "w-1",
        "session_id": "s-1",
        "generation": 3,
    }


def _epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def test_json_renders_exceptions_as_error(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json", level="debug")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("it failed")
    [line] = json_lines(capsys)
    assert line["level"] == "ERROR"
    assert line["message"] == "it failed"
    error = line["error"]
    assert isinstance(error, str)
    assert error.startswith("Traceback") and error.endswith("ValueError: boom")


async def test_log_context_binds_across_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json")

    async def child() -> None:
        log.info("child start")
        bind_log_context(execution_key="k-1")  # only for the rest of this task
        log.info("child bound")

    with log_context(session_id="s-1", run_id="r-1"):
        await asyncio.create_task(child())
        log.info("parent", extra={"run_id": "r-override"})
        with log_context(run_id=None):
            log.info("run unbound")
    log.info("outside")

    lines = {str(line["message"]): line for line in json_lines(capsys)}
    assert lines["child start"]["session_id"] == "s-1"
    assert lines["child start"]["run_id"] == "r-1"
    assert "execution_key" not in lines["child start"]
    assert lines["child bound"]["execution_key"] == "k-1"
    assert "execution_key" not in lines["parent"]
    assert lines["parent"]["run_id"] == "r-override"  # extra= wins over the context
    assert "run_id" not in lines["run unbound"] and lines["run unbound"]["session_id"] == "s-1"
    assert "session_id" not in lines["outside"]


def test_text_format_is_one_readable_line(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("text", static={"worker_id": "w-1"})
    with log_context(session_id="s-1"):
        log.warning("lease lost", extra={"reason": "two words"})
    [line] = capsys.readouterr().err.splitlines()
    assert line.endswith(
        'WARNING harnessx.test_service: lease lost worker_id=w-1 session_id=s-1 reason="two words"'
    )
    assert line[:24].endswith("Z")


SECRETS = ("hunter2", "s3cr3t", "sk-abcdefghijkl0123", "dbpass", "tok-value")


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_secrets_are_redacted_everywhere(
    capsys: pytest.CaptureFixture[str], fmt: Literal["json", "text"]
) -> None:
    configure_logging(fmt)
    with log_context(session_id="postgresql://app:dbpass@db/harness"):
        log.error(
            "connecting to %s with password=hunter2 and %s",
            "postgresql://app:s3cr3t@db:5432/harness",
            '{"api_key": "sk-abcdefghijkl0123"}',
            extra={
                "dsn": "postgres://u:s3cr3t@h/db",
                "api_key": "sk-abcdefghijkl0123",
                "token": "tok-value",
                "note": "password=hunter2",
                "headers": {"Authorization": "Bearer tok-value"},
            },
        )
    out = capsys.readouterr().err
    for secret in SECRETS:
        assert secret not in out
    if fmt == "json":
        [line] = [json.loads(text) for text in out.splitlines()]
        assert line["message"] == (
            'connecting to postgresql://app:***@db:5432/harness with password=*** and {"api_key": "***"}'
        )
        assert line["dsn"] == "postgres://u:***@h/db"
        assert line["api_key"] == "***"
        assert line["token"] == "***"
        assert line["note"] == "password=***"
        assert line["headers"] == {"Authorization": "***"}
        assert line["session_id"] == "postgresql://app:***@db/harness"


def test_objects_in_fields_are_rendered_and_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    @dataclass
    class Settings:
        dsn: str

    configure_logging("json")
    log.info("settings", extra={"settings": Settings("postgresql://app:hunter2@db/x"), "slots": 4})
    [line] = json_lines(capsys)
    assert str(line["settings"]).endswith("Settings(dsn='postgresql://app:***@db/x')")
    assert line["slots"] == 4


async def test_health_reasons_are_redacted(server: HealthServer, probe: Probe) -> None:
    probe.health = "cannot connect to postgresql://app:hunter2@db/x"
    response = await get(server.port, "/healthz")
    assert (response.status, response.body) == (503, b"cannot connect to postgresql://app:***@db/x\n")


def test_secrets_in_tracebacks_are_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json")
    try:
        raise ConnectionError("cannot reach postgresql://app:hunter2@db/x")
    except ConnectionError:
        log.exception("connect failed")
    [line] = json_lines(capsys)
    assert "hunter2" not in json.dumps(line)
    assert str(line["error"]).endswith("postgresql://app:***@db/x")


def test_an_sk_key_alone_is_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json")
    log.info("provider said: invalid key sk-proj-ABCDEFGH12345678")
    [line] = json_lines(capsys)
    assert line["message"] == "provider said: invalid key sk-***"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://user:secret@host/db", "postgresql://user:***@host/db"),
        ("redis://:pw@localhost:6379/0", "redis://:***@localhost:6379/0"),
        ("password=hunter2 host=db", "password=*** host=db"),
        ("PASSWORD = hunter2", "PASSWORD = ***"),
        ('{"api_key": "sk-abc", "model": "m"}', '{"api_key": "***", "model": "m"}'),
        ("{'apikey': 'x y z'}", "{'apikey': '***'}"),
        ("?a=1&access_token=abc&b=2", "?a=1&access_token=***&b=2"),
        ("Authorization: Bearer abc.def", "Authorization: Bearer ***"),
        ("x-api-key: k1; next", "x-api-key: ***; next"),
        ("client_secret=abc, other=1", "client_secret=***, other=1"),
        ("apiKey=q secretKey: w", "apiKey=*** secretKey: ***"),
        ("key sk-ant-api03-abcdefgh", "key sk-***"),
        # Things that only look close stay as they are.
        ("input_tokens=12 output_tokens=5", "input_tokens=12 output_tokens=5"),
        ("task-12345678 disk-abcdefghij", "task-12345678 disk-abcdefghij"),
        ("sk-short", "sk-short"),
        ("http://host:8080/path@x", "http://host:8080/path@x"),
        ("execution_key=abc", "execution_key=abc"),
        ("password=", "password="),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected


def test_redactor_leaves_broken_records_alone() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "needs %s and %s", ("one",), None)
    assert Redactor().filter(record) is True
    assert record.msg == "needs %s and %s"


def test_configuring_twice_does_not_duplicate_handlers(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    foreign = logging.NullHandler()
    root.addHandler(foreign)
    before = len(root.handlers)
    configure_logging("text")
    configure_logging("json", level="WARNING")
    assert len(root.handlers) == before + 1
    assert foreign in root.handlers
    assert root.level == logging.WARNING
    log.warning("once")
    assert [line["message"] for line in json_lines(capsys)] == ["once"]


def test_configure_logging_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="log format"):
        configure_logging("xml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging("json", level="LOUD")


# ---------------------------------------------------------------------------------------------
# SystemdNotifier
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def short_dir() -> Iterator[str]:
    # AF_UNIX paths are limited to ~107 bytes, which pytest's tmp_path can exceed.
    path = tempfile.mkdtemp(prefix="hx-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def listener(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(2)
    return sock


def test_notifier_sends_exact_datagrams(clean_env: pytest.MonkeyPatch, short_dir: str) -> None:
    path = os.path.join(short_dir, "notify")
    with listener(path) as sock:
        clean_env.setenv("NOTIFY_SOCKET", path)
        notifier = SystemdNotifier()
        assert notifier.enabled
        assert notifier.ready()
        assert sock.recv(4096) == b"READY=1"
        notifier.ready("serving 4 slots")
        assert sock.recv(4096) == b"READY=1\nSTATUS=serving 4 slots"
        notifier.status("x")
        assert sock.recv(4096) == b"STATUS=x"
        notifier.status("two\nlines")
        assert sock.recv(4096) == b"STATUS=two lines"
        notifier.watchdog()
        assert sock.recv(4096) == b"WATCHDOG=1"
        notifier.stopping()
        assert sock.recv(4096) == b"STOPPING=1"
        notifier.notify("RELOADING=1", "MONOTONIC_USEC=5")
        assert sock.recv(4096) == b"RELOADING=1\nMONOTONIC_USEC=5"


def test_notifier_abstract_socket(clean_env: pytest.MonkeyPatch) -> None:
    name = f"harnessx-test-{uuid.uuid4().hex}"
    with listener("\0" + name) as sock:
        clean_env.setenv("NOTIFY_SOCKET", "@" + name)
        notifier = SystemdNotifier()
        assert notifier.ready("up")
        assert sock.recv(4096) == b"READY=1\nSTATUS=up"
        assert notifier.watchdog()
        assert sock.recv(4096) == b"WATCHDOG=1"


def test_notifier_without_socket_is_a_no_op(clean_env: pytest.MonkeyPatch) -> None:
    notifier = SystemdNotifier()
    assert not notifier.enabled
    assert notifier.ready("x") is False
    assert notifier.watchdog() is False
    assert notifier.stopping() is False
    assert notifier.watchdog_interval is None


def test_notifier_never_raises_on_send_errors(clean_env: pytest.MonkeyPatch, short_dir: str) -> None:
    clean_env.setenv("NOTIFY_SOCKET", os.path.join(short_dir, "nobody-listens"))
    notifier = SystemdNotifier()
    assert notifier.enabled
    assert notifier.ready() is False
    assert SystemdNotifier({"NOTIFY_SOCKET": "/" + "x" * 300}).ready() is False  # path too long


def test_notify_rejects_malformed_assignments() -> None:
    notifier = SystemdNotifier({})
    with pytest.raises(ValueError):
        notifier.notify("READY")
    with pytest.raises(ValueError):
        notifier.notify("STATUS=a\nREADY=1")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"WATCHDOG_USEC": "10000000"}, 5.0),
        ({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid())}, 1.5),
        ({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid() + 1)}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_watchdog_interval(
    clean_env: pytest.MonkeyPatch, env: dict[str, str], expected: float | None
) -> None:
    for name, value in env.items():
        clean_env.setenv(name, value)
    assert SystemdNotifier().watchdog_interval == expected
