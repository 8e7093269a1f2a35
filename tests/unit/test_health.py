"""harnessx._health: the /metrics, /healthz, /readyz application (served by HttpServer on real
loopback sockets here) and --metrics-addr parsing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from harnessx._health import health_app, parse_address
from harnessx._http_server import HttpServer, listen

TEXT = "text/plain; charset=utf-8"


@dataclass
class Probe:
    """What the checks report; tests flip the fields."""

    health: str | None = None
    readiness: str | None = None
    fail: bool = False

    def healthy(self) -> str | None:
        if self.fail:
            raise RuntimeError("check broke")
        return self.health

    def ready(self) -> str | None:
        return self.readiness


class Flaky(Collector):
    """A collector that can be told to raise."""

    def __init__(self) -> None:
        self.fail = False

    def collect(self) -> Iterable[GaugeMetricFamily]:
        if self.fail:
            raise RuntimeError("collector broke")
        yield GaugeMetricFamily("harnessx_test_up", "Up.", value=1)


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def flaky() -> Flaky:
    return Flaky()


@pytest.fixture
async def client(probe: Probe, flaky: Flaky) -> AsyncIterator[httpx.AsyncClient]:
    registry = CollectorRegistry()
    Counter("harnessx_test_events", "Events.", registry=registry).inc(3)
    registry.register(flaky)
    app = health_app(registry, healthy=probe.healthy, ready=probe.ready)
    async with (
        HttpServer(app, listen("127.0.0.1", 0)) as server,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client,
    ):
        yield client


async def test_metrics_are_prometheus_text_by_default(client: httpx.AsyncClient) -> None:
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "harnessx_test_events_total 3.0" in response.text
    assert "harnessx_test_up 1.0" in response.text


async def test_metrics_follow_the_scrapers_accept_header(client: httpx.AsyncClient) -> None:
    # What Prometheus asks for: OpenMetrics first.
    accept = "application/openmetrics-text;version=1.0.0;q=0.9,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    response = await client.get("/metrics", headers={"Accept": accept})
    assert response.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert response.text.endswith("# EOF\n")
    assert "harnessx_test_events_total 3.0" in response.text


async def test_metrics_are_gzipped_when_asked(client: httpx.AsyncClient) -> None:
    response = await client.get("/metrics", headers={"Accept-Encoding": "gzip"})
    assert response.headers["content-encoding"] == "gzip"
    assert "harnessx_test_events_total 3.0" in response.text  # httpx has unzipped it


async def test_healthz_reports_ok_then_the_reason(client: httpx.AsyncClient, probe: Probe) -> None:
    response = await client.get("/healthz")
    assert (response.status_code, response.text) == (200, "ok\n")
    assert response.headers["content-type"] == TEXT
    assert response.headers["cache-control"] == "no-store"

    probe.health = "database unreachable"
    response = await client.get("/healthz")
    assert (response.status_code, response.text) == (503, "database unreachable\n")


async def test_readyz_follows_its_own_check(client: httpx.AsyncClient, probe: Probe) -> None:
    probe.readiness = "draining"
    assert (await client.get("/healthz")).status_code == 200
    response = await client.get("/readyz")
    assert (response.status_code, response.text) == (503, "draining\n")
    probe.readiness = None
    assert (await client.get("/readyz")).status_code == 200


async def test_an_empty_reason_still_fails(client: httpx.AsyncClient, probe: Probe) -> None:
    probe.readiness = "\n"
    response = await client.get("/readyz")
    assert (response.status_code, response.text) == (503, "unavailable\n")


async def test_query_string_is_ignored(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz?verbose=1")).status_code == 200


async def test_unknown_path_is_404(client: httpx.AsyncClient) -> None:
    assert (await client.get("/nope")).status_code == 404
    assert (await client.get("/")).status_code == 404


async def test_other_methods_are_405(client: httpx.AsyncClient) -> None:
    for method in ("POST", "DELETE", "PUT"):
        for path in ("/healthz", "/readyz", "/metrics"):
            response = await client.request(method, path)
            assert response.status_code == 405
            assert set(response.headers["allow"].split(", ")) == {"GET", "HEAD"}


async def test_head_sends_headers_without_body(client: httpx.AsyncClient, probe: Probe) -> None:
    response = await client.head("/healthz")
    assert (response.status_code, response.content) == (200, b"")
    assert response.headers["content-length"] == "3"
    response = await client.head("/metrics")
    assert (response.status_code, response.content) == (200, b"")
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")

    probe.health = "broken"
    response = await client.head("/healthz")
    assert (response.status_code, response.content) == (503, b"")


async def test_a_check_that_raises_fails_the_probe(client: httpx.AsyncClient, probe: Probe) -> None:
    probe.fail = True
    response = await client.get("/healthz")
    assert (response.status_code, response.text) == (503, "health check raised RuntimeError\n")
    probe.fail = False
    assert (await client.get("/healthz")).status_code == 200


async def test_a_collector_that_raises_is_500_and_the_server_survives(
    client: httpx.AsyncClient, flaky: Flaky, caplog: pytest.LogCaptureFixture
) -> None:
    flaky.fail = True
    assert (await client.get("/metrics")).status_code == 500
    assert "collector broke" in caplog.text  # the application's error is logged
    flaky.fail = False
    assert (await client.get("/metrics")).status_code == 200
    assert (await client.get("/healthz")).status_code == 200


async def test_health_reasons_are_redacted(client: httpx.AsyncClient, probe: Probe) -> None:
    probe.health = "cannot connect to postgresql://app:Sup3r/Secret@db/x"
    response = await client.get("/healthz")
    assert (response.status_code, response.text) == (503, "cannot connect to postgresql://app:***@db/x\n")


# ---------------------------------------------------------------------------------------------
# parse_address
# ---------------------------------------------------------------------------------------------


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
    ("text", "says"),
    [
        ("", "has no port"),
        ("9464", "has no port"),
        ("host", "has no port"),
        ("host:", "has no port number"),
        ("host:port", "has no port number"),
        ("host:-1", "has no port number"),
        ("host:70000", "port 70000 in 'host:70000' is out of range: ports go from 0 to 65535"),
        ("127.0.0.1:99999", "port 99999 in '127.0.0.1:99999' is out of range"),
        ("::1:9464", "an IPv6 address goes in brackets, e.g. [::1]:9464"),
        ("[]:80", "has an empty IPv6 address"),
        ("[::1", "has no closing ']'"),
        ("[::1:80", "has no closing ']'"),
        ("ho st:80", "is not a host name or address"),
    ],
)
def test_parse_address_rejects_with_the_reason(text: str, says: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_address(text)
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)
