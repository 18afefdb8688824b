"""Issue 34's workflow statements on SQL Server and Oracle without a server (as
tests/sql/test_sqlserver_oracle_sql.py does for the rest): the retry batch returns the ids
it retried, and the revival of dependency-cancelled dependents matches exactly the reason
``dependencies.failure_reason`` writes, locking the dependents it reads. The statements
parse (test_sqlserver_oracle_sql.py parses every statement of both engines)."""

from __future__ import annotations

import re

import pytest
import sqlglot
from sqlglot import exp

from portq.backends.dependencies import failure_reason
from portq.sql import load_queries

ENGINES = ("sqlserver", "oracle", "postgres", "mysql", "sqlite")


def _flat(sql: str) -> str:
    return " ".join(sql.split())


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_matches_the_reason_failure_reason_writes(engine: str) -> None:
    """Each engine's dep_revive_ids builds the two reasons from the literal parts of
    failure_reason (the dependency's id between them), for 'dead' and 'cancelled'."""
    sql = load_queries(engine)["dep_revive_ids"]
    for state in ("dead", "cancelled"):
        head, tail = failure_reason(4242, state).split("4242")
        assert f"'{head}'" in sql and f"'{tail}'" in sql, (engine, state)
    assert "d.depends_on IN (:dep_ids)" in sql and "j.state = " in sql


def test_sqlserver_retry_many_outputs_its_ids_and_revival_locks_the_dependents() -> None:
    q = load_queries("sqlserver")
    retry = _flat(q["retry_many"])
    assert retry.endswith("OUTPUT inserted.job_id;")
    assert "SELECT TOP (:limit) job_id," in retry and "READPAST" in retry
    revive = _flat(q["dep_revive_ids"])
    assert "JOIN portq_job AS j WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK)" in revive
    assert "CONCAT(N'cancelled: its dependency, job ', d.depends_on, N', ended dead')" in revive
    for name in ("dep_reopen", "dep_revive"):
        assert isinstance(sqlglot.parse_one(q[name].replace(":job_id", "1").replace(
            ":dep_ids", "1").replace(":deps_left", "1"), read="tsql"), exp.Update)
    assert "SET state = N'waiting', deps_left = :deps_left, finished_at = NULL, " \
        "last_error = NULL WHERE job_id = :job_id AND state = N'cancelled'" in \
        _flat(q["dep_revive"])


def test_oracle_revival_compares_the_clob_and_locks_only_job_rows() -> None:
    q = load_queries("oracle")
    revive = _flat(q["dep_revive_ids"])
    # last_error is a CLOB: '=' / IN on it is ORA-00932, DBMS_LOB.COMPARE is not
    assert revive.count("DBMS_LOB.COMPARE(j.last_error, TO_CLOB(") == 2
    # no DISTINCT beside FOR UPDATE (ORA-01786): dependencies.revive dedupes
    assert "j.last_error IN" not in revive and "DISTINCT" not in revive
    assert revive.endswith("FOR UPDATE OF j.state")
    assert not any(q[n].rstrip().endswith(";") for n in ("dep_revive_ids", "dep_reopen",
                                                         "dep_revive"))
    # retry_many stays lock-then-change (OracleBackend.batch_ids returns the locked ids)
    assert "FOR UPDATE SKIP LOCKED" in q["retry_many_lock"]
    assert re.search(r"WHERE job_id IN \(:ids\) AND state IN \(:states\)", q["retry_many"])
