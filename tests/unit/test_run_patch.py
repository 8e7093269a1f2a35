"""The typed run patch a delta carries, and the row a checkpoint writes from it."""

from __future__ import annotations

import json

from harnessx import RunStatus
from harnessx._state import UNCHANGED, Delta, Phase, RunPatch, RunState
from harnessx.providers._base import TokenUsage
from harnessx.store._codec import run_values


def a_failed_run() -> RunState:
    return RunState(
        "s",
        "r",
        status=RunStatus.FAILED,
        phase=Phase.MODEL_CALL,
        iteration=2,
        usage=TokenUsage(input_tokens=5),
        output="partial",
        stop_reason="",
        error={"type": "RuntimeError", "message": "boom"},
    )


def test_a_patch_changes_only_what_it_names() -> None:
    state = a_failed_run()
    state.apply(Delta(Phase.PREPARE_MODEL_CALL, run=RunPatch(iteration=3)))
    assert state.iteration == 3 and state.phase is Phase.PREPARE_MODEL_CALL
    assert state.status is RunStatus.FAILED and state.output == "partial"
    assert state.error == {"type": "RuntimeError", "message": "boom"}


def test_clearing_the_error_is_a_change_leaving_it_is_not() -> None:
    # A reopened run's error becomes None, which is why "unchanged" is not None.
    reopened = a_failed_run()
    reopened.apply(Delta(Phase.MODEL_CALL, run=RunPatch(status=RunStatus.RUNNING, error=None)))
    assert reopened.status is RunStatus.RUNNING and reopened.error is None
    kept = a_failed_run()
    kept.apply(Delta(Phase.MODEL_CALL, run=RunPatch(status=RunStatus.RUNNING)))
    assert kept.error == {"type": "RuntimeError", "message": "boom"}


def test_patches_merge_with_the_later_one_winning() -> None:
    first = RunPatch(status=RunStatus.FAILED, error={"type": "E", "message": "m"}, usage_incomplete=True)
    second = RunPatch(status=RunStatus.RUNNING, stop_reason="")
    both = first.then(second)
    assert both == RunPatch(
        status=RunStatus.RUNNING, stop_reason="", error={"type": "E", "message": "m"}, usage_incomplete=True
    )
    assert first.then(RunPatch(error=None)).error is None
    assert RunPatch().empty and not RunPatch(iteration=0).empty and both.iteration is UNCHANGED


def test_a_checkpoint_writes_the_run_with_the_patch_applied() -> None:
    state = a_failed_run()
    delta = Delta(Phase.PREPARE_MODEL_CALL, run=RunPatch(status=RunStatus.RUNNING, error=None, output=""))
    status, phase, iteration, usage, output, stop_reason, error, incomplete = run_values(state, delta)
    assert (status, phase, iteration, output, stop_reason, error, incomplete) == (
        "running",
        "prepare_model_call",
        2,
        "",
        "",
        None,
        False,
    )
    assert json.loads(usage)["input_tokens"] == 5
    # Nothing changed but the phase: the stored fields are the state's.
    unchanged = run_values(state, Delta(Phase.RAW_RESULT))
    assert unchanged[0] == "failed" and unchanged[1] == "raw_result"
    assert json.loads(unchanged[6]) == {"type": "RuntimeError", "message": "boom"}
