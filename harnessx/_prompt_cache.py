"""Prompt-cache hints: the run says which prefix of a request is stable, a provider decides
how its vendor caches it (``AgentConfig(prompt_cache=PromptCachePolicy(...))``, on by
default as in harnessx 0.9.1; ``None`` turns it off).

A hint goes to a provider method that declares a ``cache`` parameter (or takes
``**kwargs``), as 0.9.1 passes it; other providers are called as before. Caching only saves
money and time, so a provider must fail open: a vendor that refuses the markers gets the
request without them.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from collections.abc import Callable
from typing import Any

from harnessx._policies import PromptCacheHint, PromptCachePolicy

__all__ = ["DISABLED", "accepts_cache", "build_hint", "hint_from_wire", "offer_cache", "prefix_key"]

# The hint an agent with prompt_cache=None gives: "caching is off", unlike no hint at all.
DISABLED = PromptCacheHint(prefix_key="", breakpoints=(), ttl_seconds=None, enabled=False)


def prefix_key(model: str, system: str | None, tools: list[dict[str, Any]], salt: str = "") -> str:
    """A digest of what must be byte-identical for two requests to share a cached prefix."""
    stable = json.dumps(
        {"model": model, "system": system or "", "tools": tools, "salt": salt},
        sort_keys=True,
        default=str,
        ensure_ascii=False,
    )
    return hashlib.sha256(stable.encode("utf-8")).hexdigest()


def build_hint(
    policy: PromptCachePolicy | None,
    model: str,
    system: str | None,
    tools: list[dict[str, Any]],
    messages: list[dict[str, Any]],
) -> PromptCacheHint:
    """The hint for one request: the prefix ends after the system prompt, after the tools
    and, with ``cache_history``, after the last message (the next request repeats it)."""
    if policy is None:
        return DISABLED
    breakpoints = []
    if system:
        breakpoints.append("system")
    if tools:
        breakpoints.append("tools")
    if policy.cache_history and messages:
        breakpoints.append(f"message:{len(messages) - 1}")
    return PromptCacheHint(
        prefix_key=prefix_key(model, system, tools, policy.key_salt),
        breakpoints=tuple(breakpoints),
        ttl_seconds=policy.ttl_seconds,
        enabled=True,
    )


def accepts_cache(method: Callable[..., Any], *, through_kwargs: bool = False) -> bool:
    """Whether ``method`` declares a ``cache`` parameter (or, with ``through_kwargs``, takes
    ``**kwargs``). A run hands the hint only to a provider method that declares it, as
    harnessx 0.9.1 does: a provider that passes its keywords on (to a vendor SDK, say) would
    be handed a hint it never reads, and the SDK would refuse it. The base ``stream`` passes
    it on to ``create`` through ``**kwargs`` too, as 0.9.1's does."""
    # Asked before every model call: a bound method is judged by its function (the bound
    # ``self`` is no ``cache`` parameter), once, as reading a signature costs more than the
    # rest of preparing the request.
    function = getattr(method, "__func__", method)
    try:
        return _takes_cache(function, through_kwargs)
    except TypeError:  # an unhashable callable: judged each time
        return _reads_cache(function, through_kwargs)


@functools.lru_cache(maxsize=256)
def _takes_cache(function: Callable[..., Any], through_kwargs: bool) -> bool:
    return _reads_cache(function, through_kwargs)


def _reads_cache(function: Callable[..., Any], through_kwargs: bool) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    if "cache" in parameters:
        return True
    return through_kwargs and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def hint_from_wire(value: Any) -> PromptCacheHint | None:
    """A hint from its stored form (a dict; a hint is returned as it is); ``None`` for none."""
    if value is None or isinstance(value, PromptCacheHint):
        return value
    ttl = value.get("ttl_seconds")
    return PromptCacheHint(
        prefix_key=str(value.get("prefix_key", "")),
        breakpoints=tuple(str(b) for b in value.get("breakpoints", ())),
        ttl_seconds=None if ttl is None else int(ttl),
        enabled=bool(value.get("enabled", True)),
    )


def offer_cache(
    method: Callable[..., Any],
    kwargs: dict[str, Any],
    hint: PromptCacheHint | None,
    *,
    through_kwargs: bool = False,
) -> dict[str, Any]:
    """``kwargs`` for calling ``method``: with ``cache=hint`` if it takes one (see
    ``accepts_cache``), else without."""
    kwargs = {key: value for key, value in kwargs.items() if key != "cache"}
    if hint is not None and accepts_cache(method, through_kwargs=through_kwargs):
        kwargs["cache"] = hint
    return kwargs
