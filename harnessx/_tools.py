"""Tools: registration, replay policy, and calling a handler safely.

A tool is a ``ToolDefinition``: the JSON schema the model sees and the handler the
harness calls. ``ToolRegistry`` holds an agent's tools by name. Permissions live in
``_permissions``; the context a running handler can read (``current_tool_context()``)
lives here.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import dataclasses
import difflib
import functools
import inspect
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

from harnessx._config import RetryPolicy
from harnessx._errors import ConfigurationError, HarnessError, RuntimeStateError, TransientToolError
from harnessx._permissions import PERMISSION_DENIED, PermissionLevel, PermissionManager
from harnessx._policies import DEFAULT_TOOL_TIMEOUT_SECONDS, ToolPolicy, ToolRetry
from harnessx._results import ToolResult
from harnessx._tool_schema import bind_arguments, copy_schema, function_schema
from harnessx._validation import validate_arguments
from harnessx.providers._base import ToolCall

__all__ = [
    "PERMISSION_DENIED",
    "PermissionLevel",
    "PermissionManager",
    "ReplayPolicy",
    "RetryWanted",
    "Tool",
    "ToolContext",
    "ToolDefinition",
    "ToolExecutionContext",
    "ToolNotFoundError",
    "ToolRegistry",
    "current_tool_context",
    "is_transient_error",
    "looks_transient",
    "normalize_tool_registry",
    "tool_context_scope",
]

logger = logging.getLogger("harnessx.tools")

F = TypeVar("F", bound=Callable[..., Any])
# The prefix of every result made from a handler's failure (the original harnessx's wording).
TOOL_ERROR_PREFIX = "Tool execution error: "


class ReplayPolicy(str, Enum):  # noqa: UP042 - str() gives the member name, as in 0.9.1
    """What recovery may do with a call that was dispatched but has no committed result.

    ``safe``: repeating it is harmless; call it again. ``idempotent``: the external system
    deduplicates on ``execution_key``; call it again. ``manual`` (default): the effect may
    have happened; stop and ask a person (``PendingTool(status="uncertain")``). A ``str``
    enum: ``str(policy)`` is ``ReplayPolicy.SAFE``, ``policy.value`` the string.
    """

    SAFE = "safe"
    IDEMPOTENT = "idempotent"
    MANUAL = "manual"


def tool_name_key(name: str) -> str:
    """A tool name as compared to resolve a model's call: case, separators and a namespace
    prefix ignored."""
    folded = re.sub(r"^(?:functions\.|tools\.|default_api:)", "", str(name).strip().casefold())
    return re.sub(r"[-_. ]", "", folded)


class ToolNotFoundError(HarnessError, LookupError):
    """No tool of that name is registered."""


@dataclass(frozen=True)
class ToolContext:
    """What a running tool knows about its call (``current_tool_context()``).

    ``fencing_token`` (an extension) is the generation of the lease under which the call
    was dispatched (``None`` outside a durable run). An external system that remembers the
    highest token it saw per ``execution_key`` or per resource can reject a zombie's late
    effect. ``ToolExecutionContext`` is the same class under the original harnessx's name.
    """

    session_id: str
    run_id: str
    execution_key: str
    attempt: int
    tool_name: str = ""
    tool_call_id: str = ""
    fencing_token: int | None = None

    @property
    def generation(self) -> int | None:
        return self.fencing_token


ToolExecutionContext = ToolContext

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


def _replay_policy(value: ReplayPolicy | str) -> ReplayPolicy:
    try:
        return ReplayPolicy(value)
    except ValueError:
        raise ConfigurationError(
            f"unknown replay_policy {value!r}: use 'safe', 'idempotent' or 'manual'"
        ) from None


def retry_wanted(definition: ToolDefinition, retry: ToolRetry, result: ToolResult) -> bool:
    """Whether a result a tool returned counts as a transient failure to try again: its
    ``retry_if_result`` says so (one that raises is logged and says no), or, with
    ``retry_error_results``, it is an error whose text reads as a throttle or an overload."""
    if definition.retry_if_result is not None:
        try:
            if definition.retry_if_result(result):
                return True
        except Exception:
            logger.exception("retry_if_result of tool %s raised; the result is kept", definition.name)
    return retry.retry_error_results and result.is_error and looks_transient(result.content)


def _tool_retry(value: ToolRetry | RetryPolicy | Mapping[str, Any] | None) -> ToolRetry | None:
    if value is None or isinstance(value, ToolRetry):
        return value
    if isinstance(value, RetryPolicy):  # this project's 0.1 form of register(retry=...)
        return ToolRetry(value.attempts, value.backoff_seconds, max(value.max_backoff_seconds, 1e-9))
    if isinstance(value, Mapping):
        return ToolRetry.from_dict(value)
    raise ConfigurationError(f"a tool's retry must be a ToolRetry, got {type(value).__name__}")


@dataclass
class ToolDefinition:
    """A registered tool: its schema (for the model) and its handler (for the harness).

    ``timeout_seconds`` bounds one call (a timed-out call gets an error result in a plain
    run; in a durable run a ``manual`` tool's timed-out call becomes ``uncertain``).
    ``retry`` re-runs a ``safe`` / ``idempotent`` tool after a transient failure (``None``:
    the registry's default, else ``ToolRetry()``). ``retry_if_result`` may call a result
    that came back a transient failure.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Callable[..., Any]
    permission_level: PermissionLevel | None = None
    concurrent: bool = True
    # Given as a member or its string; always a ReplayPolicy member (a str) once built.
    replay_policy: ReplayPolicy = ReplayPolicy.MANUAL
    timeout_seconds: float | None = DEFAULT_TOOL_TIMEOUT_SECONDS
    retry: ToolRetry | None = None
    retry_if_result: Callable[[ToolResult], bool] | None = None
    # Whether the handler gets keyword arguments converted to its annotations (False for
    # register_with_schema, whose handler receives the JSON arguments as given).
    bind: bool = field(default=True, repr=False)

    def __post_init__(self) -> None:
        if (
            not isinstance(self.name, str)
            or not self.name
            or not self.name.replace("_", "a").replace("-", "a").isalnum()
        ):
            raise ConfigurationError(
                f"tool name {self.name!r} is not valid: use letters, digits, '_' and '-' only"
            )
        if not callable(self.handler):
            raise ConfigurationError(f"tool '{self.name}': the handler must be callable")
        if not isinstance(self.description, str):
            raise ConfigurationError(f"tool '{self.name}': the description must be a string")
        if not isinstance(self.input_schema, dict) or self.input_schema.get("type", "object") != "object":
            raise ConfigurationError(f"tool '{self.name}': input_schema must be a JSON Schema object type")
        if self.permission_level is not None:
            self.permission_level = PermissionLevel(self.permission_level)
        if not isinstance(self.concurrent, bool):
            raise ConfigurationError(f"tool '{self.name}': concurrent must be True or False")
        self.replay_policy = _replay_policy(self.replay_policy)
        if self.timeout_seconds is not None and (
            isinstance(self.timeout_seconds, bool)
            or not isinstance(self.timeout_seconds, int | float)
            or not math.isfinite(self.timeout_seconds)
            or self.timeout_seconds <= 0
        ):
            raise ConfigurationError(f"tool '{self.name}': timeout_seconds must be finite and positive")
        self.retry = _tool_retry(self.retry)
        if self.retry_if_result is not None and not callable(self.retry_if_result):
            raise ConfigurationError(f"tool '{self.name}': retry_if_result must be callable")

    @property
    def permission(self) -> PermissionLevel | None:
        """The level the tool was registered with (``permission_level``)."""
        return self.permission_level

    @property
    def policy(self) -> ReplayPolicy:
        return ReplayPolicy(self.replay_policy)

    def spec(self) -> dict[str, Any]:
        # The registry's own copy of the schema (see ToolRegistry._store), not copied again:
        # this is built for every tool on every model request.
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def check_arguments(self, call: ToolCall) -> str | None:
        """An error message the model can act on, or ``None`` when the arguments fit."""
        if call.parse_error is not None:
            return f"Invalid arguments for {self.name!r}: {call.parse_error}. Send a JSON object."
        problems = validate_arguments(self.input_schema, call.input)
        if problems:
            return f"Invalid arguments for {self.name!r}: " + "; ".join(problems)
        return None

    def effective_retry(self) -> ToolRetry | None:
        """The retry that applies: none for a ``manual`` tool (its failure may have had an
        effect), else the tool's own, else ``ToolRetry()``."""
        if self.policy is ReplayPolicy.MANUAL:
            return None
        return self.retry or ToolRetry()

    async def invoke(
        self,
        arguments: dict[str, Any],
        call_id: str = "",
        *,
        on_retry: Callable[[int, RetryWanted], Awaitable[None]] | None = None,
    ) -> ToolResult:
        """Call the handler, retrying a transient failure when ``effective_retry`` allows;
        ``on_retry(attempt, wanted)`` is awaited before the wait after failed try ``attempt``.

        A handler's exception becomes an error result; a timeout raises ``TimeoutError``
        (the caller decides what an unknown outcome means); cancellation propagates.
        """
        attempt = 0
        while True:
            attempt += 1
            outcome = await self.try_once(arguments, call_id, attempt=attempt)
            if isinstance(outcome, ToolResult):
                return outcome
            if on_retry is not None:
                await on_retry(attempt, outcome)
            await asyncio.sleep(outcome.delay)

    async def try_once(
        self, arguments: dict[str, Any], call_id: str = "", *, attempt: int
    ) -> ToolResult | RetryWanted:
        """Try number ``attempt`` (1-based) of one call: its result, or ``RetryWanted`` when
        it failed transiently and ``effective_retry`` allows another try. ``invoke`` loops
        over this; the Temporal binding makes each try an activity attempt instead, so
        Temporal's retry policy does the waiting. A timeout on the last try raises
        ``TimeoutError``."""
        retry = self.effective_retry()
        more = retry is not None and attempt < retry.attempts
        try:
            result = _to_result(await self._call_once(arguments), call_id)
        except TimeoutError:
            if more and retry is not None:
                return RetryWanted(
                    "TimeoutError", f"timed out after {self.timeout_seconds:g}s", retry.wait_for(attempt)
                )
            raise TimeoutError(f"Tool '{self.name}' timed out after {self.timeout_seconds:g}s") from None
        except Exception as exc:
            if more and retry is not None and is_transient_error(exc):
                logger.warning(
                    "tool %s failed (attempt %d/%d), retrying: %s", self.name, attempt, retry.attempts, exc
                )
                return RetryWanted(type(exc).__name__, str(exc), retry.wait_for(attempt))
            if isinstance(exc, TransientToolError):
                return ToolResult(call_id, f"{TOOL_ERROR_PREFIX}{exc}", True)
            logger.warning("tool %s failed: %s: %s", self.name, type(exc).__name__, exc)
            return ToolResult(call_id, f"{TOOL_ERROR_PREFIX}{type(exc).__name__}: {exc}", True)
        if more and retry is not None and self._wants_retry(retry, result):
            return RetryWanted("RetriedResult", result.content[:500], retry.wait_for(attempt))
        return result

    def _wants_retry(self, retry: ToolRetry, result: ToolResult) -> bool:
        return retry_wanted(self, retry, result)

    async def _call_once(self, arguments: dict[str, Any]) -> Any:
        kwargs = bind_arguments(self.handler, arguments) if self.bind else dict(arguments)
        if inspect.iscoroutinefunction(self.handler):
            call: Any = self.handler(**kwargs)
        else:
            # A thread keeps a blocking handler off the event loop; to_thread copies the
            # context, so current_tool_context() works inside it too.
            call = asyncio.to_thread(functools.partial(self.handler, **kwargs))
        if self.timeout_seconds is None:
            value = await call
        else:
            value = await asyncio.wait_for(call, self.timeout_seconds)
        if inspect.isawaitable(value):
            value = await value
        return value


Tool = ToolDefinition


@dataclass(frozen=True)
class RetryWanted:
    """A try that failed transiently, with another allowed after ``delay`` seconds
    (``ToolDefinition.try_once``). ``kind`` names the failure (an exception's type, or
    ``RetriedResult`` for an error result the tool's retry asks to repeat)."""

    kind: str
    message: str
    delay: float


def is_transient_error(exc: BaseException) -> bool:
    """Whether a failure may clear on its own and had no effect worth fearing."""
    if isinstance(exc, TransientToolError | ConnectionError | TimeoutError):
        return True
    return bool(getattr(exc, "retryable", False))


_TRANSIENT_WORDS = (
    "rate limit",
    "rate_limit",
    "too many requests",
    "overloaded",
    "temporarily unavailable",
    "service unavailable",
    "try again later",
    "timed out",
    "timeout",
    "connection reset",
    "bad gateway",
    "gateway timeout",
)


def looks_transient(text: str) -> bool:
    """True when an error's text reads as throttling, overload or a timeout."""
    lowered = str(text).lower()
    return any(word in lowered for word in _TRANSIENT_WORDS)


def _to_result(value: Any, call_id: str) -> ToolResult:
    if isinstance(value, ToolResult):
        return ToolResult(call_id or value.tool_call_id, value.content, value.is_error)
    if value is None:
        return ToolResult(call_id, "")
    if isinstance(value, str):
        return ToolResult(call_id, value)
    if isinstance(value, dict | list):
        try:
            return ToolResult(call_id, json.dumps(value, ensure_ascii=False, default=str))
        except (TypeError, ValueError):
            pass
    return ToolResult(call_id, str(value))


def _owned_schema(schema: Any, *, copy: bool) -> Any:
    """A registry's own copy of a tool's schema (``copy=False``: ``schema`` is a fresh copy
    already), with the object type's defaults filled in. Copied once per registration: every
    agent a factory builds registers its tools again."""
    if not isinstance(schema, dict):
        return schema  # ToolDefinition says what is wrong with it
    owned = copy_schema(schema) if copy else schema
    owned.setdefault("type", "object")
    owned.setdefault("properties", {})
    return owned


class ToolRegistry:
    """The tools an agent may call, by name.

    ``default_timeout_seconds``, ``dedupe_calls`` and ``retry`` set the registry's own
    options; an ``AgentConfig.tools`` ``ToolPolicy`` fills in those left unset.
    """

    def __init__(
        self,
        *,
        default_timeout_seconds: float | None = None,
        dedupe_calls: bool | None = None,
        retry: ToolRetry | None = None,
        sandbox: Any = None,
    ) -> None:
        if sandbox is not None:
            raise ConfigurationError(
                "ToolRegistry(sandbox=...): sandboxes of the original harnessx are not supported by this "
                "harnessx yet; see docs/compatibility.md"
            )
        if default_timeout_seconds is not None and default_timeout_seconds <= 0:
            raise ConfigurationError("default_timeout_seconds must be positive")
        self._tools: dict[str, ToolDefinition] = {}
        self._default_timeout = default_timeout_seconds
        self._dedupe = dedupe_calls
        self._default_retry = _tool_retry(retry)
        self._inherits_timeout: set[str] = set()
        self._inherits_retry: set[str] = set()
        # Results of direct execute() calls, for dedupe_calls (runs deduplicate from their
        # own recorded calls instead, which a resume sees too).
        self._call_results: dict[str, ToolResult] = {}

    # ------------------------------------------------------------- options

    @property
    def policy(self) -> ToolPolicy:
        """The options in effect, including any adopted from an ``AgentConfig``."""
        return ToolPolicy(self._default_timeout, bool(self._dedupe), self._default_retry)

    @property
    def dedupe_calls(self) -> bool:
        return bool(self._dedupe)

    def adopt_policy(self, policy: ToolPolicy) -> None:
        """Fill in the options this registry was created without (its own values win)."""
        if self._default_timeout is None and policy.default_timeout_seconds is not None:
            self._default_timeout = policy.default_timeout_seconds
            for name in self._inherits_timeout & self._tools.keys():
                self._tools[name] = dataclasses.replace(
                    self._tools[name], timeout_seconds=self._default_timeout
                )
        if self._dedupe is None and policy.dedupe_calls:
            self._dedupe = True
        if self._default_retry is None and policy.retry is not None:
            self._default_retry = policy.retry
            for name in self._inherits_retry & self._tools.keys():
                self._tools[name] = dataclasses.replace(self._tools[name], retry=policy.retry)

    def reset_call_cache(self) -> None:
        """Forget the results ``execute`` reuses under ``dedupe_calls``."""
        self._call_results.clear()

    def _timeout(self, given: float | None) -> float:
        if given is not None:
            return given
        return self._default_timeout if self._default_timeout is not None else DEFAULT_TOOL_TIMEOUT_SECONDS

    # -------------------------------------------------------- registration

    def register(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        permission: PermissionLevel | str | None = None,
        concurrent: bool = True,
        replay_policy: ReplayPolicy | str = ReplayPolicy.MANUAL,
        timeout_seconds: float | None = None,
        retry: ToolRetry | RetryPolicy | None = None,
        retry_if_result: Callable[[ToolResult], bool] | None = None,
        replace: bool = False,
    ) -> Callable[[F], F]:
        """Decorator: register a sync or async function as a tool.

        The input schema comes from the type hints, the description from the docstring's
        summary, and argument descriptions from its ``Args:`` section.
        """
        # Settings are checked now, at the decorator call, not at decoration time.
        policy = _replay_policy(replay_policy)
        level = PermissionLevel(permission) if permission is not None else None
        own_retry = _tool_retry(retry)
        if timeout_seconds is not None and timeout_seconds <= 0:
            raise ConfigurationError("timeout_seconds must be positive")

        def decorate(handler: F) -> F:
            summary, schema = function_schema(handler)  # a copy of its own
            tool_name = name if name is not None else getattr(handler, "__name__", "")
            self._store(
                ToolDefinition(
                    name=tool_name,
                    description=description if description is not None else (summary or tool_name),
                    input_schema=_owned_schema(schema, copy=False),
                    handler=handler,
                    permission_level=level,
                    concurrent=concurrent,
                    replay_policy=policy,
                    timeout_seconds=self._timeout(timeout_seconds),
                    retry=own_retry or self._default_retry,
                    retry_if_result=retry_if_result,
                ),
                replace=replace,
                inherits_timeout=timeout_seconds is None,
                inherits_retry=own_retry is None,
                owns_schema=True,
            )
            return handler

        return decorate

    def register_tool(
        self,
        tool: Callable[..., Any] | ToolDefinition,
        *,
        name: str | None = None,
        description: str | None = None,
        permission: PermissionLevel | str | None = None,
        concurrent: bool | None = None,
        replay_policy: ReplayPolicy | str | None = None,
        timeout_seconds: float | None = None,
        retry: ToolRetry | RetryPolicy | None = None,
        retry_if_result: Callable[[ToolResult], bool] | None = None,
        replace: bool = False,
    ) -> ToolDefinition:
        """Register a function or a ``ToolDefinition`` directly (no decorator)."""
        if isinstance(tool, ToolDefinition):
            overrides: dict[str, Any] = {
                "name": name,
                "description": description,
                "permission_level": PermissionLevel(permission) if permission is not None else None,
                "concurrent": concurrent,
                "replay_policy": _replay_policy(replay_policy) if replay_policy is not None else None,
                "timeout_seconds": timeout_seconds,
                "retry": _tool_retry(retry),
                "retry_if_result": retry_if_result,
            }
            definition = dataclasses.replace(tool, **{k: v for k, v in overrides.items() if v is not None})
            # A definition still at the class default never chose a timeout: it takes the
            # registry's, and follows a policy adopted later, as a decorated function does.
            inherits_timeout = (
                timeout_seconds is None and tool.timeout_seconds == DEFAULT_TOOL_TIMEOUT_SECONDS
            )
            if inherits_timeout:
                definition = dataclasses.replace(definition, timeout_seconds=self._timeout(None))
            inherits_retry = definition.retry is None
            if inherits_retry and self._default_retry is not None:
                definition = dataclasses.replace(definition, retry=self._default_retry)
            return self._store(
                definition, replace=replace, inherits_timeout=inherits_timeout, inherits_retry=inherits_retry
            )
        if not callable(tool):
            raise ConfigurationError(f"register_tool needs a function or a ToolDefinition, got {tool!r}")
        self.register(
            name=name,
            description=description,
            permission=permission,
            concurrent=True if concurrent is None else concurrent,
            replay_policy=ReplayPolicy.MANUAL if replay_policy is None else replay_policy,
            timeout_seconds=timeout_seconds,
            retry=retry,
            retry_if_result=retry_if_result,
            replace=replace,
        )(tool)
        return self._tools[name if name is not None else tool.__name__]

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
        retry: ToolRetry | RetryPolicy | None = None,
        retry_if_result: Callable[[ToolResult], bool] | None = None,
        replace: bool = False,
    ) -> ToolDefinition:
        """Register a handler with an explicit JSON schema; it receives the arguments as given."""
        own_retry = _tool_retry(retry)
        return self._store(
            ToolDefinition(
                name=name,
                description=description,
                input_schema=_owned_schema(input_schema, copy=True),
                handler=handler,
                permission_level=PermissionLevel(permission) if permission is not None else None,
                concurrent=concurrent,
                replay_policy=_replay_policy(replay_policy),
                timeout_seconds=self._timeout(timeout_seconds),
                retry=own_retry or self._default_retry,
                retry_if_result=retry_if_result,
                bind=False,
            ),
            replace=replace,
            inherits_timeout=timeout_seconds is None,
            inherits_retry=own_retry is None,
            owns_schema=True,
        )

    def _store(
        self,
        tool: ToolDefinition,
        *,
        replace: bool,
        inherits_timeout: bool,
        inherits_retry: bool,
        owns_schema: bool = False,
    ) -> ToolDefinition:
        """Register ``tool``; ``owns_schema``: its schema is already the registry's own copy
        (``_owned_schema``), made when the definition was built, so it is not copied again."""
        if tool.name in self._tools and not replace:
            raise ConfigurationError(
                f"a tool named '{tool.name}' is already registered; pass replace=True to replace it"
            )
        owned = (
            tool
            if owns_schema
            else dataclasses.replace(tool, input_schema=_owned_schema(tool.input_schema, copy=True))
        )
        self._tools[owned.name] = owned
        for names, inherits in (
            (self._inherits_timeout, inherits_timeout),
            (self._inherits_retry, inherits_retry),
        ):
            names.discard(owned.name)
            if inherits:
                names.add(owned.name)
        return owned

    def unregister(self, name: str) -> bool:
        """Remove a tool; ``True`` if it was registered."""
        self._inherits_timeout.discard(name)
        self._inherits_retry.discard(name)
        return self._tools.pop(name, None) is not None

    def load_builtin(
        self,
        bundle_or_tool: str,
        *,
        include: Sequence[str] | None = None,
        exclude: Sequence[str] | None = None,
        permission: PermissionLevel | None = None,
        replace: bool = False,
    ) -> list[str]:
        """Register a built-in tool bundle, or one tool of it (``include`` and ``exclude``
        name the tools to take or leave, ``permission`` overrides their level); the names
        registered. ``"planning"`` (also ``"todos"``, ``"plan"``, or one of its tools,
        ``"write_todos"``, ``"read_todos"``) is the bundle this harnessx has."""
        from harnessx._builtin_tools import PLANNING_TOOLS, install_planning_tools, select_planning_tools

        name = bundle_or_tool.lower()
        if name in PLANNING_TOOLS:
            # One tool of the bundle: include and exclude may name only it.
            include, exclude = select_planning_tools(include, exclude, available=[name]), None
        elif name not in ("planning", "todos", "plan"):
            raise ConfigurationError(
                f"built-in tool bundle {bundle_or_tool!r} is not supported by this harnessx yet (only "
                "'planning' is); docs/compatibility.md lists what is supported"
            )
        return install_planning_tools(
            self, include=include, exclude=exclude, permission=permission, replace=replace
        )

    # ------------------------------------------------------------- lookups

    def get(self, name: str) -> ToolDefinition | None:
        return self._tools.get(name)

    def get_tool(self, name: str) -> ToolDefinition:
        """The tool named ``name``; ``ToolNotFoundError`` if there is none."""
        tool = self._tools.get(name)
        if tool is None:
            raise ToolNotFoundError(f"no tool named {name!r}; registered: {', '.join(self._tools) or 'none'}")
        return tool

    def resolve_tool(self, name: str, *, among: Iterable[str] | None = None) -> tuple[ToolDefinition, str]:
        """The tool a model's call names, and its name: the one named exactly, else the one
        whose name the call misses only in case, separators (``-``, ``_``, ``.``, space) or
        a namespace prefix (``functions.``, ``tools.``, ``default_api:``). A name that could
        mean two tools, or none, is not guessed: ``ToolNotFoundError`` with the tools whose
        names look alike and those there are, phrased for the model. ``among``: the names it
        may resolve to (default: every tool)."""
        offered = sorted(self._tools if among is None else (n for n in among if n in self._tools))
        if name in offered:
            return self._tools[name], name
        key = tool_name_key(name)
        matches = [known for known in offered if tool_name_key(known) == key]
        if key and len(matches) == 1:
            return self._tools[matches[0]], matches[0]
        ranked = sorted(
            ((difflib.SequenceMatcher(None, key, tool_name_key(known)).ratio(), known) for known in offered),
            key=lambda scored: (-scored[0], scored[1]),
        )
        close = [known for score, known in ranked if score >= 0.85][:3] if key else []
        hint = f" Did you mean {', '.join(repr(n) for n in close)}?" if close else ""
        raise ToolNotFoundError(
            f"No tool named {name!r}.{hint} Available tools: {', '.join(offered) or 'none'}"
        )

    def has_tool(self, name: str) -> bool:
        return name in self._tools

    def get_tools(self) -> list[ToolDefinition]:
        return list(self._tools.values())

    def list_tools(self) -> list[str]:
        return list(self._tools)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def get_tool_params(self) -> list[dict[str, Any]]:
        """Every tool as the model sees it: ``{name, description, input_schema}`` (copies)."""
        return [copy_schema(t.spec()) for t in self._tools.values()]

    def specs(self, only: Iterable[str] | None = None) -> list[dict[str, Any]]:
        wanted = set(only) if only is not None else None
        return [t.spec() for t in self._tools.values() if wanted is None or t.name in wanted]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolDefinition]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def fingerprint(self) -> dict[str, str]:
        """Name -> replay policy: what a resumed run must find again to be compatible."""
        return {t.name: t.policy.value for t in self._tools.values()}

    # ----------------------------------------------------------- executing

    async def execute(
        self, tool_call: ToolCall, *, permissions: PermissionManager | None = None
    ) -> ToolResult:
        """Check, authorize and run one call outside an agent run (``ASK`` needs the
        manager's approval callback; without a manager unspecified tools are allowed)."""
        call = copy.deepcopy(tool_call)
        tool = self._tools.get(call.name)
        if tool is None:
            return ToolResult(call.id, f"ToolNotFoundError: no tool named {call.name!r}", True)
        problem = tool.check_arguments(call)
        if problem is not None:
            return ToolResult(call.id, problem, True)
        manager = permissions if permissions is not None else PermissionManager()
        if not await manager.check_permission(call, tool):
            return ToolResult(call.id, PERMISSION_DENIED, True)
        key = _call_key(call) if self._dedupe else None
        if key is not None and key in self._call_results:
            reused = self._call_results[key]
            return ToolResult(call.id, reused.content, reused.is_error)
        try:
            result = await tool.invoke(call.input, call.id)
        except TimeoutError as exc:
            result = ToolResult(call.id, f"TimeoutError: {exc}", True)
        if key is not None:
            self._call_results[key] = result
        return result


def _call_key(call: ToolCall) -> str | None:
    """Name and arguments, argument order aside; ``None`` when they do not serialize."""
    try:
        return f"{call.name}:{json.dumps(call.input, sort_keys=True)}"
    except (TypeError, ValueError):
        return None


def normalize_tool_registry(
    tools: ToolRegistry | Iterable[Any] | None, *, policy: ToolPolicy | None = None, sandbox: Any = None
) -> ToolRegistry:
    """A ``ToolRegistry`` from what ``Agent(tools=...)`` accepts: a registry (adopting
    ``policy``), or functions and ``ToolDefinition``\\ s."""
    if sandbox is not None:
        raise ConfigurationError(
            "sandboxes of the original harnessx are not supported by this harnessx yet; "
            "see docs/compatibility.md"
        )
    if isinstance(tools, ToolRegistry):
        if policy is not None:
            tools.adopt_policy(policy)
        return tools
    registry = ToolRegistry()
    if policy is not None:
        registry.adopt_policy(policy)  # before registering, so its defaults apply
    if tools is None:
        return registry
    if isinstance(tools, str | bytes) or not isinstance(tools, Iterable):
        raise ConfigurationError(
            f"Agent(tools=...) takes a ToolRegistry or a list of functions, got {type(tools).__name__}"
        )
    for item in tools:
        if isinstance(item, str):
            raise ConfigurationError(
                f"Agent(tools=[{item!r}]): the original harnessx's built-in tool bundles are not "
                "supported by this harnessx yet; see docs/compatibility.md"
            )
        if isinstance(item, ToolDefinition) or callable(item):
            registry.register_tool(item)
        else:
            raise ConfigurationError(f"unsupported item in Agent(tools=[...]): {item!r}")
    return registry
