"""The operator console served for tests: a real server on a loopback port, real tokens."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from harnessx._http_server import HttpServer, listen
from harnessx.console import Tokens, create_app
from harnessx.console._command import LIMITS

__all__ = ["OPERATOR", "VIEWER", "Served", "TOKENS", "serve_console", "sign_in"]

OPERATOR = "operator-token-" + "o" * 24
VIEWER = "viewer-token-" + "v" * 24
TOKENS = f"alice:operator:{OPERATOR}\nvic:viewer:{VIEWER}\n"


@dataclass
class Served:
    url: str
    server: HttpServer
    app: Any


@contextlib.asynccontextmanager
async def serve_console(store: Any, *, tokens: str | None = TOKENS, **settings: Any) -> AsyncIterator[Served]:
    app = create_app(
        store, tokens=Tokens(tokens) if tokens else None, insecure_no_auth=tokens is None, **settings
    )
    sockets = listen("127.0.0.1", 0)
    server = HttpServer(app, sockets, limits=LIMITS)
    await server.start()
    try:
        yield Served(f"http://127.0.0.1:{server.port}", server, app)
    finally:
        await server.stop()


def hidden(html: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert found, f"no hidden field {name}"
    return found.group(1)


async def sign_in(client: httpx.AsyncClient, token: str) -> str:
    """Sign in through the form; the CSRF token the pages then carry."""
    form = await client.get("/login")
    nonce = hidden(form.text, "nonce")
    done = await client.post("/login", data={"nonce": nonce, "token": token, "next": "/runs"})
    assert done.status_code == 303, done.text
    page = await client.get("/runs")
    assert page.status_code == 200
    return re.search(r'name="csrf-token" content="([^"]*)"', page.text).group(1)  # type: ignore[union-attr]
