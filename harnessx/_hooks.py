"""Lifecycle hooks: callbacks that observe an agent without being able to break it.

The events and what each one's ``HookContext.data`` holds (the keys of harnessx 0.9.1):

==========================  ==============================================================
``AGENT_START``             ``message``: a run starts
``AGENT_END``               ``result``: a run ended completed, failed or cancelled
``LOOP_ITERATION_START``    ``iteration``: a model call is being prepared
``LOOP_ITERATION_END``      ``iteration``: the iteration's tool results are in, or it ended
``LLM_REQUEST``             ``system``, ``model``, ``max_tokens``, ``temperature``,
                            ``stream``, ``message_count``, ``tool_count``, ``prefix_key``
``LLM_RESPONSE``            ``response``, ``stop_reason``, ``provider``
``TOOL_CALL_START``         ``tool_call``: right before the handler is called
``TOOL_CALL_END``           ``tool_call``, ``result``: the result the model sees
``RETRY``                   ``kind`` (``model``/``tool``), ``name``, ``attempt``,
                            ``next_attempt``, ``wait_seconds``, ``error``, ``provider``
``RECOVERY``                ``reason``, ``attempt``, ``reply_budget``
``CHECKPOINT``              ``session_id``, ``run_id``, ``status``, ``phase``: a durable
                            run's boundary committed (see ``checkpoint_phase``)
``ERROR``                   ``error``: the run failed (the message)
``TODOS_UPDATED``           ``todos``, ``completed``, ``total``, ``in_progress``
``CONTEXT_CONDENSED``       ``messages_dropped``, ``summary_chars``, ``summarized``: the
                            conversation was condensed (not on Temporal)
``REPETITION``              ``period``, ``laps``, ``tool``: the loop guard told the model
                            it is going in circles
==========================  ==============================================================

``SKILL_INVOKED``, ``KNOWLEDGE_ACCESSED`` and ``SANDBOX_EXEC`` exist for programs that
register them; nothing here emits them yet.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from types import TracebackType
from typing import Any

__all__ = ["HookCallback", "HookContext", "HookEvent", "HookManager", "Hooks", "Registration"]

logger = logging.getLogger("harnessx.hooks")


class HookEvent(Enum):
    AGENT_START = "agent_start"
    AGENT_END = "agent_end"
    LOOP_ITERATION_START = "loop_iteration_start"
    LOOP_ITERATION_END = "loop_iteration_end"
    LLM_REQUEST = "llm_request"
    LLM_RESPONSE = "llm_response"
    TOOL_CALL_START = "tool_call_start"
    TOOL_CALL_END = "tool_call_end"
    SKILL_INVOKED = "skill_invoked"
    KNOWLEDGE_ACCESSED = "knowledge_accessed"
    SANDBOX_EXEC = "sandbox_exec"
    CHECKPOINT = "checkpoint"
    RETRY = "retry"
    CONTEXT_CONDENSED = "context_condensed"
    REPETITION = "repetition"
    RECOVERY = "recovery"
    TODOS_UPDATED = "todos_updated"
    ERROR = "error"


@dataclass
class HookContext:
    """What a callback receives: the event, the agent, and the event's ``data``."""

    event: HookEvent
    agent: Any = None
    data: dict[str, Any] = field(default_factory=dict)
    timestamp: float = field(default_factory=time.time)


HookCallback = Callable[[HookContext], Awaitable[None] | None]


class Registration:
    """Removes what it registered on ``close()`` (or leaving a ``with`` block); idempotent."""

    def __init__(self, remove: Callable[[], None]) -> None:
        self._remove = remove
        self._closed = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._remove()

    def __enter__(self) -> Registration:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class HookManager:
    """Callbacks by event, sync or async. A failing callback is logged and never stops the run."""

    def __init__(self) -> None:
        self._callbacks: dict[HookEvent, list[HookCallback]] = {}

    def on(self, event: HookEvent | str, callback: HookCallback) -> Registration:
        kind = HookEvent(event)
        self._callbacks.setdefault(kind, []).append(callback)
        return Registration(lambda: self.off(kind, callback))

    def off(self, event: HookEvent | str, callback: HookCallback) -> None:
        kind = HookEvent(event)
        if kind in self._callbacks:
            self._callbacks[kind] = [cb for cb in self._callbacks[kind] if cb is not callback]

    def has(self, event: HookEvent) -> bool:
        return bool(self._callbacks.get(event))

    def before_tool(self, callback: HookCallback) -> Registration:
        return self.on(HookEvent.TOOL_CALL_START, callback)

    def after_tool(self, callback: HookCallback) -> Registration:
        return self.on(HookEvent.TOOL_CALL_END, callback)

    def on_error(self, callback: HookCallback) -> Registration:
        return self.on(HookEvent.ERROR, callback)

    async def emit(self, event: HookEvent, context: HookContext) -> None:
        """Call every callback of ``event`` with ``context``, in registration order."""
        for callback in tuple(self._callbacks.get(event, ())):
            try:
                outcome = callback(context)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                logger.exception("hook %r for %s raised; ignored", callback, event.value)

    async def fire(self, event: HookEvent, agent: Any, **data: Any) -> None:
        """``emit`` with a context built from ``data``, when anything listens."""
        if self._callbacks.get(event):
            await self.emit(event, HookContext(event=event, agent=agent, data=data))


# The name this project used before it took harnessx 0.9.1's.
Hooks = HookManager
