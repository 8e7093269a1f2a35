"""The task-list tools ``write_todos`` and ``read_todos``, as harnessx 0.9.1 names them.

Every agent gets them with ``AgentConfig(planning=True)`` (the default); a bare
``ToolRegistry`` gets them with ``register_planning_tools(registry)`` or
``registry.load_builtin("planning")``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from harnessx._builtin_tools import (
    MAX_TODO_CHARS,
    MAX_TODOS,
    PLANNING_GUIDANCE,
    TODO_ITEM_SCHEMA,
    TODO_STATUSES,
    WRITE_TODOS_DESCRIPTION,
    WRITE_TODOS_SCHEMA,
    install_planning_tools,
    normalize_todos,
    render_todos,
)
from harnessx._builtin_tools import planning_guidance as guidance_for
from harnessx._permissions import PermissionLevel
from harnessx._tools import ToolRegistry

__all__ = [
    "MAX_CONTENT_CHARS",
    "MAX_TODOS",
    "PLANNING_GUIDANCE",
    "STATUSES",
    "TODO_ITEM_SCHEMA",
    "WRITE_TODOS_DESCRIPTION",
    "WRITE_TODOS_SCHEMA",
    "PermissionLevel",
    "normalize",
    "planning_guidance",
    "register_planning_tools",
    "render",
]

STATUSES = TODO_STATUSES
MAX_CONTENT_CHARS = MAX_TODO_CHARS
normalize = normalize_todos
render = render_todos


def register_planning_tools(
    registry: ToolRegistry,
    *,
    include: Sequence[str] | None = None,
    exclude: Sequence[str] | None = None,
    permission: PermissionLevel | None = None,
    replace: bool = False,
) -> list[str]:
    """Register the two tools in ``registry`` (or those ``include`` and ``exclude`` leave,
    with ``permission``, default ``ALLOW``); the names registered (a tool of the same name
    the application registered stays, unless ``replace``)."""
    return install_planning_tools(
        registry, include=include, exclude=exclude, permission=permission, replace=replace
    )


def planning_guidance(registry: ToolRegistry) -> Callable[[], str]:
    """A prompt provider (as ``ExtensionContext.register_prompt_provider`` takes one):
    ``PLANNING_GUIDANCE`` while the built-in ``write_todos`` is installed in ``registry``,
    else nothing."""
    return lambda: guidance_for(registry)
