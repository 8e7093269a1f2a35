"""The distribution has a name of its own, and every install hint installs this project.

'harnessx' on the package index is another project (the original harnessx 0.9.1, whose
import name ours shares): a hint to `pip install harnessx` would install that instead.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# `pip install harnessx`, 'harnessx[postgres]', "harnessx==0.2.0", harnessx-0.1.0.tar.gz...
INSTALL_BY_NAME = re.compile(r"pip3? install\b[^\n`]*?(?<![\w./-])['\"]?harnessx(?![\w-])")
# The original, pinned, with or without extras: 'harnessx==0.9.1', 'harnessx[postgres,openai]==0.9.1'.
PINNED_ORIGINAL = re.compile(r"'harnessx(\[[a-z,]+\])?==0\.9\.1'")


def shipped_text_files() -> list[Path]:
    roots = ["README.md", "CHANGELOG.md", "Dockerfile", ".ci/run", "docs", "deploy", "examples"]
    roots += ["harnessx", "harness_workers", "supervisor", "chaos", "bench"]
    files: list[Path] = []
    for root in roots:
        path = REPO / root
        found = [path] if path.is_file() else path.rglob("*")
        files += [p for p in found if p.is_file() and p.suffix not in (".pyc", ".png", ".sqlite3")]
    return files


def test_the_distribution_is_not_named_harnessx() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == "harnessx-durable"
    extras = project["optional-dependencies"]
    assert all(not dep.startswith("harnessx[") for deps in extras.values() for dep in deps)
    assert "harnessx-durable[test]" in extras["dev"]


def test_no_install_hint_names_the_other_project() -> None:
    offenders = []
    for path in shipped_text_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            # CI installs the original on purpose, pinned, into a venv of its own: the
            # reference the differential tests compare with.
            reference = ".venv-original/bin/python -m pip install" in line and bool(
                PINNED_ORIGINAL.search(line)
            )
            if INSTALL_BY_NAME.search(line) and not reference:
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert offenders == []


def test_the_pattern_catches_what_it_is_for() -> None:
    for hint in ("pip install harnessx", "pip install 'harnessx[postgres]==0.2.0'", 'pip install "harnessx"'):
        assert INSTALL_BY_NAME.search(hint), hint
    for fine in ("pip install -e '.[postgres]'", "pip install harnessx-durable", "pip install ./dist/x.whl"):
        assert not INSTALL_BY_NAME.search(fine), fine
