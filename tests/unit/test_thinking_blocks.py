"""A reply's thinking blocks on the assistant message the engine keeps, in the content-block
form (``agent.memory.get_messages()``, what providers receive) and back."""

from __future__ import annotations

from typing import Any

from harnessx._messages import THINKING_BLOCKS, from_blocks, request_messages, to_blocks
from harnessx.providers import ToolCall

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


def test_a_reply_given_as_content_blocks_is_read_from_them() -> None:
    """As 0.9.1: ``ProviderResponse(content=[...])`` gives the reply its text, calls and
    thinking; fields given explicitly stay as given."""
    from harnessx import ProviderResponse, ToolCall

    reply = ProviderResponse(
        content=[SIGNED, {"type": "text", "text": "Checking."}, {"type": "tool_use", **CALL}]
    )
    assert reply.text == "Checking." and reply.thinking == "Call the tool."
    assert reply.tool_calls == [ToolCall("toolu_1", "get_weather", {"city": "Oslo"})]
    given = ProviderResponse(text="Mine.", content=[{"type": "text", "text": "Checking."}])
    assert given.text == "Mine." and given.tool_calls == []
    assert ProviderResponse(content=[REDACTED]).text == ""


async def test_response_middleware_may_edit_the_text_but_not_signed_or_redacted_thinking() -> None:
    from harnessx import Agent, AgentConfig, Middleware, ProviderResponse, ScriptedProvider

    class Edit(Middleware):
        async def after_llm_call(self, response: Any) -> Any:
            response.text = "Edited."
            return response

    class Replace(Middleware):
        async def after_llm_call(self, response: Any) -> Any:
            response.content = [{"type": "text", "text": "Replaced."}]
            return response

    outcomes = []
    for middleware in (Edit(), Replace()):
        provider = ScriptedProvider(
            [ProviderResponse(content=[SIGNED, REDACTED, {"type": "text", "text": "Answer."}])]
        )
        agent = Agent(config=AgentConfig(planning=False), provider=provider)
        agent.middleware.add(middleware)
        result = await agent.run("go")
        outcomes.append((result.status.value, result.output, (result.error or {}).get("message")))
        if result.ok:
            assert agent.memory.get_messages()[-1]["content"][:2] == [SIGNED, REDACTED]
    assert outcomes == [
        ("completed", "Edited.", None),
        ("failed", "", "Response middleware cannot change signed or opaque provider content"),
    ]


def test_content_is_derived_from_the_fields_when_no_blocks_were_given() -> None:
    from harnessx import ProviderResponse

    call = ToolCall("t1", "search", {"q": "x"})
    response = ProviderResponse(text="Found", tool_calls=[call], thinking="hmm")
    assert [(b.type, vars(b)) for b in response.content] == [
        ("thinking", {"type": "thinking", "thinking": "hmm"}),
        ("text", {"type": "text", "text": "Found"}),
        ("tool_use", {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "x"}}),
    ]
    assert ProviderResponse().content == []
    response.content = [{"type": "text", "text": "after"}]  # assigning sets the fields
    assert (response.text, response.tool_calls, response.thinking) == ("after", [], None)


def test_edited_fields_show_in_the_given_blocks_and_the_codec_keeps_them() -> None:
    from harnessx import ProviderResponse
    from harnessx.temporal._codec import response_from_dict, response_to_dict

    given = [
        SIGNED,
        {"type": "text", "text": "one"},
        {"type": "tool_use", "id": "a", "name": "x", "input": {}},
    ]
    response = ProviderResponse(content=given)
    assert response.content == given
    assert response_from_dict(response_to_dict(response)).content == given
    response.text = "two"
    response.tool_calls = [ToolCall("b", "y", {"n": 1})]
    assert response.content == [
        SIGNED,
        {"type": "text", "text": "two"},
        {"type": "tool_use", "id": "b", "name": "y", "input": {"n": 1}},
    ]
