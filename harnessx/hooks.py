"""The original harnessx's ``harnessx.hooks``: hooks, their payloads, and middleware."""

from __future__ import annotations

from harnessx._hook_payloads import (
    HOOK_PAYLOADS,
    AgentEndData,
    AgentStartData,
    CheckpointEventData,
    ContextCondensedData,
    ErrorData,
    HookData,
    KnowledgeAccessedData,
    LLMRequestData,
    LLMResponseData,
    LoopIterationData,
    RecoveryData,
    RepetitionData,
    RetryData,
    SandboxExecData,
    SkillInvokedData,
    TodosUpdatedData,
    ToolCallEndData,
    ToolCallStartData,
)
from harnessx._hooks import HookCallback, HookContext, HookEvent, HookManager, Registration
from harnessx._middleware import Middleware, MiddlewarePipeline

__all__ = [
    "HOOK_PAYLOADS",
    "AgentEndData",
    "AgentStartData",
    "CheckpointEventData",
    "ContextCondensedData",
    "ErrorData",
    "HookCallback",
    "HookContext",
    "HookData",
    "HookEvent",
    "HookManager",
    "KnowledgeAccessedData",
    "LLMRequestData",
    "LLMResponseData",
    "LoopIterationData",
    "Middleware",
    "MiddlewarePipeline",
    "RecoveryData",
    "Registration",
    "RepetitionData",
    "RetryData",
    "SandboxExecData",
    "SkillInvokedData",
    "TodosUpdatedData",
    "ToolCallEndData",
    "ToolCallStartData",
]
