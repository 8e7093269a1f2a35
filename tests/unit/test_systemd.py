"""harnessx._systemd: the sd_notify client."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator

import pytest

from harnessx._systemd import SystemdNotifier


@pytest.fixture
def short_dir() -> Iterator[str]:
    # AF_UNIX paths are limited to ~107 bytes, which pytest's tmp_path can exceed.
    path = tempfile.mkdtemp(prefix="hx-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def listener(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(2)
    return sock


def test_notifier_sends_exact_datagrams(clean_env: pytest.MonkeyPatch, short_dir: str) -> None:
    path = os.path.join(short_dir, "notify")
    with listener(path) as sock:
        clean_env.setenv("NOTIFY_SOCKET", path)
        notifier = SystemdNotifier()
        assert notifier.enabled
        assert notifier.ready()
        assert sock.recv(4096) == b"READY=1"
        notifier.ready("serving 4 slots")
        assert sock.recv(4096) == b"READY=1\nSTATUS=serving 4 slots"
        notifier.status("x")
        assert sock.recv(4096) == b"STATUS=x"
        notifier.status("two\nlines")
        assert sock.recv(4096) == b"STATUS=two lines"
        notifier.watchdog()
        assert sock.recv(4096) == b"WATCHDOG=1"
        notifier.stopping()
        assert sock.recv(4096) == b"STOPPING=1"
        notifier.notify("RELOADING=1", "MONOTONIC_USEC=5")
        assert sock.recv(4096) == b"RELOADING=1\nMONOTONIC_USEC=5"


def test_notifier_abstract_socket(clean_env: pytest.MonkeyPatch) -> None:
    name = f"harnessx-test-{uuid.uuid4().hex}"
    with listener("\0" + name) as sock:
        clean_env.setenv("NOTIFY_SOCKET", "@" + name)
        notifier = SystemdNotifier()
        assert notifier.ready("up")
        assert sock.recv(4096) == b"READY=1\nSTATUS=up"
        assert notifier.watchdog()
        assert sock.recv(4096) == b"WATCHDOG=1"


def test_notifier_without_socket_is_a_no_op(clean_env: pytest.MonkeyPatch) -> None:
    notifier = SystemdNotifier()
    assert not notifier.enabled
    assert notifier.ready("x") is False
    assert notifier.watchdog() is False
    assert notifier.stopping() is False
    assert notifier.watchdog_interval is None


def test_notifier_never_raises_on_send_errors(clean_env: pytest.MonkeyPatch, short_dir: str) -> None:
    clean_env.setenv("NOTIFY_SOCKET", os.path.join(short_dir, "nobody-listens"))
    notifier = SystemdNotifier()
    assert notifier.enabled
    assert notifier.ready() is False
    assert SystemdNotifier({"NOTIFY_SOCKET": "/" + "x" * 300}).ready() is False  # path too long


def test_notify_rejects_malformed_assignments() -> None:
    notifier = SystemdNotifier({})
    with pytest.raises(ValueError):
        notifier.notify("READY")
    with pytest.raises(ValueError):
        notifier.notify("STATUS=a\nREADY=1")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"WATCHDOG_USEC": "10000000"}, 5.0),
        ({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid())}, 1.5),
        ({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid() + 1)}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_watchdog_interval(
    clean_env: pytest.MonkeyPatch, env: dict[str, str], expected: float | None
) -> None:
    for name, value in env.items():
        clean_env.setenv(name, value)
    assert SystemdNotifier().watchdog_interval == expected
