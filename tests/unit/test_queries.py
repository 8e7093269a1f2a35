"""The named-query files: their format, and that the code and the files agree."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from harnessx.store._postgres import SQLITE_ONLY_QUERIES
from harnessx.store._queries import load_queries, parse_queries

DIALECTS = ("sqlite", "postgres")
MODULES = {"sqlite": "_sqlite.py", "postgres": "_postgres.py"}


def package_text(*parts: str) -> str:
    return resources.files("harnessx.store").joinpath(*parts).read_text(encoding="utf-8")


def names_used(dialect: str) -> set[str]:
    return set(re.findall(r'\bQ\["([a-z_][a-z0-9_]*)"\]', package_text(MODULES[dialect])))


def test_parser_keeps_statements_and_drops_comments() -> None:
    text = """-- header comment
-- name: first
-- What it is for.
SELECT 1
FROM t;

-- name: second
-- Another.
UPDATE t SET x = 1;
"""
    assert parse_queries(text) == {
        "first": "SELECT 1\nFROM t",
        "second": "UPDATE t SET x = 1",
    }


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("-- name: a\n-- x\nSELECT 1;\n-- name: a\n-- y\nSELECT 2;", "defined twice"),
        ("-- name: a\n-- only a comment\n", "has no SQL"),
    ],
)
def test_parser_rejects_duplicates_and_empty_queries(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_queries(text)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_query_has_a_one_line_purpose(dialect: str) -> None:
    lines = package_text("sql", f"{dialect}.sql").splitlines()
    queries = load_queries(dialect)
    assert queries
    for index, line in enumerate(lines):
        if re.match(r"^--\s*name:", line):
            purpose = lines[index + 1] if index + 1 < len(lines) else ""
            assert re.match(r"^-- \S", purpose), f"{dialect}.sql: {line!r} lacks a purpose line"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_query_the_code_uses_exists_and_every_query_is_used(dialect: str) -> None:
    used, defined = names_used(dialect), set(load_queries(dialect))
    assert used, f"found no Q[...] references in {MODULES[dialect]}"
    assert used - defined == set(), f"used but not in {dialect}.sql"
    assert defined - used == set(), f"in {dialect}.sql but never used"


def test_the_dialects_share_names_except_where_documented() -> None:
    sqlite, postgres = set(load_queries("sqlite")), set(load_queries("postgres"))
    # Same operation, same name; an SQLite query missing on PostgreSQL must say what replaces it.
    assert sqlite - postgres == set(SQLITE_ONLY_QUERIES)
    migration = package_text("migrations", "postgres", "0001_initial.sql")
    for name, replacement in SQLITE_ONLY_QUERIES.items():
        assert replacement in postgres or f"CREATE FUNCTION {replacement}(" in migration, name


def test_postgres_queries_never_name_the_schema() -> None:
    # Connections set search_path; a hard-coded schema would break any other schema name.
    for name, query in load_queries("postgres").items():
        assert "harness_x" not in query, name
