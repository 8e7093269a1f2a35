"""A real Temporal dev server and Redis for the Temporal tests, and worker processes.

``TemporalSetup`` names one test's corner of the shared servers: its own task queue (run
ids are unique, so the event streams never meet). ``WorkerProcess`` runs
``harness-worker --temporal`` with the pool tests' agents (``temporal_agents:registry``, built
on ``chaos.agents``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnessx import AgentRegistry
from harnessx.temporal import RedisEvents, TemporalBackend

__all__ = ["BIN", "TemporalSetup", "WorkerProcess", "ledger", "wait_until"]

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


def ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def wait_until(predicate: Callable[[], Any], within: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + within
    while not (found := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {within} s")
        await asyncio.sleep(0.02)
    return found


@dataclass
class WorkerProcess:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        """SIGKILL, and reap it."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(30)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class TemporalSetup:
    target: str
    redis_url: str
    folder: Path
    task_queue: str = field(default_factory=lambda: "test-" + uuid.uuid4().hex[:12])
    heartbeat_timeout: float = 2.0
    processes: list[WorkerProcess] = field(default_factory=list)

    @property
    def ledger_path(self) -> Path:
        return self.folder / "ledger"

    def events(self) -> RedisEvents:
        return RedisEvents(self.redis_url)

    async def backend(self, registry: AgentRegistry | None = None, **options: Any) -> TemporalBackend:
        options.setdefault("heartbeat_timeout", self.heartbeat_timeout)
        backend = await TemporalBackend.connect(
            self.target, events=self.events(), registry=registry, task_queue=self.task_queue, **options
        )
        await backend.initialize()
        return backend

    def worker(self, name: str, *, slow_tool: float = 0.0, extra: list[str] | None = None) -> WorkerProcess:
        log = self.folder / f"{name}.log"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
            "HX_LEDGER": str(self.ledger_path),
            "HX_SLOW_TOOL": str(slow_tool),
            "HARNESSX_LOG_FORMAT": "json",
        }
        command = [
            str(BIN / "harness-worker"),
            "--temporal", self.target,
            "--task-queue", self.task_queue,
            "--events-url", self.redis_url,
            "--agents", "temporal_agents:registry",
            "--metrics-addr", "off",
            *(extra or []),
        ]  # fmt: skip
        with open(log, "wb") as handle:
            popen = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env)
        process = WorkerProcess(name, popen, log)
        self.processes.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.processes:
            process.kill()

    async def wait_for_ledger(
        self, predicate: Callable[[list[dict[str, Any]]], bool], within: float = 30
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + within
        while not predicate(lines := ledger(self.ledger_path)):
            if time.monotonic() > deadline:
                logs = "\n".join(p.text()[-3000:] for p in self.processes)
                raise AssertionError(f"ledger condition not met; {len(lines)} lines\n{logs}")
            await asyncio.sleep(0.02)
        return lines
