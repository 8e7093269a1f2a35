"""The sd_notify side of the Type=notify units, with the real commands under a stub
``NOTIFY_SOCKET``: the worker says READY=1 only once it is registered, WATCHDOG=1 on every
heartbeat, STOPPING=1 on SIGTERM, and exits 0 after draining; the supervisor says READY=1
and STOPPING=1 and sends no watchdog keep-alives (so its unit must not set WatchdogSec=)."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from deploy_support import BIN

pytestmark = pytest.mark.process

ROOT = (
    Path(__file__).resolve().parent.parent.parent
)  # the checkout, where the workers import chaos.agents from


@pytest.fixture
def notify_socket() -> Iterator[tuple[socket.socket, str]]:
    # AF_UNIX paths are limited to 107 bytes: pytest's tmp_path can be longer.
    folder = tempfile.mkdtemp(prefix="hx-notify-", dir="/tmp")
    path = os.path.join(folder, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.2)
    try:
        yield sock, path
    finally:
        sock.close()
        os.unlink(path)
        os.rmdir(folder)


def migrate(db: Path) -> None:
    subprocess.run([str(BIN / "harnessx"), "migrate", "--sqlite", str(db)], check=True, capture_output=True)


def spawn(command: list[str], notify_path: str, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "NOTIFY_SOCKET": notify_path,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HARNESSX_LOG_FORMAT": "json",
    }
    env.pop("WATCHDOG_USEC", None)
    env.pop("WATCHDOG_PID", None)
    with open(log, "wb") as handle:
        return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env)


def receive(
    sock: socket.socket,
    messages: list[str],
    done: Callable[[list[str]], bool],
    process: subprocess.Popen[bytes],
    within: float,
) -> None:
    """Append datagrams to ``messages`` until ``done(messages)``."""
    deadline = time.monotonic() + within
    while not done(messages):
        assert time.monotonic() < deadline, f"timed out after {within} s; got {messages}"
        try:
            messages.append(sock.recv(4096).decode())
        except TimeoutError:
            assert process.poll() is None, f"process exited with {process.returncode}: {messages}"


def count(messages: list[str], line: str) -> int:
    return sum(line in message.splitlines() for message in messages)


def registered_workers(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM workers WHERE stopped_at IS NULL").fetchone()[0])


def leader_scans(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT scans FROM leadership WHERE role = 'supervisor'").fetchone()
    return int(row[0]) if row is not None else 0


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=30)


def test_worker_notifies_ready_watchdog_and_stopping(
    notify_socket: tuple[socket.socket, str], tmp_path: Path
) -> None:
    sock, path = notify_socket
    db = tmp_path / "runtime.sqlite3"
    migrate(db)
    log = tmp_path / "worker.log"
    worker = spawn(
        [
            str(BIN / "harness-worker"),
            "--sqlite", str(db),
            "--agents", "chaos.agents:registry",
            # Heartbeat (and so WATCHDOG=1) every 0.2 s instead of every 10 s.
            "--lease-seconds", "0.6",
            "--metrics-addr", "off",
        ],
        path,
        log,
    )  # fmt: skip
    try:
        messages: list[str] = []
        receive(sock, messages, lambda got: count(got, "READY=1") > 0, worker, within=30)
        # READY=1 only after the worker row exists (systemd then counts the unit as started).
        assert registered_workers(db) == 1
        assert messages[-1].splitlines()[0] == "READY=1"
        assert messages[-1].splitlines()[1].startswith("STATUS=worker ")
        assert count(messages, "WATCHDOG=1") == 0, f"WATCHDOG=1 before READY=1: {messages}"
        receive(sock, messages, lambda got: count(got, "WATCHDOG=1") >= 3, worker, within=10)
        assert count(messages, "STOPPING=1") == 0
        worker.send_signal(signal.SIGTERM)
        receive(sock, messages, lambda got: count(got, "STOPPING=1") == 1, worker, within=10)
        assert worker.wait(timeout=30) == 0, log.read_text()
        assert registered_workers(db) == 0  # the drained worker deregistered itself
    finally:
        stop(worker)


def test_supervisor_notifies_ready_and_stopping_without_watchdog(
    notify_socket: tuple[socket.socket, str], tmp_path: Path
) -> None:
    sock, path = notify_socket
    db = tmp_path / "runtime.sqlite3"
    migrate(db)
    log = tmp_path / "supervisor.log"
    supervisor = spawn(
        [str(BIN / "harness-supervisor"), "--sqlite", str(db), "--metrics-addr", "off"], path, log
    )
    try:
        messages: list[str] = []
        receive(sock, messages, lambda got: count(got, "READY=1") > 0, supervisor, within=30)
        # Ten scans (as the leader records them on its row, once a second), so that a
        # WATCHDOG=1 would have been sent by now.
        deadline = time.monotonic() + 30
        while leader_scans(db) < 10:
            assert time.monotonic() < deadline, f"the supervisor did not scan ten times: {log.read_text()}"
            assert supervisor.poll() is None, log.read_text()
            time.sleep(0.05)
        supervisor.send_signal(signal.SIGTERM)
        receive(sock, messages, lambda got: count(got, "STOPPING=1") == 1, supervisor, within=10)
        assert supervisor.wait(timeout=30) == 0, log.read_text()
        assert count(messages, "WATCHDOG=1") == 0, messages
    finally:
        stop(supervisor)
