"""The Temporal binding's surface without a server: lazy imports, the original's shapes,
clear errors for bad arguments, and docs/temporal.md in step with the metrics."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import harnessx
from harnessx import ConfigurationError

DOC = Path(__file__).resolve().parents[2] / "docs" / "temporal.md"


def test_importing_harnessx_does_not_import_the_sdk() -> None:
    code = "import sys, harnessx; print('temporalio' in sys.modules, 'redis' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]


def test_the_original_names_and_shapes() -> None:
    from harnessx.temporal import DEFAULT_TASK_QUEUE, RedisEvents, TemporalBackend

    assert harnessx.TemporalBackend is TemporalBackend and harnessx.RedisEvents is RedisEvents
    # The original's module paths for them.
    from harnessx.backends.temporal import RedisEvents as from_backends
    from harnessx.durable import TemporalBackend as from_durable

    assert from_backends is RedisEvents and from_durable is TemporalBackend
    assert TemporalBackend.remote is True and DEFAULT_TASK_QUEUE == "harness-x-v1"
    events = RedisEvents("redis://:secret@127.0.0.1:6379/0")
    assert "secret" not in repr(events)
    with pytest.raises(ConfigurationError, match="RedisEvents needs a URL"):
        RedisEvents()


def test_events_are_required() -> None:
    from harnessx.temporal import TemporalBackend

    with pytest.raises(ConfigurationError, match="events=RedisEvents"):
        TemporalBackend(object(), events=None)  # type: ignore[arg-type]


def test_docs_list_the_temporal_workers_metrics() -> None:
    from harnessx.temporal import TemporalWorkerMetrics

    exported = set()
    for family in TemporalWorkerMetrics().registry.collect():
        exported.add(family.name + ("_total" if family.type == "counter" else ""))
    rows = re.findall(r"^\| (.+?) \|", DOC.read_text(encoding="utf-8"), re.MULTILINE)
    listed = {name for row in rows for name in re.findall(r"`(harnessx_[a-z_]+)", row)}
    assert listed == exported
