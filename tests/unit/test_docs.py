"""The documentation stands on its own: links stay inside the project, every variable a
command uses is introduced, and no documented command puts a DSN on a command line."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_links_and_paths_stay_inside_the_project() -> None:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        targets = re.findall(r"\]\(([^)#\s]+)[^)]*\)", text) + re.findall(r"`(\.\./[^`\s]+)`", text)
        for target in targets:
            if re.match(r"[a-z]+://", target):
                continue
            resolved = (page.parent / target).resolve()
            assert resolved.is_relative_to(REPO), f"{page.name} points outside the project: {target}"
            assert resolved.exists(), f"{page.name} links to a missing file: {target}"
        assert "seed page" not in text, page.name


def test_documented_commands_take_the_dsn_from_the_environment() -> None:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S):
            for line in block.splitlines():
                command = line.split("#", 1)[0]
                assert not re.search(r"--dsn\b", command), f"{page.name}: {line.strip()}"
                assert not re.search(r"(?<!export HARNESSX_DSN=')postgres(ql)?://", command), line
        # Every $VARIABLE a documented command uses is set or explained on the same page.
        for name in set(re.findall(r"\$\{?([A-Z][A-Z0-9_]+)", text)):
            assert re.search(rf"(export {name}=|`{name}`)", text), f"{page.name} never introduces ${name}"
