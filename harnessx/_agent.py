"""``Agent``: a model, a prompt, tools and permissions, run in this process."""

from __future__ import annotations

import asyncio
import copy
import os
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harnessx._builtin_tools import (
    install_builtin_tools,
    set_todos_message,
    system_prompt_with_guidance,
    todos_of,
)
from harnessx._config import AgentConfig
from harnessx._driver import Driver, RunControl, RunSettings
from harnessx._engine import Engine, model_iterations
from harnessx._errors import ConfigurationError, RuntimeStateError
from harnessx._extensions import close_extensions, extension_name, install_extensions
from harnessx._guardrails import GuardrailsEngine
from harnessx._hooks import HookManager, Registration
from harnessx._ids import uuid7
from harnessx._memory import ConversationMemory
from harnessx._messages import close_open_calls
from harnessx._middleware import MiddlewarePipeline
from harnessx._permissions import PermissionLevel, PermissionManager
from harnessx._rate_gate import RateGate
from harnessx._results import RunResult
from harnessx._runlog import MemoryRunLog
from harnessx._sessions import PersistentMemory, SessionState
from harnessx._snapshot import restore, snapshot
from harnessx._state import RunState
from harnessx._stream import OnReset, RunStream
from harnessx._tools import ToolDefinition, ToolRegistry, normalize_tool_registry
from harnessx.providers._base import LLMProvider, TokenUsage
from harnessx.store._protocol import Store

__all__ = ["Agent", "build_provider"]

_UNSUPPORTED_ARGUMENTS = {
    "sandbox": "sandboxes",
    "mcp": "MCP servers",
    "skills": "skills",
    "knowledge": "knowledge bundles",
    "subagents": "subagents",
}


def _provider_name(config: AgentConfig) -> str | None:
    """The provider ``config`` names; with ``provider=None``, the one the environment's API
    key implies (``None``: nothing is configured)."""
    if config.provider is not None:
        return config.provider
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "anthropic"
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        return "openai"
    return None


def build_provider(config: AgentConfig) -> LLMProvider:
    """The provider ``config`` names (a failover chain with ``fallbacks``); with
    ``provider=None``, the one the environment's API key implies."""
    # Looked up on harnessx.core at each call, as 0.9.1's Agent does: a program (or a test)
    # that replaces harnessx.core.make_provider decides what an Agent builds.
    import harnessx.core

    name = _provider_name(config)
    if name is None:
        raise ConfigurationError(
            "no model provider is configured: pass Agent(provider=...), set "
            "AgentConfig(provider='anthropic' or 'openai'), or set ANTHROPIC_API_KEY or "
            "OPENAI_API_KEY (OPENAI_BASE_URL for a local OpenAI-compatible server)"
        )
    if config.fallbacks:
        from harnessx.providers._fallback import FallbackProvider

        return FallbackProvider.from_config(config)
    # By name alone, as 0.9.1 (a factory given to register_provider takes no arguments):
    # each request names its model. One attempt per call: the run retries failed model
    # calls under config.retry.
    return harnessx.core.make_provider(name)


class Agent:
    """An LLM agent run in this process. One run at a time.

    The conversation lives in ``memory`` across ``run`` calls; ``save_session`` writes it to
    disk and ``Agent.load_session`` continues it in another process. For runs that must
    survive a crash, hand the agent to an ``AgentRuntime``.
    """

    def __init__(
        self,
        config: AgentConfig | None = None,
        provider: LLMProvider | None = None,
        tools: ToolRegistry | Iterable[Callable[..., Any] | ToolDefinition] | None = None,
        memory: ConversationMemory | None = None,
        permissions: PermissionManager | Mapping[str, PermissionLevel | str] | None = None,
        hooks: HookManager | None = None,
        middleware: MiddlewarePipeline | None = None,
        sandbox: Any = None,
        mcp: Any = None,
        skills: Any = None,
        knowledge: Any = None,
        extensions: Iterable[Any] | None = None,
        subagents: Any = None,
    ) -> None:
        given = {
            "sandbox": sandbox,
            "mcp": mcp,
            "skills": skills,
            "knowledge": knowledge,
            "subagents": subagents,
        }
        for argument, value in given.items():
            if value is not None:
                raise ConfigurationError(
                    f"Agent({argument}=...): {_UNSUPPORTED_ARGUMENTS[argument]} of the original harnessx "
                    "are not supported by this harnessx yet; see docs/compatibility.md"
                )
        self.config = config or AgentConfig()
        if provider is not None and self.config.fallbacks:
            raise ConfigurationError(
                "AgentConfig.fallbacks and an injected provider both describe what to call: keep the "
                "fallbacks in the config and pass no provider, or build the chain yourself with "
                "FallbackProvider(primary, fallbacks=[...]) and pass that"
            )
        self._provider = provider
        self._owns_provider = False
        if provider is None and _provider_name(self.config) is not None:
            # Built now, as 0.9.1 builds it (so that a program sees a provider it cannot
            # build at once); with none configured, a run fails saying what to set.
            self._provider = build_provider(self.config)
            self._owns_provider = True
        self.tools = normalize_tool_registry(tools, policy=self.config.tools)
        self._owns_memory = memory is None
        self.memory = memory or ConversationMemory(max_result_chars=self.config.limits.max_result_chars)
        self.permissions = (
            permissions
            if isinstance(permissions, PermissionManager)
            else PermissionManager(rules=permissions)
        )
        self.hooks = hooks or HookManager()
        self.middleware = middleware or MiddlewarePipeline()
        install_builtin_tools(self.tools, planning=self.config.planning, memory=lambda: self.memory)
        self._session_id = uuid7()
        self.session_metadata: dict[str, Any] = {}
        # Texts appended to the system prompt of each model call (extensions register them).
        self.prompt_providers: list[Callable[[], str]] = []
        self._extension_registrations: dict[str, list[Registration]] = {}
        self._close_errors: list[Exception] = []
        self.extensions: list[Any] = install_extensions(self, extensions or [])
        # The agent's account of iterations, tokens and cost (0.9.1's agent.guardrails):
        # total_usage and lifetime_iterations are kept there.
        self.guardrails = GuardrailsEngine.from_limits(self.config.limits)
        self._busy = False
        self._closed = False
        self._rates: RateGate | None = None

    def use_rate_limits(self, store: Store) -> Agent:
        """Make this agent's own runs (``run``, ``run_stream``, ...) obey the fleet-wide model
        rate limits kept in ``store`` (``harnessx limits rate``), sharing their buckets with
        every worker and runtime on it (docs/scheduling.md, *Model rate limits*): each model
        call reserves its start there and waits for it with no request open. ``store`` must
        be open while the agent runs; the agent does not close it. Returns the agent."""
        self._rates = RateGate.shared(store)
        return self

    def __repr__(self) -> str:
        names = self.tools.names()
        return f"Agent(model={self.config.model!r}, tools={names!r}, session_id={self.session_id!r})"

    # ------------------------------------------------------------- identity

    @property
    def session_id(self) -> str:
        return self._session_id

    @session_id.setter
    def session_id(self, value: str) -> None:
        self._session_id = value

    @property
    def total_usage(self) -> TokenUsage:
        """Tokens this agent's plain runs have used (restored with a session)."""
        return self.guardrails.total_usage

    @total_usage.setter
    def total_usage(self, value: TokenUsage) -> None:
        self.guardrails._restore(usage=value)

    @property
    def lifetime_iterations(self) -> int:
        """Model-call iterations of this agent's plain runs (restored with a session)."""
        return self.guardrails.lifetime_iterations

    @lifetime_iterations.setter
    def lifetime_iterations(self, value: int) -> None:
        self.guardrails._restore(lifetime_iterations=value)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation in the engine's form (``memory.get_messages()`` gives the
        content-block form)."""
        return self.memory.engine_messages()

    @messages.setter
    def messages(self, value: list[dict[str, Any]]) -> None:
        self.memory.replace_engine_messages(copy.deepcopy(value))

    @property
    def todos(self) -> list[dict[str, str]]:
        """The task list the planning tools keep (``[{"content", "status"}]``)."""
        return todos_of(self.memory.history())

    @todos.setter
    def todos(self, value: list[dict[str, Any]]) -> None:
        """Set the task list for this agent's next runs, as if ``write_todos`` had been
        called (checked as it checks one: ``ValueError`` for a list it cannot use). Recorded
        in the conversation, never shown to the model but as the task list."""
        self.memory.replace_engine_messages([*self.memory.history(), set_todos_message(value)])

    # ------------------------------------------------------------- resources

    @property
    def provider(self) -> LLMProvider:
        """The model provider: the one given, else built from the configuration with the agent
        (on first use when none was configured then). A closed agent still shows the
        provider it had (closed, if the agent owned it)."""
        if self._provider is None:
            if self._closed:  # never build one for a closed agent (nothing would close it)
                raise RuntimeStateError("this agent is closed; create a fresh Agent")
            self._provider = build_provider(self.config)
            self._owns_provider = True
        return self._provider

    @property
    def closed(self) -> bool:
        """True once ``aclose()`` has started; the agent accepts no more runs."""
        return self._closed

    @property
    def busy(self) -> bool:
        """True while a run is in progress."""
        return self._busy

    async def aclose(self) -> None:
        """Tear the extensions down (undoing what they registered), then close a provider
        the agent built itself (an injected one is the caller's). Extensions whose
        ``teardown`` failed are reported in an ``ExceptionGroup`` once the rest is closed
        (and again by a later ``aclose()``)."""
        if not self._closed:
            self._closed = True
            self._close_errors = await close_extensions(self)
            if self._owns_provider and self._provider is not None:
                await self._provider.aclose()
            if self._owns_memory:
                await self.memory.aclose()
        if self._close_errors:
            raise ExceptionGroup("extension teardown failed", self._close_errors)

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------ definition

    def engine(self, *, durable: bool) -> Engine:
        """The step rules for this agent; durable runs record approvals instead of asking.
        A plain run's cost limit also counts what the agent spent before it, as 0.9.1's."""
        return Engine(
            tools=self.tools,
            permissions=self.permissions,
            limits=self.config.limits,
            allowed_tools=self.config.offered_tools,
            interactive_approval=not durable,
            cost_baseline=None if durable else self.total_usage,
        )

    def run_settings(self) -> RunSettings:
        config = self.config
        return RunSettings(
            model=config.model or str(getattr(self._provider, "model", "") or ""),
            system_prompt=config.system_prompt,
            max_tokens=config.max_tokens,
            temperature=config.temperature,
            tools=self.tools,
            permissions=self.permissions,
            hooks=self.hooks,
            middleware=self.middleware,
            retry=config.effective_retry,
            offered_tools=config.offered_tools,
            agent=self,
            progress=config.progress,
            limits=config.limits,
            prompt_cache=config.prompt_cache,
        )

    def _build_system_prompt(self) -> str:
        """The system prompt the next request carries (the configured one, and the planning
        guidance while the built-in planning tools are installed); harnessx 0.9.1's name."""
        return system_prompt_with_guidance(self.config.system_prompt, self.tools)

    def fingerprint(self) -> dict[str, Any]:
        """What a durable run records about this agent, to refuse an incompatible resume."""
        return {"config": self.config.fingerprint_fields(), "tools": self.tools.fingerprint()}

    # ------------------------------------------------------------------ runs

    # The message's parameter is ``user_message``, 0.9.1's name, so that a call naming it works.
    async def run(self, user_message: str) -> RunResult:
        """Run the agent on ``user_message`` and wait for the result. A failure (no model
        configured, say) is in ``result.error``, not raised. Cancelling the call cancels
        the run (it ends ``cancelled``, its hooks and extensions told) and raises
        ``CancelledError``."""
        stream = self._stream(user_message, stream=False)
        try:
            return await stream.result()
        except asyncio.CancelledError:
            await stream.aclose()
            raise

    def run_stream(self, user_message: str) -> RunStream:
        """Run the agent on ``user_message``, yielding typed events as they happen (text
        deltas included). The run starts when the stream is first iterated, entered or awaited.
        """
        return self._stream(user_message, stream=True)

    def _stream(self, message: str, *, stream: bool) -> RunStream:
        log = MemoryRunLog()
        control = RunControl()
        outcome: asyncio.Future[RunResult] | None = None

        def start() -> None:
            nonlocal outcome
            self._claim()
            outcome = asyncio.ensure_future(self._drive(message, log, control, stream=stream))

        async def result() -> RunResult:
            assert outcome is not None
            return await asyncio.shield(outcome)

        async def cancel() -> None:
            # The stream closed (or run() was cancelled) before the run ended: the run is
            # cancelled as any run is, so that it ends `cancelled` with its hooks and
            # extensions told and the conversation kept; the agent is free once it has.
            if outcome is None or outcome.done():
                return
            control.request_cancel()
            try:
                await asyncio.shield(outcome)
            except asyncio.CancelledError:
                if not outcome.done():  # cancelled again while waiting: stop it outright
                    outcome.cancel()
                    await asyncio.gather(outcome, return_exceptions=True)
                raise
            except Exception:
                pass  # the run's own failure is in its result, which nobody asks for now

        return RunStream(log.follow, result, start=start, cancel=cancel)

    async def stream_text(self, user_message: str, *, on_reset: OnReset | None = None) -> AsyncIterator[str]:
        """Only the answer's text; raises a ``RunError`` at the end if the run is not ``ok``."""
        async with self.run_stream(user_message) as stream:
            async for chunk in stream.text(on_reset=on_reset):
                yield chunk

    def _claim(self) -> None:
        if self._closed:
            raise RuntimeStateError("this agent is closed; create a fresh Agent")
        if self._busy:
            raise RuntimeStateError(
                "this agent is busy with another run; one Agent runs one run at a time "
                "(await it, or use another Agent)"
            )
        self._busy = True

    async def _drive(
        self, message: str, log: MemoryRunLog, control: RunControl, *, stream: bool
    ) -> RunResult:
        try:
            history = self.memory.history()
            state = RunState(
                session_id=self.session_id,
                run_id=uuid7(),
                messages=history,
                history_length=len(history),
            )
            engine = self.engine(durable=False)
            driver = Driver(
                engine=engine,
                settings=self.run_settings(),
                # Resolved at the model call, so that a missing model fails the run (in
                # result.error) instead of raising from run().
                provider=lambda: self.provider,
                committer=log,
                control=control,
                rates=self._rates,
                stream=stream,
                checkpoints=False,
            )
            await driver.commit(state, engine.start(state, message))
            result = await driver.drive(state)
            self.memory.replace_engine_messages(_settled(state))
            for entry in state.tools.values():
                final = entry.result or entry.raw_result
                if final is not None and len(final.content) > self.config.limits.max_result_chars:
                    self.memory.keep_result(entry.call.id, final.content)
            self.guardrails.track_usage(result.usage)
            self.guardrails._count_run(model_iterations(state))
            return result
        finally:
            self._busy = False
            log.close()

    # -------------------------------------------------------------- sessions

    async def save_session(self, storage_dir: str | os.PathLike[str] = ".agent_sessions") -> str:
        """Write the conversation, configuration and extension state to
        ``storage_dir/<session_id>.json`` atomically; returns the session id.

        A snapshot is taken between runs and never resumes a run that was interrupted
        halfway; use ``AgentRuntime`` for that."""
        if self._busy or self._closed:
            raise RuntimeStateError("cannot snapshot an agent that is running or closed")
        data = await snapshot(self)
        state = SessionState(
            session_id=self.session_id,
            messages=data["messages"],
            total_usage=self.total_usage,
            metadata=data["metadata"],
            config=self.config.to_dict(),
            extensions=data["extensions"],
            lifetime_iterations=data["lifetime_iterations"],
            provider_state=data["provider_state"],
            results=data["results"],
        )
        await asyncio.to_thread(PersistentMemory(storage_dir).save_session, state)
        return self.session_id

    @classmethod
    async def load_session(
        cls, session_id: str, storage_dir: str | os.PathLike[str] = ".agent_sessions", **kwargs: Any
    ) -> Agent:
        """An agent that continues a saved conversation. ``kwargs`` go to ``Agent(...)``
        (provider, tools and extensions are code: pass them again); a ``config`` among them
        must equal the saved one."""
        state = await asyncio.to_thread(PersistentMemory(storage_dir).load_session, session_id)
        if state.config:
            try:
                saved = AgentConfig.from_dict(state.config)
            except (TypeError, ValueError) as exc:
                raise ConfigurationError(
                    f"the configuration saved with session {session_id!r} cannot be read ({exc}); pass "
                    "the session to a harnessx that wrote it, or start a new session"
                ) from exc
            explicit = kwargs.get("config")
            if explicit is not None and asdict(explicit) != asdict(saved):
                raise ConfigurationError(
                    f"the config passed to load_session differs from the one saved with session "
                    f"{session_id!r}: "
                    "leave config= out to use the saved one"
                )
            kwargs["config"] = saved
        agent = cls(**kwargs)
        try:
            missing = sorted(set(state.extensions) - {extension_name(e) for e in agent.extensions})
            if missing:
                raise ConfigurationError(
                    f"session {session_id!r} was saved with extension state for {missing}: pass those "
                    "extensions to load_session(..., extensions=[...])"
                )
            artifacts = await asyncio.to_thread(_artifacts, storage_dir, state)
            await restore(
                agent,
                {
                    "session_id": state.session_id,
                    "messages": state.messages,
                    "metadata": state.metadata,
                    "extensions": state.extensions,
                    "total_usage": state.total_usage.to_dict(),
                    "lifetime_iterations": state.lifetime_iterations,
                    "provider_state": state.provider_state,
                    "results": {**artifacts, **state.results},
                },
            )
        except BaseException:
            await agent.aclose()
            raise
        return agent


_ARTIFACT = re.compile(r"Full output saved to: artifact://([0-9a-f]{16,128})\]")


def _artifacts(storage_dir: str | os.PathLike[str], state: SessionState) -> dict[str, str]:
    """Whole texts of large results an original harnessx snapshot keeps as artifact files
    (``<storage_dir>/artifacts/<session_id>/<key>``), by the tool call they answer."""
    found: dict[str, str] = {}
    folder = Path(storage_dir) / "artifacts" / state.session_id
    for message in state.messages:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            match = _ARTIFACT.search(str(block.get("content", ""))[:600])
            path = folder / match.group(1) if match else None
            if path is not None and path.is_file():
                found[str(block.get("tool_use_id"))] = path.read_text(encoding="utf-8", errors="replace")
    return found


def _settled(state: RunState) -> list[dict[str, Any]]:
    """The conversation to carry into the next run.

    A run that stopped between a model's tool calls and their results would leave calls
    without answers, which providers reject; they get an explanatory error result.
    """
    messages = list(state.messages)
    recorded = {e.call.id: e.result for e in state.entries() if e.result is not None}
    return messages + close_open_calls(messages, recorded, f"Not run: the run ended {state.status.value}")
