"""The console as an ASGI application (Starlette): its routes, and what opens its store."""

from __future__ import annotations

import asyncio
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from harnessx._errors import ConfigurationError, HarnessError
from harnessx._redaction import redact
from harnessx.console import _api, _pages
from harnessx.console._auth import Keys, Tokens
from harnessx.console._state import ConsoleState
from harnessx.console._stream import events
from harnessx.console._web import base, guarded
from harnessx.store._protocol import Store

__all__ = ["create_app"]


def _routes() -> list[Any]:
    def view(handler: Any, write: bool = False) -> Any:
        return guarded(handler, api=False, write=write)

    def api(handler: Any, write: bool = False) -> Any:
        return guarded(handler, api=True, write=write)

    static = Path(str(resources.files("harnessx.console").joinpath("static")))
    return [
        Route("/", _home),
        Route("/healthz", _healthz, methods=["GET"]),
        Route("/readyz", _readyz, methods=["GET"]),
        Route("/login", _pages.login_form, methods=["GET"]),
        Route("/login", _pages.login, methods=["POST"]),
        Route("/logout", view(_pages.logout, write=True), methods=["POST"]),
        Route("/runs", view(_pages.runs_page)),
        Route("/runs/{run_id}", view(_pages.run_page)),
        Route("/runs/{run_id}/decide", view(_pages.decide_form, write=True), methods=["POST"]),
        Route("/runs/{run_id}/resolve", view(_pages.resolve_form, write=True), methods=["POST"]),
        Route("/sessions/{session_id}/{verb}", view(_pages.control_form, write=True), methods=["POST"]),
        Route("/workers", view(_pages.workers_page)),
        Route("/queue", view(_pages.queue_page)),
        Route("/supervisor", view(_pages.supervisor_page)),
        Route("/audit", view(_pages.audit_page)),
        Route("/api/whoami", api(_api.api_whoami)),
        Route("/api/runs", api(_api.api_runs)),
        Route("/api/runs/counts", api(_api.api_counts)),
        Route("/api/runs/{run_id}", api(_api.api_run)),
        Route("/api/runs/{run_id}/events", api(events)),
        Route("/api/runs/{run_id}/approve", api(_api.api_approve, write=True), methods=["POST"]),
        Route("/api/runs/{run_id}/resolve", api(_api.api_resolve, write=True), methods=["POST"]),
        Route("/api/sessions/{session_id}/{verb}", api(_api.api_control, write=True), methods=["POST"]),
        Route("/api/workers", api(_api.api_workers)),
        Route("/api/queue", api(_api.api_queue)),
        Route("/api/supervisor", api(_api.api_supervisor)),
        Route("/api/actions", api(_api.api_actions)),
        Mount("/static", StaticFiles(directory=static), name="static"),
    ]


async def _healthz(request: Request) -> Response:
    return PlainTextResponse("ok\n", headers={"Cache-Control": "no-store"})


async def _readyz(request: Request) -> Response:
    """Ready while the store answers (a small read); the reason, redacted, otherwise."""
    try:
        await request.app.state.console.store.leader_states()
    except HarnessError as exc:
        return PlainTextResponse(redact(f"the store does not answer: {exc}") + "\n", status_code=503)
    return PlainTextResponse("ok\n", headers={"Cache-Control": "no-store"})


async def _home(request: Request) -> Response:
    return RedirectResponse(f"{base(request)}/runs", status_code=303)


class _Opening:
    """Opens the store on the first request: a mounted application gets no lifespan events."""

    def __init__(self, app: Starlette, store: Store) -> None:
        self.app = app
        self.store = store
        self.state = app.state
        self._opened = False
        self._lock = asyncio.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._opened and scope["type"] == "http":
            async with self._lock:
                if not self._opened:
                    await self.store.initialize()
                    self._opened = True
        await self.app(scope, receive, send)


def create_app(
    store: Store,
    *,
    tokens: Tokens | None,
    insecure_no_auth: bool = False,
    local_name: str = "local",
    secure_cookies: bool = False,
    **settings: Any,
) -> Any:
    """The operator console over ``store`` as an ASGI application.

    ``tokens``: who may sign in (``Tokens.from_environment()``); without them the console
    serves only with ``insecure_no_auth=True``, every request then acting as the operator
    ``local_name``, and answers only requests addressed to localhost. ``secure_cookies``:
    mark cookies ``Secure`` even when the request arrives over plain HTTP (behind a proxy
    that ends TLS). Mount it anywhere (``Mount("/ops", app=create_app(...))``); it opens
    ``store`` on its first request.
    """
    if tokens is None and not insecure_no_auth:
        raise ConfigurationError(
            "the console serves nothing without auth: set HARNESSX_CONSOLE_TOKENS (or a tokens file) with "
            "lines NAME:ROLE:TOKEN, or pass insecure_no_auth=True (--insecure-no-auth) on a loopback address"
        )
    app = Starlette(routes=_routes())
    app.state.console = ConsoleState(
        store=store,
        tokens=tokens,
        keys=Keys.for_console(tokens),
        local_name=local_name,
        secure_cookies=secure_cookies,
        **settings,
    )
    return _Opening(app, store)
