"""Job statistics: the percentile arithmetic of portq.stats, and the SQL Server and Oracle
statements (not live-tested here) checked against the facts they rely on: each reads the
finished-jobs index over the window only, buckets as the other engines do."""

from __future__ import annotations

import math

import pytest
import sqlglot
from sqlglot import exp
from test_sqlserver_oracle_sql import _index_expressions, _one

from portq.engines import NAMES
from portq.sql import load_queries
from portq.stats import bucket_floor_ms, bucket_seconds, build_stats, percentile

ENGINES = NAMES


def test_percentiles_of_log_buckets_are_within_a_bucket_of_the_exact_value() -> None:
    durations = [3.0 * 1.07 ** i for i in range(200)]           # 3 ms .. ~2.2 min
    hist: dict[int, int] = {}
    for ms in durations:
        b = math.floor(4 * math.log2(max(ms, 1)))
        hist[b] = hist.get(b, 0) + 1
    for p in (50, 95, 99):
        exact = sorted(durations)[math.ceil(p / 100 * len(durations)) - 1]
        estimate = percentile(hist, p)
        assert estimate is not None and abs(estimate / exact - 1) < 0.19, (p, exact)
    assert percentile({}, 50) is None
    assert percentile({0: 10}, 50) == pytest.approx(bucket_floor_ms(1) / 2, rel=1e-2)


def test_series_buckets_and_totals() -> None:
    assert [bucket_seconds(w) for w in (3600, 86400, 604800)] == [60, 900, 3600]
    (s,) = build_stats([("q", "succeeded", 0, 5), ("q", "dead", 59, 1),
                        ("q", "succeeded", 60, 9)],         # outside the window: dropped
                       [("q", 4, None, 6)], 3600, 60)
    assert s.succeeded[-1] == 5 and s.dead[0] == 1 and sum(s.succeeded) == 5
    assert s.run_ms["p50"] is None and s.wait_ms["p50"] is not None
    assert s.failure_rate == pytest.approx(1 / 6)


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_has_both_statements_with_the_same_parameters(engine: str) -> None:
    queries = load_queries(engine)
    assert ":window_s" in queries["stats_series"] and ":bucket_s" in queries["stats_series"]
    assert ":window_s" in queries["stats_latency"]
    assert ":bucket_s" not in queries["stats_latency"]


@pytest.mark.parametrize("name", ["stats_series", "stats_latency"])
def test_oracle_statistics_use_the_finished_index_expression(name: str) -> None:
    """WHERE repeats the function-based index's CASE expression, or Oracle reads the table
    in full; no trailing semicolon; the log base comes first in Oracle's LOG(2, x)."""
    (index,) = _index_expressions("portq_job_finished_idx")
    sql = load_queries("oracle")[name]
    tree = _one("oracle", name)
    wheres = [w.sql(dialect="oracle") for w in tree.find_all(exp.Where)]
    assert any(index in w for w in wheres), (index, wheres)
    assert not sql.rstrip().endswith(";")
    if name == "stats_latency":
        assert sql.count("LOG(2, GREATEST(") == 2


@pytest.mark.parametrize("name", ["stats_series", "stats_latency"])
def test_sqlserver_statistics_seek_the_filtered_index(name: str) -> None:
    """The filtered index's literal state list (a parameter could not imply it), no wait on
    a job being finished (READPAST, as `stats`), the window as a DATEADD of whole seconds,
    a named derived table (T-SQL requires the alias)."""
    sql = load_queries("sqlserver")[name]
    tree = _one("sqlserver", name)
    assert "state IN (N'succeeded', N'dead', N'cancelled')" in sql
    assert "FROM portq_job WITH (READPAST, READCOMMITTEDLOCK)" in sql   # never waits
    assert "DATEADD(SECOND, -CAST(:window_s AS INT), SYSUTCDATETIME())" in sql
    (sub,) = list(tree.find_all(exp.Subquery))[:1]
    assert sub.alias == "t"
    if name == "stats_latency":  # LOG(x, base) takes the base second on SQL Server
        assert sql.count(" ELSE 1.0 END, 2))") == 2
        assert "DATEDIFF_BIG(MICROSECOND" in sql   # DATEDIFF would overflow an INT


def test_statements_parse_in_each_engine_dialect() -> None:
    for engine, dialect in (("postgres", "postgres"), ("mysql", "mysql"),
                            ("sqlite", "sqlite")):
        for name in ("stats_series", "stats_latency"):
            sql = load_queries(engine)[name].replace(":window_s", "3600") \
                .replace(":bucket_s", "60")
            assert sqlglot.parse_one(sql, read=dialect) is not None
