"""What the sweep of 0.9.1's public surface (tests/compat/surface_sweep.py) found missing:
the names 0.9.1's modules imported and programs import from them, 0.9.1's parameter names
and positions, defaults and constants, each checked against what 0.9.1 does."""

from __future__ import annotations

import importlib

import pytest

import harnessx
import harnessx.core
import harnessx.errors
from harnessx import (
    Agent,
    GuardrailsEngine,
    Limits,
    PermissionLevel,
    RuntimeState,
    RuntimeStatus,
    ScriptedProvider,
    ToolDefinition,
    ToolResult,
    ToolRetry,
)
from harnessx.builtin import planning
from harnessx.tools import ToolRegistry

# module -> names 0.9.1's module had by importing them (each the object harnessx exports).
IMPORTED_THERE = {
    "harnessx.types": ["ConfigurationError", "CheckpointData", "RuntimeStatus"],
    "harnessx.execution": [
        "HarnessError",
        "RunAwaitingInput",
        "RunCancelled",
        "RunError",
        "RunFailed",
        "RunLimitReached",
        "RunRefused",
        "RunTruncated",
        "TokenUsage",
        "ToolCall",
        "ToolCallDelta",
        "ToolResult",
        "ToolRetry",
        "DEFAULT_TIMEOUT_SECONDS",
    ],
    "harnessx.runtime": [
        "Agent",
        "AgentConfig",
        "AgentRef",
        "AgentRegistry",
        "agents",
        "ConfigurationError",
        "HookEvent",
        "PendingTool",
        "ResolutionError",
        "RunEvent",
        "RunEventType",
        "RunResult",
        "RunStream",
        "RuntimeConfig",
        "RuntimeState",
        "RuntimeStateError",
        "SQLiteBackend",
        "SessionBusyError",
        "UnknownExecutionKey",
    ],
    "harnessx.backends.sqlite": ["LeaseLostError", "SchemaError", "SessionBusyError", "StorageError"],
    "harnessx.backends.postgres": ["LeaseLostError", "SchemaError", "SessionBusyError", "StorageError"],
    "harnessx.backends.store": ["HarnessError", "RunEvent"],
    "harnessx.core": [
        "AgentConfig",
        "ConfigurationError",
        "ConversationMemory",
        "Extension",
        "GuardrailsEngine",
        "HookManager",
        "LLMProvider",
        "MiddlewarePipeline",
        "PermissionLevel",
        "PermissionManager",
        "PersistentMemory",
        "RunResult",
        "RunStream",
        "RuntimeStateError",
        "SessionState",
        "ToolRegistry",
    ],
    "harnessx.extensions.base": [
        "AgentConfig",
        "ConversationMemory",
        "HookEvent",
        "HookManager",
        "Middleware",
        "MiddlewarePipeline",
        "PermissionLevel",
        "Registration",
        "ReplayPolicy",
        "ToolRegistry",
        "ToolResult",
        "ToolRetry",
    ],
    "harnessx.extensions.result_spill": ["Extension", "Middleware", "PermissionLevel", "ToolResult"],
    "harnessx.memory": ["SessionState", "TokenUsage"],
    "harnessx.permissions": ["HarnessError", "TokenUsage", "ToolCall", "ToolDefinition"],
    "harnessx.providers.anthropic": [
        "IncompleteStreamError",
        "LLMProvider",
        "ModelLimits",
        "PromptCacheHint",
        "ProviderResponse",
        "StopReason",
        "StreamChunk",
        "TokenUsage",
        "ToolCall",
        "ToolCallDelta",
    ],
    "harnessx.providers.base": ["ModelLimits", "PromptCacheHint"],
    "harnessx.providers.openai": [
        "IncompleteStreamError",
        "LLMProvider",
        "PromptCacheHint",
        "ProviderResponse",
        "StopReason",
        "StreamChunk",
        "TokenUsage",
        "ToolCall",
        "ToolCallDelta",
        "ToolChoice",
    ],
    "harnessx.providers.fallback": ["LLMProvider", "PromptCacheHint", "ProviderResponse", "StreamChunk"],
    "harnessx.recorder": ["HarnessError", "RunEvent"],
    "harnessx.tools": [
        "HarnessError",
        "PermissionLevel",
        "PermissionManager",
        "ReplayPolicy",
        "ToolCall",
        "ToolPolicy",
        "ToolResult",
        "ToolRetry",
        "TransientToolError",
        "DEFAULT_TOOL_TIMEOUT_SECONDS",
    ],
}


def exported(name: str) -> object:
    """The object harnessx (or, for its errors, harnessx.errors) exports as ``name``."""
    return getattr(harnessx, name) if hasattr(harnessx, name) else getattr(harnessx.errors, name)


@pytest.mark.parametrize("module", sorted(IMPORTED_THERE))
def test_names_0_9_1_imported_into_a_module_import_from_it(module: str) -> None:
    imported = importlib.import_module(module)
    for name in IMPORTED_THERE[module]:
        assert getattr(imported, name) is exported(name), f"{module}.{name}"


def test_functions_and_constants_0_9_1_imported_into_a_module() -> None:
    from harnessx import engine, execution, models, registry
    from harnessx.memory import DEFAULT_PREVIEW_LINES, Message
    from harnessx.messages import Message as message_class
    from harnessx.providers import base, fallback, retry
    from harnessx.providers.anthropic import INVALID_ARGUMENTS, lookup_model_limits
    from harnessx.recorder import FORMAT, VERSION
    from harnessx.runtime import agents, cancel_state, new_state, restore, result_from_state
    from harnessx.tools import is_transient, is_transient_text

    assert Message is message_class and DEFAULT_PREVIEW_LINES == 20
    assert (INVALID_ARGUMENTS, lookup_model_limits) == (base.INVALID_ARGUMENTS, models.lookup_model_limits)
    assert (FORMAT, VERSION) == ("harness-x.incident", 1)
    assert agents is registry.agents and result_from_state is execution.result_from_state
    assert (new_state, restore, cancel_state) == (engine.new_state, engine.restore, execution.cancel_state)
    assert (is_transient, is_transient_text) == (retry.is_transient, retry.is_transient_text)
    assert base.DEFAULT_MAX_TOKENS == base.DEFAULT_OUTPUT_CAP == models.DEFAULT_OUTPUT_CAP == 32_000
    assert base.BUILTIN_PROVIDERS == harnessx.core.BUILTIN_PROVIDERS == ("anthropic", "openai")
    assert base.retry_after_seconds is fallback.retry_after_seconds is retry.retry_after_seconds
    assert fallback.resolve_model_limits is models.resolve_model_limits
    assert fallback.MemberSpec == harnessx.Fallback | harnessx.LLMProvider | str


def test_the_openai_module_offers_parse_tool_arguments_as_0_9_1s() -> None:
    # 0.9.1's harnessx.providers.openai imported it from providers.base (the sweep found it
    # missing once it was run against an original venv with the openai package).
    from harnessx.providers import base
    from harnessx.providers.openai import normalize_tool_choice, parse_tool_arguments

    assert parse_tool_arguments is base.parse_tool_arguments
    assert normalize_tool_choice is base.normalize_tool_choice
    assert parse_tool_arguments('{"a": 1}') == {"a": 1}


def test_importing_the_providers_package_reaches_its_public_modules_as_0_9_1s() -> None:
    # 0.9.1's package imported them, so `import harnessx.providers` alone gave programs
    # `harnessx.providers.openai.OpenAIProvider`; a fresh interpreter, as nothing else may
    # have imported them yet.
    import subprocess
    import sys

    program = (
        "import harnessx.providers as p\n"
        "print(p.openai.OpenAIProvider is p.OpenAIProvider,"
        " p.anthropic.AnthropicProvider is p.AnthropicProvider,"
        " p.base.LLMProvider is p.LLMProvider, p.fallback.FallbackProvider is p.FallbackProvider,"
        " callable(p.registry.register_provider), callable(p.retry.is_transient))"
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True"] * 6


def test_runtime_status_starts_initializing_as_0_9_1s() -> None:
    status = RuntimeStatus("s")
    assert status.state is RuntimeState.INITIALIZING
    assert harnessx.types.RuntimeStatus is RuntimeStatus


def test_guardrails_name_their_default_prices_and_a_subclass_may_change_them() -> None:
    assert (GuardrailsEngine.INPUT_COST_PER_M, GuardrailsEngine.OUTPUT_COST_PER_M) == (3.0, 15.0)

    class Cheaper(GuardrailsEngine):
        INPUT_COST_PER_M = 1.0

    engine = Cheaper()
    assert (engine.input_cost_per_m, engine.output_cost_per_m) == (1.0, 15.0)
    assert GuardrailsEngine(input_cost_per_m=2.0).input_cost_per_m == 2.0


def test_limits_positional_arguments_mean_what_they_mean_in_0_9_1() -> None:
    # 0.9.1's order: max_iterations, max_context_tokens, max_result_chars, max_cost_dollars,
    # input_cost_per_m, output_cost_per_m, cache multipliers, loop_guard, recoveries, final answer.
    limits = Limits(50, None, 12_000, 5.0, 1.0, 2.0, 0.2, 1.5, harnessx.LoopGuard(), 2, False)
    assert (limits.max_cost_dollars, limits.input_cost_per_m, limits.output_cost_per_m) == (5.0, 1.0, 2.0)
    assert (limits.cache_read_cost_multiplier, limits.cache_write_cost_multiplier) == (0.2, 1.5)
    assert (limits.max_truncation_recoveries, limits.final_answer_on_limit) == (2, False)
    assert limits.max_stored_chars == 10_000_000


async def test_a_run_takes_its_message_as_user_message() -> None:
    agent = Agent(provider=ScriptedProvider(["One.", "Two.", "Three."]))
    async with agent:
        result = await agent.run(user_message="Hello")
        async with agent.run_stream(user_message="Again") as stream:
            streamed = await stream.result()
        text = "".join([chunk async for chunk in agent.stream_text(user_message="Last")])
    assert (result.output, streamed.output, text) == ("One.", "Two.", "Three.")
    assert [m["content"] for m in agent.memory.get_messages() if m["role"] == "user"] == [
        "Hello",
        "Again",
        "Last",
    ]


def test_planning_tools_chosen_by_include_and_exclude_with_a_permission() -> None:
    registry = ToolRegistry()
    assert planning.register_planning_tools(
        registry, include=["read_todos"], permission=PermissionLevel.ASK
    ) == ["read_todos"]
    assert registry.list_tools() == ["read_todos"]
    assert registry.get_tool("read_todos").permission_level is PermissionLevel.ASK
    assert planning.register_planning_tools(ToolRegistry(), exclude=["read_todos", "write_todos"]) == []

    loaded = ToolRegistry()
    assert loaded.load_builtin("planning", exclude=["read_todos"], permission=PermissionLevel.DENY) == [
        "write_todos"
    ]
    assert loaded.get_tool("write_todos").permission_level is PermissionLevel.DENY
    assert ToolRegistry().load_builtin("Todos") == ["write_todos", "read_todos"]
    assert ToolRegistry().load_builtin("write_todos", exclude=["write_todos"]) == []


def test_planning_tool_choices_refused_as_0_9_1_refuses_them() -> None:
    with pytest.raises(TypeError, match="include must be a collection of tool names"):
        planning.register_planning_tools(ToolRegistry(), include="write_todos")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Unknown tool names in exclude: \['nope'\]"):
        planning.register_planning_tools(ToolRegistry(), exclude=["nope"])
    # One tool of the bundle: include and exclude may name only it.
    with pytest.raises(
        ValueError, match=r"Unknown tool names in include: \['read_todos'\]; available: \['write"
    ):
        ToolRegistry().load_builtin("write_todos", include=["read_todos"])


def test_planning_guidance_is_a_prompt_provider_and_the_item_schema_is_the_tools() -> None:
    registry = ToolRegistry()
    provide = planning.planning_guidance(registry)
    assert provide() == ""
    planning.register_planning_tools(registry)
    assert provide() == planning.PLANNING_GUIDANCE
    assert planning.WRITE_TODOS_SCHEMA["properties"]["todos"]["items"] == planning.TODO_ITEM_SCHEMA
    assert planning.MAX_CONTENT_CHARS == 200


def test_retry_wanted_reads_a_tools_result_as_a_run_does() -> None:
    from harnessx.tools import retry_wanted

    def handler() -> str:
        return "ok"

    plain = ToolDefinition("t", "", {"type": "object"}, handler)
    picky = ToolDefinition(
        "t", "", {"type": "object"}, handler, retry_if_result=lambda r: "later" in r.content
    )
    throttled = ToolResult("c", "429 Too Many Requests", True)
    assert retry_wanted(picky, ToolRetry(), ToolResult("c", "try later"))
    assert not retry_wanted(plain, ToolRetry(), throttled)
    assert retry_wanted(plain, ToolRetry(retry_error_results=True), throttled)
    assert not retry_wanted(plain, ToolRetry(retry_error_results=True), ToolResult("c", "bad input", True))


def test_a_postgres_backend_takes_its_dsn_as_connection_string() -> None:
    from harnessx.backends.postgres import PostgresBackend

    dsn = "postgresql://u@localhost:5432/db"
    assert PostgresBackend(connection_string=dsn).schema == "harness_x"
    with pytest.raises(harnessx.ConfigurationError, match="not both"):
        PostgresBackend(dsn, connection_string=dsn)
    with pytest.raises(harnessx.ConfigurationError, match="needs a DSN"):
        PostgresBackend()
