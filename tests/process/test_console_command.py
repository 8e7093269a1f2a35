"""``harnessx console`` as a process: it refuses to serve without auth, says why, and keeps
its tokens out of its output."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from console_support import OPERATOR, TOKENS

pytestmark = pytest.mark.process
HARNESSX = str(Path(sys.executable).parent / "harnessx")


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HARNESSX, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESSX_")}
    return {**env, **extra}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_console_refuses_to_serve_without_auth(tmp_path: Path) -> None:
    assert run(["migrate", "--sqlite", "db.sqlite3"], clean_env(), tmp_path).returncode == 0
    bare = run(["console", "--sqlite", "db.sqlite3"], clean_env(), tmp_path)
    assert bare.returncode == 2 and "the console needs tokens" in bare.stderr
    exposed = run(
        ["console", "--sqlite", "db.sqlite3", "--insecure-no-auth", "--bind", "0.0.0.0:0"],
        clean_env(),
        tmp_path,
    )
    assert exposed.returncode == 2 and "only on a loopback address" in exposed.stderr
    weak = run(
        ["console", "--sqlite", "db.sqlite3"],
        clean_env(HARNESSX_CONSOLE_TOKENS="alice:operator:tooshort"),
        tmp_path,
    )
    assert weak.returncode == 1 and "at least 24 characters" in weak.stderr and "tooshort" not in weak.stderr
    missing = run(["console", "--sqlite", "db.sqlite3", "--tokens-file", "nope"], clean_env(), tmp_path)
    assert missing.returncode == 1 and "cannot read the console's token file nope" in missing.stderr


def test_the_console_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    assert run(["migrate", "--sqlite", "db.sqlite3"], clean_env(), tmp_path).returncode == 0
    (tmp_path / "tokens").write_text(TOKENS)
    port = free_port()
    log = tmp_path / "console.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                HARNESSX,
                "console",
                "--sqlite",
                "db.sqlite3",
                "--tokens-file",
                "tokens",
                "--bind",
                f"127.0.0.1:{port}",
            ],
            env=clean_env(HARNESSX_LOG_FORMAT="json"),
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while "serving the operator console" not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        answer = httpx.get(
            f"http://127.0.0.1:{port}/api/whoami", headers={"Authorization": f"Bearer {OPERATOR}"}
        )
        assert answer.json() == {"name": "alice", "role": "operator", "via": "api"}
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert OPERATOR not in log.read_text()
