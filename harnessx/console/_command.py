"""``harnessx console``: serve the operator console from the command line."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from typing import Any

import click

from harnessx._errors import ConfigurationError, HarnessError
from harnessx._health import parse_address
from harnessx._http_server import ConnectionLimits, HttpServer, ListenError, listen
from harnessx._operator import default_actor
from harnessx._processes import (
    install_signal_handlers,
    log_options,
    open_store,
    run_event_loop,
    start_logging,
    store_options,
)
from harnessx._systemd import SystemdNotifier
from harnessx.store._protocol import Store

__all__ = ["console"]

logger = logging.getLogger("harnessx.console")

# Event streams last minutes: more connections than a probe server, each response bounded by
# its own deadline (a stream extends its own).
LIMITS = ConnectionLimits(head_timeout=10.0, response_timeout=30.0, max_connections=512, stop_grace=1.0)


def _bind(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, int]:
    try:
        return parse_address(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command()
@click.option(
    "--bind",
    envvar="HARNESSX_CONSOLE_BIND",
    default="127.0.0.1:8080",
    show_default=True,
    callback=_bind,
    help="host:port to serve on [env HARNESSX_CONSOLE_BIND].",
)
@click.option(
    "--tokens-file",
    envvar="HARNESSX_CONSOLE_TOKENS_FILE",
    type=click.Path(dir_okay=False),
    help="File of NAME:ROLE:TOKEN lines (e.g. a mounted Secret), read again when it changes "
    "[env HARNESSX_CONSOLE_TOKENS_FILE]; tokens may also come from HARNESSX_CONSOLE_TOKENS.",
)
@click.option(
    "--insecure-no-auth",
    is_flag=True,
    help="Serve without sign-in, everyone an operator: only on a loopback address.",
)
@click.option(
    "--secure-cookies",
    is_flag=True,
    envvar="HARNESSX_CONSOLE_SECURE_COOKIES",
    help="Mark cookies Secure though requests arrive over HTTP (TLS ends at a proxy in front).",
)
@log_options
@store_options
def console(
    bind: tuple[str, int],
    tokens_file: str | None,
    insecure_no_auth: bool,
    secure_cookies: bool,
    log_format: str,
    log_level: str,
    sqlite_path: str,
    dsn: str | None,
    schema: str,
) -> None:
    """Serve the operator console (pages, JSON API, live events) over the store."""
    from harnessx.console import Tokens, create_app

    start_logging(log_format, log_level)
    host, port = bind
    try:
        tokens = Tokens.from_environment(tokens_file)
    except ConfigurationError as exc:
        raise click.ClickException(str(exc)) from None
    if tokens is None and not insecure_no_auth:
        raise click.UsageError(
            "the console needs tokens: set HARNESSX_CONSOLE_TOKENS or --tokens-file to lines NAME:ROLE:TOKEN "
            "(ROLE viewer or operator; make a token with python3 -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'), or pass --insecure-no-auth with a loopback --bind"
        )
    if tokens is not None and insecure_no_auth:
        raise click.UsageError(
            "--insecure-no-auth is for a console without tokens: leave it out, or the tokens"
        )
    if insecure_no_auth and not _loopback(host):
        raise click.UsageError(
            f"--insecure-no-auth serves only on a loopback address, not {host}: --bind 127.0.0.1:{port}, "
            "or give the console tokens"
        )
    try:
        sockets = listen(host, port)
    except ListenError as exc:
        raise click.ClickException(
            f"--bind {host}:{port}: {exc.strerror}: pick another address or port"
        ) from None
    store = open_store(dsn=dsn, sqlite_path=sqlite_path, schema=schema, auto_migrate=False)
    app = create_app(
        store,
        tokens=tokens,
        insecure_no_auth=insecure_no_auth,
        local_name=f"{default_actor()} (no auth)",
        secure_cookies=secure_cookies,
    )
    try:
        run_event_loop(_serve(app, store, sockets))
    except HarnessError as exc:
        raise click.ClickException(str(exc)) from None


async def _serve(app: Any, store: Store, sockets: list[socket.socket]) -> None:
    await store.initialize()
    stop = asyncio.Event()
    notifier = SystemdNotifier()

    def stopping() -> None:
        notifier.stopping()
        stop.set()

    install_signal_handlers(stopping)
    server = HttpServer(app, sockets, limits=LIMITS)
    try:
        await server.start()
        shown = ", ".join(_shown(sock) for sock in sockets)
        logger.info("serving the operator console on %s over %r", shown, store)
        notifier.ready(f"serving the console on {shown}")
        await stop.wait()
    finally:
        await server.stop()
        await store.aclose()


def _shown(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
