"""The durable-runs walkthrough on PostgreSQL, across two processes.

    export HARNESSX_DSN='postgresql://user:password@host:5432/database'
    python examples/postgres_walkthrough.py start  session.json [--crash-after-tool]
    python examples/postgres_walkthrough.py resume session.json

The DSN comes from the environment, not the command line, where any user could read its
password in the process list.

``start`` begins a run whose tool writes a report; with ``--crash-after-tool`` the process
kills itself with SIGKILL right after the tool's result is committed. ``resume`` (a fresh
process) finishes the answer without calling the tool again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from harnessx import (
    Agent,
    AgentConfig,
    AgentRuntime,
    Middleware,
    PostgresBackend,
    ProviderResponse,
    RunResult,
    ScriptedProvider,
    ScriptedRequest,
    ToolCall,
    ToolResult,
)

REPORT = Path("report.md")


class KillAfterRawResult(Middleware):
    """Result middleware runs once the tool's raw result is committed: die right there."""

    async def after_tool_execution(self, result: ToolResult) -> ToolResult:
        os.kill(os.getpid(), signal.SIGKILL)
        return result


def model(request: ScriptedRequest) -> ProviderResponse | str:
    """A scripted stand-in for a real model: call the tool once, then answer."""
    if request.turn == 0:
        return ProviderResponse(tool_calls=[ToolCall("call_1", "write_report", {"quarter": "Q3"})])
    return f"The report is ready: {request.tool_results[0]['content']}"


def build_agent() -> Agent:
    agent = Agent(config=AgentConfig(system_prompt="You are helpful."), provider=ScriptedProvider(model))

    @agent.tools.register()
    def write_report(quarter: str) -> str:
        """Write the quarterly report.

        Args:
            quarter: Quarter label.
        """
        REPORT.write_text(f"# {quarter} report\n")
        with open("invocations.txt", "a", encoding="utf-8") as counter:
            counter.write("write_report\n")
        return str(REPORT.resolve())

    return agent


async def start_run(dsn: str, prompt: str, session_file: Path, crash: bool = False) -> tuple[str, RunResult]:
    async with PostgresBackend(dsn) as backend:  # opens the pool, migrates
        agent = build_agent()
        if crash:
            agent.middleware.add(KillAfterRawResult())
        async with agent, AgentRuntime(agent, backend=backend) as runtime:
            session_file.write_text(json.dumps({"session_id": runtime.session_id}))
            handle = await runtime.submit(prompt, request_id="first-request")
            return handle.session_id, await handle.result()


async def resume_run(dsn: str, session_file: Path) -> RunResult | None:
    saved = json.loads(session_file.read_text(encoding="utf-8"))
    async with PostgresBackend(dsn) as backend:
        agent = build_agent()
        async with agent:
            runtime = AgentRuntime(agent, backend=backend)
            try:
                handle = await runtime.resume(saved["session_id"])
                if handle is None:
                    print("No run was resumed.")
                    return None
                print("Resuming run:", handle.run_id)
                return await handle.result()
            finally:
                await runtime.aclose()  # alias of stop()


def main() -> None:
    dsn = os.environ.get("HARNESSX_DSN")
    if not dsn:
        sys.exit("set HARNESSX_DSN to the PostgreSQL URL, e.g. postgresql://user:password@host:5432/db")
    command, session_file = sys.argv[1], Path(sys.argv[2])
    if command == "start":
        _, result = asyncio.run(
            start_run(dsn, "Write the Q3 report.", session_file, crash="--crash-after-tool" in sys.argv)
        )
    else:
        resumed = asyncio.run(resume_run(dsn, session_file))
        if resumed is None:
            return
        result = resumed
    print(json.dumps(result.to_dict()))


if __name__ == "__main__":
    main()
