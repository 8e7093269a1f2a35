"""What the long-running commands (harness-worker, harness-supervisor) share: their common
options, listening for ``--metrics-addr``, loading configuration objects by import path,
opening a store, and signal handling."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import importlib
import logging
import os
import signal
import socket
import traceback
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import click
from click.core import ParameterSource

from harnessx._errors import ConfigurationError
from harnessx._logging import configure_logging
from harnessx._redaction import redact
from harnessx.store._factory import store_for
from harnessx.store._protocol import Store

__all__ = [
    "install_signal_handlers",
    "listen_for_metrics",
    "load_object",
    "log_options",
    "metrics_option",
    "open_store",
    "run_event_loop",
    "serving_message",
    "start_logging",
    "store_options",
    "waiting_notice",
]

F = TypeVar("F", bound=Callable[..., Any])

logger = logging.getLogger("harnessx.process")

CONNECT_TIMEOUT = 10.0  # PostgresBackend's default too
_CONNECT_TIMEOUT = "harnessx.connect_timeout"


def store_options(fn: F) -> F:
    """``--dsn`` / ``--sqlite`` / ``--schema``, shared by every command that opens a store.

    A flag on the command line beats a variable in the environment: ``--sqlite PATH`` with
    ``HARNESSX_DSN`` set opens the SQLite file. ``--dsn`` and ``--sqlite`` together are refused.
    """

    @functools.wraps(fn)
    def chosen(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        kwargs["dsn"] = _chosen_dsn(ctx, kwargs.get("dsn"))
        # Read by open_store, so that no command needs a parameter it only passes on.
        ctx.meta[_CONNECT_TIMEOUT] = kwargs.pop("connect_timeout")
        return fn(*args, **kwargs)

    command: Any = chosen
    command = click.option(
        "--connect-timeout",
        envvar="HARNESSX_CONNECT_TIMEOUT",
        default=CONNECT_TIMEOUT,
        show_default=True,
        type=click.FloatRange(min=0, min_open=True),
        help="Seconds to wait for PostgreSQL to accept a connection, all attempts together "
        "[env HARNESSX_CONNECT_TIMEOUT].",
    )(command)
    command = click.option(
        "--schema",
        envvar="HARNESSX_SCHEMA",
        default="harness_x",
        help="PostgreSQL schema [env HARNESSX_SCHEMA].",
    )(command)
    command = click.option(
        "--sqlite",
        "sqlite_path",
        envvar="HARNESSX_SQLITE",
        default=".agent_sessions/runtime.sqlite3",
        help="SQLite database when no DSN is given [env HARNESSX_SQLITE].",
    )(command)
    command = click.option(
        "--dsn",
        envvar="HARNESSX_DSN",
        help="The store's DSN: postgresql://... or sqlite:///PATH [env HARNESSX_DSN, which keeps its "
        "password out of the process list]; without it, SQLite at --sqlite.",
    )(command)
    return cast(F, command)


def _chosen_dsn(ctx: click.Context, dsn: str | None) -> str | None:
    """The DSN to use, or None for SQLite: a flag given on the command line wins."""
    on_command_line = {
        name: ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE for name in ("dsn", "sqlite_path")
    }
    if on_command_line["dsn"] and on_command_line["sqlite_path"]:
        raise click.UsageError("give --dsn (PostgreSQL) or --sqlite (SQLite), not both")
    if on_command_line["sqlite_path"]:
        return None
    return dsn or None


def _listen_address(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, int] | None:
    """``HOST:PORT``, ``:PORT``, ``[IPV6]:PORT`` as ``(host, port)``, or ``off`` as None."""
    # Imported here: the HTTP stack (Starlette, uvicorn) is for the services, and the
    # ``harnessx`` command, which shares these options' module, should not pay for loading it.
    from harnessx._health import parse_address

    if value.strip().lower() == "off":
        return None
    try:
        return parse_address(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def metrics_option(*, default: str) -> Callable[[F], F]:
    """``--metrics-addr`` for ``/metrics``, ``/healthz`` and ``/readyz``; each command has its port."""
    return click.option(
        "--metrics-addr",
        envvar="HARNESSX_METRICS_ADDR",
        default=default,
        callback=_listen_address,
        help="host:port for /metrics, /healthz, /readyz (port 0: any free one); 'off' to disable "
        "[env HARNESSX_METRICS_ADDR].",
    )


def listen_for_metrics(address: tuple[str, int] | None) -> list[socket.socket] | None:
    """Listening sockets for ``--metrics-addr`` (None when it is ``off``), bound before anything
    else starts; a clash or a bad address is a one-line error saying what to pass instead."""
    from harnessx._http_server import ListenError, listen  # see _listen_address

    if address is None:
        return None
    host, port = address
    try:
        return listen(host, port)
    except ListenError as exc:
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            raise click.ClickException(
                f"--metrics-addr {shown} is already in use (another harness-worker or harness-supervisor "
                f"on this host?): give this one its own port, e.g. --metrics-addr {_any_port(host)} for a "
                "free one, or pass --metrics-addr off"
            ) from None
        raise click.ClickException(
            f"--metrics-addr {shown}: cannot listen there ({exc.strerror}): pass an address of this host "
            "and a port you may use (above 1023 unless privileged), or --metrics-addr off"
        ) from None


def _any_port(host: str) -> str:
    return f"[{host}]:0" if ":" in host else f"{host}:0"


def log_options(fn: F) -> F:
    """``--log-format`` and ``--log-level`` of the long-running commands."""
    fn = click.option(
        "--log-level", envvar="HARNESSX_LOG_LEVEL", default="INFO", help="[env HARNESSX_LOG_LEVEL]"
    )(fn)
    return click.option(
        "--log-format",
        envvar="HARNESSX_LOG_FORMAT",
        default="json",
        type=click.Choice(["json", "text"]),
        help="[env HARNESSX_LOG_FORMAT]",
    )(fn)


def start_logging(log_format: str, log_level: str) -> None:
    """Logging (and with it redaction) for a long-running command, set up before anything that
    can fail; a bad level is a usage error."""
    try:
        configure_logging("json" if log_format == "json" else "text", log_level)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--log-level'") from None


def serving_message(sockets: list[socket.socket]) -> str:
    """What a command logs once its endpoints answer, naming the bound addresses."""
    shown = []
    for sock in sockets:
        host, port = sock.getsockname()[:2]
        shown.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return f"serving /metrics, /healthz, /readyz on {', '.join(shown)}"


def load_object(path: str, what: str) -> Any:
    """Import ``module:attribute``; errors say what was expected.

    Anything the module raises while it is imported becomes a one-line, redacted
    ConfigurationError (the original stays as its ``__cause__``, traceback and all).
    """
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"{what} must be given as module:attribute, got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise ConfigurationError(
                f"cannot import {module_name!r} for {what}: there is no module {exc.name!r} on the path "
                "(run from the folder that holds it, or add that folder to PYTHONPATH)"
            ) from exc
        raise ConfigurationError(_import_failed(module_name, what, exc)) from exc
    except Exception as exc:
        # A module's own error (a SyntaxError, a missing setting...) is the user's to fix: it
        # must read as one line that may quote a secret from the module, so it is redacted.
        raise ConfigurationError(_import_failed(module_name, what, exc)) from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigurationError(f"module {module_name!r} has no attribute {attribute!r} ({what})") from None


def _import_failed(module_name: str, what: str, exc: BaseException) -> str:
    detail = " ".join(str(exc).split()) or "(no message)"
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    if frames and not isinstance(exc, SyntaxError):  # a SyntaxError names its own line
        where = f" at {frames[-1].filename}:{frames[-1].lineno}"
    text = f"importing {module_name!r} for {what} failed{where}: {type(exc).__name__}: {detail}"
    return redact(text)


def open_store(
    *,
    dsn: str | None,
    sqlite_path: str,
    schema: str,
    lease_seconds: float = 30.0,
    auto_migrate: bool,
    read_only: bool = False,
) -> Store:
    """The store a command's options name (not yet opened): the one factory, ``store_for``,
    given ``--dsn`` (a ``postgresql://`` or ``sqlite:///`` DSN) or else ``--sqlite``.

    ``read_only``: for inspecting; it creates nothing (a missing SQLite file is an error) and
    reads even from a read-only file system. The connect timeout is the command's
    ``--connect-timeout``."""
    ctx = click.get_current_context(silent=True)
    return store_for(
        dsn or sqlite_path,
        schema=schema,
        lease_seconds=lease_seconds,
        auto_migrate=auto_migrate,
        read_only=read_only,
        connect_timeout=ctx.meta.get(_CONNECT_TIMEOUT, CONNECT_TIMEOUT) if ctx else CONNECT_TIMEOUT,
    )


@contextlib.contextmanager
def waiting_notice(store: Store, echo: Callable[[str], None], after: float = 1.0) -> Iterator[None]:
    """Say what the command is waiting for when opening ``store`` takes longer than ``after``."""

    def say() -> None:
        timeout = getattr(store, "connect_timeout", None)
        if timeout is not None:
            where = getattr(store, "redacted_dsn", "PostgreSQL")
            echo(f"waiting for PostgreSQL at {where} to answer (for up to {timeout:g} s: --connect-timeout)")
        else:
            echo(f"waiting for {store!r} (another process holds a lock on it?)")

    handle = asyncio.get_running_loop().call_later(after, say)
    try:
        yield
    finally:
        handle.cancel()


def install_signal_handlers(on_first: Callable[[], None]) -> None:
    """SIGTERM/SIGINT once: ``on_first`` (a graceful stop). Twice: exit at once.

    Only in the main thread's running loop; the exit skips cleanup on purpose, since the
    operator asked twice (leases then expire or the supervisor releases them).
    """
    loop = asyncio.get_running_loop()
    received = 0

    def handle(signum: int) -> None:
        nonlocal received
        received += 1
        if received == 1:
            logger.info(
                "received %s: stopping gracefully (send it again to exit now)", signal.Signals(signum).name
            )
            on_first()
        else:
            logger.warning("received %s again: exiting now", signal.Signals(signum).name)
            os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, handle, signum)


def run_event_loop(main: Any) -> Any:
    """Run ``main`` on uvloop when it is installed (the default), else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.run(main)
    return uvloop.run(main)
