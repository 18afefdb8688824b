"""Issue 30, item 12: every statement of every dialect parses with sqlglot in its own
dialect (tsql, oracle, postgres, mysql, sqlite): every named statement, bound as its
backend sends it, and every migration statement.

A statement sqlglot cannot parse is listed in :data:`UNPARSABLE` with the reason; the
list is checked both ways (a listed statement that starts to parse must leave the list),
so it names exactly the statements no parser has read. Parsing proves syntax only, not
semantics: what the SQL Server and Oracle statements mean is checked by
tests/sql/test_sqlserver_oracle_*.py and stays unverified against a live server.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

from portq.engines import ENGINES as REGISTRY
from portq.sql import bind, load_migrations, load_queries, split_statements

DIALECTS = {e.name: e.sqlglot_dialect for e in REGISTRY}
#: the paramstyle each statement is bound in to be parsed: the backend's own, except MySQL,
#: whose PyMySQL ``%(name)s`` sqlglot's MySQL dialect does not read (``?`` is the same
#: statement with another placeholder spelling)
STYLES = {"sqlite": "qmark", "postgres": "pyformat", "mysql": "qmark", "sqlserver": "qmark",
          "oracle": "named"}
#: (engine, label) -> why sqlglot 25+ cannot parse it (checked: it still cannot)
UNPARSABLE: dict[tuple[str, str], str] = {
    ("postgres", "query insert_jobs_bulk"):
        "the column definition list of a set-returning function in FROM "
        "(jsonb_to_recordset(...) AS t(queue text, ...)) is not in sqlglot's grammar",
    ("sqlserver", "query migration_lock"):
        "sqlglot's T-SQL parser reads the EXEC and SELECT after IF ... BEGIN ... END; as "
        "part of the IF block (two trees for the batch's four statements); the batch itself "
        "is checked by test_migration_lock_batch_ends_with_the_lock_result_and_raises_nothing",
    ("oracle", "query complete_many"):
        "RETURNING job_id, attempts, has_dependents INTO :done_ids, :done_generations, "
        ":done_flags: sqlglot reads one INTO target "
        "(test_oracle_fenced_batches_return_id_and_generation checks the clause)",
    ("oracle", "query renew_many"):
        "RETURNING job_id, attempts INTO :done_ids, :done_generations (as complete_many)",
    ("oracle", "query ddl_lock_wait"):
        "ALTER SESSION (session control, not SQL DDL) is not in sqlglot's grammar: it "
        "falls back to an opaque Command",
    ("oracle", "query ddl_lock_nowait"): "ALTER SESSION (as ddl_lock_wait)",
}
SAMPLE: dict[str, Any] = {
    "ids": (1, 2), "states": ("dead", "succeeded"), "claims": '[{"job_id": 1}]',
    "payload": "{}", "jobs": "[]", "hash": "0" * 64, "pattern": "%x%", "run_at": None,
    "after_run_at": None,
}


def _value(name: str) -> Any:
    return SAMPLE.get(name, 1)


def statements(engine: str) -> list[tuple[str, str]]:
    """(label, sql as sent) for every named statement and migration statement."""
    out = []
    for name, sql in load_queries(engine).items():
        params = {n: _value(n) for n in _names(sql)}
        out.append((f"query {name}", bind(sql, params, STYLES[engine]).sql))  # type: ignore[arg-type]
    for version, stmts in load_migrations(engine):
        out += [(f"migration {version}.{i}", s) for i, s in enumerate(stmts)]
    return out


def _names(sql: str) -> set[str]:
    import re
    return set(re.findall(r"(?<![:\w]):([A-Za-z_]\w*)", re.sub(r"'(?:[^']|'')*'", "", sql)))


def parse_problem(engine: str, sql: str) -> str | None:
    """Why sqlglot cannot parse ``sql`` in the engine's dialect; None when it can (into as
    many statements as the text holds, none an opaque Command)."""
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    try:
        trees = [t for t in sqlglot.parse(sql, read=DIALECTS[engine]) if t is not None]
    except sqlglot.errors.ParseError as exc:
        return str(exc).splitlines()[0]
    commands = [t for t in trees if isinstance(t, exp.Command)]
    if commands:
        return f"parsed as an opaque Command: {commands[0].sql()[:60]}"
    expected = len(split_statements(sql)) if engine != "oracle" else 1
    if len(trees) != expected:
        return f"{len(trees)} statements parsed, {expected} in the text"
    return None


@pytest.mark.parametrize("engine", sorted(DIALECTS))
def test_every_statement_parses_in_its_dialect(engine: str) -> None:
    checked = statements(engine)
    assert len(checked) > 50
    failures = []
    for label, sql in checked:
        problem = parse_problem(engine, sql)
        if problem and (engine, label) not in UNPARSABLE:
            failures.append(f"{engine} {label}: {problem}\n{sql}")
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize(("engine", "label"), sorted(UNPARSABLE))
def test_the_unparsable_list_is_exact(engine: str, label: str) -> None:
    """Each listed statement exists and sqlglot still cannot parse it."""
    sql = dict(statements(engine)).get(label)
    assert sql is not None, f"{engine} {label} no longer exists: drop it from UNPARSABLE"
    assert parse_problem(engine, sql) is not None, \
        f"sqlglot parses {engine} {label} now: drop it from UNPARSABLE"


def test_the_oracle_batches_parse_but_for_their_second_into_target() -> None:
    """What sqlglot can read of the two listed Oracle batches: all of it once the
    RETURNING ... INTO targets after the first are dropped."""
    for name in ("complete_many", "renew_many"):
        sql = dict(statements("oracle"))[f"query {name}"]
        assert parse_problem("oracle", re.sub(
            r"INTO :done_ids(?:, :done_\w+)+", "INTO :done_ids", sql)) is None, name
