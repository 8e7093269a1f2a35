"""Prompt-cache hints (harnessx 0.9.1's ``harnessx.prompt_cache``): a run says which prefix of
a request is stable, a provider decides how its vendor caches it.

A provider whose ``create`` / ``stream`` declares a ``cache`` parameter gets a
``PromptCacheHint`` on every call (``DISABLED`` with ``AgentConfig(prompt_cache=None)``);
one without it is called as before. ``build_hint`` is what the run sends, ``prefix_key`` the
digest of what must be identical for two requests to share a cached prefix.
"""

from __future__ import annotations

from harnessx._policies import PromptCacheHint, PromptCachePolicy
from harnessx._prompt_cache import DISABLED, accepts_cache, build_hint, hint_from_wire, prefix_key

__all__ = [
    "DISABLED",
    "PromptCacheHint",
    "PromptCachePolicy",
    "accepts_cache",
    "build_hint",
    "hint_from_wire",
    "prefix_key",
]
