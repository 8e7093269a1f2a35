"""An agent's session between runs, as a dict: what ``save_session`` writes and
``load_session`` reads back, and 0.9.1's ``harnessx.engine.snapshot`` / ``restore``.

The dict holds the conversation (content blocks, as the model is shown it), the session's
metadata, usage and lifetime iterations, the task list, the extensions' saved state, the
whole texts of results the conversation shows as previews (``results``), and the
provider's state: what it learned of its models' limits (``learn_model_limits``; a
refusal naming a reply or context limit), which a provider keeps on itself, so that a
session carried to another process or provider object does not run into the same
refusal again. A provider with ``export_state()`` / ``restore_state(saved)`` (a
``FallbackProvider``: its members') says what its state is.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from typing import TYPE_CHECKING, Any

from harnessx._extensions import ExtensionContext, extension_name
from harnessx._model_limits import PROVIDER_CACHE
from harnessx.providers._base import TokenUsage

if TYPE_CHECKING:
    from harnessx._agent import Agent

__all__ = [
    "provider_state",
    "restore",
    "restore_extensions",
    "restore_provider_state",
    "snapshot",
]


def provider_state(provider: Any) -> dict[str, Any]:
    """What ``provider`` learned that a session carries: its ``export_state()``, else the
    model limits it learned (``{"limits": {model: {...}}}``, as 0.9.1 saves them)."""
    if provider is None:
        return {}
    export = getattr(provider, "export_state", None)
    if callable(export):
        return dict(export())
    learned = getattr(provider, PROVIDER_CACHE, None)
    return {"limits": copy.deepcopy(learned)} if isinstance(learned, dict) and learned else {}


def restore_provider_state(provider: Any, saved: Any) -> None:
    """Give ``provider`` what ``provider_state`` took from another (nothing when empty)."""
    if provider is None or not isinstance(saved, dict) or not saved:
        return
    load = getattr(provider, "restore_state", None)
    if callable(load):
        load(copy.deepcopy(saved))
        return
    limits = saved.get("limits")
    if isinstance(limits, dict):
        # A provider that takes no attributes learns nothing (as learn_model_limits).
        with contextlib.suppress(AttributeError, TypeError):
            setattr(provider, PROVIDER_CACHE, copy.deepcopy(limits))


async def snapshot(agent: Agent) -> dict[str, Any]:
    """The agent's session as a JSON-ready dict (its provider's state included)."""
    return {
        "messages": agent.memory.get_messages(),
        "metadata": copy.deepcopy(agent.session_metadata),
        "extensions": await _extension_state(agent),
        "total_usage": agent.total_usage.to_dict(),
        "provider_state": provider_state(agent._provider),
        "lifetime_iterations": agent.lifetime_iterations,
        "todos": agent.todos,
        "results": agent.memory.stored_results(),
    }


async def restore(agent: Agent, state: dict[str, Any]) -> None:
    """Continue ``state`` (a ``snapshot``, or 0.9.1's, with its run-state keys) in
    ``agent``: its session id, conversation, metadata, usage, provider state, task list and
    extension state."""
    if state.get("session_id"):
        agent.session_id = str(state["session_id"])
    agent.memory.set_messages(copy.deepcopy(state.get("messages") or []))
    for result_id, content in dict(state.get("results") or {}).items():
        agent.memory.keep_result(str(result_id), str(content))
    agent.session_metadata = copy.deepcopy(dict(state.get("metadata") or {}))
    agent.total_usage = TokenUsage.from_dict(state.get("total_usage"))
    agent.lifetime_iterations = int(state.get("lifetime_iterations") or 0)
    restore_provider_state(agent._provider, state.get("provider_state"))
    todos = list(state.get("todos") or [])
    if todos and todos != agent.todos:
        # A list the program assigned (the conversation's write_todos calls give the rest).
        agent.todos = copy.deepcopy(todos)
    await restore_extensions(agent, dict(state.get("extensions") or {}))


async def _extension_state(agent: Agent) -> dict[str, Any]:
    """State of extensions that save any: ``on_save_session(context)`` (the original's
    protocol, sync or async) or ``export_state()``."""
    saved: dict[str, Any] = {}
    for extension in agent.extensions:
        name = extension_name(extension)
        hook = getattr(extension, "on_save_session", None)
        if callable(hook):
            value = hook(ExtensionContext(agent, name))
            saved[name] = await value if asyncio.iscoroutine(value) else value
        elif callable(getattr(extension, "export_state", None)):
            saved[name] = extension.export_state()
    return saved


async def restore_extensions(agent: Agent, saved: dict[str, Any]) -> None:
    for extension in agent.extensions:
        name = extension_name(extension)
        if name not in saved:
            continue
        hook = getattr(extension, "on_load_session", None)
        if callable(hook):
            value = hook(ExtensionContext(agent, name), saved[name])
            if asyncio.iscoroutine(value):
                await value
        elif callable(getattr(extension, "import_state", None)):
            extension.import_state(saved[name])
