"""Static checks of the rate-limit and per-key-limit SQL (migration 7) on SQL Server and
Oracle, which have no server here: each fact its own test (docs/engines.md, "Rate limits
and per-key limits")."""

from __future__ import annotations

import re

import pytest

from portq.engines import NAMES
from portq.sql import load_migrations, load_queries

FIVE = NAMES
NEW = ("queue_limits", "set_rate_limit", "db_clock_ms", "set_rate_log", "ensure_queue",
       "key_running_count", "unclaim")


@pytest.mark.parametrize("engine", FIVE)
def test_migration_7_is_applied_on_every_engine(engine: str) -> None:
    """Migration 7 (the limits) exists everywhere; 9 (the runtime's per-job columns), 10
    (when attempts started) and 11 (meta and progress) follow it, 13 (fair sharing) is
    the newest; only SQL Server has an 8
    (the registry's binary worker ids and the ready index's included columns)."""
    versions = [v for v, _ in load_migrations(engine)]
    nine = versions.index(9)
    assert 7 in versions and versions[nine:nine + 3] == [9, 10, 11] and versions[-1] == 13
    assert (8 in versions) == (engine == "sqlserver")


@pytest.mark.parametrize("engine", FIVE)
def test_every_engine_has_the_new_statements(engine: str) -> None:
    assert set(NEW) <= set(load_queries(engine))


@pytest.mark.parametrize("engine", FIVE)
def test_queue_control_reads_both_limits_and_the_log(engine: str) -> None:
    sql = load_queries(engine)["queue_control"]
    assert re.search(r"SELECT concurrency_limit, rate_limit, rate_period_ms, rate_log", sql)


def test_postgres_clock_is_read_after_the_lock_not_at_transaction_start() -> None:
    sql = load_queries("postgres")["db_clock_ms"]
    assert "clock_timestamp()" in sql and "now()" not in sql


def test_sqlserver_claim_key_count_skips_locked_rows_under_either_rcsi_setting() -> None:
    claim = load_queries("sqlserver")["claim"]
    assert "AS r WITH (READCOMMITTEDLOCK, READPAST)" in claim


def test_sqlserver_recount_skips_locked_rows_and_compares_bytes() -> None:
    sql = load_queries("sqlserver")["key_running_count"]
    assert "WITH (READCOMMITTEDLOCK, READPAST)" in sql
    assert "AS VARBINARY(1020))" in sql


def test_sqlserver_key_count_repeats_the_filtered_index_literals() -> None:
    schema = "\n".join(s for v, st in load_migrations("sqlserver") if v == 7 for s in st)
    assert "WHERE state = N'running' AND concurrency_key IS NOT NULL" in schema
    for name in ("claim", "key_running_count"):
        sql = load_queries("sqlserver")[name]
        assert "state = N'running' AND" in sql and "concurrency_key IS NOT NULL" in sql


def test_sqlserver_concurrency_key_is_stored_as_bytes() -> None:
    schema = "\n".join(s for v, st in load_migrations("sqlserver") if v == 7 for s in st)
    assert "concurrency_key   VARBINARY(1020)" in schema


def test_sqlserver_clock_uses_datediff_big() -> None:
    assert "DATEDIFF_BIG(MILLISECOND" in load_queries("sqlserver")["db_clock_ms"]


def test_oracle_claim_cursor_keeps_no_row_limit_with_the_key_filter() -> None:
    sql = load_queries("oracle")["claim_lock"].upper()
    assert "FOR UPDATE SKIP LOCKED" in sql and "FETCH " not in sql and "ROWNUM" not in sql


def test_oracle_key_counts_match_the_function_based_index() -> None:
    case = "CASE WHEN state = 'running' AND concurrency_key IS NOT NULL THEN"
    schema = "\n".join(s for v, st in load_migrations("oracle") if v == 7 for s in st)
    assert f"{case} queue END" in schema and f"{case} concurrency_key END" in schema
    recount = load_queries("oracle")["key_running_count"]
    assert f"{case} queue END = :queue" in recount
    assert "r.state = 'running' AND r.concurrency_key IS NOT NULL" in \
        load_queries("oracle")["claim_lock"]


def test_oracle_rate_log_fits_a_varchar2() -> None:
    schema = "\n".join(s for v, st in load_migrations("oracle") if v == 7 for s in st)
    assert "rate_log       VARCHAR2(4000 BYTE)" in schema
