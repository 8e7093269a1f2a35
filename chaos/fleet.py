"""The real processes under test: ``harness-worker`` and ``harness-supervisor``.

The fleet starts them, signals them on the suite's behalf (remembering what it did, so an
exit it caused is not mistaken for a crash), replaces any that exit on their own, and
tells who the supervisor leader is. Each process writes JSON log lines to its own file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from chaos.db import Database, Target
from chaos.proxy import Proxy

__all__ = ["Fleet", "Proc", "ROOT"]

ROOT = Path(__file__).resolve().parent.parent  # the folder holding the chaos package


def _command(name: str) -> str:
    beside = Path(sys.executable).parent / name  # the console script of this environment
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found beside {sys.executable} or on PATH: pip install -e .")
    return found


@dataclass
class Proc:
    name: str
    role: str  # worker | supervisor
    popen: subprocess.Popen[bytes]
    log: Path
    started: float
    signalled: str | None = None  # "kill" or "term" once the suite asked it to go
    stopped: bool = False  # SIGSTOPped right now
    process_id: str | None = None  # a worker's store process id, once registered
    proxy: Proxy | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_lines(self) -> list[dict[str, object]]:
        lines = []
        for line in self.text().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    lines.append(record)
        return lines


@dataclass
class Fleet:
    target: Target
    folder: Path
    env: dict[str, str]
    lease_seconds: float
    concurrency: int
    drain_timeout: float = 20.0
    proxied: bool = False  # workers reach PostgreSQL through a Proxy each
    supervisor_args: tuple[str, ...] = ()  # e.g. retention: --retention 5s --archive DIR
    procs: list[Proc] = field(default_factory=list)
    unexpected_exits: list[str] = field(default_factory=list)
    _counter: int = 0

    def __post_init__(self) -> None:
        (self.folder / "logs").mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ spawning

    def _spawn(
        self, role: str, command: list[str], proxy: Proxy | None = None, dsn: str | None = None
    ) -> Proc:
        self._counter += 1
        name = f"{role}-{self._counter}"
        log = self.folder / "logs" / f"{name}.log"
        env = {
            **os.environ,
            **self.env,
            **self.target.store_env(dsn),
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
            "HARNESSX_LOG_FORMAT": "json",
        }
        with log.open("wb") as handle:  # the child keeps its own descriptor
            popen = subprocess.Popen(
                command, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        proc = Proc(name, role, popen, log, time.time(), proxy=proxy)
        self.procs.append(proc)
        return proc

    async def spawn_worker(self) -> Proc:
        proxy = None
        dsn = None
        if self.proxied:
            proxy = Proxy(self.target.address())
            dsn = self.target.via(await proxy.start())
        return self._spawn(
            "worker",
            [
                _command("harness-worker"),
                *self.target.store_args(),
                "--agents", "chaos.agents:registry",
                "--concurrency", str(self.concurrency),
                "--lease-seconds", str(self.lease_seconds),
                "--drain-timeout", str(self.drain_timeout),
                "--metrics-addr", "off",
            ],
            proxy,
            dsn,
        )  # fmt: skip

    def spawn_supervisor(self) -> Proc:
        return self._spawn(
            "supervisor",
            [
                _command("harness-supervisor"),
                *self.target.store_args(),
                "--metrics-addr", "off",
                "--scan-interval", "0.1",
                *self.supervisor_args,
            ],
        )  # fmt: skip

    # ------------------------------------------------------------------ looking

    def workers(self) -> list[Proc]:
        """Workers that are running and were not told to go."""
        return [p for p in self.procs if p.role == "worker" and p.alive() and p.signalled is None]

    def supervisors(self) -> list[Proc]:
        return [p for p in self.procs if p.role == "supervisor" and p.alive() and p.signalled is None]

    def leader(self) -> Proc | None:
        for proc in self.supervisors():
            if "now the leader" in proc.text():
                return proc
        return None

    async def wait_registered(self, db: Database, procs: list[Proc], within: float = 30.0) -> None:
        deadline = time.monotonic() + within
        for proc in procs:
            while proc.process_id is None:
                rows = await db.fetch("worker_of_pid", proc.pid)
                if rows:
                    proc.process_id = str(rows[0][0])
                    break
                if not proc.alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"{proc.name} did not register:\n{proc.text()[-3000:]}")
                await asyncio.sleep(0.05)

    async def wait_leader(self, within: float = 30.0) -> Proc:
        deadline = time.monotonic() + within
        while (leader := self.leader()) is None:
            if time.monotonic() > deadline:
                raise RuntimeError("no supervisor became the leader")
            await asyncio.sleep(0.05)
        return leader

    # ------------------------------------------------------------------ signals

    def signal(self, proc: Proc, signum: signal.Signals) -> None:
        if signum == signal.SIGKILL:
            proc.signalled = "kill"
        elif signum == signal.SIGTERM:
            proc.signalled = "term"
        elif signum == signal.SIGSTOP:
            proc.stopped = True
        elif signum == signal.SIGCONT:
            proc.stopped = False
        with contextlib.suppress(ProcessLookupError):
            proc.popen.send_signal(signum)

    async def wait_exit(self, proc: Proc, within: float) -> int | None:
        deadline = time.monotonic() + within
        while proc.popen.poll() is None:
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.01)
        if proc.proxy is not None:
            await proc.proxy.close()
        return proc.popen.returncode

    async def keep_capacity(self, db: Database) -> None:
        """Replace processes that exit without being told to (and note them: a crash the
        suite did not cause is worth reading about)."""
        while True:
            for proc in list(self.procs):
                if proc.signalled is None and not proc.alive():
                    proc.signalled = "crashed"
                    tail = proc.text()[-1500:]
                    self.unexpected_exits.append(
                        f"{proc.name} (pid {proc.pid}) exited {proc.popen.returncode}: {tail}"
                    )
                    if proc.proxy is not None:
                        await proc.proxy.close()
                    if proc.role == "worker":
                        replacement = await self.spawn_worker()
                        with contextlib.suppress(RuntimeError):
                            await self.wait_registered(db, [replacement])
                    else:
                        self.spawn_supervisor()
            await asyncio.sleep(0.2)

    async def stop_all(self, within: float = 30.0) -> None:
        """Drain everything (SIGTERM), then SIGKILL what is left."""
        live = [p for p in self.procs if p.alive()]
        for proc in live:
            if proc.stopped:
                self.signal(proc, signal.SIGCONT)
            if proc.signalled is None:
                proc.signalled = "term"
            with contextlib.suppress(ProcessLookupError):
                proc.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + within
        for proc in live:
            if await self.wait_exit(proc, max(0.1, deadline - time.monotonic())) is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.kill()
                proc.popen.wait(timeout=30)
        for proc in self.procs:
            if proc.proxy is not None:
                await proc.proxy.close()
