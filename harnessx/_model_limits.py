"""Model limits: how much a model reads (its context window) and writes in one reply.

The reply budget a run asks for when ``AgentConfig.max_tokens`` is unset comes from here,
as in harnessx 0.9.1 (``harnessx.models``). Where the limits of a model come from, first
that knows wins:

1. ``register_model_limits(prefix, ...)``: what the program declares;
2. a limit a provider named when it refused a request (``learn_model_limits``), kept for
   the provider object or, without one, for the process;
3. the provider's own ``model_limits(model)`` (sync or async), when it has one;
4. the table below, by the longest matching prefix of the normalized model id;
5. ``UNKNOWN_MODEL``: generous, because an unknown model is more likely newer than older,
   and a budget that is too large is refused with the real limit (step 2) where one that
   is too small cuts replies off without a word.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CONTEXT_SAFETY_TOKENS",
    "DEFAULT_OUTPUT_CAP",
    "PROVIDER_CACHE",
    "UNKNOWN_MODEL",
    "ModelLimits",
    "context_window_from_error",
    "default_reply_budget",
    "learn_model_limits",
    "lookup_model_limits",
    "normalize_model_id",
    "provider_reply_default",
    "register_model_limits",
    "reply_budget",
    "reply_limit_from_error",
    "resolve_model_limits",
]

logger = logging.getLogger("harnessx.models")

# The largest reply budget asked for by default, whatever the model could write: a long
# budget lengthens call timeouts and rate-limit reservations for replies that are rarely
# that long.
DEFAULT_OUTPUT_CAP = 32_000

# Tokens left free when a reply budget is fitted into what remains of a context window.
CONTEXT_SAFETY_TOKENS = 1_024


@dataclass(frozen=True)
class ModelLimits:
    """A model's context window (input and output together) and its largest reply."""

    context_window: int
    max_output: int

    def __post_init__(self) -> None:
        for name in ("context_window", "max_output"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"ModelLimits.{name} must be a positive integer, got {value!r}")


UNKNOWN_MODEL = ModelLimits(context_window=128_000, max_output=DEFAULT_OUTPUT_CAP)

# Normalized model-id prefix -> limits, from the vendors' model pages. A longer prefix is
# more specific ("claude-3-5" over "claude-3").
_BUILTIN: dict[str, ModelLimits] = {
    "claude-fable-5": ModelLimits(1_000_000, 128_000),
    "claude-mythos-5": ModelLimits(1_000_000, 128_000),
    "claude-opus-5": ModelLimits(1_000_000, 128_000),
    "claude-sonnet-5": ModelLimits(1_000_000, 128_000),
    "claude-opus-4-8": ModelLimits(1_000_000, 128_000),
    "claude-opus-4-7": ModelLimits(1_000_000, 128_000),
    "claude-opus-4-6": ModelLimits(1_000_000, 128_000),
    "claude-sonnet-4-6": ModelLimits(1_000_000, 128_000),
    "claude-opus-4-5": ModelLimits(200_000, 64_000),
    "claude-sonnet-4-5": ModelLimits(200_000, 64_000),
    "claude-haiku-4-5": ModelLimits(200_000, 64_000),
    "claude-opus-4": ModelLimits(200_000, 32_000),
    "claude-sonnet-4": ModelLimits(200_000, 64_000),
    "claude-3-7-sonnet": ModelLimits(200_000, 64_000),
    "claude-3-5": ModelLimits(200_000, 8_192),
    "claude-3": ModelLimits(200_000, 4_096),
    "gpt-5": ModelLimits(400_000, 128_000),
    "gpt-4.1": ModelLimits(1_047_576, 32_768),
    "gpt-4o": ModelLimits(128_000, 16_384),
    "gpt-4-turbo": ModelLimits(128_000, 4_096),
    "gpt-4": ModelLimits(8_192, 4_096),
    "o1": ModelLimits(200_000, 100_000),
    "o3": ModelLimits(200_000, 100_000),
    "o4-mini": ModelLimits(200_000, 100_000),
    "gemini-2.5": ModelLimits(1_048_576, 65_536),
    "gemini-2.0": ModelLimits(1_048_576, 8_192),
    "gemini-1.5": ModelLimits(1_048_576, 8_192),
}

# Process-wide: what the program registered, and what providers reported (by exact
# normalized id). 0.9.1's tests reset these two by name.
_registered: dict[str, ModelLimits] = {}
_learned: dict[str, dict[str, int]] = {}

# The attribute a provider object keeps its own learned limits in (by exact model id);
# 0.9.1 uses the same name, so a provider written for it keeps working.
PROVIDER_CACHE = "_harness_model_limits"

_ROUTER_PREFIX = re.compile(r"^(?:[a-z]{2,4}\.)?anthropic\.")  # Bedrock: "us.anthropic.claude-..."
_VERSION_SUFFIX = re.compile(r"-v\d+(?::\d+)?$")  # Bedrock: "...-v1:0"
_DATE_SUFFIX = re.compile(r"-\d{8}$")  # "...-20250929"


@functools.lru_cache(maxsize=256)  # asked before every model call, for a handful of ids
def normalize_model_id(model: str) -> str:
    """The model name a deployment-specific id stands for: without a router or cloud prefix
    (``anthropic/``, ``us.anthropic.``, ``models/``), a Vertex ``@date``, a Bedrock
    ``-v1:0``, a release date or ``-latest``; lower case."""
    name = (model or "").strip().lower().rsplit("/", 1)[-1]
    name = _ROUTER_PREFIX.sub("", name).split("@", 1)[0]
    name = _VERSION_SUFFIX.sub("", name)
    name = _DATE_SUFFIX.sub("", name)
    return name.removesuffix("-latest")


def register_model_limits(prefix: str, *, context_window: int, max_output: int) -> None:
    """Declare the limits of every model whose normalized id starts with ``prefix``; they
    win over everything else, the provider's own answer included."""
    if not isinstance(prefix, str) or not prefix.strip():
        raise ValueError("register_model_limits: prefix must be a non-empty string, e.g. 'my-model'")
    _registered[normalize_model_id(prefix)] = ModelLimits(context_window, max_output)


def _by_prefix(table: dict[str, ModelLimits], name: str) -> ModelLimits | None:
    matches = [prefix for prefix in table if name.startswith(prefix)]
    return table[max(matches, key=len)] if matches else None


@functools.lru_cache(maxsize=256)
def _builtin(name: str) -> ModelLimits | None:
    """The built-in table's limits for a normalized id (the table never changes)."""
    return _by_prefix(_BUILTIN, name)


def lookup_model_limits(model: str) -> ModelLimits | None:
    """The registered, else the built-in limits of ``model``; ``None`` if neither knows it."""
    name = normalize_model_id(model)
    return _by_prefix(_registered, name) or _builtin(name)


def learn_model_limits(
    model: str,
    *,
    provider: Any = None,
    context_window: int | None = None,
    max_output: int | None = None,
) -> None:
    """Remember a limit a provider reported, so that later requests respect it: on the
    provider object for that exact model id, or process-wide without a provider."""
    if provider is None:
        entry = _learned.setdefault(normalize_model_id(model), {})
    else:
        cache = getattr(provider, PROVIDER_CACHE, None)
        if not isinstance(cache, dict):
            cache = {}
            try:
                setattr(provider, PROVIDER_CACHE, cache)
            except (AttributeError, TypeError):
                return  # a provider that takes no attributes learns nothing
        entry = cache.setdefault(model, {})
    if context_window is not None and context_window > 0:
        entry["context_window"] = int(context_window)
    if max_output is not None and max_output > 0:
        entry["max_output"] = int(max_output)


def _with_learned(model: str, limits: ModelLimits, provider: Any) -> ModelLimits:
    cache = getattr(provider, PROVIDER_CACHE, None)
    mine = cache.get(model) if isinstance(cache, dict) else None
    learned = mine or _learned.get(normalize_model_id(model))
    if not learned:
        return limits
    return ModelLimits(
        learned.get("context_window", limits.context_window), learned.get("max_output", limits.max_output)
    )


async def resolve_model_limits(provider: Any, model: str) -> ModelLimits:
    """The best-known limits of ``model`` as ``provider`` serves it. Never raises: a
    provider lookup that fails leaves the table's answer."""
    name = normalize_model_id(model)
    registered = _by_prefix(_registered, name)
    # A fallback chain resolves each member's own model, so a registration for the
    # chain's nominal model does not short-circuit it.
    if registered is not None and not getattr(provider, "_resolves_member_limits", False):
        return registered
    found: ModelLimits | None = None
    ask = getattr(provider, "model_limits", None)
    if callable(ask):
        try:
            answer = ask(model)
            if inspect.isawaitable(answer):
                answer = await answer
            if isinstance(answer, ModelLimits):
                found = answer
        except Exception:
            logger.debug("the provider's model_limits(%r) failed; using the table", model, exc_info=True)
    if found is None:
        found = _builtin(name) or UNKNOWN_MODEL
    return _with_learned(model, found, provider)


def default_reply_budget(limits: ModelLimits) -> int:
    """The reply budget when nothing chose one: the model's limit, at most the cap."""
    return min(limits.max_output, DEFAULT_OUTPUT_CAP)


def provider_reply_default(provider: Any, model: str, limits: ModelLimits) -> int:
    """The reply budget for ``model`` when ``AgentConfig.max_tokens`` is unset: the
    provider's own choice if it overrides ``LLMProvider.default_max_tokens(model)`` (kept
    within the model's limit), else ``default_reply_budget``."""
    from harnessx.providers._base import LLMProvider

    chooser = getattr(provider, "default_max_tokens", None)
    overridden = getattr(type(provider), "default_max_tokens", None) is not LLMProvider.default_max_tokens
    if callable(chooser) and overridden:
        try:
            chosen = chooser(model)
        except Exception:
            logger.debug("the provider's default_max_tokens(%r) failed", model, exc_info=True)
        else:
            if type(chosen) is int and chosen > 0:
                return min(chosen, limits.max_output)
    return default_reply_budget(limits)


async def reply_budget(provider: Any, model: str, configured: int | None, *, raised: int = 0) -> int:
    """The ``max_tokens`` a model call asks for: ``configured`` (``AgentConfig.max_tokens``)
    or the provider's default, within what the model can write; doubled ``raised`` times
    (once for each reply of the run cut off at its budget), never past the model's limit."""
    limits = await resolve_model_limits(provider, model)
    budget = (
        min(configured, limits.max_output) if configured else provider_reply_default(provider, model, limits)
    )
    for _ in range(raised):
        budget = max(budget, min(budget * 2, limits.max_output))
    return budget


# Refusals that name the largest reply the model can give.
_OUTPUT_LIMITS = (
    re.compile(r"max_tokens:\s*\d+\s*>\s*(\d+)"),  # Anthropic
    re.compile(r"supports at most\s+(\d+)\s+(?:completion|output)\s+tokens"),  # OpenAI
    re.compile(  # others: "max_output_tokens must be less than or equal to 65536", "<= 8192"
        r"max_(?:output_|completion_)?tokens[^.\d]{0,80}?"
        r"(?:<=|less than or equal to|at most|maximum(?: value)? (?:is|of))\s*(\d+)"
    ),
)
# Anthropic, input and reply together over the window: "... 190000 + 32000 > 200000".
_INPUT_PLUS_REPLY = re.compile(r"(\d+)\s*\+\s*\d+\s*>\s*(\d+)")
_WINDOWS = (
    re.compile(r"too long:\s*\d+\s*tokens?\s*>\s*(\d+)"),  # Anthropic
    re.compile(r"maximum context length is\s+(\d+)"),  # OpenAI
)
_BUDGET_WORDS = ("max_tokens", "max_output_tokens", "max_completion_tokens")


def reply_limit_from_error(exc: BaseException) -> tuple[int, bool] | None:
    """The largest reply budget a refusal allows: ``(limit, True)`` when it names the
    model's own output limit (worth remembering), ``(room, False)`` when it is only what
    this request's input left of the window; ``None`` when it says nothing of the budget."""
    text = str(exc).lower()
    if not any(word in text for word in _BUDGET_WORDS):
        return None
    if "context" in text:
        both = _INPUT_PLUS_REPLY.search(text)
        if both:
            room = int(both.group(2)) - int(both.group(1)) - CONTEXT_SAFETY_TOKENS
            return (room, False) if room > 0 else None
    for pattern in _OUTPUT_LIMITS:
        found = pattern.search(text)
        if found and int(found.group(1)) > 0:
            return int(found.group(1)), True
    return None


def context_window_from_error(exc: BaseException) -> int | None:
    """The context window a refusal names, if it names one."""
    text = str(exc).lower()
    for pattern in _WINDOWS:
        found = pattern.search(text)
        if found and int(found.group(1)) > 0:
            return int(found.group(1))
    return None
