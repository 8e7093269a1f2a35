"""``Agent``: a model, a prompt, tools and permissions, run in this process."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from harnessx._config import AgentConfig
from harnessx._driver import Driver, RunSettings
from harnessx._engine import Engine
from harnessx._errors import ConfigurationError, RuntimeStateError
from harnessx._hooks import Hooks
from harnessx._middleware import Middleware
from harnessx._results import RunResult, RunStatus
from harnessx._runlog import MemoryRunLog
from harnessx._state import RunState
from harnessx._stream import OnReset, RunStream, text_of
from harnessx._tools import PermissionLevel, PermissionManager, ToolRegistry
from harnessx.providers._base import LLMProvider

__all__ = ["SNAPSHOT_VERSION", "Agent", "build_provider"]

SNAPSHOT_VERSION = 1


def build_provider(config: AgentConfig) -> LLMProvider:
    """The built-in provider ``config`` names, or the one the environment's API key implies."""
    name = (config.provider or os.environ.get("HARNESSX_PROVIDER") or "").strip().lower()
    if not name:
        if os.environ.get("ANTHROPIC_API_KEY"):
            name = "anthropic"
        elif os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
            name = "openai"
        else:
            raise ConfigurationError(
                "no model provider is configured: pass Agent(provider=...), set "
                "AgentConfig(provider='anthropic' or 'openai'), or set ANTHROPIC_API_KEY or "
                "OPENAI_API_KEY (OPENAI_BASE_URL for a local OpenAI-compatible server)"
            )
    model = config.model or None
    if name == "anthropic":
        from harnessx.providers._anthropic import AnthropicProvider

        return AnthropicProvider(model, retry=config.retry)
    if name in ("openai", "openai-compatible"):
        from harnessx.providers._openai import OpenAIProvider

        return OpenAIProvider(model, retry=config.retry)
    raise ConfigurationError(f"unknown provider {config.provider!r}: use 'anthropic' or 'openai'")


class Agent:
    """An LLM agent run in this process. One run at a time.

    The conversation lives in memory across ``run`` calls; ``save_session`` writes it to
    disk and ``Agent.load_session`` continues it in another process. For runs that must
    survive a crash, hand the agent to an ``AgentRuntime``.
    """

    def __init__(
        self,
        config: AgentConfig | None = None,
        provider: LLMProvider | None = None,
        tools: ToolRegistry | Iterable[Callable[..., Any]] | None = None,
        permissions: PermissionManager | Mapping[str, PermissionLevel | str] | None = None,
        hooks: Hooks | None = None,
        middleware: Middleware | None = None,
        extensions: Iterable[Any] | None = None,
    ) -> None:
        self.config = config or AgentConfig()
        self._provider = provider
        self._owns_provider = False
        self.tools = _as_registry(tools)
        self.permissions = (
            permissions
            if isinstance(permissions, PermissionManager)
            else PermissionManager(rules=permissions)
        )
        self.hooks = hooks or Hooks()
        self.middleware = middleware or Middleware()
        self.extensions = list(extensions or [])
        self.session_id = uuid.uuid4().hex
        self.messages: list[dict[str, Any]] = []
        self._busy = False
        self._closed = False

    def __repr__(self) -> str:
        names = self.tools.names()
        return f"Agent(model={self.config.model!r}, tools={names!r}, session_id={self.session_id!r})"

    # ------------------------------------------------------------- resources

    @property
    def provider(self) -> LLMProvider:
        """The model provider; built from the configuration on first use if none was given."""
        if self._closed:
            raise RuntimeStateError("this agent is closed; create a fresh Agent")
        if self._provider is None:
            self._provider = build_provider(self.config)
            self._owns_provider = True
        return self._provider

    @property
    def closed(self) -> bool:
        return self._closed

    async def aclose(self) -> None:
        """Close a provider the agent built itself (an injected one is the caller's)."""
        if self._closed:
            return
        self._closed = True
        if self._owns_provider and self._provider is not None:
            await self._provider.aclose()

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------ definition

    def engine(self, *, durable: bool) -> Engine:
        """The step rules for this agent; durable runs never consult an approver."""
        return Engine(
            tools=self.tools,
            permissions=self.permissions,
            limits=self.config.effective_limits,
            allowed_tools=self.config.tools,
            interactive_approval=not durable and self.permissions.approver is not None,
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
            offered_tools=config.tools,
            agent=self,
        )

    def fingerprint(self) -> dict[str, Any]:
        """What a durable run records about this agent, to refuse an incompatible resume."""
        return {"config": self.config.fingerprint_fields(), "tools": self.tools.fingerprint()}

    # ------------------------------------------------------------------ runs

    async def run(self, message: str) -> RunResult:
        """Run the agent on ``message`` and wait for the result."""
        return await self.run_stream(message).result()

    def run_stream(self, message: str) -> RunStream:
        """Run the agent on ``message``, yielding typed events as they happen.

        The run starts when the stream is first iterated, entered or awaited.
        """
        log = MemoryRunLog()
        outcome: asyncio.Future[RunResult] | None = None

        def start() -> None:
            nonlocal outcome
            self._claim()
            outcome = asyncio.ensure_future(self._drive(message, log))

        async def result() -> RunResult:
            assert outcome is not None
            return await asyncio.shield(outcome)

        return RunStream(log.follow, result, start=start)

    async def stream_text(self, message: str, *, on_reset: OnReset | None = None) -> AsyncIterator[str]:
        """Only the answer's text; raises a ``RunError`` if the run does not complete."""
        stream = self.run_stream(message)
        async with stream:
            async for event in stream:
                chunk = await text_of(event, on_reset)
                if chunk:
                    yield chunk
            result = await stream.result()
        if result.status is not RunStatus.COMPLETED:
            result.raise_for_status()

    def _claim(self) -> None:
        if self._closed:
            raise RuntimeStateError("this agent is closed; create a fresh Agent")
        if self._busy:
            raise RuntimeStateError("this agent is already running; one Agent runs one run at a time")
        self._busy = True

    async def _drive(self, message: str, log: MemoryRunLog) -> RunResult:
        try:
            provider = self.provider  # fail before the run starts if none can be built
            state = RunState(
                session_id=self.session_id,
                run_id=uuid.uuid4().hex,
                messages=list(self.messages),
                history_length=len(self.messages),
            )
            engine = self.engine(durable=False)
            driver = Driver(
                engine=engine, settings=self.run_settings(), provider=lambda: provider, committer=log
            )
            await driver.commit(state, engine.start(state, message))
            result = await driver.drive(state)
            self.messages = _settled(state)
            return result
        finally:
            self._busy = False
            log.close()

    # -------------------------------------------------------------- sessions

    def save_session(self, storage_dir: str | os.PathLike[str]) -> Path:
        """Write the conversation, configuration and extension state to
        ``storage_dir/<session_id>.json`` atomically; returns the path."""
        folder = Path(storage_dir)
        folder.mkdir(parents=True, exist_ok=True)
        snapshot = {
            "version": SNAPSHOT_VERSION,
            "session_id": self.session_id,
            "config": self.config.to_dict(),
            "messages": self.messages,
            "extensions": _extension_state(self.extensions),
        }
        path = folder / f"{self.session_id}.json"
        temporary = path.with_suffix(".json.tmp")
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(snapshot, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
        return path

    @classmethod
    def load_session(cls, session_id: str, storage_dir: str | os.PathLike[str], **kwargs: Any) -> Agent:
        """An agent that continues a saved conversation. ``kwargs`` go to ``Agent(...)``;
        a ``config`` among them replaces the saved one."""
        path = Path(storage_dir) / f"{session_id}.json"
        if not path.exists():
            raise ConfigurationError(f"no saved session {session_id!r} in {Path(storage_dir).resolve()}")
        try:
            snapshot = json.loads(path.read_text(encoding="utf-8"))
            version = snapshot.get("version")
            if version != SNAPSHOT_VERSION:
                raise ConfigurationError(
                    f"session file {path} has snapshot version {version!r}; this harnessx reads "
                    f"version {SNAPSHOT_VERSION}: upgrade harnessx to load it"
                )
            config = kwargs.pop("config", None) or AgentConfig.from_dict(snapshot["config"])
            messages = list(snapshot["messages"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            if isinstance(exc, ConfigurationError):
                raise
            raise ConfigurationError(
                f"session file {path} is not a readable harnessx snapshot ({exc}); "
                "restore it from a backup or start a new session"
            ) from exc
        agent = cls(config=config, **kwargs)
        agent.session_id = session_id
        agent.messages = messages
        _restore_extensions(agent.extensions, snapshot.get("extensions") or {})
        return agent


def _as_registry(tools: ToolRegistry | Iterable[Callable[..., Any]] | None) -> ToolRegistry:
    if isinstance(tools, ToolRegistry):
        return tools
    registry = ToolRegistry()
    for fn in tools or ():
        registry.register()(fn)
    return registry


def _settled(state: RunState) -> list[dict[str, Any]]:
    """The conversation to carry into the next run.

    A run that stopped between a model's tool calls and their results would leave calls
    without answers, which providers reject; they get an explanatory error result.
    """
    messages = list(state.messages)
    last = messages[-1] if messages else {}
    calls = last.get("tool_calls") if last.get("role") == "assistant" else None
    for call in calls or []:
        entry = next((e for e in state.entries() if e.call.id == call["id"]), None)
        result = entry.result if entry is not None else None
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call["id"],
                "name": call["name"],
                "content": result.content if result else f"Not run: the run ended {state.status.value}",
                "is_error": result.is_error if result else True,
            }
        )
    return messages


def _extension_name(extension: Any) -> str:
    return str(getattr(extension, "name", None) or type(extension).__name__)


def _extension_state(extensions: list[Any]) -> dict[str, Any]:
    """State of extensions that can export it (``export_state() -> JSON-ready dict``)."""
    return {
        _extension_name(ext): ext.export_state()
        for ext in extensions
        if callable(getattr(ext, "export_state", None))
    }


def _restore_extensions(extensions: list[Any], saved: dict[str, Any]) -> None:
    for ext in extensions:
        name = _extension_name(ext)
        if name in saved and callable(getattr(ext, "import_state", None)):
            ext.import_state(saved[name])
