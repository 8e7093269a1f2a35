"""RunResult predicates, raise_for_status, and serialisation."""

from __future__ import annotations

import pytest

from harnessx import (
    PendingTool,
    RunAwaitingInput,
    RunCancelled,
    RunError,
    RunFailed,
    RunLimitReached,
    RunPaused,
    RunRefused,
    RunResult,
    RunStatus,
    RunTruncated,
    TokenUsage,
    ToolCall,
)


def result(status: str, stop_reason: str = "", **kwargs: object) -> RunResult:
    return RunResult("s", "r", status=RunStatus(status), stop_reason=stop_reason, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "stop", "predicates"),
    [
        ("completed", "end_turn", {"ok"}),
        ("completed", "stop_sequence", {"ok"}),
        ("completed", "max_tokens", {"truncated"}),
        ("completed", "max_iterations", {"limited"}),
        ("completed", "refusal", {"refused"}),
        ("completed", "safety", {"refused"}),
        ("failed", "error", {"failed"}),
        ("awaiting_input", "awaiting_input", {"needs_input"}),
        ("cancelled", "cancelled", set()),
        ("paused", "paused", set()),
    ],
)
def test_predicates(status: str, stop: str, predicates: set[str]) -> None:
    r = result(status, stop)
    for name in ("ok", "failed", "needs_input", "truncated", "limited", "refused"):
        assert getattr(r, name) is (name in predicates), name


@pytest.mark.parametrize(
    ("status", "stop", "error"),
    [
        ("completed", "max_tokens", RunTruncated),
        ("completed", "max_iterations", RunLimitReached),
        ("completed", "refusal", RunRefused),
        ("completed", "safety", RunRefused),
        ("failed", "error", RunFailed),
        ("awaiting_input", "awaiting_input", RunAwaitingInput),
        ("cancelled", "cancelled", RunCancelled),
        ("paused", "paused", RunPaused),
    ],
)
def test_raise_for_status(status: str, stop: str, error: type[RunError]) -> None:
    r = result(status, stop, error={"type": "X", "message": "boom"} if status == "failed" else None)
    with pytest.raises(error) as caught:
        r.raise_for_status()
    assert caught.value.result is r
    assert isinstance(caught.value, RunError)
    assert r.run_id in str(caught.value)


def test_ok_result_is_returned() -> None:
    r = result("completed", "end_turn")
    assert r.raise_for_status() is r


def test_round_trip() -> None:
    r = RunResult(
        "s",
        "r",
        output="hi",
        status=RunStatus.AWAITING_INPUT,
        stop_reason="awaiting_input",
        usage=TokenUsage(3, 4),
        pending=[PendingTool("r:0:c", ToolCall("c", "t", {"a": 1}), "uncertain", attempt=1, policy="manual")],
        usage_incomplete=True,
    )
    again = RunResult.from_dict(r.to_dict())
    assert again == r
    assert again.pending[0].call.input == {"a": 1}
