"""The console's decisions and controls: each through ``Operator`` (the runtime's own verbs,
recorded in the audit trail under the signed-in name), for pages and API alike."""

from __future__ import annotations

import logging
from typing import Any

from harnessx._operator import Done, Operator
from harnessx.console._auth import Identity
from harnessx.console._state import ConsoleState
from harnessx.console._web import WebError

__all__ = ["CONTROLS", "control", "decide", "resolve"]

logger = logging.getLogger("harnessx.console")
CONTROLS = ("cancel", "pause", "resume")


def _operator(console: ConsoleState, who: Identity) -> Operator:
    return Operator(console.store, who.name, "api" if who.via == "api" else "console")


def _key_of(run_id: str, key: Any) -> str:
    if not isinstance(key, str) or not key.startswith(f"{run_id}:"):
        raise WebError(400, f"execution_key must be the key of one of run {run_id}'s tool calls")
    return key


def _logged(done: Done) -> Done:
    action = done.action
    logger.info(
        "console: %s %s run %s: %s",
        action.actor,
        action.action,
        action.run_id,
        action.outcome,
        extra={"run_id": action.run_id, "session_id": action.session_id},
    )
    return done


async def decide(console: ConsoleState, who: Identity, run_id: str, key: Any, allow: bool) -> Done:
    return _logged(await _operator(console, who).approve(_key_of(run_id, key), allow=allow))


async def resolve(
    console: ConsoleState, who: Identity, run_id: str, key: Any, choice: str, result: Any, is_error: bool
) -> Done:
    operator = _operator(console, who)
    key = _key_of(run_id, key)
    if choice == "result":
        if not isinstance(result, str):
            raise WebError(400, "recording a result needs its text (result)")
        return _logged(await operator.resolve(key, result=result, is_error=is_error))
    if choice == "retry":
        return _logged(await operator.resolve(key, retry=True))
    if choice == "abort":
        return _logged(await operator.resolve(key, abort=True))
    raise WebError(400, "choose one of: result (record what the call did), retry (invoke it again), abort")


async def control(console: ConsoleState, who: Identity, session_id: str, verb: str) -> Done:
    if verb not in CONTROLS:
        raise WebError(404, f"no action {verb!r}: use one of {', '.join(CONTROLS)}")
    operator = _operator(console, who)
    done: Done = await getattr(operator, verb)(session_id)
    return _logged(done)
