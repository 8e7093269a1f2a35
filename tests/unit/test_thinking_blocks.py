"""A reply's thinking blocks on the assistant message the engine keeps, in the content-block
form (``agent.memory.get_messages()``, what providers receive) and back."""

from __future__ import annotations

from typing import Any

from harnessx._messages import THINKING_BLOCKS, from_blocks, request_messages, to_blocks

SIGNED = {"type": "thinking", "thinking": "Call the tool.", "signature": "sig=="}
REDACTED = {"type": "redacted_thinking", "data": "opaque=="}
CALL = {"id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}

ENGINE_FORM: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "Checking.", "tool_calls": [CALL], THINKING_BLOCKS: [SIGNED, REDACTED]},
    {"role": "tool", "tool_call_id": "toolu_1", "name": "get_weather", "content": "Sunny", "is_error": False},
    {"role": "assistant", "content": "Sunny.", THINKING_BLOCKS: [REDACTED]},
]
BLOCK_FORM: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather?"},
    {
        "role": "assistant",
        "content": [SIGNED, REDACTED, {"type": "text", "text": "Checking."}, {"type": "tool_use", **CALL}],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"}]},
    {"role": "assistant", "content": [REDACTED, {"type": "text", "text": "Sunny."}]},
]


def test_thinking_comes_first_in_its_turn_in_the_block_form() -> None:
    assert to_blocks(ENGINE_FORM) == BLOCK_FORM
    assert request_messages(ENGINE_FORM) == BLOCK_FORM


def test_the_block_form_reads_back_with_its_thinking() -> None:
    assert from_blocks(BLOCK_FORM) == ENGINE_FORM
    assert from_blocks(ENGINE_FORM) == ENGINE_FORM  # already the engine's form
    assert to_blocks(from_blocks(BLOCK_FORM)) == BLOCK_FORM
