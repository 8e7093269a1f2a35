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
        ("completed", "pause_turn", set()),
        ("failed", "", {"failed"}),
        ("awaiting_input", "", {"needs_input"}),
        ("cancelled", "", set()),
        ("paused", "", set()),
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
        ("failed", "", RunFailed),
        ("awaiting_input", "", RunAwaitingInput),
        ("cancelled", "", RunCancelled),
        ("paused", "", RunPaused),
    ],
)
def test_raise_for_status(status: str, stop: str, error: type[RunError]) -> None:
    r = result(status, stop, error={"type": "X", "message": "boom"} if status == "failed" else None)
    with pytest.raises(error) as caught:
        r.raise_for_status()
    assert caught.value.result is r
    assert isinstance(caught.value, RunError)
    if status == "failed":
        # As in harnessx 0.9.1: the failure itself is the message, and RunFailed.error.
        assert str(caught.value) == "X: boom"
        assert isinstance(caught.value, RunFailed) and caught.value.error == {"type": "X", "message": "boom"}
    else:
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
        stop_reason="",
        usage=TokenUsage(3, 4),
        pending=[PendingTool("r:1:c", ToolCall("c", "t", {"a": 1}), "uncertain", attempt=1, policy="manual")],
        usage_incomplete=True,
    )
    again = RunResult.from_dict(r.to_dict())
    assert again == r
    assert again.pending[0].call.input == {"a": 1}


def test_shapes_of_harnessx_0_9_1() -> None:
    """Field names, dict keys and str() as harnessx 0.9.1 has them."""
    usage = TokenUsage(1, 2, 3, 4, 5)
    assert usage.to_dict() == {
        "input_tokens": 1,
        "output_tokens": 2,
        "cache_creation_input_tokens": 3,
        "cache_read_input_tokens": 4,
        "thinking_tokens": 5,
    }
    pending = PendingTool("r:1:c", ToolCall("c", "t", {}), "approval", concurrent=True, timeout_seconds=25.0)
    assert pending.to_dict() == {
        "call": {"id": "c", "name": "t", "input": {}},
        "status": "approval",
        "attempt": 0,
        "execution_key": "r:1:c",
        "policy": "manual",
        "concurrent": True,
        "timeout": 25.0,
    }
    assert PendingTool.from_dict(pending.to_dict()) == pending
    assert str(RunStatus.COMPLETED) == "RunStatus.COMPLETED" and RunStatus.COMPLETED == "completed"


def test_results_stored_before_0_2_still_read() -> None:
    stored = {
        "session_id": "s",
        "run_id": "r",
        "status": "awaiting_input",
        "stop_reason": "awaiting_input",
        "usage": {"input_tokens": 3, "output_tokens": 4, "cache_read_tokens": 2, "cache_write_tokens": 1},
        "error": None,
        "pending": [
            {
                "execution_key": "r:0:c",
                "call": {"id": "c", "name": "t", "input": {}},
                "status": "uncertain",
                "attempt": 1,
                "policy": "manual",
                "reason": "dispatched before a crash; no result was committed",
            }
        ],
    }
    result = RunResult.from_dict(stored)
    assert result.usage == TokenUsage(3, 4, cache_creation_input_tokens=1, cache_read_input_tokens=2)
    assert result.pending[0].status == "uncertain" and result.pending[0].retry is None
