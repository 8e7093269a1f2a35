"""The calls of the original's example ``06-durability/durable_crash_recovery.py``: a run
whose process dies (``os._exit`` from ``after_tool_execution``, right after the tool's raw
result is committed), what ``backend.latest_run()`` shows of it then (``state["status"]``,
``state["tools"]`` entries' ``call.name`` and ``status``), and ``runtime.resume()`` in a
new process finishing the same run without calling the tool again.

The store is SQLite in the working folder, or PostgreSQL when ``HARNESSX_PROBE_DSN`` names
a database. Each step runs in a process of its own (this file, with the step's name); a
resume refused with ``SessionBusyError`` (the dead process's lease not yet expired) is
retried, as the example tells its user to wait and retry. (Whether it had to wait depends on
how long the steps took to start, so it is not observed: here a PostgreSQL session's lease
goes with the dead process, where 0.9.1 waits for it to expire.)"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _probe import emit

from harnessx import (
    Agent,
    AgentRuntime,
    Middleware,
    PostgresBackend,
    ProviderResponse,
    SessionBusyError,
    SQLiteBackend,
    ToolCall,
    ToolResult,
)
from harnessx.providers import LLMProvider

WORK = Path.cwd()
TEXT = "Inventory count\nCrates: 42\n"


class FromHistory(LLMProvider):
    """Decides from the conversation it receives: a tool result means answer."""

    async def create(self, **kwargs: Any) -> ProviderResponse:
        for message in kwargs["messages"]:
            for block in message["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    return ProviderResponse(text=f"Counted: {block['content']}")
        return ProviderResponse(tool_calls=[ToolCall("count", "write_count", {})], stop_reason="tool_use")

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


class DieAfterResult(Middleware):
    async def after_tool_execution(self, result: ToolResult) -> ToolResult:
        print("dying", flush=True)
        os._exit(42)


def backend() -> Any:
    dsn = os.environ.get("HARNESSX_PROBE_DSN")
    if dsn:
        return PostgresBackend(dsn, lease_seconds=2)
    return SQLiteBackend(str(WORK / "store.db"))


def agent(die: bool) -> Agent:
    a = Agent(provider=FromHistory())

    @a.tools.register(replay_policy="manual")
    def write_count() -> str:
        """Write the count file, once."""
        with (WORK / "calls.txt").open("a") as log:
            log.write("write_count\n")
        with (WORK / "count.txt").open("x") as out:
            out.write(TEXT)
        return "42 crates"

    if die:
        a.middleware.add(DieAfterResult())
    return a


async def step(name: str) -> None:
    store = backend()
    await store.initialize()
    try:
        if name == "status":
            session_id = (WORK / "session.txt").read_text()
            state = await store.latest_run(session_id)
            print(
                json.dumps(
                    {
                        "status": state["status"],
                        "tools": [[t["call"]["name"], t["status"]] for t in state.get("tools", [])],
                        "output": state.get("output"),
                    }
                )
            )
            return
        async with agent(die=name == "crash") as a:
            runtime = AgentRuntime(a, backend=store)
            try:
                if name == "crash":
                    (WORK / "session.txt").write_text(await runtime.start())
                    await runtime.run("Count the crates", request_id="count-1")
                    return
                session_id = (WORK / "session.txt").read_text()
                deadline = time.monotonic() + 60
                while True:
                    try:
                        handle = await runtime.resume(session_id)
                        break
                    except SessionBusyError:
                        if time.monotonic() > deadline:
                            raise
                        await asyncio.sleep(0.5)
                result = await handle.result() if handle else None
                print(
                    json.dumps(
                        {
                            "handle": type(handle).__name__,
                            "status": result.status.value if result else None,
                            "output": result.output if result else None,
                        }
                    )
                )
            finally:
                await runtime.stop()
    finally:
        await store.aclose()


def run_step(name: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, name], capture_output=True, text=True, cwd=WORK, timeout=120
    )
    lines = done.stdout.strip().splitlines()
    seen: dict[str, Any] = {"exit": done.returncode}
    if lines and lines[-1].startswith("{"):
        seen.update(json.loads(lines[-1]))
    else:
        seen["stdout"] = lines
        seen["stderr"] = done.stderr.strip().splitlines()[-3:]
    return seen


def main() -> None:
    observed: dict[str, Any] = {}
    observed["crash"] = run_step("crash")
    observed["status_after_crash"] = run_step("status")
    observed["resume"] = run_step("resume")
    observed["status_after_resume"] = run_step("status")
    calls = WORK / "calls.txt"
    observed["tool_calls"] = calls.read_text().splitlines() if calls.exists() else []
    observed["file"] = (WORK / "count.txt").read_text() if (WORK / "count.txt").exists() else None
    emit(observed)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        asyncio.run(step(sys.argv[1]))
    else:
        main()
