"""Tools: registration, permissions, replay policy, and calling a handler safely."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from harnessx._config import RetryPolicy
from harnessx._errors import ConfigurationError, RuntimeStateError, TransientToolError
from harnessx._results import ToolResult
from harnessx._schema import bind_arguments, function_schema
from harnessx._validation import validate_arguments
from harnessx.providers._base import ToolCall

__all__ = [
    "PERMISSION_DENIED",
    "PermissionLevel",
    "PermissionManager",
    "ReplayPolicy",
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "current_tool_context",
    "tool_context_scope",
]

PERMISSION_DENIED = "Permission denied"

F = TypeVar("F", bound=Callable[..., Any])


class PermissionLevel(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class ReplayPolicy(StrEnum):
    """What recovery may do with a call that was dispatched but has no committed result.

    ``safe``: repeating it is harmless; call it again. ``idempotent``: the external system
    deduplicates on ``execution_key``; call it again. ``manual`` (default): the effect may
    have happened; stop and ask a person (``PendingTool(status="uncertain")``).
    """

    SAFE = "safe"
    IDEMPOTENT = "idempotent"
    MANUAL = "manual"


@dataclass(frozen=True)
class ToolContext:
    """What a running tool knows about its call.

    ``fencing_token`` is the generation of the lease under which the call was dispatched
    (``None`` outside a durable run). An external system that remembers the highest token
    it saw per ``execution_key`` or per resource can reject a zombie's late effect.
    """

    session_id: str
    run_id: str
    execution_key: str
    attempt: int
    tool_name: str
    tool_call_id: str
    fencing_token: int | None = None

    @property
    def generation(self) -> int | None:
        return self.fencing_token


_current: contextvars.ContextVar[ToolContext | None] = contextvars.ContextVar(
    "harnessx_tool_context", default=None
)


def current_tool_context() -> ToolContext:
    """The context of the tool call being executed. Only valid inside a tool handler."""
    context = _current.get()
    if context is None:
        raise RuntimeStateError("current_tool_context() is only available inside a tool handler")
    return context


class tool_context_scope:
    """Sets the current tool context for the duration of a ``with`` block."""

    def __init__(self, context: ToolContext) -> None:
        self._context = context
        self._token: contextvars.Token[ToolContext | None] | None = None

    def __enter__(self) -> ToolContext:
        self._token = _current.set(self._context)
        return self._context

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _current.reset(self._token)


@dataclass
class Tool:
    """A registered tool. ``handler`` is called with keyword arguments from the model."""

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Callable[..., Any]
    permission: PermissionLevel | None = None
    concurrent: bool = True
    replay_policy: ReplayPolicy = ReplayPolicy.MANUAL
    timeout_seconds: float | None = None
    retry: RetryPolicy | None = None
    bind: bool = field(default=True, repr=False)

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def check_arguments(self, call: ToolCall) -> str | None:
        """An error message the model can act on, or ``None`` when the arguments fit."""
        if call.parse_error is not None:
            return f"Invalid arguments for tool '{self.name}': {call.parse_error}. Send a JSON object."
        problems = validate_arguments(self.input_schema, call.input)
        if problems:
            return f"Invalid arguments for tool '{self.name}': " + "; ".join(problems)
        return None

    async def invoke(self, arguments: dict[str, Any]) -> ToolResult:
        """Call the handler (retrying ``TransientToolError`` when ``retry`` allows).

        Exceptions become error results; only cancellation propagates.
        """
        attempts = self.retry.attempts if self.retry else 1
        for attempt in range(1, attempts + 1):
            try:
                value = await self._call_once(arguments)
            except TransientToolError as exc:
                if attempt < attempts and self.retry is not None:
                    await asyncio.sleep(self.retry.backoff(attempt))
                    continue
                return ToolResult(
                    content=f"Error: tool '{self.name}' failed transiently: {exc}", is_error=True
                )
            except TimeoutError:
                return ToolResult(
                    content=f"Error: tool '{self.name}' timed out after {self.timeout_seconds} s",
                    is_error=True,
                )
            except Exception as exc:
                return ToolResult(content=f"Error: {type(exc).__name__}: {exc}", is_error=True)
            return _to_result(value)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _call_once(self, arguments: dict[str, Any]) -> Any:
        kwargs = bind_arguments(self.handler, arguments) if self.bind else dict(arguments)
        if inspect.iscoroutinefunction(self.handler):
            call = self.handler(**kwargs)
        else:
            # A thread keeps a blocking handler off the event loop; to_thread copies the
            # context, so current_tool_context() works inside it too.
            call = asyncio.to_thread(functools.partial(self.handler, **kwargs))
        if self.timeout_seconds is None:
            return await call
        return await asyncio.wait_for(call, self.timeout_seconds)


def _to_result(value: Any) -> ToolResult:
    if isinstance(value, ToolResult):
        return value
    if value is None:
        return ToolResult(content="")
    if isinstance(value, str):
        return ToolResult(content=value)
    try:
        return ToolResult(content=json.dumps(value, default=str))
    except (TypeError, ValueError):
        return ToolResult(content=str(value))


class ToolRegistry:
    """The tools an agent may call, by name."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def register(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        permission: PermissionLevel | str | None = None,
        concurrent: bool = True,
        replay_policy: ReplayPolicy | str = ReplayPolicy.MANUAL,
        timeout_seconds: float | None = None,
        retry: RetryPolicy | None = None,
        replace: bool = False,
    ) -> Callable[[F], F]:
        """Decorator: register a sync or async function as a tool.

        The input schema comes from the type hints, the description from the docstring's
        summary, and argument descriptions from its ``Args:`` section.
        """

        # Settings are checked now, at the decorator call, not at decoration time.
        policy = _policy(replay_policy)
        level = PermissionLevel(permission) if permission is not None else None

        def decorate(handler: F) -> F:
            summary, schema = function_schema(handler)
            self._add(
                Tool(
                    name=name or handler.__name__,
                    description=description if description is not None else summary,
                    input_schema=schema,
                    handler=handler,
                    permission=level,
                    concurrent=concurrent,
                    replay_policy=policy,
                    timeout_seconds=timeout_seconds,
                    retry=retry,
                ),
                replace=replace,
            )
            return handler

        return decorate

    def register_with_schema(
        self,
        name: str,
        description: str,
        input_schema: dict[str, Any],
        handler: Callable[..., Any],
        *,
        permission: PermissionLevel | str | None = None,
        concurrent: bool = True,
        replay_policy: ReplayPolicy | str = ReplayPolicy.MANUAL,
        timeout_seconds: float | None = None,
        retry: RetryPolicy | None = None,
        replace: bool = False,
    ) -> Tool:
        """Register a handler with an explicit JSON schema; it receives the arguments as given."""
        if not isinstance(input_schema, dict) or input_schema.get("type", "object") != "object":
            raise ConfigurationError(f"tool '{name}': input_schema must be a JSON Schema object type")
        tool = Tool(
            name=name,
            description=description,
            input_schema=input_schema,
            handler=handler,
            permission=PermissionLevel(permission) if permission is not None else None,
            concurrent=concurrent,
            replay_policy=_policy(replay_policy),
            timeout_seconds=timeout_seconds,
            retry=retry,
            bind=False,
        )
        self._add(tool, replace=replace)
        return tool

    def _add(self, tool: Tool, *, replace: bool) -> None:
        if not tool.name or not tool.name.replace("_", "a").replace("-", "a").isalnum():
            raise ConfigurationError(
                f"tool name {tool.name!r} is not valid: use letters, digits, '_' and '-' only"
            )
        if tool.name in self._tools and not replace:
            raise ConfigurationError(
                f"a tool named '{tool.name}' is already registered; pass replace=True to replace it"
            )
        if tool.timeout_seconds is not None and tool.timeout_seconds <= 0:
            raise ConfigurationError(f"tool '{tool.name}': timeout_seconds must be positive")
        self._tools[tool.name] = tool

    def unregister(self, name: str) -> None:
        self._tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def specs(self, only: list[str] | None = None) -> list[dict[str, Any]]:
        return [t.spec() for t in self._tools.values() if only is None or t.name in only]

    def fingerprint(self) -> dict[str, str]:
        """Name -> replay policy: what a resumed run must find again to be compatible."""
        return {t.name: t.replay_policy.value for t in self._tools.values()}


def _policy(value: ReplayPolicy | str) -> ReplayPolicy:
    try:
        return ReplayPolicy(value)
    except ValueError:
        raise ConfigurationError(
            f"unknown replay_policy {value!r}: use 'safe', 'idempotent' or 'manual'"
        ) from None


class PermissionManager:
    """Decides ALLOW / ASK / DENY per call.

    Order of precedence: a rule set here for the tool's name, then the permission the tool
    was registered with, then ``default``. ``approver`` (sync or async, ``(ToolCall) ->
    bool``) answers ASK for a plain ``Agent.run``; without one an ASK call stops the run
    ``awaiting_input``. Durable runs never call the approver: their approvals persist.
    """

    def __init__(
        self,
        default: PermissionLevel | str = PermissionLevel.ALLOW,
        rules: Mapping[str, PermissionLevel | str] | None = None,
        approver: Callable[[ToolCall], Any] | None = None,
    ) -> None:
        self.default = PermissionLevel(default)
        self.rules: dict[str, PermissionLevel] = {k: PermissionLevel(v) for k, v in (rules or {}).items()}
        self.approver = approver

    def set(self, tool_name: str, level: PermissionLevel | str) -> None:
        self.rules[tool_name] = PermissionLevel(level)

    def check(self, tool: Tool | None, call: ToolCall) -> PermissionLevel:
        if call.name in self.rules:
            return self.rules[call.name]
        if tool is not None and tool.permission is not None:
            return tool.permission
        return self.default

    async def ask(self, call: ToolCall) -> bool | None:
        """The approver's answer, or ``None`` when no approver is configured."""
        if self.approver is None:
            return None
        answer = self.approver(call)
        if inspect.isawaitable(answer):
            answer = await answer
        return bool(answer)
