"""Condensing a conversation that no longer fits the model's context window.

A run's conversation is append-only (every message is committed once, in order), so
condensing does not rewrite it: it appends a *view message* that says how the messages
before it are shown from then on. ``view(messages)`` applies them, and everything that
shows a conversation (a model request, ``memory.get_messages()``, a session snapshot)
shows the view, while the store keeps every message, so that ``read_tool_result`` and
an audit still have the whole of it. Two kinds, both user-role messages carrying
``VIEW_KEY``:

- a **condensation**, ``{"replaces": k, ...}``: the first ``k`` messages of the view so far
  are replaced by this message's text, ``[Earlier conversation, condensed]`` and a
  summary (the model's, or a plain digest when the model could not make one), joined to
  the first kept message when that is the user's, so that roles still alternate;
- a **spill**, ``{"spill_over": n, "max_result_chars": m}``: tool results of the view
  longer than ``n`` characters are shown as a preview where that is shorter (the whole
  text stays readable with ``read_tool_result``, ``m`` characters a read; a spill written
  before ``m`` was recorded reads as the default's); the message itself is not shown. Its
  previews are made each time the view is taken, in this build's layout.

A cut point never separates a tool call from its result: the messages dropped answer
every call they make. The rules, limits and wording follow harnessx 0.9.1.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from harnessx._large_results import is_preview, spilled_result
from harnessx._messages import from_blocks

__all__ = [
    "CONDENSED_NOTE",
    "MAX_CONDENSATIONS",
    "MAX_OVERFLOW_RECOVERIES",
    "SPILL_THRESHOLD",
    "SUMMARY_MAX_TOKENS",
    "SUMMARY_SYSTEM",
    "VIEW_KEY",
    "clearly_within",
    "condensation",
    "condensations",
    "cut_point",
    "over_budget",
    "overflow_recoveries",
    "plain_summary",
    "render_for_summary",
    "replaced_count",
    "spill",
    "summary_prompt",
    "view",
]

VIEW_KEY = "harnessx_view"
CONDENSED_NOTE = "[Earlier conversation, condensed]"
# Condensations one run may make before a model call: a summary that does not shrink the
# history enough must not trigger another on every call.
MAX_CONDENSATIONS = 3
# Condensations (or spills) one run may make because the provider refused a request as
# too long: a second covers a count that was badly off; past that it cannot be made to fit.
MAX_OVERFLOW_RECOVERIES = 2
# A spill shows tool results longer than this as a preview.
SPILL_THRESHOLD = 2_000
_DEFAULT_MAX_RESULT_CHARS = 12_000
# The summary's reply budget: room for a dense record, never a 128K-token reply.
SUMMARY_MAX_TOKENS = 8_000
# The conversation is condensed once the request would take this share of what the window
# leaves after the reply.
_FULL = 0.8
# A request estimated under this share of it is not counted (counting is a request to the vendor).
_CLEARLY_WITHIN = 0.6
# The newest messages (content-block form) are always kept as they are.
_KEEP = 4

SUMMARY_SYSTEM = (
    "You condense the conversation of an agent that is still working, so that it can go on with "
    "less context. Write a dense record of facts, not a story."
)
_SUMMARY_ASK = (
    "Condense the conversation above into a record the agent can carry on from. Keep, where present "
    "and in this order: the task as it stands now (with any change to it); decisions taken and why, "
    "above all those that constrain the next steps; established facts (paths, identifiers, values, "
    "command results); the work done and the work left; what failed and what was learnt from it. "
    "Leave out courtesy and repetition, add nothing that is not above, and do not address anyone."
)


def _spec(message: dict[str, Any]) -> dict[str, Any] | None:
    spec = message.get(VIEW_KEY)
    return spec if isinstance(spec, dict) and message.get("role") == "user" else None


def view(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as it is shown (the engine's form): view messages applied and
    left out. Messages are not copied unless changed."""
    shown: list[dict[str, Any]] = []
    for message in messages:
        spec = _spec(message)
        if spec is None:
            shown.append(message)
        elif "replaces" in spec:
            kept = shown[int(spec["replaces"]) :]
            note = str(message.get("content", ""))
            first = kept[0] if kept else None
            if first is not None and first.get("role") == "user" and isinstance(first.get("content"), str):
                kept = [{"role": "user", "content": f"{note}\n\n{first['content']}"}, *kept[1:]]
            else:
                kept = [{"role": "user", "content": note}, *kept]
            shown = kept
        elif "spill_over" in spec:
            limit = int(spec["spill_over"])
            reads = int(spec.get("max_result_chars") or _DEFAULT_MAX_RESULT_CHARS)
            shown = [_spilled(m, limit, reads) for m in shown]
    return shown


def _spilled(message: dict[str, Any], limit: int, max_result_chars: int) -> dict[str, Any]:
    content = message.get("content")
    if message.get("role") != "tool" or not isinstance(content, str) or len(content) <= limit:
        return message
    if is_preview(content):
        return message
    preview = spilled_result(str(message.get("tool_call_id", "")), content, max_result_chars)
    # A preview is about 3,000 characters whatever the threshold: a result not much over
    # it is shown as it is.
    return {**message, "content": preview} if len(preview) < len(content) else message


def condensation(summary: str, replaces: int, *, summarized: bool, forced: bool) -> dict[str, Any]:
    """The view message replacing the first ``replaces`` shown messages (engine form) with
    ``summary``; ``forced`` when the provider refused the request as too long."""
    return {
        "role": "user",
        "content": f"{CONDENSED_NOTE}\n{summary}",
        VIEW_KEY: {"replaces": replaces, "summarized": summarized, "forced": forced},
    }


def spill(limit: int = SPILL_THRESHOLD, max_result_chars: int | None = None) -> dict[str, Any]:
    """The view message showing tool results longer than ``limit`` as previews;
    ``max_result_chars``: the agent's, which sets how much one ``read_tool_result`` returns
    (the previews say so; a spill written without it reads as the default's)."""
    spec: dict[str, Any] = {"spill_over": limit}
    if max_result_chars is not None:
        spec["max_result_chars"] = max_result_chars
    return {"role": "user", "content": "", VIEW_KEY: spec}


def condensations(messages: Iterable[dict[str, Any]]) -> int:
    return sum(1 for m in messages if "replaces" in (_spec(m) or {}))


def overflow_recoveries(messages: Iterable[dict[str, Any]]) -> int:
    """How many times these messages were condensed or spilled for a refused request."""
    return sum(1 for m in messages if (_spec(m) or {}).get("forced") or "spill_over" in (_spec(m) or {}))


def cut_point(blocks: list[dict[str, Any]], keep: int = _KEEP) -> int:
    """The latest index (content-block form) the conversation can be cut at, keeping at
    least ``keep`` messages: every call made before it (a server tool's too) is answered
    before it. 0: none."""
    for index in range(len(blocks) - keep, 0, -1):
        called: set[str] = set()
        answered: set[str] = set()
        for message in blocks[:index]:
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "tool_use":
                    called.add(str(block.get("id")))
                elif block.get("type") == "tool_result":
                    answered.add(str(block.get("tool_use_id")))
                elif block.get("type") == "provider" and isinstance(block.get("data"), dict):
                    # A server tool's call and its result (a paused turn and the reply that
                    # continued it): the API refuses a result whose call was cut away.
                    data = block["data"]
                    if str(data.get("type", "")).endswith("tool_use"):
                        called.add(str(data.get("id")))
                    elif "tool_use_id" in data:
                        answered.add(str(data.get("tool_use_id")))
        if called <= answered:
            return index
    return 0


def replaced_count(blocks: list[dict[str, Any]], split: int) -> int:
    """How many shown messages of the engine's form the first ``split`` blocks are."""
    return len(from_blocks(blocks[:split]))


def clearly_within(estimate: float, window: int, reply_tokens: int) -> bool:
    """Whether a request estimated at ``estimate`` tokens is far enough below what the
    window leaves the reply to be sent without counting it (0.9.1's rule: under 60 %)."""
    return estimate < max(1, window - max(0, reply_tokens)) * _CLEARLY_WITHIN


def over_budget(counted: int | None, window: int, reply_tokens: int) -> bool:
    """Whether a request of ``counted`` tokens (``None``: the count failed, so it is taken
    as too big: condensing early is cheap, overflowing is not) needs condensing."""
    budget = max(1, window - max(0, reply_tokens))
    return counted is None or counted >= budget * _FULL


def render_for_summary(messages: list[dict[str, Any]], max_block_chars: int = 2_000) -> str:
    """The messages (content-block form) as labelled lines for the summarizer; each block
    cut at ``max_block_chars``, so that tool output does not ride into another call whole."""
    lines: list[str] = []
    for message in messages:
        role = message.get("role", "unknown")
        content = message.get("content", "")
        if isinstance(content, str):
            if content.strip():
                lines.append(f"[{role}] {content[:max_block_chars]}")
            continue
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text" and str(block.get("text", "")).strip():
                lines.append(f"[{role}] {str(block['text'])[:max_block_chars]}")
            elif kind == "tool_use":
                arguments = json.dumps(block.get("input"), default=str)
                if len(arguments) > 200:
                    arguments = arguments[:200] + "..."
                lines.append(f"[{role} tool call] {block.get('name', '?')}({arguments})")
            elif kind == "tool_result":
                label = "tool error" if block.get("is_error") else "tool result"
                lines.append(f"[{label}] {str(block.get('content', ''))[:max_block_chars]}")
    return "\n".join(lines)


def summary_prompt(transcript: str) -> list[dict[str, Any]]:
    """The summary call's messages (its system prompt is ``SUMMARY_SYSTEM``)."""
    return [{"role": "user", "content": f"{transcript}\n\n{_SUMMARY_ASK}"}]


def plain_summary(messages: list[dict[str, Any]]) -> str:
    """A digest made without a model (when it could not summarize): the last lines of the
    transcript, each short."""
    lines = render_for_summary(messages, max_block_chars=200).splitlines()
    return "\n".join(lines[-20:])
