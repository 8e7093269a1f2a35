"""Policy objects an ``AgentConfig`` carries besides its limits and retry rules.

``ToolRetry`` and ``ToolPolicy`` govern tools, ``ProgressPolicy`` the ``waiting`` notices a
slow model call produces, ``LoopGuard`` noticing a repeating cycle of tool calls,
``Fallback`` the providers tried when the primary one keeps failing, and
``PromptCachePolicy`` how providers are asked to cache the stable prompt prefix. They are
frozen: a config is compared with the one a durable session was started with.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from harnessx._errors import ConfigurationError, ConfigurationTypeError

if TYPE_CHECKING:
    from harnessx.providers._base import LLMProvider

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "DEFAULT_TOOL_TIMEOUT_SECONDS",
    "Fallback",
    "LoopGuard",
    "ProgressPolicy",
    "PromptCacheHint",
    "PromptCachePolicy",
    "ToolPolicy",
    "ToolRetry",
    "call_timeout_for",
    "check_positive",
]

# Model calls (and built-ins that legitimately run long) default to five minutes.
DEFAULT_TIMEOUT_SECONDS = 300.0
# A tool registered without a timeout of its own: one that has not answered in 25 s is far
# more often stuck than busy, and the model is better told so than left waiting.
DEFAULT_TOOL_TIMEOUT_SECONDS = 25.0


def check_positive(value: Any, name: str, *, integer: bool = False) -> None:
    """``ConfigurationError`` unless ``value`` is a finite positive number (an int if asked)."""
    wrong_type = (
        isinstance(value, bool) or not isinstance(value, int | float) or (integer and type(value) is not int)
    )
    if wrong_type or not math.isfinite(value) or value <= 0:
        kind = "integer" if integer else "number"
        raise ConfigurationError(f"{name} must be a finite positive {kind}, got {value!r}")


def check_non_negative(value: Any, name: str) -> None:
    """``ConfigurationError`` unless ``value`` is ``None`` or a finite number >= 0."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"{name} must be a finite number of at least 0, got {value!r}")


def _backoff(base: float, cap: float, attempt: int) -> float:
    return float(min(float(base or 0.0) * (2 ** max(0, attempt - 1)), cap))


def call_timeout_for(max_tokens: int | None) -> float:
    """A model-call timeout that fits a reply of ``max_tokens``: never below the default,
    and at about 128K tokens an hour plus a minute above it."""
    if not max_tokens:
        return DEFAULT_TIMEOUT_SECONDS
    return max(DEFAULT_TIMEOUT_SECONDS, max_tokens * 3600 / 128_000 + 60)


@dataclass(frozen=True)
class ToolRetry:
    """Re-running one tool call after a transient failure.

    ``attempts`` counts every try (``1`` disables retry). It applies only to tools whose
    replay policy is ``safe`` or ``idempotent``: a handler asks for it by raising
    ``TransientToolError`` (or an error such as ``ConnectionError`` / ``TimeoutError``);
    with ``retry_error_results`` an error *result* whose text reads as throttling or
    overload is retried too. A ``manual`` tool hands the failure to the model instead.
    """

    attempts: int = 3
    backoff_seconds: float = 0.5
    max_backoff_seconds: float = 30.0
    retry_error_results: bool = False

    def __post_init__(self) -> None:
        if type(self.attempts) is not int or self.attempts < 1:
            raise ConfigurationError(
                f"ToolRetry.attempts must be a positive integer (1 disables retry), got {self.attempts!r}"
            )
        check_non_negative(self.backoff_seconds, "ToolRetry.backoff_seconds")
        check_positive(self.max_backoff_seconds, "ToolRetry.max_backoff_seconds")
        if type(self.retry_error_results) is not bool:
            raise ConfigurationError("ToolRetry.retry_error_results must be True or False")

    def wait_for(self, attempt: int) -> float:
        """Seconds to wait after try number ``attempt`` (1-based) failed."""
        return _backoff(self.backoff_seconds, self.max_backoff_seconds, attempt)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ToolRetry:
        """From a stored dict; unknown keys are ignored, an empty one is the default."""
        if not data:
            return cls()
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class ToolPolicy:
    """Registry-wide tool options an ``Agent`` applies to the registry it adopts.

    ``default_timeout_seconds`` is the timeout of a tool registered without one (``None``:
    the registry's own default, else ``DEFAULT_TOOL_TIMEOUT_SECONDS``). ``dedupe_calls``
    makes an identical repeated call (same name and arguments) within one run return the
    first call's result instead of running again. ``retry`` is the ``ToolRetry`` of tools
    registered without one. ``only`` (an extension) restricts which registered tools are
    offered to the model; ``None`` offers all of them.
    """

    default_timeout_seconds: float | None = None
    dedupe_calls: bool = False
    retry: ToolRetry | None = None
    only: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.default_timeout_seconds is not None:
            check_positive(self.default_timeout_seconds, "ToolPolicy.default_timeout_seconds")
        if type(self.dedupe_calls) is not bool:
            raise ConfigurationError("ToolPolicy.dedupe_calls must be True or False")
        retry: object = self.retry
        if isinstance(retry, Mapping):  # read back from a snapshot
            object.__setattr__(self, "retry", ToolRetry.from_dict(retry))
        elif retry is not None and not isinstance(retry, ToolRetry):
            raise ConfigurationError("ToolPolicy.retry must be a ToolRetry")
        only: object = self.only
        if only is not None:
            if (
                isinstance(only, str)
                or not isinstance(only, Iterable)
                or not all(isinstance(n, str) for n in only)
            ):
                raise ConfigurationError("ToolPolicy.only must be a list of tool names")
            object.__setattr__(self, "only", tuple(only))


@dataclass(frozen=True)
class ProgressPolicy:
    """When a silent model call produces ``waiting`` events on the run stream.

    A provider that is slow rather than broken sends nothing: no delta, no error, no retry.
    After ``first_after_seconds`` of silence the run stream gets a ``waiting`` event
    ``{"on": "model", "seconds": <elapsed>}``, then one every ``repeat_every_seconds``.
    They are notices, not deadlines: nothing is cancelled. ``first_after_seconds=None``
    turns them off.
    """

    first_after_seconds: float | None = 10.0
    repeat_every_seconds: float = 15.0

    def __post_init__(self) -> None:
        if self.first_after_seconds is not None:
            check_positive(self.first_after_seconds, "ProgressPolicy.first_after_seconds")
        check_positive(self.repeat_every_seconds, "ProgressPolicy.repeat_every_seconds")

    @property
    def enabled(self) -> bool:
        return self.first_after_seconds is not None


@dataclass(frozen=True)
class LoopGuard:
    """Noticing that an agent has stopped making progress.

    Watches the run's tool calls for a cycle of up to ``max_period`` calls repeated
    ``threshold`` times in a row with the same arguments *and* the same results, among the
    last ``history`` calls. A trip puts a note in front of the result the model reads; it
    never fails the run (``Limits.max_iterations`` is for that). ``enabled=False`` opts out.
    """

    enabled: bool = True
    max_period: int = 4
    threshold: int = 3
    history: int = 64

    def __post_init__(self) -> None:
        if type(self.enabled) is not bool:
            raise ConfigurationTypeError(f"LoopGuard.enabled must be True or False, got {self.enabled!r}")
        check_positive(self.max_period, "LoopGuard.max_period", integer=True)
        check_positive(self.history, "LoopGuard.history", integer=True)
        if type(self.threshold) is not int or self.threshold < 2:
            raise ConfigurationError(
                f"LoopGuard.threshold must be an integer of 2 or more, got {self.threshold!r}"
            )

    def applies(self) -> bool:
        return self.enabled


@dataclass(frozen=True)
class Fallback:
    """A provider to try when the ones before it keep failing (``AgentConfig.fallbacks``).

    ``provider`` is a built-in provider name (``"anthropic"``, ``"openai"``) or, outside
    ``AgentConfig`` (which is persisted and compared), a provider instance. ``model`` and
    ``max_tokens`` override the agent's for this provider only.
    """

    provider: str | LLMProvider
    model: str | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        from harnessx.providers._registry import is_known_provider

        if isinstance(self.provider, str):
            if not is_known_provider(self.provider):
                raise ConfigurationError(
                    f"unknown fallback provider {self.provider!r}: use a built-in name "
                    "('anthropic', 'openai') or pass a provider instance to FallbackProvider"
                )
        elif not hasattr(self.provider, "create"):
            raise ConfigurationError("Fallback.provider must be a provider name or an LLMProvider")
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise ConfigurationError("Fallback.model must be a non-empty string or None")
        if self.max_tokens is not None:
            check_positive(self.max_tokens, "Fallback.max_tokens", integer=True)


@dataclass(frozen=True)
class PromptCachePolicy:
    """How providers are asked to cache the stable prompt prefix.

    ``ttl_seconds=None`` is the vendor's default lifetime; ``cache_history`` also marks the
    last complete turn as cacheable; ``key_salt`` separates caches of otherwise identical
    prompts. ``AgentConfig(prompt_cache=None)`` disables caching.
    """

    ttl_seconds: int | None = None
    cache_history: bool = True
    key_salt: str = ""

    def __post_init__(self) -> None:
        if self.ttl_seconds is not None:
            check_positive(self.ttl_seconds, "PromptCachePolicy.ttl_seconds", integer=True)
        if type(self.cache_history) is not bool:
            raise ConfigurationError("PromptCachePolicy.cache_history must be True or False")
        if not isinstance(self.key_salt, str):
            raise ConfigurationTypeError("PromptCachePolicy.key_salt must be a string")


@dataclass(frozen=True)
class PromptCacheHint:
    """A per-request caching instruction for a provider: ``prefix_key`` identifies the
    stable prefix, ``breakpoints`` name where it ends (``"system"``, ``"tools"``,
    ``"message:<index>"``)."""

    prefix_key: str
    breakpoints: tuple[str, ...] = ()
    ttl_seconds: int | None = None
    enabled: bool = True
