"""A large tool result is stored once, on each real backend, and the model sees a preview.

A 10 MB result used to be written four times (the raw result, the result after middleware,
the tool message and the ``tool_result`` event): a 42 MB SQLite file for one call, and the
whole of it sent to the model. The result is random text, so that PostgreSQL's compression
cannot hide a second copy.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
from typing import Any

import asyncpg
import pytest
from durable_support import BackendTarget

from harnessx import (
    Agent,
    AgentConfig,
    AgentRuntime,
    ConfigurationError,
    CorruptStateError,
    Limits,
    ProviderResponse,
    RunEventType,
    ScriptedProvider,
    ToolCall,
)
from harnessx._large_results import CAPPED_MARK
from harnessx.store._archive import parse_record

SIZE = 10_000_000
# Everything but the result itself, generously: the schema, the conversation, the events.
OVERHEAD = 1_500_000


def big_result() -> str:
    return base64.b64encode(os.urandom(SIZE * 3 // 4)).decode()[:SIZE]


def dumping_agent(result: str, provider: ScriptedProvider) -> Agent:
    agent = Agent(provider=provider)
    agent.tools.register(name="dump", replay_policy="safe")(lambda: result)
    return agent


async def stored_bytes(target: BackendTarget) -> int:
    if target.kind == "sqlite":
        conn = sqlite3.connect(target.location)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            size = conn.execute("PRAGMA page_size").fetchone()[0]
        finally:
            conn.close()
        # Pages in use and pages freed by rewrites both count: the file keeps them.
        return int(pages) * int(size)
    conn = await asyncpg.connect(target.location)
    try:
        total = await conn.fetchval(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'harness_x' AND c.relkind = 'r'"
        )
    finally:
        await conn.close()
    return int(total or 0)


async def test_a_ten_megabyte_result_is_stored_once(target: BackendTarget) -> None:
    result = big_result()
    replies: list[ProviderResponse | str] = [
        ProviderResponse(tool_calls=[ToolCall("big", "dump", {})]),
        "Dumped.",
        ProviderResponse(
            tool_calls=[ToolCall("r", "read_tool_result", {"result_id": "big", "char_offset": 9_999_000})]
        ),
        "Read the end.",
    ]
    provider = ScriptedProvider(replies)
    agent = dumping_agent(result, provider)
    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        handle = await runtime.submit("Dump it.")
        assert (await handle.result()).ok
        stored = [e async for e in handle.events()]
        session_id = runtime.session_id or ""
    base = await stored_bytes(target)
    assert base < SIZE + OVERHEAD, f"{base:,} bytes stored for a {SIZE:,}-character result"

    # The model saw a preview with the way to read on, not the result.
    (shown,) = provider.requests[1].tool_results
    assert len(shown["content"]) <= 12_000 and 'read_tool_result(result_id="big"' in shown["content"]
    # The stored tool_result event reads back whole.
    (event,) = [e for e in stored if e.type is RunEventType.TOOL_RESULT]
    assert _content(event.data) == result

    # A later run of the session, driven by a fresh agent, reads the stored result.
    fresh = ScriptedProvider(replies)
    async with target.open() as backend:
        runtime = AgentRuntime(dumping_agent(result, fresh), backend=backend)
        try:
            await runtime.start(session_id)
            assert (await runtime.run("Read the end of it.")).ok
        finally:
            await runtime.stop()
    (read,) = fresh.requests[-1].tool_results
    assert not read.get("is_error") and result[9_999_000:] in read["content"]


def _content(data: Any) -> str:
    return str(data["content"] if isinstance(data, dict) else data.content)


async def test_results_stored_inline_before_this_schema_still_load(target: BackendTarget) -> None:
    """Rows of the earlier shape (every result inline, in the tool call and in the event)
    decode as they did: the migration adds a table and changes no existing row."""
    old = "x" * 50_000
    provider = ScriptedProvider([ProviderResponse(tool_calls=[ToolCall("c", "dump", {})]), "Dumped."])
    agent = dumping_agent("short", provider)
    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        result = await runtime.run("Dump it.")
    inline = '{"tool_call_id":"c","content":"' + old + '","is_error":false}'
    for column in ("raw_result", "result"):
        await _execute(
            target, f"UPDATE tool_calls SET {column} = {{p1}} WHERE run_id = {{p2}}", inline, result.run_id
        )
    await _execute(
        target,
        "UPDATE events SET data = {p1} WHERE run_id = {p2} AND type = 'tool_result'",
        '{"execution_key":"' + f"{result.run_id}:0:c" + '","content":"' + old + '","is_error":false}',
        result.run_id,
    )
    async with target.open() as backend:
        state = await backend.load_state(result.run_id)
        (entry,) = state.tools.values()
        assert entry.raw_result is not None and entry.raw_result.content == old
        assert entry.result is not None and entry.result.content == old
        events = await backend.read_events(result.run_id, 0)
        (event,) = [e for e in events if e.type is RunEventType.TOOL_RESULT]
        assert _content(event.data) == old
        assert await backend.tool_result(result.session_id, "c") == old


async def _execute(target: BackendTarget, sql: str, first: str, second: str) -> None:
    if target.kind == "sqlite":
        conn = sqlite3.connect(target.location)
        try:
            conn.execute(sql.format(p1="?", p2="?"), (first, second))
            conn.commit()
        finally:
            conn.close()
        return
    pg = await asyncpg.connect(target.location, server_settings={"search_path": "harness_x"})
    try:
        await pg.execute(sql.format(p1="$1", p2="$2"), first, second)
    finally:
        await pg.close()


MEDIUM = 8_000  # under the preview limit (12,000) and under what is stored apart (16 KiB)


async def _rows(target: BackendTarget, sql: str, run_id: str) -> list[str]:
    if target.kind == "sqlite":
        conn = sqlite3.connect(target.location)
        try:
            statement = sql.replace("$1", "?")
            return [str(value) for (value,) in conn.execute(statement, (run_id,) * statement.count("?"))]
        finally:
            conn.close()
    pg = await asyncpg.connect(target.location, server_settings={"search_path": "harness_x"})
    try:
        return [str(value) for (value,) in await pg.fetch(sql, run_id)]
    finally:
        await pg.close()


async def copies_stored(target: BackendTarget, run_id: str, text: str) -> dict[str, int]:
    """How many whole copies of ``text`` each table holds for the run."""
    columns = {
        "tool_calls": "SELECT raw_result::text FROM tool_calls WHERE run_id = $1 "
        "UNION ALL SELECT result::text FROM tool_calls WHERE run_id = $1",
        "events": "SELECT data::text FROM events WHERE run_id = $1",
        "messages": "SELECT body::text FROM messages WHERE run_id = $1",
        "tool_results": "SELECT body FROM tool_results WHERE run_id = $1",
    }
    if target.kind == "sqlite":
        columns = {table: sql.replace("::text", "") for table, sql in columns.items()}
    return {
        table: sum(value.count(text) for value in await _rows(target, sql, run_id))
        for table, sql in columns.items()
    }


async def test_a_result_is_stored_whole_once_beside_the_conversation(target: BackendTarget) -> None:
    """An 8,000-character result used to be stored four times (raw result, final result,
    tool_result event, tool message): now once on its tool call's row and once in the
    conversation the model reads, and every reader gets the whole of it back."""
    result = big_result()[:MEDIUM]
    provider = ScriptedProvider([ProviderResponse(tool_calls=[ToolCall("c", "dump", {})]), "Dumped."])
    async with target.open() as backend, AgentRuntime(dumping_agent(result, provider), backend=backend) as rt:
        handle = await rt.submit("Dump it.")
        assert (await handle.result()).ok
        live = [e async for e in handle.events()]
        run_id, session_id = handle.run_id, handle.session_id
    assert await copies_stored(target, run_id, result) == {
        "tool_calls": 1,
        "events": 0,
        "messages": 1,
        "tool_results": 0,
    }
    (shown,) = provider.requests[1].tool_results
    assert shown["content"] == result  # the model saw all of it, as before
    async with target.open() as backend:
        (entry,) = (await backend.load_state(run_id)).tools.values()
        assert entry.raw_result is not None and entry.raw_result.content == result
        assert entry.result is not None and entry.result.content == result
        (event,) = [e for e in await backend.read_events(run_id, 0) if e.type is RunEventType.TOOL_RESULT]
        assert _content(event.data) == result and not event.data.is_error
        assert event.event_id in {e.event_id for e in live}
        assert await backend.tool_result(session_id, "c") == result
        (listed,) = await backend.tool_calls(run_id)
        assert listed.result is not None and listed.result.content == result


async def test_a_result_middleware_changed_is_stored_and_read_as_changed(target: BackendTarget) -> None:
    raw = big_result()[:MEDIUM]
    final = "checked: " + raw[:2_000]
    provider = ScriptedProvider([ProviderResponse(tool_calls=[ToolCall("c", "dump", {})]), "Dumped."])
    agent = dumping_agent(raw, provider)
    agent.middleware.add_result(lambda call, result: type(result)(result.tool_call_id, final, False))
    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        done = await runtime.run("Dump it.")
    assert (await copies_stored(target, done.run_id, raw))["tool_calls"] == 1
    assert (await copies_stored(target, done.run_id, final))["events"] == 0
    async with target.open() as backend:
        (entry,) = (await backend.load_state(done.run_id)).tools.values()
        assert entry.raw_result is not None and entry.raw_result.content == raw
        assert entry.result is not None and entry.result.content == final
        events = await backend.read_events(done.run_id, 0)
        (event,) = [e for e in events if e.type is RunEventType.TOOL_RESULT]
        assert _content(event.data) == final
        assert await backend.tool_result(done.session_id, "c") == final


async def test_results_of_the_earlier_inline_shape_still_read(target: BackendTarget) -> None:
    """Rows this schema wrote before results were stored once (an 8,000-character result
    inline in both columns and in its event) read back as they did."""
    text = big_result()[:MEDIUM]
    provider = ScriptedProvider([ProviderResponse(tool_calls=[ToolCall("c", "dump", {})]), "Dumped."])
    async with (
        target.open() as backend,
        AgentRuntime(dumping_agent("short", provider), backend=backend) as rt,
    ):
        done = await rt.run("Dump it.")
    inline = '{"tool_call_id":"c","content":"' + text + '","is_error":false}'
    for column in ("raw_result", "result"):
        await _execute(
            target, f"UPDATE tool_calls SET {column} = {{p1}} WHERE run_id = {{p2}}", inline, done.run_id
        )
    await _execute(
        target,
        "UPDATE events SET data = {p1} WHERE run_id = {p2} AND type = 'tool_result'",
        inline,
        done.run_id,
    )
    async with target.open() as backend:
        (entry,) = (await backend.load_state(done.run_id)).tools.values()
        assert entry.raw_result is not None and entry.raw_result.content == text
        assert entry.result is not None and entry.result.content == text
        (event,) = [
            e for e in await backend.read_events(done.run_id, 0) if e.type is RunEventType.TOOL_RESULT
        ]
        assert _content(event.data) == text
        assert await backend.tool_result(done.session_id, "c") == text


def capped_agent(result: str, provider: ScriptedProvider, cap: int) -> Agent:
    agent = Agent(config=AgentConfig(limits=Limits(max_stored_chars=cap)), provider=provider)
    agent.tools.register(name="dump", replay_policy="safe")(lambda: result)
    return agent


async def test_a_result_over_the_stored_cap_is_cut_and_the_model_told(target: BackendTarget) -> None:
    result = big_result()[:5_000]
    provider = ScriptedProvider([ProviderResponse(tool_calls=[ToolCall("c", "dump", {})]), "Dumped."])
    async with (
        target.open() as backend,
        AgentRuntime(capped_agent(result, provider, 3_000), backend=backend) as rt,
    ):
        done = await rt.run("Dump it.")
    assert done.ok
    (shown,) = provider.requests[1].tool_results
    assert len(shown["content"]) <= 3_000
    kept = shown["content"].index("\n\n" + CAPPED_MARK)
    assert kept > 2_500 and shown["content"].startswith(result[:kept])
    assert f"{CAPPED_MARK} {kept:,} of 5,000 characters" in shown["content"]
    # The rest was never written, anywhere.
    assert sum((await copies_stored(target, done.run_id, result[3_000:3_500])).values()) == 0
    async with target.open() as backend:
        (entry,) = (await backend.load_state(done.run_id)).tools.values()
        assert entry.raw_result is not None and entry.raw_result.content == shown["content"]
        (event,) = [
            e for e in await backend.read_events(done.run_id, 0) if e.type is RunEventType.TOOL_RESULT
        ]
        assert _content(event.data) == shown["content"]


async def test_a_message_over_the_stored_cap_is_refused_before_anything_is_stored(
    target: BackendTarget,
) -> None:
    provider = ScriptedProvider(["Never."])
    async with (
        target.open() as backend,
        AgentRuntime(capped_agent("", provider, 1_000), backend=backend) as rt,
    ):
        with pytest.raises(ConfigurationError, match=r"1,001 characters, over the 1,000 a run stores"):
            await rt.run("x" * 1_001)
        assert provider.requests == []
        assert await backend.recent_sessions(10) == []
        assert (await rt.run("x" * 1_000)).ok  # the limit itself is allowed


ANSWER = "".join(f"part {i:03d} of the answer. " for i in range(50))[:960]


async def answer_copies(target: BackendTarget, run_id: str, text: str) -> dict[str, int]:
    """How many whole copies of ``text`` each table holds for the run (streamed pieces, being
    pieces, are none)."""
    columns = {
        "runs": "SELECT output FROM runs WHERE id = $1",
        "events": "SELECT data::text FROM events WHERE run_id = $1",
        "messages": "SELECT body::text FROM messages WHERE run_id = $1",
    }
    if target.kind == "sqlite":
        columns = {table: sql.replace("::text", "") for table, sql in columns.items()}
    return {
        table: sum(value.count(text) for value in await _rows(target, sql, run_id))
        for table, sql in columns.items()
    }


async def test_an_answer_is_stored_in_the_conversation_and_the_run_row_and_read_whole(
    target: BackendTarget,
) -> None:
    """A 960-character answer streamed in 16-character pieces used to be stored whole four
    times (the assistant message, the run's output, the text_complete and run_result
    events): the events now refer to the message and the run row, and every reader (the
    result, the run's record, the events, an archive restored) gets the same answer back."""
    provider = ScriptedProvider([ANSWER], chunk_size=16)
    agent = Agent(config=AgentConfig(system_prompt="You explain."), provider=provider)
    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        handle = await runtime.submit("Explain.")
        result = await handle.result()
        live = [(e.type, e.data) async for e in handle.events()]
        run_id, session_id = handle.run_id, handle.session_id
    assert result.output == ANSWER
    assert await answer_copies(target, run_id, ANSWER) == {"runs": 1, "events": 0, "messages": 1}
    async with target.open() as backend:
        stored = [(e.type, e.data) for e in await backend.read_events(run_id, 0)]
        assert stored == live
        (text,) = [data for kind, data in stored if kind is RunEventType.TEXT_COMPLETE]
        (final,) = [data for kind, data in stored if kind is RunEventType.RUN_RESULT]
        assert text == ANSWER and final.output == ANSWER and final == result
        record = await backend.get_run(run_id)
        assert record is not None and record.result["output"] == ANSWER
        (archived,) = await backend.export_sessions([session_id])
        assert await backend.delete_session(session_id)
        assert await backend.import_session(parse_record(json.dumps(archived), "the record"))
        assert [(e.type, e.data) for e in await backend.read_events(run_id, 0)] == live


async def test_a_short_answers_events_stay_inline(target: BackendTarget) -> None:
    """A reference would save little on a short answer (``ANSWER_REF`` characters or fewer)."""
    provider = ScriptedProvider(["Short."])
    agent = Agent(provider=provider)
    async with target.open() as backend, AgentRuntime(agent, backend=backend) as runtime:
        done = await runtime.run("Say little.")
    stored = await _rows(
        target,
        "SELECT data::text FROM events WHERE run_id = $1".replace(
            "::text", "" if target.kind == "sqlite" else "::text"
        ),
        done.run_id,
    )
    assert not any("content_ref" in data for data in stored)


async def test_an_answer_reference_to_the_wrong_message_is_corrupt_not_misread(target: BackendTarget) -> None:
    """A text_complete reference that names another message of the run (damaged, or written
    by something else) is refused as corrupt rather than read as that message's text."""
    first, last = "I will look that up for you. " * 4, ANSWER
    replies: list[ProviderResponse | str] = [
        ProviderResponse(text=first, tool_calls=[ToolCall("c", "dump", {})]),
        last,
    ]
    async with (
        target.open() as backend,
        AgentRuntime(dumping_agent("dumped", ScriptedProvider(replies)), backend=backend) as runtime,
    ):
        done = await runtime.run("Look it up.")
        texts = [
            e.data for e in await backend.read_events(done.run_id, 0) if e.type is RunEventType.TEXT_COMPLETE
        ]
        assert texts == [first, last]
    stored = await _rows(
        target, _text(target, "SELECT data::text FROM events WHERE run_id = $1"), done.run_id
    )
    refs = [json.loads(data) for data in stored if '"content_ref":"message"' in data]
    assert len(refs) == 2
    wrong = json.dumps({**refs[1], "seq": refs[0]["seq"]}, separators=(",", ":"))
    like = "'%" + f'"seq":{refs[1]["seq"]},' + "%'"
    await _execute(
        target,
        _text(target, f"UPDATE events SET data = {{p1}} WHERE run_id = {{p2}} AND data::text LIKE {like}"),
        wrong,
        done.run_id,
    )
    async with target.open() as backend:
        with pytest.raises(CorruptStateError, match="not an answer of this run"):
            await backend.read_events(done.run_id, 0)


def _text(target: BackendTarget, sql: str) -> str:
    return sql.replace("::text", "") if target.kind == "sqlite" else sql
