"""Condensing on Temporal: a conversation that outgrows the model's window is condensed as on
SQLite, by the model activity (a summary call, counted before the call with
``Limits.max_context_tokens``, or after the provider refused a request as too long), and
the workflow commits the condensation before the reply or asks again. What a run does, the
hooks it fires and the conversation ``latest_run()`` shows are those of the same agent on
SQLite, and the history replays.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporal_agents import registry

from harnessx import AgentRef, AgentRuntime, RunResult, SQLiteBackend
from harnessx.temporal import TemporalBackend, replayer

pytestmark = pytest.mark.timeout(180)


def _noted(path: Path) -> list[dict[str, Any]]:
    noted = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    path.unlink(missing_ok=True)
    # Ids differ between the two sessions; a Temporal worker always streams the reply.
    return [{k: v for k, v in n.items() if k not in ("session_id", "run_id", "stream")} for n in noted]


async def _questions(runtime: AgentRuntime) -> list[RunResult]:
    return [await runtime.run(f"question {i}") for i in range(4)]


@pytest.mark.parametrize(
    ("agent", "hooks"),
    [
        ("condensing", [("context_condensed", {"messages_dropped": 3, "summarized": True})]),
        (
            "overflowing",
            [
                ("recovery", {"reason": "context_overflow", "attempt": 1}),
                ("context_condensed", {"messages_dropped": 1, "summarized": True}),
            ],
        ),
    ],
)
async def test_a_conversation_that_outgrows_the_window_is_condensed_as_on_sqlite(
    backend: TemporalBackend,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    agent: str,
    hooks: list[tuple[str, dict[str, Any]]],
) -> None:
    noted = tmp_path / "hooks.jsonl"
    monkeypatch.setenv("HX_HOOKS", str(noted))
    on_temporal = await _questions(AgentRuntime(AgentRef(agent, "v1"), backend=backend))
    temporal_hooks = _noted(noted)
    remote = await backend.latest_run(on_temporal[-1].session_id)
    store = SQLiteBackend(tmp_path / "runtime.sqlite3")
    async with store, AgentRuntime(registry.create(AgentRef(agent, "v1")), backend=store) as local:
        in_sqlite = await _questions(local)
        sqlite_hooks = _noted(noted)
        stored = await store.latest_run(in_sqlite[-1].session_id)
    assert remote is not None and stored is not None
    assert all(r.ok for r in on_temporal)
    assert [r.output for r in on_temporal] == [r.output for r in in_sqlite]
    assert [r.usage for r in on_temporal] == [r.usage for r in in_sqlite]  # the summary's included
    assert temporal_hooks == sqlite_hooks
    condensing = [n for n in temporal_hooks if n["event"] in ("recovery", "context_condensed")]
    assert [
        (n["event"], {k: n[k] for k in expected}) for n, (_, expected) in zip(condensing, hooks, strict=True)
    ] == hooks
    # The conversation as the model was shown it next, condensed, on both.
    assert remote["messages"] == stored["messages"]
    assert str(remote["messages"][0]["content"]).startswith("[Earlier conversation, condensed]\nSUMMARY:")
    history = await backend.handle(on_temporal[-1].session_id).fetch_history()
    replay = await replayer(registry, backend.client.data_converter).replay_workflow(
        history, raise_on_replay_failure=True
    )
    assert replay.replay_failure is None
