"""SQL Server and Oracle without a server: the SQL parses, the claims have the right shape,
URLs become the right connection arguments, and driver errors map to the right kinds.

No SQL Server or Oracle runs here; what these tests cannot show is listed under "Not
verified against a live server" in docs/engines.md.
"""

from __future__ import annotations

import re
import socket
import sys
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

from portq.backends import backend_for, import_driver
from portq.backends.base import ErrorKind
from portq.engines import ENGINES as REGISTRY
from portq.errors import ConfigurationError, ConnectionLost, DriverMissingError
from portq.sql import bind, load_migrations, load_queries
from portq.url import parse_url

oracledb = pytest.importorskip("oracledb")
oracle_errors = pytest.importorskip("oracledb.errors")

from portq.backends.oracle import OracleBackend, oracle_codes  # noqa: E402
from portq.backends.sqlserver import (  # noqa: E402
    SqlServerBackend,
    native_errors,
    odbc_value,
    sqlstate,
)

SECRET = "s3cr;e}t{pw"
MSSQL_URL = "mssql://sa:s3cr%3Be%7Dt%7Bpw@db.example:1433/portq?TrustServerCertificate=yes"
ORACLE_URL = "oracle://app:s3cr%3Be%7Dt%7Bpw@db.example:1521/FREEPDB1"
#: the statically tested engines -> (sqlglot dialect, placeholder style sqlglot reads)
ENGINES = {e.name: (e.sqlglot_dialect, e.sqlglot_paramstyle) for e in REGISTRY
           if not e.live_here}
# one sample value per parameter name any statement uses; lists expand like the backends'
SAMPLE: dict[str, Any] = {
    "queue": "q", "payload": "{}", "priority": 0, "run_at": None, "delay_ms": 0,
    "max_attempts": 3, "key": "k", "job_id": 1, "limit": 5, "worker_id": "w",
    "lease_ms": 30000, "generation": 1, "retryable": 1, "retry_ms": 5, "error": "e",
    "version": 1, "older_than_ms": 5, "states": ("dead", "succeeded"), "ids": (1, 2),
    "extra": 1, "state": "ready", "claims": '[{"job_id": 1, "generation": 1, "worker_id": "w"}]',
    "done_ids": 0, "done_generations": 0, "after_id": 0, "name": "portq_job", "window_ms": 3600000,
    "result": "{}", "host": "h", "pid": 1, "queues": '["q"]',
    "concurrency_key": "account:42", "concurrency_limit": 1, "rate_limit": 50,
    "timeout_ms": 30000, "max_snoozes": 100, "depends_on": 1, "resolved": 0,
    "deps_left": 1, "dep_failure": 0, "every": 1, "done_flags": 0, "dep_ids": (1, 2),
    "count_unfinished": 1,
    "rate_log": "[[1,2]]",
    "concurrency": 4, "jobs_in_hand": 0, "schedules": "[]", "ttl_ms": 30000,
    "minutes": 60, "window_s": 3600, "bucket_s": 60, "any_text": 1, "pattern": "%x%",
    "after_run_at": None,
    "hash": "0" * 64, "period_ms": 5, "paused": 1, "max_running": 2,
    "fair": 1, "after": "account:41",
    "meta": '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}',
    "progress": 0.4, "note": "resized 40 of 100",
}
# the named statements SqlBackend (portq/backends/sql/) runs
BASE_QUERIES = {"create_version_table", "schema_version", "record_version", "insert_job",
                "set_progress",
                "job_id_by_key", "claim", "renew", "complete", "fail", "record_error",
                "job_errors", "release", "reap", "prune", "retry_dead", "cancel", "stats",
                "jobs", "complete_many", "renew_many", "jobs_newest", "jobs_by_run_at", "job",
                "retry_many", "cancel_many", "delete_finished", "finished_per_minute",
                "stats_series", "stats_latency",
                "expire_workers", "register_worker", "worker_heartbeat", "deregister_worker",
                "workers", "unique_ensure", "unique_lock", "unique_job", "unique_point",
                "set_paused", "queue_control", "running_count", "set_concurrency_limit",
                "paused_queues", "queue_limits", "set_rate_limit", "db_clock_ms", "set_rate_log",
                "ensure_queue", "key_running_count", "unclaim", "pending",
                "next_lease_expiry_ms", "snooze"}
CLAIM_COLUMNS = ["job_id", "queue", "payload", "priority", "attempts", "max_attempts",
                 "job_key", "lease_until", "concurrency_key", "concurrency_limit",
                 "timeout_ms", "run_at", "meta"]


def _statements(engine: str, prefix: str) -> list[tuple[str, str]]:
    """Every statement of the engine's files as the backend sends it: (label, sql)."""
    style = ENGINES[engine][1]
    out = [(f"query {name}", bind(sql, SAMPLE, style).sql)
           for name, sql in load_queries(engine, prefix).items()]
    for version, statements in load_migrations(engine, prefix):
        out += [(f"migration {version}.{i}", s) for i, s in enumerate(statements)]
    return out


# Oracle's RETURNING expr, expr INTO :a, :b is valid (one bind per expression), but
# sqlglot parses a single INTO target only: the statements are parsed with the first
# target, and test_oracle_fenced_batches_return_id_and_generation checks the whole clause.
_ORACLE_INTO_BINDS = re.compile(r"INTO :done_ids(?:, :done_\w+)+")


def _parse(engine: str, sql: str) -> list[exp.Expression]:
    if engine == "oracle":
        sql = _ORACLE_INTO_BINDS.sub("INTO :done_ids", sql)
    return [e for e in sqlglot.parse(sql, read=ENGINES[engine][0]) if e is not None]


def _one(engine: str, name: str) -> exp.Expression:
    style = ENGINES[engine][1]
    (tree,) = _parse(engine, bind(load_queries(engine)[name], SAMPLE, style).sql)
    return tree


# ---- every statement parses --------------------------------------------------------------

@pytest.mark.parametrize("prefix", ["portq_", "acme_q_"])
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_statement_parses(engine: str, prefix: str) -> None:
    statements = _statements(engine, prefix)
    assert len(statements) > 20
    for label, sql in statements:
        if label in ("query ddl_lock_wait", "query ddl_lock_nowait"):
            continue  # ALTER SESSION: not in sqlglot's grammar (tests/sql/test_sql_parse.py)
        try:
            trees = _parse(engine, sql)
        except sqlglot.errors.ParseError as exc:  # pragma: no cover - the failure message
            pytest.fail(f"{engine} {label} does not parse: {exc}\n{sql}")
        assert trees, f"{engine} {label} is empty"
        assert not any(isinstance(t, exp.Command) for t in trees), f"{engine} {label}: {sql}"
        if prefix != "portq_":
            assert "portq_" not in sql, f"{engine} {label} kept the default prefix"


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_same_protocol_as_postgres(engine: str) -> None:
    """Every statement the base class runs exists, with only the parameters it is given."""
    postgres, mine = load_queries("postgres"), load_queries(engine)
    params = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
    assert set(mine) >= BASE_QUERIES
    # an engine's extra statements get the parameters of the operation they belong to
    operation = {name: name for name in BASE_QUERIES} | {
        "claim_lock": "claim", "claimed": "claim", "reap_lock": "reap", "prune_lock": "prune",
        "retry_many_lock": "retry_many", "cancel_many_lock": "cancel_many"}
    for name, sql in mine.items():
        if name not in operation:
            continue
        allowed = set(params.findall(postgres[operation[name]])) | {"ids"}
        if name == "insert_job" and engine == "oracle":
            allowed.add("job_id")       # RETURNING job_id INTO :job_id
        if name in ("complete_many", "renew_many") and engine == "oracle":
            allowed |= {"done_ids", "done_generations"}  # RETURNING ... INTO
            if name == "complete_many":
                allowed.add("done_flags")  # has_dependents of each completed job
        used = set(params.findall(re.sub(r"'[^']*'", "", sql)))
        assert used <= allowed, f"{engine} {name} uses {used - allowed}"


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_check_constraints_match_postgres(engine: str) -> None:
    names = re.compile(r"CONSTRAINT (portq_job_\w+_ck)")
    schema = "\n".join(s for _, st in load_migrations(engine) for s in st)
    pg = "\n".join(s for _, st in load_migrations("postgres") for s in st)
    assert set(names.findall(pg)) <= set(names.findall(schema))
    assert "IS JSON" in schema or "ISJSON(payload) = 1" in schema


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_worker_registry_table_matches_postgres(engine: str) -> None:
    """Migration 3 creates portq_worker with PostgreSQL's columns, all NOT NULL."""
    def columns(e: str) -> dict[str, bool]:
        (create,) = [s for v, st in load_migrations(e) if v == 3 for s in st]
        tree = sqlglot.parse_one(create, read="postgres" if e == "postgres" else
                                 ENGINES[e][0])
        out = {}
        for col in tree.find_all(exp.ColumnDef):
            kinds = [c.kind for c in col.constraints]
            out[col.name] = any(isinstance(k, exp.NotNullColumnConstraint |
                                           exp.PrimaryKeyColumnConstraint) for k in kinds)
        return out
    assert columns(engine) == columns("postgres")
    assert all(columns(engine).values())


def test_oracle_statements_have_no_trailing_semicolon() -> None:
    for label, sql in _statements("oracle", "portq_"):
        assert not sql.rstrip().endswith(";"), label


# ---- scoped uniqueness -------------------------------------------------------------------

def test_sqlserver_scoped_key_row_is_locked_to_commit() -> None:
    """unique_lock keeps the key's row (which unique_ensure made exist) locked until
    commit, so concurrent enqueues of one key take turns; unique_ensure's probe takes no
    range lock (issue 30: insert and catch 2627 instead); the job is read with
    READCOMMITTEDLOCK (not a row version under RCSI)."""
    q = load_queries("sqlserver")
    assert "HOLDLOCK" not in q["unique_ensure"] and "UPDLOCK" not in q["unique_ensure"]
    assert "WITH (UPDLOCK, ROWLOCK, HOLDLOCK)" in q["unique_lock"]
    assert "WITH (READCOMMITTEDLOCK)" in q["unique_job"]


@pytest.mark.parametrize(("engine", "name"), [("sqlserver", "claim"), ("oracle", "claim_lock")])
def test_claims_skip_a_paused_queue(engine: str, name: str) -> None:
    """The claim's own statement checks the queue's pause flag (a primary-key probe), so
    a pause reaches every worker at its next claim."""
    sql = " ".join(load_queries(engine)[name].split())
    assert "AND NOT EXISTS (SELECT 1 FROM portq_queue" in sql
    assert "p.queue = :queue AND p.paused = 1)" in sql


def test_sqlserver_set_paused_merges_under_holdlock() -> None:
    assert "MERGE INTO portq_queue WITH (HOLDLOCK)" in load_queries("sqlserver")["set_paused"]


def test_oracle_scoped_key_row_is_locked_by_a_plain_for_update() -> None:
    q = load_queries("oracle")
    assert q["unique_lock"].rstrip().endswith("FOR UPDATE")
    assert "MERGE INTO portq_job_unique" in q["unique_ensure"]
    (tree,) = _parse("oracle", bind(q["unique_ensure"], SAMPLE, "named").sql)
    assert isinstance(tree, exp.Merge)


# ---- claim shapes ------------------------------------------------------------------------

def _hints(select: exp.Select) -> set[str]:
    table = select.args["from_"].this
    return {h.sql(dialect="tsql").upper() for hint in table.args.get("hints") or []
            for h in hint.expressions}


@pytest.mark.parametrize("name", ["claim", "reap", "prune", "retry_many", "cancel_many"])
def test_sqlserver_locking_reads_skip_locked_rows(name: str) -> None:
    tree = _one("sqlserver", name)
    assert isinstance(tree, exp.Update if name != "prune" else exp.Delete)
    cte = tree.find(exp.CTE)
    assert cte is not None
    select = cte.this
    assert isinstance(select, exp.Select)
    assert _hints(select) == {"UPDLOCK", "READPAST", "ROWLOCK", "READCOMMITTEDLOCK"}
    assert select.args.get("limit") is not None, "TOP (n) missing"
    assert select.args.get("order") is not None


def test_sqlserver_claim_orders_and_returns_claim_columns() -> None:
    tree = _one("sqlserver", "claim")
    select = tree.find(exp.CTE).this
    order = [(o.this.name, bool(o.args.get("desc"))) for o in select.args["order"].expressions]
    assert order == [("priority", True), ("run_at", False), ("job_id", False)]
    where = select.args["where"].sql(dialect="tsql")
    assert "queue = ?" in where and "state = N'ready'" in where
    assert "run_at <= SYSUTCDATETIME()" in where and "attempts < max_attempts" in where
    returning = tree.args.get("returning")
    assert returning is not None, "OUTPUT clause missing"
    assert [e.alias_or_name for e in returning.expressions] == CLAIM_COLUMNS
    assert all(e.find(exp.Column).table.lower() == "inserted" for e in returning.expressions)


def test_sqlserver_ready_index_matches_claim_order() -> None:
    *_, create = [s for _, st in load_migrations("sqlserver") for s in st
                  if s.startswith("CREATE INDEX portq_job_ready_idx")]   # the latest one
    assert "(queue, priority DESC, run_at, job_id)" in create
    assert "WHERE state = N'ready'" in create


def test_sqlserver_keyed_insert_returns_the_new_id() -> None:
    tree = _one("sqlserver", "insert_job")
    assert isinstance(tree, exp.Insert)
    assert tree.args.get("returning") is not None, "OUTPUT inserted.job_id missing"
    assert tree.find(exp.Exists) is not None, "NOT EXISTS probe of the key missing"


def test_sqlserver_durations_are_split_into_days_and_ms() -> None:
    text = "\n".join(load_queries("sqlserver").values())
    ms_terms = re.findall(r"DATEADD\(MILLISECOND, (-?)CAST\(:(\w+) % 86400000 AS INT\)", text)
    day_terms = re.findall(r"DATEADD\(DAY, (-?)CAST\(:(\w+) / 86400000 AS INT\)", text)
    assert ms_terms and sorted(ms_terms) == sorted(day_terms)
    assert text.count("DATEADD(MILLISECOND") == len(ms_terms)
    longest = 100 * 365 * 86_400_000            # portq's largest accepted duration
    assert longest // 86_400_000 < 2**31 and 86_400_000 < 2**31


def test_sqlserver_migration_lock_is_transaction_owned() -> None:
    sql = load_queries("sqlserver")["migration_lock"]
    assert re.search(r"sp_getapplock .*@LockOwner = 'Transaction'", sql, re.S)


@pytest.mark.parametrize("name", ["claim_lock", "reap_lock", "prune_lock", "retry_many_lock",
                                  "cancel_many_lock"])
def test_oracle_locking_reads_have_no_row_limit(name: str) -> None:
    sql = load_queries("oracle")[name]
    tree = _one("oracle", name)
    assert isinstance(tree, exp.Select)
    (lock,) = tree.args["locks"]
    assert lock.args.get("update") and lock.args.get("wait") is False   # SKIP LOCKED
    assert re.search(r"FOR UPDATE SKIP LOCKED$", sql)
    assert "ROWNUM" not in sql.upper() and "FETCH " not in sql.upper()
    assert tree.args.get("limit") is None and tree.args.get("fetch") is None
    # the per-key filter's scalar COUNT subquery sits in WHERE; no inline view in FROM
    assert not [s for s in tree.find_all(exp.Subquery)
                if isinstance(s.parent, exp.From | exp.Join)], "no inline view under FOR UPDATE"
    assert [e.name for e in tree.expressions] == ["job_id"]


def _index_expressions(index: str) -> list[str]:
    (create,) = [s for _, st in load_migrations("oracle") for s in st if index in s]
    tree = sqlglot.parse_one(create, read="oracle")
    cols = tree.this.args["expressions"] if tree.this.args.get("expressions") else \
        tree.find(exp.IndexParameters).args["columns"]
    return [c.sql(dialect="oracle") for c in cols]


@pytest.mark.parametrize(("query", "index"), [("claim_lock", "portq_job_ready_idx"),
                                              ("reap_lock", "portq_job_lease_idx"),
                                              ("prune_lock", "portq_job_finished_idx")])
def test_oracle_locking_reads_use_the_function_based_index(query: str, index: str) -> None:
    """WHERE and ORDER BY repeat the indexed CASE expressions, or the index is unusable."""
    indexed = _index_expressions(index)
    tree = _one("oracle", query)
    order = [o.sql(dialect="oracle") for o in tree.args["order"].expressions]
    where = tree.args["where"].sql(dialect="oracle")
    leading = re.sub(r" DESC$", "", indexed[0])
    assert leading in where
    keys = [re.sub(r" DESC$", "", c) for c in indexed]
    assert [re.sub(r" DESC$", "", o) for o in order] == keys[len(keys) - len(order):]
    assert [o.endswith(" DESC") for o in order] == \
        [c.endswith(" DESC") for c in indexed[len(indexed) - len(order):]]


def test_oracle_claim_updates_and_reads_back_claim_columns() -> None:
    update, back = _one("oracle", "claim"), _one("oracle", "claimed")
    assert isinstance(update, exp.Update) and "state = 'ready'" in update.sql(dialect="oracle")
    assert [e.name for e in back.expressions] == CLAIM_COLUMNS
    assert "RETURNING job_id INTO :job_id" in load_queries("oracle")["insert_job"]


# ---- complete_many / renew_many: one statement per batch, fenced per claim ---------------

_FENCE = [("job_id", "job_id"), ("attempts", "generation"), ("worker_id", "worker_id")]


@pytest.mark.parametrize("name", ["complete_many", "renew_many"])
def test_sqlserver_fenced_batches_join_openjson_and_output_the_claims(name: str) -> None:
    """UPDATE ... OUTPUT inserted.job_id, inserted.attempts FROM OPENJSON(?) WITH (...) JOIN
    the job table by a seek on its key, each claim fenced as the single-job statement."""
    tree = _one("sqlserver", name)
    assert isinstance(tree, exp.Update)
    returning = tree.args["returning"]
    # complete_many also says which completed jobs have dependents to release
    extra = [("inserted", "has_dependents")] if name == "complete_many" else []
    assert [(e.table.lower(), e.name) for e in returning.expressions] == \
        [("inserted", "job_id"), ("inserted", "attempts"), *extra]
    sql = load_queries("sqlserver")[name]
    assert re.search(r"FROM OPENJSON\(:claims\)\s+WITH \(job_id BIGINT '\$\.job_id', "
                     r"generation INT '\$\.generation',\s+worker_id NVARCHAR\(400\) "
                     r"'\$\.worker_id'\) AS c", sql)
    join = tree.find(exp.Join)
    assert join is not None and join.this.name == "portq_job"
    assert {h.sql(dialect="tsql").upper() for hint in join.this.args.get("hints") or []
            for h in hint.expressions} == {"FORCESEEK", "ROWLOCK"}
    on = join.args["on"].sql(dialect="tsql")
    for column, field in _FENCE:
        assert f"j.{column} = c.{field}" in on
    where = tree.args["where"].sql(dialect="tsql")
    assert "j.state = N'running'" in where and "j.lease_until > SYSUTCDATETIME()" in where


@pytest.mark.parametrize("name", ["complete_many", "renew_many"])
def test_oracle_fenced_batches_return_id_and_generation(name: str) -> None:
    """UPDATE ... WHERE (job_id, attempts, worker_id) IN (SELECT ... FROM JSON_TABLE(...))
    RETURNING job_id, attempts INTO two array binds (OracleBackend.fenced_rows)."""
    sql = load_queries("oracle")[name]
    assert sql.rstrip().endswith(
        "RETURNING job_id, attempts, has_dependents INTO :done_ids, :done_generations, "
        ":done_flags" if name == "complete_many" else
        "RETURNING job_id, attempts INTO :done_ids, :done_generations")
    tree = _one("oracle", name)
    assert isinstance(tree, exp.Update)
    table = tree.find(exp.JSONTable)
    assert table is not None and table.args["path"].this == "$[*]"
    columns = {c.this.name: (c.args["kind"].sql(dialect="oracle"), c.args["path"].this)
               for c in table.args["schema"].expressions}
    assert columns == {"job_id": ("NUMBER(19)", "$.job_id"),
                       "generation": ("NUMBER(10)", "$.generation"),
                       "worker_id": ("VARCHAR2(255 CHAR)", "$.worker_id")}
    where = tree.args["where"].sql(dialect="oracle")
    assert "(job_id, attempts, worker_id) IN (SELECT c.job_id, c.generation, c.worker_id" \
        in where
    assert "state = 'running'" in where and "lease_until > SYS_EXTRACT_UTC(SYSTIMESTAMP)" \
        in where


def test_oracle_fenced_batch_binds_claims_as_clob_and_reads_array_binds() -> None:
    """The claims go in as a CLOB (a VARCHAR bind over 4000 bytes would be LONG); each
    RETURNING bind is an array variable sized to the batch, read back row by row."""
    backend = backend_for(parse_url(ORACLE_URL))
    assert isinstance(backend, OracleBackend)

    class Var:
        def __init__(self, values: list[int]) -> None:
            self.values = values

        def getvalue(self) -> list[int]:
            return self.values

    class Lob:
        def __init__(self, kind: Any) -> None:
            self.kind, self.text = kind, ""

        def write(self, text: str) -> None:
            self.text += text

    class Cursor:
        def __init__(self) -> None:
            self.sizes: dict[str, Any] = {}
            self.vars: list[tuple[type, int]] = []
            self.sent: tuple[str, Any] | None = None
            self.connection = self

        def createlob(self, kind: Any) -> Lob:
            return Lob(kind)

        def var(self, kind: type, arraysize: int) -> Var:
            self.vars.append((kind, arraysize))
            return Var([[7, 9], [2, 1], [0, 0]][len(self.vars) - 1])

        def setinputsizes(self, **sizes: Any) -> None:
            self.sizes.update(sizes)

        def execute(self, sql: str, params: Any) -> None:
            self.sent = (sql, params)

    cur = Cursor()
    claims = '[{"job_id": 7}, {"job_id": 8}, {"job_id": 9}]'
    done = backend.fenced_rows(cur, "complete_many", {"claims": claims})
    assert done == {(7, 2), (9, 1)}
    assert cur.sizes == {}  # setinputsizes would stay on the cursor (python-oracledb #411)
    assert cur.vars == [(int, 3), (int, 3), (int, 3)]  # ids, generations, has_dependents
    assert cur.sent is not None
    sent = cur.sent[1]["claims"]
    assert isinstance(sent, Lob) and (sent.kind, sent.text) == (oracledb.DB_TYPE_CLOB, claims)
    assert "RETURNING job_id, attempts, has_dependents INTO :done_ids, :done_generations, " \
        ":done_flags" in cur.sent[0]


# ---- URLs and connection arguments -------------------------------------------------------

def test_sqlserver_connection_string() -> None:
    backend = SqlServerBackend(parse_url(MSSQL_URL))   # builds it without importing pyodbc
    assert backend.connection_string() == (
        "DRIVER={ODBC Driver 18 for SQL Server};SERVER=db.example,1433;DATABASE=portq;"
        "UID=sa;PWD={s3cr;e}}t{pw};TrustServerCertificate=yes;")
    shown = [str(backend), repr(backend), str(backend.url), repr(backend.url),
             backend.redacted_connection_string()]
    assert all(SECRET not in s and "s3cr" not in s for s in shown), shown
    assert "PWD=***" in backend.redacted_connection_string()


def test_sqlserver_url_options() -> None:
    url = parse_url("mssql+pyodbc://u:p@h/db?driver=FreeTDS&encrypt=no&login_timeout=3"
                    "&ApplicationIntent=ReadOnly")
    backend = SqlServerBackend(url)
    assert backend.driver == "FreeTDS" and backend.login_timeout_s == 3
    cs = backend.connection_string()
    assert cs.startswith("DRIVER=FreeTDS;SERVER=h;DATABASE=db;UID=u;PWD=p;")
    assert "Encrypt=no;" in cs and "ApplicationIntent=ReadOnly;" in cs
    assert SqlServerBackend(parse_url("sqlserver://h")).connection_string() == \
        "DRIVER={ODBC Driver 18 for SQL Server};SERVER=h;"


@pytest.mark.parametrize("query", ["pwd=x", "Bad%3BKey=1", "login_timeout=soon", "driver="])
def test_sqlserver_bad_url_options_never_show_the_password(query: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        SqlServerBackend(parse_url(f"mssql://sa:{SECRET.replace(';', '%3B')}@h/db?{query}"))
    assert "s3cr" not in str(info.value)


def test_odbc_value_escaping() -> None:
    assert odbc_value("plain") == "plain"
    assert odbc_value("a;b") == "{a;b}"
    assert odbc_value("a}b") == "{a}}b}"
    assert odbc_value("{x}") == "{{x}}}"
    assert odbc_value(" padded ") == "{ padded }"
    assert odbc_value("") == "{}"
    with pytest.raises(ConfigurationError):
        odbc_value("nul\0byte")


def test_oracle_connect_params() -> None:
    backend = backend_for(parse_url(ORACLE_URL))
    assert isinstance(backend, OracleBackend)
    # expire_time: keepalive probes every minute unless the URL says otherwise
    assert backend.connect_params == {"host": "db.example", "port": 1521,
                                      "service_name": "FREEPDB1", "expire_time": 1}
    assert all("s3cr" not in s for s in (str(backend), repr(backend), repr(backend.url)))
    other = OracleBackend(parse_url(
        "oracle+oracledb://app:pw@h?service_name=ORCLPDB1&tcp_connect_timeout=2.5"
        "&ssl_server_dn_match=false"))
    assert other.connect_params == {"host": "h", "port": 1521, "service_name": "ORCLPDB1",
                                    "tcp_connect_timeout": 2.5, "ssl_server_dn_match": False,
                                    "expire_time": 1}
    assert OracleBackend(parse_url("oracle://app:pw@h:1522/X?sid=ORCL&expire_time=5")
                         ).connect_params == {"host": "h", "port": 1522, "sid": "ORCL",
                                              "expire_time": 5}


@pytest.mark.parametrize("url", ["oracle://app:s3cret@h:1521", "oracle://app:s3cret@h/S?bogus=1",
                                 "oracle://app:s3cret@h/S?expire_time=soon"])
def test_oracle_bad_urls_never_show_the_password(url: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        OracleBackend(parse_url(url))
    assert "s3cret" not in str(info.value)


def test_oracle_unreachable_server_is_connection_lost_without_password() -> None:
    """A real connection attempt to a closed local port: python-oracledb's DPY-6005."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = OracleBackend(parse_url(
        f"oracle://app:{SECRET.replace(';', '%3B')}@127.0.0.1:{port}/FREEPDB1"
        "?tcp_connect_timeout=2"), pool_timeout=5)
    with pytest.raises(ConnectionLost) as info:
        backend.stats()
    assert "s3cr" not in str(info.value) and "DPY-6005" in str(info.value)
    backend.close()


# ---- missing drivers ---------------------------------------------------------------------

@pytest.mark.parametrize(("url", "driver", "extra"), [
    (MSSQL_URL, "pyodbc", "sqlserver"), (ORACLE_URL, "oracledb", "oracle")])
def test_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch, url: str, driver: str,
                                        extra: str) -> None:
    monkeypatch.setitem(sys.modules, driver, None)   # makes `import driver` fail
    with pytest.raises(DriverMissingError) as info:
        backend_for(parse_url(url))
    assert f"pip install 'portq[{extra}]'" in str(info.value)
    assert "s3cr" not in str(info.value)


def pyodbc_or_skip() -> Any:
    """pyodbc, or a skip naming the system library it needs and how to install it."""
    try:
        return import_driver("sqlserver")
    except DriverMissingError as exc:
        pytest.skip(str(exc))


def test_missing_odbc_driver_lists_installed_drivers() -> None:
    pyodbc_or_skip()
    backend = SqlServerBackend(parse_url(
        "mssql://sa:s3cret@127.0.0.1/db?driver=No Such ODBC Driver 99"))
    with pytest.raises(DriverMissingError) as info:
        backend.connect()
    assert "No Such ODBC Driver 99" in str(info.value) and "FreeTDS" in str(info.value)
    assert "s3cret" not in str(info.value)


# ---- error classification on real driver exceptions --------------------------------------

def test_native_error_extraction() -> None:
    msg = ("[23000] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]Violation of "
           "UNIQUE KEY constraint 'portq_job_key_uq'. The duplicate key value is (12345). "
           "(2627) (SQLExecDirectW); [23000] [Microsoft][ODBC Driver 18 for SQL Server]"
           "[SQL Server]The statement has been terminated. (3621)")
    exc = Exception("23000", msg)
    assert native_errors(exc) == [2627]
    assert sqlstate(exc) == "23000"
    assert sqlstate(Exception("no state here")) == ""


def _odbc(cls: str, state: str, text: str, code: int) -> BaseException:
    pyodbc = pyodbc_or_skip()
    error: BaseException = getattr(pyodbc, cls)(
        state, f"[{state}] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]{text} "
               f"({code}) (SQLExecDirectW)")
    return error


@pytest.mark.parametrize(("cls", "state", "text", "code", "kind"), [
    ("IntegrityError", "23000", "Violation of UNIQUE KEY constraint 'k'.", 2627,
     ErrorKind.UNIQUE),
    ("IntegrityError", "23000", "Cannot insert duplicate key row with unique index 'k'.", 2601,
     ErrorKind.UNIQUE),
    ("IntegrityError", "23000", "The INSERT statement conflicted with the CHECK constraint.",
     547, ErrorKind.CHECK),
    ("IntegrityError", "23000", "Cannot insert the value NULL into column 'queue'.", 515,
     ErrorKind.CHECK),
    ("Error", "40001", "Transaction (Process ID 52) was deadlocked on lock resources.", 1205,
     ErrorKind.RETRYABLE),
    ("Error", "HY000", "Lock request time out period exceeded.", 1222, ErrorKind.RETRYABLE),
    ("OperationalError", "08S01", "TCP Provider: Error code 0x2746", 10054,
     ErrorKind.CONNECTION),
    ("OperationalError", "08001", "Login timeout expired", 0, ErrorKind.CONNECTION),
    ("ProgrammingError", "42S02", "Invalid object name 'portq_job'.", 208,
     ErrorKind.UNDEFINED_TABLE),
    ("InterfaceError", "28000", "Login failed for user 'sa'.", 18456, ErrorKind.LOGIN),
    # 4060 comes with 18456 in one message: the missing database is what to report
    ("InterfaceError", "42000", "Cannot open database \"shop\" requested by the login. The "
     "login failed. (4060) (SQLDriverConnect); [28000] Login failed for user 'sa'.", 18456,
     ErrorKind.UNKNOWN_DATABASE),
])
def test_sqlserver_classify(cls: str, state: str, text: str, code: int,
                            kind: ErrorKind) -> None:
    backend = SqlServerBackend(parse_url("mssql://sa:pw@h/db"))
    assert backend.classify(_odbc(cls, state, text, code)) is kind
    assert backend.classify(ValueError("(2627) (SQLExecDirectW)")) is ErrorKind.OTHER


def _ora(message: str, code: int = 0) -> BaseException:
    err = oracle_errors._Error(message, code=code)
    exc: BaseException = err.exc_type(err)
    return exc


@pytest.mark.parametrize(("message", "code", "kind"), [
    ("ORA-00001: unique constraint (APP.PORTQ_JOB_KEY_UQ) violated", 1, ErrorKind.UNIQUE),
    ("ORA-02290: check constraint (APP.PORTQ_JOB_RUNNING_CK) violated", 2290, ErrorKind.CHECK),
    ('ORA-01400: cannot insert NULL into ("APP"."PORTQ_JOB"."QUEUE")', 1400, ErrorKind.CHECK),
    ("ORA-00060: deadlock detected while waiting for resource", 60, ErrorKind.RETRYABLE),
    ("ORA-00054: resource busy and acquire with NOWAIT specified", 54, ErrorKind.RETRYABLE),
    ("ORA-08177: can't serialize access for this transaction", 8177, ErrorKind.RETRYABLE),
    ("ORA-30006: resource busy; acquire with WAIT timeout expired", 30006,
     ErrorKind.RETRYABLE),
    ("ORA-03113: end-of-file on communication channel", 3113, ErrorKind.CONNECTION),
    ("ORA-03135: connection lost contact", 3135, ErrorKind.CONNECTION),
    ("ORA-12541: TNS:no listener", 12541, ErrorKind.CONNECTION),
    ("ORA-00942: table or view does not exist", 942, ErrorKind.UNDEFINED_TABLE),
    ("ORA-01017: invalid username/password; logon denied", 1017, ErrorKind.LOGIN),
    ("ORA-28000: The account is locked.", 28000, ErrorKind.LOGIN),
    ("ORA-12514: TNS:listener does not currently know of service requested", 12514,
     ErrorKind.UNKNOWN_DATABASE),
])
def test_oracle_classify(message: str, code: int, kind: ErrorKind) -> None:
    backend = OracleBackend(parse_url(ORACLE_URL))
    exc = _ora(message, code)
    assert isinstance(exc, oracledb.Error)
    assert backend.classify(exc) is kind
    assert oracle_codes(exc)[0] == code


def test_oracle_classify_driver_errors() -> None:
    backend = OracleBackend(parse_url(ORACLE_URL))
    not_connected = oracle_errors._create_err(oracle_errors.ERR_NOT_CONNECTED)
    assert backend.classify(not_connected.exc_type(not_connected)) is ErrorKind.CONNECTION
    closed = _ora("ORA-03114: not connected to ORACLE", 3114)
    assert oracle_codes(closed) == (3114, "DPY-4011")
    assert oracle_codes(_ora("ORA-00001: unique constraint (X) violated")) == (1, "")
    assert backend.classify(KeyError("ORA-00001")) is ErrorKind.OTHER


# ---- throwaway servers -------------------------------------------------------------------

def test_container_url_without_docker_returns_none_at_once() -> None:
    import time

    from portq.conformance.containers import container_url, docker_available

    assert container_url("no-such-engine") is None
    if docker_available():
        pytest.skip("Docker is reachable here: starting containers is the conformance run's job")
    began = time.monotonic()
    assert container_url("sqlserver") is None and container_url("oracle") is None
    assert time.monotonic() - began < 5


@pytest.mark.parametrize("engine", [e.name for e in REGISTRY])
@pytest.mark.parametrize("name", ["jobs", "jobs_newest", "jobs_by_run_at"])
def test_payload_search_escapes_like_with_the_character_portq_escapes(engine: str,
                                                                     name: str) -> None:
    """like_pattern() escapes %, _ and ! with '!': every listing's LIKE must say ESCAPE '!'
    and compare the lower-cased payload (the pattern is lower-cased)."""
    from portq.backends.base import like_pattern
    assert like_pattern("5%_!") == "%5!%!_!!%"
    sql = load_queries(engine)[name]
    assert re.search(r"LOWER\((CAST\()?payload(::text| AS CHAR\))?\) LIKE :pattern "
                     r"ESCAPE N?'!'", sql, re.I), sql


def test_sqlserver_minute_buckets_count_seconds_and_group_by_the_same_expression() -> None:
    _one("sqlserver", "finished_per_minute")  # parses
    sql = load_queries("sqlserver")["finished_per_minute"]
    bucket = "DATEDIFF(SECOND, finished_at, SYSUTCDATETIME()) / 60"
    assert sql.count(bucket) == 2, sql  # selected and grouped by
    assert "DATEADD(MINUTE, -CAST(:minutes AS INT), SYSUTCDATETIME())" in sql


def test_oracle_minute_buckets_use_the_finished_index_expression() -> None:
    sql = load_queries("oracle")["finished_per_minute"]
    index = _index_expressions("portq_job_finished_idx")
    tree = _one("oracle", "finished_per_minute")
    where = tree.args["where"].sql(dialect="oracle")
    assert index[0] in where, (index, where)
    assert sql.count("FLOOR((CAST(SYS_EXTRACT_UTC(SYSTIMESTAMP) AS DATE) - "
                     "CAST(finished_at AS DATE)) * 1440)") == 2


# ---- pending: a burst worker's exit test (index probes, not a count of the table) --------

def _exists_selects(tree: exp.Expression) -> list[exp.Select]:
    """The subquery of each EXISTS in the statement, in order."""
    return [e.this for e in tree.find_all(exp.Exists)]


def test_sqlserver_pending_probes_the_filtered_indexes_and_skips_locked_rows() -> None:
    """Two EXISTS probes, each a plain read with `stats`' hints whose literal state implies
    one filtered index's filter (a parameter cannot: docs/engines.md, "Prune and the
    filtered index"), answered as two 0/1 columns (searched CASE)."""
    tree = _one("sqlserver", "pending")
    assert isinstance(tree, exp.Select) and len(tree.expressions) == 2
    assert all(isinstance(e, exp.Case) for e in tree.expressions)
    ready, running = _exists_selects(tree)
    for select in (ready, running):
        assert select.args["from_"].this.name == "portq_job"
        assert _hints(select) == {"READPAST", "READCOMMITTEDLOCK"}
    ready_where = ready.args["where"].sql(dialect="tsql")
    assert "state = N'ready'" in ready_where and "run_at <= SYSUTCDATETIME()" in ready_where
    assert "state = N'running'" in running.args["where"].sql(dialect="tsql")
    schema = " ".join(s for _, st in load_migrations("sqlserver") for s in st)
    assert "portq_job_running_idx ON portq_job (queue) WHERE state = N'running'" in schema


def test_oracle_pending_repeats_the_function_based_index_expressions() -> None:
    """The running probe's WHERE repeats the running index's leading CASE expression
    (else the function-based index is unusable), selected FROM dual; the ready half is a
    cursor of its own (``pending_ready``) whose WHERE repeats the ready index's CASE
    expressions and which skips rows other sessions hold locked, as the claim does (FOR
    UPDATE may not stand in an EXISTS subquery)."""
    tree = _one("oracle", "pending")
    assert isinstance(tree, exp.Select) and len(tree.expressions) == 1
    assert tree.args["from_"].this.name.lower() == "dual"
    (running,) = _exists_selects(tree)
    (running_index,) = _index_expressions("portq_job_running_idx")
    assert running_index in running.args["where"].sql(dialect="oracle")
    ready_sql = " ".join(load_queries("oracle")["pending_ready"].split())
    assert ready_sql.endswith("FOR UPDATE SKIP LOCKED")
    ready_where = _one("oracle", "pending_ready").args["where"].sql(dialect="oracle")
    ready_index = _index_expressions("portq_job_ready_idx")
    assert ready_index[0] in ready_where
    assert re.sub(r" DESC$", "", ready_index[2]) + " <= SYS_EXTRACT_UTC(SYSTIMESTAMP)" \
        in ready_where


def test_sqlserver_next_lease_expiry_reads_the_filtered_lease_index_in_milliseconds() -> None:
    """DATEDIFF_BIG(MILLISECOND, now, MIN(lease_until)) (DATEDIFF_BIG: SQL Server 2016+,
    bigint, no overflow for long leases) over running rows only, the filtered lease index's
    filter written as a literal, with the reads' READPAST/READCOMMITTEDLOCK hints."""
    tree = _one("sqlserver", "next_lease_expiry_ms")
    assert isinstance(tree, exp.Select)
    sql = tree.sql(dialect="tsql")
    assert "DATEDIFF_BIG(MILLISECOND, SYSUTCDATETIME(), MIN(lease_until))" in \
        " ".join(load_queries("sqlserver")["next_lease_expiry_ms"].split())
    assert "state = N'running'" in sql
    assert _hints(tree) == {"READPAST", "READCOMMITTEDLOCK"}
    schema = " ".join(s for _, st in load_migrations("sqlserver") for s in st)
    assert "portq_job_lease_idx ON portq_job (lease_until) WHERE state = N'running'" in schema


def test_oracle_next_lease_expiry_extracts_the_interval_exactly() -> None:
    """TIMESTAMP - TIMESTAMP is an INTERVAL DAY TO SECOND; the value is its DAY, HOUR,
    MINUTE and SECOND fields added up (no cast to DATE, whose rounding is not documented),
    and MIN() is taken over the lease index's own CASE expression."""
    sql = " ".join(load_queries("oracle")["next_lease_expiry_ms"].split())
    for field in ("DAY", "HOUR", "MINUTE", "SECOND"):
        assert f"EXTRACT({field} FROM d)" in sql
    assert "CAST(" not in sql
    assert "MIN(CASE WHEN state = 'running' THEN lease_until END)" in sql
    assert "SYS_EXTRACT_UTC(SYSTIMESTAMP)" in sql
    schema = " ".join(" ".join(s.split()) for _, st in load_migrations("oracle") for s in st)
    assert "portq_job_lease_idx ON portq_job ( CASE WHEN state = 'running' THEN lease_until " \
        "END)" in schema


def test_release_decides_from_the_rows_old_values_on_sqlserver_and_oracle() -> None:
    """T-SQL and Oracle evaluate every SET expression against the row before the UPDATE
    (SQL-92 <update statement: searched>, General Rule 6), so release's CASEs all read the
    old given_back and max_attempts; the last_error of a spent give-back is CLOB-typed on
    Oracle (TO_CLOB) to match last_error in the CASE."""
    for engine in ("sqlserver", "oracle"):
        sql = " ".join(load_queries(engine)["release"].split())
        assert sql.count("2 * given_back < max_attempts") == 5, engine
        assert "max_attempts = max_attempts + CASE WHEN 2 * given_back < max_attempts" in sql
        assert "given_back = given_back + CASE WHEN 2 * given_back < max_attempts" in sql
        tree = _one(engine, "release")
        assert isinstance(tree, exp.Update)
    assert "TO_CLOB('given back unstarted '" in load_queries("oracle")["release"]


def test_snooze_is_fenced_and_bounded_on_sqlserver_and_oracle() -> None:
    """snooze repeats the owner's guard (generation, worker, running, unexpired lease; the
    worker id compared by DATALENGTH of an NVARCHAR on SQL Server) and stops at
    :max_snoozes; the delay is added as days plus milliseconds (DATEADD takes an int) on
    SQL Server and as NUMTODSINTERVAL seconds on Oracle."""
    ss = " ".join(load_queries("sqlserver")["snooze"].split())
    assert "DATALENGTH(worker_id) = DATALENGTH(CAST(:worker_id AS NVARCHAR(400)))" in ss
    assert "DATEADD(DAY, CAST(:delay_ms / 86400000 AS INT), SYSUTCDATETIME())" in ss
    ora = " ".join(load_queries("oracle")["snooze"].split())
    assert "NUMTODSINTERVAL(:delay_ms / 1000, 'SECOND')" in ora
    for sql in (ss, ora):
        assert "attempts = :generation AND worker_id = :worker_id" in sql
        assert "snoozes < :max_snoozes" in sql and "max_attempts = max_attempts + 1" in sql


def test_migration_9_fills_existing_rows_on_sqlserver_and_oracle() -> None:
    """The counters are added NOT NULL with a DEFAULT, which existing rows get: on SQL
    Server a NOT NULL column's default fills existing rows (WITH VALUES is for nullable
    ones; ALTER TABLE, column_definition), on Oracle DEFAULT ... NOT NULL."""
    ss = " ".join(" ".join(st.split()) for v, sts in load_migrations("sqlserver") if v == 9
                  for st in sts)
    assert "snoozes INT NOT NULL CONSTRAINT portq_job_snoozes_df DEFAULT 0" in ss
    assert "given_back INT NOT NULL CONSTRAINT portq_job_given_back_df DEFAULT 0" in ss
    ora = " ".join(" ".join(st.split()) for v, sts in load_migrations("oracle") if v == 9
                   for st in sts)
    assert "snoozes NUMBER(10) DEFAULT 0 NOT NULL" in ora
    assert "given_back NUMBER(10) DEFAULT 0 NOT NULL" in ora
