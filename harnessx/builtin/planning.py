"""The task-list tools ``write_todos`` and ``read_todos``, as harnessx 0.9.1 names them.

Every agent gets them with ``AgentConfig(planning=True)`` (the default); a bare
``ToolRegistry`` gets them with ``register_planning_tools(registry)`` or
``registry.load_builtin("planning")``.
"""

from __future__ import annotations

from harnessx._builtin_tools import (
    MAX_TODOS,
    PLANNING_GUIDANCE,
    TODO_STATUSES,
    WRITE_TODOS_DESCRIPTION,
    WRITE_TODOS_SCHEMA,
    install_planning_tools,
    normalize_todos,
    render_todos,
)
from harnessx._tools import ToolRegistry

__all__ = [
    "MAX_TODOS",
    "PLANNING_GUIDANCE",
    "STATUSES",
    "WRITE_TODOS_DESCRIPTION",
    "WRITE_TODOS_SCHEMA",
    "normalize",
    "register_planning_tools",
    "render",
]

STATUSES = TODO_STATUSES
normalize = normalize_todos
render = render_todos


def register_planning_tools(registry: ToolRegistry, *, replace: bool = False) -> list[str]:
    """Register the two tools in ``registry``; the names registered (a tool of the same name
    the application registered stays, unless ``replace``)."""
    return install_planning_tools(registry, replace=replace)
