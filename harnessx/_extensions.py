"""Extensions: a unit of behaviour that wires itself into an agent (harnessx 0.9.1's API).

An ``Extension`` subclass names itself (``name``), says when it installs (``priority``,
lower first) and registers what it adds through the ``ExtensionContext`` its ``install``
receives: tools, middleware, hook callbacks, system-prompt providers. Whatever it
registers that way is removed again when the agent closes, after its ``teardown``.

Its turn callbacks: ``on_turn_start(ctx, message)`` before a run's first model call (a
failure fails the run), ``on_turn_end(ctx, output)`` once a run completes, and
``on_turn_complete(ctx, result)`` once it ends completed, failed or cancelled (best
effort: a failure is logged). A durable run may be resumed after a crash, so a callback
can run again for the same run and must tolerate it. ``on_save_session`` /
``on_load_session`` carry its state in a session snapshot.

Objects that are not ``Extension`` subclasses are still accepted in ``Agent(extensions=)``
(their ``export_state`` / ``import_state`` or session callbacks are used; nothing is
installed).
"""

from __future__ import annotations

import inspect
import logging
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from harnessx._config import AgentConfig
from harnessx._hooks import HookCallback, HookEvent, HookManager, Registration
from harnessx._memory import ConversationMemory
from harnessx._middleware import Middleware, MiddlewarePipeline
from harnessx._policies import ToolRetry
from harnessx._results import RunResult, RunStatus, ToolResult
from harnessx._tools import PermissionLevel, ReplayPolicy, ToolRegistry

if TYPE_CHECKING:
    from harnessx._agent import Agent

__all__ = [
    "Extension",
    "ExtensionContext",
    "close_extensions",
    "extension_name",
    "install_extensions",
    "prompt_additions",
    "turn_completed",
    "turn_ended",
    "turn_started",
]

logger = logging.getLogger("harnessx.extensions")


def extension_name(extension: Any) -> str:
    """The name an extension's state is saved under: its ``name``, else its class's name."""
    return str(getattr(extension, "name", None) or type(extension).__name__)


class ExtensionContext:
    """What an extension works through: the agent's parts, and registrations that the
    agent undoes when it closes (each also returns a ``Registration`` to undo it sooner)."""

    def __init__(self, agent: Agent, owner: str | None = None) -> None:
        self._agent = agent
        self._owner = owner

    @property
    def agent(self) -> Agent:
        return self._agent

    @property
    def name(self) -> str | None:
        """The extension this context belongs to."""
        return self._owner

    @property
    def session_id(self) -> str:
        return self._agent.session_id

    @property
    def config(self) -> AgentConfig:
        return self._agent.config

    @property
    def tools(self) -> ToolRegistry:
        return self._agent.tools

    @property
    def hooks(self) -> HookManager:
        return self._agent.hooks

    @property
    def middleware(self) -> MiddlewarePipeline:
        return self._agent.middleware

    @property
    def memory(self) -> ConversationMemory:
        return self._agent.memory

    def _track(self, registration: Registration) -> Registration:
        if self._owner is not None:
            self._agent._extension_registrations.setdefault(self._owner, []).append(registration)
        return registration

    def register_tool(
        self,
        handler: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        input_schema: dict[str, Any] | None = None,
        permission: PermissionLevel | str | None = None,
        concurrent: bool = True,
        replay_policy: ReplayPolicy | str = ReplayPolicy.MANUAL,
        timeout_seconds: float | None = None,
        retry: ToolRetry | None = None,
        retry_if_result: Callable[[ToolResult], bool] | None = None,
        replace: bool = False,
    ) -> Registration:
        """Register a tool (with ``input_schema``, the handler gets the arguments as given);
        undoing it puts back a tool it replaced."""
        tools = self._agent.tools
        tool_name = name or handler.__name__
        previous = tools.get(tool_name)
        if input_schema is not None:
            definition = tools.register_with_schema(
                tool_name,
                description or handler.__doc__ or "",
                input_schema,
                handler,
                permission=permission,
                concurrent=concurrent,
                replay_policy=replay_policy,
                timeout_seconds=timeout_seconds,
                retry=retry,
                retry_if_result=retry_if_result,
                replace=replace,
            )
        else:
            definition = tools.register_tool(
                handler,
                name=name,
                description=description,
                permission=permission,
                concurrent=concurrent,
                replay_policy=replay_policy,
                timeout_seconds=timeout_seconds,
                retry=retry,
                retry_if_result=retry_if_result,
                replace=replace,
            )

        def remove() -> None:
            # Only the definition this registration made: a later replacement stays.
            if tools.get(tool_name) is definition:
                tools.unregister(tool_name)
                if previous is not None:
                    tools.register_tool(previous, replace=True)

        return self._track(Registration(remove))

    def add_middleware(self, middleware: Middleware) -> Registration:
        return self._track(self._agent.middleware.add(middleware))

    def on_hook(self, event: HookEvent | str, callback: HookCallback) -> Registration:
        return self._track(self._agent.hooks.on(event, callback))

    def register_prompt_provider(self, provider: Callable[[], str]) -> Registration:
        """``provider()`` returns text appended to the system prompt of each model call
        (after the configured prompt and the planning guidance; empty text adds nothing)."""
        providers = self._agent.prompt_providers
        providers.append(provider)

        def remove() -> None:
            providers[:] = [p for p in providers if p is not provider]

        return self._track(Registration(remove))

    def get_state(self, key: str, default: Any = None) -> Any:
        """A value kept in the session's metadata (saved with ``save_session``)."""
        return self._agent.session_metadata.setdefault("extensions", {}).get(key, default)

    def set_state(self, key: str, value: Any) -> None:
        self._agent.session_metadata.setdefault("extensions", {})[key] = value

    def __getattr__(self, name: str) -> Any:
        # 0.9.1's contexts forwarded unknown names to the agent; kept for extensions
        # written against that, with the same deprecation.
        if name.startswith("_"):
            raise AttributeError(name)
        warnings.warn(
            f"ExtensionContext.{name} is forwarded to the agent; use ctx.agent.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(self._agent, name)


class Extension(ABC):
    """Base class of an extension: set ``name`` (unique on an agent) and implement
    ``install(ctx)``; override the callbacks wanted (each does nothing by default)."""

    name: str = ""
    priority: int = 100

    @abstractmethod
    def install(self, ctx: ExtensionContext) -> None:
        """Register tools, middleware, hooks and prompt providers through ``ctx``. It runs in
        ``Agent(...)``: acquire no async resources here."""

    async def on_turn_start(self, ctx: ExtensionContext, user_message: str) -> None:
        return None

    async def on_turn_end(self, ctx: ExtensionContext, final_text: str) -> None:
        return None

    async def on_turn_complete(self, ctx: ExtensionContext, result: RunResult) -> None:
        return None

    async def on_save_session(self, ctx: ExtensionContext) -> dict[str, Any]:
        return {}

    async def on_load_session(self, ctx: ExtensionContext, state: dict[str, Any]) -> None:
        return None

    async def teardown(self) -> None:
        """Release what the extension holds; the agent calls it from ``aclose()``."""
        return None


def _validated(extensions: Iterable[Any]) -> list[Any]:
    """The extensions in install order (by ``priority``, stable), all checked before any is
    installed, so a bad set changes nothing."""
    given = list(extensions)
    seen: set[str] = set()
    for extension in given:
        if isinstance(extension, Extension):
            if not extension.name:
                raise ValueError(
                    f"extension {type(extension).__name__} has no name: set the `name` class attribute"
                )
            if type(extension.priority) is not int:
                raise TypeError(
                    f"extension {extension.name!r}: priority must be an int, got {extension.priority!r}"
                )
        name = extension_name(extension)
        if name in seen:
            raise ValueError(f"Duplicate extension name {name!r}: each extension of an agent needs its own")
        seen.add(name)
    return sorted(given, key=lambda e: e.priority if isinstance(e, Extension) else 100)


def install_extensions(agent: Agent, extensions: Iterable[Any]) -> list[Any]:
    """Install ``extensions`` into ``agent``; if one fails, every registration made so far
    is undone and the error raised."""
    ordered = _validated(extensions)
    agent._extension_registrations = {}
    try:
        for extension in ordered:
            if isinstance(extension, Extension):
                name = extension_name(extension)
                extension.install(ExtensionContext(agent, name))
    except BaseException:
        for registrations in agent._extension_registrations.values():
            for registration in reversed(registrations):
                registration.close()
        agent._extension_registrations = {}
        raise
    return ordered


def _hooked(agent: Agent | None) -> list[Extension]:
    if agent is None:
        return []
    return [e for e in agent.extensions if isinstance(e, Extension)]


def has_turn_callbacks(agent: Agent | None) -> bool:
    """Whether ``agent`` has extensions whose turn callbacks a run calls."""
    return bool(_hooked(agent))


async def turn_started(agent: Agent | None, message: str) -> None:
    for extension in _hooked(agent):
        assert agent is not None
        await extension.on_turn_start(ExtensionContext(agent, extension.name), message)


async def turn_ended(agent: Agent | None, output: str) -> None:
    for extension in _hooked(agent):
        assert agent is not None
        try:
            await extension.on_turn_end(ExtensionContext(agent, extension.name), output)
        except Exception:
            # The run's completion is already stored: it cannot be failed afterwards.
            logger.exception("extension %s: on_turn_end failed", extension.name)


async def turn_completed(agent: Agent | None, result: RunResult) -> None:
    if result.status not in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED):
        return
    for extension in reversed(_hooked(agent)):
        assert agent is not None
        try:
            await extension.on_turn_complete(ExtensionContext(agent, extension.name), result)
        except Exception:
            logger.exception("extension %s: on_turn_complete failed", extension.name)


async def close_extensions(agent: Agent) -> list[Exception]:
    """Tear the extensions down in reverse install order and undo their registrations;
    the errors of those that failed (every one is still torn down)."""
    errors: list[Exception] = []
    for extension in reversed(agent.extensions):
        try:
            teardown = getattr(extension, "teardown", None)
            if callable(teardown):
                outcome = teardown()
                if inspect.isawaitable(outcome):
                    await outcome
        except Exception as exc:
            errors.append(exc)
        finally:
            for registration in reversed(agent._extension_registrations.pop(extension_name(extension), [])):
                registration.close()
    return errors


def prompt_additions(system: str, providers: Iterable[Callable[[], str]]) -> str:
    """``system`` with each prompt provider's text appended (a failing one is logged and
    skipped: a prompt decoration never fails a run)."""
    for provider in providers:
        try:
            extra = provider()
        except Exception:
            logger.exception("prompt provider %r failed; its text is left out", provider)
            continue
        if extra:
            system = f"{system}\n\n{extra}" if system else str(extra)
    return system
