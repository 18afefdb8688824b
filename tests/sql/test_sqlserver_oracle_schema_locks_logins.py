"""Issue 15: the SQL Server and Oracle defects a review against the vendors' documentation
found before either engine met a live server. One test (or a few) per defect; each fails
on the SQL/code before the fix. The facts each one relies on are cited in docs/engines.md
("Sources for the issue-15 fixes" under SQL Server and Oracle).

No SQL Server or Oracle server runs here, so these tests read the SQL (sqlglot), evaluate
the CHECK constraints the schema defines, replay the migrations on a model of the schema,
and build the statements and driver calls the backends make. Where a test needs the
driver's result-set protocol, :class:`ScriptedCursor` plays back what pyodbc documents
(one result after another, reached with ``nextset()``); it stands in for the driver's
cursor, never for a database's behaviour.
"""

from __future__ import annotations

import ctypes.util
import json
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

from portq.backends import backend_for
from portq.backends.base import ErrorKind
from portq.errors import ConfigurationError, ConnectionLost, DatabaseError, DriverMissingError
from portq.sql import bind, load_migrations, load_queries
from portq.url import parse_url

oracledb = pytest.importorskip("oracledb")

from portq.backends import oracle as oracle_backend  # noqa: E402
from portq.backends.oracle import (  # noqa: E402
    FETCH_ROWS,
    ID_LIST_LENGTHS,
    OracleBackend,
    enable_thick_mode,
    id_lists,
)
from portq.backends.sqlserver import (  # noqa: E402
    MSSQL_PYTHON_LIBRARIES,
    SqlServerBackend,
    dbapi_module,
    drain,
    native_errors,
    sqlstate,
)

DIALECT = {"sqlserver": "tsql", "oracle": "oracle"}
SECRET = "s3cr;e}t{pw"


def _tree(engine: str, name: str, params: dict[str, Any]) -> exp.Expression:
    style = "qmark" if engine == "sqlserver" else "named"
    (tree,) = [t for t in sqlglot.parse(bind(load_queries(engine)[name], params, style).sql,
                                        read=DIALECT[engine]) if t is not None]
    return tree


def _statements(engine: str) -> list[tuple[int, str]]:
    return [(version, s) for version, ss in load_migrations(engine) for s in ss]


# ---- 1 and 9: the payload CHECK accepts every JSON value, on 2019 / 19c ------------------

def _json_before_2022(text: str) -> bool:
    """ISJSON(text) = 1 without a type argument (SQL Server before 2022), and IS JSON before
    Oracle 21c: one well-formed JSON object or array."""
    def refuse(constant: str) -> None:
        raise ValueError(constant)
    try:
        value = json.loads(text, parse_constant=refuse)
    except ValueError:
        return False
    return isinstance(value, dict | list)


def _evaluate(node: exp.Expression, payload: str) -> Any:
    """The value of a payload CHECK expression for one payload text."""
    if isinstance(node, exp.And):
        return _evaluate(node.this, payload) and _evaluate(node.expression, payload)
    if isinstance(node, exp.Paren):
        return _evaluate(node.this, payload)
    if isinstance(node, exp.EQ):
        return _evaluate(node.this, payload) == _evaluate(node.expression, payload)
    if isinstance(node, exp.Anonymous) and node.name.upper() == "ISJSON":
        (arg,) = node.expressions
        return 1 if _json_before_2022(_evaluate(arg, payload)) else 0
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.JSON):
        return _json_before_2022(_evaluate(node.this, payload))
    if isinstance(node, exp.Concat):
        return "".join(_evaluate(e, payload) for e in node.expressions)
    if isinstance(node, exp.DPipe):
        return _evaluate(node.this, payload) + _evaluate(node.expression, payload)
    if isinstance(node, exp.Column) and node.name == "payload":
        return payload
    if isinstance(node, exp.National | exp.Literal):
        return int(node.this) if isinstance(node, exp.Literal) and not node.is_string \
            else node.this
    raise AssertionError(f"unexpected node in the payload CHECK: {node!r}")


def _payload_check(engine: str) -> exp.Expression:
    """The payload CHECK in force after the last migration (the last one defined)."""
    found = None
    for _, statement in _statements(engine):
        if "portq_job_payload_ck" not in statement or "DROP CONSTRAINT" in statement:
            continue
        for check in sqlglot.parse_one(statement, read=DIALECT[engine]).find_all(
                exp.CheckColumnConstraint):
            if any(c.name == "payload" for c in check.find_all(exp.Column)):
                found = check.this
    assert found is not None
    return found


VALID_PAYLOADS = [None, 1, -0.25, 2**53 + 1, "x", "", True, False, {"a": [1, {"b": None}]},
                  [1, [2]], {}, []]
NOT_ONE_VALUE = ["1,2", '1,"w":2', "not json", "{", "", "[1]]", '"a"}, {"b":1', "1 2"]


@pytest.mark.parametrize("engine", ["sqlserver", "oracle"])
def test_payload_check_accepts_every_json_value_before_2022_and_21c(engine: str) -> None:
    check = _payload_check(engine)
    refused = [p for p in VALID_PAYLOADS
               if not _evaluate(check, json.dumps(p, separators=(",", ":")))]
    assert refused == [], f"{engine} rejects valid payloads {refused}"
    accepted = [t for t in NOT_ONE_VALUE if _evaluate(check, t)]
    assert accepted == [], f"{engine} accepts texts that are not one JSON value: {accepted}"


def test_payload_check_is_replaced_by_a_new_migration_not_by_editing_the_first() -> None:
    for engine in ("sqlserver", "oracle"):
        first = " ".join(load_migrations(engine)[0][1])
        assert re.search(r"ISJSON\(payload\) = 1|payload IS JSON\)", first), engine
        later = [s for v, s in _statements(engine) if v >= 2 and "payload_ck" in s]
        assert later[0].startswith("ALTER TABLE portq_job DROP CONSTRAINT portq_job_payload_ck")


# ---- 2: identifiers compare exactly; migration 2 drops what blocks ALTER COLUMN -----------

@dataclass
class _Schema:
    """Tables, columns and the objects (indexes, named constraints) that refer to them."""

    columns: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    objects: dict[str, tuple[str, set[str]]] = field(default_factory=dict)

    def users(self, table: str, column: str) -> list[str]:
        return sorted(n for n, (t, cols) in self.objects.items() if t == table and column in cols)


def _columns_in(node: exp.Expression) -> set[str]:
    return {c.name for c in node.find_all(exp.Column)}


def _replay(engine_statements: Sequence[tuple[int, str]]) -> _Schema:
    """Apply SQL Server migrations to a model, failing where SQL Server would refuse an
    ALTER COLUMN or DROP COLUMN (ALTER TABLE docs: not while an index, statistics, CHECK
    constraint or default refers to the column; a collation change likewise)."""
    schema = _Schema()
    for version, sql in engine_statements:
        tree = sqlglot.parse_one(sql, read="tsql")
        where = f"migration {version}: {sql.splitlines()[0]}"
        if isinstance(tree, exp.Create) and tree.kind == "TABLE":
            table = tree.this.this.name
            for item in tree.this.expressions:
                if isinstance(item, exp.ColumnDef):
                    schema.columns[(table, item.name)] = {"type": item.kind.sql("tsql"),
                                                          "collate": None}
                    for cc in item.constraints:
                        if cc.this is not None:   # CONSTRAINT name ...
                            schema.objects[cc.this.name] = (table, {item.name} |
                                                            _columns_in(cc.kind))
                elif isinstance(item, exp.Constraint):
                    schema.objects[item.name] = (table, _columns_in(item))
        elif isinstance(tree, exp.Create) and tree.kind == "INDEX":
            index = tree.this
            schema.objects[index.name] = (index.args["table"].name, _columns_in(index))
        elif isinstance(tree, exp.Drop) and tree.kind == "INDEX":
            schema.objects.pop(tree.args["tables"][0].name)
        elif isinstance(tree, exp.Alter):
            table = tree.this.name
            for action in tree.args["actions"]:
                if isinstance(action, exp.AlterColumn):
                    column = action.name
                    assert not schema.users(table, column), \
                        f"{where}: {column} is still used by {schema.users(table, column)}"
                    collate = action.args.get("collate")
                    schema.columns[(table, column)] = {
                        "type": action.args["dtype"].sql("tsql"),
                        "collate": collate.name if collate is not None else None}
                elif isinstance(action, exp.Drop) and action.kind == "COLUMN":
                    column = action.args["tables"][0].name
                    assert not schema.users(table, column), \
                        f"{where}: {column} is still used by {schema.users(table, column)}"
                    del schema.columns[(table, column)]
                elif isinstance(action, exp.Drop) and action.kind == "CONSTRAINT":
                    schema.objects.pop(action.args["tables"][0].name)
                elif isinstance(action, exp.AddConstraint):
                    for constraint in action.expressions:
                        schema.objects[constraint.name] = (table, _columns_in(constraint))
                elif isinstance(action, exp.ColumnDef):
                    schema.columns[(table, action.name)] = {"type": action.kind.sql("tsql"),
                                                            "collate": None}
                else:
                    raise AssertionError(f"{where}: unmodelled action {action!r}")
        elif isinstance(tree, exp.Execute) and tree.this.name == "sp_rename":
            old, new, kind = (e.this for e in tree.expressions)
            assert kind == "COLUMN"
            table, column = old.split(".")
            assert not schema.users(table, column), f"{where}: renaming a column in use"
            schema.columns[(table, new)] = schema.columns.pop((table, column))
    return schema


def test_sqlserver_migration_2_replays_with_every_dependent_object_dropped_first() -> None:
    statements = _statements("sqlserver")
    before = _replay([s for s in statements if s[0] == 1])
    _replay(statements)                  # asserts nothing blocks each ALTER/DROP COLUMN
    after = _replay([s for s in statements if s[0] <= 2])  # what migration 2 itself adds
    assert set(after.objects) == set(before.objects) | {"portq_job_key_ck"}
    assert after.users("portq_job", "job_key") == ["portq_job_key_ck", "portq_job_key_uq"]
    assert "portq_job_ready_idx" in after.users("portq_job", "queue")


def test_sqlserver_identifiers_are_binary_and_keys_are_bytes() -> None:
    schema = _replay(_statements("sqlserver"))
    for table, column in [("portq_job", "queue"), ("portq_job", "worker_id"),
                          ("portq_job_error", "worker_id")]:
        assert str(schema.columns[(table, column)]["collate"]).endswith("_BIN2"), column
    assert schema.columns[("portq_job", "job_key")]["type"] == "VARBINARY(1020)"
    # 200 worker-id characters may take 400 UTF-16 code units
    assert schema.columns[("portq_job", "worker_id")]["type"] == "NVARCHAR(400)"


def _key_bytes(node: exp.Expression) -> bool:
    """CAST(CAST(? AS NVARCHAR(510)) AS VARBINARY(1020)): the key's UTF-16LE bytes."""
    return (isinstance(node, exp.Cast) and node.to.sql("tsql") == "VARBINARY(1020)"
            and isinstance(node.this, exp.Cast) and node.this.to.sql("tsql") == "NVARCHAR(510)")


SAMPLE = {"queue": "q", "payload": "{}", "priority": 0, "run_at": None, "delay_ms": 0,
          "timeout_ms": None,
          "max_attempts": 3, "key": "k", "job_id": 1, "limit": 5, "worker_id": "w",
          "lease_ms": 1, "state": "ready", "generation": 1, "after_id": 0, "any_text": 1,
          "pattern": "%x%", "after_run_at": None, "concurrency_key": "ck",
          "concurrency_limit": 1, "meta": None}


def test_sqlserver_keys_are_compared_and_stored_as_bytes_and_read_as_text() -> None:
    insert = _tree("sqlserver", "insert_job", SAMPLE)
    # job_key, then concurrency_key and concurrency_limit (migration 7), timeout_ms (9),
    # meta (11)
    assert _key_bytes(insert.expression.expressions[-5]), "the inserted key is not bytes"
    assert _key_bytes(insert.expression.expressions[-4]), "the concurrency key is not bytes"
    for name in ("insert_job", "job_id_by_key"):
        tree = _tree("sqlserver", name, SAMPLE)
        comparisons = [eq for eq in tree.find_all(exp.EQ)
                       if isinstance(eq.this, exp.Column) and eq.this.name == "job_key"]
        assert comparisons and all(_key_bytes(eq.expression) for eq in comparisons), name
    for name in ("claim", "jobs"):
        tree = _tree("sqlserver", name, SAMPLE)
        shown = tree.args["returning"].expressions if name == "claim" else tree.expressions
        (key,) = [e for e in shown if "job_key" in _columns_in(e)]
        cast = key.find(exp.Cast)
        assert cast is not None and cast.to.sql("tsql") == "NVARCHAR(510)", name


# ---- 3: operator reads skip locked rows instead of waiting ---------------------------------

def _table_hints(tree: exp.Expression, table: str) -> set[str]:
    return {h.sql(dialect="tsql").upper() for t in tree.find_all(exp.Table) if t.name == table
            for hint in t.args.get("hints") or [] for h in hint.expressions}


@pytest.mark.parametrize(("name", "table"), [("stats", "portq_job"), ("jobs", "portq_job"),
                                             ("job_errors", "portq_job_error")])
def test_sqlserver_operator_reads_use_readpast(name: str, table: str) -> None:
    hints = _table_hints(_tree("sqlserver", name, SAMPLE), table)
    assert hints == {"READPAST", "READCOMMITTEDLOCK"}, hints


def test_sqlserver_suite_runs_with_read_committed_snapshot_off_and_on() -> None:
    from pathlib import Path

    from portq.conformance import containers

    assert containers.SQLSERVER_DATABASES == {"portq": "OFF", "portq_rcsi": "ON"}
    script = (Path(__file__).resolve().parents[2] / "compose" / "run-conformance.sh").read_text()
    for database, setting in containers.SQLSERVER_DATABASES.items():
        assert f"{database} SET READ_COMMITTED_SNAPSHOT {setting}" in script
        assert f"127.0.0.1:11433/{database}?" in script


# ---- 4: the migration lock's batch is drained and its return code checked -----------------

class ScriptedCursor:
    """The result-set protocol of a pyodbc cursor, playing back scripted results: each is
    ``None`` (a row count, no columns) or a list of rows; ``nextset()`` moves to the next."""

    def __init__(self, *batches: list[list[Any] | BaseException | None]) -> None:
        self.batches = list(batches)
        self.results: list[list[Any] | BaseException | None] = []
        self.executed: list[str] = []
        self.input_sizes: list[dict[str, Any]] = []

    def execute(self, sql: str, params: Any = None) -> ScriptedCursor:
        self.executed.append(sql)
        self.results = list(self.batches.pop(0))
        self._raise_if_error()
        return self

    def _raise_if_error(self) -> None:
        if self.results and isinstance(self.results[0], BaseException):
            raise self.results.pop(0)

    @property
    def description(self) -> Any:
        return None if not self.results or self.results[0] is None else [("c",)]

    def fetchall(self) -> list[Any]:
        rows = self.results[0]
        assert isinstance(rows, list)
        self.results[0] = []
        return rows

    def fetchone(self) -> Any:
        rows = self.fetchall()
        return rows[0] if rows else None

    def nextset(self) -> bool:
        self.results.pop(0)
        self._raise_if_error()
        return bool(self.results)

    def setinputsizes(self, *sizes: Any, **named: Any) -> None:
        self.input_sizes.append(named or {"positional": sizes[0] if sizes else None})


def _mssql(url: str = "mssql://sa:pw@h/db") -> SqlServerBackend:
    return SqlServerBackend(parse_url(url))


def test_migration_lock_batch_ends_with_the_lock_result_and_raises_nothing_itself() -> None:
    sql = load_queries("sqlserver")["migration_lock"]
    assert "RAISERROR" not in sql and "NOCOUNT" not in sql  # NOCOUNT would stick to the session
    assert sql.rstrip().splitlines()[-1] == "SELECT @portq_lock AS lock_result;"
    assert sqlglot.parse(sql, read="tsql")


@pytest.mark.parametrize(("code", "meaning"), [(-1, "timed out"), (-2, "cancelled"),
                                               (-3, "deadlock"), (-999, "call error")])
def test_migration_lock_failure_is_an_error_after_every_result_is_read(code: int,
                                                                       meaning: str) -> None:
    cur = ScriptedCursor([None, None, [(code,)]])   # SELECT @x = ..., EXEC ..., SELECT @x
    with pytest.raises(DatabaseError, match=meaning), _mssql().migration_lock(cur):
        pass
    assert cur.results == [], "results left unread"


@pytest.mark.parametrize("code", [0, 1])
def test_migration_lock_granted_drains_the_batch(code: int) -> None:
    cur = ScriptedCursor([None, None, [(code,)]])
    with _mssql().migration_lock(cur):
        assert cur.results == []


def test_drain_surfaces_an_error_raised_late_in_a_batch() -> None:
    cur = ScriptedCursor([None, RuntimeError("error 1222 in the third statement")])
    with pytest.raises(RuntimeError, match="1222"):
        drain(cur.execute("batch"))


# ---- 5: prune repeats the filtered index's predicate as literals ---------------------------

def test_sqlserver_prune_repeats_the_finished_index_filter_as_literals() -> None:
    *_, index = [s for _, s in _statements("sqlserver")
                 if s.startswith("CREATE INDEX portq_job_finished_idx")]
    (index_filter,) = sqlglot.parse_one(index, read="tsql").find_all(exp.In)
    for states in (("dead",), ("succeeded", "cancelled"), ("succeeded", "dead", "cancelled")):
        tree = _tree("sqlserver", "prune", {"limit": 5, "states": states, "queue": "*",
                                            "older_than_ms": 1})
        # the pruned rows' own state list (the dependents' states, `w.state`, in the
        # subquery that keeps results a dependent needs, are another table's rows)
        literal = [i for i in tree.find_all(exp.In)
                   if all(isinstance(e, exp.National) for e in i.expressions)
                   and isinstance(i.this, exp.Column) and i.this.table != "w"]
        assert [i.sql("tsql") for i in literal] == [index_filter.sql("tsql")]


# ---- 6: login failures are portq errors (LoginFailed, DatabaseMissing, CannotConnect),
# never raw driver errors ----------------------------------------------------------------

@pytest.mark.parametrize(("state", "text", "kind"), [
    ("28000", "Login failed for user 'sa'. (18456) (SQLDriverConnect)", ErrorKind.LOGIN),
    ("HYT00", "[Microsoft][ODBC Driver 18 for SQL Server]Login timeout expired (0) "
              "(SQLDriverConnect)", ErrorKind.CONNECTION),
    ("42000", "Cannot open database \"nope\" requested by the login. The login failed. "
              "(4060) (SQLDriverConnect)", ErrorKind.UNKNOWN_DATABASE),
])
def test_sqlserver_login_failures_classify_as_login_errors(state: str, text: str,
                                                           kind: ErrorKind) -> None:
    error = Exception(state, f"[{state}] [Microsoft][ODBC Driver 18 for SQL Server]"
                             f"[SQL Server]{text}")    # the shape of pyodbc's exceptions
    assert _mssql().kind_of(*native_errors(error), sqlstate(error)) is kind


def _mssql_python_error(state: str, message: str) -> BaseException:
    exceptions = pytest.importorskip("mssql_python.exceptions")
    made: BaseException = exceptions.sqlstate_to_exception(state, message)
    return made


@pytest.mark.parametrize(("state", "message", "kind"), [
    ("28000", "[Microsoft][SQL Server]Login failed for user 'sa'.", ErrorKind.LOGIN),
    ("HYT00", "[Microsoft][ODBC Driver 18 for SQL Server]Login timeout expired",
     ErrorKind.CONNECTION),
    ("08001", "[Microsoft][ODBC Driver 18 for SQL Server]TCP Provider: Error code 0x2749",
     ErrorKind.CONNECTION),
    ("23000", "[Microsoft][SQL Server]Violation of UNIQUE KEY constraint 'k'. Cannot insert "
              "duplicate key in object 'dbo.portq_job'.", ErrorKind.UNIQUE),
    ("23000", "[Microsoft][SQL Server]Cannot insert duplicate key row in object "
              "'dbo.portq_job' with unique index 'portq_job_key_uq'.", ErrorKind.UNIQUE),
    ("23000", "[Microsoft][SQL Server]The INSERT statement conflicted with the CHECK "
              "constraint \"portq_job_payload_ck\".", ErrorKind.CHECK),
    ("40001", "[Microsoft][SQL Server]Transaction (Process ID 52) was deadlocked on lock "
              "resources with another process and has been chosen as the deadlock victim.",
     ErrorKind.RETRYABLE),
    ("HY000", "[Microsoft][SQL Server]Lock request time out period exceeded.",
     ErrorKind.RETRYABLE),
    ("42S02", "[Microsoft][SQL Server]Invalid object name 'portq_job'.",
     ErrorKind.UNDEFINED_TABLE),
])
def test_sqlserver_classifies_mssql_python_errors(state: str, message: str,
                                                  kind: ErrorKind) -> None:
    assert _mssql("mssql+mssqlpython://sa:pw@h/db").classify(
        _mssql_python_error(state, message)) is kind


@pytest.mark.parametrize(("message", "code"), [
    ("ORA-01017: invalid credential or not authorized; logon denied", 1017),
    ("ORA-28000: The account is locked.", 28000),
    ("ORA-28001: the password has expired", 28001),
])
def test_oracle_login_failures_classify_as_login_errors(message: str, code: int) -> None:
    errors = pytest.importorskip("oracledb.errors")
    err = errors._Error(message, code=code)
    backend = OracleBackend(parse_url("oracle://app:pw@h/S"))
    assert backend.classify(err.exc_type(err)) is ErrorKind.LOGIN


# ---- 7: the keyed insert locks only its key ------------------------------------------------

def test_sqlserver_keyed_insert_takes_no_range_lock_and_sessions_keep_xact_abort_off() -> None:
    insert = _tree("sqlserver", "insert_job", SAMPLE)
    probe = insert.find(exp.Exists)
    assert probe is not None and _table_hints(probe, "portq_job") == set(), \
        "the key probe must be a plain read (HOLDLOCK/UPDLOCK range-lock the next key)"
    setup = load_queries("sqlserver")["session_setup"]
    assert "SET XACT_ABORT OFF;" in setup and "XACT_ABORT ON" not in setup


def _duplicate_key() -> BaseException:
    return _mssql_python_error("23000", "[Microsoft][SQL Server]Cannot insert duplicate key "
                                        "row in object 'dbo.portq_job' with unique index "
                                        "'portq_job_key_uq'. The duplicate key value is (k).")


def test_sqlserver_duplicate_key_in_a_usable_transaction_returns_the_existing_job() -> None:
    backend = _mssql("mssql+mssqlpython://sa:pw@h/db")
    cur = ScriptedCursor([_duplicate_key()], [[(1,)]])   # insert fails; XACT_STATE() = 1
    params = backend.job_params(_new_job(key="k"))
    assert backend.insert_job(cur, params) is None      # the caller then reads the id


def test_sqlserver_duplicate_key_that_doomed_the_transaction_is_one_clear_error() -> None:
    backend = _mssql("mssql+mssqlpython://sa:pw@h/db")
    cur = ScriptedCursor([_duplicate_key()], [[(0,)]])   # XACT_ABORT ON rolled it back
    with pytest.raises(DatabaseError, match="XACT_ABORT ON"):
        backend.insert_job(cur, backend.job_params(_new_job(key="k")))


def _new_job(key: str | None) -> Any:
    from portq.protocol import NewJob
    return NewJob(queue="q", payload_json="null", key=key)


# ---- 8: Microsoft's mssql-python driver ----------------------------------------------------

@pytest.mark.parametrize("url", ["mssql+mssqlpython://sa:pw@h:1433/db",
                                 "mssql://sa:pw@h:1433/db?driver=mssql-python",
                                 "sqlserver://sa:pw@h:1433/db?Driver={mssql-python}"])
def test_mssql_python_is_chosen_by_scheme_or_driver_option(url: str) -> None:
    parsed = parse_url(url)
    assert dbapi_module(parsed) == "mssql_python"
    backend = backend_for(parsed)    # imports mssql_python, never pyodbc
    assert isinstance(backend, SqlServerBackend) and backend.dbapi == "mssql_python"
    cs = backend.connection_string()
    assert "DRIVER=" not in cs and cs.startswith("SERVER=h,1433;DATABASE=db;UID=sa;PWD=pw;")
    assert dbapi_module(parse_url("mssql://sa:pw@h/db?driver=FreeTDS")) == "pyodbc"


def test_mssql_python_missing_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    monkeypatch.setitem(sys.modules, "mssql_python", None)
    with pytest.raises(DriverMissingError, match=r"pip install 'portq\[mssql-python\]'"):
        backend_for(parse_url("mssql+mssqlpython://sa:pw@h/db"))


def test_mssql_python_passes_portq_qmark_statements_through() -> None:
    """mssql-python's paramstyle is pyformat, but a list of values means qmark, unchanged."""
    helper = pytest.importorskip("mssql_python.parameter_helper")
    bound = bind(load_queries("sqlserver")["claim"], SAMPLE, "qmark")
    sql, params = helper.detect_and_convert_parameters(bound.sql, list(bound.params))
    assert sql == bound.sql and list(params) == list(bound.params)
    # the pause check and the per-key count bind :queue again
    assert sql.count("?") == len(bound.params) == 7


def _libraries_missing() -> list[str]:
    names = {"libltdl7": "ltdl", "libkrb5-3": "krb5", "libgssapi-krb5-2": "gssapi_krb5"}
    return [pkg for pkg, lib in names.items() if ctypes.util.find_library(lib) is None]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _mssql_python_backend() -> SqlServerBackend:
    pytest.importorskip("mssql_python")
    url = f"mssql+mssqlpython://sa:{SECRET.replace(';', '%3B')}@127.0.0.1:{_closed_port()}/db"
    return SqlServerBackend(parse_url(url + "?login_timeout=3&Encrypt=no"), pool_timeout=5)


@pytest.mark.skipif(not _libraries_missing(), reason="mssql-python's system libraries are "
                    "installed here: its driver loads (see the test after this one)")
def test_mssql_python_without_its_system_libraries_names_them() -> None:
    backend = _mssql_python_backend()
    with pytest.raises(DriverMissingError) as info:
        backend.stats()
    assert all(lib in str(info.value) for lib in MSSQL_PYTHON_LIBRARIES)
    assert "s3cr" not in str(info.value)


@pytest.mark.skipif(bool(_libraries_missing()), reason="needs mssql-python's system libraries "
                    f"{', '.join(MSSQL_PYTHON_LIBRARIES)} (apt-get install "
                    f"{' '.join(MSSQL_PYTHON_LIBRARIES)})")
def test_mssql_python_unreachable_server_is_connection_lost_without_password() -> None:
    backend = _mssql_python_backend()
    with pytest.raises(ConnectionLost) as info:
        backend.stats()
    assert "s3cr" not in str(info.value)


# ---- 10: Oracle binds long error texts as CLOB ---------------------------------------------

class _OracleCursor(ScriptedCursor):
    """Records the typed values python-oracledb's cursor and connection are asked to make."""

    def __init__(self) -> None:
        super().__init__([[]])
        self.connection = self
        self.made: list[tuple[Any, Any]] = []

    def createlob(self, kind: Any) -> _OracleCursor._Value:
        return self._Value(self.made, kind)

    def var(self, kind: Any) -> _OracleCursor._Value:
        return self._Value(self.made, kind)

    class _Value:
        def __init__(self, made: list[tuple[Any, Any]], kind: Any) -> None:
            self.made, self.kind = made, kind

        def write(self, text: str) -> None:
            self.made.append((self.kind, text))

        def setvalue(self, pos: int, value: Any) -> None:
            self.made.append((self.kind, value))

    def execute(self, sql: str, params: Any = None) -> ScriptedCursor:
        self.params = params
        return super().execute(sql, params)


def test_oracle_error_text_is_bound_as_clob() -> None:
    backend = OracleBackend(parse_url("oracle://app:pw@h/S"))
    text = "é" * 3000          # 6000 bytes: a VARCHAR bind would travel as LONG
    for name in ("fail", "record_error"):
        cur = _OracleCursor()
        backend.execute(cur, name, {"job_id": 1, "generation": 1, "worker_id": "w",
                                    "error": text, "retryable": 1, "retry_ms": 0})
        assert cur.made == [(oracledb.DB_TYPE_CLOB, text)], name
        assert isinstance(cur.params["error"], _OracleCursor._Value), name
    coalesce = _tree("oracle", "record_error", {"job_id": 1, "generation": 1,
                                                "worker_id": "w", "error": "x"}).find(
        exp.Coalesce)
    assert coalesce is not None and "TO_CLOB" in coalesce.sql("oracle").upper()


def test_oracle_typed_binds_never_stay_on_the_cursor() -> None:
    """setinputsizes() would stay on the cursor: a duplicate key's lookup after insert_job
    would then fail with DPY-4008 (no placeholder :run_at)."""
    from datetime import UTC, datetime

    backend = OracleBackend(parse_url("oracle://app:pw@h/S"))
    cur = _OracleCursor()
    when = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    params = backend.job_params(_new_job(key="k")) | {"run_at": backend.to_db_time(when),
                                                      "job_id": None}
    backend.execute(cur, "insert_job", params)
    assert cur.made == [(oracledb.DB_TYPE_TIMESTAMP, when.replace(tzinfo=None))]
    assert cur.input_sizes == []
    import inspect
    assert "cur.setinputsizes(" not in inspect.getsource(oracle_backend)


# ---- 12: Oracle thick mode and wallet options ----------------------------------------------

def test_oracle_thick_mode_and_wallet_options() -> None:
    backend = OracleBackend(parse_url(
        "oracle://app:pw@h/S?mode=thick&lib_dir=/opt/oracle/instantclient_23_5"
        "&config_dir=/etc/oracle&wallet_location=/etc/oracle/wallet"))
    assert backend.thick and backend.lib_dir == "/opt/oracle/instantclient_23_5"
    assert backend.connect_params == {"host": "h", "port": 1521, "service_name": "S",
                                      "config_dir": "/etc/oracle",
                                      "wallet_location": "/etc/oracle/wallet",
                                      "expire_time": 1}
    thin = OracleBackend(parse_url(f"oracle://app:pw@h/S?wallet_location=/w"
                                   f"&wallet_password={SECRET.replace(';', '%3B')}"))
    assert not thin.thick and thin.connect_params["wallet_password"] == SECRET
    shown = [str(thin.url), repr(thin.url), repr(thin), thin.url.redacted()]
    assert all("s3cr" not in s for s in shown), shown
    assert "wallet_password=***" in thin.url.redacted()


@pytest.mark.parametrize(("query", "message"), [
    ("mode=thicc", "use thin or thick"), ("lib_dir=/x", "needs mode=thick"),
    ("mode=thick&wallet_password=s3cret", "thin mode only"),
])
def test_oracle_bad_mode_options_are_refused_without_the_password(query: str,
                                                                   message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        OracleBackend(parse_url(f"oracle://app:s3cret@h/S?{query}"))
    assert "s3cret" not in str(info.value)


def test_thick_mode_with_a_missing_client_library_is_driver_missing() -> None:
    """A real ``oracledb.init_oracle_client`` call; a failed one leaves thin mode usable."""
    with pytest.raises(DriverMissingError, match="lib_dir='/nonexistent/instantclient'"):
        enable_thick_mode("/nonexistent/instantclient", None)
    assert oracle_backend._thick_args is None


def test_thick_mode_is_enabled_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oracle_backend, "_thick_args", {"lib_dir": "/nonexistent/ic"})
    enable_thick_mode("/nonexistent/ic", None)     # same arguments: no second load
    with pytest.raises(ConfigurationError, match="already enabled"):
        enable_thick_mode("/other/ic", None)


# ---- 13: Oracle fetch sizes are capped; id lists come in four lengths ----------------------

@pytest.mark.parametrize("name", ["claim", "claimed", "reap", "prune"])
def test_oracle_id_lists_make_at_most_four_statement_texts(name: str) -> None:
    sql = load_queries("oracle")[name]
    params = {"worker_id": "w", "lease_ms": 1, "delay_ms": 1}
    texts = set()
    for n in range(1, 2_501):
        for chunk in id_lists(list(range(n))):
            texts.add(bind(sql, {**params, "ids": chunk}, "named").sql)
    assert len(texts) <= len(ID_LIST_LENGTHS) == 4


def test_oracle_id_lists_keep_every_id_once_and_stay_within_1000() -> None:
    for n in (1, 9, 10, 11, 999, 1000, 1001, 2500):
        ids = list(range(n))
        lists = list(id_lists(ids))
        assert sorted({i for chunk in lists for i in chunk}) == ids
        assert all(len(chunk) in ID_LIST_LENGTHS for chunk in lists)


class _LockCursor(ScriptedCursor):
    def __init__(self, available: int) -> None:
        super().__init__()
        self.available = available
        self.connection = self
        self.fetches: list[int] = []

    def cursor(self) -> _LockCursor:
        return self

    def execute(self, sql: str, params: Any = None) -> _LockCursor:
        self.executed.append(sql)
        self.next_id = 0
        return self

    def fetchmany(self, n: int) -> list[tuple[int]]:
        self.fetches.append(n)
        rows = [(i,) for i in range(self.next_id, min(self.next_id + n, self.available))]
        self.next_id += len(rows)
        return rows

    def close(self) -> None:
        pass


@pytest.mark.parametrize("limit", [1, 5, 1000, 1001, 2500, 2**31 - 1])
def test_oracle_lock_ids_caps_the_fetch_size_and_fetches_in_rounds(limit: int) -> None:
    backend = OracleBackend(parse_url("oracle://app:pw@h/S"))
    cur = _LockCursor(available=3000)
    ids = backend.lock_ids(cur, "claim_lock", {"queue": "q"}, limit)
    assert ids == list(range(min(limit, 3000)))
    assert cur.prefetchrows == cur.arraysize <= FETCH_ROWS  # type: ignore[attr-defined]
    rounds = -(-limit // FETCH_ROWS)
    assert cur.arraysize * rounds - limit < rounds        # type: ignore[attr-defined]


def test_sqlserver_fenced_writes_compare_worker_ids_exactly() -> None:
    """SQL Server's `=` pads the shorter string with spaces whatever the collation (ANSI
    SQL-92 comparison), so 'owner' = 'owner ' even under _BIN2: every fenced statement that
    matches a claim's worker id also compares DATALENGTH, which counts trailing spaces. The
    OPENJSON batches compare with the column's collation made explicit (a WITH column has the
    database default, and two implicit collations that differ are error 468) and read worker
    ids as wide as the column (NVARCHAR(400), migration 2)."""
    queries = load_queries("sqlserver")
    fenced = [name for name, sql in queries.items()
              if re.search(r"\bworker_id = :worker_id\s+AND DATALENGTH|\bAND worker_id = "
                           r":worker_id\b", sql)]
    assert {"renew", "complete", "fail", "release", "lock_owned_job"} <= set(fenced)
    for name in fenced:
        # the parameter cast to the column's type: mssql-python binds an ASCII str as
        # VARCHAR, whose DATALENGTH is half the NVARCHAR column's (issue 30)
        assert "DATALENGTH(worker_id) = DATALENGTH(CAST(:worker_id AS NVARCHAR(400)))" in \
            queries[name], name
    for name in ("complete_many", "renew_many"):
        sql = queries[name]
        assert "j.worker_id = c.worker_id COLLATE Latin1_General_100_BIN2" in sql, name
        assert "DATALENGTH(j.worker_id) = DATALENGTH(c.worker_id)" in sql, name
        assert "worker_id NVARCHAR(400) '$.worker_id'" in sql, name
    column = re.search(r"ALTER COLUMN worker_id (NVARCHAR\(\d+\)) COLLATE (\w+)",
                       "\n".join(sql for _, sql in _statements("sqlserver")))
    assert column is not None and column.groups() == ("NVARCHAR(400)",
                                                      "Latin1_General_100_BIN2")


@pytest.mark.parametrize("name", ["prune", "retry_many", "cancel_many"])
def test_oracle_batch_writes_lock_their_rows_with_their_own_locking_cursor(name: str) -> None:
    """A batched write locks its rows with ``<name>_lock`` (a SELECT ... FOR UPDATE SKIP
    LOCKED fetching ``limit`` rows), then updates them by id: never with the write itself
    (the lock cursor the fair claims added is claim_rows's, not batch_rows's)."""
    backend = OracleBackend(parse_url("oracle://app:pw@h/S"))
    locked_with: list[str] = []

    def lock_ids(cur: Any, statement: str, params: dict[str, Any], limit: int) -> list[int]:
        locked_with.append(statement)  # which statement would lock: no server here
        return []

    backend.lock_ids = lock_ids  # type: ignore[method-assign]
    assert backend.batch_rows(None, name, {"limit": 5}) == 0
    assert locked_with == [f"{name}_lock"]
    assert f"{name}_lock" in load_queries("oracle")
