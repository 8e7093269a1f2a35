"""Differential tests: each probe in ``probes/`` runs under harnessx 0.9.1 and under this
project, and what they observe must be the same.

A probe is a small program written against the API both packages share; it prints its
observations as JSON (event types and payload types, return types, exception classes,
stored results), with ids masked. The original runs from a second interpreter:
``$HARNESSX_ORIGINAL_PYTHON``, else ``.venv-original/bin/python`` (``bash .ci/run`` creates
it with ``pip install 'harnessx==0.9.1'``). Without it these tests are skipped, or fail when
``CI=true`` or ``HARNESSX_REQUIRE_ORIGINAL=1``.

Where this project differs on purpose, or has not caught up yet, the difference is listed
in ``KNOWN`` with its reason, and docs/compatibility.md names it: the test checks that a
listed difference is still there (remove the entry when it goes) and that no other is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from probe_support import PROBES, clean_env, flatten, observe

from harnessx.testing import dsn_with_database, quote_ident, run_psql

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "compatibility.md"

# probe:path -> why this project differs there. A path names a value in the probe's JSON
# output (dict keys joined by '.', list items as [i]).
KNOWN: dict[str, str] = {
    "events_in_memory:cursors": "extension: a run in memory numbers its events too",
    "events_in_memory:system": "deliberate: the planning guidance says the same in this project's words",
    "durable_events:checkpoint_phases": (
        "deliberate: no checkpoint before each model call (0.9.1's 'model' phase), one commit less per call"
    ),
    "example_recorder:record_count": "deliberate: one checkpoint record per commit (0.9.1: one per phase)",
    "example_recorder:seqs_of_model_and_tool_records": "follows from example_recorder:record_count",
    "public_checks:binding.openai_as_anthropic": (
        "deliberate: an injected built-in provider is not refused for the config's provider name"
    ),
    "public_checks:binding.openai_without_config": "follows from public_checks:binding.openai_as_anthropic",
    "large_results:where_is_a_file": (
        "deliberate: a large result is kept whole on its tool call in the store, not in a temporary file"
    ),
    "large_results:small_limit.shown": (
        "deliberate: under a limit of 3,600 a preview is shortened to stay near the limit (0.9.1 shows "
        "3,000 characters whatever the limit)"
    ),
    "large_results:freed_by_spills": (
        "deliberate: a spill counts what it takes out of the conversation (0.9.1 counts a trimmed list's "
        "whole result, and the file path of its notices)"
    ),
}


def _required() -> bool:
    return (
        os.environ.get("CI", "").lower() in ("true", "1")
        or os.environ.get("HARNESSX_REQUIRE_ORIGINAL") == "1"
    )


@pytest.fixture(scope="session")
def original_python() -> str:
    candidate = os.environ.get("HARNESSX_ORIGINAL_PYTHON") or str(ROOT / ".venv-original" / "bin" / "python")
    problem = None
    if not Path(candidate).exists():
        problem = f"no interpreter at {candidate}"
    else:
        probe = subprocess.run(
            [candidate, "-c", "import harnessx, importlib.metadata as m; print(m.version('harnessx'))"],
            capture_output=True,
            text=True,
            cwd="/",
            env=clean_env(),
            timeout=120,
        )
        if probe.returncode != 0 or probe.stdout.strip() != "0.9.1":
            problem = (
                f"{candidate} does not import harnessx 0.9.1 ({probe.stdout.strip() or probe.stderr[-300:]})"
            )
    if problem is None:
        return candidate
    advice = (
        "create it with: python3 -m venv .venv-original && .venv-original/bin/pip install 'harnessx==0.9.1', "
        "or set HARNESSX_ORIGINAL_PYTHON"
    )
    if _required():
        pytest.fail(
            f"harnessx 0.9.1 is required for the differential tests: {problem}; {advice}", pytrace=False
        )
    pytest.skip(f"harnessx 0.9.1 unavailable: {problem}; {advice}")


PROBE_NAMES = sorted(p.stem for p in PROBES.glob("*.py") if not p.stem.startswith("_"))


@pytest.mark.timeout(600)  # two interpreters, and some probes start processes of their own
@pytest.mark.parametrize("probe", PROBE_NAMES)
def test_probe_observes_the_same_under_both(probe: str, original_python: str, tmp_path: Path) -> None:
    (tmp_path / "original").mkdir()
    (tmp_path / "ours").mkdir()
    theirs = flatten(observe(original_python, probe, tmp_path / "original"))
    ours = flatten(observe(sys.executable, probe, tmp_path / "ours"))
    compare(probe, theirs, ours)


@pytest.mark.timeout(600)
def test_crash_recovery_example_observes_the_same_on_postgresql(
    original_python: str, postgres_dsn: str, tmp_path: Path
) -> None:
    """``example_crash_recovery`` on PostgreSQL: each package in a fresh database of its own
    (both use the schema harness_x)."""
    observed = []
    for name, python in (("original", original_python), ("ours", sys.executable)):
        database = f"probe_{name}_{uuid.uuid4().hex[:8]}"
        run_psql(postgres_dsn, f"CREATE DATABASE {quote_ident(database)} TEMPLATE template0")
        (tmp_path / name).mkdir()
        env = {"HARNESSX_PROBE_DSN": dsn_with_database(postgres_dsn, database)}
        observed.append(flatten(observe(python, "example_crash_recovery", tmp_path / name, env)))
    compare("example_crash_recovery@postgres", *observed)


def compare(probe: str, theirs: dict[str, Any], ours: dict[str, Any]) -> None:
    """The observations must be the same but for the differences ``KNOWN`` lists for
    ``probe``, and each of those must still be there."""
    missing = object()
    unexpected = []
    for path in sorted(set(theirs) | set(ours)):
        same = theirs.get(path, missing) == ours.get(path, missing)
        known = f"{probe}:{path}" in KNOWN
        if not same and not known:
            before, after = theirs.get(path, "<missing>"), ours.get(path, "<missing>")
            unexpected.append(f"{path}:\n  0.9.1: {before!r}\n  ours:  {after!r}")
    assert not unexpected, "observations differ:\n" + "\n".join(unexpected)
    stale = [
        key
        for key in KNOWN
        if key.startswith(f"{probe}:")
        and theirs.get(key.split(":", 1)[1], missing) == ours.get(key.split(":", 1)[1], missing)
    ]
    assert not stale, (
        f"these listed differences are gone; remove them from KNOWN and docs/compatibility.md: {stale}"
    )


def test_every_known_difference_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    undocumented = [key for key in KNOWN if f"`{key}`" not in text]
    assert not undocumented, f"docs/compatibility.md does not name: {undocumented}"
