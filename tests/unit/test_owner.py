"""The lease owner's stored form, ``<process>/<holder>``, built and read in one place."""

from __future__ import annotations

from harnessx.store._records import Owner


def test_an_owner_is_stored_as_process_slash_holder_and_read_back() -> None:
    owner = Owner("a1b2", "runtime-7")
    assert str(owner) == "a1b2/runtime-7"
    assert Owner.parse(str(owner)) == owner
    assert Owner.process_of("a1b2/runtime-7") == "a1b2"


def test_a_holder_may_contain_slashes_and_a_process_alone_has_none() -> None:
    assert Owner.parse("p/worker/3") == Owner("p", "worker/3")
    assert Owner.parse("p") == Owner("p", "")
    assert Owner.process_of("p") == "p"


def test_the_range_of_a_process_holds_exactly_its_owners() -> None:
    low, high = Owner.range_of("ab")
    inside = [str(Owner("ab", holder)) for holder in ("", "x", "~~~", "z/9")]
    outside = ["ab", "ab0/x", "aa/x", "abc/x", "b/x", "ab.x"]
    assert all(low <= text < high for text in inside)
    assert not any(low <= text < high for text in outside)
