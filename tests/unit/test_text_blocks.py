"""A text block's other fields (an SDK's ``citations: None``, real citations) kept in the
conversation's content-block form, as 0.9.1's memory keeps a block; the text alone is sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anthropic.types import ParsedTextBlock

from harnessx import Agent, AgentConfig, Middleware, ProviderResponse, ScriptedProvider
from harnessx._messages import from_blocks, to_blocks
from harnessx.memory import ConversationMemory
from harnessx.providers._anthropic import to_wire_messages

CITED = {
    "type": "text",
    "text": "Oslo is sunny.",
    "citations": [{"type": "char_location", "cited_text": "sunny", "document_index": 0}],
}


def test_memory_keeps_a_text_blocks_citations() -> None:
    # 0.9.1's test_parsed_text_excludes_sdk_fields_from_canonical_content, in our words.
    raw = ParsedTextBlock[dict[str, int]](type="text", text="400", parsed_output={"answer": 400})
    memory = ConversationMemory()
    memory.add_assistant_message(ProviderResponse(content=[raw]).content)
    memory.add_assistant_message([{"type": "text", "text": "Checking."}, CITED])
    first, second = (m["content"] for m in memory.get_messages())
    assert first == [{"type": "text", "text": "400", "citations": None}]
    assert second == [{"type": "text", "text": "Checking."}, CITED]
    assert to_blocks(from_blocks(memory.get_messages())) == memory.get_messages()
    # What goes to the API is the text.
    wire = [block for m in to_wire_messages(memory.get_messages()) for block in m["content"]]
    assert wire and all(set(block) == {"type", "text"} for block in wire)


async def test_a_runs_reply_keeps_its_text_blocks_and_a_session_snapshot_too(tmp_path: Path) -> None:
    provider = ScriptedProvider([ProviderResponse(content=[CITED])])
    agent = Agent(config=AgentConfig(planning=False), provider=provider)
    assert (await agent.run("Weather?")).output == "Oslo is sunny."
    assert agent.memory.get_messages()[-1] == {"role": "assistant", "content": [CITED]}
    session = await agent.save_session(storage_dir=str(tmp_path))
    loaded = await Agent.load_session(session, storage_dir=str(tmp_path), provider=provider)
    assert loaded.memory.get_messages()[-1] == {"role": "assistant", "content": [CITED]}


async def test_a_text_edited_by_a_middleware_shows_as_edited() -> None:
    class Edit(Middleware):
        async def after_llm_call(self, response: Any) -> Any:
            response.text = "Edited."
            return response

    agent = Agent(
        config=AgentConfig(planning=False), provider=ScriptedProvider([ProviderResponse(content=[CITED])])
    )
    agent.middleware.add(Edit())
    assert (await agent.run("go")).output == "Edited."
    assert agent.memory.get_messages()[-1]["content"] == [{**CITED, "text": "Edited."}]
    # An engine-form message whose text changed since shows the text as it is now.
    [message] = from_blocks([{"role": "assistant", "content": [CITED]}])
    message["content"] = "Condensed."
    assert to_blocks([message]) == [
        {"role": "assistant", "content": [{"type": "text", "text": "Condensed."}]}
    ]
