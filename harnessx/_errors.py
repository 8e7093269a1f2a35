"""Every exception harnessx raises on purpose.

::

    HarnessError
    ├── ConfigurationError (also ValueError)   bad input from the caller or a config mismatch
    ├── RuntimeStateError                      a verb called in a state that forbids it
    ├── ResolutionError                        resolve_tool called without exactly one choice
    ├── UnknownExecutionKey (also KeyError)    no pending tool has that execution key
    ├── TransientToolError                     a tool failed and had no effect; may be retried
    ├── MaxIterationsError, CostLimitError     a run's limits stopped it (the run's error type)
    ├── IncompleteStreamError (ConnectionError) a streamed reply stalled or ended early
    ├── ContextOverflowError (also ValueError) a request did not fit the model's window
    ├── MalformedToolInputError (ValueError)   a streamed tool call's arguments were unreadable
    ├── ProviderError                          the model provider failed after its retries
    ├── StorageError                           the store failed or refused a write
    │   ├── SessionBusyError                   another run or another live process holds it
    │   ├── LeaseLostError                     the writer's lease no longer holds (fenced)
    │   ├── LeadershipLostError                a newer leader took over; the leader's write was refused
    │   ├── SchemaError                        the database schema is missing, newer or altered
    │   └── CorruptStateError                  a stored row does not decode or breaks a run's rules
    └── RunError                               a run ended other than ``ok``; carries ``.result``
        ├── RunFailed
        ├── RunAwaitingInput
        ├── RunTruncated
        ├── RunLimitReached
        ├── RunRefused
        ├── RunCancelled
        └── RunPaused

``LeaseLostError`` and cancellation must stop a run even inside tool code that catches
``Exception``; the driver therefore re-checks the lease and the control flag itself after
every tool returns instead of trusting the exception to propagate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harnessx._results import RunResult

__all__ = [
    "ConfigurationError",
    "ContextOverflowError",
    "CorruptStateError",
    "CostLimitError",
    "HarnessError",
    "IncompleteStreamError",
    "LeadershipLostError",
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


class HarnessError(Exception):
    """Base class of every error harnessx raises on purpose."""


class ConfigurationError(HarnessError, ValueError):
    """The caller's input or configuration is wrong; the message says what to change."""


class RuntimeStateError(HarnessError):
    """The operation is not allowed in the object's current state."""


class ResolutionError(HarnessError):
    """``resolve_tool`` needs exactly one of ``result=``, ``retry=True`` or ``abort=True``."""


class UnknownExecutionKey(HarnessError, KeyError):
    """No pending tool call has the given execution key."""

    def __str__(self) -> str:
        # KeyError quotes its argument; keep the message readable.
        return str(self.args[0]) if self.args else ""


class ToolApprovalRequired(HarnessError, RuntimeError):
    """A permission changed between a call's preparation and its dispatch so that it now
    needs an approval of its own."""


class TransientToolError(HarnessError):
    """Raised by a tool handler: the call failed *and had no effect*, so it may be retried."""


class MaxIterationsError(HarnessError):
    """A run reached ``Limits.max_iterations`` with ``final_answer_on_limit=False``."""


class CostLimitError(HarnessError):
    """A run's estimated cost reached ``Limits.max_cost_dollars``."""


class IncompleteStreamError(HarnessError, ConnectionError):
    """A streamed reply stalled, or ended before the provider said it was complete; retried
    like a dropped connection."""


class ContextOverflowError(HarnessError, ValueError):
    """The request did not fit the model's context window."""

    def __init__(
        self, message: str, *, estimated_tokens: int | None = None, context_window: int | None = None
    ) -> None:
        super().__init__(message)
        self.estimated_tokens = estimated_tokens
        self.context_window = context_window


class MalformedToolInputError(HarnessError, ValueError):
    """A streamed tool call's arguments could not be read as JSON."""

    def __init__(self, message: str, *, name: str | None = None, raw_json: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.raw_json = raw_json


class ProviderError(HarnessError):
    """The model provider returned an error or could not be reached after retries."""

    def __init__(self, message: str, *, status_code: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.status_code = status_code
        self.retryable = retryable


class StorageError(HarnessError):
    """The store failed, or refused a write."""


class SessionBusyError(StorageError):
    """The session already has an unfinished run, or another live process holds its lease."""


class LeaseLostError(StorageError):
    """The writer's lease expired or was taken over; nothing was written."""


class LeadershipLostError(StorageError):
    """A newer leader of the role took over (a newer epoch is stored): the write a leader made
    as leader was refused and nothing was written. The process is no longer the leader."""


class SchemaError(StorageError):
    """The database schema is missing, older, newer, or not the one harnessx created."""


class CorruptStateError(StorageError):
    """A stored row does not decode, or the run it belongs to breaks the rules every run
    keeps (edited by hand, written by something else, damaged on disk). Nothing drives such
    a run; it can still be cancelled, and its events read."""


class RunError(HarnessError):
    """A run ended in a state other than ``ok``. ``.result`` holds the ``RunResult``."""

    def __init__(self, result: RunResult, message: str | None = None):
        self.result = result
        super().__init__(message or self._describe(result))

    @staticmethod
    def _describe(result: Any) -> str:
        text = f"run {result.run_id} ended {result.status.value}"
        if result.stop_reason:
            text += f" (stop reason {result.stop_reason})"
        if result.error:
            text += f": {result.error.get('type')}: {result.error.get('message')}"
        return text


class RunFailed(RunError):
    """The run failed; ``result.error`` says why."""


class RunAwaitingInput(RunError):
    """The run waits for an approval or a reconciliation decision (``result.pending``)."""


class RunTruncated(RunError):
    """The model's reply was cut off at the token budget (stop reason ``max_tokens``)."""


class RunLimitReached(RunError):
    """The run hit ``Limits.max_iterations`` before the model finished."""


class RunRefused(RunError):
    """The model refused or a safety filter stopped it."""


class RunCancelled(RunError):
    """The run was cancelled."""


class RunPaused(RunError):
    """The run was paused before it finished; resume it to continue."""
