"""A provider's own blocks (``{"type": "provider", "provider": ..., "data": {...}}``) in the
conversation: kept in their places through the engine's form and back, shown with an edited
text, refused when malformed, never cut from their call by a condensation."""

from __future__ import annotations

from typing import Any

import pytest

from harnessx import ConfigurationError, ConversationMemory
from harnessx._messages import from_blocks, to_blocks

CALL = {
    "type": "provider",
    "provider": "anthropic",
    "data": {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "q"}},
}
RESULT = {
    "type": "provider",
    "provider": "anthropic",
    "data": {"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": []},
}
TURN: list[dict[str, Any]] = [
    {"type": "thinking", "thinking": "t", "signature": "sig"},
    {"type": "text", "text": "Searching."},
    CALL,
    RESULT,
    {"type": "text", "text": "Found."},
    {"type": "tool_use", "id": "t1", "name": "note", "input": {}},
]


def test_a_turn_goes_through_the_engines_form_and_back() -> None:
    messages = [{"role": "user", "content": "go"}, {"role": "assistant", "content": TURN}]
    engine = from_blocks(messages)
    assert engine[1]["content"] == "Searching.\nFound."  # what is sent of the text
    assert to_blocks(engine) == messages
    assert to_blocks(to_blocks(engine)) == messages


def test_an_edited_text_keeps_the_providers_blocks_in_their_places() -> None:
    engine = from_blocks([{"role": "assistant", "content": TURN}])
    engine[0]["content"] = "Edited."
    assert to_blocks(engine)[0]["content"] == [
        TURN[0],
        {"type": "text", "text": "Edited."},
        CALL,
        RESULT,
        TURN[5],
    ]
    engine[0]["content"] = ""
    assert [b["type"] for b in to_blocks(engine)[0]["content"]] == [
        "thinking",
        "provider",
        "provider",
        "tool_use",
    ]


@pytest.mark.parametrize(
    "block",
    [
        {"type": "provider", "data": {"type": "x"}},
        {"type": "provider", "provider": "", "data": {"type": "x"}},
        {"type": "provider", "provider": "anthropic", "data": "x"},
    ],
)
def test_a_malformed_provider_block_is_refused(block: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="provider's name and its data"):
        ConversationMemory().set_messages([{"role": "assistant", "content": [block]}])


def test_a_turn_of_provider_blocks_alone_is_kept() -> None:
    memory = ConversationMemory()
    memory.add_assistant_message([CALL])
    memory.add_assistant_message([{"type": "thinking", "thinking": "", "signature": "sig"}])
    memory.add_assistant_message([{"type": "thinking", "thinking": "unsigned"}])
    assert [m["content"] for m in memory.get_messages()] == [
        [CALL],
        [{"type": "thinking", "thinking": "", "signature": "sig"}],
    ]


def test_a_condensation_never_cuts_a_server_call_from_its_result() -> None:
    """A paused turn and the reply that continued it are two messages, one turn on the wire:
    a cut between them would leave the result without its call."""
    memory = ConversationMemory()
    memory.set_messages(
        [
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
            {"role": "user", "content": "two"},
            {"role": "assistant", "content": [{"type": "text", "text": "Searching."}, CALL]},
            {"role": "assistant", "content": [RESULT, {"type": "text", "text": "Found."}]},
            {"role": "user", "content": "three"},
            {"role": "assistant", "content": [{"type": "text", "text": "b"}]},
            {"role": "user", "content": "four"},
        ]
    )
    _, split = memory.pending_condensation()
    assert split == 3  # before the paused turn, not between it and its continuation
