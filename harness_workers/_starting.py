"""What a worker does with a run it claimed but cannot start, so that no run is stranded.

Between claiming a run and driving it a worker reads the run, loads its state and builds
its agent from the registry. Each way that can fail has one outcome:

- **The state cannot be read** (``CorruptStateError``): retrying cannot help. The run ends
  ``failed`` at once with the error, and never comes back on its own.
- **The agent cannot be built** (the registry's factory raised: an import inside it, a
  missing credential...): perhaps transient, perhaps fixed by the next deploy. The run goes
  back to the queue, held back for a growing delay (``StartPolicy.retry_in``), with a
  ``waiting`` event (``on: "retry"``) saying why; after ``StartPolicy.attempts`` failed
  starts in a row it ends ``failed`` with an error that names the cause. The count lives
  on the run's row, so it survives worker restarts and is shared by every worker.
- **The store fails**: nothing can be recorded. The lease is left to expire, and the
  supervisor requeues the run (without counting an attempt).

Either way a follower (``handle.result()``, ``handle.events()``) sees the run end or keep
waiting with a reason; a run is never left ``running`` with nobody to drive it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harnessx._errors import ConfigurationError
from harnessx._events import RunEvent, RunEventType
from harnessx.store._protocol import RunRecord

__all__ = ["StartPolicy", "retry_notice"]


@dataclass(frozen=True)
class StartPolicy:
    """``attempts`` failed starts end the run; before that, a failed start is retried after
    ``backoff`` seconds, doubling each time, at most ``backoff_max``."""

    attempts: int = 5
    backoff: float = 2.0
    backoff_max: float = 60.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigurationError(f"start attempts must be at least 1, got {self.attempts}")
        if self.backoff < 0 or self.backoff_max < self.backoff:
            raise ConfigurationError(
                f"start back-off must be 0 or more and at most its maximum, got {self.backoff} "
                f"(maximum {self.backoff_max})"
            )

    def retry_in(self, attempt: int) -> float:
        """The delay after failed start number ``attempt`` (1-based)."""
        return float(min(self.backoff * 2 ** (attempt - 1), self.backoff_max))


def retry_notice(
    record: RunRecord, attempt: int, policy: StartPolicy, error: dict[str, str], worker: str
) -> RunEvent:
    """The ``waiting`` event a follower sees while a run waits to be started again."""
    data: dict[str, Any] = {
        "on": "retry",
        "seconds": policy.retry_in(attempt),
        "reason": "agent_unavailable",
        "attempt": attempt,
        "max_attempts": policy.attempts,
        "error": error,
        "worker_id": worker,
    }
    return RunEvent(RunEventType.WAITING, data, record.session_id, record.id, "run", f"start#{attempt}")
