"""Agent configuration: which model, what prompt, which limits and retry rules."""

from __future__ import annotations

import hashlib
import json
from dataclasses import KW_ONLY, asdict, dataclass
from typing import Any

from harnessx._errors import ConfigurationError

__all__ = ["DEFAULT_SYSTEM_PROMPT", "AgentConfig", "Limits", "RetryPolicy"]

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."


@dataclass(frozen=True)
class Limits:
    """Bounds on one run.

    ``max_iterations`` counts model calls; a run that reaches it ends ``completed`` with
    stop reason ``max_iterations``. ``max_tool_calls_per_turn`` caps a single reply's tool
    calls (extra ones get an error result). ``tool_concurrency`` caps how many
    ``concurrent=True`` tools run at once.
    """

    max_iterations: int = 50
    max_tool_calls_per_turn: int = 64
    tool_concurrency: int = 8

    def __post_init__(self) -> None:
        for name in ("max_iterations", "max_tool_calls_per_turn", "tool_concurrency"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"Limits.{name} must be at least 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential back-off for model calls (and for tools that opt in with ``retry=``).

    ``attempts`` is the total number of tries, the first included. The wait before try
    ``n`` (n >= 2) is ``backoff_seconds * 2 ** (n - 2)``, capped at ``max_backoff_seconds``;
    a server's ``Retry-After`` replaces it when present (still capped).
    """

    attempts: int = 4
    backoff_seconds: float = 0.5
    max_backoff_seconds: float = 60.0
    retry_on_timeout: bool = True

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigurationError(f"RetryPolicy.attempts must be at least 1, got {self.attempts}")
        if self.backoff_seconds < 0 or self.max_backoff_seconds < 0:
            raise ConfigurationError("RetryPolicy back-off values must not be negative")

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed try number ``attempt`` (1-based)."""
        wait = retry_after if retry_after is not None else self.backoff_seconds * 2 ** (attempt - 1)
        return max(0.0, min(wait, self.max_backoff_seconds))


@dataclass
class AgentConfig:
    """What the agent is: model, provider name, prompt and limits.

    ``provider`` names a built-in provider (``"anthropic"``, ``"openai"``) that the agent
    builds itself when no provider instance is passed to ``Agent``; ``tools``, when given,
    restricts which registered tools are offered to the model.
    """

    model: str = ""
    provider: str | None = None
    max_tokens: int | None = None
    _: KW_ONLY
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    temperature: float | None = None
    limits: Limits | None = None
    retry: RetryPolicy | None = None
    tools: list[str] | None = None

    def __post_init__(self) -> None:
        if self.limits is None:
            self.limits = Limits()
        if self.retry is None:
            self.retry = RetryPolicy()
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ConfigurationError(f"AgentConfig.max_tokens must be positive, got {self.max_tokens}")

    @property
    def effective_limits(self) -> Limits:
        return self.limits or Limits()

    @property
    def effective_retry(self) -> RetryPolicy:
        return self.retry or RetryPolicy()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgentConfig:
        data = dict(data)
        limits = data.pop("limits", None)
        retry = data.pop("retry", None)
        known = {k: v for k, v in data.items() if k in _CONFIG_FIELDS}
        return cls(
            **known,
            limits=Limits(**limits) if isinstance(limits, dict) else None,
            retry=RetryPolicy(**retry) if isinstance(retry, dict) else None,
        )

    def fingerprint_fields(self) -> dict[str, Any]:
        """The settings a resumed run must agree on (model, prompt, limits, tool selection)."""
        return {
            "model": self.model,
            "provider": self.provider,
            "system_prompt": self.system_prompt,
            "max_tokens": self.max_tokens,
            "max_iterations": self.effective_limits.max_iterations,
            "tools": sorted(self.tools) if self.tools is not None else None,
        }

    def fingerprint(self) -> str:
        blob = json.dumps(self.fingerprint_fields(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


_CONFIG_FIELDS = {"model", "provider", "max_tokens", "system_prompt", "temperature", "tools"}
