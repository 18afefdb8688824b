"""Issue 30: the SQL Server and Oracle defects a second review found (items 1-10), one test
(or a few) per fact; each fails on the code before the fix. Sources are cited in
docs/engines.md ("Second review (issue 30)" under SQL Server and Oracle).

No SQL Server or Oracle server runs here: these tests read the SQL (sqlglot), call the
installed drivers' own code where it runs without a server (mssql-python's parameter
mapping, its login timeout against a closed port), and drive the backends with the
driver-protocol stand-ins of tests/sql/test_sqlserver_oracle_schema_locks_logins.py (a
cursor that plays back what pyodbc / python-oracledb document; never a database's
behaviour).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlglot
from sqlglot import exp
from test_sqlserver_oracle_schema_locks_logins import ScriptedCursor, _closed_port, _OracleCursor
from test_sqlserver_oracle_sql import SAMPLE, _ora

from portq.backends.base import SqlBackend
from portq.errors import (
    CannotConnect,
    ConnectionLost,
    DatabaseError,
    SchemaError,
    SchemaMissingError,
)
from portq.job import Claim
from portq.sql import bind, load_migrations, load_queries
from portq.url import parse_url

oracledb = pytest.importorskip("oracledb")

from portq.backends import oracle as oracle_backend  # noqa: E402
from portq.backends.oracle import (  # noqa: E402
    DDL_BUSY_RETRIES,
    TIMESTAMP_BINDS,
    OracleBackend,
)
from portq.backends.sqlserver import (  # noqa: E402
    MIN_COMPATIBILITY_LEVEL,
    PYODBC_NTEXT_AFTER,
    SQL_ATTR_LOGIN_TIMEOUT,
    SQL_WVARCHAR,
    SqlServerBackend,
    long_text_sizes,
)

PYODBC_URL = "mssql://sa:pw@h:1433/db"
MSSQL_PYTHON_URL = "mssql+mssqlpython://sa:pw@h:1433/db"


def _mssql(url: str = PYODBC_URL) -> SqlServerBackend:
    return SqlServerBackend(parse_url(url))


def _oracle() -> OracleBackend:
    return OracleBackend(parse_url("oracle://app:pw@h/S"))


def _tsql(name: str, params: dict[str, Any] | None = None) -> exp.Expression:
    sql = bind(load_queries("sqlserver")[name], params or SAMPLE, "qmark").sql
    (tree,) = [t for t in sqlglot.parse(sql, read="tsql") if t is not None]
    return tree


def _hints(table: exp.Expression) -> set[str]:
    """The table hints of a T-SQL table reference: WITH (A, B) -> {"A", "B"}."""
    text = " ".join(h.sql("tsql").upper() for h in table.args.get("hints") or [])
    return {w.strip() for w in text.replace("WITH (", "").rstrip(")").split(",") if w.strip()}


def _placeholders_in(node: exp.Expression) -> int:
    return len(list(node.find_all(exp.Placeholder)))


# ---- 1: a bound worker id is cast to NVARCHAR before DATALENGTH ----------------------------

FENCED = ("renew", "complete", "fail", "release", "lock_owned_job", "unclaim")


@pytest.mark.parametrize("name", FENCED)
def test_sqlserver_datalength_of_a_parameter_is_of_its_nvarchar_cast(name: str) -> None:
    """DATALENGTH(:worker_id) of an ASCII id bound as VARCHAR (mssql-python) is half the
    NVARCHAR column's: the fenced write would never match. Every DATALENGTH over a
    parameter measures it cast to the column's type."""
    lengths = list(_tsql(name).find_all(exp.Length, exp.Anonymous, exp.Func))
    measured = [f for f in lengths if f.sql("tsql").upper().startswith("DATALENGTH(")]
    assert len(measured) == 2, name
    over_params = [f for f in measured if _placeholders_in(f)]
    assert len(over_params) == 1, name
    cast = over_params[0].find(exp.Cast)
    assert cast is not None and cast.to.sql("tsql").upper() == "NVARCHAR(400)", name


def test_sqlserver_no_statement_measures_or_hashes_a_raw_parameter() -> None:
    """The audit: across every statement, a parameter inside DATALENGTH, or compared with
    the CHAR(64) scoped-key hash, is cast to the column's type first."""
    for name, sql in load_queries("sqlserver").items():
        flat = " ".join(sql.split())
        assert "DATALENGTH(:" not in flat, name
        assert "unique_hash = :hash" not in flat, name
        if ":hash" in flat:
            assert flat.count(":hash") == flat.count("CAST(:hash AS CHAR(64))"), name


def test_mssql_python_binds_an_ascii_str_as_varchar_and_other_text_as_nvarchar() -> None:
    """The driver fact, through mssql-python's own parameter mapping: an ASCII-only worker
    id goes as SQL_VARCHAR of its length in bytes (1 per character), one with any other
    character as SQL_WVARCHAR."""
    cursor_module = pytest.importorskip("mssql_python.cursor")
    constants = pytest.importorskip("mssql_python.constants").ConstantsDDBC
    cursor = object.__new__(cursor_module.Cursor)   # the mapping needs no connection
    ascii_id, wide_id = "host:123:worker", "hôst:123:worker"
    sql_type, _, size, _, _ = cursor._map_sql_type(ascii_id, [ascii_id], 0)
    assert (sql_type, size) == (constants.SQL_VARCHAR.value, len(ascii_id))
    sql_type, _, size, _, _ = cursor._map_sql_type(wide_id, [wide_id], 0)
    assert (sql_type, size) == (constants.SQL_WVARCHAR.value, len(wide_id))


# ---- 2: mssql-python's login timeout is a connection attribute -----------------------------

def test_mssql_python_gets_the_login_timeout_as_sql_attr_login_timeout() -> None:
    backend = _mssql(MSSQL_PYTHON_URL + "?login_timeout=7")
    assert backend.login_timeout_kwargs() == {"attrs_before": {SQL_ATTR_LOGIN_TIMEOUT: 7}}
    assert _mssql(PYODBC_URL + "?login_timeout=7").login_timeout_kwargs() == {"timeout": 7}


def test_the_login_timeout_attribute_is_odbcs_in_both_drivers() -> None:
    constants = pytest.importorskip("mssql_python.constants").ConstantsDDBC
    assert constants.SQL_ATTR_LOGIN_TIMEOUT.value == SQL_ATTR_LOGIN_TIMEOUT
    pyodbc = _pyodbc()
    assert pyodbc.SQL_ATTR_LOGIN_TIMEOUT == SQL_ATTR_LOGIN_TIMEOUT


def test_mssql_python_login_timeout_bounds_a_connection_attempt() -> None:
    """Through mssql-python's real driver against a closed port: with ?login_timeout=1 the
    attempt ends after about a second (the driver's default login timeout is 15 s), so the
    attribute reaches the driver; no query timeout is set by portq at all."""
    pytest.importorskip("mssql_python")
    import ctypes.util
    if ctypes.util.find_library("ltdl") is None:
        pytest.skip("mssql-python's driver needs libltdl7 (apt-get install libltdl7)")
    backend = SqlServerBackend(parse_url(
        f"mssql+mssqlpython://sa:pw@127.0.0.1:{_closed_port()}/db?login_timeout=1"
        "&Encrypt=no"), pool_timeout=30)
    started = time.monotonic()
    with pytest.raises((ConnectionLost, CannotConnect)):
        backend.stats()
    elapsed = time.monotonic() - started
    assert 0.8 <= elapsed < 6, elapsed


# ---- 3: pyodbc sends long text as nvarchar(max), never ntext -------------------------------

def _pyodbc() -> Any:
    try:
        import pyodbc
    except ImportError as exc:
        pytest.skip(f"pyodbc does not load here ({exc}): apt-get install unixodbc")
    return pyodbc


def test_long_text_goes_as_nvarchar_max() -> None:
    """More than 2000 UTF-16 code units: (SQL_WVARCHAR, 0, 0), nvarchar(max); up to 2000
    pyodbc's own choice (None), and no setinputsizes list at all without long text."""
    limit = PYODBC_NTEXT_AFTER
    assert long_text_sizes(["x" * limit, 5, None]) is None
    assert long_text_sizes(["x" * (limit + 1), 5]) == [(SQL_WVARCHAR, 0, 0), None]
    astral = "😀" * (limit // 2 + 1)       # 1001 characters, 2002 UTF-16 code units
    assert long_text_sizes([astral]) == [(SQL_WVARCHAR, 0, 0)]
    assert _pyodbc().SQL_WVARCHAR == SQL_WVARCHAR


def test_pyodbc_backend_sets_input_sizes_before_every_statement() -> None:
    """A payload, an error text and a completion batch of 30 claims are over 2000
    characters; setinputsizes(None) before a statement without long text clears the last
    statement's sizes (pyodbc keeps them on the cursor)."""
    claims = [Claim(job_id=10_000 + i, generation=1, worker_id=f"host-{i}:12345:worker",
                    lease_until=datetime.now(UTC)) for i in range(30)]
    claims_json = SqlBackend.claims_json(claims)
    assert len(claims_json) > PYODBC_NTEXT_AFTER
    backend = _mssql()
    cur = ScriptedCursor([[]], [[]])
    backend.execute(cur, "complete_many", {"claims": claims_json})
    backend.execute(cur, "job", {"job_id": 1})
    assert cur.input_sizes == [{"positional": [(SQL_WVARCHAR, 0, 0)]},
                               {"positional": None}]
    mssql_python = _mssql(MSSQL_PYTHON_URL)   # not pyodbc: it binds long text as (n)varchar(max)
    cur = ScriptedCursor([[]])
    mssql_python.execute(cur, "complete_many", {"claims": claims_json})
    assert cur.input_sizes == []


def test_mssql_python_sends_long_text_as_a_max_type_not_ntext() -> None:
    """mssql-python's own mapping of text over 4000 code units: data at execution of
    SQL_VARCHAR / SQL_WVARCHAR with column size 0 (a max type), never SQL_WLONGVARCHAR."""
    cursor_module = pytest.importorskip("mssql_python.cursor")
    constants = pytest.importorskip("mssql_python.constants").ConstantsDDBC
    cursor = object.__new__(cursor_module.Cursor)
    for text, sql_type in (("x" * 5000, constants.SQL_VARCHAR.value),
                           ("é" * 5000, constants.SQL_WVARCHAR.value)):
        mapped = cursor._map_sql_type(text, [text], 0)
        assert (mapped[0], mapped[2], mapped[4]) == (sql_type, 0, True)


# ---- 4: OPENJSON needs compatibility level 130 ---------------------------------------------

@pytest.mark.parametrize(("level", "ok"), [(100, False), (120, False), (130, True), (160, True)])
def test_compatibility_level_below_130_is_one_clear_error(level: int, ok: bool) -> None:
    backend = _mssql()
    cur = ScriptedCursor([[(level, "shop")]])
    if ok:
        backend.check_compatibility(cur)
    else:
        wanted = f"SET COMPATIBILITY_LEVEL = {MIN_COMPATIBILITY_LEVEL}"
        with pytest.raises(SchemaError, match=rf"compatibility level {level}.*{wanted}"):
            backend.check_compatibility(cur)
    sql = " ".join(cur.executed[0].split())
    assert "FROM sys.databases WHERE database_id = DB_ID()" in sql


def test_openjson_unknown_is_not_reported_as_missing_tables() -> None:
    """Below level 130 OPENJSON is "Invalid object name" (208), which classify maps to a
    missing table: the error says compatibility level, not "run portq migrate"."""
    backend = _mssql()
    error = Exception("42S02", "[42S02] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]"
                               "Invalid object name 'OPENJSON'. (208) (SQLExecDirectW)")
    from portq.backends.base import ErrorKind
    made = backend.translate("complete_many", error, ErrorKind.UNDEFINED_TABLE)
    assert isinstance(made, SchemaError) and not isinstance(made, SchemaMissingError)
    assert "COMPATIBILITY_LEVEL = 130" in str(made)
    table = Exception("42S02", "Invalid object name 'portq_job'. (208) (SQLExecDirectW)")
    assert isinstance(backend.translate("stats", table, ErrorKind.UNDEFINED_TABLE),
                      SchemaMissingError)


def test_migrate_and_check_schema_read_the_compatibility_level_first() -> None:
    import inspect
    for method in (SqlServerBackend.migrate, SqlServerBackend.check_schema):
        assert "check_compatibility" in inspect.getsource(method)


# ---- 5: every listing reads past locked rows and returns the key as text ------------------

LISTINGS = ("jobs", "jobs_newest", "jobs_by_run_at", "job_errors", "stats", "pending")


@pytest.mark.parametrize("name", LISTINGS)
def test_sqlserver_every_listing_reads_past_locked_rows(name: str) -> None:
    """With READ_COMMITTED_SNAPSHOT off a plain read waits on an uncommitted enqueue;
    READPAST skips it, READCOMMITTEDLOCK keeps READPAST legal with it on."""
    tree = _tsql(name)
    tables = [t for t in tree.find_all(exp.Table) if t.name in ("portq_job", "portq_job_error")]
    assert tables, name
    for table in tables:
        assert {"READPAST", "READCOMMITTEDLOCK"} <= _hints(table), name


@pytest.mark.parametrize("name", ("jobs", "jobs_newest", "jobs_by_run_at", "job"))
def test_sqlserver_listings_return_the_key_as_text(name: str) -> None:
    """job_key is VARBINARY (the key's UTF-16LE bytes): the eighth column, read into
    JobRecord.key, is CAST(job_key AS NVARCHAR(510)), never the raw bytes."""
    select = _tsql(name)
    key = select.expressions[7]
    assert isinstance(key, exp.Cast) and key.this.name == "job_key", key.sql("tsql")
    assert key.to.sql("tsql").upper() == "NVARCHAR(510)"


# ---- 6: scoped-key and queue rows: insert and catch 2627, no range locks ------------------

@pytest.mark.parametrize("name", ("unique_ensure", "ensure_queue"))
def test_sqlserver_make_if_missing_takes_no_range_lock(name: str) -> None:
    sql = load_queries("sqlserver")[name].upper()
    assert "HOLDLOCK" not in sql and "UPDLOCK" not in sql and "SERIALIZABLE" not in sql
    assert "WHERE NOT EXISTS" in sql


def _duplicate() -> Exception:
    pyodbc = _pyodbc()
    made: Exception = pyodbc.IntegrityError(
        "23000", "[23000] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]Violation of "
                 "PRIMARY KEY constraint 'portq_job_unique_pk'. Cannot insert duplicate key "
                 "in object 'dbo.portq_job_unique'. (2627) (SQLExecDirectW)")
    return made


def test_sqlserver_concurrent_first_insert_of_a_scoped_key_is_caught() -> None:
    backend = _mssql()
    cur = ScriptedCursor([_duplicate()], [[(1,)]])     # 2627, then XACT_STATE() = 1
    backend.ensure_row(cur, "unique_ensure", {"hash": "0" * 64})
    assert "XACT_STATE()" in cur.executed[-1]


def test_sqlserver_scoped_key_conflict_under_xact_abort_is_one_clear_error() -> None:
    backend = _mssql()
    cur = ScriptedCursor([_duplicate()], [[(-1,)]])    # the transaction is doomed
    with pytest.raises(DatabaseError, match="XACT_ABORT ON"):
        backend.ensure_row(cur, "unique_ensure", {"hash": "0" * 64})


# ---- 7: the minor ones -----------------------------------------------------------------

def _migration(engine: str, version: int) -> list[str]:
    return [" ".join(s.split()) for v, ss in load_migrations(engine) if v == version for s in ss]


def test_sqlserver_registry_worker_ids_are_binary() -> None:
    """Migration 8: W1 and w1 are two workers. The primary key blocks ALTER COLUMN's
    collation change, so it is dropped first and added after."""
    steps = _migration("sqlserver", 8)
    drop = steps.index("ALTER TABLE portq_worker DROP CONSTRAINT portq_worker_pk")
    alter = steps.index("ALTER TABLE portq_worker ALTER COLUMN worker_id NVARCHAR(200) "
                        "COLLATE Latin1_General_100_BIN2 NOT NULL")
    add = steps.index("ALTER TABLE portq_worker ADD CONSTRAINT portq_worker_pk PRIMARY KEY "
                      "(worker_id)")
    assert drop < alter < add


def test_sqlserver_ready_index_covers_the_claims_key_filter() -> None:
    steps = _migration("sqlserver", 8)
    create = next(s for s in steps if s.startswith("CREATE INDEX portq_job_ready_idx"))
    assert "INCLUDE (attempts, max_attempts, concurrency_key, concurrency_limit)" in create
    assert "WHERE state = N'ready'" in create
    assert steps.index("DROP INDEX portq_job_ready_idx ON portq_job") < steps.index(create)


def test_sqlserver_result_ownership_lock_reads_the_committed_row() -> None:
    tree = _tsql("lock_owned_job")
    (table,) = list(tree.find_all(exp.Table))
    assert {"UPDLOCK", "ROWLOCK", "READCOMMITTEDLOCK"} <= _hints(table)


def test_sqlserver_prune_deadlock_is_retried() -> None:
    """A prune chosen as deadlock victim (1205: its cascading deletes met an error or result
    insert) is run again by SqlBackend.run, in a new transaction, up to max_retries."""
    pyodbc = _pyodbc()
    backend = _mssql()
    victim = pyodbc.Error("40001", "[40001] [Microsoft][ODBC Driver 18 for SQL Server][SQL "
                                   "Server]Transaction (Process ID 61) was deadlocked on lock "
                                   "resources with another process and has been chosen as the "
                                   "deadlock victim. Rerun the transaction. (1205) "
                                   "(SQLExecDirectW)")
    from contextlib import contextmanager
    tries: list[int] = []

    @contextmanager
    def transaction(*args: Any, **kw: Any) -> Any:   # the pool needs a server: one cursor
        yield ScriptedCursor()

    def prune_rows(cur: Any, params: dict[str, Any]) -> int:
        tries.append(1)
        if len(tries) < 3:
            raise victim
        return 7

    backend.transaction = transaction  # type: ignore[method-assign]
    backend.prune_rows = prune_rows    # type: ignore[method-assign]
    assert backend.prune(60_000, 100, ("succeeded",)) == 7 and len(tries) == 3


def test_sqlserver_times_are_bound_as_iso_text_and_cast_to_datetime2_6() -> None:
    """Microseconds survive whatever the driver does with a datetime parameter: pyodbc
    cuts the fraction to the precision the ODBC driver reports for SQL_TYPE_TIMESTAMP,
    FreeTDS drops it. The text is ISO 8601 (independent of SET LANGUAGE / DATEFORMAT) and
    every statement reading a bound time casts it to DATETIME2(6)."""
    when = datetime(2026, 12, 5, 1, 2, 3, 456789, tzinfo=UTC)
    assert _mssql().to_db_time(when) == "2026-12-05T01:02:03.456789"
    assert _mssql().to_db_time(when.astimezone().replace(microsecond=7)).endswith(".000007")
    for name, param in (("insert_job", "run_at"), ("jobs_by_run_at", "after_run_at")):
        sql = " ".join(load_queries("sqlserver")[name].split())
        assert sql.count(f":{param}") == sql.count(f"CAST(:{param} AS DATETIME2(6))") > 0


def test_mssql_python_would_keep_microseconds_of_a_datetime_too() -> None:
    """mssql-python's own mapping of a naive datetime: SQL_TYPE_TIMESTAMP with 6 decimal
    digits (pyodbc's depends on the ODBC driver, hence the text binding above)."""
    cursor_module = pytest.importorskip("mssql_python.cursor")
    constants = pytest.importorskip("mssql_python.constants").ConstantsDDBC
    cursor = object.__new__(cursor_module.Cursor)
    value = datetime(2026, 1, 1, 0, 0, 0, 123456)
    sql_type, _, _, digits, _ = cursor._map_sql_type(value, [value], 0)
    assert (sql_type, digits) == (constants.SQL_TYPE_TIMESTAMP.value, 6)


# ---- 8: Oracle keyset paging binds the run_at as TIMESTAMP ---------------------------------

def test_oracle_paging_by_run_at_binds_a_timestamp() -> None:
    assert TIMESTAMP_BINDS["jobs_by_run_at"] == ("after_run_at",)
    backend = _oracle()
    cur = _OracleCursor()
    after = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    backend.execute(cur, "jobs_by_run_at", {
        "state": "*", "queue": "*", "any_text": 1, "pattern": "%", "after_id": 5,
        "after_run_at": backend.to_db_time(after), "limit": 10})
    assert cur.made == [(oracledb.DB_TYPE_TIMESTAMP, after.replace(tzinfo=None))]
    assert cur.input_sizes == []


def test_python_oracledb_binds_a_datetime_as_date_by_default() -> None:
    """The driver fact, from the installed python-oracledb's own documentation of
    Cursor.var (a datetime.datetime "uses oracledb.DB_TYPE_DATE"): no fraction."""
    doc = " ".join((oracledb.Cursor.var.__doc__ or "").split())
    assert "datetime.datetime (uses :attr:`oracledb.DB_TYPE_DATE`)" in doc


# ---- 9: Oracle's DB clock in milliseconds, exactly ----------------------------------------

def _clock_terms() -> dict[str, int]:
    """unit -> multiplier of each EXTRACT(unit FROM d) in db_clock_ms."""
    tree = sqlglot.parse_one(load_queries("oracle")["db_clock_ms"], read="oracle")
    terms: dict[str, int] = {}
    for mul in tree.find_all(exp.Mul):
        extract = mul.find(exp.Extract)
        number = mul.find(exp.Literal)
        if extract is not None and number is not None:
            terms[extract.this.name.upper()] = int(number.this)
    return terms


def test_oracle_clock_never_casts_the_timestamp_to_date() -> None:
    tree = sqlglot.parse_one(load_queries("oracle")["db_clock_ms"], read="oracle")
    assert not [c for c in tree.find_all(exp.Cast) if c.to.sql("oracle").upper() == "DATE"]
    assert "TIMESTAMP '1970-01-01 00:00:00'" in load_queries("oracle")["db_clock_ms"]
    trunc = [f for f in tree.find_all(exp.Func) if f.sql("oracle").upper().startswith("TRUNC(")]
    assert trunc, "the milliseconds of the seconds are cut, not rounded"


@pytest.mark.parametrize("fraction", [0, 1, 499_999, 500_000, 999_999])
def test_oracle_clock_arithmetic_is_the_exact_epoch_milliseconds(fraction: int) -> None:
    """The statement's terms (read from the SQL) applied to the interval since the epoch
    give exactly Python's epoch milliseconds, also for fractions that a rounding CAST to
    DATE would have carried into the next second."""
    terms = _clock_terms()
    assert set(terms) == {"DAY", "HOUR", "MINUTE", "SECOND"}
    now = datetime(2026, 12, 5, 23, 59, 59, fraction)
    d = now - datetime(1970, 1, 1)
    hours, rest = divmod(d.seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    seconds_field = seconds + d.microseconds / 1_000_000
    value = (d.days * terms["DAY"] + hours * terms["HOUR"] + minutes * terms["MINUTE"]
             + int(seconds_field * terms["SECOND"]))
    assert value == (now - datetime(1970, 1, 1)) // timedelta(milliseconds=1)


# ---- 10: Oracle migrations wait for DDL locks and retry ORA-00054 --------------------------

class _DdlCursor(ScriptedCursor):
    """Runs DDL text, raising the scripted errors first (python-oracledb's own exceptions)."""

    def __init__(self, errors: list[BaseException]) -> None:
        super().__init__()
        self.errors = errors

    def execute(self, sql: str, params: Any = None) -> ScriptedCursor:
        self.executed.append(" ".join(sql.split()))
        if self.errors:
            raise self.errors.pop(0)
        return self


def test_oracle_migration_sets_a_ddl_lock_timeout_and_resets_it() -> None:
    backend = _oracle()
    cur = _DdlCursor([])
    with pytest.raises(RuntimeError), backend.migration_lock(cur):
        assert cur.executed == ["ALTER SESSION SET DDL_LOCK_TIMEOUT = 30"]
        raise RuntimeError("a migration statement failed")
    assert cur.executed[-1] == "ALTER SESSION SET DDL_LOCK_TIMEOUT = 0"


def test_oracle_busy_ddl_is_retried_then_one_clear_error(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setattr(oracle_backend, "DDL_BUSY_PAUSE_S", 0.0)
    busy = "ORA-00054: resource busy and acquire with NOWAIT specified or timeout expired"
    backend = _oracle()
    cur = _DdlCursor([_ora(busy, 54), _ora(busy, 54)])
    backend.run_ddl(cur, "ALTER TABLE portq_job ADD (x NUMBER)")
    assert len(cur.executed) == 3
    cur = _DdlCursor([_ora(busy, 54) for _ in range(DDL_BUSY_RETRIES + 1)])
    with pytest.raises(DatabaseError, match="ORA-00054") as info:
        backend.run_ddl(cur, "ALTER TABLE portq_job ADD (x NUMBER)")
    assert "pw" not in str(info.value) and len(cur.executed) == DDL_BUSY_RETRIES + 1
    exists = _ora("ORA-00955: name is already used by an existing object", 955)
    cur = _DdlCursor([exists])
    backend.run_ddl(cur, "CREATE TABLE portq_x (a NUMBER)")     # skipped, as before
    assert len(cur.executed) == 1


def test_oracle_claims_json_of_a_heartbeat_stays_valid_json() -> None:
    """(Unchanged, a guard for item 3's sizes on Oracle: the claims go as a CLOB.)"""
    claims = [Claim(1, 1, "w", datetime.now(UTC))] * 30
    assert json.loads(SqlBackend.claims_json(claims))[0]["worker_id"] == "w"
    assert "complete_many" in oracle_backend.CLOB_BINDS
