"""What the ``harnessx`` commands share: running a command's work, opening its store, times."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

import click

from harnessx._errors import HarnessError
from harnessx._processes import open_store, waiting_notice
from harnessx.store._protocol import Store

__all__ = ["format_time", "opened_store", "run_command", "to_stderr"]

T = TypeVar("T")


def run_command(work: Awaitable[T]) -> T:
    """Run a command's work; a harnessx error or an OS error is a one-line message, exit 1."""
    try:
        return asyncio.run(work)  # type: ignore[arg-type]
    except HarnessError as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:  # a folder it may not read, a read-only file system...
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc


def opened_store(
    sqlite_path: str, dsn: str | None, schema: str, *, auto_migrate: bool = True, read_only: bool = False
) -> contextlib.AbstractAsyncContextManager[Store]:
    """The store a command names, opened; a slow PostgreSQL server is reported as it waits."""
    return _opened(
        open_store(
            dsn=dsn, sqlite_path=sqlite_path, schema=schema, auto_migrate=auto_migrate, read_only=read_only
        )
    )


@contextlib.asynccontextmanager
async def _opened(store: Store) -> AsyncIterator[Store]:
    with waiting_notice(store, to_stderr):
        await store.initialize()
    try:
        yield store
    finally:
        await store.aclose()


def to_stderr(text: str) -> None:
    click.echo(text, err=True)


def format_time(epoch: float | None) -> str:
    """A time as the commands print it: UTC to the second, ``-`` for none."""
    if epoch is None:
        return "-"
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
