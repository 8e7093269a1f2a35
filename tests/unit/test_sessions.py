"""Conversation snapshots and ``agent.memory``, as the original harnessx 0.9.1 has them.

``save_session`` is async, defaults to ``.agent_sessions`` and returns the session id;
``load_session`` is an async classmethod. Snapshots written by the original (version 2)
load here, and so do the version 1 snapshots this project wrote before.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harnessx import (
    Agent,
    AgentConfig,
    ConfigurationError,
    ConversationMemory,
    Limits,
    Message,
    PersistentMemory,
    ProviderResponse,
    RuntimeStateError,
    ScriptedProvider,
    ToolCall,
    ToolResult,
)

DATA = Path(__file__).parent / "data"

TOOL_SCRIPT: list[ProviderResponse | str] = [
    ProviderResponse(text="Checking.", tool_calls=[ToolCall("c1", "get_weather", {"city": "Oslo"})]),
    "It is sunny in Oslo.",
    "You asked about Oslo.",
]


def weather_agent(replies: list[ProviderResponse | str], **kwargs: object) -> Agent:
    agent = Agent(provider=ScriptedProvider(replies), **kwargs)  # type: ignore[arg-type]

    @agent.tools.register(replay_policy="safe")
    def get_weather(city: str) -> str:
        """Current weather."""
        return f"sunny in {city}"

    return agent


async def test_memory_exposes_the_conversation_as_content_blocks() -> None:
    agent = weather_agent(TOOL_SCRIPT)
    await agent.run("Weather?")
    assert agent.memory.message_count == 4
    assert agent.memory.get_messages() == [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Oslo"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "sunny in Oslo"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "It is sunny in Oslo."}]},
    ]
    assert all(isinstance(m, Message) for m in agent.memory.messages)
    # A detached copy: editing it changes nothing.
    agent.memory.get_messages()[0]["content"] = "edited"
    assert agent.memory.get_messages()[0]["content"] == "Weather?"


async def test_memory_set_messages_takes_blocks_and_the_next_run_sees_them() -> None:
    agent = weather_agent(["Yes, you said so."])
    agent.memory.set_messages(
        [
            {"role": "user", "content": "I like Oslo."},
            {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]},
        ]
    )
    await agent.run("Do I like Oslo?")
    provider = agent.provider
    assert isinstance(provider, ScriptedProvider)
    # As harnessx 0.9.1 sends them: the model's turn as content blocks.
    assert [m["content"] for m in provider.requests[0].messages] == [
        "I like Oslo.",
        [{"type": "text", "text": "Noted."}],
        "Do I like Oslo?",
    ]
    with pytest.raises(ConfigurationError, match="media input"):
        agent.memory.set_messages([{"role": "user", "content": [{"type": "image", "source": {}}]}])


def test_memory_add_methods_and_clear() -> None:
    memory = ConversationMemory(max_result_chars=100)
    memory.add_user_message("hi")
    memory.add_assistant_message([{"type": "tool_use", "id": "t", "name": "dump", "input": {}}])
    memory.add_assistant_message("")  # nothing in it: not stored
    memory.add_tool_results([ToolResult("t", "x" * 5000)])
    blocks = memory.get_messages()
    assert len(blocks) == 3
    shown = blocks[2]["content"][0]["content"]
    # The start of it, within the limit, and how to read on.
    assert "Not shown: characters 101 to 5,000." in shown
    assert shown.endswith("\n\n" + "x" * 100 + "\n... [preview truncated]")
    assert 'read_tool_result(result_id="t", char_offset=100, max_chars=200)' in shown
    assert memory.read_evicted("t", 0, 1).startswith("[t: lines 1-1 of 1]")
    memory.clear()
    assert memory.message_count == 0


async def test_save_session_defaults_and_load_session_round_trip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = AgentConfig(system_prompt="Be brief.")
    agent = weather_agent(TOOL_SCRIPT, config=config)
    await agent.run("Weather?")
    session_id = await agent.save_session()
    assert session_id == agent.session_id
    saved = json.loads((tmp_path / ".agent_sessions" / f"{session_id}.json").read_text())
    assert saved["version"] == 2 and saved["session_id"] == session_id
    assert saved["config"]["system_prompt"] == "Be brief."
    assert {"messages", "total_usage", "created_at", "updated_at", "metadata", "extensions"} <= set(saved)
    # Extension fields at their defaults are left out, so the original can read the file.
    assert "only" not in saved["config"]["tools"] and "tool_concurrency" not in saved["config"]["limits"]

    restored = await Agent.load_session(session_id, config=config, provider=ScriptedProvider(TOOL_SCRIPT))
    assert restored.session_id == session_id and restored.memory.message_count == 4
    assert restored.config.system_prompt == "Be brief."
    assert restored.total_usage == agent.total_usage
    result = await restored.run("What did I ask?")
    assert result.output == "You asked about Oslo." and restored.memory.message_count == 6
    # Sessions are listed and deleted by id.
    assert [s["session_id"] for s in PersistentMemory().list_sessions()] == [session_id]
    PersistentMemory().delete_session(session_id)
    assert PersistentMemory().list_sessions() == []


async def test_what_a_provider_learned_of_its_models_is_saved_with_the_session(tmp_path: Path) -> None:
    """As 0.9.1's ``provider_state``: a model limit the provider learned (a refusal naming
    it) is saved with the session and given to the provider of the loaded agent."""
    from harnessx.models import learn_model_limits, resolve_model_limits

    agent = weather_agent(TOOL_SCRIPT)
    learn_model_limits("small-model", provider=agent.provider, max_output=1024, context_window=8192)
    session_id = await agent.save_session(tmp_path)
    saved = json.loads((tmp_path / f"{session_id}.json").read_text())
    learned = {"small-model": {"max_output": 1024, "context_window": 8192}}
    assert saved["provider_state"] == {"limits": learned}
    fresh = ScriptedProvider(TOOL_SCRIPT)
    await Agent.load_session(session_id, tmp_path, provider=fresh)
    limits = await resolve_model_limits(fresh, "small-model")
    assert (limits.max_output, limits.context_window) == (1024, 8192)


async def test_a_snapshot_is_refused_while_running_or_closed(tmp_path: Path) -> None:
    agent = weather_agent(TOOL_SCRIPT)
    await agent.aclose()
    with pytest.raises(RuntimeStateError, match="running or closed"):
        await agent.save_session(tmp_path)


async def test_a_snapshot_written_by_the_original_loads(tmp_path: Path) -> None:
    """The original harnessx's version 2 file, its artifact file for a large result included."""
    snapshot = json.loads((DATA / "original_session_v2.json").read_text())
    session_id = snapshot["session_id"]
    shutil.copy(DATA / "original_session_v2.json", tmp_path / f"{session_id}.json")
    artifacts = tmp_path / "artifacts" / session_id
    artifacts.mkdir(parents=True)
    shutil.copy(DATA / "original_artifact.txt", artifacts / ("ab" * 32))

    # The loaded conversation holds two replies already: the script continues from the third.
    replies: list[ProviderResponse | str] = [
        "(in the snapshot)",
        "(in the snapshot)",
        ProviderResponse(
            tool_calls=[
                ToolCall("r1", "read_tool_result", {"result_id": "toolu_sensor", "pattern": "reading 299"})
            ]
        ),
        "The last reading was 21.9 C.",
    ]
    agent = await Agent.load_session(session_id, tmp_path, provider=ScriptedProvider(replies))
    assert agent.config.system_prompt == "You watch the greenhouse."
    assert agent.config.limits.max_result_chars == 2000
    assert agent.memory.get_messages() == snapshot["messages"]
    assert agent.total_usage.input_tokens == 120 and agent.lifetime_iterations == 2
    result = await agent.run("And the last reading?")
    assert result.ok
    provider = agent.provider
    assert isinstance(provider, ScriptedProvider)
    (answer,) = provider.requests[1].tool_results
    assert not answer.get("is_error") and "reading 299: 21.9 C" in answer["content"]


async def test_a_snapshot_written_by_harnessx_0_1_loads(tmp_path: Path) -> None:
    """This project's own version 1 files (messages in the engine's form) keep loading."""
    snapshot = json.loads((DATA / "harnessx_0_1_session_v1.json").read_text())
    session_id = snapshot["session_id"]
    shutil.copy(DATA / "harnessx_0_1_session_v1.json", tmp_path / f"{session_id}.json")

    class Counter:
        name = "counter"
        count = 0

        def export_state(self) -> dict[str, int]:
            return {"count": self.count}

        def import_state(self, state: dict[str, int]) -> None:
            self.count = state["count"]

    counter = Counter()
    agent = await Agent.load_session(
        session_id, tmp_path, provider=ScriptedProvider(["You asked about Oslo."] * 3), extensions=[counter]
    )
    assert counter.count == 7
    assert agent.config.system_prompt == "Be brief." and agent.config.provider is None
    assert agent.memory.message_count == 4
    assert agent.memory.get_messages()[2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "1", "content": "sunny in Oslo"}],
    }
    with pytest.raises(ConfigurationError, match="extension state for \\['counter'\\]"):
        await Agent.load_session(session_id, tmp_path)


async def test_large_results_survive_a_snapshot(tmp_path: Path) -> None:
    big = "\n".join(f"row {i}" for i in range(5000))
    replies: list[ProviderResponse | str] = [
        ProviderResponse(tool_calls=[ToolCall("d1", "dump", {})]),
        "Dumped.",
        ProviderResponse(
            tool_calls=[ToolCall("r1", "read_tool_result", {"result_id": "d1", "offset": 4990})]
        ),
        "The last rows are 4990 to 4999.",
    ]
    agent = Agent(
        provider=ScriptedProvider(replies), config=AgentConfig(limits=Limits(max_result_chars=1000))
    )

    @agent.tools.register(replay_policy="safe")
    def dump() -> str:
        """Dump every row."""
        return big

    await agent.run("Dump the table.")
    session_id = await agent.save_session(tmp_path)
    restored = await Agent.load_session(session_id, tmp_path, provider=ScriptedProvider(replies))
    restored.tools.register(name="dump", replay_policy="safe")(lambda: big)
    await restored.run("What are the last rows?")
    provider = restored.provider
    assert isinstance(provider, ScriptedProvider)
    (answer,) = provider.requests[-1].tool_results
    assert "row 4999" in answer["content"] and answer["content"].startswith("[d1: lines 4991-5000 of 5000]")


async def test_a_bad_session_id_or_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="invalid session id"):
        await Agent.load_session("../escape", tmp_path)
    (tmp_path / "moved.json").write_text(json.dumps({"version": 2, "session_id": "other"}))
    with pytest.raises(ConfigurationError, match="renamed or copied"):
        await Agent.load_session("moved", tmp_path)


def test_spilling_twice_keeps_the_whole_result_readable() -> None:
    """``spill_large_results`` shows large results as previews with 0.9.1's notice; a second
    call frees nothing and keeps the whole text (it was kept as the preview once)."""
    memory = ConversationMemory()
    memory.add_user_message("go")
    memory.add_assistant_message([{"type": "tool_use", "id": "big", "name": "t", "input": {}}])
    memory.add_tool_results([ToolResult(tool_call_id="big", content="y" * 10_000)])
    assert memory.spill_large_results() > 6_000
    assert "Full output saved to:" in memory.get_messages()[-1]["content"][0]["content"]
    assert memory.spill_large_results() == 0
    assert memory.stored_result("big") == "y" * 10_000


def test_previews_of_earlier_builds_and_of_the_original_are_recognised() -> None:
    """A preview is never previewed again: this build's, one stored by an earlier build
    (its notice worded differently) and one 0.9.1 wrote (its notice names a file)."""
    from harnessx._condense import spill, view
    from harnessx._large_results import is_preview, preview_result

    earlier = (
        "[Tool result too large to show in full: 9,000 characters, 1 line. Shown below: ...]\n" + "y" * 3000
    )
    original = (
        "[Tool result too large (1 line, 9,000 chars). Full output saved to: /tmp/x.txt]\n" + "y" * 3000
    )
    ours = preview_result("c1", "y" * 9000, 12_000)
    for preview in (earlier, original, ours):
        assert is_preview(preview)
        message = {"role": "tool", "tool_call_id": "c1", "content": preview}
        assert view([message, spill(2_000)]) == [message]
