"""``/metrics``, ``/healthz`` and ``/readyz`` of the long-running processes (harness-worker,
harness-supervisor) as a Starlette application, and ``parse_address`` for their ``--metrics-addr``.

The application is served by ``harnessx._http_server.HttpServer`` (uvicorn under connection
limits). ``/metrics`` is prometheus-client's own ASGI exposition, so the format follows the
scraper's ``Accept`` header (Prometheus text or OpenMetrics) and gzip its ``Accept-Encoding``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, make_asgi_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from harnessx._redaction import redact

__all__ = ["Check", "health_app", "parse_address"]

logger = logging.getLogger("harnessx.health")

# None when all is well, otherwise the reason, which becomes the 503 body.
Check = Callable[[], str | None]


class _Metrics:
    """prometheus-client's ASGI app for ``registry``. A class, because Starlette routes to an
    object as an ASGI app but would call a plain function as a request handler."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._app = make_asgi_app(registry)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)


def _check_endpoint(check: Check, what: str) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        # Checks are cheap reads of in-memory state, so they run on the loop, not in a thread.
        try:
            reason = check()
        except Exception as exc:
            # A check that cannot tell is a failed check: the probe should see it.
            logger.warning("health server: %s check raised", what, exc_info=True)
            reason = f"{what} check raised {type(exc).__name__}"
        headers = {"Cache-Control": "no-store"}
        if reason is None:
            return PlainTextResponse("ok\n", headers=headers)
        # Probe endpoints are often reachable from outside; a reason quoting an error must
        # not hand out the DSN it failed to connect with.
        text = redact(reason.rstrip("\n") or "unavailable")
        return PlainTextResponse(text + "\n", status_code=503, headers=headers)

    return endpoint


def health_app(registry: CollectorRegistry, *, healthy: Check, ready: Check) -> Starlette:
    """``GET``/``HEAD`` ``/metrics`` (``registry``), ``/healthz`` (``healthy``), ``/readyz`` (``ready``).

    A check returns None when all is well, else the reason: 200 ``ok`` or 503 with the reason
    (redacted). Other paths are 404, other methods 405.
    """
    return Starlette(
        routes=[
            Route("/metrics", _Metrics(registry), methods=["GET"]),
            Route("/healthz", _check_endpoint(healthy, "health"), methods=["GET"]),
            Route("/readyz", _check_endpoint(ready, "readiness"), methods=["GET"]),
        ]
    )


_EXAMPLE = "expected HOST:PORT, :PORT or [IPV6]:PORT, e.g. 127.0.0.1:9464"
_HOST = re.compile(r"[A-Za-z0-9.-]+")


def parse_address(text: str) -> tuple[str, int]:
    """``"host:port"``, ``":port"`` (all IPv4 interfaces) or ``"[v6addr]:port"`` as (host, port).

    Raises ValueError with a message that says what is wrong and what is expected.
    """
    value = text.strip()
    host, sep, port_text = value.rpartition(":")
    if value.startswith("[") and "]" not in value:
        raise ValueError(f"{text!r} has no closing ']' after the IPv6 address: {_EXAMPLE}")
    if not sep:
        raise ValueError(f"{text!r} has no port: {_EXAMPLE}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if not host:
            raise ValueError(f"{text!r} has an empty IPv6 address: {_EXAMPLE}")
    elif ":" in host:
        raise ValueError(f"{text!r}: an IPv6 address goes in brackets, e.g. [::1]:9464")
    elif not host:
        host = "0.0.0.0"
    elif not _HOST.fullmatch(host):
        raise ValueError(f"{text!r} is not a host name or address: {_EXAMPLE}")
    if not port_text.isdigit():
        raise ValueError(f"{text!r} has no port number after the ':': {_EXAMPLE}")
    if int(port_text) > 65535:
        raise ValueError(f"port {port_text} in {text!r} is out of range: ports go from 0 to 65535")
    return host, int(port_text)
