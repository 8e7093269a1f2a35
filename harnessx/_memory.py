"""``ConversationMemory``: an agent's conversation, carried from one run to the next.

The engine keeps messages in its own form; ``get_messages()`` gives them in the
content-block form the original harnessx exposes (see ``_messages``), and
``set_messages`` takes either form. Tool results longer than ``max_result_chars`` reach
the conversation as a preview (``_large_results``); the memory keeps the whole text of
those it was given so that ``read_tool_result`` can still read them in a later run, and
session snapshots carry them.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harnessx._condense import (
    SPILL_THRESHOLD,
    clearly_within,
    condensation,
    cut_point,
    over_budget,
    plain_summary,
    replaced_count,
    spill,
    view,
)
from harnessx._large_results import read_section, shown_in_part, shown_result
from harnessx._messages import Message, from_blocks, to_blocks
from harnessx._results import ToolResult

__all__ = ["CLEARED_TOOL_RESULT", "DEFAULT_MAX_RESULT_CHARS", "ConversationMemory"]

DEFAULT_MAX_RESULT_CHARS = 12_000
CLEARED_TOOL_RESULT = "[Old tool result cleared to make room. Run the tool again if you need it.]"
# Where the original harnessx's previews say the whole result was saved.
_SAVED_AT = re.compile(r"Full output saved to: (.+?)\]")


class ConversationMemory:
    """The messages of one session, in the order the model saw them."""

    def __init__(
        self,
        max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
        preview_lines: int = 20,
        eviction_dir: str | None = None,
    ) -> None:
        self._messages: list[dict[str, Any]] = []
        self._results: dict[str, str] = {}
        self._max_result_chars = max_result_chars
        self._preview_lines = preview_lines
        self._eviction_dir = eviction_dir
        self.last_prompt_tokens: int | None = None

    def __repr__(self) -> str:
        return f"ConversationMemory(messages={self.message_count})"

    @property
    def max_result_chars(self) -> int:
        return self._max_result_chars

    # ------------------------------------------------------------ reading

    def get_messages(self) -> list[dict[str, Any]]:
        """A detached copy of the conversation in the content-block form, as it is shown
        to the model (condensed where it was condensed: see ``_condense``)."""
        return to_blocks(view(self._messages))

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(Message.from_dict(m) for m in self.get_messages())

    @property
    def message_count(self) -> int:
        return len(self.get_messages())

    def engine_messages(self) -> list[dict[str, Any]]:
        """The conversation in the engine's own form (a copy)."""
        return copy.deepcopy(self._messages)

    # ------------------------------------------------------------ writing

    def set_messages(self, messages: Iterable[dict[str, Any]]) -> None:
        """Replace the conversation (content-block form or the engine's)."""
        given = [dict(m) for m in messages]
        self._messages = from_blocks(given)

    def replace_engine_messages(self, messages: list[dict[str, Any]]) -> None:
        """Take a run's conversation as it is (the memory never changes a message it holds
        in place: it replaces it; what it hands out to programs is a copy)."""
        self._messages = list(messages)

    def history(self) -> list[dict[str, Any]]:
        """The conversation for the next run, not copied: runs only append to theirs."""
        return list(self._messages)

    def clear(self) -> None:
        self._messages.clear()

    def add_user_message(self, content: str | list[dict[str, Any]]) -> None:
        self._messages.extend(from_blocks([{"role": "user", "content": content}]))

    def add_assistant_message(self, content: str | list[Any]) -> None:
        """Text, or content blocks (dicts, or objects with ``type``/``text``/... attributes).
        A turn with nothing in it is not stored: providers reject it when it is sent back."""
        blocks: list[dict[str, Any]] = []
        for block in [{"type": "text", "text": content}] if isinstance(content, str) else content:
            if isinstance(block, dict):
                blocks.append(dict(block))
            elif getattr(block, "type", None) in ("text", "tool_use", "thinking", "redacted_thinking"):
                blocks.append(
                    {
                        k: getattr(block, k)
                        for k in ("type", "text", "id", "name", "input", "thinking", "signature", "data")
                        if hasattr(block, k)
                    }
                )
        if not any(_says_something(b) for b in blocks):
            return
        self._messages.extend(from_blocks([{"role": "assistant", "content": blocks}]))

    def add_tool_results(self, results: Iterable[ToolResult | dict[str, Any]]) -> None:
        """Answers to the last assistant turn's tool calls. A result longer than
        ``max_result_chars`` is kept whole here and enters the conversation as a preview."""
        names = {str(c["id"]): str(c["name"]) for m in self._messages for c in m.get("tool_calls") or []}
        for item in results:
            if isinstance(item, ToolResult):
                call_id, content, is_error = item.tool_call_id, item.content, item.is_error
            else:
                call_id = str(item.get("tool_use_id") or item.get("tool_call_id") or "")
                content, is_error = str(item.get("content", "")), bool(item.get("is_error", False))
            self._messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "name": names.get(call_id, ""),
                    "content": self.fit(call_id, content),
                    "is_error": is_error,
                }
            )

    # ------------------------------------------------------------ condensing
    # harnessx 0.9.1's memory methods. A run condenses its own conversation (the driver,
    # see _condense); these do the same to this memory between runs, for programs that
    # call them. Indexes are positions in ``get_messages()``.

    async def _count(
        self, provider: Any, model: str, system: str | None, tools: list[dict[str, Any]]
    ) -> int | None:
        try:
            counted = await provider.count_tokens(
                model=model, system=system or None, tools=tools or [], messages=self.get_messages()
            )
            return int(counted)
        except Exception:
            # Unknown counts as too big (over_budget): condensing early is cheap, overflowing is not.
            return None

    async def needs_condensing(
        self,
        provider: Any,
        model: str,
        system: str | None,
        tools: list[dict[str, Any]],
        max_context_tokens: int = 150_000,
        reply_tokens: int = 0,
        *,
        measured: int | None = None,
    ) -> bool:
        """Whether the next request (counted by ``provider.count_tokens``) would not leave
        room for a reply of ``reply_tokens`` in the window, and there is a place to cut.

        ``measured``: the size the provider reported for the previous request and its
        reply. While that, plus the newest message (at four characters a token), is under
        60 % of the room, the request is taken to fit without counting it (a request to
        the vendor); ``last_prompt_tokens`` is then that estimate."""
        blocks = self.get_messages()
        self.last_prompt_tokens = None
        if len(blocks) < 6:
            return False
        if measured is not None and measured > 0:
            estimate = measured + len(json.dumps(blocks[-1], default=str)) // 4
            if clearly_within(estimate, max_context_tokens, reply_tokens):
                self.last_prompt_tokens = estimate
                return False
        counted = await self._count(provider, model, system, tools)
        self.last_prompt_tokens = counted
        return over_budget(counted, max_context_tokens, reply_tokens) and cut_point(blocks) > 0

    async def trim_if_needed(
        self,
        provider: Any,
        model: str,
        system: str | None,
        tools: list[dict[str, Any]],
        max_context_tokens: int = 150_000,
        reply_tokens: int = 0,
        *,
        force: bool = False,
    ) -> bool:
        """Condense without a model (a plain digest of what is dropped) if the next request
        would not fit, or at once with ``force``; whether it condensed."""
        blocks = self.get_messages()
        if len(blocks) < 6:
            return False
        if not force and not over_budget(
            await self._count(provider, model, system, tools), max_context_tokens, reply_tokens
        ):
            return False
        split = cut_point(blocks)
        if not split:
            return False
        summary = plain_summary(blocks[:split])
        self._messages.append(
            condensation(summary, replaced_count(blocks, split), summarized=False, forced=force)
        )
        return True

    def _find_safe_trim_boundary(self, min_keep: int = 4) -> int:
        """Where the conversation can be cut keeping ``min_keep`` messages (0: nowhere)."""
        return cut_point(self.get_messages(), min_keep)

    def pending_condensation(self) -> tuple[list[dict[str, Any]], int]:
        """The messages a condensation would drop, and where the kept ones start."""
        blocks = self.get_messages()
        split = cut_point(blocks)
        return (blocks[:split], split) if split else ([], 0)

    def apply_condensation(self, summary_text: str, split_point: int) -> bool:
        """Show ``summary_text`` instead of the messages before ``split_point``."""
        blocks = self.get_messages()
        if not 0 < split_point <= len(blocks):
            return False
        replaces = replaced_count(blocks, split_point)
        self._messages.append(condensation(summary_text, replaces, summarized=True, forced=False))
        return True

    def spill_large_results(self, *, threshold_chars: int = SPILL_THRESHOLD) -> int:
        """Show every tool result longer than ``threshold_chars`` as a preview (its whole
        text stays readable with ``read_tool_result``); the characters freed."""
        spilled = spill(threshold_chars, self._max_result_chars)
        shown = view(self._messages)
        after = view([*self._messages, spilled])
        freed = 0
        for before, now in zip(shown, after, strict=True):
            # Compared by content: a view builds new messages each time it is taken.
            if before.get("content") != now.get("content"):
                freed += len(str(before.get("content", ""))) - len(str(now.get("content", "")))
                # A list of records cut to fit was kept whole when it was given.
                self._results.setdefault(str(before.get("tool_call_id", "")), str(before.get("content", "")))
        if freed <= 0:
            return 0
        self._messages.append(spilled)
        return freed

    # ---------------------------------------------------- large results

    def fit(self, result_id: str, content: str) -> str:
        """``content`` as the conversation should hold it: itself, or what ``shown_result``
        makes of it (the whole text is then kept for ``read_tool_result``)."""
        if len(content) <= self._max_result_chars:
            return content
        self._results[result_id] = content
        return shown_result(result_id, content, self._max_result_chars)

    def keep_result(self, result_id: str, content: str) -> None:
        """Remember the whole text of a result the conversation holds as a preview."""
        self._results[result_id] = content

    def stored_result(self, result_id: str) -> str | None:
        """The whole text of a result shown as a preview, if this memory has it: results
        it was given, those of a loaded snapshot, and files a preview written by the
        original harnessx points at."""
        if result_id in self._results:
            return self._results[result_id]
        for message in reversed(self._messages):
            if message.get("role") == "tool" and message.get("tool_call_id") == result_id:
                found = _SAVED_AT.search(str(message.get("content", ""))[:600])
                if found and Path(found.group(1)).is_file():
                    return Path(found.group(1)).read_text(encoding="utf-8", errors="replace")
        return None

    def stored_results(self) -> dict[str, str]:
        """Whole texts of results shown as previews that are still in the conversation."""
        shown = {
            str(m.get("tool_call_id"))
            for m in self._messages
            if m.get("role") == "tool" and shown_in_part(str(m.get("content", "")))
        }
        return {key: value for key, value in self._results.items() if key in shown}

    def read_evicted(
        self,
        tool_use_id: str,
        offset: int = 0,
        limit: int = 2_000,
        *,
        max_chars: int = 0,
        char_offset: int = 0,
        pattern: str = "",
    ) -> str:
        """Read part of a stored large result (what ``read_tool_result`` does)."""
        content = self.stored_result(tool_use_id)
        if content is None:
            raise LookupError(
                f"no stored result with id {tool_use_id!r}; only results too large to show are kept"
            )
        return read_section(
            tool_use_id,
            content,
            offset,
            limit,
            max_chars=max_chars,
            char_offset=char_offset,
            pattern=pattern,
            max_result_chars=self._max_result_chars,
        )

    def prune_tool_results(
        self, *, keep_chars: int = 160_000, min_chars: int = 80_000, protect_messages: int = 4
    ) -> int:
        """Clear the text of old tool results, newest ``keep_chars`` kept, when that frees
        at least ``min_chars``; the last ``protect_messages`` messages are left alone.
        Returns the characters freed."""
        seen = 0
        targets: list[int] = []
        for index in range(len(self._messages) - 1 - protect_messages, -1, -1):
            message = self._messages[index]
            body = str(message.get("content", ""))
            if message.get("role") != "tool" or body == CLEARED_TOOL_RESULT:
                continue
            seen += len(body)
            if seen > keep_chars and len(body) > 2 * len(CLEARED_TOOL_RESULT):
                targets.append(index)
        freed = sum(len(str(self._messages[i]["content"])) - len(CLEARED_TOOL_RESULT) for i in targets)
        if freed < min_chars:
            return 0
        for index in targets:
            self._messages[index] = {**self._messages[index], "content": CLEARED_TOOL_RESULT}
        return freed

    async def aclose(self) -> None:
        """Nothing to release: large results are kept in memory, not in files."""


def _says_something(block: dict[str, Any]) -> bool:
    """Whether an assistant turn with ``block`` in it is worth keeping (as 0.9.1 keeps one): a
    call, non-blank text, or what only the provider can write again (signed thinking, a block
    of its own such as a server tool's call)."""
    kind = block.get("type")
    if kind in ("tool_use", "provider", "redacted_thinking"):
        return True
    if kind == "thinking":
        return bool(block.get("signature"))
    return kind == "text" and bool(str(block.get("text", "")).strip())
