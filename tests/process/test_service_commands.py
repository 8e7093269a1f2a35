"""``harness-worker`` and ``harness-supervisor`` as an operator starts them: their probes under
idle and dripping connections, and the one-line errors for ``--metrics-addr`` and ``--agents``.

Real processes on a real SQLite file, real sockets on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harnessx.testing import free_port

pytestmark = pytest.mark.process

BIN = Path(sys.executable).parent
COMMANDS = ("harness-worker", "harness-supervisor")
SECRET = "Sup3r/Secret"

AGENTS = """
from harnessx import AgentRegistry

registry = AgentRegistry()
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A folder with an agents module and a migrated SQLite database."""
    (tmp_path / "svc_agents.py").write_text(AGENTS)
    database = tmp_path / "runtime.sqlite3"
    migrated = subprocess.run(
        [sys.executable, "-m", "harnessx", "migrate", "--sqlite", str(database)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrated.returncode == 0, migrated.stderr
    return tmp_path


def command(name: str, home: Path, *extra: str) -> list[str]:
    args = [str(BIN / name), "--sqlite", str(home / "runtime.sqlite3"), "--log-format", "text"]
    if name == "harness-worker":
        args += ["--agents", "svc_agents:registry"]
    return [*args, *extra]


def environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESSX_")}
    env["PYTHONPATH"] = os.pathsep.join([str(home), os.environ.get("PYTHONPATH", "")])
    return env


def run(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=home, env=environment(home), capture_output=True, text=True, timeout=120)


@contextlib.contextmanager
def started(args: list[str], home: Path) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        args, cwd=home, env=environment(home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()


def serving_port(process: subprocess.Popen[str]) -> int:
    """Reads the process's log until it says where it serves; the port it names."""
    assert process.stderr is not None
    for line in process.stderr:
        found = re.search(r"serving /metrics, /healthz, /readyz on 127\.0\.0\.1:(\d+)", line)
        if found:
            return int(found.group(1))
    raise AssertionError(f"exited ({process.wait()}) without serving")


def ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


async def wait_ready(port: int) -> None:
    async with asyncio.timeout(60):
        while not await asyncio.to_thread(ready, port):
            await asyncio.sleep(0.05)


def lines_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------------
# Probes that cannot be starved
# ---------------------------------------------------------------------------------------------


async def hold_drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A slowloris client: a request head one byte at a time, reconnecting when cut off."""
    with contextlib.suppress(ConnectionError):
        writer.write(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
        while not reader.at_eof() and reader.exception() is None:
            writer.write(b"X")
            await writer.drain()
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("name", COMMANDS)
async def test_probes_answer_while_200_idle_and_20_dripping_connections_are_held(
    name: str, home: Path
) -> None:
    with started(command(name, home, "--metrics-addr", "127.0.0.1:0"), home) as process:
        port = await asyncio.to_thread(serving_port, process)
        await wait_ready(port)
        idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(200)]
        dripping = [await asyncio.open_connection("127.0.0.1", port) for _ in range(20)]
        drips = [asyncio.create_task(hold_drip(*connection)) for connection in dripping]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            for _ in range(20):
                # A fresh connection per probe, as the kubelet does.
                health = await client.get("/healthz", headers={"Connection": "close"})
                readiness = await client.get("/readyz", headers={"Connection": "close"})
                assert (health.status_code, readiness.status_code) == (200, 200)
            assert (await client.head("/healthz")).status_code == 200
            assert "# TYPE" in (await client.get("/metrics")).text
        # Draining with all of that still connected: the process stops, and cleanly.
        process.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(process.wait, 60) == 0
        for task in drips:
            task.cancel()
        await asyncio.gather(*drips, return_exceptions=True)
        for _, writer in idle + dripping:
            writer.close()
        assert process.stderr is not None
        rest = process.stderr.read()
        assert "Traceback" not in rest and " ERROR " not in rest, rest


# ---------------------------------------------------------------------------------------------
# --metrics-addr
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", COMMANDS)
async def test_a_taken_metrics_port_is_one_line_whose_advice_works(name: str, home: Path) -> None:
    port = free_port()
    with started(command(name, home, "--metrics-addr", f"127.0.0.1:{port}"), home) as first:
        assert await asyncio.to_thread(serving_port, first) == port
        await wait_ready(port)

        second = await asyncio.to_thread(
            run, command(name, home, "--metrics-addr", f"127.0.0.1:{port}"), home
        )
        assert second.returncode == 1
        [line] = lines_of(second.stderr)
        assert line == (
            f"Error: --metrics-addr 127.0.0.1:{port} is already in use (another harness-worker or "
            "harness-supervisor on this host?): give this one its own port, e.g. --metrics-addr "
            "127.0.0.1:0 for a free one, or pass --metrics-addr off"
        )

        # Both pieces of advice work while the first one still holds the port.
        with started(command(name, home, "--metrics-addr", "127.0.0.1:0"), home) as third:
            other = await asyncio.to_thread(serving_port, third)
            assert other != port
            await wait_ready(other)
            third.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(third.wait, 60) == 0
        with started(command(name, home, "--metrics-addr", "off"), home) as fourth:
            assert fourth.stderr is not None
            assert "(--metrics-addr off)" in await asyncio.to_thread(fourth.stderr.readline)
            fourth.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(fourth.wait, 60) == 0
        first.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(first.wait, 60) == 0


@pytest.mark.parametrize("name", COMMANDS)
@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("127.0.0.1:99999", "port 99999 in '127.0.0.1:99999' is out of range: ports go from 0 to 65535"),
        ("[::1", "'[::1' has no closing ']' after the IPv6 address"),
        ("::1:9464", "an IPv6 address goes in brackets, e.g. [::1]:9464"),
        ("9464", "'9464' has no port"),
    ],
)
def test_a_malformed_metrics_address_is_a_usage_error(name: str, address: str, says: str, home: Path) -> None:
    result = run(command(name, home, "--metrics-addr", address), home)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    [error] = [line for line in lines_of(result.stderr) if line.startswith("Error:")]
    assert error.startswith("Error: Invalid value for '--metrics-addr': ")
    assert says in error


@pytest.mark.parametrize("name", COMMANDS)
def test_an_address_of_another_host_is_one_line(name: str, home: Path) -> None:
    result = run(command(name, home, "--metrics-addr", "10.255.255.1:9464"), home)
    assert result.returncode == 1
    [line] = lines_of(result.stderr)
    assert line.startswith("Error: --metrics-addr 10.255.255.1:9464: cannot listen there (")
    assert line.endswith("or --metrics-addr off")


# ---------------------------------------------------------------------------------------------
# --agents that cannot be imported
# ---------------------------------------------------------------------------------------------

RAISES = f"""
DSN = "postgresql://app:{SECRET}@db/harness"
raise RuntimeError("cannot reach " + DSN)
"""


def worker(home: Path, agents: str, *extra: str) -> subprocess.CompletedProcess[str]:
    args = [str(BIN / "harness-worker"), "--sqlite", str(home / "runtime.sqlite3"), "--agents", agents]
    return run([*args, "--metrics-addr", "off", *extra], home)


def test_an_agents_module_that_raises_is_one_redacted_line(home: Path) -> None:
    (home / "raising_agents.py").write_text(RAISES)
    result = worker(home, "raising_agents:registry", "--log-format", "text")
    assert result.returncode == 1
    [line] = lines_of(result.stderr)
    assert line == (
        f"Error: importing 'raising_agents' for --agents failed at {home / 'raising_agents.py'}:3: "
        "RuntimeError: cannot reach postgresql://app:***@db/harness"
    )


def test_the_traceback_of_an_agents_module_is_in_json_logs_redacted(home: Path) -> None:
    (home / "raising_agents.py").write_text(RAISES)
    result = worker(home, "raising_agents:registry", "--log-format", "json")
    assert result.returncode == 1
    assert SECRET not in result.stderr
    *logged, last = lines_of(result.stderr)
    [record] = [json.loads(line) for line in logged]
    assert record["level"] == "ERROR"
    assert record["message"] == last.removeprefix("Error: ")
    assert "raise RuntimeError" in record["error"] and "postgresql://app:***@db/harness" in record["error"]


def test_the_traceback_of_an_agents_module_is_shown_at_debug_level(home: Path) -> None:
    (home / "raising_agents.py").write_text(RAISES)
    result = worker(home, "raising_agents:registry", "--log-format", "text", "--log-level", "debug")
    assert result.returncode == 1
    assert SECRET not in result.stderr
    assert "Traceback (most recent call last)" in result.stderr
    assert lines_of(result.stderr)[-1].startswith("Error: importing 'raising_agents' for --agents failed")


def test_an_agents_module_with_a_syntax_error_is_one_line(home: Path) -> None:
    (home / "broken_agents.py").write_text("def broken(:\n    pass\n")
    result = worker(home, "broken_agents:registry", "--log-format", "text")
    assert result.returncode == 1
    [line] = lines_of(result.stderr)
    assert line.startswith("Error: importing 'broken_agents' for --agents failed: SyntaxError: ")
    assert "broken_agents.py, line 1" in line


def test_a_missing_agents_module_says_where_python_looks(home: Path) -> None:
    result = worker(home, "not_there:registry", "--log-format", "text")
    assert result.returncode == 1
    [line] = lines_of(result.stderr)
    assert line == (
        "Error: cannot import 'not_there' for --agents: there is no module 'not_there' on the path "
        "(run from the folder that holds it, or add that folder to PYTHONPATH)"
    )
