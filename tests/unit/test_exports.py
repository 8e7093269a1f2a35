"""The public surface: what COMPATIBILITY.md promises is importable, and nothing by accident."""

from __future__ import annotations

import importlib
import pkgutil

import harnessx

# Names from COMPATIBILITY.md's Agent, tools, results and events sections.
PROMISED = [
    "Agent",
    "AgentConfig",
    "Limits",
    "RetryPolicy",
    "LLMProvider",
    "ProviderResponse",
    "ToolCall",
    "TokenUsage",
    "StopReason",
    "StreamChunk",
    "ToolRegistry",
    "PermissionLevel",
    "ReplayPolicy",
    "current_tool_context",
    "TransientToolError",
    "RunStatus",
    "RunResult",
    "PendingTool",
    "ToolResult",
    "RunTruncated",
    "RunLimitReached",
    "RunRefused",
    "RunFailed",
    "RunAwaitingInput",
    "RunCancelled",
    "RunError",
    "HarnessError",
    "ConfigurationError",
    "RuntimeStateError",
    "ResolutionError",
    "UnknownExecutionKey",
    "StorageError",
    "SessionBusyError",
    "LeaseLostError",
    "SchemaError",
    "RunEvent",
    "RunEventType",
    "HookEvent",
    "HookContext",
    "RunStream",
    "ScriptedProvider",
]


def test_promised_names_import() -> None:
    missing = [name for name in PROMISED if not hasattr(harnessx, name)]
    assert missing == []


def test_all_is_sorted_and_complete() -> None:
    assert list(harnessx.__all__) == sorted(harnessx.__all__)
    for name in harnessx.__all__:
        assert hasattr(harnessx, name), name


def test_private_modules_declare_all() -> None:
    for module_info in pkgutil.walk_packages(harnessx.__path__, "harnessx."):
        if module_info.name.endswith("__main__"):
            continue  # running it is its purpose
        module = importlib.import_module(module_info.name)
        if module_info.name.rsplit(".", 1)[-1].startswith("_") and not module_info.ispkg:
            assert hasattr(module, "__all__"), module_info.name


def test_error_hierarchy() -> None:
    # The second bases of harnessx 0.9.1, so that its programs' except clauses still catch.
    assert issubclass(harnessx.ConfigurationError, ValueError)
    assert issubclass(harnessx.UnknownExecutionKey, KeyError)
    assert issubclass(harnessx.RuntimeStateError, RuntimeError)
    assert issubclass(harnessx.ResolutionError, ValueError)
    assert issubclass(harnessx.StorageError, RuntimeError)
    assert issubclass(harnessx.ToolApprovalRequired, RuntimeError)
    assert issubclass(harnessx.ToolNotFoundError, LookupError)
    assert harnessx.UnknownExecutionKey("k").execution_key == "k"
    for name in ("SessionBusyError", "LeaseLostError", "SchemaError"):
        assert issubclass(getattr(harnessx, name), harnessx.StorageError)
    for name in (
        "RunTruncated",
        "RunLimitReached",
        "RunRefused",
        "RunFailed",
        "RunAwaitingInput",
        "RunCancelled",
    ):
        assert issubclass(getattr(harnessx, name), harnessx.RunError)
    assert issubclass(harnessx.StorageError, harnessx.HarnessError)


def test_enum_values() -> None:
    assert [s.value for s in harnessx.RunStatus] == [
        "running",
        "completed",
        "paused",
        "awaiting_input",
        "cancelled",
        "failed",
    ]
    assert {p.value for p in harnessx.PermissionLevel} == {"allow", "ask", "deny"}
    assert {p.value for p in harnessx.ReplayPolicy} == {"safe", "idempotent", "manual"}
    assert {s.value for s in harnessx.StopReason} == {
        "end_turn",
        "tool_use",
        "max_tokens",
        "stop_sequence",
        "safety",
        "refusal",
        "pause_turn",
        "other",
    }
    assert {e.value for e in harnessx.RunEventType} == {
        "text_delta",
        "text_complete",
        "thinking_delta",
        "tool_call_start",
        "tool_call_complete",
        "tool_result",
        "turn_complete",
        "error",
        "approval_required",
        "recovery_required",
        "attempt_reset",
        "todos_updated",
        "waiting",
        "run_result",
        "tool_call_delta",
        "gap",
    }
    assert harnessx.HookEvent.CHECKPOINT.value == "checkpoint"
