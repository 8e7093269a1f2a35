"""Tool results longer than ``Limits.max_result_chars``: the text the model gets instead
(a preview with its guidance lines, or a list of records trimmed to fit) and what the
``read_tool_result`` calls that text names return.

Each case is one run: a tool returns the large text, the model then makes the reads the
case lists, and the probe records what the next requests carried; two more show a result
in a conversation's memory and then spill it (``spill_large_results``, what a run does when
the provider refuses a request as too long). Where the notice says the whole result is
(``Full output saved to: ...]``) differs on purpose (0.9.1 names a file; this project the
tool result, kept with the conversation): the text is recorded with it masked, and whether
it names a file apart.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from typing import Any

from _probe import emit

from harnessx import Agent, AgentConfig, Limits, PermissionLevel, ProviderResponse, ToolCall, ToolResult
from harnessx.memory import ConversationMemory
from harnessx.providers import LLMProvider

_WHERE = re.compile(r"Full output saved to: (.+?)\]")
# Whether each notice's "Full output saved to:" names a file, case by case.
WHERE_IS_A_FILE: list[bool] = []
# What each spill says it freed.
FREED: list[int] = []


class Script(LLMProvider):
    """Calls ``dump``, then each read in turn, then answers; keeps every request's last
    tool result."""

    def __init__(self, reads: list[dict[str, Any]]) -> None:
        self.replies = [
            ProviderResponse(tool_calls=[ToolCall("c1", "dump", {})], stop_reason="tool_use"),
            *(
                ProviderResponse(
                    tool_calls=[ToolCall(f"r{i}", "read_tool_result", a)], stop_reason="tool_use"
                )
                for i, a in enumerate(reads, 1)
            ),
            ProviderResponse(text="done"),
        ]
        self.seen: list[Any] = []

    async def create(self, **kwargs: Any) -> ProviderResponse:
        last = kwargs["messages"][-1]
        blocks = last["content"] if isinstance(last["content"], list) else []
        self.seen.extend(b["content"] for b in blocks if b.get("type") == "tool_result")
        return self.replies.pop(0)

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


async def case(content: str, limit: int, reads: list[dict[str, Any]]) -> dict[str, Any]:
    provider = Script(reads)
    agent = Agent(
        config=AgentConfig(model="m", system_prompt="", limits=Limits(max_result_chars=limit)),
        provider=provider,
    )

    @agent.tools.register(permission=PermissionLevel.ALLOW)
    def dump() -> str:
        return content

    result = await agent.run("go")
    shown, *answers = provider.seen
    observed = {"status": result.status.value, **_masked(shown), "reads": answers}
    await agent.aclose()
    return observed


def _masked(shown: str) -> dict[str, Any]:
    where = _WHERE.search(shown)
    WHERE_IS_A_FILE.append(bool(where and os.path.isfile(where.group(1))))
    return {"shown": _WHERE.sub("Full output saved to: <where>]", shown)}


async def spilled(content: str, limit: int) -> dict[str, Any]:
    """A result shown whole or trimmed, then spilled to make room (what a run does when the
    provider refuses a request as too long), on the conversation's memory."""
    memory = ConversationMemory(max_result_chars=limit)
    memory.add_user_message("go")
    memory.add_assistant_message([{"type": "tool_use", "id": "t1", "name": "dump", "input": {}}])
    memory.add_tool_results([ToolResult(tool_call_id="t1", content=content)])
    FREED.append(memory.spill_large_results())
    observed = {
        "freed_again": memory.spill_large_results(),
        **_masked(memory.get_messages()[-1]["content"][0]["content"]),
        "read": memory.read_evicted("t1", pattern="marker-6"),
    }
    await memory.aclose()
    return observed


def search_blob(records: int = 8, size: int = 6000, nav: str = "") -> str:
    filler = "filler text "
    return json.dumps(
        {
            "query": "US economy 2026",
            "answer": None,
            "images": [],
            "results": [
                {
                    "url": f"https://example.com/{i}",
                    "title": f"Source {i}",
                    "content": f"{nav}Opening of source {i}. " + filler * (size // 12) + f" marker-{i}",
                }
                for i in range(records)
            ],
        }
    )


async def main() -> None:
    rows = "\n".join(f"row {i}" for i in range(3000))
    line = "".join(f"[{i:05d}]" for i in range(5000))
    nav = "## What We Do ### GLOBAL BANKING & MARKETS ### ASSET & WEALTH MANAGEMENT ### "
    marker = {"result_id": "c1", "pattern": "marker-6"}
    start = {"result_id": "c1", "max_chars": 500}
    plain_records = json.dumps([{"n": i, "tags": ["a", "b"], "score": i / 7} for i in range(3000)])
    emit(
        {
            "many_lines": await case(
                rows,
                1_000,
                [
                    {"result_id": "c1", "offset": 20, "limit": 5},
                    {"result_id": "c1", "pattern": "row 2999"},
                    {"result_id": "c1", "pattern": "row 1"},
                    {"result_id": "c1", "pattern": "absent"},
                    {"result_id": "c1", "pattern": "(unbalanced"},
                ],
            ),
            "one_long_line": await case(
                line,
                12_000,
                [
                    {"result_id": "c1", "char_offset": 3000, "max_chars": 11_700},
                    {"result_id": "c1", "char_offset": 14_700, "max_chars": 50_000},
                    {"result_id": "c1", "pattern": "[04999]"},
                ],
            ),
            "small_limit": await case("\n".join("x" * 150 for _ in range(10)), 1_000, []),
            "records_by_record": await case(search_blob(), 3_500, [marker]),
            "records_trimmed_to_fit": await case(search_blob(), 30_000, []),
            "too_many_records_to_trim": await case(search_blob(records=200, size=600), 12_000, []),
            "records_behind_page_navigation": await case(search_blob(nav=nav + " "), 3_500, []),
            "records_without_text": await case(plain_records, 12_000, [start]),
            "trimmed_then_spilled": await spilled(search_blob(), 30_000),
            "whole_then_spilled": await spilled(search_blob(size=1000), 30_000),
            "where_is_a_file": WHERE_IS_A_FILE,
            "freed_by_spills": FREED,
        }
    )


asyncio.run(main())
