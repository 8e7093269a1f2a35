"""harnessx._logging: JSON and text log lines, bound context, secrets redacted."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import pytest

from harnessx._logging import Redactor, bind_log_context, configure_logging, log_context


@pytest.fixture(autouse=True)
def restore_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    uvicorn_level = logging.getLogger("uvicorn.error").level
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    logging.getLogger("uvicorn.error").setLevel(uvicorn_level)


log = logging.getLogger("harnessx.test_logging")


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
        "logger": "harnessx.test_logging",
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
        'WARNING harnessx.test_logging: lease lost worker_id=w-1 session_id=s-1 reason="two words"'
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


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_an_uncaught_exception_is_logged_redacted(
    capsys: pytest.CaptureFixture[str], fmt: Literal["json", "text"]
) -> None:
    configure_logging(fmt)
    try:
        raise RuntimeError("cannot reach postgresql://app:Sup3r/Secret@db/x")
    except RuntimeError as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    err = capsys.readouterr().err
    assert "Sup3r" not in err and "Secret@" not in err
    assert "RuntimeError: cannot reach postgresql://app:***@db/x" in err
    if fmt == "json":
        [line] = [json.loads(text) for text in err.splitlines()]
        assert line["level"] == "CRITICAL"
        assert str(line["error"]).startswith("Traceback")


@pytest.mark.parametrize(("level", "uvicorn_level"), [("INFO", logging.ERROR), ("DEBUG", logging.DEBUG)])
def test_uvicorns_chatter_is_kept_for_debugging(level: str, uvicorn_level: int) -> None:
    configure_logging("json", level)
    assert logging.getLogger("uvicorn.error").level == uvicorn_level


def test_a_password_with_a_slash_is_redacted_in_log_lines(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json")
    log.warning(
        "connecting to %s", "postgresql://u:Sup3r/Secret@h/db", extra={"dsn": "postgresql://u:p@ss@h"}
    )
    [line] = json_lines(capsys)
    assert line["message"] == "connecting to postgresql://u:***@h/db"
    assert line["dsn"] == "postgresql://u:***@h"
