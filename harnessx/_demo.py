"""The crash walkthrough behind ``harnessx demo``: offline, with a scripted model.

A sales agent writes a report through a tool. The process driving the run is killed with
SIGKILL right after the tool's raw result commits. A fresh process resumes the saved
session, reuses the committed result and finishes the answer: the tool ran once.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from harnessx._agent import Agent
from harnessx._config import AgentConfig
from harnessx._middleware import Middleware
from harnessx._registry import AgentRef, AgentRegistry
from harnessx._results import ToolResult
from harnessx._tools import current_tool_context
from harnessx.providers._base import ProviderResponse, ToolCall
from harnessx.providers._scripted import ScriptedProvider, ScriptedRequest

__all__ = [
    "DEMO_AGENT",
    "CrashAfterRawResult",
    "DEMO_PROMPT",
    "POOL_AGENT",
    "build_pool_agent",
    "build_sales_agent",
    "invocation_count",
    "pool_ledger",
    "pool_registry",
    "registry",
]

DEMO_AGENT = AgentRef("sales-demo", "v1")
DEMO_PROMPT = "Write the Q3 sales report for EMEA and tell me the headline number."

# Figures the scripted model "knows"; the tool writes them into the report.
_FIGURES = {"EMEA": {"revenue": "4.2M EUR", "growth": "+12%", "top_product": "Harness Pro"}}


def _workdir() -> Path:
    return Path(os.environ.get("HARNESSX_DEMO_DIR", ".agent_sessions/demo"))


def invocation_count(workdir: Path) -> int:
    """How many times the report tool really ran (it counts itself in a file)."""
    counter = workdir / "write_report.invocations"
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def _script(request: ScriptedRequest) -> ProviderResponse | str:
    if request.turn == 0:
        return ProviderResponse(
            text="I'll write the report now.",
            tool_calls=[ToolCall("call_report", "write_report", {"region": "EMEA", "quarter": "Q3"})],
        )
    (result,) = request.tool_results
    report = json.loads(result["content"])
    return (
        f"The {report['quarter']} {report['region']} report is written to {report['path']}. "
        f"Headline: revenue {report['revenue']} ({report['growth']} on the previous quarter), "
        f"led by {report['top_product']}."
    )


def build_sales_agent() -> Agent:
    agent = Agent(
        config=AgentConfig(model="scripted-sales", system_prompt="You are a sales analyst. Write reports."),
        provider=ScriptedProvider(_script),
    )

    @agent.tools.register(replay_policy="manual")
    def write_report(region: str, quarter: str) -> dict[str, str]:
        """Write a quarterly sales report to disk.

        Args:
            region: Sales region, e.g. EMEA.
            quarter: Quarter label, e.g. Q3.
        """
        workdir = _workdir()
        reports = workdir / "reports"
        reports.mkdir(parents=True, exist_ok=True)
        figures = _FIGURES.get(region, {"revenue": "n/a", "growth": "n/a", "top_product": "n/a"})
        path = reports / f"{quarter.lower()}-{region.lower()}.md"
        path.write_text(
            f"# {quarter} sales report: {region}\n\n"
            f"- Revenue: {figures['revenue']}\n- Growth: {figures['growth']}\n"
            f"- Top product: {figures['top_product']}\n"
        )
        with open(workdir / "write_report.invocations", "a", encoding="utf-8") as counter:
            counter.write(f"{current_tool_context().execution_key}\n")
        return {"path": str(path.resolve()), "region": region, "quarter": quarter, **figures}

    return agent


class CrashAfterRawResult(Middleware):
    """SIGKILLs this process the moment a tool's result is committed: result middleware
    runs only after the raw result is durable, so this is the worst moment to die."""

    async def after_tool_execution(self, result: ToolResult) -> ToolResult:
        os.kill(os.getpid(), signal.SIGKILL)
        return result  # pragma: no cover - the process is gone


registry = AgentRegistry()
registry.register(DEMO_AGENT.name, build_sales_agent, version=DEMO_AGENT.version)


# ------------------------------------------------------------------ pool demo

POOL_AGENT = AgentRef("sales-pool", "v1")


def pool_ledger(workdir: Path) -> Path:
    return workdir / "tool-ledger.jsonl"


def _pool_script(request: ScriptedRequest) -> ProviderResponse | str:
    if request.turn == 0:
        region = request.last_message["content"].rsplit(" ", 1)[-1]
        return ProviderResponse(
            text=f"Writing the {region} report.",
            tool_calls=[ToolCall("call_report", "write_report", {"region": region, "quarter": "Q3"})],
        )
    return f"Report ready: {request.tool_results[0]['content']}"


def build_pool_agent() -> Agent:
    """A sales agent whose report tool is slow and *idempotent*: it writes each report once
    per execution key, however often a crash makes the pool call it."""
    agent = Agent(
        config=AgentConfig(model="scripted-sales", system_prompt="You are a sales analyst. Write reports."),
        provider=ScriptedProvider(_pool_script),
    )

    @agent.tools.register(replay_policy="idempotent")
    def write_report(region: str, quarter: str) -> str:
        """Write a quarterly sales report to disk.

        Args:
            region: Sales region.
            quarter: Quarter label.
        """
        context = current_tool_context()
        workdir = _workdir()
        _log_tool(workdir, "start", context.execution_key)
        time.sleep(float(os.environ.get("HARNESSX_DEMO_TOOL_SECONDS", "1.0")))
        reports = workdir / "reports"
        reports.mkdir(parents=True, exist_ok=True)
        path = reports / f"{quarter.lower()}-{region.lower()}.md"
        done = reports / f".{region.lower()}.key"
        if done.exists() and done.read_text() == context.execution_key:
            _log_tool(workdir, "skip", context.execution_key)  # already written for this call
            return str(path.resolve())
        staging = path.with_suffix(".tmp")
        staging.write_text(f"# {quarter} sales report: {region}\n\nwritten by pid {os.getpid()}\n")
        os.replace(staging, path)
        done.write_text(context.execution_key)
        _log_tool(workdir, "write", context.execution_key)
        return str(path.resolve())

    return agent


def _log_tool(workdir: Path, event: str, key: str) -> None:
    line = json.dumps({"event": event, "key": key, "pid": os.getpid(), "t": time.time()})
    with open(pool_ledger(workdir), "a", encoding="utf-8") as ledger:
        ledger.write(line + "\n")


pool_registry = AgentRegistry()
pool_registry.register(POOL_AGENT.name, build_pool_agent, version=POOL_AGENT.version)
