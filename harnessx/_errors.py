"""Every exception harnessx raises on purpose.

::

    HarnessError
    ├── ConfigurationError (also ValueError)     bad input from the caller or a config mismatch
    ├── RuntimeStateError (also RuntimeError)    a verb called in a state that forbids it
    ├── ResolutionError (also ValueError)        a decision that does not fit the pending call
    ├── UnknownExecutionKey (also KeyError)      no pending tool has that execution key
    ├── ToolApprovalRequired (also RuntimeError) the permission changed to ASK before dispatch
    ├── TransientToolError                       a tool failed and had no effect; may be retried
    ├── MaxIterationsError                       a run went past Limits.max_iterations
    ├── CostLimitError                           a run went past Limits.max_cost_dollars
    ├── IncompleteStreamError (also ConnectionError)  a streamed reply ended before it was whole
    ├── ContextOverflowError (also ValueError)   the request cannot be made to fit the model
    ├── MalformedToolInputError (also ValueError)  a tool call's arguments could not be read
    ├── ProviderError                            the model provider failed
    ├── StorageError (also RuntimeError)         the store failed or refused a write
    │   ├── SessionBusyError                     another run or another live process holds it
    │   ├── LeaseLostError                       the writer's lease no longer holds (fenced)
    │   ├── LeadershipLostError                  a newer leader took over; the leader's write was refused
    │   ├── SchemaError                          the database schema is missing, newer or altered
    │   └── CorruptStateError                    a stored row does not decode or breaks a run's rules
    └── RunError                                 a run ended other than ``ok``; carries ``.result``
        ├── RunFailed                            ``.error`` is the failure's type and message
        ├── RunAwaitingInput                     ``.pending`` lists what it waits on
        ├── RunTruncated
        ├── RunLimitReached
        ├── RunRefused
        ├── RunCancelled
        └── RunPaused

(``ToolNotFoundError``, also a ``LookupError``, lives with the tools.) The second bases are
those of harnessx 0.9.1, so ``except RuntimeError`` and the like keep
catching what they caught there.

``LeaseLostError`` and cancellation must stop a run even inside tool code that catches
``Exception``; the driver therefore re-checks the lease and the control flag itself after
every tool returns instead of trusting the exception to propagate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harnessx._results import PendingTool, RunResult

__all__ = [
    "ConfigurationError",
    "ConfigurationTypeError",
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


class ConfigurationTypeError(ConfigurationError, TypeError):
    """A setting of the wrong type: a ``TypeError`` where harnessx 0.9.1 raises one, and a
    ``ConfigurationError`` as every bad setting here."""


class RuntimeStateError(HarnessError, RuntimeError):
    """The operation is not allowed in the object's current state."""


class ResolutionError(HarnessError, ValueError):
    """A decision that does not apply to the pending call: approving a call whose outcome is
    uncertain, or ``resolve_tool`` without exactly one of ``result=``, ``retry=True``,
    ``abort=True``."""


class UnknownExecutionKey(HarnessError, KeyError):
    """No pending tool call has the given execution key (``.execution_key``)."""

    def __init__(self, execution_key: Any, message: str | None = None) -> None:
        super().__init__(execution_key)
        self.execution_key = execution_key
        self._message = message

    def __str__(self) -> str:
        # KeyError quotes its argument; say what it is instead.
        return self._message or f"no pending tool call has execution key {self.execution_key!r}"


class ToolApprovalRequired(HarnessError, RuntimeError):
    """The tool's permission became ``ASK`` between preparing and dispatching the call."""


class TransientToolError(HarnessError):
    """Raised by a tool handler: the call failed *and had no effect*, so it may be retried."""


class MaxIterationsError(HarnessError):
    """A run reached ``Limits.max_iterations`` with ``final_answer_on_limit=False``."""


class CostLimitError(HarnessError):
    """A run's estimated cost reached ``Limits.max_cost_dollars``."""


class IncompleteStreamError(HarnessError, ConnectionError):
    """A streamed reply stalled or ended before the provider said it was complete; retried
    like a dropped connection, never used."""


class ContextOverflowError(HarnessError, ValueError):
    """The request does not fit the model's context window and nothing can be condensed."""

    def __init__(
        self, message: str, *, estimated_tokens: int | None = None, context_window: int | None = None
    ) -> None:
        super().__init__(message)
        self.estimated_tokens = estimated_tokens
        self.context_window = context_window


class MalformedToolInputError(HarnessError, ValueError):
    """A tool call's arguments could not be read, and the call could not be answered."""

    def __init__(self, message: str, *, name: str | None = None, raw_json: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.raw_json = raw_json


class ProviderError(HarnessError):
    """The model provider returned an error or could not be reached.

    ``retryable`` says whether another attempt may succeed (the runtime retries those under
    ``RetryPolicy``); ``retry_after`` is the wait the server asked for, in seconds.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retryable = retryable
        self.retry_after = retry_after


class StorageError(HarnessError, RuntimeError):
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

    def __init__(self, result: RunResult, message: str | None = None) -> None:
        super().__init__(message or self._describe(result))
        self.result = result

    @staticmethod
    def _describe(result: Any) -> str:
        text = f"run {result.run_id} ended {result.status.value}"
        if result.stop_reason:
            text += f" (stop reason {result.stop_reason})"
        return text


class RunFailed(RunError):
    """The run failed; ``error`` (also ``result.error``) holds its ``type`` and ``message``."""

    def __init__(self, result: RunResult, message: str | None = None) -> None:
        detail = (
            dict(result.error) if result.error else {"type": "unknown", "message": "no error was recorded"}
        )
        super().__init__(result, message or f"{detail['type']}: {detail['message']}")
        self.error = detail


class RunAwaitingInput(RunError):
    """The run waits for an approval or a reconciliation decision; ``pending`` lists the calls."""

    def __init__(self, result: RunResult, message: str | None = None) -> None:
        names = ", ".join(p.call.name for p in result.pending) or "no tool listed"
        super().__init__(result, message or f"run {result.run_id} waits for a decision on: {names}")
        self.pending: list[PendingTool] = list(result.pending)


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
