"""Stored results (migration 5) on every engine, without a server: every engine has the
statements SqlBackend.store_result/result run, the result table cascades from the job
table, and the ownership check locks the job row with the same guard as complete."""

from __future__ import annotations

import re

import pytest

from portq.engines import NAMES
from portq.sql import load_migrations, load_queries

ENGINES = list(NAMES)
RESULT_QUERIES = {"lock_owned_job", "delete_result", "insert_result", "job_result"}


def _where(sql: str) -> set[str]:
    """The conjuncts of a statement's WHERE clause, whitespace-normalised."""
    where = re.split(r"\bWHERE\b", sql, maxsplit=1)[1]
    where = re.split(r"\bFOR UPDATE\b", where)[0]
    return {" ".join(part.split()).rstrip(";") for part in re.split(r"\bAND\b", where)}


@pytest.mark.parametrize("engine", ENGINES)
def test_result_statements_exist(engine: str) -> None:
    assert set(load_queries(engine)) >= RESULT_QUERIES


@pytest.mark.parametrize("engine", ENGINES)
def test_result_table_is_migration_5_and_cascades_from_the_job(engine: str) -> None:
    migrations = dict(load_migrations(engine))
    assert 5 in migrations
    (table,) = [s for s in migrations[5] if "CREATE TABLE" in s]
    assert re.search(r"CREATE TABLE (IF NOT EXISTS )?portq_result \(", table)
    assert re.search(r"job_id\s+\w+(\(\d+\))?\s+.*PRIMARY KEY|PRIMARY KEY \(job_id\)", table)
    assert re.search(r"REFERENCES portq_job \(job_id\)\s+ON DELETE CASCADE", table), table
    assert "generation" in table and "result" in table


@pytest.mark.parametrize("engine", ENGINES)
def test_result_ownership_check_is_completes_guard(engine: str) -> None:
    queries = load_queries(engine)
    assert _where(queries["lock_owned_job"]) == _where(queries["complete"])


@pytest.mark.parametrize("engine,lock", [("postgres", "FOR UPDATE"), ("mysql", "FOR UPDATE"),
                                         ("oracle", "FOR UPDATE"),
                                         ("sqlserver",
                                          "WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK)")])
def test_result_ownership_check_locks_the_job_row(engine: str, lock: str) -> None:
    # SQLite needs no clause: the transaction is BEGIN IMMEDIATE (one writer)
    assert lock in load_queries(engine)["lock_owned_job"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_result_is_read_only_for_a_succeeded_job(engine: str) -> None:
    sql = load_queries(engine)["job_result"]
    assert re.search(r"state = N?'succeeded'", sql), sql


@pytest.mark.parametrize("engine", ["sqlserver", "oracle"])
def test_result_column_refuses_no_json_scalar(engine: str) -> None:
    """ISJSON without a type (before 2022) and IS JSON before 21c refuse a top-level scalar
    such as 42, a valid result: the result column has neither check."""
    (table,) = [s for s in dict(load_migrations(engine))[5] if "CREATE TABLE" in s]
    assert "ISJSON" not in table and "IS JSON" not in table
