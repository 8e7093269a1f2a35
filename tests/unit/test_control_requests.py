"""Control requests (pause, cancel) as a stored value and as what a driven run does with one."""

from __future__ import annotations

import pytest

from harnessx._driver import RunControl
from harnessx.store._records import CONTROL_REQUESTS, control_request


@pytest.mark.parametrize("stored", [*CONTROL_REQUESTS, None, "", "explode", 1])
def test_a_stored_control_reads_back_as_a_request_or_none(stored: object) -> None:
    expected = stored if stored in CONTROL_REQUESTS else None
    assert control_request(stored) == expected


def test_each_request_reaches_the_run_control() -> None:
    paused, cancelled = RunControl(), RunControl()
    paused.request("pause")
    cancelled.request("cancel")
    assert paused.pause_requested and not paused.cancel_requested and paused.pause_reason == ""
    assert cancelled.cancel_requested and not cancelled.pause_requested
