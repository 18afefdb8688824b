"""PostgreSQL (psycopg 3): the claim is one UPDATE ... FROM (SELECT ... FOR UPDATE SKIP
LOCKED) RETURNING statement; idempotent enqueue is INSERT ... ON CONFLICT DO NOTHING."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import sql as pgsql
from psycopg.types.datetime import TimestamptzLoader

from portq.backends.base import ErrorKind, SqlBackend, one_line
from portq.errors import ConfigurationError
from portq.job import EnqueueResult
from portq.pool import close_quietly
from portq.protocol import NewJob

_ERROR_CODES: dict[ErrorKind, frozenset[object]] = {  # SQLSTATEs
    ErrorKind.UNIQUE: frozenset({"23505"}),
    ErrorKind.CHECK: frozenset({"23514", "23502"}),       # check, not null
    # deadlock, serialization failure, lock not available
    ErrorKind.RETRYABLE: frozenset({"40P01", "40001", "55P03"}),
    # admin shutdown, crash shutdown, cannot connect now (class 08 is matched by prefix)
    ErrorKind.CONNECTION: frozenset({"57P01", "57P02", "57P03"}),
    ErrorKind.LOGIN: frozenset({"28P01", "28000"}),   # invalid password / authorization
    ErrorKind.UNKNOWN_DATABASE: frozenset({"3D000"}),  # invalid_catalog_name
    ErrorKind.UNDEFINED_TABLE: frozenset({"42P01"}),   # undefined_table
    ErrorKind.TIMEOUT: frozenset({"57014"}),           # query_canceled (statement_timeout)
}
# libpq gives no SQLSTATE for an error while connecting (psycopg's ``sqlstate`` is None):
# the server's words for those codes, as sent in its FATAL message (lc_messages=C/en)
_CONNECT_MESSAGES: dict[str, str] = {
    "28P01": "password authentication failed",
    "28000": r'role ".*" does not exist|no pg_hba\.conf entry',
    "3D000": r'database ".*" does not exist',
}
_MAX_IDENTIFIER_BYTES = 63  # NAMEDATALEN - 1: the longest channel name LISTEN accepts
#: ``complete_many`` of the previous batch and ``claim`` of the next in one statement (one
#: round trip instead of two; benchmarks/run.py measures it as ``raw complete_claim``),
#: made of the two statements of queries.sql so that it can never drift from them.
#: Data-modifying CTEs run exactly once, on one snapshot: the claim's candidates are ready
#: rows, the completed ones running, so the two never touch the same row. Rows: kind
#: 'done' (job_id, attempts of each completed claim) and 'claimed' (the claim's columns).
COMPLETE_CLAIM = """\
WITH done AS (
{complete_many}
), claimed AS (
{claim}
)
SELECT 'claimed' AS kind, job_id, queue, payload, priority, attempts, max_attempts,
       job_key, lease_until, concurrency_key, concurrency_limit, run_at, meta
FROM claimed
UNION ALL
SELECT 'done', job_id, NULL, NULL, NULL, attempts, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM done"""


#: libpq keepalives: the first probe after 30 s idle, then every 10 s, the connection
#: dead after 3 unanswered (60 s); tcp_user_timeout: unacknowledged data for 60 s ends it
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
              "keepalives_count": 3, "tcp_user_timeout": 60000}


class PostgresBackend(SqlBackend):
    engine = "postgres"
    paramstyle = "pyformat"
    error_codes = _ERROR_CODES
    driver_module = "psycopg"
    autocommit_single = True  # every single=True operation here is one statement
    idle_max_default = 2.0  # LISTEN/NOTIFY wakes idle workers; polling is the fallback
    announces_cancel = True  # cancel/cancel_many NOTIFY the cancel channel

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.queries["complete_claim"] = COMPLETE_CLAIM.format(**{
            name: self.queries[name].strip().rstrip(";") for name in ("complete_many", "claim")})

    def connect(self) -> Any:
        try:
            return psycopg.connect(autocommit=False, **self.connect_kwargs())
        except psycopg.ProgrammingError as exc:
            if "invalid connection option" not in str(exc):
                raise
            raise ConfigurationError(
                f"unknown PostgreSQL URL option: {one_line(str(exc))}; the query string "
                "takes libpq connection parameters (e.g. sslmode, connect_timeout, "
                "application_name)"
            ) from None

    def connect_kwargs(self) -> dict[str, Any]:
        """psycopg.connect() arguments from the URL (includes the password: never log)."""
        kw: dict[str, Any] = {k: v for k, v in {
            "host": self.url.host, "port": self.url.port, "user": self.url.username,
            "password": self.url.password, "dbname": self.url.database}.items()
            if v is not None}
        kw.update(self.url.query)
        kw.setdefault("connect_timeout", 10)
        kw.setdefault("application_name", "portq")
        # a server that vanished is noticed within about a minute, idle or mid-statement
        for name, value in KEEPALIVES.items():
            kw.setdefault(name, value)
        return kw

    def to_db_time(self, value: datetime) -> Any:
        """Aware (UTC): psycopg sends it with its offset, so that the server's reading
        does not depend on the session's TimeZone (a caller's connection may have another:
        Django with USE_TZ = False sets TIME_ZONE), as a naive value's does."""
        return value.astimezone(UTC)

    def caller_cursor(self, conn: Any) -> Any:
        """A cursor reading ``timestamptz`` as psycopg does by default (aware): a caller
        may load it otherwise on its connection (Django with USE_TZ = False registers a
        loader of naive local times), and portq reads every naive time as UTC. The
        loader is the cursor's own; the connection's stay as they are."""
        cur = conn.cursor()
        cur.adapters.register_loader("timestamptz", TimestamptzLoader)
        return cur

    def limit_statements(self, conn: Any, ms: int) -> None:
        """``statement_timeout`` for the session (the server cancels with 57014), and
        ``lock_timeout`` at half of it (55P03)."""
        self.set_up_session(conn, lambda cur: cur.execute(
            f"SET statement_timeout = {int(ms):d}; SET lock_timeout = {max(1, int(ms) // 2):d}"))

    def classify(self, exc: BaseException) -> ErrorKind:
        if not isinstance(exc, psycopg.Error):
            return ErrorKind.OTHER
        state = exc.sqlstate or _connect_sqlstate(str(exc))
        kind = self.kind_of(state)
        if kind is None and (state.startswith("08") or (
                isinstance(exc, psycopg.OperationalError) and not state)):
            kind = ErrorKind.CONNECTION
        return kind or ErrorKind.OTHER

    def insert_jobs(self, cur: Any, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """Many jobs in one INSERT ... SELECT FROM jsonb_to_recordset ... ON CONFLICT
        (job_key) DO NOTHING statement; results in the order given, existing keys return
        their id (a key repeated within the batch returns the first one's id)."""
        if len(jobs) < 2:
            return super().insert_jobs(cur, jobs)
        rows = self.execute(cur, "insert_jobs_bulk", {"jobs": _jobs_json(jobs)}).fetchall()
        results: list[EnqueueResult] = []
        first_of_key: dict[str, int] = {}
        for (job_id, key, inserted), job in zip(rows, jobs, strict=True):
            if inserted:
                if key is not None:
                    first_of_key[key] = int(job_id)
                results.append(EnqueueResult(int(job_id), True))
                continue
            existing = first_of_key.get(key) if key is not None else None
            results.append(EnqueueResult(
                self.job_id_of_key(cur, job.key) if existing is None else existing, False))
        self.announce(cur, sorted({job.queue for job in jobs}))
        return results

    @contextmanager
    def migration_lock(self, cur: Any) -> Iterator[None]:
        self.execute(cur, "migration_lock")
        yield

    def channel(self, queue: str) -> str:
        """The LISTEN/NOTIFY channel of ``queue``: prefix + queue name, or prefix + its
        SHA-1 when that is longer than PostgreSQL's 63-byte identifier limit."""
        name = self.prefix + queue
        if len(name.encode("utf-8")) <= _MAX_IDENTIFIER_BYTES:
            return name
        return self.prefix + hashlib.sha1(queue.encode("utf-8")).hexdigest()

    def announce(self, cur: Any, queues: Sequence[str]) -> None:
        """``pg_notify`` each queue's channel; PostgreSQL delivers it at commit (and drops
        it on rollback), so a worker never wakes for a job it cannot see yet."""
        for queue in queues:
            self.execute(cur, "notify", {"channel": self.channel(queue)})

    @property
    def cancel_channel(self) -> str:
        """The channel ``cancel``/``cancel_many`` notify when they cancel a running job
        (``'portq_#cancel'`` in queries.sql, prefixed; no queue's channel has a '#')."""
        return self.prefix + "#cancel"

    def listener(self, queues: Sequence[str]) -> PostgresListener:
        return PostgresListener(self, [self.channel(q) for q in queues], self.cancel_channel)


def _connect_sqlstate(message: str) -> str:
    """The SQLSTATE of a connection failure, from its message (see _CONNECT_MESSAGES)."""
    for state, pattern in _CONNECT_MESSAGES.items():
        if re.search(r"FATAL:\s+(?:" + pattern + ")", message):
            return state
    return ""


def _jobs_json(jobs: Sequence[NewJob]) -> str:
    """The jobs as the JSON array insert_jobs_bulk reads (each payload as JSON text, so
    that a JSON null payload stays a jsonb 'null', not SQL NULL)."""
    parts = []
    for job in jobs:
        run_at = None if job.run_at is None else job.run_at.isoformat()
        parts.append(
            f'{{"queue":{json.dumps(job.queue)},"payload":{json.dumps(job.payload_json)},'
            f'"priority":{job.priority:d},"run_at":{json.dumps(run_at)},'
            f'"delay_ms":{job.delay_ms:d},"max_attempts":{job.max_attempts:d},'
            f'"job_key":{json.dumps(job.key)},'
            f'"concurrency_key":{json.dumps(job.concurrency_key)},'
            f'"concurrency_limit":{json.dumps(job.concurrency_limit)},'
            f'"timeout_ms":{json.dumps(job.timeout_ms)},'
            f'"meta":{json.dumps(job.meta)}}}')
    return "[" + ",".join(parts) + "]"


class PostgresListener:
    """``LISTEN`` on a dedicated autocommit connection, opened on first :meth:`wait`: on
    the queues' channels (new jobs) and on the cancel channel (running jobs cancelled)."""

    def __init__(self, backend: PostgresBackend, channels: Sequence[str],
                 cancel_channel: str) -> None:
        self._backend = backend
        self._cancel_channel = cancel_channel
        self._channels = [*channels, cancel_channel]
        self._conn: psycopg.Connection[Any] | None = None
        self._cancelled: list[tuple[int, int]] = []

    def wait(self, timeout: float) -> bool:
        if self._conn is None:
            conn = psycopg.connect(autocommit=True, **{
                **self._backend.connect_kwargs(), "application_name": "portq-listen"})
            try:
                for channel in self._channels:
                    conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)))
            except BaseException:
                close_quietly(conn)
                raise
            self._conn = conn
        announced = False
        try:
            for note in self._conn.notifies(timeout=timeout, stop_after=1):
                if note.channel != self._cancel_channel:
                    announced = True
                    continue
                job_id, _, generation = note.payload.partition(" ")
                if job_id.isdigit() and generation.isdigit():
                    self._cancelled.append((int(job_id), int(generation)))
        except BaseException:
            self.close()
            raise
        return announced

    def take_cancelled(self) -> list[tuple[int, int]]:
        cancelled, self._cancelled = self._cancelled, []
        return cancelled

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            close_quietly(conn)
