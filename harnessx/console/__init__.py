"""The operator console: every run, its tool calls and events, workers, queue and supervisor,
and the decisions a person makes (approve, decline, resolve an uncertain call, cancel, pause,
resume), in a browser and over a JSON API with live events (Server-Sent Events).

``create_app(store, tokens=Tokens.from_environment())`` is an ASGI application to serve with
``harnessx console`` or to mount in an existing one. See ``docs/console.md``.
"""

from __future__ import annotations

from harnessx.console._app import create_app
from harnessx.console._auth import Identity, Tokens, generate_token

__all__ = ["Identity", "Tokens", "create_app", "generate_token"]
