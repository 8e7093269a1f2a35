"""Limits.max_stored_chars: what a run keeps of a payload too large to store whole."""

from __future__ import annotations

import pytest

from harnessx import AgentConfig, ConfigurationError, Limits
from harnessx._large_results import CAPPED_MARK, cap_stored


def test_a_text_within_the_limit_is_kept_as_it_is() -> None:
    assert cap_stored("x" * 500, 500) == "x" * 500


def test_a_longer_text_is_cut_within_the_limit_and_says_so() -> None:
    capped = cap_stored("abc" * 1_000, 1_000)
    assert len(capped) <= 1_000
    head, _, notice = capped.partition("\n\n")
    assert ("abc" * 1_000).startswith(head) and notice.startswith(CAPPED_MARK)
    assert f"{len(head):,} of 3,000 characters" in notice and "Limits.max_stored_chars" in notice
    assert cap_stored(capped, 1_000) == capped  # the final result after the raw one: unchanged


def test_a_limit_too_small_for_the_notice_keeps_the_head_only() -> None:
    assert cap_stored("y" * 100, 10) == "y" * 10


def test_the_limit_is_checked_and_left_out_of_snapshots_at_its_default() -> None:
    with pytest.raises(ConfigurationError, match="max_stored_chars"):
        Limits(max_stored_chars=0)
    assert "max_stored_chars" not in AgentConfig().to_dict()["limits"]  # the original reads it
    changed = AgentConfig(limits=Limits(max_stored_chars=5_000)).to_dict()
    assert changed["limits"]["max_stored_chars"] == 5_000
    assert AgentConfig.from_dict(changed).limits.max_stored_chars == 5_000
