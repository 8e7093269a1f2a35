"""Agent configuration: which model, what prompt, which limits and retry rules.

``AgentConfig`` keeps the original harnessx 0.9.1's constructor, defaults and snapshot
shape (``asdict(config)``); ``from_dict`` also reads the configuration this project's
0.1 snapshots and sessions stored. The other policies live in ``_policies``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any, TypeVar

from harnessx._errors import ConfigurationError, ConfigurationTypeError
from harnessx._policies import (
    Fallback,
    LoopGuard,
    ProgressPolicy,
    PromptCachePolicy,
    ToolPolicy,
    call_timeout_for,
    check_non_negative,
    check_positive,
)

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_PROVIDER",
    "DEFAULT_SYSTEM_PROMPT",
    "AgentConfig",
    "Limits",
    "RetryPolicy",
    "RuntimeState",
]

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
DEFAULT_MODEL = "claude-sonnet-4-6"
DEFAULT_PROVIDER = "anthropic"


class RuntimeState(Enum):
    """Where an ``AgentRuntime`` is in its life (``runtime.state``)."""

    INITIALIZING = "initializing"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"
    ERROR = "error"


@dataclass(frozen=True)
class Limits:
    """Budgets one run may spend.

    - ``max_iterations``: model calls per run (``0`` means unlimited). On reaching it the
      model is asked once more, with no tools, for its account of what it did and what is
      left (``final_answer_on_limit``); the run then completes with stop reason
      ``max_iterations`` (``RunResult.limited``).
    - ``max_context_tokens``: the context window a request must leave the reply room in:
      old tool results are cleared against it, and the older conversation condensed when
      the request, counted before the call, takes more than 80 % of that room (``None``:
      the model's window, and nothing is cleared).
    - ``max_result_chars``: a tool result longer than this reaches the model as 0.9.1
      shows it: a list of records with every record's long texts cut to fit, else a
      preview under a notice naming ``read_tool_result``, which reads the rest; the whole
      result is stored once.
    - ``max_stored_chars`` (extension): the most characters of one payload a run stores. A
      tool result longer than this is cut to its first ``max_stored_chars`` characters plus
      a line saying so, which the model reads; a message longer than this is refused by
      ``submit``/``run`` with ``ConfigurationError`` before anything is stored.
    - ``max_cost_dollars`` with ``input_cost_per_m`` / ``output_cost_per_m`` (dollars per
      million tokens; the cache multipliers price cached prompt tokens): a run whose
      estimated cost reaches the limit fails with ``CostLimitError`` before its next model
      call.
    - ``loop_guard``: see ``LoopGuard``.
    - ``max_tool_calls_per_turn`` and ``tool_concurrency`` (extensions): calls one reply
      may make (extra ones get an error result), and how many ``concurrent=True`` tools
      run at once.
    """

    max_iterations: int = 50
    max_context_tokens: int | None = None
    max_result_chars: int = 12_000
    max_cost_dollars: float | None = None
    input_cost_per_m: float | None = None
    output_cost_per_m: float | None = None
    cache_read_cost_multiplier: float = 0.1
    cache_write_cost_multiplier: float = 1.25
    loop_guard: LoopGuard = field(default_factory=LoopGuard)
    max_truncation_recoveries: int = 3
    final_answer_on_limit: bool = True
    # This project's fields come after 0.9.1's, so that positional arguments mean the same.
    max_stored_chars: int = 10_000_000
    max_tool_calls_per_turn: int = 64
    tool_concurrency: int = 8

    def __post_init__(self) -> None:
        if isinstance(self.loop_guard, Mapping):  # read back from a snapshot
            object.__setattr__(self, "loop_guard", LoopGuard(**self.loop_guard))
        if not isinstance(self.loop_guard, LoopGuard):
            raise ConfigurationError("Limits.loop_guard must be a LoopGuard")
        if type(self.max_iterations) is not int or self.max_iterations < 0:
            raise ConfigurationError(
                f"Limits.max_iterations must be an integer of at least 0 (0 means unlimited), "
                f"got {self.max_iterations!r}"
            )
        if self.max_context_tokens is not None:
            check_positive(self.max_context_tokens, "Limits.max_context_tokens", integer=True)
        check_positive(self.max_result_chars, "Limits.max_result_chars", integer=True)
        check_positive(self.max_stored_chars, "Limits.max_stored_chars", integer=True)
        for name in ("max_cost_dollars", "input_cost_per_m", "output_cost_per_m"):
            check_non_negative(getattr(self, name), f"Limits.{name}")
        for name in ("cache_read_cost_multiplier", "cache_write_cost_multiplier"):
            check_non_negative(getattr(self, name), f"Limits.{name}")
        if type(self.max_truncation_recoveries) is not int or self.max_truncation_recoveries < 0:
            raise ConfigurationError("Limits.max_truncation_recoveries must be an integer of at least 0")
        if type(self.final_answer_on_limit) is not bool:
            raise ConfigurationError("Limits.final_answer_on_limit must be True or False")
        for name in ("max_tool_calls_per_turn", "tool_concurrency"):
            if type(getattr(self, name)) is not int or getattr(self, name) < 1:
                raise ConfigurationError(f"Limits.{name} must be at least 1, got {getattr(self, name)!r}")

    @property
    def unlimited(self) -> bool:
        return self.max_iterations == 0

    def cost_of(
        self, input_tokens: int, output_tokens: int, cache_read: int = 0, cache_write: int = 0
    ) -> float:
        """Estimated dollars for this much usage. Without prices set, Anthropic-like
        defaults of $3 / $15 per million tokens apply (as in the original harnessx)."""
        input_rate = 3.0 if self.input_cost_per_m is None else self.input_cost_per_m
        output_rate = 15.0 if self.output_cost_per_m is None else self.output_cost_per_m
        uncached = max(int(input_tokens) - int(cache_read) - int(cache_write), 0)
        prompt = (
            uncached
            + cache_read * self.cache_read_cost_multiplier
            + cache_write * self.cache_write_cost_multiplier
        )
        return (prompt * input_rate + int(output_tokens) * output_rate) / 1_000_000


@dataclass(frozen=True)
class RetryPolicy:
    """Transient-failure handling for model calls (429, 5xx, timeouts, lost connections).

    ``attempts`` is the total number of calls for one step, the first included (``1``
    disables retry). The wait before the next try doubles from ``backoff_seconds``, is
    spread down by ``jitter`` and capped at ``max_backoff_seconds``; a server's
    ``Retry-After`` raises it (still capped). ``call_timeout_seconds`` bounds one call
    (``None``: sized from the reply budget). ``switch_after`` and ``cooldown_seconds``
    govern failover along ``AgentConfig.fallbacks``. ``retry_on_timeout`` (an extension)
    also retries a call that timed out.
    """

    attempts: int = 4
    backoff_seconds: float = 0.5
    call_timeout_seconds: float | None = None
    max_backoff_seconds: float = 60.0
    stream_idle_timeout_seconds: float | None = 180.0
    stream_first_event_timeout_seconds: float | None = 20.0
    stream_first_event_growth: float = 2.0
    rate_limit_attempts: int = 8
    rate_limit_budget_seconds: float | None = 120.0
    switch_after: int = 1
    cooldown_seconds: float = 0.0
    jitter: float = 0.25
    retry_on_timeout: bool = True

    def __post_init__(self) -> None:
        if type(self.attempts) is not int or self.attempts < 1:
            raise ConfigurationError(
                f"RetryPolicy.attempts must be a positive integer (1 disables retry), got {self.attempts!r}"
            )
        check_non_negative(self.backoff_seconds, "RetryPolicy.backoff_seconds")
        if self.call_timeout_seconds is not None:
            check_positive(self.call_timeout_seconds, "RetryPolicy.call_timeout_seconds")
        check_non_negative(self.max_backoff_seconds, "RetryPolicy.max_backoff_seconds")
        for name in ("stream_idle_timeout_seconds", "stream_first_event_timeout_seconds"):
            if getattr(self, name) is not None:
                check_positive(getattr(self, name), f"RetryPolicy.{name}")
        growth = self.stream_first_event_growth
        if isinstance(growth, bool) or not isinstance(growth, int | float) or growth < 1:
            raise ConfigurationError("RetryPolicy.stream_first_event_growth must be a number of at least 1")
        if (
            isinstance(self.jitter, bool)
            or not isinstance(self.jitter, int | float)
            or not 0 <= self.jitter <= 1
        ):
            raise ConfigurationError(f"RetryPolicy.jitter must be between 0 and 1, got {self.jitter!r}")
        for name in ("switch_after", "rate_limit_attempts"):
            if type(getattr(self, name)) is not int or getattr(self, name) < 1:
                raise ConfigurationError(f"RetryPolicy.{name} must be a positive integer")
        check_non_negative(self.cooldown_seconds, "RetryPolicy.cooldown_seconds")
        if self.rate_limit_budget_seconds is not None:
            check_positive(self.rate_limit_budget_seconds, "RetryPolicy.rate_limit_budget_seconds")

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed try number ``attempt`` (1-based), without jitter; a
        server's ``Retry-After`` replaces the computed wait (still capped)."""
        wait = self.backoff_seconds * 2 ** max(0, attempt - 1)
        if retry_after is not None and math.isfinite(retry_after):
            wait = retry_after
        return float(max(0.0, min(wait, self.max_backoff_seconds)))

    def wait_for(self, attempt: int, retry_after: float | None = None, *, rand: Any = None) -> float:
        """``backoff`` spread down by ``jitter`` (so agents that hit one rate limit do not
        retry in step); a server's ``Retry-After`` is still honoured in full."""
        wait = self.backoff_seconds * 2 ** max(0, attempt - 1)
        if self.jitter and wait > 0:
            import random

            wait *= 1 - self.jitter * (rand or random.random)()
        if retry_after is not None and math.isfinite(retry_after):
            wait = max(wait, retry_after)
        return float(max(0.0, min(wait, self.max_backoff_seconds)))

    def attempts_for(self, *, rate_limited: bool) -> int:
        """Calls allowed for one step: a rate limit gets the deeper ``rate_limit_attempts``."""
        return max(self.attempts, self.rate_limit_attempts) if rate_limited else self.attempts

    def spent(self, attempt: int, *, rate_limited: bool, waited: float = 0.0, next_wait: float = 0.0) -> bool:
        """Whether failed call number ``attempt`` (1-based) of a step was the last one allowed.
        Past ``attempts``, only a rate limit is tried again (up to ``rate_limit_attempts``),
        and only while the time slept between the step's calls (``waited``, plus
        ``next_wait`` before the next) stays within ``rate_limit_budget_seconds``."""
        if attempt >= self.attempts_for(rate_limited=rate_limited):
            return True
        budget = self.rate_limit_budget_seconds
        return (
            rate_limited and attempt >= self.attempts and budget is not None and waited + next_wait > budget
        )

    def first_event_timeout(self, request_tokens: int, attempt: int = 1) -> float | None:
        """How long call number ``attempt`` (1-based) of a step may wait for the first event
        of a streamed reply to a request of ``request_tokens``: ``stream_first_event_timeout_seconds``
        plus 10 s per 100,000 tokens, times ``stream_first_event_growth`` for each attempt
        before it (a slow server gets through on a later try; a dead one is still left at
        the first deadline), never past ``stream_idle_timeout_seconds`` (``None``: no bound).
        Without a first-event deadline, the idle limit."""
        first = self.stream_first_event_timeout_seconds
        if first is None:
            return self.stream_idle_timeout_seconds
        deadline = (first + 10.0 * max(0, request_tokens) / 100_000) * float(
            self.stream_first_event_growth
        ) ** max(0, int(attempt) - 1)
        idle = self.stream_idle_timeout_seconds
        return deadline if idle is None else min(deadline, idle)

    def effective_call_timeout(self, max_tokens: int | None) -> float:
        if self.call_timeout_seconds is not None:
            return float(self.call_timeout_seconds)
        return call_timeout_for(max_tokens)


_P = TypeVar("_P", Limits, RetryPolicy, ToolPolicy, ProgressPolicy, PromptCachePolicy)
_OMITTED: Any = object()  # "not given", where None is itself a meaningful value


def _coerce(kind: type[_P], value: Any, name: str) -> _P:
    if value is None:
        return kind()
    if isinstance(value, Mapping):  # from a snapshot or a stored session
        known = {f.name for f in fields(kind)}
        return kind(**{k: v for k, v in value.items() if k in known})
    if not isinstance(value, kind):
        raise ConfigurationTypeError(
            f"AgentConfig.{name} must be a {kind.__name__}, got {type(value).__name__}"
        )
    return value


def _tool_policy(value: Any) -> ToolPolicy:
    # A list of names is this project's 0.1 form of AgentConfig(tools=...): "offer only these".
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return ToolPolicy(only=tuple(value))
    return _coerce(ToolPolicy, value, "tools")


@dataclass(init=False)
class AgentConfig:
    """What the agent is: model, provider name, prompt, and the policies it runs under.

    ``provider`` names a built-in provider (``"anthropic"``, ``"openai"``) or one passed
    to ``register_provider``, built when ``Agent`` gets no provider instance; ``None``
    picks one from the environment (an extension: ``ANTHROPIC_API_KEY``, else
    ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``). ``planning`` gives the agent the
    ``write_todos`` / ``read_todos`` task list. ``fallbacks`` are providers tried in order
    when the primary fails transiently. ``prompt_cache=None`` disables prompt caching.
    """

    model: str = DEFAULT_MODEL
    provider: str | None = DEFAULT_PROVIDER
    max_tokens: int | None = None
    planning: bool = True
    fallbacks: tuple[Fallback, ...] = ()
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    temperature: float | None = None
    limits: Limits = field(default_factory=Limits)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    prompt_cache: PromptCachePolicy | None = field(default_factory=PromptCachePolicy)
    tools: ToolPolicy = field(default_factory=ToolPolicy)
    progress: ProgressPolicy = field(default_factory=ProgressPolicy)
    max_parallel_subagents: int = 4

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        provider: str | None = DEFAULT_PROVIDER,
        max_tokens: int | None = None,
        *,
        planning: bool = True,
        fallbacks: Sequence[Fallback | Mapping[str, Any]] = (),
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        temperature: float | None = None,
        limits: Limits | Mapping[str, Any] | None = None,
        retry: RetryPolicy | Mapping[str, Any] | None = None,
        prompt_cache: PromptCachePolicy | Mapping[str, Any] | None = _OMITTED,
        tools: ToolPolicy | Mapping[str, Any] | Sequence[str] | None = None,
        progress: ProgressPolicy | Mapping[str, Any] | None = None,
        max_parallel_subagents: int = 4,
    ) -> None:
        self.model = model
        self.provider = provider
        self.max_tokens = max_tokens
        self.planning = planning
        self.fallbacks = tuple(f if isinstance(f, Fallback) else Fallback(**dict(f)) for f in fallbacks)
        self.system_prompt = system_prompt
        self.temperature = temperature
        self.limits = _coerce(Limits, limits, "limits")
        self.retry = _coerce(RetryPolicy, retry, "retry")
        self.tools = _tool_policy(tools)
        self.progress = _coerce(ProgressPolicy, progress, "progress")
        if prompt_cache is _OMITTED:
            self.prompt_cache = PromptCachePolicy()
        elif prompt_cache is None:
            self.prompt_cache = None
        else:
            self.prompt_cache = _coerce(PromptCachePolicy, prompt_cache, "prompt_cache")
        self.max_parallel_subagents = max_parallel_subagents
        self._validate()

    def _validate(self) -> None:
        from harnessx.providers._registry import is_known_provider, unknown_provider_error

        if not isinstance(self.model, str) or not self.model.strip():
            raise ConfigurationError(f"AgentConfig.model must be a non-empty string, got {self.model!r}")
        if self.provider is not None and (
            not isinstance(self.provider, str) or not is_known_provider(self.provider)
        ):
            raise unknown_provider_error(self.provider)
        if type(self.planning) is not bool:
            raise ConfigurationError("AgentConfig.planning must be True or False")
        for item in self.fallbacks:
            if not isinstance(item.provider, str):
                raise ConfigurationError(
                    "AgentConfig.fallbacks must name providers: a config is stored and compared, a live "
                    "provider cannot be. Build the chain with FallbackProvider and pass it as "
                    "Agent(provider=...) instead"
                )
        if not isinstance(self.system_prompt, str):
            raise ConfigurationError("AgentConfig.system_prompt must be a string")
        if self.max_tokens is not None:
            check_positive(self.max_tokens, "AgentConfig.max_tokens", integer=True)
        check_non_negative(self.temperature, "AgentConfig.temperature")
        if type(self.max_parallel_subagents) is not int or self.max_parallel_subagents < 1:
            raise ConfigurationError("AgentConfig.max_parallel_subagents must be a positive integer")

    # ------------------------------------------------------------ derived

    @property
    def effective_limits(self) -> Limits:
        return self.limits

    @property
    def effective_retry(self) -> RetryPolicy:
        return self.retry

    @property
    def offered_tools(self) -> list[str] | None:
        """The tool names offered to the model, or ``None`` for every registered tool."""
        only = self.tools.only
        return list(only) if only is not None else None

    # ------------------------------------------------------- persistence

    def to_dict(self) -> dict[str, Any]:
        """``asdict(config)``, minus this project's extension fields left at their defaults,
        so that the original harnessx can read the snapshot too."""
        data = asdict(self)
        for group, name in _EXTENSION_FIELDS:
            values = data.get(group)
            if isinstance(values, dict) and values.get(name) == _EXTENSION_DEFAULTS[(group, name)]:
                del values[name]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgentConfig:
        """Rebuild from a stored dict: the original harnessx's snapshot shape (0.4 and later
        nested, 0.3 flat) or this project's 0.1 one. Unknown keys are ignored."""
        payload = dict(data)
        for flat, (group, attribute) in _FLAT_0_3_FIELDS.items():
            if flat in payload:
                current = payload.get(group)
                base = dict(current) if isinstance(current, Mapping) else asdict(current) if current else {}
                payload[group] = {**base, attribute: payload.pop(flat)}
        if not payload.get("model"):
            payload["model"] = DEFAULT_MODEL  # 0.1 stored "" for "the provider's default"
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in payload.items() if k in known}
        if kwargs.get("fallbacks") is None:
            kwargs.pop("fallbacks", None)
        return cls(**kwargs)

    def fingerprint_fields(self) -> dict[str, Any]:
        """The settings a resumed run must agree on (model, prompt, limits, tool selection)."""
        return {
            "model": self.model,
            "provider": self.provider,
            "system_prompt": self.system_prompt,
            "max_tokens": self.max_tokens,
            "max_iterations": self.limits.max_iterations,
            "tools": sorted(self.tools.only) if self.tools.only is not None else None,
        }

    def fingerprint(self) -> str:
        blob = json.dumps(self.fingerprint_fields(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


# Fields this project adds to the original's policies: (policy, field) and their defaults.
_EXTENSION_DEFAULTS: dict[tuple[str, str], Any] = {
    ("tools", "only"): None,
    ("limits", "max_tool_calls_per_turn"): 64,
    ("limits", "tool_concurrency"): 8,
    ("limits", "max_stored_chars"): 10_000_000,
    ("retry", "retry_on_timeout"): True,
}
_EXTENSION_FIELDS = tuple(_EXTENSION_DEFAULTS)

# The original's 0.3 flat keys, still found in old session files: name -> (policy, field).
_FLAT_0_3_FIELDS: dict[str, tuple[str, str]] = {
    "max_iterations": ("limits", "max_iterations"),
    "max_context_tokens": ("limits", "max_context_tokens"),
    "max_result_chars": ("limits", "max_result_chars"),
    "max_cost_dollars": ("limits", "max_cost_dollars"),
    "input_cost_per_m": ("limits", "input_cost_per_m"),
    "output_cost_per_m": ("limits", "output_cost_per_m"),
    "llm_max_attempts": ("retry", "attempts"),
    "llm_retry_backoff_seconds": ("retry", "backoff_seconds"),
    "model_timeout_seconds": ("retry", "call_timeout_seconds"),
}
