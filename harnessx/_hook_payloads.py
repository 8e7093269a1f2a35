"""What ``HookContext.data`` holds for each built-in ``HookEvent``, as typed dicts.

The keys are harnessx 0.9.1's, so a program that casts ``ctx.data`` to one of these (or
reads ``HOOK_PAYLOADS[event].__annotations__`` to learn an event's keys) works here. The
context's ``data`` itself stays a plain dict: a custom event may carry anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, TypedDict, Union

from harnessx._hooks import HookEvent

if TYPE_CHECKING:
    from harnessx._results import RunResult, ToolResult
    from harnessx.providers._base import ProviderResponse, ToolCall

__all__ = [
    "HOOK_PAYLOADS",
    "AgentEndData",
    "AgentStartData",
    "CheckpointEventData",
    "ContextCondensedData",
    "ErrorData",
    "HookData",
    "KnowledgeAccessedData",
    "LLMRequestData",
    "LLMResponseData",
    "LoopIterationData",
    "RecoveryData",
    "RepetitionData",
    "RetryData",
    "SandboxExecData",
    "SkillInvokedData",
    "TodosUpdatedData",
    "ToolCallEndData",
    "ToolCallStartData",
]


class AgentStartData(TypedDict):
    message: str


class AgentEndData(TypedDict):
    result: RunResult


class LoopIterationData(TypedDict):
    iteration: int


class LLMRequestData(TypedDict):
    system: str | None
    model: str
    max_tokens: int | None
    temperature: float | None
    stream: bool
    message_count: int
    tool_count: int
    prefix_key: str | None


class LLMResponseData(TypedDict):
    response: ProviderResponse
    stop_reason: Any
    # The provider that answered: a fallback chain names the member that did.
    provider: str


class ContextCondensedData(TypedDict):
    messages_dropped: int
    summary_chars: int
    summarized: bool


class RepetitionData(TypedDict):
    period: int
    laps: int
    tool: str


RecoveryReason = Literal[
    "truncated_tool_call",
    "truncated_text",
    "empty_reply",
    "reply_limit",
    "context_overflow",
    "context_overflow_spill",
    "spurious_overflow",
    "paused_turn",
    "malformed_tool_input",
    "iteration_limit",
    "unfinished_plan",
]


class RecoveryData(TypedDict):
    """The loop went on after a reply or request hit a limit (``reason`` says which)."""

    reason: RecoveryReason
    attempt: int
    reply_budget: int | None


class TodosUpdatedData(TypedDict):
    todos: list[dict[str, str]]
    completed: int
    total: int
    in_progress: str | None


class RetryData(TypedDict):
    kind: Literal["model", "tool"]
    name: str
    attempt: int
    next_attempt: int
    wait_seconds: float
    error: str
    provider: str | None


class ToolCallStartData(TypedDict):
    tool_call: ToolCall


class ToolCallEndData(TypedDict):
    tool_call: ToolCall
    result: ToolResult


class ErrorData(TypedDict):
    error: str


class SkillInvokedData(TypedDict, total=False):
    skill: str
    found: bool
    source_path: str
    body_chars: int


class KnowledgeAccessedData(TypedDict, total=False):
    tool: str
    bundle: str
    query: str
    path: str
    hits: int
    found: bool
    body_chars: int


class SandboxExecData(TypedDict):
    kind: str
    tier: str
    exit_code: int
    timed_out: bool
    execution_time_ms: float
    denials: list[str]


class CheckpointEventData(TypedDict):
    session_id: str
    run_id: str
    status: str
    phase: str


HookData = Union[  # noqa: UP007 - a runtime alias, as 0.9.1 spells it
    AgentStartData,
    AgentEndData,
    LoopIterationData,
    LLMRequestData,
    LLMResponseData,
    ToolCallStartData,
    ToolCallEndData,
    ErrorData,
    SkillInvokedData,
    KnowledgeAccessedData,
    SandboxExecData,
    CheckpointEventData,
    RetryData,
    ContextCondensedData,
    RepetitionData,
    RecoveryData,
    TodosUpdatedData,
]

HOOK_PAYLOADS: dict[HookEvent, type] = {
    HookEvent.AGENT_START: AgentStartData,
    HookEvent.AGENT_END: AgentEndData,
    HookEvent.LOOP_ITERATION_START: LoopIterationData,
    HookEvent.LOOP_ITERATION_END: LoopIterationData,
    HookEvent.LLM_REQUEST: LLMRequestData,
    HookEvent.LLM_RESPONSE: LLMResponseData,
    HookEvent.TOOL_CALL_START: ToolCallStartData,
    HookEvent.TOOL_CALL_END: ToolCallEndData,
    HookEvent.ERROR: ErrorData,
    HookEvent.SKILL_INVOKED: SkillInvokedData,
    HookEvent.KNOWLEDGE_ACCESSED: KnowledgeAccessedData,
    HookEvent.SANDBOX_EXEC: SandboxExecData,
    HookEvent.CHECKPOINT: CheckpointEventData,
    HookEvent.RETRY: RetryData,
    HookEvent.CONTEXT_CONDENSED: ContextCondensedData,
    HookEvent.REPETITION: RepetitionData,
    HookEvent.RECOVERY: RecoveryData,
    HookEvent.TODOS_UPDATED: TodosUpdatedData,
}
