"""The error hierarchy, enum members and str(), result and usage shapes."""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
from pathlib import Path
from typing import Any

from _probe import caught, emit, mro

import harnessx
from harnessx import (
    Agent,
    AgentConfig,
    AgentRuntime,
    HookEvent,
    PendingTool,
    ProviderResponse,
    RunFailed,
    RunResult,
    RunStatus,
    SQLiteBackend,
    TokenUsage,
    ToolCall,
    UnknownExecutionKey,
    register_provider,
)
from harnessx.providers import LLMProvider

ERRORS = [
    "HarnessError",
    "ConfigurationError",
    "RuntimeStateError",
    "ResolutionError",
    "UnknownExecutionKey",
    "TransientToolError",
    "StorageError",
    "SessionBusyError",
    "LeaseLostError",
    "SchemaError",
    "RunError",
    "RunFailed",
    "RunAwaitingInput",
    "RunCancelled",
    "RunTruncated",
    "RunRefused",
    "RunLimitReached",
    "ToolApprovalRequired",
    "MaxIterationsError",
    "CostLimitError",
    "ToolNotFoundError",
]


async def resume_missing(folder: str) -> dict[str, Any]:
    async with SQLiteBackend(str(Path(folder) / "runtime.db")) as backend:
        runtime = AgentRuntime(Agent(), backend=backend)
        try:
            await runtime.resume("no-such-session")
        except Exception as error:
            return caught(error)
        finally:
            await runtime.stop()
    return {}


class Echo(LLMProvider):
    async def create(self, **kwargs: Any) -> ProviderResponse:
        return ProviderResponse(text=f"asked for {kwargs.get('model')}")

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


async def registered_provider() -> dict[str, Any]:
    """A factory given to register_provider takes no arguments; the agent builds it when it
    is built, and each request names the configured model."""
    built: list[str] = []
    register_provider("probe-echo", lambda: built.append("Echo") or Echo())
    agent = Agent(AgentConfig(provider="probe-echo", model="probe-model"))
    before_run = list(built)
    result = await agent.run("hi")
    await agent.aclose()
    return {"built_before_run": before_run, "status": result.status.value, "output": result.output}


def main() -> None:
    failed = RunResult("s", "r", status=RunStatus.FAILED, error={"type": "ValueError", "message": "boom"})
    try:
        failed.raise_for_status()
    except RunFailed as error:
        run_failed = {"error": error.error, "message": str(error), "result_is": error.result is failed}
    pending = PendingTool("r:1:c", ToolCall("c", "t", {"x": 1}), "uncertain", attempt=1)
    with tempfile.TemporaryDirectory() as tmp:
        missing = asyncio.run(resume_missing(tmp))
    agent = Agent()
    registration = agent.hooks.on(HookEvent.ERROR, lambda ctx: None)
    emit(
        {
            "errors": {name: mro(getattr(harnessx, name)) for name in ERRORS},
            "str": [
                str(RunStatus.COMPLETED),
                str(harnessx.RunEventType.TEXT_DELTA),
                str(HookEvent.CHECKPOINT),
            ],
            "equal_to_values": [
                RunStatus.COMPLETED == "completed",
                harnessx.RunEventType.RUN_RESULT == "run_result",
            ],
            "run_status": [s.value for s in RunStatus],
            "run_event_types": sorted(t.value for t in harnessx.RunEventType),
            "hook_events": sorted(e.value for e in HookEvent),
            "runtime_states": sorted(s.value for s in harnessx.RuntimeState),
            "token_usage_fields": [f.name for f in dataclasses.fields(TokenUsage)],
            "run_result_usage_keys": sorted(RunResult("s", "r").to_dict()["usage"]),
            "run_result_keys": sorted(RunResult("s", "r").to_dict()),
            "pending_tool": pending.to_dict(),
            "pending_tool_defaults": [pending.concurrent, pending.timeout_seconds, pending.retry],
            "unknown_execution_key": [
                str(UnknownExecutionKey("k")) != "'k'",
                UnknownExecutionKey("k").execution_key,
            ],
            "run_failed": run_failed,
            "resume_missing": missing,
            "registration": type(registration).__name__,
            "middleware_pipeline": type(agent.middleware).__name__,
            "hook_manager": type(agent.hooks).__name__,
            "registered_provider": asyncio.run(registered_provider()),
        }
    )


main()
