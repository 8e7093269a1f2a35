"""Logging for the long-running processes: JSON or text lines on stderr, carrying run context
bound with ``log_context`` / ``bind_log_context``, with secrets scrubbed by ``Redactor``."""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from types import MappingProxyType, TracebackType
from typing import Literal, TextIO

from harnessx._redaction import redact, redact_value

__all__ = ["Redactor", "bind_log_context", "configure_logging", "log_context"]

# Shown first and in this order; any other bound or extra field follows.
_KNOWN_FIELDS = ("worker_id", "session_id", "run_id", "generation", "execution_key")
# Keys of the line itself, which a field must not overwrite.
_LINE_KEYS = frozenset({"ts", "level", "logger", "message", "error"})
# Attributes every LogRecord has; anything else on a record came from ``extra=`` or the context.
_RECORD_ATTRS = frozenset(
    {*vars(logging.LogRecord("", 0, "", 0, "", None, None)), "message", "asctime", "taskName"}
)

_NO_FIELDS: Mapping[str, object] = MappingProxyType({})
_context: contextvars.ContextVar[Mapping[str, object]] = contextvars.ContextVar(
    "harnessx_log_context", default=_NO_FIELDS
)


def _merged(fields: Mapping[str, object]) -> Mapping[str, object]:
    """The current context with ``fields`` applied; a None value unbinds the field."""
    merged = {**_context.get(), **fields}
    return MappingProxyType({key: value for key, value in merged.items() if value is not None})


@contextlib.contextmanager
def log_context(**fields: object) -> Iterator[None]:
    """Adds ``fields`` to every log line of the current context until the block exits.

    Tasks created inside the block copy the context, so their lines carry the fields too.
    """
    token = _context.set(_merged(fields))
    try:
        yield
    finally:
        _context.reset(token)


def bind_log_context(**fields: object) -> None:
    """Adds ``fields`` for the rest of the current context (e.g. for the rest of a task)."""
    _context.set(_merged(fields))


class Redactor(logging.Filter):
    """Scrubs secrets from a record's message, traceback and extra fields, in place.

    Install it on handlers (a logger's own filters skip records propagated from children).
    It never rejects a record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            # Bad %-arguments: leave the record as it is so the handler reports the mistake.
            return True
        record.msg, record.args = redact(message), None
        if _exception_text(record):
            record.exc_text = redact(record.exc_text or "")
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        for key, value in _fields(record).items():
            setattr(record, key, redact_value(key, value))
        return True


class _ContextFilter(logging.Filter):
    """Copies static and context-bound fields onto the record while still in the caller's context.

    A field passed with ``extra=`` wins over a bound one of the same name.
    """

    def __init__(self, static: Mapping[str, str]) -> None:
        super().__init__()
        self.static = dict(static)

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in {**self.static, **_context.get()}.items():
            if key not in _RECORD_ATTRS and not hasattr(record, key):
                setattr(record, key, value)
        return True


def _fields(record: logging.LogRecord) -> dict[str, object]:
    """The record's non-standard attributes, known context fields first."""
    extra = {key: value for key, value in vars(record).items() if key not in _RECORD_ATTRS}
    ordered = {key: extra.pop(key) for key in _KNOWN_FIELDS if key in extra}
    ordered.update((key, value) for key, value in extra.items() if not key.startswith("_"))
    return ordered


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _exception_text(record: logging.LogRecord) -> str | None:
    """The record's traceback as text, rendered once and cached where logging caches it."""
    if record.exc_info and not record.exc_text:
        record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
    return record.exc_text


def _error_text(record: logging.LogRecord) -> str | None:
    parts = [part for part in (_exception_text(record), record.stack_info) if part]
    return "\n".join(parts) or None


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _fields(record).items():
            line[f"field_{key}" if key in _LINE_KEYS else key] = value
        error = _error_text(record)
        if error:
            line["error"] = error
        return json.dumps(line, ensure_ascii=False, default=str)


_PLAIN_VALUE = re.compile(r"[^\s\"'=\\]+")


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = f"{_timestamp(record)} {record.levelname:<7} {record.name}: {record.getMessage()}"
        for key, value in _fields(record).items():
            shown = str(value)
            # Quote what would otherwise break the key=value reading of the line.
            if not _PLAIN_VALUE.fullmatch(shown):
                shown = json.dumps(shown, ensure_ascii=False)
            text += f" {key}={shown}"
        error = _error_text(record)
        # The traceback goes on the following lines, as a human reader expects it.
        return f"{text}\n{error}" if error else text


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is at the time, so redirections made later still apply."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass  # StreamHandler assigns it; the live sys.stderr is used instead


def configure_logging(
    fmt: Literal["json", "text"],
    level: str = "INFO",
    *,
    static: dict[str, str] | None = None,
) -> None:
    """Sends the root logger's output to stderr as JSON or text lines, secrets redacted.

    ``static`` fields (say ``worker_id``) go on every line. Calling it again replaces the
    handler it installed before; handlers installed by anyone else are left alone. An
    exception nobody catches is logged through the same handler (redacted, in the same
    format) instead of Python's bare traceback on stderr.
    """
    formatters: dict[str, Callable[[], logging.Formatter]] = {"json": _JsonFormatter, "text": _TextFormatter}
    if fmt not in formatters:
        raise ValueError(f"log format must be 'json' or 'text', not {fmt!r}")
    levels = logging.getLevelNamesMapping()
    if level.upper() not in levels:
        raise ValueError(f"unknown log level {level!r}: expected one of {', '.join(sorted(levels))}")
    handler = _StderrHandler()
    handler.setFormatter(formatters[fmt]())
    # Context first, so the fields it adds are redacted as well.
    handler.addFilter(_ContextFilter(static or {}))
    handler.addFilter(Redactor())
    root = logging.getLogger()
    for previous in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(previous)
    root.addHandler(handler)
    root.setLevel(levels[level.upper()])
    # uvicorn's informational and warning lines describe a standalone server ("Started server
    # process", "Waiting for connections to close. (CTRL+C to force quit)") or a malformed
    # request, which anyone who can connect may send at will; unless debugging, only its
    # errors (an exception in the application) are kept.
    logging.getLogger("uvicorn.error").setLevel(
        logging.DEBUG if root.level <= logging.DEBUG else logging.ERROR
    )
    sys.excepthook = _log_uncaught


def _log_uncaught(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, value, tb)
        return
    logging.getLogger("harnessx").critical(
        "unexpected error: %s: %s", kind.__name__, value, exc_info=(kind, value, tb)
    )
