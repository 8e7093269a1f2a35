"""The services as deployed get the DSN from the environment (systemd's EnvironmentFile, the
Kubernetes Secret): when it is wrong, they log one JSON line saying why, never the password,
and exit non-zero so that systemd / Kubernetes restart them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from deploy_support import BIN, free_port, need_module

pytestmark = pytest.mark.process

ROOT = (
    Path(__file__).resolve().parent.parent.parent
)  # the checkout, where the workers import chaos.agents from
PASSWORD = "hunter2-not-in-logs"


def test_a_bad_dsn_is_reported_without_its_password() -> None:
    need_module("asyncpg")
    # Nothing listens on this port: the connection is refused at once.
    dsn = f"postgresql://harnessx:{PASSWORD}@127.0.0.1:{free_port()}/harnessx"
    env = {
        **os.environ,
        "HARNESSX_DSN": dsn,
        "HARNESSX_LOG_FORMAT": "json",
        "HARNESSX_AGENTS": "chaos.agents:registry",
        "HARNESSX_METRICS_ADDR": "off",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    commands = {"worker": [str(BIN / "harness-worker")], "supervisor": [str(BIN / "harness-supervisor")]}
    running = {
        name: subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for name, command in commands.items()
    }
    for name, process in running.items():
        output, _ = process.communicate(timeout=90)
        text = output.decode()
        assert process.returncode == 1, text
        assert PASSWORD not in text, f"{name} logged the password"
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
        (error,) = [line for line in lines if line["level"] == "ERROR"]
        assert "postgresql://harnessx:***@127.0.0.1" in error["message"]
        assert error["worker_id" if name == "worker" else "supervisor_id"]
