"""Lifecycle hooks: callbacks that observe an agent without being able to break it."""

from __future__ import annotations

import inspect
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["HookCallback", "HookContext", "HookEvent", "Hooks"]

logger = logging.getLogger("harnessx.hooks")


class HookEvent(StrEnum):
    RUN_START = "run_start"
    RUN_END = "run_end"
    MODEL_REQUEST = "model_request"
    MODEL_RESPONSE = "model_response"
    TOOL_START = "tool_start"
    TOOL_END = "tool_end"
    ERROR = "error"
    CHECKPOINT = "checkpoint"
    """After every committed phase boundary; ``data`` has exactly
    ``session_id, run_id, status, phase``."""


@dataclass
class HookContext:
    event: HookEvent
    agent: Any
    data: dict[str, Any] = field(default_factory=dict)
    timestamp: float = field(default_factory=time.time)


HookCallback = Callable[[HookContext], Awaitable[None] | None]


class Hooks:
    """Callbacks by event. A failing callback is logged and never stops the run."""

    def __init__(self) -> None:
        self._callbacks: defaultdict[HookEvent, list[HookCallback]] = defaultdict(list)

    def on(self, event: HookEvent | str, callback: HookCallback) -> HookCallback:
        self._callbacks[HookEvent(event)].append(callback)
        return callback

    def off(self, event: HookEvent | str, callback: HookCallback) -> None:
        callbacks = self._callbacks[HookEvent(event)]
        if callback in callbacks:
            callbacks.remove(callback)

    def has(self, event: HookEvent) -> bool:
        return bool(self._callbacks.get(event))

    async def emit(self, event: HookEvent, agent: Any, data: dict[str, Any]) -> None:
        callbacks = self._callbacks.get(event)
        if not callbacks:
            return
        context = HookContext(event=event, agent=agent, data=data)
        for callback in list(callbacks):
            try:
                outcome = callback(context)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                logger.exception("hook %r for %s raised; ignored", callback, event.value)
