"""``ProviderResponse.content``: the blocks a reply is made of, derived from ``text``,
``tool_calls`` and ``thinking`` when a provider gave none, kept when it gave some, and
setting those fields when a program assigns it."""

from __future__ import annotations

from typing import Any

from _probe import emit

from harnessx import ProviderResponse, ToolCall


def blocks(content: list[Any]) -> list[Any]:
    """Each block's kind (dict or object) and fields."""
    return [
        {"kind": "dict", **block} if isinstance(block, dict) else {"kind": "object", **vars(block)}
        for block in content
    ]


def fields(response: ProviderResponse) -> dict[str, Any]:
    return {
        "text": response.text,
        "tool_calls": [[c.id, c.name, c.input] for c in response.tool_calls],
        "thinking": response.thinking,
    }


def main() -> None:
    call = ToolCall(id="t1", name="search", input={"q": "x"})
    derived = ProviderResponse(text="Found", tool_calls=[call], thinking="hmm")
    empty = ProviderResponse()
    given = ProviderResponse(
        content=[
            {"type": "text", "text": "a"},
            {"type": "text", "text": "b"},
            {"type": "tool_use", "id": "t2", "name": "look", "input": {"k": 1}},
        ]
    )
    assigned = ProviderResponse(text="before", tool_calls=[call])
    assigned.content = [{"type": "text", "text": "after"}]
    edited = ProviderResponse(
        content=[
            {"type": "thinking", "thinking": "t"},
            {"type": "text", "text": "one"},
            {"type": "tool_use", "id": "a", "name": "x", "input": {}},
            {"type": "tool_use", "id": "b", "name": "y", "input": {}},
        ]
    )
    edited.text = "changed"
    edited.tool_calls = [ToolCall(id="b", name="y", input={"n": 2}), ToolCall(id="c", name="z", input={})]
    emit(
        {
            "derived": blocks(derived.content),
            "derived_fields": fields(derived),
            "empty": blocks(empty.content),
            "given": blocks(given.content),
            "given_fields": fields(given),
            "assigned": blocks(assigned.content),
            "assigned_fields": fields(assigned),
            "edited": blocks(edited.content),
        }
    )


main()
