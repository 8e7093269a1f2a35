"""The original harnessx's ``harnessx.engine``, as far as it has a counterpart here.

harnessx 0.9.1's engine drives a run as a dict of its own; this harnessx's engine is another
(``harnessx._engine``, on ``RunState``: docs/architecture.md), so its commands and its
other internals are not here and importing one says so. These are: ``new_state`` (a run's
first state in that dict form, the one ``harnessx.execution.transition`` takes),
``snapshot`` / ``restore`` (an agent's session between runs as a dict, what
``save_session`` / ``load_session`` write and read), ``await_with_notices`` (waiting on
something slow with ``waiting`` events, as the driver waits on a model call), the bound on
condensing a run's history, the summarizer's transcript, and the joining of neighbouring
same-role messages.
"""

from __future__ import annotations

from harnessx._condense import MAX_CONDENSATIONS, SUMMARY_MAX_TOKENS, SUMMARY_SYSTEM, render_for_summary
from harnessx._messages import coalesce_same_role
from harnessx._run_dict import new_state
from harnessx._snapshot import restore, snapshot
from harnessx._unsupported import DOCS
from harnessx._waiting import await_with_notices

__all__ = [
    "MAX_CONDENSATIONS",
    "SUMMARY_MAX_TOKENS",
    "SUMMARY_SYSTEM",
    "await_with_notices",
    "coalesce_same_role",
    "new_state",
    "render_for_summary",
    "restore",
    "snapshot",
]


def __getattr__(name: str) -> object:
    if name.startswith("__"):
        raise AttributeError(name)
    raise ImportError(
        f"harnessx.engine.{name} belongs to the original harnessx 0.9.1's engine, an internal module with no "
        f"counterpart here (this engine works on RunState, not on its run-state dict); use the public API "
        f"({DOCS} maps every public name)",
        name="harnessx.engine",
    )
