"""The compatibility probes that drive durable runs, on the Temporal binding (issue 18).

Each probe here runs twice under this harnessx: on SQLite, as the differential tests run it
against harnessx 0.9.1 (``tests/compat/test_differential.py``), and on Temporal (a real
``temporal server start-dev``), where the runtime is built by reference and the probe's own
process is the worker (``tests/compat/probes/_durable.py``). What they observe must be the
same except where ``TEMPORAL_DIFFERS`` says why; docs/temporal.md lists the same. So a
Temporal run observes what a 0.9.1 run on SQLite does, but for the differences the
differential tests accept and these.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from probe_support import flatten, observe
from temporal_support import TemporalSetup

DOC = Path(__file__).resolve().parents[2] / "docs" / "temporal.md"

# Probes whose runs are all durable and built from an agent factory.
PROBES = ("durable_events", "approvals")

# probe:path -> why Temporal observes otherwise. (A path as in test_differential.KNOWN.)
TEMPORAL_DIFFERS: dict[str, str] = {}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("probe", PROBES)
def test_probe_observes_on_temporal_what_it_does_on_sqlite(
    probe: str, setup: TemporalSetup, tmp_path: Path
) -> None:
    (tmp_path / "sqlite").mkdir()
    (tmp_path / "temporal").mkdir()
    on_sqlite = flatten(observe(sys.executable, probe, tmp_path / "sqlite"))
    where = {"target": setup.target, "redis": setup.redis_url, "task_queue": setup.task_queue}
    env = {"HARNESSX_PROBE_TEMPORAL": json.dumps(where)}
    on_temporal = flatten(observe(sys.executable, probe, tmp_path / "temporal", env))
    missing = object()
    unexpected = [
        f"{path}:\n  SQLite:   {on_sqlite.get(path, '<missing>')!r}"
        f"\n  Temporal: {on_temporal.get(path, '<missing>')!r}"
        for path in sorted(set(on_sqlite) | set(on_temporal))
        if on_sqlite.get(path, missing) != on_temporal.get(path, missing)
        and f"{probe}:{path}" not in TEMPORAL_DIFFERS
    ]
    assert not unexpected, "observations differ:\n" + "\n".join(unexpected)
    stale = [
        key
        for key in TEMPORAL_DIFFERS
        if key.startswith(f"{probe}:")
        and on_sqlite.get(key.split(":", 1)[1], missing) == on_temporal.get(key.split(":", 1)[1], missing)
    ]
    assert not stale, (
        f"these differences are gone; remove them from TEMPORAL_DIFFERS and docs/temporal.md: {stale}"
    )


def test_every_temporal_difference_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert not [key for key in TEMPORAL_DIFFERS if f"`{key}`" not in text]
