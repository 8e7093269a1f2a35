"""Compacting a finished run's streamed text, on both backends.

A run that streams stores an event per piece; once it has finished, each stretch of pieces is
stored as one row. A reader resuming behind any cursor of the run as it was stored (any a
client may hold) reads exactly the text it had not seen, once, and every other event as
before, in pages of any size. A run still streaming is never compacted, and compaction
removes rows: fewer, smaller events.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import AsyncIterator
from typing import Any

from durable_support import BackendTarget
from lifecycle_support import age, sql

from harnessx import (
    Agent,
    AgentConfig,
    AgentRuntime,
    ProviderError,
    ProviderResponse,
    RetryPolicy,
    ScriptedProvider,
    ScriptedRequest,
    ToolCall,
    ToolCallDelta,
)
from harnessx._compaction import compact_pass
from harnessx._retention import RetentionPolicy, prune_pass
from harnessx.providers._base import StreamChunk

STREAMED = ("text_delta", "thinking_delta", "tool_call_delta")
ANSWER = "".join(f"Paragraph {i}: the region grew {i * 3} % this quarter. " for i in range(12))


class Pieces(ScriptedProvider):
    """Streams thinking and text in small pieces (the scripted provider sends thinking whole).
    ``fail_at``: the first call of each turn fails (retryably) after that many text pieces, so
    the run stores pieces of an attempt that an ``attempt_reset`` voids. ``gate``: on a turn
    that is not the first, after the 5th piece wait for it (a run still streaming)."""

    def __init__(self, script: Any, *, fail_at: int | None = None, gate: asyncio.Event | None = None) -> None:
        super().__init__(script, chunk_size=7)
        self.fail_at = fail_at
        self.gate = gate
        self._failed: set[int] = set()

    async def stream(self, **kwargs: Any) -> AsyncIterator[StreamChunk]:
        kwargs.pop("cache", None)
        response = await self.create(**kwargs)
        turn = sum(1 for m in kwargs["messages"] if m.get("role") == "assistant")
        for start in range(0, len(response.thinking or ""), 5):
            yield StreamChunk("thinking_delta", (response.thinking or "")[start : start + 5])
        text = response.text
        for n, start in enumerate(range(0, len(text), self.chunk_size)):
            if self.fail_at == n and turn not in self._failed:
                self._failed.add(turn)
                raise ProviderError("overloaded, try again", retryable=True)
            if self.gate is not None and turn > 0 and n == 5:
                await self.gate.wait()
            elif self.gate is not None and turn > 0:
                await asyncio.sleep(0.06)  # each piece flushed as it comes (the committer's 50 ms)
            yield StreamChunk("text_delta", text[start : start + self.chunk_size])
        yield StreamChunk("response", response)


class CallPieces(Pieces):
    """Streams each tool call of a reply as the built-in providers do: a delta naming the call,
    then its arguments in pieces of 9 characters. ``fail_in_call``: the first call of the
    first turn fails (retryably) after that many pieces of arguments."""

    def __init__(self, script: Any, *, fail_in_call: int | None = None) -> None:
        super().__init__(script)
        self.fail_in_call = fail_in_call

    async def stream(self, **kwargs: Any) -> AsyncIterator[StreamChunk]:
        async for chunk in super().stream(**kwargs):
            if chunk.kind == "response":
                for call in chunk.data.tool_calls:
                    yield StreamChunk("tool_call_delta", ToolCallDelta(call.id, call.name))
                    arguments = json.dumps(call.input)
                    for n, start in enumerate(range(0, len(arguments), 9)):
                        if n == self.fail_in_call:
                            self.fail_in_call = None
                            raise ProviderError("overloaded, try again", retryable=True)
                        yield StreamChunk(
                            "tool_call_delta", ToolCallDelta(call.id, call.name, arguments[start : start + 9])
                        )
            yield chunk


NOTES = "Each region in its own table, with the quarter before beside it for comparison. " * 3
CALLS = {"call_0": {"region": "EMEA", "notes": NOTES}, "call_1": {"region": "APAC", "notes": NOTES.upper()}}


def report_calls(request: ScriptedRequest) -> ProviderResponse | str:
    if request.turn == 0:
        calls = [ToolCall(call_id, "figures", dict(arguments)) for call_id, arguments in CALLS.items()]
        return ProviderResponse(text="Both regions, then.", tool_calls=calls)
    return ProviderResponse(text=ANSWER)


def reply(request: ScriptedRequest) -> ProviderResponse | str:
    if request.turn == 0:
        return ProviderResponse(
            text="Let me look up the figures for every region first.",
            thinking="The user wants the report; the figures come from the tool.",
            tool_calls=[ToolCall("call_0", "figures", {})],
        )
    return ProviderResponse(text=ANSWER, thinking="Now write it up, region by region.")


def streaming_agent(**options: Any) -> Agent:
    agent = Agent(
        config=AgentConfig(system_prompt="You report.", retry=RetryPolicy(backoff_seconds=0.0, jitter=0.0)),
        provider=Pieces(reply, **options),
    )

    @agent.tools.register(replay_policy="safe")
    def figures() -> str:
        """The quarter's figures."""
        return "EMEA 3 %, APAC 5 %"

    return agent


async def streamed_run(store: Any, agent: Agent) -> str:
    async with AgentRuntime(agent, backend=store) as runtime:
        handle = await runtime.submit("Write the quarterly report.")  # streams (run() does not)
        result = await handle.result()
        assert result.ok, result
        return result.run_id


async def read(store: Any, run_id: str, after: int, page: int) -> list[Any]:
    """What a reader behind cursor ``after`` reads, in pages of ``page`` events: each streamed
    stretch as its text (merged, as a consumer shows it), every other event whole."""
    seen: list[Any] = []
    ids: set[str] = set()
    position = after
    while events := await store.read_events(run_id, position, page):
        for event in events:
            assert event.event_id not in ids, "an event read twice"
            ids.add(event.event_id)
            position = int(event.cursor)
            kind = event.type.value
            if kind in STREAMED:
                key: tuple[Any, ...] = (kind, event.step_id, event.attempt_id)
                text = event.data
                if isinstance(event.data, ToolCallDelta):  # a call's pieces: its arguments
                    key, text = (*key, event.data.id, event.data.name), event.data.partial_json
                if seen and isinstance(seen[-1], list) and seen[-1][0] == key:
                    seen[-1][1] += text
                else:
                    seen.append([key, text])
            else:
                seen.append((kind, event.cursor, event.event_id, event.to_dict()["data"]))
    return seen


async def event_rows(store: Any, run_id: str) -> int:
    ((count,),) = await sql(store, "SELECT count(*) FROM events WHERE run_id = {p}", run_id)
    return int(count)


async def test_every_cursor_reads_the_same_text_once_after_compaction(target: BackendTarget) -> None:
    async with target.open() as store:
        run_id = await streamed_run(store, streaming_agent(fail_at=4))
        last = (await store.get_run(run_id)).event_count
        kinds = [e.type.value for e in await store.read_events(run_id, 0, 1000)]
        # Thinking and text pieces of two calls, the first attempt of each voided by a reset.
        assert kinds.count("attempt_reset") == 2 and kinds.count("thinking_delta") > 10
        assert kinds.count("text_delta") > 60 and len(kinds) == last
        pages = (7, 500)  # a page may end inside a stretch of pieces, or hold them all
        before = {(c, p): await read(store, run_id, c, p) for c in range(last + 1) for p in pages}
        rows = await event_rows(store, run_id)

        report = await compact_pass(store, 0.0, batch=10)
        assert report.runs == 1 and report.rows > 70
        assert await event_rows(store, run_id) == rows - report.rows
        # The run counts what was removed: its rows are known without reading them.
        (counted,) = await sql(store, "SELECT event_count - compacted_rows FROM runs WHERE id = {p}", run_id)
        assert counted == (rows - report.rows,)
        # Each stretch is one row now: its pieces of thinking, of text before the reset and after.
        after = [e.type.value for e in await store.read_events(run_id, 0, 1000)]
        assert after.count("text_delta") == 4 and after.count("thinking_delta") == 4
        for cursor in range(last + 1):
            for page in pages:
                assert await read(store, run_id, cursor, page) == before[(cursor, page)], (cursor, page)
        # Done once: compacting again finds nothing waiting.
        assert (await compact_pass(store, 0.0, batch=10)).examined == 0


async def test_a_streamed_tool_call_is_compacted_per_call(target: BackendTarget) -> None:
    """A tool call's pieces become one delta holding all of its arguments, after the delta that
    starts the call (kept: it tells a consumer a call has begun); pieces of two calls, or of
    two attempts of one, stay apart. Every cursor still reads the same arguments once."""
    agent = Agent(
        config=AgentConfig(system_prompt="You report.", retry=RetryPolicy(backoff_seconds=0.0, jitter=0.0)),
        provider=CallPieces(report_calls, fail_in_call=5),
    )

    @agent.tools.register(replay_policy="safe")
    def figures(region: str, notes: str) -> str:
        """A region's figures."""
        return f"{region} 3 %"

    async with target.open() as store:
        run_id = await streamed_run(store, agent)
        last = (await store.get_run(run_id)).event_count
        stored = await store.read_events(run_id, 0, 1000)
        deltas = [e.data for e in stored if e.type.value == "tool_call_delta"]
        # The first attempt's 5 pieces of call_0, voided by a reset, then both calls whole.
        assert [e.type.value for e in stored].count("attempt_reset") == 1
        assert len(deltas) > 60
        pages = (7, 500)
        before = {(c, p): await read(store, run_id, c, p) for c in range(last + 1) for p in pages}
        rows = await event_rows(store, run_id)

        report = await compact_pass(store, 0.0, batch=10)
        assert report.runs == 1 and await event_rows(store, run_id) == rows - report.rows
        after = await store.read_events(run_id, 0, 1000)
        calls = [(e.attempt_id, e.data) for e in after if e.type.value == "tool_call_delta"]
        arguments = {call_id: json.dumps(value) for call_id, value in CALLS.items()}
        assert calls == [
            ("1", ToolCallDelta("call_0", "figures")),
            ("1", ToolCallDelta("call_0", "figures", arguments["call_0"][:45])),
            ("2", ToolCallDelta("call_0", "figures")),
            ("2", ToolCallDelta("call_0", "figures", arguments["call_0"])),
            ("2", ToolCallDelta("call_1", "figures")),
            ("2", ToolCallDelta("call_1", "figures", arguments["call_1"])),
        ]
        for cursor in range(last + 1):
            for page in pages:
                assert await read(store, run_id, cursor, page) == before[(cursor, page)], (cursor, page)


async def test_only_runs_finished_long_enough_ago_are_compacted(target: BackendTarget) -> None:
    async with target.open() as store:
        run_id = await streamed_run(store, streaming_agent())
        rows = await event_rows(store, run_id)
        assert (await compact_pass(store, 3600.0, batch=10)).examined == 0
        assert await event_rows(store, run_id) == rows
        assert (await compact_pass(store, 0.0, batch=10)).runs == 1
        assert await event_rows(store, run_id) < rows


async def test_a_run_still_streaming_is_never_compacted(target: BackendTarget) -> None:
    gate = asyncio.Event()
    async with target.open() as store:
        agent = streaming_agent(gate=gate)
        async with AgentRuntime(agent, backend=store) as runtime:
            handle = await runtime.submit("Write the quarterly report.")
            try:
                # The first turn's pieces are stored, the tool called; the answer streams, then waits.
                while await event_rows(store, handle.run_id) < 30:
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.2)
                assert (await store.get_run(handle.run_id)).status.value == "running"
                # As if it had finished once before (a failed run resumed): noted, and running again.
                await sql(
                    store,
                    "INSERT INTO compactable_runs (run_id, finished_at) VALUES ({p}, {p2})",
                    handle.run_id,
                    0.0 if target.kind == "sqlite" else dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
                )
                stored = await sql(
                    store, "SELECT seq, data FROM events WHERE run_id = {p} ORDER BY seq", handle.run_id
                )
                report = await compact_pass(store, 0.0, batch=10)
                assert report.examined == 1 and report.runs == 0 and report.rows == 0
                again = await sql(
                    store, "SELECT seq, data FROM events WHERE run_id = {p} ORDER BY seq", handle.run_id
                )
                # Untouched (the driver may have added a row since: a waiting notice).
                assert [tuple(r) for r in again][: len(stored)] == [tuple(r) for r in stored]
            finally:
                gate.set()  # the run goes on (a failed assertion must not leave it waiting)
            result = await handle.result()
            assert result.ok
        # Finished now, it is noted again and compacted.
        assert (await compact_pass(store, 0.0, batch=10)).runs == 1


async def test_a_pruned_or_erased_run_is_no_longer_waiting(target: BackendTarget) -> None:
    async with target.open() as store:
        run_id = await streamed_run(store, streaming_agent())
        session_id = (await store.get_run(run_id)).session_id
        await age(store, session_id, 40)
        assert (await prune_pass(store, RetentionPolicy(30 * 86400.0))).sessions == 1
        assert await sql(store, "SELECT run_id FROM compactable_runs") == []
        assert (await compact_pass(store, 0.0, batch=10)).examined == 0
