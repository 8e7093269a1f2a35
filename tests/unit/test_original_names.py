"""The original harnessx 0.9.1's module paths and public names, and what importing one of
its unsupported features says."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import harnessx

MODULES = {
    "harnessx.types": [
        "AgentConfig",
        "Limits",
        "RetryPolicy",
        "ToolRetry",
        "ToolPolicy",
        "ProgressPolicy",
        "LoopGuard",
        "Fallback",
        "PromptCachePolicy",
        "PromptCacheHint",
        "RuntimeConfig",
        "RuntimeState",
        "SessionState",
        "ToolDefinition",
        "ToolCall",
        "ToolResult",
        "TokenUsage",
        "ProviderResponse",
        "StopReason",
        "StreamChunk",
        "PermissionLevel",
        "ReplayPolicy",
        "DEFAULT_TIMEOUT_SECONDS",
        "DEFAULT_TOOL_TIMEOUT_SECONDS",
    ],
    "harnessx.errors": [
        "HarnessError",
        "ConfigurationError",
        "RuntimeStateError",
        "ResolutionError",
        "UnknownExecutionKey",
        "TransientToolError",
        "IncompleteStreamError",
        "ContextOverflowError",
        "MalformedToolInputError",
        "RunError",
        "RunFailed",
        "RunAwaitingInput",
        "RunTruncated",
        "RunLimitReached",
        "RunRefused",
        "RunCancelled",
    ],
    "harnessx.execution": [
        "RunEvent",
        "RunEventType",
        "RunResult",
        "RunStatus",
        "RunStream",
        "RunFailure",
        "PendingTool",
        "ToolApprovalRequired",
        "ToolExecutionContext",
        "current_tool_context",
        "current_agent",
        "wire",
    ],
    "harnessx.runtime": ["AgentRuntime", "RunHandle"],
    "harnessx.durable": [
        "AgentRuntime",
        "RunHandle",
        "AgentRef",
        "AgentRegistry",
        "agents",
        "RuntimeConfig",
        "RuntimeState",
        "RuntimeStatus",
        "PendingTool",
        "RunEvent",
        "RunEventType",
        "RunResult",
        "RunStatus",
        "RunStream",
        "current_tool_context",
        "SQLiteBackend",
        "PostgresBackend",
        "SchemaError",
        "StorageError",
        "SessionBusyError",
        "LeaseLostError",
        "ResolutionError",
        "RunAwaitingInput",
        "RunTruncated",
        "RuntimeStateError",
        "UnknownExecutionKey",
        "IncidentRecorder",
        "ExportPolicy",
        "BundleLimits",
        "IncidentError",
        "VerificationReport",
        "Playback",
        "RecordingError",
        "export_incident",
    ],
    "harnessx.recorder": ["IncidentRecorder", "IncidentError", "export_incident"],
    "harnessx.core": ["Agent"],
    "harnessx.extensions": ["Extension", "ExtensionContext", "ResultSpillExtension"],
    "harnessx.extensions.base": ["Extension", "ExtensionContext"],
    "harnessx.extensions.result_spill": ["ResultSpillExtension"],
    "harnessx.registry": ["AgentRef", "AgentRegistry", "agents"],
    "harnessx.tools": ["ToolRegistry", "ToolNotFoundError", "normalize_tool_registry"],
    "harnessx.permissions": [
        "PermissionManager",
        "CliPermissionManager",
        "MaxIterationsError",
        "CostLimitError",
    ],
    "harnessx.memory": ["ConversationMemory", "PersistentMemory"],
    "harnessx.messages": ["Message"],
    "harnessx.loopguard": ["call_signature", "detect_cycle"],
    "harnessx.hooks": ["HookEvent", "HookManager", "HookContext", "Middleware", "HOOK_PAYLOADS"],
    "harnessx.models": [
        "ModelLimits",
        "register_model_limits",
        "lookup_model_limits",
        "resolve_model_limits",
    ],
    "harnessx.backends": [
        "SQLiteBackend",
        "PostgresBackend",
        "SchemaError",
        "StorageError",
        "SessionBusyError",
        "LeaseLostError",
    ],
    "harnessx.backends.store": ["StorageError", "SessionBusyError", "LeaseLostError", "SchemaError"],
    "harnessx.backends.sqlite": ["SQLiteBackend"],
    "harnessx.backends.postgres": ["PostgresBackend"],
    "harnessx.providers": ["LLMProvider", "AnthropicProvider", "OpenAIProvider"],
    "harnessx.providers.base": [
        "LLMProvider",
        "ProviderResponse",
        "make_provider",
        "INVALID_ARGUMENTS",
        "parse_tool_arguments",
    ],
    "harnessx.providers.anthropic": ["AnthropicProvider"],
    "harnessx.providers.openai": ["OpenAIProvider"],
}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_original_module_paths_export_their_names(module: str) -> None:
    imported = importlib.import_module(module)
    for name in MODULES[module]:
        assert getattr(imported, name) is not None, f"{module}.{name}"
    declared = getattr(imported, "__all__", None)
    if declared is not None:
        assert sorted(set(declared)) == sorted(declared)
        assert all(hasattr(imported, name) for name in declared)


def test_the_same_objects_under_every_name() -> None:
    from harnessx.durable import AgentRuntime
    from harnessx.execution import ToolExecutionContext
    from harnessx.types import AgentConfig

    assert AgentRuntime is harnessx.AgentRuntime and AgentConfig is harnessx.AgentConfig
    # ``ToolContext`` is this project's name; the original's is an alias of it.
    assert ToolExecutionContext is harnessx.ToolContext
    context = ToolExecutionContext("s", "r", "r:1:c", 1)
    assert (context.session_id, context.execution_key, context.attempt, context.fencing_token) == (
        "s",
        "r:1:c",
        1,
        None,
    )


@pytest.mark.parametrize(
    ("statement", "feature"),
    [
        ("from harnessx import GitSource", "knowledge bundles"),
        ("from harnessx import SubAgent", "subagents"),
        ("from harnessx import MCPManager", "MCP servers"),
        ("from harnessx import Sandbox", "sandboxes"),
        ("from harnessx import LangSmithExtension", "LangSmith tracing"),
        ("from harnessx.extensions.langsmith import LangSmithExtension", "LangSmith tracing"),
        ("from harnessx import SkillManager", "skills"),
        ("from harnessx.knowledge import GitSource", "knowledge bundles"),
        ("import harnessx.mcp", "MCP servers"),
        ("from harnessx.builtin.filesystem import register_filesystem_tools", "built-in tool bundles"),
        ("from harnessx.messages import MEDIA_KINDS", "media content blocks"),
        ("from harnessx.execution import apply_accounting", "internal to the original harnessx 0.9.1"),
        ("from harnessx.providers.gemini import GeminiProvider", "Gemini"),
        ("from harnessx.backends.temporal_workflow import AgentSessionWorkflow", "Temporal"),
        ("from harnessx.evals import evaluate_agent", "evals"),
        ("from harnessx.engine import execute_tool", "internal module"),
    ],
)
@pytest.mark.slow  # a fresh Python process per statement
def test_unsupported_features_say_so_on_import(statement: str, feature: str) -> None:
    # A fresh interpreter: the import machinery's caches must not decide the outcome.
    done = subprocess.run([sys.executable, "-c", statement], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "ImportError" in done.stderr and feature in done.stderr
    assert "docs/compatibility.md" in done.stderr


def test_a_name_that_never_existed_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        harnessx.NoSuchThing  # noqa: B018
    with pytest.raises(ImportError, match="cannot import name"):
        exec("from harnessx import NoSuchThing")
    with pytest.raises(ImportError, match="cannot import name"):
        exec("from harnessx.execution import NoSuchThing")
    assert not hasattr(importlib.import_module("harnessx.messages"), "NoSuchThing")


def test_an_unsupported_agent_argument_is_refused_clearly() -> None:
    with pytest.raises(harnessx.ConfigurationError, match="subagents of the original harnessx"):
        harnessx.Agent(subagents=[object()])
    with pytest.raises(harnessx.ConfigurationError, match="built-in tool bundles"):
        harnessx.Agent(tools=["filesystem"])


def test_harnessx_hooks_is_the_original_module() -> None:
    """0.9.1's tests and programs import hooks, their payload types and middleware from
    ``harnessx.hooks``; the payload types name each built-in event's keys."""
    from harnessx import HookEvent
    from harnessx.hooks import HOOK_PAYLOADS, HookManager, Middleware, RecoveryData

    assert set(HOOK_PAYLOADS) == set(HookEvent)
    assert set(HOOK_PAYLOADS[HookEvent.RECOVERY].__annotations__) == {"reason", "attempt", "reply_budget"}
    assert RecoveryData is HOOK_PAYLOADS[HookEvent.RECOVERY]
    assert HookManager.__module__ == "harnessx._hooks" and Middleware.__module__ == "harnessx._middleware"
