"""Who may call which tool: ``PermissionLevel`` and ``PermissionManager``.

A tool's effective level is, in order: an override set on the manager
(``set_permission``), the level the tool was registered with, then the manager's
``default_level``. ``DENY`` never runs. ``ALLOW`` runs. ``ASK`` depends on the run:

- in a durable run (``AgentRuntime``) the call is not made; the run stops
  ``awaiting_input`` with a ``PendingTool(status="approval")`` until ``approve`` /
  ``decline`` records a decision, which survives restarts;
- in a plain ``Agent.run`` a tool granted with ``grant_session`` runs, otherwise the
  ``approval_callback`` decides (sync or async, ``(ToolCall, ToolDefinition) -> bool``),
  and without a callback the call is refused (fails closed): the model reads
  ``Permission denied``.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import Awaitable, Callable, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any

from harnessx._errors import ConfigurationError

if TYPE_CHECKING:
    from harnessx._tools import ToolDefinition
    from harnessx.providers._base import ToolCall

__all__ = [
    "PERMISSION_DENIED",
    "ApprovalCallback",
    "CliPermissionManager",
    "PermissionLevel",
    "PermissionManager",
]

PERMISSION_DENIED = "Permission denied"


class PermissionLevel(str, Enum):  # noqa: UP042 - str() gives the member name, as in 0.9.1
    """Whether a tool runs, asks first, or is refused. A ``str`` enum: ``level == "ask"``
    holds; ``str(level)`` is ``PermissionLevel.ASK``, ``level.value`` the string."""

    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


ApprovalCallback = Callable[["ToolCall", "ToolDefinition"], "bool | Awaitable[bool]"]


def _level(value: PermissionLevel | str, what: str) -> PermissionLevel:
    try:
        return PermissionLevel(value)
    except ValueError:
        raise ConfigurationError(f"{what} must be 'allow', 'ask' or 'deny', got {value!r}") from None


class PermissionManager:
    """Decides ALLOW / ASK / DENY per tool call (see the module docstring).

    ``rules`` (an extension) presets ``set_permission`` overrides by tool name.
    """

    def __init__(
        self,
        default_level: PermissionLevel | str = PermissionLevel.ALLOW,
        *,
        approval_callback: ApprovalCallback | None = None,
        rules: Mapping[str, PermissionLevel | str] | None = None,
    ) -> None:
        self._default_level = _level(default_level, "default_level")
        if approval_callback is not None and not callable(approval_callback):
            raise ConfigurationError("approval_callback must be callable: (ToolCall, ToolDefinition) -> bool")
        self.approval_callback = approval_callback
        self._overrides: dict[str, PermissionLevel] = {
            name: _level(level, f"the permission for {name!r}") for name, level in (rules or {}).items()
        }
        self._session_grants: set[str] = set()
        self._gate: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    def __repr__(self) -> str:
        level, count = self._default_level.value, len(self._overrides)
        return f"{type(self).__name__}(default_level={level!r}, overrides={count})"

    @property
    def default_level(self) -> PermissionLevel:
        return self._default_level

    @property
    def rules(self) -> dict[str, PermissionLevel]:
        """The per-tool overrides (a copy)."""
        return dict(self._overrides)

    def set_permission(self, tool_name: str, level: PermissionLevel | str) -> None:
        """Override the permission of one tool, whatever it was registered with."""
        self._overrides[tool_name] = _level(level, f"the permission for {tool_name!r}")

    def get_effective_permission(self, tool_name: str, tool_def: ToolDefinition | None) -> PermissionLevel:
        if tool_name in self._overrides:
            return self._overrides[tool_name]
        level = tool_def.permission_level if tool_def is not None else None
        return level if level is not None else self._default_level

    def grant_session(self, tool_name: str) -> None:
        """Let an ``ASK`` tool run without asking for the rest of this agent's session
        (plain ``Agent`` runs; a durable run still records an approval). ``DENY`` stays denied."""
        self._session_grants.add(tool_name)

    def reset_session_grants(self) -> None:
        self._session_grants.clear()

    def granted(self, tool_name: str) -> bool:
        return tool_name in self._session_grants

    async def check_permission(self, tool_call: ToolCall, tool_def: ToolDefinition | None) -> bool:
        """Whether the call may run now, asking the approval callback for an ``ASK`` tool."""
        level = self.get_effective_permission(tool_call.name, tool_def)
        if level is PermissionLevel.DENY:
            return False
        if level is PermissionLevel.ALLOW or tool_call.name in self._session_grants:
            return True
        if self.approval_callback is None:
            return False
        # One question to the person at a time; an "always" given while this call waited
        # answers it too.
        async with self._approval_gate():
            if tool_call.name in self._session_grants:
                return True
            answer: Any = self.approval_callback(copy.deepcopy(tool_call), copy.copy(tool_def))  # type: ignore[arg-type]
            if inspect.isawaitable(answer):
                answer = await answer
        if type(answer) is not bool:
            raise ConfigurationError(
                f"the approval callback returned {type(answer).__name__}; it must return True or False"
            )
        return answer

    def _approval_gate(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._gate is None or self._gate[0] is not loop:
            self._gate = (loop, asyncio.Lock())
        return self._gate[1]


class CliPermissionManager(PermissionManager):
    """Asks at the terminal for every ``ASK`` tool (the default level here):
    ``y``\\es, ``n``\\o, or ``a``\\lways for the rest of the session."""

    def __init__(self, default_level: PermissionLevel | str = PermissionLevel.ASK) -> None:
        super().__init__(default_level, approval_callback=self._prompt)

    async def _prompt(self, tool_call: ToolCall, tool_def: ToolDefinition) -> bool:
        shown = str(tool_call.input)
        if len(shown) > 200:
            shown = shown[:200] + "..."
        question = f"\n  Tool: {tool_call.name}\n  Input: {shown}\n  Allow? [y]es / [n]o / [a]lways: "
        answer = (await asyncio.to_thread(input, question)).strip().lower()
        if answer in ("a", "always"):
            self.grant_session(tool_call.name)
            return True
        return answer in ("y", "yes")
