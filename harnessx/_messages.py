"""Conversation messages in the content-block form, and conversion to and from it.

The original harnessx keeps a conversation as ``{"role", "content"}`` messages whose content
is text or a list of blocks: ``text``, ``thinking``, ``tool_use`` (assistant) and
``tool_result`` (in a user message). That is what ``agent.memory.get_messages()`` returns
and what its session snapshots hold. ``to_blocks`` turns any conversation the engine keeps
into that form and ``from_blocks`` reads it back; both accept either form, so each is safe
to apply to its own output.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from harnessx._errors import ConfigurationError

__all__ = [
    "MEDIA_UNSUPPORTED",
    "TEXT_BLOCKS",
    "THINKING_BLOCKS",
    "Message",
    "close_open_calls",
    "coalesce_same_role",
    "from_blocks",
    "is_block_form",
    "request_messages",
    "text_blocks",
    "thinking_blocks",
    "to_blocks",
]

MEDIA_UNSUPPORTED = (
    "{kind} content blocks (the original harnessx's media input) are not supported by this harnessx yet; "
    "see docs/compatibility.md"
)
_MEDIA = ("image", "document", "audio")

# An assistant message the engine keeps (text in ``content``, calls in ``tool_calls``) holds
# the reply's thinking blocks under this key, each as the provider returned it: ``thinking``
# with its ``signature``, ``redacted_thinking`` with its ``data``. In the content-block form
# they come first in the message's content, where Anthropic's API returns and wants them.
THINKING_BLOCKS = "thinking_blocks"
_THINKING_KINDS = ("thinking", "redacted_thinking")


# ... and its text blocks, when one of them carries more than its text (an SDK's
# ``citations: None``, real citations) or the reply holds blocks of the provider's own
# (``{"type": "provider", "provider": "anthropic", "data": {...}}``: a server tool's call
# and result, 0.9.1's form), those too, all in the order they came: the content-block form
# shows them so, as 0.9.1's memory keeps a block, and a provider's own blocks go back to it
# verbatim. ``content`` stays the joined text, which is what is sent of the text; an edit of
# it since (a middleware, condensing) shows the edited text in the first text block's place,
# the provider's blocks where they were.
TEXT_BLOCKS = "text_blocks"
_BODY_KINDS = ("text", "provider")


def text_blocks(content: Iterable[Any] | None) -> list[dict[str, Any]]:
    """Copies of the text and ``provider`` blocks among ``content``, in order, if a text
    block has fields besides ``type`` and ``text`` or a provider block is there; none
    otherwise (the joined text says it all)."""
    body = [b for b in content or [] if isinstance(b, dict) and b.get("type") in _BODY_KINDS]
    if not any(b.get("type") == "provider" or set(b) - {"type", "text"} for b in body):
        return []
    return copy.deepcopy(body)


def _kept_text_blocks(message: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    kept, text = message.get(TEXT_BLOCKS), message.get("content") or ""
    if not isinstance(kept, list) or not isinstance(text, str):
        return None
    body = copy.deepcopy([b for b in kept if isinstance(b, dict)])
    texts = [str(b.get("text", "")) for b in body if b.get("type") == "text"]
    if text in ("\n".join(texts), "".join(texts)):  # joined by a provider with or without newlines
        return body
    # The text was changed since: the text as it is now, the provider's blocks as they came.
    if not any(b.get("type") == "provider" for b in body):
        return None
    edited: list[dict[str, Any]] = []
    for block in body:
        if block.get("type") != "text":
            edited.append(block)
        elif text:
            edited.append({"type": "text", "text": text})
            text = ""
    if text:
        edited.append({"type": "text", "text": text})
    return edited


def thinking_blocks(content: Iterable[Any] | None) -> list[dict[str, Any]]:
    """Copies of the thinking blocks among ``content`` (a reply's or a message's blocks)."""
    return [
        copy.deepcopy(block)
        for block in content or []
        if isinstance(block, dict) and block.get("type") in _THINKING_KINDS
    ]


@dataclass(frozen=True)
class Message(Mapping[str, Any]):
    """One validated message: ``role`` and ``content`` (text or content blocks).

    A read-only mapping with exactly the keys ``role`` and ``content``; ``to_dict`` gives a
    detached copy.
    """

    role: Literal["user", "assistant", "system"]
    content: str | list[dict[str, Any]]

    def __post_init__(self) -> None:
        if self.role not in ("user", "assistant", "system"):
            raise ConfigurationError(
                f"message role must be 'user', 'assistant' or 'system', got {self.role!r}"
            )
        if isinstance(self.content, list):
            for block in self.content:
                _check_block(self.role, block)
        elif not isinstance(self.content, str):
            raise ConfigurationError("message content must be text or a list of content blocks")
        try:
            json.dumps(self.content, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"message content must be JSON data: {exc}") from None
        object.__setattr__(self, "content", copy.deepcopy(self.content))

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> Message:
        if set(value) != {"role", "content"}:
            raise ConfigurationError(f"a message has exactly the keys role and content, got {sorted(value)}")
        return cls(role=value["role"], content=value["content"])

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "content": copy.deepcopy(self.content)}

    def __getitem__(self, key: str) -> Any:
        if key == "role":
            return self.role
        if key == "content":
            return self.content
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(("role", "content"))

    def __len__(self) -> int:
        return 2


def _check_block(role: str, block: Any) -> None:
    if not isinstance(block, dict):
        raise ConfigurationError(f"content blocks must be dicts, got {type(block).__name__}")
    kind = block.get("type")
    if kind in ("text", "thinking"):
        if not isinstance(block.get(kind), str):
            raise ConfigurationError(f"a {kind} block needs a string {kind!r}")
    elif kind == "redacted_thinking":
        if role != "assistant" or not isinstance(block.get("data"), str):
            raise ConfigurationError(
                "a redacted_thinking block belongs to an assistant message and needs data"
            )
    elif kind == "tool_use":
        if (
            role != "assistant"
            or not block.get("id")
            or not block.get("name")
            or not isinstance(block.get("input"), dict)
        ):
            raise ConfigurationError(
                "a tool_use block belongs to an assistant message and needs id, name and input"
            )
    elif kind == "tool_result":
        if role != "user" or not block.get("tool_use_id") or not isinstance(block.get("content"), str | list):
            raise ConfigurationError(
                "a tool_result block belongs to a user message and needs tool_use_id and content"
            )
        if "is_error" in block and type(block["is_error"]) is not bool:
            raise ConfigurationError("a tool_result block's is_error must be True or False")
    elif kind == "provider":
        if (
            role != "assistant"
            or not isinstance(block.get("provider"), str)
            or not block["provider"]
            or not isinstance(block.get("data"), dict)
        ):
            raise ConfigurationError(
                "a provider block belongs to an assistant message and needs the provider's name and its data"
            )
    elif kind in _MEDIA:
        raise ConfigurationError(MEDIA_UNSUPPORTED.format(kind=kind))
    else:
        raise ConfigurationError(f"unsupported content block type {kind!r}")


def is_block_form(message: Mapping[str, Any]) -> bool:
    """True for a message already in the content-block form."""
    return (
        message.get("role") != "tool"
        and "tool_calls" not in message
        and THINKING_BLOCKS not in message
        and TEXT_BLOCKS not in message
    )


def to_blocks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation in the content-block form (a detached copy).

    Consecutive tool-result messages become one user message of ``tool_result`` blocks, as
    the original harnessx stores them.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": str(message.get("tool_call_id", "")),
                "content": copy.deepcopy(message.get("content", "")),
            }
            if message.get("is_error"):
                block["is_error"] = True
            previous = out[-1] if out else None
            if (
                previous is not None
                and previous["role"] == "user"
                and isinstance(previous["content"], list)
                and previous["content"]
                and all(b.get("type") == "tool_result" for b in previous["content"])
            ):
                previous["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif role == "assistant" and not is_block_form(message):
            blocks = thinking_blocks(message.get(THINKING_BLOCKS))
            text = message.get("content") or ""
            kept = _kept_text_blocks(message)
            if kept is not None:
                blocks.extend(kept)
            elif isinstance(text, list):
                blocks.extend(copy.deepcopy(text))
            elif text:
                blocks.append({"type": "text", "text": text})
            for call in message.get("tool_calls") or []:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": call["name"],
                        "input": copy.deepcopy(call.get("input") or {}),
                    }
                )
            out.append({"role": "assistant", "content": blocks})
        elif role == "assistant" and isinstance(message.get("content"), str):
            text = message["content"]
            out.append({"role": "assistant", "content": [{"type": "text", "text": text}] if text else []})
        else:
            out.append({"role": role, "content": copy.deepcopy(message.get("content", ""))})
    return out


def from_blocks(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as the engine keeps it, from the content-block form.

    ``tool_result`` blocks become tool messages (named after the call they answer); an
    assistant message's text blocks are joined and its ``tool_use`` blocks become its
    ``tool_calls``. Messages already in the engine's form pass through unchanged.
    """
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if not is_block_form(message):
            for call in message.get("tool_calls") or []:
                names[str(call.get("id"))] = str(call.get("name"))
            out.append(copy.deepcopy(dict(message)))
            continue
        if not isinstance(content, list):
            out.append({"role": role, "content": "" if content is None else content})
            continue
        for block in content:
            _check_block(str(role), block)
        if role == "assistant":
            texts = [b["text"] for b in content if b.get("type") == "text"]
            calls = [
                {"id": str(b["id"]), "name": str(b["name"]), "input": copy.deepcopy(b["input"])}
                for b in content
                if b.get("type") == "tool_use"
            ]
            converted: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts)}
            if calls:
                converted["tool_calls"] = calls
                names.update((c["id"], c["name"]) for c in calls)
            thinking = thinking_blocks(content)
            if thinking:
                converted[THINKING_BLOCKS] = thinking
            kept = text_blocks(content)
            if kept:
                converted[TEXT_BLOCKS] = kept
            out.append(converted)
            continue
        results = [b for b in content if b.get("type") == "tool_result"]
        texts = [b["text"] for b in content if b.get("type") == "text"]
        for block in results:
            body = block.get("content")
            call_id = str(block["tool_use_id"])
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "name": names.get(call_id, ""),
                    "content": body if isinstance(body, str) else json.dumps(body),
                    "is_error": bool(block.get("is_error", False)),
                }
            )
        if texts or not results:
            out.append({"role": str(role), "content": "\n".join(texts)})
    return out


def close_open_calls(
    messages: list[dict[str, Any]], recorded: Mapping[str, Any], unanswered: str
) -> list[dict[str, Any]]:
    """Tool messages (the engine's form) answering the last assistant turn's calls that
    ``messages`` leaves unanswered: with the ``ToolResult`` ``recorded`` holds for the call,
    else with ``unanswered`` as an error. A run that stops between a model's calls and their
    results (cancelled, failed) must leave a conversation whose next request is valid."""
    last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "assistant"), None)
    if last is None:
        return []
    answered = {str(m.get("tool_call_id")) for m in messages[last + 1 :] if m.get("role") == "tool"}
    closing = []
    for call in messages[last].get("tool_calls") or []:
        call_id = str(call.get("id", ""))
        if call_id in answered:
            continue
        result = recorded.get(call_id)
        closing.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "name": str(call.get("name", "")),
                "content": result.content if result is not None else unanswered,
                "is_error": result.is_error if result is not None else True,
            }
        )
    return closing


_Block = dict[str, Any]

# The answer a request carries for a call the conversation never answered (a run that
# failed or stopped between the call and its result): without one, model APIs refuse it.
_UNANSWERED = "Error: no result was recorded for this call (the run stopped before it finished)"


def _result_block(call_id: str, content: Any, is_error: bool) -> _Block:
    block: _Block = {"type": "tool_result", "tool_use_id": call_id, "content": content}
    if is_error:
        block["is_error"] = True
    return block


def _blocks(message: Mapping[str, Any] | None) -> list[_Block]:
    content = (message or {}).get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


# ----------------------------------------------------------------------- requests


def request_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as a provider receives it: in the content-block form (``to_blocks``),
    a copy the provider may change, and made valid whatever is stored.

    Empty assistant turns are left out; neighbouring messages of one role are joined; the
    message after an assistant turn answers each of its calls exactly once, answers first
    (the last answer of a call wins, one that answers nothing is dropped, a missing one is
    filled in with an error).
    """
    joined: list[dict[str, Any]] = []
    for message in to_blocks(messages):
        role = message.get("role")
        if role == "assistant" and not _says_something(message):
            continue
        if joined and joined[-1]["role"] == role:
            joined[-1]["content"] = _as_blocks(joined[-1]["content"]) + _copy_blocks(message)
        else:
            content = message.get("content")
            joined.append(
                {"role": role, "content": content if isinstance(content, str) else _copy_blocks(message)}
            )
    out: list[dict[str, Any]] = []
    for index, message in enumerate(joined):
        if message["role"] == "user":
            previous = out[-1] if out else None
            calls = _call_ids(previous) if previous is not None and previous["role"] == "assistant" else []
            if calls or isinstance(message["content"], list):
                message["content"] = _answers_first(calls, _as_blocks(message["content"]))
                if not message["content"]:
                    continue
        out.append(message)
        calls = _call_ids(message) if message["role"] == "assistant" else []
        following = joined[index + 1] if index + 1 < len(joined) else None
        if calls and (following is None or following["role"] != "user"):
            out.append({"role": "user", "content": [_result_block(c, _UNANSWERED, True) for c in calls]})
    return out


def coalesce_same_role(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Neighbouring messages (content-block form) of one role joined into one, their
    contents as blocks in order; a message with no neighbour of its role is passed as it
    is. (``request_messages`` does this and more for every request.)"""
    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []
    for message in [*messages, None]:
        if message is not None and run and run[-1].get("role") == message.get("role"):
            run.append(message)
            continue
        if len(run) == 1:
            out.append(run[0])
        elif run:
            out.append({"role": run[0]["role"], "content": [b for m in run for b in _copy_blocks(m)]})
        run = [message] if message is not None else []
    return out


def _call_ids(message: Mapping[str, Any]) -> list[str]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [str(b["id"]) for b in content if b.get("type") == "tool_use" and b.get("id")]


def _answers_first(calls: list[str], blocks: list[_Block]) -> list[_Block]:
    answers: dict[str, _Block] = {}
    others = []
    for block in blocks:
        if block.get("type") == "tool_result":
            if block.get("tool_use_id") in calls:
                answers[str(block["tool_use_id"])] = block
        else:
            others.append(block)
    return [answers.get(c) or _result_block(c, _UNANSWERED, True) for c in calls] + others


def _says_something(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    if isinstance(content, str):
        return bool(content.strip())
    for block in _blocks(message):
        kind = block.get("type")
        if kind == "text":
            if str(block.get("text", "")).strip():
                return True
        elif kind != "thinking" or block.get("signature"):
            return True
    return False


def _as_blocks(content: Any) -> list[_Block]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    return [b for b in content or [] if isinstance(b, dict)]


def _copy_blocks(message: Mapping[str, Any]) -> list[_Block]:
    content = message.get("content")
    if isinstance(content, str):
        return _as_blocks(content)
    copied = []
    for block in _blocks(message):
        block = dict(block)
        if block.get("type") == "tool_use":
            block["input"] = copy.deepcopy(block.get("input"))
        copied.append(block)
    return copied
