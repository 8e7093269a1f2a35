"""Fitting a model request into ``Limits.max_context_tokens``.

Old tool output is usually most of an agent's context and what it needs least: the
conclusions it drew from it are in the turns that followed. So when a request would come
near the limit, the text of the oldest tool results is replaced by a one-line note, newest
results kept, until the request fits (or nothing old is left to clear). Only the request is
changed: the committed conversation keeps every result, so a resumed run, a later run and
``read_tool_result`` still have them. Sizes are estimated at four characters a token.
"""

from __future__ import annotations

import json
from typing import Any

from harnessx._memory import CLEARED_TOOL_RESULT

__all__ = ["estimated_tokens", "fit_context"]

# Start clearing at this share of the limit: the reply needs room too.
_HEADROOM = 0.8
# The newest messages are never touched: the model is working from them.
_PROTECTED = 4


def estimated_tokens(
    messages: list[dict[str, Any]], system: str = "", tools: list[dict[str, Any]] | None = None
) -> int:
    size = len(system) + len(json.dumps(messages, default=str)) + len(json.dumps(tools or [], default=str))
    return size // 4


def fit_context(
    messages: list[dict[str, Any]],
    max_tokens: int | None,
    system: str = "",
    tools: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """``messages`` (a new list) with old tool results cleared until the request is
    estimated to fit ``_HEADROOM`` of ``max_tokens``; unchanged without a limit."""
    if max_tokens is None:
        return messages
    budget = int(max_tokens * _HEADROOM)
    total = estimated_tokens(messages, system, tools)
    if total <= budget:
        return messages
    out = list(messages)
    for index in range(max(0, len(out) - _PROTECTED)):
        message = out[index]
        content = message.get("content")
        if message.get("role") != "tool" or not isinstance(content, str) or content == CLEARED_TOOL_RESULT:
            continue
        saved = (len(json.dumps(content)) - len(json.dumps(CLEARED_TOOL_RESULT))) // 4
        if saved <= 0:
            continue
        out[index] = {**message, "content": CLEARED_TOOL_RESULT}
        total -= saved
        if total <= budget:
            break
    return out
