"""Named SQL queries, one file per dialect, loaded once from the package.

A file is a sequence of blocks, each starting with ``-- name: <identifier>`` and a
one-line ``--`` purpose, followed by one SQL statement.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

__all__ = ["load_queries", "parse_queries", "when"]

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$")
_WHEN = re.compile(r"\s*--\s*when:\s*([a-z_]+)\s*$")


def parse_queries(text: str) -> dict[str, str]:
    """Map each name to its statement, without comments or the trailing semicolon."""
    queries: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []

    def flush() -> None:
        if current is None:
            return
        statement = "\n".join(lines).strip().rstrip(";").strip()
        if not statement:
            raise ValueError(f"query {current!r} has no SQL")
        queries[current] = statement

    for line in text.splitlines():
        match = _NAME.match(line.strip())
        if match:
            flush()
            current, lines = match.group(1), []
            if current in queries:
                raise ValueError(f"query {current!r} is defined twice")
        elif current is not None and not line.strip().startswith("--"):
            lines.append(line)
    flush()
    return queries


@cache
def load_queries(dialect: str) -> dict[str, str]:
    text = resources.files("harnessx.store").joinpath("sql", f"{dialect}.sql").read_text(encoding="utf-8")
    return parse_queries(text)


@cache
def when(statement: str, given: frozenset[str]) -> str:
    """``statement`` keeping a line that ends in ``-- when: NAME`` only if NAME is in ``given``
    (without the comment): one statement text per variant, which the driver prepares once."""
    kept = []
    for line in statement.splitlines():
        match = _WHEN.search(line)
        if match is None:
            kept.append(line)
        elif match.group(1) in given:
            kept.append(line[: match.start()])
    return "\n".join(kept)
