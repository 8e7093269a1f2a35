"""The original harnessx's ``harnessx.errors``: every error harnessx raises on purpose.

Everything here is also importable from ``harnessx``; the hierarchy is drawn in
``harnessx._errors``.
"""

from __future__ import annotations

from harnessx._errors import (
    ConfigurationError,
    ContextOverflowError,
    CostLimitError,
    HarnessError,
    IncompleteStreamError,
    LeaseLostError,
    MalformedToolInputError,
    MaxIterationsError,
    ProviderError,
    ResolutionError,
    RunAwaitingInput,
    RunCancelled,
    RunError,
    RunFailed,
    RunLimitReached,
    RunPaused,
    RunRefused,
    RuntimeStateError,
    RunTruncated,
    SchemaError,
    SessionBusyError,
    StorageError,
    ToolApprovalRequired,
    TransientToolError,
    UnknownExecutionKey,
)

__all__ = [
    "ConfigurationError",
    "ContextOverflowError",
    "CostLimitError",
    "HarnessError",
    "IncompleteStreamError",
    "LeaseLostError",
    "MalformedToolInputError",
    "MaxIterationsError",
    "ProviderError",
    "ResolutionError",
    "RunAwaitingInput",
    "RunCancelled",
    "RunError",
    "RunFailed",
    "RunLimitReached",
    "RunPaused",
    "RunRefused",
    "RunTruncated",
    "RuntimeStateError",
    "SchemaError",
    "SessionBusyError",
    "StorageError",
    "ToolApprovalRequired",
    "TransientToolError",
    "UnknownExecutionKey",
]
