"""Migration 8 (when each attempt started) on every engine's files, parsed: each claim sets
``started_at`` to the engine's database clock and ``first_started_at`` once; the `job`
statement reads both. SQLite, PostgreSQL and MariaDB also run it live
(portq/conformance/test_claim.py::test_claims_record_when_each_attempt_started); SQL Server
and Oracle have no server here, so this is what shows their SQL (docs/engines.md cites the
vendor documentation for each fact)."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from portq.engines import ENGINES as REGISTRY
from portq.sql import bind, load_migrations, load_queries

DIALECTS = {e.name: (e.sqlglot_dialect, e.sqlglot_paramstyle) for e in REGISTRY}
#: the database clock each engine's claim already uses for lease_until
CLOCK = {"sqlite": "julianday('now')", "postgres": "now()", "mysql": "UTC_TIMESTAMP(6)",
         "sqlserver": "SYSUTCDATETIME()", "oracle": "SYS_EXTRACT_UTC(SYSTIMESTAMP)"}
#: the type of created_at (the other times) on each engine: the new columns match it
TIME_TYPE = {"sqlite": "INTEGER", "postgres": "timestamptz", "mysql": "DATETIME(6)",
             "sqlserver": "DATETIME2(6)", "oracle": "TIMESTAMP(6)"}
# placeholders are bound as qmark (named on Oracle): sqlglot reads no pyformat
SAMPLE = {"queue": "q", "worker_id": "w", "lease_ms": 30000, "limit": 5, "ids": (1, 2),
          "job_id": 1}


def _claim_update(engine: str) -> exp.Update:
    dialect, style = DIALECTS[engine]
    sql = bind(load_queries(engine)["claim"], SAMPLE, style).sql
    updates = [t for t in sqlglot.parse(sql, read=dialect) if isinstance(t, exp.Update)]
    assert len(updates) == 1, f"{engine}: one UPDATE in the claim"
    return updates[0]


def _assignments(update: exp.Update, engine: str) -> dict[str, str]:
    return {e.this.name: e.expression.sql(dialect=DIALECTS[engine][0])
            for e in update.args["expressions"]}


@pytest.mark.parametrize("engine", sorted(DIALECTS))
def test_migration_10_adds_both_nullable_time_columns(engine: str) -> None:
    (statements,) = [st for version, st in load_migrations(engine) if version == 10]
    text = " ".join(statements)
    for column in ("started_at", "first_started_at"):
        assert f"{column} " in text
    assert text.count(TIME_TYPE[engine]) == 2, text
    assert "NOT NULL" not in text and "DEFAULT" not in text  # no rewrite of existing rows
    dialect = DIALECTS[engine][0]
    for statement in statements:
        (tree,) = sqlglot.parse(statement, read=dialect)
        assert isinstance(tree, exp.Alter), statement


@pytest.mark.parametrize("engine", sorted(DIALECTS))
def test_every_claim_sets_the_attempts_start_by_the_database_clock(engine: str) -> None:
    sets = _assignments(_claim_update(engine), engine)
    raw = load_queries(engine)["claim"]
    assert "started_at" in sets and "first_started_at" in sets
    # the same clock expression as lease_until, which the claim already uses
    assert raw.count(CLOCK[engine]) >= 3
    first = sets["first_started_at"].replace(" ", "").upper()
    assert first.startswith("COALESCE(") and "FIRST_STARTED_AT," in first


def test_sqlserver_claims_cte_exposes_the_columns_it_updates() -> None:
    """UPDATE through a CTE may set only the CTE's columns (it is updatable like a view)."""
    update = _claim_update("sqlserver")
    cte = update.find(exp.CTE)
    assert cte is not None
    exposed = {e.alias_or_name for e in cte.this.expressions}
    assert set(_assignments(update, "sqlserver")) <= exposed


@pytest.mark.parametrize("engine", sorted(DIALECTS))
def test_the_job_statement_reads_both_after_the_existing_columns(engine: str) -> None:
    dialect, style = DIALECTS[engine]
    (tree,) = sqlglot.parse(bind(load_queries(engine)["job"], SAMPLE, style).sql,
                            read=dialect)
    names = [e.alias_or_name for e in tree.expressions]
    # the first 14 columns, then progress, its note and time (migration 11), released
    # (given_back + snoozes) and meta
    assert names[-2:] == ["started_at", "first_started_at"] and len(names) == 21
