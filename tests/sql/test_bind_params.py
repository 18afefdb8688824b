"""Issue 30, item 13: every named statement's bind parameters match its Python call sites,
on all five dialects.

The call sites are recorded, not guessed: an engine-neutral workload runs every protocol
operation through the real SQLite backend (``SqlBackend``'s code paths, which the SQL
Server backend shares), and every ``execute(cur, name, params)`` is recorded with the
parameter names it was given. Then, for each engine's ``queries.sql``:

- every ``:name`` a statement uses is given by every recorded call of it (else the first
  call on that engine raises a missing-parameter error: on SQL Server and Oracle, which
  run nowhere here, only a customer would find it);
- the statements only one engine runs (Oracle's ``*_lock`` cursors and its ``claimed``
  read, SQL Server's ``transaction_state``...) are checked against the parameters their
  engine module passes (listed below with the code that passes them);
- the count: bound in the engine's paramstyle, a statement has exactly one placeholder per
  parameter value, so no stray ``?`` or ``%`` in its text shifts the values.
"""

from __future__ import annotations

import importlib
import re
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import portq
from portq.backends import BACKENDS
from portq.backends.base import SqlBackend
from portq.engines import NAMES
from portq.job import WorkerInfo
from portq.sql import bind, load_queries

ENGINES = NAMES
#: each engine's paramstyle, as its backend class declares it
STYLES = {name: getattr(importlib.import_module(module), cls).paramstyle
          for name, (module, cls, _, _) in BACKENDS.items()}
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_STRING_OR_COMMENT = re.compile(r"'(?:[^']|'')*'|--[^\n]*")

#: statements the SQLite workload cannot reach, with the engine code that runs them and
#: the parameters it passes
ENGINE_CALLS: dict[tuple[str, str], tuple[str, frozenset[str]]] = {
    # PostgresBackend.insert_jobs / announce, MysqlBackend.insert_jobs and friends
    ("postgres", "insert_jobs_bulk"): ("PostgresBackend.insert_jobs", frozenset({"jobs"})),
    ("postgres", "notify"): ("PostgresBackend.announce", frozenset({"channel"})),
    ("postgres", "migration_lock"): ("PostgresBackend.migration_lock", frozenset()),
    ("mysql", "migration_lock"): ("MysqlBackend.migration_lock", frozenset({"timeout_s"})),
    ("mysql", "autoinc_settings"): ("MysqlBackend._insert_unkeyed", frozenset()),
    ("mysql", "server_version"): ("MysqlBackend.is_mariadb", frozenset()),
    ("mysql", "server_info_tx"): ("MysqlBackend.server_info", frozenset()),
    ("mysql", "job_id_by_key_locked"): ("MysqlBackend.insert_job", frozenset({"key"})),
    # MysqlBackend.insert_jobs binds the VALUES row of insert_jobs_bulk positionally with the
    # parameters of job_params()
    ("mysql", "insert_jobs_bulk"): ("MysqlBackend.insert_jobs", frozenset({
        "queue", "payload", "priority", "run_at", "delay_ms", "max_attempts",
        "concurrency_key", "concurrency_limit", "timeout_ms", "meta"})),
    ("sqlserver", "session_setup"): ("SqlServerBackend.connect", frozenset()),
    ("sqlserver", "migration_lock"): ("SqlServerBackend.migration_lock", frozenset()),
    ("sqlserver", "transaction_state"): ("SqlServerBackend.check_committable", frozenset()),
    ("sqlserver", "compatibility_level"): ("SqlServerBackend.check_compatibility",
                                           frozenset()),
    ("sqlserver", "server_version"): ("SqlBackend.server_info (fallback)", frozenset()),
    ("postgres", "server_identity"): ("PostgresBackend.read_identity", frozenset()),
    ("postgres", "backend_pid"): ("PostgresBackend.read_identity", frozenset()),
    ("oracle", "pending_ready"): ("OracleBackend.pending", frozenset({"queue"})),
    ("oracle", "ddl_lock_wait"): ("OracleBackend.migration_lock", frozenset()),
    ("oracle", "ddl_lock_nowait"): ("OracleBackend.migration_lock", frozenset()),
}
#: Oracle's claim, reap, prune and bulk actions lock ids with a cursor first
#: (OracleBackend.lock_ids with the operation's own parameters), then run the operation's
#: statement with ``ids`` added; the claim reads its rows back with ``claimed``; the fenced
#: batches and the insert add their RETURNING ... INTO variables
ORACLE_DERIVED: dict[str, tuple[str, frozenset[str]]] = {
    "claim_lock": ("claim", frozenset()), "claimed": ("claim", frozenset({"ids"})),
    "reap_lock": ("reap", frozenset()), "prune_lock": ("prune", frozenset()),
    "retry_many_lock": ("retry_many", frozenset()),
    "cancel_many_lock": ("cancel_many", frozenset()),
}
ORACLE_EXTRA: dict[str, frozenset[str]] = {
    "claim": frozenset({"ids"}), "reap": frozenset({"ids"}), "prune": frozenset({"ids"}),
    "retry_many": frozenset({"ids"}), "cancel_many": frozenset({"ids"}),
    "insert_job": frozenset({"job_id"}),
    "complete_many": frozenset({"done_ids", "done_generations", "done_flags"}),
    "renew_many": frozenset({"done_ids", "done_generations"}),
}
#: MySQL's multi-statement operations: each step gets the operation's parameters, and its
#: second step the ids the first locked (MysqlBackend.claim_rows, fenced_rows, batch_rows)
MYSQL_EXTRA: dict[str, frozenset[str]] = {
    name: frozenset({"ids"}) for name in (
        "claim", "reap", "prune", "retry_many", "cancel_many", "complete_many", "renew_many",
        "dep_release", "dep_cancel", "claim_key", "claim_unkeyed")}
#: statements no call site runs any more, kept for the protocol's shape (backends/sql runs the
#: batched forms: renew -> renew_many, complete -> complete_many); their parameters are
#: those of the fenced writes
UNCALLED: dict[str, frozenset[str]] = {
    "renew": frozenset({"job_id", "generation", "worker_id", "lease_ms"}),
    "complete": frozenset({"job_id", "generation", "worker_id"}),
}


def statement_params(sql: str) -> set[str]:
    """The ``:name`` parameters of a statement (not inside strings or comments)."""
    return set(_PARAM.findall(_STRING_OR_COMMENT.sub("", sql)))


def _workload(queue: portq.Queue) -> None:
    """Every protocol operation at least once (the SQLite backend: SqlBackend's paths)."""
    backend = queue.backend
    queue.migrate()
    backend.check_schema()
    queue.enqueue("a", {"n": 1})
    queue.enqueue("a", {"n": 2}, key="k1")
    queue.enqueue_result("a", {"n": 3}, key="k1")
    queue.enqueue_many([{"queue": "a", "payload": 4}, {"queue": "a", "payload": 5}])
    queue.enqueue("a", 6, key="scoped", unique_for=60)
    queue.enqueue("a", 7, key="scoped", unique_for=60)
    queue.enqueue("a", 8, run_at=datetime.now(UTC) - timedelta(seconds=1))
    jobs = queue.claim("a", "w1", limit=3, lease=30)
    queue.renew(jobs[0])
    queue.renew_many(jobs[:2])
    queue.store_result(jobs[0], {"r": 1})
    queue.complete(jobs[0])
    queue.complete_many(jobs[1:2])
    queue.fail(jobs[2], "boom", retry_in=None)
    queue.result(jobs[0].id)
    (job,) = queue.claim("a", "w2", limit=1)
    queue.set_progress(job, 0.5, "half")
    queue.release(job)
    (job,) = queue.claim("a", "w2", limit=1)
    queue.snooze(job, 0)
    queue.set_concurrency_limit("b", 1)
    queue.set_rate_limit("b", 5, per_seconds=1)
    for i in range(3):
        queue.enqueue("b", i, concurrency_key="ck", concurrency_limit=1)
    queue.claim("b", "w3", limit=3)
    queue.claim("b", "w3", limit=3)  # the key's limit is reached: unclaim/recount paths
    backend._keyed_until.clear()
    backend._unlimited_until["c"] = float("inf")
    for i in range(2):
        queue.enqueue("c", i, concurrency_key="ck2", concurrency_limit=1)
    queue.claim("c", "w4", limit=2)  # a one-statement claim that settles its keys after
    queue.set_fairness("f", True)  # a fair claim: every turn's statements
    queue.enqueue("f", 1, concurrency_key="t1", concurrency_limit=1)
    queue.enqueue("f", 2)
    queue.claim("f", "w5", limit=1)  # stops at key t1: the cursor is stored
    queue.claim("f", "w5", limit=3)
    queue.set_fairness("f", False)
    queue.reap(limit=10, delay=0)
    queue.prune(0, limit=10)
    dead = queue.jobs("dead")
    queue.retry_dead(dead[0].id, extra_attempts=1)
    queue.cancel(queue.enqueue("a", 9))
    queue.retry_many("a", states=("cancelled",), limit=5)
    queue.cancel_many("a", states=("ready",), limit=1)
    _dependency_workload(queue)
    queue.stats()
    queue.stats("a")
    queue.finished_per_minute(5)
    queue.job_stats("1h")
    queue.delete_finished(jobs[0].id)
    backend.pending("a")
    backend.next_lease_expiry_ms()
    backend.worker_activity()
    backend.job_concurrency(1)
    backend.key_limits("b", 5)
    for order in ("id", "-id", "run_at"):
        queue.jobs(None, order=order, text="n", limit=2)
    queue.jobs(None, order="run_at", after_id=1, after_run_at=datetime.now(UTC))
    queue.jobs(key="k1")
    queue.job(jobs[0].id)
    queue.error_history(jobs[2].id)
    queue.pause("a")
    queue.paused_queues()
    queue.resume("a")
    info = WorkerInfo(worker_id="w1", host="h", pid=1, queues=("a",), concurrency=1)
    backend.beat_worker(info, 10_000)
    backend.beat_worker(info, 10_000)
    queue.workers()
    backend.deregister_worker("w1")
    backend.server_info()
    backend.existing_tables()
    queue.set_rate_limit("b", None)


def _dependency_workload(queue: portq.Queue) -> None:
    """Job dependencies (migration 12): a waiting job released by a completion, dependents
    cancelled (and one run anyway) after a dead dependency, one enqueued after it died,
    the cancelled ones revived by a retry of the dependency."""
    first = queue.enqueue("d", 1)
    after = queue.enqueue("d", 2, depends_on=[first])
    queue.enqueue("d", 3, depends_on=[after])
    queue.enqueue("d", 4, depends_on=[after], on_dependency_failure="run")
    (job,) = queue.claim("d", "w5", limit=1)
    queue.complete(job)
    (job,) = queue.claim("d", "w5", limit=1)
    job.dependency_results()
    queue.fail(job, "boom", retry_in=None)
    queue.enqueue("d", 5, depends_on=[after])
    queue.backend.job_graph(after)
    queue.retry_dead(after)  # revives the dependents its failure cancelled


@pytest.fixture(scope="module")
def call_sites(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[frozenset[str]]]:
    """statement name -> the parameter names of each recorded call (SQLite workload)."""
    path: Path = tmp_path_factory.mktemp("calls") / "calls.db"
    queue = portq.connect(f"sqlite:///{path}")
    backend = queue.backend
    assert isinstance(backend, SqlBackend)
    calls: dict[str, list[frozenset[str]]] = defaultdict(list)
    run: Callable[..., Any] = backend.execute

    def recording(cur: Any, name: str, params: dict[str, Any] | None = None) -> Any:
        if name in backend.queries:
            calls[name].append(frozenset(params or {}))
        return run(cur, name, params)

    backend.execute = recording  # type: ignore[method-assign]
    try:
        _workload(queue)
    finally:
        queue.close()
    return dict(calls)


def test_the_workload_runs_every_sqlite_statement(call_sites: dict[str, Any]) -> None:
    """The recording covers the engine-neutral call sites: every statement of SQLite's
    queries.sql runs (except the two single forms no call site uses any more)."""
    missing = set(load_queries("sqlite")) - set(call_sites) - set(UNCALLED)
    assert not missing, f"statements the workload never ran: {sorted(missing)}"
    assert not set(UNCALLED) & set(call_sites), "a statement listed as uncalled is called"


def _given(engine: str, name: str, call_sites: dict[str, list[frozenset[str]]]
           ) -> list[frozenset[str]]:
    """The parameter names each call of ``name`` on ``engine`` is given."""
    if (engine, name) in ENGINE_CALLS:
        return [ENGINE_CALLS[engine, name][1]]
    base = name
    extra: frozenset[str] = frozenset()
    if engine == "oracle" and name in ORACLE_DERIVED:
        base, extra = ORACLE_DERIVED[name]
    elif engine == "oracle":
        extra = ORACLE_EXTRA.get(name, frozenset())
    elif engine == "mysql":
        extra = MYSQL_EXTRA.get(name, frozenset())
    if base in UNCALLED:
        return [UNCALLED[base]]
    assert base in call_sites, f"{engine}.{name}: no call site runs {base!r}"
    return [keys | extra for keys in call_sites[base]]


@pytest.mark.parametrize("engine", ENGINES)
def test_every_statement_gets_every_parameter_it_uses(
        engine: str, call_sites: dict[str, list[frozenset[str]]]) -> None:
    problems = []
    for name, sql in load_queries(engine).items():
        used = statement_params(sql)
        for given in _given(engine, name, call_sites):
            if used - given:
                problems.append(f"{engine}.{name} uses {sorted(used - given)}, not given "
                                f"by a call that passes {sorted(given)}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("engine", ENGINES)
def test_every_statement_uses_the_parameters_the_protocol_gives_it(
        engine: str, call_sites: dict[str, list[frozenset[str]]]) -> None:
    """The other direction, for the fenced writes and the enqueue: a parameter the call
    gives but the statement ignores is a guard that is missing (a fenced write without
    ``:generation`` would let a stale owner finish a job)."""
    queries = load_queries(engine)
    must_use = {
        "renew": {"job_id", "generation", "worker_id", "lease_ms"},
        "complete": {"job_id", "generation", "worker_id"},
        "fail": {"job_id", "generation", "worker_id", "error", "retryable", "retry_ms"},
        "release": {"job_id", "generation", "worker_id"},
        "snooze": {"job_id", "generation", "worker_id", "delay_ms", "max_snoozes"},
        "lock_owned_job": {"job_id", "generation", "worker_id"},
        "unclaim": {"job_id", "generation", "worker_id"},
        "complete_many": {"claims"}, "renew_many": {"claims", "lease_ms"},
        "insert_job": {"queue", "payload", "priority", "run_at", "delay_ms", "max_attempts",
                       "key", "concurrency_key", "concurrency_limit", "timeout_ms"},
        "claim": {"queue", "worker_id", "lease_ms"},
        "jobs_by_run_at": {"after_run_at", "after_id", "limit"},
    }
    for name, needed in must_use.items():
        # an operation split in a locking read and a write (Oracle) uses them together
        used = statement_params(queries[name] + "\n" + queries.get(f"{name}_lock", ""))
        assert needed <= used, f"{engine}.{name} ignores {sorted(needed - used)}"


def _sample(name: str) -> Any:
    return [1, 2] if name == "ids" else ("ready", "dead") if name == "states" else 1


@pytest.mark.parametrize("engine", ENGINES)
def test_one_placeholder_per_value_in_the_engines_paramstyle(engine: str) -> None:
    """Bound in the engine's paramstyle, the text holds exactly as many placeholders as
    values are sent: no literal ``?`` (qmark) or unescaped ``%`` (pyformat) outside
    strings, and every occurrence of a parameter is bound."""
    style = STYLES[engine]
    for name, sql in load_queries(engine).items():
        params = {p: _sample(p) for p in statement_params(sql)}
        occurrences = _PARAM.findall(_STRING_OR_COMMENT.sub("", sql))
        expected = sum(len(params[p]) if isinstance(params[p], list | tuple) else 1
                       for p in occurrences)
        bound = bind(sql, params, style)  # type: ignore[arg-type]
        text = _STRING_OR_COMMENT.sub("", bound.sql)
        if style == "qmark":
            assert text.count("?") == len(bound.params) == expected, f"{engine}.{name}"
        elif style == "pyformat":
            assert len(re.findall(r"%\(\w+\)s", text)) == expected, f"{engine}.{name}"
            assert "%" not in re.sub(r"%\(\w+\)s|%%", "", text), f"{engine}.{name}"
        else:
            assert len(re.findall(r"(?<![:\w]):\w+", text)) == expected, f"{engine}.{name}"
            assert set(re.findall(r"(?<![:\w]):(\w+)", text)) == set(bound.params), \
                f"{engine}.{name}"
