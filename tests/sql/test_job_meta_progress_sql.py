"""Migration 10 (job meta and progress) on all five engines, read statically with sqlglot:
SQL Server and Oracle have no server here, and the live engines get the same shape checks
(their behaviour is tested live in portq/conformance/test_observability.py)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlglot
from sqlglot import exp

from portq.engines import ENGINES as REGISTRY
from portq.sql import bind, load_migrations, load_queries

#: engine -> (sqlglot dialect, paramstyle)
DIALECTS = {e.name: (e.sqlglot_dialect, e.sqlglot_paramstyle) for e in REGISTRY}
FIVE = sorted(DIALECTS)
SAMPLE: dict[str, Any] = {
    "queue": "q", "payload": "{}", "priority": 0, "run_at": None, "delay_ms": 0,
    "max_attempts": 3, "key": "k", "job_id": 1, "generation": 1, "worker_id": "w",
    "concurrency_key": None, "concurrency_limit": None, "meta": '{"traceparent":"00-x"}',
    "timeout_ms": None,
    "progress": 0.5, "note": "half", "limit": 5, "lease_ms": 1000, "ids": (1, 2),
    "state": "*", "any_text": 1, "pattern": "%", "after_id": 0, "after_run_at": None,
}
NEW_COLUMNS = {"meta", "progress", "progress_note", "progress_at"}


def tree(engine: str, name: str) -> exp.Expression:
    dialect, style = DIALECTS[engine]
    sql = bind(load_queries(engine)[name], SAMPLE, style).sql
    return next(t for t in sqlglot.parse(sql, read=dialect) if t is not None)


def column_names(node: exp.Expression) -> set[str]:
    return {c.name.lower() for c in node.find_all(exp.Column)}


@pytest.mark.parametrize("engine", FIVE)
def test_migration_10_adds_the_four_columns_to_the_job_table(engine: str) -> None:
    (statements,) = [ss for v, ss in load_migrations(engine) if v == 11]
    text = "\n".join(statements)
    assert all(s.lstrip().upper().startswith("ALTER TABLE PORTQ_JOB") for s in statements)
    for column in NEW_COLUMNS:
        assert column in text, f"{engine}: migration 11 lacks {column}"
    assert "NOT NULL" not in text.upper()  # nullable: old rows need no value


@pytest.mark.parametrize("engine", FIVE)
def test_set_progress_is_fenced_like_complete(engine: str) -> None:
    update = tree(engine, "set_progress")
    assert isinstance(update, exp.Update)
    where = update.args["where"]
    assert {"job_id", "attempts", "worker_id", "state", "lease_until"} <= column_names(where)
    assert "'running'" in where.sql(dialect=DIALECTS[engine][0]) or \
        "N'running'" in where.sql(dialect=DIALECTS[engine][0])
    complete = tree(engine, "complete")
    assert column_names(complete.args["where"]) <= column_names(where)
    assert {e.this.name.lower() for e in update.expressions} == \
        {"progress", "progress_note", "progress_at"}


@pytest.mark.parametrize("engine", FIVE)
def test_enqueue_writes_meta(engine: str) -> None:
    insert = tree(engine, "insert_job")
    assert isinstance(insert, exp.Insert)
    assert "meta" in [c.name.lower() for c in insert.this.expressions]


@pytest.mark.parametrize("engine", FIVE)
def test_the_job_statement_reads_progress_and_meta_and_listings_progress(engine: str) -> None:
    one = tree(engine, "job")
    # after finished_at, in order (released between progress_at and meta); then when the
    # attempts started (migration 10)
    last = [column_names(e) for e in (*one.expressions[-7:-4], one.expressions[-3])]
    assert last == [{"progress"}, {"progress_note"}, {"progress_at"}, {"meta"}], engine
    for listing in ("jobs", "jobs_newest", "jobs_by_run_at"):
        sql = tree(engine, listing).sql().lower()
        assert "progress_at" in sql and "meta" not in sql, (engine, listing)
