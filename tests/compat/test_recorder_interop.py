"""Incident bundles go both ways between this harnessx and harnessx 0.9.1.

The same probe (``recorder_probe.py``) runs under both packages: each records and exports a
run, then verifies the other's bundles. Needs a Python with harnessx 0.9.1 installed, named by
``HARNESSX_ORIGINAL_PYTHON`` (``.ci/run`` installs one); without it the test is skipped with
that reason, or fails when ``CI`` is true or ``HARNESSX_REQUIRE_ORIGINAL=1``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.process

PROBE = Path(__file__).with_name("recorder_probe.py")


@pytest.fixture(scope="module")
def original_python() -> str:
    python = os.environ.get("HARNESSX_ORIGINAL_PYTHON", "")
    problem = None
    if not python:
        problem = "HARNESSX_ORIGINAL_PYTHON is not set (a Python with 'pip install harnessx==0.9.1')"
    else:
        found = subprocess.run(
            [python, "-I", "-c", "import importlib.metadata as m; print(m.version('harnessx'))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if found.stdout.strip() != "0.9.1":
            problem = f"{python} has no harnessx 0.9.1 ({found.stdout.strip() or found.stderr.strip()})"
    if problem is not None:
        if (
            os.environ.get("CI", "").lower() in ("true", "1")
            or os.environ.get("HARNESSX_REQUIRE_ORIGINAL") == "1"
        ):
            pytest.fail(f"the original harnessx is required here: {problem}", pytrace=False)
        pytest.skip(problem)
    return python


def probe(python: str, folder: Path, *others: Path) -> dict[str, Any]:
    folder.mkdir()
    # Isolated (-I) and outside the project, so that each interpreter imports its own harnessx.
    done = subprocess.run(
        [python, "-I", str(PROBE), str(folder), *map(str, others)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=folder,
    )
    assert done.returncode == 0, done.stderr
    seen: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return seen


def test_bundles_of_each_package_verify_in_the_other(original_python: str, tmp_path: Path) -> None:
    theirs = probe(original_python, tmp_path / "original")
    ours = probe(
        sys.executable,
        tmp_path / "ours",
        tmp_path / "original/metadata.hx",
        tmp_path / "original/payloads.hx",
    )
    both = probe(original_python, tmp_path / "again", tmp_path / "ours/metadata.hx")
    # The same run journals the same model and tool boundaries, step by step, attempt by attempt.
    assert ours["boundaries"] == theirs["boundaries"]
    assert ours["output"] == theirs["output"] == "The balance is 1500."
    assert (
        ours["own"]
        == theirs["own"]
        == {
            "metadata.hx": {"valid": True, "complete": False, "issues": ["payloads_omitted_or_redacted"]},
            "payloads.hx": {"valid": True, "complete": True, "issues": []},
        }
    )
    original = tmp_path / "original"
    assert ours["others"] == {
        str(original / "metadata.hx"): theirs["own"]["metadata.hx"],
        str(original / "payloads.hx"): theirs["own"]["payloads.hx"],
    }
    assert both["others"] == {str(tmp_path / "ours/metadata.hx"): ours["own"]["metadata.hx"]}


def test_a_bundle_with_payloads_from_here_verifies_in_0_9_1(original_python: str, tmp_path: Path) -> None:
    ours = probe(sys.executable, tmp_path / "ours")
    theirs = probe(original_python, tmp_path / "original", tmp_path / "ours/payloads.hx")
    assert theirs["others"] == {str(tmp_path / "ours/payloads.hx"): ours["own"]["payloads.hx"]}
