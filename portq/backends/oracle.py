"""Oracle Database 19c+ (python-oracledb in thin mode: no Oracle Client libraries).

``FOR UPDATE`` cannot carry a row limit (ORA-02014), so a claim, a reap and a prune each
open a ``SELECT job_id ... ORDER BY ... FOR UPDATE SKIP LOCKED`` cursor with
``prefetchrows = arraysize = n``, fetch n rows (a SKIP LOCKED cursor locks rows as it
fetches them), close it, and update or delete exactly those ids in the same transaction.

Idempotent enqueue relies on Oracle rolling back only the failed statement: ORA-00001 on
the job key is caught and the existing id looked up, in the caller's transaction. DDL
commits implicitly, so :meth:`OracleBackend.migrate` runs each statement on its own and
tolerates objects that already exist. CLOBs are fetched as ``str`` on portq's connections.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Sequence
from typing import Any

import oracledb

from portq.backends.base import ErrorKind, SqlBackend
from portq.errors import ConfigurationError
from portq.job import EnqueueResult
from portq.url import DatabaseURL

log = logging.getLogger("portq.backend")

DEFAULT_PORT = 1521
ID_CHUNK = 500                      # ids per IN (...) list: Oracle allows at most 1000

_ERROR_CODES: dict[ErrorKind, frozenset[object]] = {
    ErrorKind.UNIQUE: frozenset({1}),              # ORA-00001 unique constraint violated
    # check constraint, NULL into / update to NOT NULL
    ErrorKind.CHECK: frozenset({2290, 1400, 1407}),
    # deadlock, resource busy, serialization, WAIT timeout
    ErrorKind.RETRYABLE: frozenset({60, 54, 8177, 30006}),
    ErrorKind.CONNECTION: frozenset({
        28, 1012, 1089, 1092, 3113, 3114, 3122, 3135,   # session killed, not logged on, ...
        12170, 12514, 12528, 12537, 12541, 12547, 12570, 12571,  # TNS: no listener, timeouts
        "DPY-1001", "DPY-4011", "DPY-6000", "DPY-6005",  # python-oracledb: not connected, ...
    }),
}
# "ORA-00955: name is already used by an existing object" and friends: tolerated by migrate
_ALREADY_EXISTS = {955, 1408, 1430, 2260, 2261, 2264, 2275}
_ORA = re.compile(r"\bORA-(\d{5})\b")
# URL query options passed to oracledb.connect, converted to the type it expects
_OPTIONS: dict[str, type] = {
    "service_name": str, "sid": str, "protocol": str, "tcp_connect_timeout": float,
    "expire_time": int, "retry_count": int, "retry_delay": int, "wallet_location": str,
    "config_dir": str, "ssl_server_dn_match": bool, "ssl_server_cert_dn": str,
    "https_proxy": str, "https_proxy_port": int, "program": str, "stmtcachesize": int,
}


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

    def __init__(self, url: DatabaseURL, **kw: Any) -> None:
        self.connect_params = _connect_params(url)
        super().__init__(url, **kw)

    def connect(self) -> Any:
        conn = oracledb.connect(user=self.url.username, password=self.url.password,
                                **self.connect_params)
        conn.autocommit = False
        conn.outputtypehandler = _lobs_as_strings
        return conn

    def classify(self, exc: BaseException) -> ErrorKind:
        if not isinstance(exc, oracledb.Error):
            return ErrorKind.OTHER
        code, full = oracle_codes(exc)
        kind = self.kind_of(code, full)
        err = exc.args[0] if exc.args else None
        if kind is None and getattr(err, "is_session_dead", False):
            kind = ErrorKind.CONNECTION
        return kind or ErrorKind.OTHER

    # ---- schema -------------------------------------------------------------------------

    # Oracle DDL commits as it runs, so a migration is not atomic: each statement stands
    # alone, and one whose object already exists is skipped, so that a concurrent or an
    # interrupted migration completes instead of failing.

    def record_version(self, cur: Any, version: int) -> None:
        try:
            super().record_version(cur, version)
        except oracledb.Error as exc:
            if self.classify(exc) is not ErrorKind.UNIQUE:
                raise   # else another process recorded it first

    def create_version_table(self, cur: Any) -> None:
        self.run_ddl(cur, self.queries["create_version_table"])

    def run_ddl(self, cur: Any, statement: str) -> None:
        try:
            cur.execute(statement)
        except oracledb.Error as exc:
            if oracle_codes(exc)[0] not in _ALREADY_EXISTS:
                raise
            log.info("oracle: skipped, already exists: %s", statement.split("(")[0].strip())

    # ---- enqueue ------------------------------------------------------------------------

    def insert_job(self, cur: Any, params: dict[str, Any]) -> EnqueueResult | None:
        out = cur.var(int)
        cur.setinputsizes(run_at=oracledb.DB_TYPE_TIMESTAMP)
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
        """Fetch (and so lock) at most ``limit`` ids of the FOR UPDATE SKIP LOCKED query."""
        if limit <= 0:
            return []
        lock_cur = cur.connection.cursor()
        try:
            lock_cur.prefetchrows = limit   # rows fetched in the execute round trip
            lock_cur.arraysize = limit      # rows per later fetch: never more than n
            self.execute(lock_cur, name, params)
            rows = lock_cur.fetchmany(limit)
        finally:
            lock_cur.close()
        return [int(row[0]) for row in rows]

    def claim_rows(self, cur: Any, params: dict[str, Any]) -> list[Sequence[Any]]:
        ids = self.lock_ids(cur, "claim_lock", params, int(params["limit"]))
        rows: list[Sequence[Any]] = []
        for chunk in _chunks(ids):
            self.execute(cur, "claim", {**params, "ids": chunk})
        for chunk in _chunks(ids):
            rows.extend(self.execute(cur, "claimed", {**params, "ids": chunk}).fetchall())
        return rows

    def fenced_rows(self, cur: Any, op: str, params: dict[str, Any]) -> set[tuple[int, int]]:
        """One statement: the claims go in as a CLOB (a VARCHAR bind over 4000 bytes would
        be sent as LONG), the rows written come back through RETURNING ... INTO array
        binds (one element per updated row)."""
        size = len(json.loads(params["claims"]))
        ids, gens = cur.var(int, arraysize=size), cur.var(int, arraysize=size)
        cur.setinputsizes(claims=oracledb.DB_TYPE_CLOB)
        self.execute(cur, op, {**params, "done_ids": ids, "done_generations": gens})
        return {(int(i), int(g)) for i, g in zip(ids.getvalue() or [], gens.getvalue() or [],
                                                  strict=True)}

    def reap_rows(self, cur: Any, params: dict[str, Any]) -> int:
        ids = self.lock_ids(cur, "reap_lock", params, int(params["limit"]))
        return sum(int(self.execute(cur, "reap", {**params, "ids": chunk}).rowcount)
                   for chunk in _chunks(ids))

    def prune_rows(self, cur: Any, params: dict[str, Any]) -> int:
        return self.batch_rows(cur, "prune", params)

    def batch_rows(self, cur: Any, name: str, params: dict[str, Any]) -> int:
        """Lock up to ``limit`` ids with ``<name>_lock``, then run ``name`` on them."""
        ids = self.lock_ids(cur, f"{name}_lock", params, int(params["limit"]))
        return sum(int(self.execute(cur, name, {**params, "ids": chunk}).rowcount)
                   for chunk in _chunks(ids))


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for i in range(0, len(ids), ID_CHUNK):
        yield ids[i:i + ID_CHUNK]


def _connect_params(url: DatabaseURL) -> dict[str, Any]:
    """Keyword arguments of ``oracledb.connect`` (host, port, service) from the URL."""
    params: dict[str, Any] = {"host": url.host, "port": url.port or DEFAULT_PORT}
    if url.database:
        params["service_name"] = url.database
    for key, value in url.query.items():
        kind = _OPTIONS.get(key)
        if kind is None:
            raise ConfigurationError(
                f"unknown Oracle URL option {key!r}; supported: {', '.join(sorted(_OPTIONS))}")
        try:
            if kind is bool:
                params[key] = _boolean(value)
            else:
                params[key] = kind(value)
        except ValueError:
            raise ConfigurationError(
                f"Oracle URL option {key}={value!r} is not a valid {kind.__name__}") from None
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
