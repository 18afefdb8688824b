"""Oracle Database 19c+ (python-oracledb: thin mode by default, no Oracle Client
libraries; ``?mode=thick`` loads them, for Native Network Encryption and the like).

``FOR UPDATE`` cannot carry a row limit (ORA-02014), so a claim, a reap and a prune each
open a ``SELECT job_id ... ORDER BY ... FOR UPDATE SKIP LOCKED`` cursor with
``prefetchrows = arraysize`` of at most :data:`FETCH_ROWS`, fetch n rows in rounds (a SKIP
LOCKED cursor locks rows as it fetches them), close it, and update or delete exactly those
ids in the same transaction, in ``IN`` lists of a few fixed lengths (:func:`id_lists`).

Idempotent enqueue relies on Oracle rolling back only the failed statement: ORA-00001 on
the job key is caught and the existing id looked up, in the caller's transaction. DDL
commits implicitly, so :meth:`OracleBackend.migrate` runs each statement on its own and
tolerates objects that already exist. CLOBs are fetched as ``str`` on portq's connections.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import oracledb

from portq.backends.contract import ErrorKind
from portq.backends.sql import SqlBackend
from portq.errors import ConfigurationError, DatabaseError, DriverMissingError
from portq.job import EnqueueResult
from portq.url import DatabaseURL

log = logging.getLogger("portq.backend")

DEFAULT_PORT = 1521
#: rows per round trip of a locking cursor (prefetchrows = arraysize); a claim of more
#: fetches in rounds of equal size, so python-oracledb never buffers more than this
FETCH_ROWS = 1000
#: lengths of the IN (...) lists of ids: a list is padded (its last id repeated) to the
#: next length, so each statement has at most four texts in the statement cache instead of
#: one per list length. Oracle allows at most 1000 expressions in a list.
ID_LIST_LENGTHS = (1, 10, 100, 1000)
#: statements whose :error is bound as a CLOB: a string over 4000 bytes would otherwise be
#: sent as LONG, which may not appear in an expression (ORA-01461)
CLOB_BINDS: dict[str, tuple[str, ...]] = {
    "fail": ("error",), "record_error": ("error",), "insert_result": ("result",),
    "complete_many": ("claims",), "renew_many": ("claims",)}
#: parameters bound as TIMESTAMP: python-oracledb binds a datetime as DATE by default,
#: which drops the microseconds
TIMESTAMP_BINDS: dict[str, tuple[str, ...]] = {"insert_job": ("run_at",),
                                               "jobs_by_run_at": ("after_run_at",)}
#: a migration statement still meeting ORA-00054 after DDL_LOCK_TIMEOUT (30 s, queries.sql
#: ddl_lock_wait) is tried this many more times, this many seconds apart
DDL_BUSY_RETRIES = 3
DDL_BUSY_PAUSE_S = 2.0

# A refused login or an unusable account: ErrorKind.LOGIN, raised as portq.LoginFailed
# ("cannot log in to URL: ...", never a raw driver error).
_LOGIN_CODES: frozenset[object] = frozenset({
    1017,       # invalid username/password; logon denied
    1005,       # null password given; logon denied
    28000,      # the account is locked
    28001,      # the password has expired
    1045,       # user lacks CREATE SESSION privilege
    "DPY-4001",  # python-oracledb: no credentials specified
})
_ERROR_CODES: dict[ErrorKind, frozenset[object]] = {
    ErrorKind.UNIQUE: frozenset({1}),              # ORA-00001 unique constraint violated
    # check constraint, NULL into / update to NOT NULL
    ErrorKind.CHECK: frozenset({2290, 1400, 1407}),
    # deadlock, resource busy, serialization, WAIT timeout
    ErrorKind.RETRYABLE: frozenset({60, 54, 8177, 30006}),
    ErrorKind.CONNECTION: frozenset({
        28, 1012, 1089, 1092, 3113, 3114, 3122, 3135,   # session killed, not logged on, ...
        12170, 12528, 12537, 12541, 12547, 12570, 12571,  # TNS: no listener, timeouts
        "DPY-1001", "DPY-4011", "DPY-6000", "DPY-6005",  # python-oracledb: not connected, ...
    }),
    # invalid username/password, no CREATE SESSION privilege, account locked, expired
    ErrorKind.LOGIN: frozenset(_LOGIN_CODES),
    # listener does not know the service / SID (thin mode: DPY-6001 / DPY-6003)
    ErrorKind.UNKNOWN_DATABASE: frozenset({12514, 12505, "DPY-6001", "DPY-6003"}),
    ErrorKind.UNDEFINED_TABLE: frozenset({942}),    # table or view does not exist
    # call timeout exceeded, the connection still usable (DPI-1067 in thick mode; DPI-1080,
    # the connection lost with it, is DPY-4011 and a CONNECTION error)
    ErrorKind.TIMEOUT: frozenset({"DPY-4024", "DPI-1067"}),
}
# "ORA-00955: name is already used by an existing object" and friends, and ORA-02443
# (cannot drop a constraint that does not exist): tolerated by migrate
_ALREADY_EXISTS = {955, 1408, 1430, 2260, 2261, 2264, 2275, 2443}
_ORA = re.compile(r"\bORA-(\d{5})\b")
# URL query options passed to oracledb.connect, converted to the type it expects
_OPTIONS: dict[str, type] = {
    "service_name": str, "sid": str, "protocol": str, "tcp_connect_timeout": float,
    "expire_time": int, "retry_count": int, "retry_delay": int, "wallet_location": str,
    "wallet_password": str, "config_dir": str, "ssl_server_dn_match": bool,
    "ssl_server_cert_dn": str, "https_proxy": str, "https_proxy_port": int, "program": str,
    "stmtcachesize": int,
}
# URL query options that choose python-oracledb's mode instead of going to connect()
_MODE_OPTIONS = ("mode", "lib_dir")
# python-oracledb's thick mode is per process: the arguments it was enabled with
_thick_lock = threading.Lock()
_thick_args: dict[str, str] | None = None


def enable_thick_mode(lib_dir: str | None, config_dir: str | None) -> None:
    """Load the Oracle Client libraries (``oracledb.init_oracle_client``) once per process;
    a second URL asking for other ``lib_dir``/``config_dir`` values is refused."""
    global _thick_args
    args = {k: v for k, v in (("lib_dir", lib_dir), ("config_dir", config_dir)) if v}
    with _thick_lock:
        if _thick_args is not None:
            if args != _thick_args:
                raise ConfigurationError(
                    f"Oracle thick mode is already enabled in this process with {_thick_args}"
                    f"; python-oracledb cannot load the client libraries again with {args}")
            return
        try:
            oracledb.init_oracle_client(**args)
        except oracledb.Error as exc:
            where = f" from lib_dir={lib_dir!r}" if lib_dir else ""
            raise DriverMissingError(
                f"Oracle thick mode (?mode=thick) could not load the Oracle Client "
                f"libraries{where}: {exc}") from None
        _thick_args = args


def oracle_codes(exc: BaseException) -> tuple[int, str]:
    """``(ORA number, DPY/DPI code)`` of a python-oracledb exception (0 / "" if absent).

    python-oracledb keeps the ORA number in ``args[0].code`` but replaces ``full_code``
    with its own code where it has one (DPY-4011 for a closed connection): read both."""
    err = exc.args[0] if exc.args else exc
    code = int(getattr(err, "code", 0) or 0)
    full = str(getattr(err, "full_code", "") or "")
    if not code:
        found = _ORA.search(str(err))
        code = int(found.group(1)) if found else 0
    return code, full if full.startswith(("DPY-", "DPI-")) else ""


def _lobs_as_strings(cursor: Any, metadata: Any) -> Any:
    """Output type handler: fetch CLOB columns as ``str`` (one round trip, no LOB objects)."""
    if metadata.type_code is oracledb.DB_TYPE_CLOB:
        return cursor.var(oracledb.DB_TYPE_LONG, arraysize=cursor.arraysize)
    return None


class OracleBackend(SqlBackend):
    engine = "oracle"
    paramstyle = "named"
    error_codes = _ERROR_CODES
    driver_module = "oracledb"
    drop_table_sql = "DROP TABLE {name} PURGE"

    def __init__(self, url: DatabaseURL, **kw: Any) -> None:
        self.thick, self.lib_dir = _mode(url)
        self.connect_params = _connect_params(url, thick=self.thick)
        super().__init__(url, **kw)

    def connect(self) -> Any:
        if self.thick:
            enable_thick_mode(self.lib_dir, self.connect_params.get("config_dir"))
        params = {k: v for k, v in self.connect_params.items()
                  if not (self.thick and k == "config_dir")}
        conn = oracledb.connect(user=self.url.username, password=self.url.password, **params)
        conn.autocommit = False
        conn.outputtypehandler = _lobs_as_strings
        return conn

    def limit_statements(self, conn: Any, ms: int | None) -> None:
        """``Connection.call_timeout``: the longest one round trip may take, in ms (0:
        no limit)."""
        conn.call_timeout = 0 if ms is None else int(ms)

    def classify(self, exc: BaseException) -> ErrorKind:
        if not isinstance(exc, oracledb.Error):
            return ErrorKind.OTHER
        code, full = oracle_codes(exc)
        kind = self.kind_of(code, full)
        err = exc.args[0] if exc.args else None
        if kind is None and getattr(err, "is_session_dead", False):
            kind = ErrorKind.CONNECTION
        return kind or ErrorKind.OTHER

    def execute(self, cur: Any, name_or_sql: str, params: dict[str, Any] | None = None) -> Any:
        """Bind the parameters of :data:`CLOB_BINDS` and :data:`TIMESTAMP_BINDS` with their
        type, as values made for this one execution: ``cursor.setinputsizes()`` would stay on
        the cursor and break its next statement (DPY-4008, python-oracledb issue #411)."""
        params = dict(params or {})
        for name in CLOB_BINDS.get(name_or_sql, ()):
            lob = cur.connection.createlob(oracledb.DB_TYPE_CLOB)
            if params[name]:
                lob.write(params[name])
            params[name] = lob
        for name in TIMESTAMP_BINDS.get(name_or_sql, ()):
            var = cur.var(oracledb.DB_TYPE_TIMESTAMP)
            var.setvalue(0, params[name])
            params[name] = var
        return super().execute(cur, name_or_sql, params)

    # ---- schema -------------------------------------------------------------------------

    # Oracle DDL commits as it runs, so a migration is not atomic: each statement stands
    # alone, and one whose object already exists is skipped, so that a concurrent or an
    # interrupted migration completes instead of failing.

    @contextmanager
    def migration_lock(self, cur: Any) -> Iterator[None]:
        """Not a lock: DDL_LOCK_TIMEOUT for the migration's statements (workers' open
        transactions hold portq_job's table lock), reset to 0 on the pooled session after."""
        self.execute(cur, "ddl_lock_wait")
        try:
            yield
        finally:
            self.execute(cur, "ddl_lock_nowait")

    def record_version(self, cur: Any, version: int) -> None:
        try:
            super().record_version(cur, version)
        except oracledb.Error as exc:
            if self.classify(exc) is not ErrorKind.UNIQUE:
                raise   # else another process recorded it first

    def create_version_table(self, cur: Any) -> None:
        self.run_ddl(cur, self.queries["create_version_table"])

    def run_ddl(self, cur: Any, statement: str) -> None:
        """Run one migration statement: skip one whose object already exists; retry one
        that met ORA-00054 (resource busy) after its DDL_LOCK_TIMEOUT wait, a few times."""
        for attempt in range(DDL_BUSY_RETRIES + 1):
            try:
                cur.execute(statement)
                return
            except oracledb.Error as exc:
                code = oracle_codes(exc)[0]
                if code in _ALREADY_EXISTS:
                    log.info("oracle: skipped, already exists: %s",
                             statement.split("(")[0].strip())
                    return
                if code != 54:
                    raise
                if attempt == DDL_BUSY_RETRIES:
                    raise DatabaseError(
                        f"migrate: {statement.split('(')[0].strip()!r} on "
                        f"{self.url.redacted()} still found its table locked (ORA-00054) "
                        f"after {attempt + 1} waits of DDL_LOCK_TIMEOUT: stop the workers, "
                        "or run portq migrate again when they are idle") from exc
                log.info("oracle: %s met ORA-00054, retrying", statement.split("(")[0])
                time.sleep(DDL_BUSY_PAUSE_S)

    # ---- enqueue ------------------------------------------------------------------------

    def insert_job(self, cur: Any, params: dict[str, Any]) -> EnqueueResult | None:
        out = cur.var(int)
        try:
            self.execute(cur, "insert_job", {**params, "job_id": out})
        except oracledb.Error as exc:
            # ORA-00001 rolled back this statement only; the transaction goes on
            if params.get("key") is not None and self.classify(exc) is ErrorKind.UNIQUE:
                return None
            raise
        value = out.getvalue()
        if isinstance(value, list):     # DML RETURNING yields one value per row
            value = value[0]
        return EnqueueResult(int(value), True)

    # ---- claim, reap, prune: lock n ids with a cursor, then act on them ------------------

    def lock_ids(self, cur: Any, name: str, params: dict[str, Any], limit: int) -> list[int]:
        """Fetch (and so lock) at most ``limit`` ids of the FOR UPDATE SKIP LOCKED query, in
        rounds of equal size of at most :data:`FETCH_ROWS` (one round per round trip)."""
        if limit <= 0:
            return []
        rounds = -(-limit // FETCH_ROWS)
        size = -(-limit // rounds)      # rounds * size - limit < rounds rows over-fetched
        lock_cur = cur.connection.cursor()
        ids: list[int] = []
        try:
            lock_cur.prefetchrows = size    # rows fetched in the execute round trip
            lock_cur.arraysize = size       # rows per later fetch round trip
            self.execute(lock_cur, name, params)
            while len(ids) < limit:
                rows = lock_cur.fetchmany(min(size, limit - len(ids)))
                if not rows:
                    break
                ids.extend(int(row[0]) for row in rows)
        finally:
            lock_cur.close()
        return ids

    def claim_rows(self, cur: Any, params: dict[str, Any], name: str = "claim"
                   ) -> list[Sequence[Any]]:
        # the locking cursor: claim_lock, or a fair claim's claim_key / claim_unkeyed
        lock = "claim_lock" if name == "claim" else name
        ids = self.lock_ids(cur, lock, params, int(params["limit"]))
        rows: list[Sequence[Any]] = []
        for chunk in id_lists(ids):
            self.execute(cur, "claim", {**params, "ids": chunk})
        for chunk in id_lists(ids):
            rows.extend(self.execute(cur, "claimed", {**params, "ids": chunk}).fetchall())
        return rows

    def fenced_rows(self, cur: Any, op: str, params: dict[str, Any]) -> set[tuple[int, int]]:
        """One statement: the claims go in as a CLOB (a VARCHAR bind over 4000 bytes would
        be sent as LONG), the rows written come back through RETURNING ... INTO array
        binds (one element per updated row); after ``complete_many`` the dependents of the
        jobs with ``has_dependents`` are released in this transaction."""
        size = len(json.loads(params["claims"]))
        ids, gens = cur.var(int, arraysize=size), cur.var(int, arraysize=size)
        binds = {**params, "done_ids": ids, "done_generations": gens}
        flags = binds["done_flags"] = cur.var(int, arraysize=size) \
            if op == "complete_many" else None
        self.execute(cur, op, binds)
        done = list(zip(ids.getvalue() or [], gens.getvalue() or [], strict=True))
        if flags is not None:  # has_dependents of each completed job
            self.completed_dependencies(cur, [int(i) for (i, _), f in zip(
                done, flags.getvalue() or [], strict=True) if f])
        return {(int(i), int(g)) for i, g in done}

    def pending(self, queue: str) -> tuple[bool, bool]:
        """A ready row another session holds locked is not there, as for the claim (a
        burst worker exits instead of waiting for that session): one row of
        ``pending_ready`` fetched, its lock released by the rollback; then ``pending``."""
        def probe(cur: Any) -> tuple[bool, bool]:
            ready = bool(self.lock_ids(cur, "pending_ready", {"queue": queue}, 1))
            cur.connection.rollback()
            (running,) = self.execute(cur, "pending", {"queue": queue}).fetchone()
            return ready, bool(running)
        return self.run("pending", probe, write=False)

    def reap_rows(self, cur: Any, params: dict[str, Any]) -> int:
        ids = self.lock_ids(cur, "reap_lock", params, int(params["limit"]))
        return sum(int(self.execute(cur, "reap", {**params, "ids": chunk}).rowcount)
                   for chunk in id_lists(ids))

    def prune_rows(self, cur: Any, params: dict[str, Any]) -> int:
        return self.batch_rows(cur, "prune", params)

    def batch_rows(self, cur: Any, name: str, params: dict[str, Any]) -> int:
        """Lock up to ``limit`` ids with ``<name>_lock``, then run ``name`` on them."""
        return self._locked_change(cur, name, params)[1]

    def batch_ids(self, cur: Any, name: str, params: dict[str, Any]) -> list[int]:
        """:meth:`batch_rows`, returning the ids locked and changed."""
        return self._locked_change(cur, name, params)[0]

    def _locked_change(self, cur: Any, name: str, params: dict[str, Any]
                       ) -> tuple[list[int], int]:
        ids = self.lock_ids(cur, f"{name}_lock", params, int(params["limit"]))
        return ids, sum(int(self.execute(cur, name, {**params, "ids": chunk}).rowcount)
                        for chunk in id_lists(ids))


def id_lists(ids: list[int]) -> Iterator[list[int]]:
    """``ids`` in lists of the lengths in :data:`ID_LIST_LENGTHS`, each padded by repeating
    its last id (a repeated id in an IN list matches the same row once)."""
    longest = ID_LIST_LENGTHS[-1]
    for i in range(0, len(ids), longest):
        chunk = ids[i:i + longest]
        length = next(n for n in ID_LIST_LENGTHS if n >= len(chunk))
        yield chunk + [chunk[-1]] * (length - len(chunk))


def _mode(url: DatabaseURL) -> tuple[bool, str | None]:
    """``(thick, lib_dir)`` from ``?mode=thin|thick`` and ``?lib_dir=``."""
    mode = url.query.get("mode", "thin").lower()
    if mode not in ("thin", "thick"):
        raise ConfigurationError(f"Oracle URL option mode={mode!r}: use thin or thick")
    lib_dir = url.query.get("lib_dir") or None
    if lib_dir is not None and mode != "thick":
        raise ConfigurationError("Oracle URL option lib_dir needs mode=thick")
    return mode == "thick", lib_dir


def _connect_params(url: DatabaseURL, thick: bool = False) -> dict[str, Any]:
    """Keyword arguments of ``oracledb.connect`` (host, port, service) from the URL."""
    params: dict[str, Any] = {"host": url.host, "port": url.port or DEFAULT_PORT}
    if url.database:
        params["service_name"] = url.database
    for key, value in url.query.items():
        if key in _MODE_OPTIONS:
            continue
        if key == "wallet_password" and thick:
            raise ConfigurationError(
                "Oracle URL option wallet_password is used by thin mode only; in thick mode "
                "use an auto-login wallet (cwallet.sso) in wallet_location or config_dir")
        kind = _OPTIONS.get(key)
        if kind is None:
            raise ConfigurationError(
                f"unknown Oracle URL option {key!r}; supported: "
                f"{', '.join(sorted([*_OPTIONS, *_MODE_OPTIONS]))}")
        try:
            if kind is bool:
                params[key] = _boolean(value)
            else:
                params[key] = kind(value)
        except ValueError:
            raise ConfigurationError(
                f"Oracle URL option {key}={value!r} is not a valid {kind.__name__}") from None
    # probes that keep an idle connection alive and notice a vanished server (minutes;
    # with 1, a dead peer is found within about a minute)
    params.setdefault("expire_time", 1)
    if "sid" in params:
        params.pop("service_name", None)
    if "service_name" not in params and "sid" not in params:
        raise ConfigurationError(
            "the Oracle URL names no service: use oracle://user:password@host:1521/SERVICE "
            "or ?service_name= (or ?sid=)")
    return params


def _boolean(value: str) -> bool:
    lower = value.lower()
    if lower in ("1", "true", "yes", "on"):
        return True
    if lower in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)
