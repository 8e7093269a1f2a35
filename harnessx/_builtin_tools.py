"""Tools every agent gets: ``read_tool_result``, and ``write_todos`` / ``read_todos`` with
``AgentConfig(planning=True)`` (the default).

``read_tool_result`` reads a tool result that reached the conversation only as a preview
(see ``_large_results``). The task list is not kept anywhere but the conversation: it is
the input of the latest ``write_todos`` call that succeeded, so it is committed with the
run like every other message, survives a crash and a resume, and travels with session
snapshots. An application's own tool of the same name wins over a built-in one.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from harnessx._condense import VIEW_KEY
from harnessx._large_results import read_section
from harnessx._permissions import PermissionLevel
from harnessx._tools import ToolRegistry

__all__ = [
    "MAX_TODOS",
    "PLANNING_GUIDANCE",
    "TODO_STATUSES",
    "WRITE_TODOS_DESCRIPTION",
    "WRITE_TODOS_SCHEMA",
    "RunView",
    "install_builtin_tools",
    "install_planning_tools",
    "result_reader",
    "is_builtin",
    "normalize_todos",
    "planning_guidance",
    "render_todos",
    "run_view_scope",
    "set_todos_message",
    "system_prompt_with_guidance",
    "todos_of",
    "todos_timeline",
    "todos_payload",
]

TODO_STATUSES = ("pending", "in_progress", "completed")
MAX_TODOS = 50
MAX_TODO_CHARS = 200
_MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}

PLANNING_GUIDANCE = (
    "Planning: for a task of three or more steps, call write_todos first with one item per step, and "
    "update it in the same turn as the tool calls that do the work, keeping exactly one item in_progress. "
    "When the work is done, give your answer; the list needs no final update."
)

TODO_ITEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "content": {"type": "string", "description": "One step, as a short imperative sentence."},
        "status": {"type": "string", "enum": list(TODO_STATUSES)},
    },
    "required": ["content", "status"],
}

WRITE_TODOS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "maxItems": MAX_TODOS,
            "description": "The whole list on every call, completed items included.",
            "items": TODO_ITEM_SCHEMA,
        }
    },
    "required": ["todos"],
}

# The tool's description names the rules the model must keep (0.9.1's programs and tests
# look for "Send the whole list every time").
WRITE_TODOS_DESCRIPTION = (
    "Keep a task list for multi-step work; each call replaces the whole list. Call it before a task of "
    "three or more steps and again as steps finish. Send the whole list every time, completed items "
    "too, with exactly one item in_progress (of several, the first stays and the rest go back to pending)."
)


@dataclass
class RunView:
    """What built-in tools may read of the run they are called in."""

    messages: Callable[[], list[dict[str, Any]]]
    lookup_result: Callable[[str], Awaitable[str | None]]
    max_result_chars: int


# Marks a built-in tool's handler: an application's own tool of the same name is left alone.
_BUILTIN = "__harnessx_builtin__"

_view: contextvars.ContextVar[RunView | None] = contextvars.ContextVar("harnessx_run_view", default=None)


class run_view_scope:
    def __init__(self, view: RunView) -> None:
        self._view = view
        self._token: contextvars.Token[RunView | None] | None = None

    def __enter__(self) -> RunView:
        self._token = _view.set(self._view)
        return self._view

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _view.reset(self._token)


def _current_view() -> RunView | None:
    return _view.get()


# --------------------------------------------------------------------- the task list


def normalize_todos(todos: Any) -> tuple[list[dict[str, str]], list[str]]:
    """A model's task list, checked and cleaned, and the items moved back to pending
    because another one was already in progress. ``ValueError`` for a list it cannot use."""
    if not isinstance(todos, list):
        raise ValueError("todos must be a list of {content, status} objects")
    if len(todos) > MAX_TODOS:
        raise ValueError(f"too many todos: {len(todos)}; at most {MAX_TODOS}")
    cleaned: list[dict[str, str]] = []
    for index, item in enumerate(todos):
        if not isinstance(item, dict):
            raise ValueError(f"todo {index} must be an object with content and status")
        content = str(item.get("content", "")).strip()
        if not content:
            raise ValueError(f"todo {index} has no content")
        status = str(item.get("status", "pending")).strip().lower()
        if status not in TODO_STATUSES:
            raise ValueError(f"todo {index} has status {status!r}; use one of {', '.join(TODO_STATUSES)}")
        cleaned.append({"content": content[:MAX_TODO_CHARS], "status": status})
    active = [item for item in cleaned if item["status"] == "in_progress"]
    for item in active[1:]:
        item["status"] = "pending"
    return cleaned, [item["content"] for item in active[1:]]


def render_todos(todos: list[dict[str, str]]) -> str:
    """The list as the model reads it."""
    if not todos:
        return ""
    done = sum(1 for item in todos if item["status"] == "completed")
    lines = [f"  {_MARKS.get(item['status'], '[ ]')} {item['content']}" for item in todos]
    return f"[Task list, {done}/{len(todos)} complete]\n" + "\n".join(lines)


def todos_of(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The task list: the input of the latest ``write_todos`` call answered without error, or
    the list a program set (``agent.todos = ...``) since, whichever came last."""
    timeline = todos_timeline(messages)
    return timeline[-1] if timeline else []


def set_todos_message(todos: Any) -> dict[str, Any]:
    """The message that records a task list a program set (``agent.todos = [...]``): a view
    message (never shown to the model, see _condense) that the list is read from."""
    cleaned, _ = normalize_todos(todos)
    return {"role": "user", "content": "", VIEW_KEY: {"todos": cleaned}}


def todos_timeline(messages: list[dict[str, Any]]) -> list[list[dict[str, str]]]:
    """The task list as it stood after each message of ``messages`` (``todos_of`` of each
    prefix, in one pass)."""
    calls: dict[str, dict[str, Any]] = {}
    current: list[dict[str, str]] = []
    timeline: list[list[dict[str, str]]] = []
    for message in messages:
        spec = message.get(VIEW_KEY)
        if isinstance(spec, dict) and isinstance(spec.get("todos"), list):
            current = [dict(item) for item in spec["todos"]]  # set by the program
        elif message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                if call.get("name") == "write_todos":
                    calls[str(call.get("id"))] = call
        elif message.get("role") == "tool" and not message.get("is_error"):
            call = calls.get(str(message.get("tool_call_id")))
            if call is not None:
                with contextlib.suppress(ValueError):  # a list refused is not the list
                    current, _ = normalize_todos((call.get("input") or {}).get("todos"))
        timeline.append(current)
    return timeline


def todos_payload(todos: list[dict[str, str]]) -> dict[str, Any]:
    """The data of a ``todos_updated`` event and ``TODOS_UPDATED`` hook."""
    return {
        "todos": [dict(item) for item in todos],
        "completed": sum(1 for item in todos if item["status"] == "completed"),
        "total": len(todos),
        "in_progress": next((item["content"] for item in todos if item["status"] == "in_progress"), None),
    }


async def write_todos(todos: list[dict[str, Any]]) -> str:
    cleaned, demoted = normalize_todos(todos)
    done = sum(1 for item in cleaned if item["status"] == "completed")
    reply = f"Task list recorded: {done}/{len(cleaned)} complete."
    if demoted:
        kept = next(item["content"] for item in cleaned if item["status"] == "in_progress")
        moved = ", ".join(f'"{content}"' for content in demoted)
        # 0.9.1's wording, which programs may look for.
        reply += f' Only one item can be in progress: kept "{kept}", set {moved} back to pending.'
    return reply


async def read_todos() -> str:
    """Read the current task list."""
    view = _current_view()
    todos = todos_of(view.messages()) if view is not None else []
    return render_todos(todos) or "The task list is empty."


# ---------------------------------------------------------------- large results


class StoredResults(Protocol):
    """Where ``read_tool_result`` reads outside a run: an agent's memory."""

    def read_evicted(
        self,
        tool_use_id: str,
        offset: int = 0,
        limit: int = 2_000,
        *,
        max_chars: int = 0,
        char_offset: int = 0,
        pattern: str = "",
    ) -> str: ...


def result_reader(memory: Callable[[], StoredResults] | None) -> Callable[..., Awaitable[str]]:
    """The built-in ``read_tool_result``: in a run it reads the run's results; called
    outside one (``agent.tools.execute``), the results kept by the memory ``memory()``
    returns (an agent passes its own, as 0.9.1's binds the tool to its memory)."""

    async def read_tool_result(
        result_id: str,
        offset: int = 0,
        limit: int = 2000,
        max_chars: int = 0,
        char_offset: int = 0,
        pattern: str = "",
    ) -> str:
        """Read a tool result that was too large for the conversation and reached it as a preview.

        Prefer pattern: it returns only the passages that match. Reading in order returns as
        much as fits in one reply; the header of each reply says where to continue. Do not
        call the original tool again for the same information.

        Args:
            result_id: The tool call id the preview's notice names.
            pattern: A regular expression (case-insensitive) to find instead of reading in order.
            offset: First line to return, counting from 0.
            limit: Number of lines to return, at most 2000.
            max_chars: Character cap for one read; 0 means the most one reply may hold.
            char_offset: Character position to continue from inside the selected lines.
        """
        view = _current_view()
        if view is None and memory is not None:
            return memory().read_evicted(
                result_id, offset, limit, max_chars=max_chars, char_offset=char_offset, pattern=pattern
            )
        content = await view.lookup_result(result_id) if view is not None else None
        if content is None:
            raise LookupError(
                f"no stored result with id {result_id!r}; only results too large to show are kept"
            )
        return read_section(
            result_id,
            content,
            offset,
            limit,
            max_chars=max_chars,
            char_offset=char_offset,
            pattern=pattern,
            max_result_chars=view.max_result_chars if view is not None else 12_000,
        )

    setattr(read_tool_result, _BUILTIN, True)
    return read_tool_result


# ---------------------------------------------------------------- installing


def is_builtin(handler: Any) -> bool:
    return bool(getattr(handler, _BUILTIN, False))


for _handler in (write_todos, read_todos):
    setattr(_handler, _BUILTIN, True)


def _ours_or_free(registry: ToolRegistry, name: str) -> bool:
    tool = registry.get(name)
    return tool is None or is_builtin(tool.handler)


def install_builtin_tools(
    registry: ToolRegistry, *, planning: bool, memory: Callable[[], StoredResults] | None = None
) -> None:
    """Register the built-in tools an agent gets, leaving an application's own alone;
    ``read_tool_result`` reads ``memory`` when it is called outside a run."""
    if _ours_or_free(registry, "read_tool_result"):
        registry.register_tool(
            result_reader(memory), permission=PermissionLevel.ALLOW, replay_policy="safe", replace=True
        )
    if planning:
        install_planning_tools(registry)


PLANNING_TOOLS = ("write_todos", "read_todos")


def select_planning_tools(
    include: Sequence[str] | None, exclude: Sequence[str] | None, available: Sequence[str] = PLANNING_TOOLS
) -> list[str]:
    """The tools of ``available`` that ``include`` and ``exclude`` leave (both may name
    only tools of ``available``)."""
    for label, names in (("include", include), ("exclude", exclude)):
        if isinstance(names, str):
            raise TypeError(f"{label} must be a collection of tool names, such as [{names!r}]")
        unknown = sorted(set(names or ()) - set(available))
        if unknown:
            raise ValueError(f"Unknown tool names in {label}: {unknown}; available: {list(available)}")
    return [n for n in available if (include is None or n in include) and n not in (exclude or ())]


def install_planning_tools(
    registry: ToolRegistry,
    *,
    include: Sequence[str] | None = None,
    exclude: Sequence[str] | None = None,
    permission: PermissionLevel | None = None,
    replace: bool = False,
) -> list[str]:
    """Register ``write_todos`` and ``read_todos``, or those of them ``include`` and
    ``exclude`` leave, with ``permission`` (default ``ALLOW``); an application's own tool
    of the same name stays, unless ``replace``. The names registered."""
    selected = select_planning_tools(include, exclude)
    level = PermissionLevel.ALLOW if permission is None else permission
    names = []
    if "write_todos" in selected and (replace or _ours_or_free(registry, "write_todos")):
        names.append("write_todos")
        registry.register_with_schema(
            "write_todos",
            WRITE_TODOS_DESCRIPTION,
            WRITE_TODOS_SCHEMA,
            write_todos,
            permission=level,
            concurrent=False,
            replay_policy="safe",
            replace=True,
        )
    if "read_todos" in selected and (replace or _ours_or_free(registry, "read_todos")):
        names.append("read_todos")
        registry.register_tool(
            read_todos, permission=level, concurrent=False, replay_policy="safe", replace=True
        )
    return names


def planning_guidance(registry: ToolRegistry) -> str:
    """Added to the system prompt while the built-in ``write_todos`` is installed (static
    text, so the cacheable prompt prefix stays the same as the list changes)."""
    tool = registry.get("write_todos")
    return PLANNING_GUIDANCE if tool is not None and is_builtin(tool.handler) else ""


def system_prompt_with_guidance(system_prompt: str, registry: ToolRegistry) -> str:
    """The system prompt a request carries: ``system_prompt`` and, while the built-in
    planning tools are installed, ``PLANNING_GUIDANCE`` after a blank line."""
    guidance = planning_guidance(registry)
    if not guidance:
        return system_prompt
    return f"{system_prompt}\n\n{guidance}" if system_prompt else guidance
