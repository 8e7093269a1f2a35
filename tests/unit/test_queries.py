"""The named-query files: their format, and that the code and the files agree."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from harnessx.store._listing import list_statement
from harnessx.store._pg_checkpoint import _single_valued, checkpoint_statement, without_steps
from harnessx.store._queries import load_queries, parse_queries

DIALECTS = ("sqlite", "postgres")
MODULES = {
    "sqlite": (
        "_core.py",
        "_sqlite.py",
        "_sqlite_console.py",
        "_sqlite_scheduling.py",
        "_sqlite_lifecycle.py",
        "_listing.py",
    ),
    "postgres": (
        "_core.py",
        "_postgres.py",
        "_pg_checkpoint.py",
        "_pg_console.py",
        "_pg_scheduling.py",
        "_pg_lifecycle.py",
        "_listing.py",
    ),
}


# sqlite.sql queries without a twin in postgres.sql, and what does their work on PostgreSQL.
SQLITE_ONLY_QUERIES = {
    **dict.fromkeys(
        (
            "fence",
            "insert_run",
            "update_run",
            "set_event_count",
            "insert_message",
            "upsert_tool_call",
            "upsert_tool_result",
        ),
        "checkpoint",
    ),
    "insert_event": "checkpoint",
    **dict.fromkeys(("journal_tail", "insert_journal"), "checkpoint"),
    **dict.fromkeys(
        (
            "claim_setup",
            "waiting_tenants",
            "tenant_queue",
            "limit_of",
            "driving_key",
            "driving_agent",
            "dequeue_run",
            "record_claim",
            "advance_pass",
        ),
        "claim_queued",
    ),
    "leased_sessions": "find_orphans",
    "drop_orphan_lease": "recover_orphan",
    "requeue_session": "recover_orphan",
    "last_event_seq": "end_run",
    "term_holds": "recover_orphan",  # and mark_worker_dead: each checks the term itself
    **dict.fromkeys(
        (
            "delete_tool_results",
            "delete_tool_calls",
            "delete_events",
            "delete_journal",
            "delete_messages",
            "delete_audit",
            "delete_runs",
        ),
        "delete_sessions",
    ),
}


def package_text(*parts: str) -> str:
    return resources.files("harnessx.store").joinpath(*parts).read_text(encoding="utf-8")


def names_used(dialect: str) -> set[str]:
    text = "".join(package_text(module) for module in MODULES[dialect])
    direct = re.findall(r'\bQ\["([a-z_][a-z0-9_]*)"\]', text)
    # The core's primitives take the query's name after what the call is doing.
    by_core = re.findall(r'\._(?:one|all|change)\(\s*"[^"]*",\s*"([a-z_][a-z0-9_]*)"', text)
    return {*direct, *by_core}


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


CHECKPOINT_STEPS = (
    "new_run",
    "run",
    "messages_added",
    "tools_moved",
    "events_added",
    "journal_added",
    "results_added",
)
OPTIONAL_STEPS = (
    "new_run",
    "messages_added",
    "tools_moved",
    "events_added",
    "journal_added",
    "results_added",
)
SHAPES = [
    (new_run, messages, tools, events, progress_only, journal, results)
    for new_run in (False, True)
    for messages in (False, True)
    for tools in (0, 1, 2)
    for events in (0, 1, 2)
    for progress_only in (False, True)
    for journal in (False, True)
    for results in (False, True)
    if not (new_run and progress_only) and not (results and not tools)
]
TOOL_PARAMS, EVENT_PARAMS, JOURNAL_PARAMS = range(7, 17), range(17, 23), range(42, 49)


def with_items(statement: str) -> list[str]:
    return re.findall(r"^(?:WITH )?([a-z_]+) AS \($", statement, re.MULTILINE)


@pytest.mark.parametrize(
    ("new_run", "messages", "tools", "events", "progress_only", "journal", "results"), SHAPES
)
def test_a_checkpoint_statement_has_exactly_the_steps_its_shape_needs(
    new_run: bool, messages: bool, tools: int, events: int, progress_only: bool, journal: bool, results: bool
) -> None:
    full = load_queries("postgres")["checkpoint"]
    assert with_items(full) == ["parameters", "fence", *CHECKPOINT_STEPS]
    statement = checkpoint_statement(new_run, messages, tools, events, progress_only, journal, results)
    wanted = {
        "new_run": new_run,
        "run": True,  # the main query reads it: a commit whose run step wrote nothing fails
        "messages_added": messages,
        "tools_moved": bool(tools),
        "events_added": bool(events),
        "journal_added": journal,
        "results_added": results,
    }
    assert with_items(statement) == ["parameters", "fence", *(s for s in CHECKPOINT_STEPS if wanted[s])]
    # Progress alone: the run step only reads (the run row is not written).
    run_step = statement[statement.index("\nrun AS (") :].split("\n)", 1)[0]
    assert ("UPDATE runs" not in run_step) is progress_only
    # The main query is kept whole, and reads none of the steps that may be left out.
    main = full[full.index("\nSELECT CASE") :]
    assert statement.endswith(main)
    assert not any(re.search(rf"\bFROM {step}\b", main) for step in OPTIONAL_STEPS)
    # A step with one row takes plain values; with several, arrays to unnest.
    single = {*(TOOL_PARAMS if tools == 1 else ()), *(EVENT_PARAMS if events == 1 else ())}
    for number in range(1, 42):
        declared = re.search(rf"\${number}::([a-z]+(?:\[\])?)", statement)
        assert declared is not None, number
        is_array = declared.group(1).endswith("[]")
        if number in single:
            assert not is_array and f"unnest(${number})" not in statement, number
        elif number in (*TOOL_PARAMS, *EVENT_PARAMS):
            assert is_array, number
            if (number in TOOL_PARAMS and tools) or (number in EVENT_PARAMS and events):
                assert f"unnest(${number})" in statement, number
    # The journal's parameters exist only in a recorded run's statement (which types them).
    for number in JOURNAL_PARAMS:
        assert (f"unnest(${number}::" in statement) is journal or (results and not journal and number <= 44)
    # The large results' parameters follow the last one before them, without a gap.
    first = 49 if journal else 42
    for number in range(first, first + 3):
        assert (f"unnest(${number}::text[])" in statement) is results, number
    assert f"${first + 3 if results else first}" not in statement


def test_leaving_out_a_step_the_statement_lacks_is_an_error() -> None:
    with pytest.raises(ValueError, match="cannot find the WITH items"):
        without_steps(load_queries("postgres")["checkpoint"], {"no_such_step"})
    with pytest.raises(ValueError, match="cannot find the WITH items"):
        without_steps(load_queries("postgres")["checkpoint"], set(), {"no_such_step": "x"})
    with pytest.raises(ValueError, match="does not start with WITH"):
        without_steps("SELECT 1", set())
    with pytest.raises(ValueError, match="writes its run row"):
        checkpoint_statement(True, False, 0, 0, True)


def test_a_parameter_made_single_valued_must_be_declared_once_as_an_array() -> None:
    with pytest.raises(ValueError, match=r"parameter \$1 is not declared once as an array"):
        _single_valued("WITH parameters AS (SELECT $1::text)\nSELECT 1", [1])


LISTING_FILTERS = ("status", "not_queued", "queued", "agent_ref", "session_id", "run_id", "request_id",
                   "created_from", "created_to", "before")  # fmt: skip


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_runs_listing_keeps_exactly_the_filters_given(dialect: str) -> None:
    full = load_queries(dialect)["list_runs"]
    assert set(re.findall(r"-- when: ([a-z_]+)", full)) == set(LISTING_FILTERS)
    for name in LISTING_FILTERS:
        sql, order = list_statement(dialect, frozenset({name}))
        assert "-- when" not in sql
        others = [line for line in full.splitlines() if "-- when:" in line and f"when: {name}" not in line]
        assert all(line.split(" -- when:")[0] not in sql for line in others), name
        if dialect == "postgres":
            assert ":" not in re.sub(r"::[a-z0-9]+", "", sql), sql  # every parameter numbered
            assert order[-1] == "limit" and len(order) == len(set(order))


def test_postgres_listing_parameters_follow_their_numbers() -> None:
    from harnessx.store._listing import list_query
    from harnessx.store._protocol import RunFilter

    query = list_query("postgres", RunFilter(status="failed", agent_ref="a@v1"), limit=10, before=(5, "r"))
    assert query.args == ["failed", "a@v1", 5, "r", 11]
    assert "$1" in query.sql and "$5" in query.sql and "$6" not in query.sql
