"""Each dialect's bench.sql (portq bench's statements): every benched engine has the
statements the harness needs and a reader for its plan, and each statement parses."""

from __future__ import annotations

import pytest
import sqlglot

from portq.bench.plans import READERS
from portq.bench.table import PLANNED_ENGINES
from portq.engines import engine
from portq.sql import bind, load_queries

REQUIRED = {"bench_fill", "bench_analyze", "bench_explain", "bench_explain_analyze",
            "bench_version", "bench_clock", "bench_finished_clock"}
#: EXPLAIN words (the claim follows them) and the template portq/bench/raw.py composes
NOT_STATEMENTS = {"bench_explain", "bench_explain_analyze", "bench_complete_claim"}
SAMPLE = {"queue": "q", "state": "ready", "count": 5, "offset": 0}


def test_the_live_engines_are_benched() -> None:
    assert {"sqlite", "postgres", "mysql"} <= set(PLANNED_ENGINES)


@pytest.mark.parametrize("name", PLANNED_ENGINES)
def test_a_benched_engine_has_every_statement_and_a_plan_reader(name: str) -> None:
    statements = load_queries(name, filename="bench.sql")
    assert set(statements) >= REQUIRED, REQUIRED - set(statements)
    assert engine(name).bench_plan in READERS


@pytest.mark.parametrize("name", PLANNED_ENGINES)
def test_each_bench_statement_parses(name: str) -> None:
    record = engine(name)
    for block, sql in load_queries(name, filename="bench.sql").items():
        if block in NOT_STATEMENTS or sql.upper().startswith(("SHOW", "ANALYZE", "VACUUM")):
            continue
        bound = bind(sql, SAMPLE, record.sqlglot_paramstyle).sql
        assert [t for t in sqlglot.parse(bound, read=record.sqlglot_dialect) if t], block
