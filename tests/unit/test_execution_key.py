"""Execution keys: built and read in one place, in 0.9.1's form (iteration from 1)."""

from __future__ import annotations

import pytest

from harnessx._state import ExecutionKey, execution_key


def test_a_key_counts_its_iteration_from_one() -> None:
    key = ExecutionKey("run-1", 0, "call_a")
    assert str(key) == "run-1:1:call_a" == execution_key("run-1", 0, "call_a")
    assert key.legacy == "run-1:0:call_a"
    assert key.names("run-1:1:call_a") and key.names("run-1:0:call_a") and not key.names("run-1:2:call_a")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("run-1:1:call_a", ExecutionKey("run-1", 0, "call_a")),
        ("run-1:12:call:with:colons", ExecutionKey("run-1", 11, "call:with:colons")),
        ("run-1:0:call_a", None),  # the iteration counts from 1
        ("run-1:x:call_a", None),
        ("run-1", None),
        (":1:call_a", None),
    ],
)
def test_parsing_reads_the_form_it_builds(text: str, parsed: ExecutionKey | None) -> None:
    assert ExecutionKey.parse(text) == parsed
    if parsed is not None:
        assert str(parsed) == text


def test_the_run_of_any_key_is_the_text_before_its_first_colon() -> None:
    assert ExecutionKey.run_of("run-1:1:call_a") == "run-1"
    assert ExecutionKey.run_of("run-1:0:call_a") == "run-1"  # a legacy key
    assert ExecutionKey.run_of("no-colon") == "no-colon"
