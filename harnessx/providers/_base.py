"""The model-provider contract: what the engine sends a model and what it gets back.

Messages handed to a provider are plain JSON-ready dicts in content-block form (the shape
harnessx 0.9.1 passes, close to Anthropic's Messages API), so that a provider written by a
user (or a scripted test double) can read them without importing harnessx types:

- ``{"role": "user", "content": str}``
- ``{"role": "assistant", "content": [block, ...]}`` with blocks
  ``{"type": "text", "text": str}``, ``{"type": "thinking", "thinking": str}`` and
  ``{"type": "tool_use", "id": str, "name": str, "input": dict}``
- ``{"role": "user", "content": [{"type": "tool_result", "tool_use_id": str,
  "content": str, "is_error": True}, ...]}`` (``is_error`` only on an error result): the
  answers to the previous assistant turn's calls, first in the message that follows it

Roles alternate, and every ``tool_use`` is answered in the next message. Built-in providers
translate this to their wire format. Tools are ``{"name": str, "description": str,
"input_schema": dict}`` (JSON Schema).
"""

from __future__ import annotations

import copy
import inspect
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from enum import Enum
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from harnessx._model_limits import ModelLimits
    from harnessx._policies import PromptCacheHint

__all__ = [
    "INVALID_ARGUMENTS",
    "LLMProvider",
    "ProviderResponse",
    "StopReason",
    "StreamChunk",
    "TokenUsage",
    "ToolCall",
    "ToolCallDelta",
    "call_create",
    "native_continuation",
    "streams_natively",
]


class StopReason(str, Enum):  # noqa: UP042 - str() gives the member name, as in 0.9.1
    """Why the model stopped producing output. A ``str`` enum: ``reason == "end_turn"``
    holds; ``str(reason)`` is ``StopReason.END_TURN``, ``reason.value`` the string."""

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    SAFETY = "safety"
    REFUSAL = "refusal"
    PAUSE_TURN = "pause_turn"
    OTHER = "other"

    @classmethod
    def coerce(cls, value: StopReason | str | None) -> StopReason:
        if value is None:
            return cls.END_TURN
        if isinstance(value, StopReason):
            return value
        try:
            return cls(value)
        except ValueError:
            return cls.OTHER


# Tool calls are honoured whatever the stop reason says, except these.
STOP_REASONS_WITHOUT_TOOLS = frozenset({StopReason.MAX_TOKENS, StopReason.SAFETY, StopReason.REFUSAL})


@dataclass
class TokenUsage:
    """Tokens a model call (or a whole run) consumed.

    ``input_tokens`` counts every prompt token, cached or not; the two cache counters are
    the parts of it read from or written to the provider's prompt cache. ``thinking_tokens``
    is the part of ``output_tokens`` spent on reasoning, where the provider reports it.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    thinking_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.thinking_tokens + other.thinking_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "thinking_tokens": self.thinking_tokens,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> TokenUsage:
        """Also reads the names harnessx stored before 0.2 (``cache_read_tokens``,
        ``cache_write_tokens``)."""
        data = data or {}
        return cls(
            int(data.get("input_tokens", 0)),
            int(data.get("output_tokens", 0)),
            int(data.get("cache_creation_input_tokens", data.get("cache_write_tokens", 0))),
            int(data.get("cache_read_input_tokens", data.get("cache_read_tokens", 0))),
            int(data.get("thinking_tokens", 0)),
        )


# The input key that marks tool arguments a provider could not read (harnessx 0.9.1's
# convention): ``ToolCall(id, name, {INVALID_ARGUMENTS: reason})`` is the same as giving
# ``parse_error=reason``, and either way ``input`` shows the marker, as 0.9.1's does.
INVALID_ARGUMENTS = "__invalid_arguments__"


@dataclass
class ToolCall:
    """One tool invocation the model asked for. ``input`` is the parsed argument object.

    A provider that received arguments it could not parse as a JSON object sets
    ``parse_error``, and ``input`` is then ``{INVALID_ARGUMENTS: parse_error}`` (0.9.1's
    marker, which its programs read); the engine answers the model with an error result
    instead of calling the tool.
    """

    id: str
    name: str
    input: dict[str, Any] = field(default_factory=dict)
    parse_error: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.parse_error is None and isinstance(self.input, dict) and INVALID_ARGUMENTS in self.input:
            self.parse_error = str(self.input[INVALID_ARGUMENTS])
        elif self.parse_error is not None and not self.input:
            self.input = {INVALID_ARGUMENTS: self.parse_error}

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "name": self.name, "input": self.input}
        if self.parse_error is not None:
            data["parse_error"] = self.parse_error
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        raw_input = data.get("input")
        return cls(
            str(data["id"]),
            str(data["name"]),
            raw_input if isinstance(raw_input, dict) else {},
            data.get("parse_error"),
        )


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a tool call as the model writes it (``RunEventType.TOOL_CALL_DELTA``).

    The first delta of a call has an empty ``partial_json`` and names the tool; pieces of the
    JSON arguments follow. Provisional, like text deltas: discard them on ``attempt_reset``.
    """

    id: str
    name: str
    partial_json: str = ""


@dataclass(init=False)
class ProviderResponse:
    """One complete model reply. A provider that reports no usage leaves it all zero.

    ``raw`` is the reply as the provider's API returned it (for a streamed reply, assembled
    into the object a non-streamed call returns). ``text``, ``tool_calls`` and ``thinking``
    are what the engine reads.

    ``content`` is the reply as content blocks, as 0.9.1 exposes it. When the provider gave
    blocks (``ProviderResponse(content=[...])``; the built-in Anthropic provider does), they
    are kept in order as dicts (an SDK's block objects are turned into theirs): blocks an API
    wants back unchanged, such as Anthropic's signed thinking, live there, and unset
    ``text``, ``tool_calls`` and ``thinking`` are read from them. Otherwise ``content`` is a
    view made from the fields, one object per block with attributes ``type`` and ``text`` /
    ``thinking`` / ``id``, ``name``, ``input`` (thinking, then text, then each tool call).
    Assigning ``content`` replaces the blocks and sets ``text``, ``tool_calls`` and
    ``thinking`` from them.
    """

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    thinking: str | None = None
    stop_reason: StopReason | str = StopReason.END_TURN
    usage: TokenUsage = field(default_factory=TokenUsage)
    raw: Any = None
    # The blocks the provider gave, as dicts; None when it gave none (``content`` is then
    # derived). Stored by the Temporal codec under "content".
    _blocks: list[dict[str, Any]] | None = field(default=None, init=False, repr=False)

    def __init__(
        self,
        text: str = "",
        tool_calls: list[ToolCall] | None = None,
        thinking: str | None = None,
        stop_reason: StopReason | str = StopReason.END_TURN,
        usage: TokenUsage | None = None,
        raw: Any = None,
        content: list[Any] | None = None,
    ) -> None:
        self.text = text
        # None is accepted for both, as it always was.
        self.tool_calls = tool_calls if tool_calls is not None else []
        self.thinking = thinking
        self.stop_reason = StopReason.coerce(stop_reason)
        self.usage = usage if usage is not None else TokenUsage()
        self.raw = raw
        self._blocks = [block_dict(block) for block in content] if content else None
        if self._blocks:
            self._read_content(self._blocks, fill_only=True)

    @property
    def content(self) -> list[Any]:
        if self._blocks is not None:
            return self._edited_blocks(self._blocks)
        view: list[Any] = []
        if self.thinking:
            view.append(SimpleNamespace(type="thinking", thinking=self.thinking))
        if self.text:
            view.append(SimpleNamespace(type="text", text=self.text))
        view.extend(
            SimpleNamespace(type="tool_use", id=call.id, name=call.name, input=copy.deepcopy(call.input))
            for call in self.tool_calls
        )
        return view

    @content.setter
    def content(self, blocks: list[Any] | None) -> None:
        self._blocks = [block_dict(block) for block in blocks] if blocks else None
        self._read_content(self._blocks or [], fill_only=False)

    def _edited_blocks(self, blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The given blocks with what a program (a middleware) changed in ``text``,
        ``tool_calls`` or ``thinking`` since, in their places, as 0.9.1 shows them; the
        blocks themselves when nothing changed."""
        texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
        thoughts = [str(b.get("thinking", "")) for b in blocks if b.get("type") == "thinking"]
        text_changed = self.text not in ("\n".join(texts), "".join(texts))
        # A provider may join the blocks with or without newlines (ours: without).
        thinking_changed = (
            self.thinking not in ("\n".join(thoughts), "".join(thoughts))
            if thoughts
            else self.thinking is not None
        )
        calls = {call.id: call for call in self.tool_calls}
        given_calls = [b for b in blocks if b.get("type") == "tool_use"]
        calls_changed = [(b.get("id"), b.get("name"), b.get("input")) for b in given_calls] != [
            (c.id, c.name, c.input) for c in self.tool_calls
        ]
        if not (text_changed or thinking_changed or calls_changed):
            return blocks
        edited: list[dict[str, Any]] = []
        wrote_text = wrote_thinking = False
        for block in blocks:
            kind = block.get("type")
            if kind == "text" and text_changed:
                if wrote_text or not self.text:
                    continue
                block = {**block, "text": self.text}
            elif kind == "thinking" and thinking_changed:
                if wrote_thinking or self.thinking is None:
                    continue
                block = {**block, "thinking": self.thinking}
            elif kind == "tool_use":
                call = calls.pop(str(block.get("id")), None)
                if call is None:
                    continue
                block = {**block, "name": call.name, "input": copy.deepcopy(call.input)}
            wrote_text = wrote_text or kind == "text"
            wrote_thinking = wrote_thinking or kind == "thinking"
            edited.append(block)
        if self.thinking is not None and not wrote_thinking:
            edited.insert(0, {"type": "thinking", "thinking": self.thinking})
        if self.text and not wrote_text:
            edited.append({"type": "text", "text": self.text})
        edited.extend(
            {"type": "tool_use", "id": c.id, "name": c.name, "input": copy.deepcopy(c.input)}
            for c in calls.values()
        )
        return edited

    def _read_content(self, blocks: list[dict[str, Any]], *, fill_only: bool) -> None:
        """``text``, ``tool_calls`` and ``thinking`` from the content blocks, as 0.9.1 reads
        them: the text blocks joined by newlines, the ``tool_use`` blocks as calls, the
        thinking blocks' text joined. ``fill_only``: only those left unset."""
        texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
        thoughts = [str(b.get("thinking", "")) for b in blocks if b.get("type") == "thinking"]
        calls = [
            ToolCall(
                str(b["id"]), str(b["name"]), dict(b["input"]) if isinstance(b.get("input"), dict) else {}
            )
            for b in blocks
            if b.get("type") == "tool_use" and "id" in b and "name" in b
        ]
        joined_text = "\n".join(texts) if "".join(texts).strip() else ""
        joined_thinking = "\n".join(thoughts) if "".join(thoughts).strip() else None
        if not fill_only:
            self.text, self.tool_calls, self.thinking = joined_text, calls, joined_thinking
            return
        if not self.text:
            self.text = joined_text
        if not self.tool_calls:
            self.tool_calls = calls
        if self.thinking is None:
            self.thinking = joined_thinking


def given_blocks(response: Any) -> list[dict[str, Any]]:
    """The blocks the provider (or a middleware) gave ``response``, as edited since; none
    when it gave none. What a run itself reads of a reply's content (signed thinking, text
    blocks that carry citations) is only ever among those: the view ``content`` makes from
    the fields otherwise, with its copies of every call's input, is for programs."""
    if isinstance(response, ProviderResponse):
        return [] if response._blocks is None else response._edited_blocks(response._blocks)
    return [b for b in getattr(response, "content", None) or [] if isinstance(b, dict)]


def native_continuation(response: Any) -> bool:
    """Whether ``response`` leaves a turn open that only its provider can continue: a paused
    turn (``pause_turn``), or a server tool's call (a ``provider`` block holding
    ``server_tool_use``) with no result among the reply's blocks yet. A ``FallbackProvider``
    sends the next call to the member that gave it, as 0.9.1's does."""
    if StopReason.coerce(getattr(response, "stop_reason", None)) is StopReason.PAUSE_TURN:
        return True
    native = [
        b["data"]
        for b in given_blocks(response)
        if b.get("type") == "provider" and isinstance(b.get("data"), dict)
    ]
    calls = {b.get("id") for b in native if b.get("type") == "server_tool_use"}
    return bool(calls - {b.get("tool_use_id") for b in native})


def block_dict(block: Any) -> dict[str, Any]:
    """A content block as a dict: a dict as it is, an SDK block (pydantic) by ``model_dump``
    without the SDK's own fields (``__api_exclude__``: ``parsed_output``, ...), any other
    object (``SimpleNamespace``) by its attributes."""
    if isinstance(block, dict):
        return block
    dump = getattr(block, "model_dump", None)
    if callable(dump):
        dumped = dump(mode="json", exclude=getattr(block, "__api_exclude__", None))
        if isinstance(dumped, dict):
            return dumped
    if hasattr(block, "__dict__"):
        return {key: value for key, value in vars(block).items() if not key.startswith("_")}
    raise TypeError(
        f"a content block must be a dict or an object with attributes, not {type(block).__name__}"
    )


@dataclass
class StreamChunk:
    """A piece of a streamed reply.

    ``kind`` is ``text_delta`` / ``thinking_delta`` (``data`` is the text),
    ``tool_call_delta`` (``data`` is a ``ToolCallDelta``), ``progress`` (the stream is alive;
    ``data`` is provider-specific or None), or ``response`` (``data`` is the final
    ``ProviderResponse``; always the last chunk).
    """

    kind: str
    data: Any = None


class LLMProvider(ABC):
    """A model endpoint. Subclasses implement ``create`` and ``count_tokens``.

    ``create`` may also be written as ``create(self, **kwargs)``; the engine always passes
    keyword arguments. ``cache`` is the prompt-cache hint (``harnessx._prompt_cache``): it is
    passed to a ``create`` or ``stream`` that names it or takes ``**kwargs``, and a provider
    may ignore it.
    """

    # The provider's registry name ("anthropic", "openai"; "" for a custom one), as 0.9.1's:
    # what a RETRY hook names as the provider that failed.
    name: str = ""
    # True when stream() yields an event (a "progress" chunk will do) as soon as the model
    # starts, before any thinking or text: a stream silent past
    # RetryPolicy.first_event_timeout is then stuck, and is abandoned and retried (and run()
    # streams too, to apply that deadline). False: a quiet start may be a model thinking,
    # and only stream_idle_timeout_seconds bounds it.
    first_event_promptly: bool = False

    @abstractmethod
    async def create(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        system: str,
        tools: list[dict[str, Any]],
        max_tokens: int | None,
        temperature: float | None = None,
        cache: PromptCacheHint | None = None,
    ) -> ProviderResponse: ...

    @abstractmethod
    async def count_tokens(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        system: str,
        tools: list[dict[str, Any]],
    ) -> int: ...

    async def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        system: str,
        tools: list[dict[str, Any]],
        max_tokens: int | None,
        temperature: float | None = None,
        cache: PromptCacheHint | None = None,
    ) -> AsyncIterator[StreamChunk]:
        """Stream a reply. The default makes one ``create`` call (with the prompt-cache hint
        if ``create`` takes one) and yields its text."""
        from harnessx._prompt_cache import offer_cache

        request = {
            "model": model,
            "messages": messages,
            "system": system,
            "tools": tools,
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        response = await call_create(self, **offer_cache(self.create, request, cache, through_kwargs=True))
        if response.text:
            yield StreamChunk("text_delta", response.text)
        yield StreamChunk("response", response)

    async def aclose(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Release connections. The default has nothing to release."""

    async def __aenter__(self) -> Self:
        """``async with provider:`` closes it on the way out: a provider given to an
        ``Agent`` is the caller's to close (an agent closes only one it built)."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def default_max_tokens(self, model: str) -> int:
        """The reply budget for ``model`` when ``AgentConfig.max_tokens`` is unset: the
        model's limit from ``harnessx.models``, at most ``DEFAULT_OUTPUT_CAP``. Override to
        choose another (the run keeps it within the model's limit)."""
        from harnessx._model_limits import UNKNOWN_MODEL, default_reply_budget, lookup_model_limits

        return default_reply_budget(lookup_model_limits(model) or UNKNOWN_MODEL)

    def model_limits(self, model: str) -> ModelLimits | Awaitable[ModelLimits | None] | None:
        """The model's limits as the vendor states them (may be a coroutine function);
        ``None``, the default, leaves them to ``harnessx.models``' table."""
        return None

    # The run asks the provider whose call failed (harnessx._retry); these defaults are the
    # shared classification, plus what only a provider knows: a vendor SDK's wrapped
    # connection failure. Override them for a vendor's own errors.
    def is_transient(self, exc: BaseException) -> bool:
        """Whether one more attempt at the same call could succeed: 429, 5xx, timeouts and
        lost connections (an SDK's ``APIConnectionError`` included, unless a proxy refused
        the tunnel); not a quota, billing or context-window refusal, nor another 4xx."""
        from harnessx._retry import is_transient, sdk_connection_failure

        return is_transient(exc) or sdk_connection_failure(exc)

    def is_rate_limited(self, exc: BaseException) -> bool:
        """Whether the failure is a throttle or an overload (429, 529), which earns
        ``RetryPolicy.rate_limit_attempts`` rather than ``attempts``."""
        from harnessx._retry import is_rate_limited

        return is_rate_limited(exc)

    def retry_after(self, exc: BaseException) -> float | None:
        """The wait, in seconds, the server asked for before the next attempt (its
        ``Retry-After``, or a ``retry_after`` in its error body); ``None`` if it said none."""
        from harnessx._retry import retry_after

        return retry_after(exc)


def streams_natively(provider: Any) -> bool:
    """Whether ``provider`` streams replies itself: the base ``stream()`` awaits ``create()``
    and yields the whole reply at the end, so no stall deadline can apply to it. A chain
    answers for its members (``streams_natively`` attribute)."""
    declared = getattr(provider, "streams_natively", None)
    if isinstance(declared, bool):
        return declared
    return getattr(type(provider), "stream", None) not in (None, LLMProvider.stream)


async def call_create(provider: LLMProvider, **kwargs: Any) -> ProviderResponse:
    """Call ``provider.create`` and check that it returned a ``ProviderResponse``."""
    result: Any = provider.create(**kwargs)
    if inspect.isawaitable(result):
        result = await result
    if not isinstance(result, ProviderResponse):
        raise TypeError(
            f"{type(provider).__name__}.create() returned {type(result).__name__}; "
            "it must return a harnessx.ProviderResponse"
        )
    return result
