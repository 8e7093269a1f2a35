"""The README's code and the examples run as written, as separate processes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]


def run_python(
    args: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def readme_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.parametrize("index", range(len(readme_blocks())))
def test_readme_python_blocks_run(index: int, tmp_path: Path) -> None:
    script = tmp_path / "block.py"
    # A block inside a list item is indented with it.
    script.write_text(textwrap.dedent(readme_blocks()[index]))
    done = run_python([str(script)], tmp_path)
    assert done.returncode == 0, done.stderr


def test_first_agent_example(tmp_path: Path) -> None:
    done = run_python([str(ROOT / "examples/first_agent.py")], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["completed - It is sunny in Oslo.", "Tomorrow looks sunny too."]


def test_durable_local_example(tmp_path: Path) -> None:
    done = run_python([str(ROOT / "examples/durable_local.py")], tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("approval ") and lines[0].endswith(" send_invoice")
    assert lines[1] == "Answer: The invoice is sent."


def test_seed_walkthrough_on_postgres_across_a_sigkill(pg_database: str, tmp_path: Path) -> None:
    script = str(ROOT / "examples/postgres_walkthrough.py")
    unset = run_python([script, "start", "session.json"], tmp_path, {"PATH": os.environ["PATH"]})
    assert unset.returncode == 1 and "set HARNESSX_DSN" in unset.stderr
    env = {**os.environ, "HARNESSX_DSN": pg_database}  # never on the command line
    first = run_python([script, "start", "session.json", "--crash-after-tool"], tmp_path, env)
    assert first.returncode == -9, first.stderr
    assert (tmp_path / "report.md").exists()
    second = run_python([script, "resume", "session.json"], tmp_path, env)
    assert second.returncode == 0, second.stderr
    assert second.stdout.startswith("Resuming run:")
    result = json.loads(second.stdout.splitlines()[-1])
    assert result["status"] == "completed"
    assert result["output"] == f"The report is ready: {(tmp_path / 'report.md').resolve()}"
    assert (tmp_path / "invocations.txt").read_text().splitlines() == ["write_report"]
    again = run_python([script, "resume", "session.json"], tmp_path, env)
    assert again.stdout.strip() == "No run was resumed."


def test_fenced_tool_example(tmp_path: Path) -> None:
    for _ in range(2):  # a second run in the same folder shows the same
        done = run_python([str(ROOT / "examples/fenced_tool.py")], tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            "Charged.",
            "replayed by the same holder: already charged",
            "late call from a zombie: rejected: token 0 is older than 1",
            "charges: 1",
        ]


async def test_agents_example_is_what_the_documented_worker_runs(tmp_path: Path) -> None:
    from harnessx import AgentRef, AgentRuntime, SQLiteBackend

    database = tmp_path / "pool.sqlite3"
    bin_dir = Path(sys.executable).parent
    migrated = await asyncio.create_subprocess_exec(bin_dir / "harnessx", "migrate", "--sqlite", database)
    assert await migrated.wait() == 0
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT / "examples")}  # as README.md says
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = await asyncio.create_subprocess_exec(
            bin_dir / "harness-worker", "--agents", "agents:registry", "--sqlite", database,
            "--metrics-addr", "off", "--log-format", "text",
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        async with SQLiteBackend(database, auto_migrate=False) as store:
            runtime = AgentRuntime(AgentRef("assistant", "v1"), backend=store, execution="pool")
            await runtime.start()
            handle = await runtime.submit("count these four words")
            result = await asyncio.wait_for(handle.result(), 60)
            await runtime.stop()
        assert result.ok and result.output == "Your message has 4 words.", log.read_text()
    finally:
        worker.terminate()
        await asyncio.wait_for(worker.wait(), 60)
    assert worker.returncode == 0, log.read_text()
