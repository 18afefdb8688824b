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

from portq.backends.contract import ErrorKind
from portq.backends.sql import SqlBackend
from portq.backends.sql.common import POLL_IDLE_MAX, one_line
from portq.errors import ConfigurationError, DatabaseError
from portq.job import EnqueueResult
from portq.pool import close_quietly
from portq.protocol import NewJob, ServerIdentity
from portq.url import DatabaseURL, parse_url

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
    # PgBouncer's words for a user it cannot authenticate ('"trust" authentication failed'
    # where auth_type=trust and the user is not in its auth_file)
    "28P01": r'password authentication failed|"\w+" authentication failed',
    "28000": r'role ".*" does not exist|no pg_hba\.conf entry',
    # PgBouncer: "no such database: x" for a database its [databases] section lacks
    "3D000": r'database ".*" does not exist|no such database: ',
}
DEFAULT_PORT = 5432
#: an idle worker's longest sleep where LISTEN/NOTIFY wakes it (polling is the fallback)
LISTEN_IDLE_MAX = 2.0
#: URL options portq reads itself and never passes to libpq
PORTQ_OPTIONS = frozenset({"listen_url"})
_MAX_IDENTIFIER_BYTES = 63  # NAMEDATALEN - 1: the longest channel name LISTEN accepts


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
    #: psycopg: a claim of 20 jobs cost about 20 µs less client CPU on a kept cursor (its
    #: loaders made once); a client-side cursor holds no server state between uses
    keeps_cursor = True
    completes_dependents_in_statement = True  # complete_many's CTEs release dependents

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._listen_url = listen_url_of(self.url)
        self._pooled: bool | None = None  # a pooler in between (read at connect)

    native_async = True  # psycopg's AsyncConnection: portq.aio runs operations on it

    def connect(self) -> Any:
        with _url_options_checked():
            return psycopg.connect(autocommit=False, **libpq_kwargs(self.url))

    async def connect_async(self) -> Any:
        """A psycopg ``AsyncConnection`` with :meth:`connect`'s arguments (keepalives,
        application_name, ...); the pool's session setup follows, as for :meth:`connect`."""
        with _url_options_checked():
            return await psycopg.AsyncConnection.connect(autocommit=False,
                                                         **libpq_kwargs(self.url))

    def connect_kwargs(self) -> dict[str, Any]:
        """psycopg.connect() arguments from the URL for connections portq's pools do not
        open (a caller's): behind a pooler, with prepared statements off (see
        :meth:`read_identity`). Includes the password: never log it."""
        kw = libpq_kwargs(self.url)
        if self._pooled_or_unknown():
            kw["prepare_threshold"] = None
        return kw

    @property
    def behind_pooler(self) -> bool:
        """True when a connection pooler (PgBouncer, ...) stands between portq and
        PostgreSQL: the process id a connection's start-up reported is not the server
        process that runs its statements. Read at connect (opens one if none has been)."""
        if self._pooled is None:
            self.pool.release(self.pool.acquire())
        return bool(self._pooled)

    @property
    def listen_url(self) -> DatabaseURL | None:
        """Where LISTEN connects: the ``listen_url=`` option's URL (a direct connection
        past a transaction-mode pooler), None (``listen_url=none``, or no option and a
        pooler detected: workers poll), or the URL's own servers."""
        if "listen_url" in self.url.query:
            return self._listen_url
        return None if self._pooled_or_unknown() else self.url

    def _pooled_or_unknown(self) -> bool:
        try:
            return self.behind_pooler
        except DatabaseError:  # unreachable for now: LISTEN is tried (and retried) later
            return False

    @property
    def announces_cancel(self) -> bool:
        """cancel/cancel_many NOTIFY the cancel channel: heard where workers LISTEN."""
        return self.listen_url is not None

    @property
    def idle_max_default(self) -> float:
        """Short (polling's) where nothing will announce new jobs, else LISTEN's."""
        return LISTEN_IDLE_MAX if self.listen_url is not None else POLL_IDLE_MAX

    @property
    def listen_mode(self) -> str:
        """What a worker's start-up line says about how it finds new jobs."""
        target = self.listen_url
        if target is None:
            if "listen_url" in self.url.query:
                return "polling (listen_url=none)"
            return ("polling (a connection pooler is between portq and PostgreSQL, LISTEN "
                    "cannot pass it: give listen_url=DIRECT_URL for LISTEN)")
        if target is self.url:
            return "LISTEN on the queue's URL"
        return f"LISTEN via {target.redacted()}"

    def listener(self, queues: Sequence[str]) -> PostgresListener | None:
        if self.listen_url is None:
            return None
        return PostgresListener(self, [self.channel(q) for q in queues], self.cancel_channel)

    def read_identity(self, conn: Any) -> ServerIdentity | None:
        """The server's system identifier and current timeline (None when refused: a
        role without access to pg_control_system()); notes whether a pooler is between."""
        identity = None
        try:
            with conn.cursor() as cur:
                sysid, timeline, pid = self.execute(cur, "server_identity").fetchone()
            identity = ServerIdentity(str(sysid), int(timeline))
        except psycopg.errors.InsufficientPrivilege:
            conn.rollback()
            with conn.cursor() as cur:
                (pid,) = self.execute(cur, "backend_pid").fetchone()
        conn.rollback()
        self._pooled = conn.info.backend_pid != pid
        if self._pooled:
            # a transaction pooler may run the next transaction on another server process,
            # which never saw this connection's prepared statements (PgBouncer < 1.21, or
            # without max_prepared_statements): psycopg must not prepare any
            conn.prepare_threshold = None
        return identity

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

    def limit_statements(self, conn: Any, ms: int | None) -> None:
        """``statement_timeout`` for the session (the server cancels with 57014), and
        ``lock_timeout`` at half of it (55P03); 0 for both lifts them."""
        statement, lock = (0, 0) if ms is None else (int(ms), max(1, int(ms) // 2))
        self.set_up_session(conn, lambda cur: cur.execute(
            f"SET statement_timeout = {statement:d}; SET lock_timeout = {lock:d}"))

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
        SHA-256's first 40 hex digits when that is longer than PostgreSQL's 63-byte
        identifier limit (what complete_many and dep_release compute in SQL too)."""
        name = self.prefix + queue
        if len(name.encode("utf-8")) <= _MAX_IDENTIFIER_BYTES:
            return name
        return self.prefix + hashlib.sha256(queue.encode("utf-8")).hexdigest()[:40]

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


@contextmanager
def _url_options_checked() -> Iterator[None]:
    """An unknown libpq option in the URL raised as one clear ConfigurationError."""
    try:
        yield
    except psycopg.ProgrammingError as exc:
        if "invalid connection option" not in str(exc):
            raise
        raise ConfigurationError(
            f"unknown PostgreSQL URL option: {one_line(str(exc))}; the query string "
            "takes libpq connection parameters (e.g. sslmode, connect_timeout, "
            "application_name)"
        ) from None


def libpq_kwargs(url: DatabaseURL) -> dict[str, Any]:
    """psycopg.connect() arguments of ``url`` (a host list as libpq's comma-separated
    host and port, a Unix socket directory as its host; portq's own options left out).
    Holds the password: never log it."""
    kw: dict[str, Any] = {k: v for k, v in {
        "user": url.username, "password": url.password, "dbname": url.database}.items()
        if v is not None}
    if url.hosts:  # none: libpq's default (PGHOST, else its Unix socket directory)
        kw["host"] = ",".join(host for host, _ in url.hosts)
    if any(port is not None for _, port in url.hosts):
        kw["port"] = ",".join(str(DEFAULT_PORT if p is None else p) for _, p in url.hosts)
    kw.update((k, v) for k, v in url.query.items() if k not in PORTQ_OPTIONS)
    kw.setdefault("connect_timeout", 10)
    kw.setdefault("application_name", "portq")
    # a server that vanished is noticed within about a minute, idle or mid-statement
    for name, value in KEEPALIVES.items():
        kw.setdefault(name, value)
    return kw


def listen_url_of(url: DatabaseURL) -> DatabaseURL | None:
    """The URL LISTEN connects to: ``listen_url=`` (a PostgreSQL URL, percent-encoded, or
    ``none`` to poll), else ``url`` itself."""
    value = url.query.get("listen_url")
    if value is None:
        return url
    if value.strip().lower() in ("none", "off", ""):
        return None
    target = parse_url(value)
    if target.engine != "postgres":
        raise ConfigurationError(
            f"listen_url {target.redacted()!r} in {url.redacted()!r} is not a PostgreSQL "
            "URL: LISTEN needs a direct connection to the same PostgreSQL database")
    if "listen_url" in target.query:
        raise ConfigurationError(f"listen_url {target.redacted()!r} has a listen_url itself")
    return target


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
        """Wait up to ``timeout`` s for a notification; a driver error is raised as portq's
        one-line error (the worker logs it as one WARNING line and retries)."""
        try:
            return self._wait(timeout)
        except psycopg.Error as exc:
            connecting = self._conn is None
            self.close()
            kind = self._backend.classify(exc)
            error = self._backend.translate("listen", exc, kind, connecting=connecting)
            raise error or DatabaseError(
                f"listen: {type(exc).__name__}: {self._backend.url.scrub(one_line(str(exc)))}"
            ) from None

    def _wait(self, timeout: float) -> bool:
        if self._conn is None:
            target = self._backend.listen_url
            assert target is not None  # a backend without one makes no listener
            conn = psycopg.connect(autocommit=True, **{
                **libpq_kwargs(target), "application_name": "portq-listen"})
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
