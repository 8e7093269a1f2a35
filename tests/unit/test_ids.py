"""Time-ordered ids: RFC 9562 version 7, strictly increasing within a process."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from harnessx import _ids
from harnessx._ids import uuid7, uuid7_time


def millis(value: str) -> int:
    return uuid.UUID(value).int >> 80


def test_an_id_is_a_version_7_uuid_in_the_usual_text_form() -> None:
    value = uuid7()
    parsed = uuid.UUID(value)
    assert len(value) == 36 and str(parsed) == value
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert abs(uuid7_time(value) - time.time()) < 5


def test_ids_made_in_one_millisecond_still_increase() -> None:
    made = [uuid7() for _ in range(20_000)]  # many per millisecond
    assert made == sorted(made) and len(set(made)) == len(made)
    # Text order is the numeric order, which is what an index on the column sorts by.
    assert [uuid.UUID(v).int for v in made] == sorted(uuid.UUID(v).int for v in made)


def test_ids_increase_when_the_clock_steps_back(monkeypatch: pytest.MonkeyPatch) -> None:
    before = uuid7()
    monkeypatch.setattr(_ids, "_clock", lambda: 1_000_000_000_000_000_000)  # 2001, long ago
    after = [uuid7() for _ in range(100)]
    assert [before, *after] == sorted([before, *after])
    assert millis(after[-1]) == millis(before)  # kept on the last millisecond seen


def test_a_full_counter_moves_on_to_the_next_millisecond(monkeypatch: pytest.MonkeyPatch) -> None:
    frozen = time.time_ns()
    monkeypatch.setattr(_ids, "_clock", lambda: frozen)
    first = uuid7()
    monkeypatch.setattr(_ids, "_counter", (1 << 74) - 1)
    second = uuid7()
    assert second > first and millis(second) == millis(first) + 1
    assert uuid.UUID(second).version == 7


def test_ids_from_many_threads_are_unique_and_each_thread_sees_them_increase() -> None:
    made: dict[int, list[str]] = {}

    def make(n: int) -> None:
        made[n] = [uuid7() for _ in range(2_000)]

    threads = [threading.Thread(target=make, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [v for values in made.values() for v in values]
    assert len(set(everything)) == len(everything)
    assert all(values == sorted(values) for values in made.values())


def test_later_ids_sort_after_earlier_ones_across_milliseconds() -> None:
    first = uuid7()
    deadline = uuid7_time(first) + 0.002
    while time.time() < deadline:
        pass
    assert uuid7() > first
