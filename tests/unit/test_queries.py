"""The named-query files: their format, and that the code and the files agree."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from harnessx.store._listing import list_statement
from harnessx.store._pg_checkpoint import (
    ROW_SETS,
    GroupShape,
    Shape,
    all_group_shapes,
    all_shapes,
    checkpoint_statement,
    group_statement,
    render,
)
from harnessx.store._queries import load_queries, parse_queries

DIALECTS = ("sqlite", "postgres")
MODULES = {
    "sqlite": (
        "_core.py",
        "_sqlite.py",
        "_sqlite_file.py",
        "_sqlite_console.py",
        "_sqlite_scheduling.py",
        "_sqlite_lifecycle.py",
        "_listing.py",
    ),
    "postgres": (
        "_core.py",
        "_postgres.py",
        "_pg_execution.py",
        "_pg_schema.py",
        "_pg_liveness.py",
        "_pg_checkpoint.py",
        "_pg_console.py",
        "_pg_scheduling.py",
        "_pg_lifecycle.py",
        "_pg_partitions.py",
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
            "update_run_progress",
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
            "agent_queue",
            "queued_agents",
            "key_room",
            "dequeue_run",
            "record_claim",
            "advance_pass",
        ),
        "claim_queued",
    ),
    # PostgreSQL's reservation is one statement, a kept one's hold and requeue another.
    **dict.fromkeys(("rate_bucket", "take_rate_hold"), "reserve_rate"),
    "run_rate_holds": "load_run",  # PostgreSQL reads a run's kept reservations with the run
    "requeue_later": "hold_rate",
    "leased_sessions": "find_orphans",
    # SQLite looks at every run waited on; a PostgreSQL waiter hears the stopping commit.
    "stopped_runs": "await_run",
    "drop_orphan_lease": "recover_orphan",
    "requeue_session": "recover_orphan",
    "last_event_seq": "end_run",
    "term_holds": "recover_orphan",  # and mark_worker_dead: each checks the term itself
    # PostgreSQL compacts a batch of runs in one statement; its prune and erasure forget the
    # runs' notes in theirs.
    **dict.fromkeys(
        ("compact_keep", "compact_gone", "count_compacted", "forget_compactable"), "compact_pieces"
    ),
    "compaction_waiting": "compaction_due",  # SQLite looks before it takes the write lock
    "forget_compactable_sessions": "delete_sessions",
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
    postgres.add("checkpoint")  # put together per shape from postgres_checkpoint.sql
    migration = package_text("migrations", "postgres", "0001_initial.sql")
    for name, replacement in SQLITE_ONLY_QUERIES.items():
        assert replacement in postgres or f"CREATE FUNCTION {replacement}(" in migration, name


def test_postgres_queries_never_name_the_schema() -> None:
    # Connections set search_path; a hard-coded schema would break any other schema name.
    for name, query in load_queries("postgres").items():
        assert "harness_x" not in query, name


CHECKPOINT_STEPS = (
    "fence",
    "new_run",
    "run",
    "messages_added",
    "tools_moved",
    "events_added",
    "journal_added",
    "results_added",
)
SHAPES = list(all_shapes())


def with_items(statement: str) -> list[str]:
    return re.findall(r"^(?:WITH |,\n)?([a-z_]+) AS \($", statement, re.MULTILINE)


def test_the_checkpoint_blocks_are_each_used_and_name_declared_parameters() -> None:
    blocks = load_queries("postgres_checkpoint")
    assert set(blocks) == {*CHECKPOINT_STEPS, "run_progress", "main"}
    # Positions are never written by hand: every parameter is named.
    assert not any(re.search(r"\$[0-9]", body) for body in blocks.values())
    statement = checkpoint_statement(Shape(messages=True, tools=2, events=2, journal=True, results=True))
    params = set(statement.params)
    for name, row_set in ROW_SETS.items():
        assert {f"{name}.{column}" for column, _ in row_set.columns} <= params, name


@pytest.mark.parametrize("shape", SHAPES, ids=repr)
def test_a_checkpoint_statement_has_exactly_the_steps_its_shape_needs(shape: Shape) -> None:
    statement = checkpoint_statement(shape)
    text = statement.text
    wanted = {
        "fence": True,
        "new_run": shape.new_run,
        "run": not shape.new_run,  # the main query reads it: a commit whose run step wrote nothing fails
        "messages_added": shape.messages,
        "tools_moved": bool(shape.tools),
        "events_added": bool(shape.events),
        "journal_added": shape.journal,
        "results_added": shape.results,
    }
    assert with_items(text) == [step for step in CHECKPOINT_STEPS if wanted[step]]
    if not shape.new_run:  # progress alone: the run step only reads (the run row is not written)
        run_step = text[text.index("\nrun AS (") :].split("\n)", 1)[0]
        assert ("UPDATE runs" not in run_step) is shape.progress_only
    # Numbered $1.. without gaps, in the order the parameters are listed, each once typed.
    numbers = {int(n) for n in re.findall(r"\$([0-9]+)", text)}
    assert numbers == set(range(1, len(statement.params) + 1))
    assert not re.search(r"\$[0-9]+(?![0-9]|::)", text), "an untyped parameter"
    assert ":" not in re.sub(r"::[a-z0-9]+(\[\])?", "", text), "a placeholder left over"
    # A step with one row takes plain values; with several, arrays to unnest.
    for name, rows in (("tools", shape.tools), ("events", shape.events)):
        for column, element in ROW_SETS[name].columns:
            key = f"{name}.{column}"
            if not rows:
                assert key not in statement.params
                continue
            number = statement.params.index(key) + 1
            expected = f"${number}::{element}" if rows == 1 else f"unnest(${number}::{element}[])"
            assert expected in text and (rows == 1) is (f"${number}::{element}[]" not in text), key
    # A row set or a schedule is sent only with the step that writes it.
    assert any(p.startswith("journal.") for p in statement.params) is shape.journal
    assert any(p.startswith("results.") for p in statement.params) is shape.results
    assert ("priority" in statement.params) is shape.new_run


@pytest.mark.parametrize("shape", list(all_group_shapes()), ids=repr)
def test_a_group_statement_has_the_steps_its_members_need(shape: GroupShape) -> None:
    blocks = load_queries("postgres_checkpoint_batch")
    assert set(blocks) == {"members", "fence", "run", "messages_added", "tools_moved", "events_added", "main"}
    assert not any(re.search(r"\$[0-9]", body) for body in blocks.values())
    statement = group_statement(shape)
    text = statement.text
    wanted = ["members", "fence"] + [
        step
        for step, has in (
            ("run", shape.run),
            ("messages_added", shape.messages),
            ("tools_moved", shape.tools),
            ("events_added", shape.events),
        )
        if has
    ]
    assert with_items(text) == wanted
    assert ("LEFT JOIN run r" in text) is shape.run  # the main query reads the run step only if there
    # One JSON document per row set the members have rows of, each a parameter of its own.
    sets = {"members": True, "member_messages": shape.messages, "member_tools": shape.tools,
            "member_events": shape.events}  # fmt: skip
    assert statement.params == tuple(name for name, sent in sets.items() if sent)
    assert [f"${n}::json" for n in range(1, len(statement.params) + 1)] == re.findall(
        r"\$[0-9]+::[a-z]+", text
    )
    assert ":" not in re.sub(r"::[a-z0-9]+(\[\])?", "", text), "a placeholder left over"


def test_a_checkpoint_shape_or_block_that_cannot_be_is_an_error() -> None:
    with pytest.raises(ValueError, match="writes its run row"):
        Shape(new_run=True, progress_only=True)
    with pytest.raises(ValueError, match="0, 1 or 2"):
        Shape(tools=3)
    shape = Shape()
    with pytest.raises(ValueError, match="unknown checkpoint parameter :nothing"):
        render([("fence", "SELECT :nothing")], "SELECT 1", shape)
    with pytest.raises(ValueError, match=r"unknown checkpoint parameter :tools\.nothing"):
        render([("fence", "SELECT :tools.nothing")], "SELECT 1", shape)
    with pytest.raises(ValueError, match="unknown checkpoint row set :nothing"):
        render([("fence", "SELECT :nothing.id")], "SELECT 1", shape)
    with pytest.raises(ValueError, match="may be sent as plain values"):
        render([("fence", "SELECT :tools.idx[]")], "SELECT 1", Shape(tools=1))
    # A cast is not a placeholder.
    assert render([("fence", "SELECT 1::bigint, :run")], "SELECT 2", shape).text == (
        "WITH fence AS (\nSELECT 1::bigint, $1::text\n)\nSELECT 2"
    )


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
