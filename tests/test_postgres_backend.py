"""PostgreSQL-specific behaviour, against the real server at PORTQ_TEST_PG_URL (default:
the local one). Skipped, with the reason, when no server is reachable.

Every bounded statement (claim, reap, prune, retry_many, cancel_many) locks its rows in a
``LIMIT … FOR UPDATE SKIP LOCKED`` selection. As a FROM subquery that selection may be
rescanned by a nested loop, each rescan locking rows the statement has not yet touched,
so more than the limit change (PostgreSQL bug report #15715); dialects/postgres/queries.sql
makes each one a MATERIALIZED CTE. Here the planner is pushed to that plan (hash and merge
joins and index scans off for the session) and each statement must still stop at its
limit."""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest

psycopg = pytest.importorskip("psycopg")

import portq  # noqa: E402
from portq.bench import drop_tables  # noqa: E402
from portq.conformance.helpers import counts  # noqa: E402
from portq.sql import load_queries  # noqa: E402
from portq.url import parse_url  # noqa: E402

URL = os.environ.get("PORTQ_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
#: the plan that rescans the inner side of a join once per outer row
NESTED_LOOPS = "-c enable_hashjoin=off -c enable_mergejoin=off -c enable_indexscan=off"
BOUNDED = ("claim", "reap", "prune", "retry_many", "cancel_many")


@pytest.fixture(scope="module")
def queue() -> Iterator[portq.Queue]:
    prefix = f"pqp{uuid.uuid4().hex[:6]}_"
    sep = "&" if "?" in URL else "?"
    try:
        q = portq.connect(f"{URL}{sep}options={quote(NESTED_LOOPS)}", prefix=prefix)
        q.migrate()
    except (portq.DatabaseError, psycopg.Error, OSError) as exc:
        pytest.skip(f"no PostgreSQL server reachable at {parse_url(URL).redacted()}: {exc}")
    # statistics of an empty table: the planner then expects few rows of every state
    q.backend.run("analyze", lambda cur: cur.execute(f"ANALYZE {prefix}job"))
    yield q
    drop_tables(q.backend)
    q.close()


@pytest.fixture
def qname() -> str:
    return f"pg-{uuid.uuid4().hex[:10]}"


def test_the_session_plans_with_nested_loops(queue: portq.Queue) -> None:
    plan = queue.backend.run("plan", lambda cur: cur.execute(
        "SELECT current_setting('enable_hashjoin'), current_setting('enable_mergejoin')"
    ).fetchone())
    assert tuple(plan) == ("off", "off")


def test_claim_and_reap_stop_at_their_limit(queue: portq.Queue, qname: str) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(8)])
    assert len(queue.claim(qname, "w", limit=2, lease=0.05)) == 2
    assert len(queue.claim(qname, "w", limit=3, lease=0.05)) == 3
    time.sleep(0.1)
    assert queue.reap(limit=2, delay=0) == 2
    assert queue.reap(limit=2, delay=0) == 2
    assert counts(queue, qname)["ready"] == 7


def test_retry_cancel_and_prune_stop_at_their_limit(queue: portq.Queue, qname: str) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i, "max_attempts": 1} for i in range(8)])
    for job in queue.claim(qname, "w", limit=8):
        assert queue.fail(job, "boom", retry_in=None)
    assert queue.retry_many(qname, states=["dead"], limit=5) == 5
    assert (counts(queue, qname)["ready"], counts(queue, qname)["dead"]) == (5, 3)
    assert queue.cancel_many(qname, states=["ready"], limit=2) == 2
    assert (counts(queue, qname)["ready"], counts(queue, qname)["cancelled"]) == (3, 2)
    time.sleep(0.01)  # finished_at < now - 0
    assert queue.prune(0, limit=4, queue=qname, states=["dead", "cancelled"]) == 4
    left = counts(queue, qname)
    assert (left["ready"], left["dead"] + left["cancelled"]) == (3, 1), left


@pytest.mark.parametrize("name", BOUNDED)
def test_each_locking_selection_with_a_limit_is_a_materialized_cte(name: str) -> None:
    sql = load_queries("postgres")[name]
    selection = re.search(r"WITH \w+ AS MATERIALIZED \((.*?)\n\)", sql, re.S)
    assert selection is not None, sql
    assert "LIMIT :limit" in selection.group(1) and "FOR UPDATE SKIP LOCKED" in \
        selection.group(1)
    rest = sql[selection.end():]
    assert "LIMIT" not in rest and "FOR UPDATE" not in rest


def test_prune_reads_a_dependents_state_by_its_id_only() -> None:
    """prune's guard for results a dependent still needs never joins the job table: the
    dependent's state is a scalar subquery on its primary key. As a join, a table grown
    since its last ANALYZE (seen here: 10,000 finished jobs, autovacuum off) was planned
    with the job table first, its primary key scanned whole per candidate row: a prune of
    10,000 jobs ran for minutes. The scalar subquery can only be an index lookup."""
    sql = load_queries("postgres")["prune"]
    guard = re.search(r"NOT EXISTS \((.*?)\)\)\n", sql, re.S)
    assert guard is not None, sql
    assert "JOIN" not in guard.group(1)
    assert re.search(r"\(SELECT w\.state FROM portq_job AS w WHERE w\.job_id = d\.job_id\)",
                     guard.group(1)), guard.group(1)


def test_a_pooled_connection_keeps_one_cursor_through_errors_and_reconnects(
        queue: portq.Queue, qname: str) -> None:
    """Each pooled connection runs its transactions on one kept cursor (psycopg makes a
    cursor's row loaders anew for each new cursor): the same cursor object serves the next
    transaction, also after a statement failed and was rolled back; a connection the
    server killed is replaced, with a cursor of its own, and the work goes on."""
    backend = queue.backend
    assert backend.keeps_cursor
    first = backend.run("probe", lambda cur: cur)
    assert backend.run("probe", lambda cur: cur) is first  # LIFO: the same connection
    with pytest.raises(portq.DatabaseError):
        backend.run("bad", lambda cur: cur.execute("SELECT * FROM no_such_table_here"),
                    retry=False)
    assert backend.run("probe", lambda cur: cur) is first
    assert backend.run("one", lambda cur: cur.execute("SELECT 1").fetchall()) == [(1,)]
    # the server ends that connection: the next operation runs on a new one
    pid = backend.run("pid", lambda cur: cur.execute("SELECT pg_backend_pid()").fetchone()[0])
    with psycopg.connect(URL, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    job_id = queue.enqueue(qname, {"n": 1})
    jobs = queue.claim(qname, "w-kept", limit=5, lease=30)
    assert [j.id for j in jobs] == [job_id] and jobs[0].payload == {"n": 1}
    assert backend.run("probe", lambda cur: cur) is not first
    assert queue.complete(jobs[0])
    assert counts(queue, qname)["succeeded"] == 1
