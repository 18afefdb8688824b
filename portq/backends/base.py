"""The DB-API implementation of the protocol shared by every engine.

An engine module subclasses :class:`SqlBackend` and supplies only what differs: how to
connect, its paramstyle, how a transaction starts, how driver errors map to
:class:`ErrorKind`, how values convert, and (where the engine's SQL cannot express an
operation in one statement) the few methods it overrides.
"""

from __future__ import annotations

import enum
import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Protocol, TypeVar

from portq.backends import dependencies
from portq.backends.fair import fair_rows
from portq.errors import (
    CannotConnect,
    ConfigurationError,
    ConnectionLost,
    DatabaseBusy,
    DatabaseError,
    DatabaseMissing,
    LoginFailed,
    PortqError,
    SchemaError,
    SchemaMissingError,
    StatementTimeout,
)
from portq.job import (
    STATS_WINDOW_S,
    Claim,
    DependencyReader,
    EnqueueResult,
    Job,
    JobError,
    JobRecord,
    QueueStats,
    ServerInfo,
    WorkerActivity,
    WorkerInfo,
)
from portq.pool import Pool, close_quietly
from portq.protocol import Backend, Capabilities, NewJob, ServerIdentity
from portq.sql import ParamStyle, bind, load_migrations, load_queries, validate_prefix
from portq.url import DatabaseURL

log = logging.getLogger("portq.backend")
T = TypeVar("T")
#: the orders of :meth:`SqlBackend.jobs` and the statement of each
JOB_ORDERS = {"id": "jobs", "-id": "jobs_newest", "run_at": "jobs_by_run_at"}
#: a worker that found no concurrency limit on a queue looks again after this long
LIMIT_RECHECK_S = 1.0
#: a queue whose claim returned jobs with a concurrency key claims in a transaction of its
#: own (which settles the keys) for this long before the one-statement claim is tried again
KEYED_RECHECK_S = 60.0
#: most entries a queue's rate log keeps: older ones merge into the next (counted as late
#: as it: stricter, never looser)
RATE_LOG_MAX = 64
#: the guard added to a rate limit's window: RATE_GUARD_FRACTION of the period, within
#: [RATE_GUARD_MIN_MS, RATE_GUARD_MAX_MS] (the time a worker has to start a claimed job)
RATE_GUARD_MIN_MS = 20
RATE_GUARD_MAX_MS = 250
RATE_GUARD_FRACTION = 0.05
#: columns of a claimed row (CLAIM_COLUMNS in SqlBackend.job_from_row): where the
#: concurrency key, the job's key limit, the generation and the priority are
CKEY_COLUMN, CLIMIT_COLUMN, GENERATION_COLUMN, PRIORITY_COLUMN = 8, 9, 4, 3
ALL_QUEUES = "*"  # bound instead of NULL for "every queue" (or state); never a valid name
#: longest idle sleep of a worker that only polls: a new job waits at most this long
POLL_IDLE_MAX = 0.25


def conflict_delay(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (1-based) of a transaction that hit a
    deadlock, serialization failure, lock timeout or busy database: full jitter, 1 s cap."""
    return random.uniform(0, min(1.0, 0.005 * 2 ** attempt))


class ErrorKind(enum.Enum):
    """What a driver exception means to portq, whatever the engine."""

    UNIQUE = "unique"            # unique/primary key violation
    CHECK = "check"              # CHECK or NOT NULL constraint violation
    RETRYABLE = "retryable"      # deadlock, serialization failure, lock timeout, busy
    CONNECTION = "connection"    # the connection is gone; discard it
    LOGIN = "login"              # the server refused the user name or password
    UNKNOWN_DATABASE = "unknown_database"  # the URL's database does not exist
    UNDEFINED_TABLE = "undefined_table"    # a portq table is missing: never migrated
    TIMEOUT = "timeout"          # the statement outran the connection's statement timeout
    OTHER = "other"


#: the order :meth:`SqlBackend.kind_of` tries kinds in (a missing database before a
#: failed login: SQL Server reports 4060 together with 18456)
KIND_ORDER = (ErrorKind.UNIQUE, ErrorKind.CHECK, ErrorKind.RETRYABLE, ErrorKind.TIMEOUT,
              ErrorKind.UNDEFINED_TABLE, ErrorKind.UNKNOWN_DATABASE, ErrorKind.LOGIN,
              ErrorKind.CONNECTION)


class Listener(Protocol):
    """A dedicated connection that waits for :meth:`SqlBackend.announce` messages."""

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True when jobs were announced meanwhile."""

    def take_cancelled(self) -> list[tuple[int, int]]:
        """The ``(job_id, generation)`` of running jobs announced cancelled since the last
        call ([] where the engine announces none: heartbeats find them)."""

    def close(self) -> None:
        """Close the connection."""


def listen_mode(backend: SqlBackend, listen: bool) -> str:
    """How a worker with ``listen`` finds new jobs on ``backend`` (its start-up line)."""
    return backend.listen_mode if listen else "polling (listen=False)"


class SqlBackend(Backend):
    """Protocol operations driven by the named statements of ``dialects/<engine>/``."""

    engine: ClassVar[str]
    paramstyle: ClassVar[ParamStyle]
    driver_module: ClassVar[str]  # module prefix of connection classes this backend accepts
    #: how many times a claim (or other own-transaction operation) is retried on
    #: deadlock / serialization / busy before the error is raised
    max_retries: ClassVar[int] = 8
    #: a worker's longest idle sleep between claims of an empty queue unless given: where
    #: nothing announces new jobs (no :meth:`listener`) polling is what a new job waits
    #: for, so it stays short (at most ~6.7 claims/s per idle worker)
    default_idle_max: ClassVar[float] = POLL_IDLE_MAX
    #: True where the database has one write lock whose waiters sleep in a busy handler
    #: (SQLite): a Worker then writes its claims and its completions from one thread, so
    #: that its own threads never queue for the lock behind each other
    single_writer: ClassVar[bool] = False

    def __init__(self, url: DatabaseURL, *, prefix: str = "portq_", pool_size: int = 10,
                 pool_timeout: float = 30.0, statement_timeout_ms: int | None = None) -> None:
        self.url = url
        if statement_timeout_ms is not None and (
                isinstance(statement_timeout_ms, bool) or not isinstance(statement_timeout_ms, int)
                or not 1 <= statement_timeout_ms <= 3_600_000):
            raise ConfigurationError(f"statement_timeout_ms={statement_timeout_ms!r} must be a "
                                     "whole number of milliseconds from 1 to 3600000")
        #: the longest a statement of this backend's connections may run (None: no limit)
        self.statement_timeout_ms = statement_timeout_ms
        self.prefix = validate_prefix(prefix)
        self.queries = load_queries(self.engine, self.prefix)
        self.pool = Pool(self.open_connection, max_size=pool_size, timeout=pool_timeout)
        self.pool.renew = lambda conn: self.limit_statements(conn, self.statement_timeout_ms)
        self._lock = threading.Lock()
        # queue -> monotonic time until which it is known to have no concurrency limit
        self._unlimited_until: dict[str, float] = {}
        # queue -> monotonic time until which its claims settle concurrency keys in the
        # claim's own transaction (a recent claim returned keyed jobs)
        self._keyed_until: dict[str, float] = {}
        self._identity: ServerIdentity | None = None
        self._identity_watchers: list[Callable[[ServerIdentity, ServerIdentity], object]] = []
        #: how the jobs this backend claims read their dependencies' results
        self._dependency_reader = DependencyReader(self.dependency_results)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url.redacted()!r}, prefix={self.prefix!r})"

    # ---- what an engine module supplies -------------------------------------------------

    def connect(self) -> Any:
        """Open a new DB-API connection with autocommit off (or managed by :meth:`begin`)."""
        raise NotImplementedError

    def classify(self, exc: BaseException) -> ErrorKind:
        """Map a driver exception to an :class:`ErrorKind`."""
        raise NotImplementedError

    @staticmethod
    def set_up_session(conn: Any, setup: Callable[[Any], object]) -> Any:
        """Run ``setup(cursor)`` on a new connection and commit; close it if that fails."""
        try:
            cur = conn.cursor()
            try:
                setup(cur)
            finally:
                close_quietly(cur)
            conn.commit()
        except BaseException:
            close_quietly(conn)
            raise
        return conn

    #: the engine's error codes (numbers, SQLSTATEs, ...) for each kind, for :meth:`kind_of`
    error_codes: ClassVar[dict[ErrorKind, frozenset[object]]] = {}

    def kind_of(self, *codes: object) -> ErrorKind | None:
        """The first kind (in :data:`KIND_ORDER`) whose codes include one of ``codes``;
        None when none does."""
        for kind in KIND_ORDER:
            if any(code in self.error_codes.get(kind, ()) for code in codes):
                return kind
        return None

    def begin(self, conn: Any, write: bool) -> None:
        """Start a transaction on a pooled connection (most drivers do so implicitly);
        ``write`` is False for transactions that only read."""

    def to_db_time(self, value: datetime) -> Any:
        """Convert an aware datetime to the engine's column value (default: naive UTC)."""
        return value.astimezone(UTC).replace(tzinfo=None)

    def from_db_time(self, value: Any) -> datetime | None:
        """Convert a column value to an aware UTC datetime."""
        if value is None:
            return None
        if isinstance(value, datetime):
            return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        raise TypeError(f"unexpected time value {value!r}")

    def migration_lock(self, cur: Any) -> AbstractContextManager[None]:
        """Serialise concurrent migrate() calls (default: the transaction is enough)."""
        return nullcontext()

    # ---- plumbing -----------------------------------------------------------------------

    def open_connection(self) -> Any:
        """:meth:`connect`, with a refused login, a missing database or an unreachable
        server raised as portq's own errors (what the pool calls)."""
        try:
            conn = self.connect()
            if self.statement_timeout_ms is not None:
                try:
                    self.limit_statements(conn, self.statement_timeout_ms)
                except BaseException:
                    close_quietly(conn)
                    raise
            self._note_identity(conn)
            return conn
        except PortqError:
            raise
        except Exception as exc:
            kind = self.classify(exc)
            error = self.translate("connect", exc, kind, connecting=True) if kind in (
                ErrorKind.LOGIN, ErrorKind.UNKNOWN_DATABASE, ErrorKind.CONNECTION) else None
            if error is None:
                raise
            raise error from exc

    def limit_statements(self, conn: Any, ms: int | None) -> None:
        """Make the database stop any statement of ``conn`` that runs longer than ``ms``
        milliseconds (raising an error :meth:`classify` calls ``TIMEOUT``); None lifts the
        limit."""
        if ms is not None:
            raise ConfigurationError(f"statement_timeout_ms is not supported on {self.engine}")

    # ---- server identity (failover to a different history) -------------------------------

    def read_identity(self, conn: Any) -> ServerIdentity | None:
        """The identity of the server ``conn`` reached (engine hook; default: none)."""
        return None

    def server_identity(self) -> ServerIdentity | None:
        with self._lock:
            return self._identity

    def watch_identity(self, callback: Callable[[ServerIdentity, ServerIdentity], object]
                       ) -> None:
        """Call ``callback(old, new)`` once each time a new connection reaches a server
        whose identity differs from the previous connection's (a failover to a standby,
        a restore): every claim made before it may be unknown to the new server. Called in
        the thread that opened the connection, before that connection is used."""
        with self._lock:
            self._identity_watchers.append(callback)

    def _note_identity(self, conn: Any) -> None:
        try:
            identity = self.read_identity(conn)
        except BaseException:
            close_quietly(conn)
            raise
        if identity is None:
            return
        with self._lock:
            old, self._identity = self._identity, identity
            watchers = list(self._identity_watchers) if old not in (None, identity) else []
        for callback in watchers:
            assert old is not None
            callback(old, identity)

    def translate(self, op: str, exc: BaseException, kind: ErrorKind, *,
                  connecting: bool = False, attempts: int = 1) -> PortqError | None:
        """portq's error for a driver exception of ``kind`` that ``op`` gives up on (one
        line, password scrubbed), or None when the driver's own exception should stand."""
        url = self.url.redacted()
        detail = f"{type(exc).__name__}: {one_line(_scrub(str(exc), self.url))}"
        if kind is ErrorKind.LOGIN:
            return LoginFailed(f"cannot log in to {url}: {detail}")
        if kind is ErrorKind.UNKNOWN_DATABASE:
            # no database in the URL: PostgreSQL looks for one named after the user
            name = self.url.database or self.url.username or ""
            return DatabaseMissing(f"database {name!r} does not exist on {url}: {detail}")
        if kind is ErrorKind.UNDEFINED_TABLE:
            return SchemaMissingError(self.missing_schema_message())
        if kind is ErrorKind.CONNECTION:
            if connecting:
                return CannotConnect(f"cannot connect to {url}: {detail}")
            return ConnectionLost(f"{op}: lost the connection to {url}: {detail}")
        if kind is ErrorKind.RETRYABLE:
            return DatabaseBusy(self.busy_message(op, detail, attempts))
        if kind is ErrorKind.TIMEOUT:
            return StatementTimeout(
                f"{op}: {url} stopped a statement after statement_timeout_ms="
                f"{self.statement_timeout_ms} ({detail})")
        return None

    def missing_schema_message(self) -> str:
        """What to say when portq's tables are not there."""
        if self.prefix == "portq_":
            return f"no portq tables in {self.url.redacted()} — run: portq migrate URL"
        return (f"no portq tables with prefix {self.prefix!r} in {self.url.redacted()} — "
                f"run: portq migrate URL --prefix {self.prefix}")

    def busy_message(self, op: str, detail: str, attempts: int) -> str:
        """What to say when ``op`` still met a lock (or deadlock) after ``attempts``."""
        return (f"{op}: gave up after {attempts} attempt(s): another transaction held a "
                f"lock on {self.url.redacted()} ({detail})")

    def execute(self, cur: Any, name_or_sql: str, params: dict[str, Any] | None = None) -> Any:
        """Run a named statement (or raw SQL) with ``:name`` parameters bound for the driver."""
        sql = self.queries.get(name_or_sql, name_or_sql)
        bound = bind(sql, params or {}, self.paramstyle)
        cur.execute(bound.sql, bound.params)
        return cur

    #: True where :meth:`set_autocommit` lets a one-statement operation (``single=True``)
    #: run as one autocommit round trip instead of BEGIN, statement, COMMIT (psycopg sends
    #: BEGIN as a round trip of its own). Only for engines whose every ``single`` operation
    #: is one statement.
    autocommit_single: ClassVar[bool] = False

    def set_autocommit(self, conn: Any, on: bool) -> None:
        """Switch a pooled connection's autocommit (only where ``autocommit_single``)."""
        conn.autocommit = on

    @contextmanager
    def transaction(self, write: bool = True, progress: TxProgress | None = None,
                    commit: bool = True, single: bool = False) -> Iterator[Any]:
        """A cursor in one short transaction on a pooled connection; commit or roll back.
        ``progress.committing`` is set once COMMIT is about to be sent. With
        ``commit=False`` the transaction is always rolled back (plans, measurements).
        With ``single`` (the caller runs one statement) and ``autocommit_single``, the
        statement runs in autocommit mode: it is its own transaction and its own commit,
        so ``progress.committing`` is set before it is sent (a connection lost during it
        leaves the outcome unknown, exactly as one lost during COMMIT)."""
        conn = self.pool.acquire()
        broken = False
        auto = single and commit and self.autocommit_single
        try:
            if auto:
                self.set_autocommit(conn, True)
                if progress is not None:
                    progress.committing = True
            else:
                self.begin(conn, write)
            cur = conn.cursor()
            try:
                yield cur
            finally:
                close_quietly(cur)
            if auto:
                return
            if not commit:
                broken = self._rollback(conn, None)
                return
            if progress is not None:
                progress.committing = True
            conn.commit()
        except BaseException as exc:
            broken = self._rollback(conn, exc)
            raise
        finally:
            if auto and not broken:
                try:
                    self.set_autocommit(conn, False)
                except Exception:  # noqa: BLE001 - unusable: replace it
                    broken = True
            self.pool.release(conn, broken=broken)

    def _rollback(self, conn: Any, exc: BaseException | None) -> bool:
        """Roll back after ``exc``; return True when the connection must be discarded."""
        broken = exc is not None and (not isinstance(exc, Exception)
                                      or self.classify(exc) is ErrorKind.CONNECTION)
        try:
            conn.rollback()
        except Exception:  # noqa: BLE001 - a failed rollback: the connection is unusable
            broken = True
        return broken

    def run(self, op: str, fn: Callable[[Any], T], *, retry: bool = True,
            write: bool = True, single: bool = False) -> T:
        """Run ``fn(cursor)`` in a transaction, retrying transient conflicts a bounded time
        and, once, a connection that died before COMMIT was sent (see :mod:`portq.pool`)."""
        attempt = 0
        reconnected = False
        while True:
            progress = TxProgress()
            try:
                with self.transaction(write, progress, single=single) as cur:
                    return fn(cur)
            except DatabaseError:
                raise
            except Exception as exc:
                kind = self.classify(exc)
                if kind is ErrorKind.CONNECTION and not progress.committing and not reconnected:
                    reconnected = True  # the server rolled it back: safe to run again
                    log.info("%s: connection lost before commit (%s: %s); retrying on a "
                             "new connection", op, type(exc).__name__,
                             one_line(_scrub(str(exc), self.url)))
                    continue
                if kind is ErrorKind.RETRYABLE and retry and attempt < self.max_retries:
                    attempt += 1
                    delay = conflict_delay(attempt)
                    log.debug("%s: transient conflict (%s), retry %d in %.3fs",
                              op, exc, attempt, delay)
                    time.sleep(delay)
                    continue
                error = self.translate(op, exc, kind, attempts=attempt + 1)
                if error is None:
                    raise
                raise error from exc

    # ---- schema -------------------------------------------------------------------------

    def migrate(self) -> int:
        def go(cur: Any) -> int:
            with self.migration_lock(cur):
                self.create_version_table(cur)
                applied = self._applied_versions(cur)
                for version, statements in load_migrations(self.engine, self.prefix):
                    if version in applied:
                        continue
                    for stmt in statements:
                        self.run_ddl(cur, stmt)
                    self.record_version(cur, version)
                    log.info("migrated %s schema to version %d", self.engine, version)
                    applied.add(version)
                return max(applied, default=0)
        return self.run("migrate", go, retry=False)

    def create_version_table(self, cur: Any) -> None:
        """Create the schema-version table if it is missing (idempotent)."""
        self.execute(cur, "create_version_table")

    def run_ddl(self, cur: Any, statement: str) -> None:
        """Run one statement of a migration."""
        cur.execute(statement)

    def record_version(self, cur: Any, version: int) -> None:
        """Record that migration ``version`` has been applied."""
        self.execute(cur, "record_version", {"version": version})

    def _applied_versions(self, cur: Any) -> set[int]:
        return {int(row[0]) for row in self.execute(cur, "applied_versions").fetchall()}

    def _read_version(self, cur: Any) -> int:
        row = self.execute(cur, "schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def schema_version(self) -> int:
        def go(cur: Any) -> int:
            try:
                return self._read_version(cur)
            except Exception as exc:
                if self.classify(exc) is ErrorKind.CONNECTION:
                    raise
                raise _MissingSchema from exc
        try:
            return self.run("schema_version", go, retry=False, write=False)
        except _MissingSchema:
            return 0

    def latest_version(self) -> int:
        return load_migrations(self.engine, self.prefix)[-1][0]

    def check_schema(self) -> None:
        """Raise :class:`SchemaError` unless the schema is at this portq's version."""
        have, want = self.schema_version(), self.latest_version()
        if have == 0:
            raise SchemaMissingError(self.missing_schema_message())
        if have != want:
            raise SchemaError(
                f"{self.url.redacted()} has portq schema version {have}, this portq needs "
                f"{want}: run `portq migrate URL`")
        applied = self.run("applied_versions", self._applied_versions, retry=False,
                           write=False)
        missing = [v for v, _ in load_migrations(self.engine, self.prefix) if v not in applied]
        if missing:
            raise SchemaError(
                f"{self.url.redacted()} lacks portq migration(s) {missing} (added below its "
                f"newest version {have}): run `portq migrate URL`")

    # ---- enqueue ------------------------------------------------------------------------

    def accepts_connection(self, conn: Any) -> bool:
        return type(conn).__module__.split(".")[0] == self.driver_module

    def enqueue_results(self, jobs: Sequence[NewJob],
                        conn: Any | None = None) -> list[EnqueueResult]:
        if conn is None:
            return self.run("enqueue", lambda cur: self.insert_all(cur, jobs))
        return self.on_connection(conn, lambda cur: self.insert_all(cur, jobs))

    def on_connection(self, conn: Any, fn: Callable[[Any], T]) -> T:
        """``fn(cursor)`` on a caller's connection, in whatever transaction it has open
        (never committed or rolled back here)."""
        cur = self.caller_cursor(conn)
        try:
            return fn(cur)
        except Exception as exc:
            # the caller's transaction: only a missing table becomes portq's error; a
            # deadlock or a lost connection stays the driver's, for the caller to handle
            if not isinstance(exc, PortqError) and \
                    self.classify(exc) is ErrorKind.UNDEFINED_TABLE:
                raise SchemaMissingError(self.missing_schema_message()) from exc
            raise
        finally:
            close_quietly(cur)

    def insert_all(self, cur: Any, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """:meth:`insert_jobs` for runs of jobs without a uniqueness scope, and
        :meth:`insert_scoped` for each job with one; results in the order given. Jobs with
        dependencies: see :meth:`insert_dependent`."""
        if any(job.depends_on for job in jobs):
            return self.insert_dependent(cur, jobs)
        if all(job.unique is None for job in jobs):
            return self.insert_jobs(cur, jobs)
        results: list[EnqueueResult] = []
        start = 0
        while start < len(jobs):
            end = start
            while end < len(jobs) and jobs[end].unique is None:
                end += 1
            if end > start:
                results += self.insert_jobs(cur, jobs[start:end])
            else:
                results.append(self.insert_scoped(cur, jobs[start]))
                end = start + 1
            start = end
        return results

    def insert_scoped(self, cur: Any, job: NewJob) -> EnqueueResult:
        """Enqueue ``job`` unless its scoped key's latest job is still live in its scope
        (then that job's id, ``created=False``). The key's row is locked first, so that
        concurrent enqueues of one scoped key take turns (schema.sql, migration 6)."""
        unique = job.unique
        assert unique is not None
        params = {"hash": unique.hash}
        self.ensure_row(cur, "unique_ensure", params)
        locked = self.execute(cur, "unique_lock", params).fetchone()
        if locked is not None and locked[0] is not None and unique.holds_key(self.execute(
                cur, "unique_job", {"job_id": locked[0], "period_ms": unique.period_ms}
        ).fetchone()):
            return EnqueueResult(int(locked[0]), False)
        result = self.insert_job(cur, self.job_params(job))
        if result is None:
            raise DatabaseError("a scoped-unique job has no job key, yet its insert conflicted")
        self.execute(cur, "unique_point", {**params, "job_id": result.id})
        self.announce(cur, [job.queue])
        return result

    def ensure_row(self, cur: Any, name: str, params: dict[str, Any]) -> None:
        """Run the make-if-missing statement ``name``; a unique violation (Oracle's MERGE
        meeting a concurrent first insert, which rolls back only the statement) means the
        row exists now."""
        try:
            self.execute(cur, name, params)
        except Exception as exc:
            if self.classify(exc) is not ErrorKind.UNIQUE:
                raise

    def insert_jobs(self, cur: Any, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """Insert each job on ``cur`` (never committing); existing keys return their id."""
        results = []
        for job in jobs:
            params = self.job_params(job)
            result = self.insert_job(cur, params)
            results.append(EnqueueResult(self.job_id_of_key(cur, job.key), False)
                           if result is None else result)
        self.announce(cur, sorted({job.queue for job in jobs}))
        return results

    def job_id_of_key(self, cur: Any, key: str | None) -> int:
        """The id of the job holding ``key`` (after an insert conflicted on it)."""
        row = self.execute(cur, "job_id_by_key", {"key": key}).fetchone()
        if row is None:
            raise DatabaseError(f"job key {key!r} conflicted but no job holds it")
        return int(row[0])

    def announce(self, cur: Any, queues: Sequence[str]) -> None:
        """Tell idle workers of ``queues`` that jobs arrived, effective when the enqueuing
        transaction commits. Default: nothing; workers find new jobs by polling."""

    def bound_statements(self, ms: int | None) -> None:
        """Set :attr:`statement_timeout_ms` (None: no bound) from now on: each statement
        and lock wait of portq's own connections (never a caller's ``conn=``) is bounded
        server-side where the engine can (:meth:`limit_statements`); a pooled connection
        gets it when it is next handed out (no connection is reopened). A worker bounds
        its queue's to its lease while it runs."""
        if ms != self.statement_timeout_ms:
            self.statement_timeout_ms = ms
            self.pool.settings_changed()

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(single_writer=self.single_writer,
                            idle_max_default=self.idle_max_default,
                            in_memory=bool(getattr(self, "in_memory", False)),
                            announces_cancel=self.announces_cancel)

    @property
    def announces_cancel(self) -> bool:
        """True where cancelling a running job tells its worker at once (the listener's
        ``take_cancelled``); elsewhere the worker learns it within one heartbeat."""
        return False

    @property
    def idle_max_default(self) -> float:
        """A worker's longest idle sleep unless given (see ``default_idle_max``)."""
        return self.default_idle_max

    @property
    def listen_mode(self) -> str:
        """How a worker finds new jobs, for its start-up line."""
        return "polling"

    def listener(self, queues: Sequence[str]) -> Listener | None:
        """A :class:`Listener` for what :meth:`announce` sends, or None where workers only
        poll. Polling stays the correctness path either way; this only shortens idle waits."""
        return None

    def job_params(self, job: NewJob) -> dict[str, Any]:
        return {
            "queue": job.queue, "payload": job.payload_json, "priority": job.priority,
            "run_at": None if job.run_at is None else self.to_db_time(job.run_at),
            "delay_ms": job.delay_ms, "max_attempts": job.max_attempts, "key": job.key,
            "concurrency_key": job.concurrency_key, "concurrency_limit": job.concurrency_limit,
            "timeout_ms": job.timeout_ms,
            "meta": job.meta,
        }

    def insert_job(self, cur: Any, params: dict[str, Any]) -> EnqueueResult | None:
        """Insert one job; return what happened, or None when its key already exists (the
        caller then looks the existing id up)."""
        row = self.execute(cur, "insert_job", params).fetchone()
        return None if row is None else EnqueueResult(int(row[0]), True)

    # ---- claim and fencing --------------------------------------------------------------

    def claim(self, queue: str, worker_id: str, limit: int, lease_ms: int) -> list[Job]:
        params = {"queue": queue, "worker_id": worker_id, "limit": limit, "lease_ms": lease_ms}
        start_by: list[float] = []  # a rate-limited claim's deadline, if it had one
        sent = [0.0]  # when the (last) try was sent: its lease ends no sooner than that + lease

        def claim_unlimited(cur: Any) -> list[Sequence[Any]]:
            sent[0] = time.monotonic()
            return self.claim_rows(cur, params)

        def claim_limited(cur: Any) -> list[Sequence[Any]]:
            sent[0] = time.monotonic()
            return self.claim_within_limit(cur, params, start_by)

        if self.known_unlimited(queue):
            rows = self.run("claim", claim_unlimited, single=True)
            rows = self.settle_after(params, rows)
        else:
            rows = self.run("claim", claim_limited)
        deadline = start_by[-1] if start_by else None
        return [self.job_from_row(row, worker_id, deadline, sent[0]) for row in rows]

    def known_unlimited(self, queue: str) -> bool:
        """True while a claim of ``queue`` found no concurrency or rate limit less than
        ``LIMIT_RECHECK_S`` ago and none returned keyed jobs in ``KEYED_RECHECK_S``: its
        claims skip the limits' extra statements until then. A worker gives such a queue
        its look-ahead; a queue that is not known unlimited gets none."""
        now = time.monotonic()
        return self._unlimited_until.get(queue, 0.0) > now and \
            self._keyed_until.get(queue, 0.0) <= now

    def claim_within_limit(self, cur: Any, params: dict[str, Any],
                           start_by: list[float] | None = None) -> list[Sequence[Any]]:
        """Claim in the open transaction, at most the queue's concurrency limit minus its
        running jobs and its rate limit minus the jobs started in the (guarded) window: the
        queue's row stays locked to commit, so claimers of the queue on every host take
        turns and never exceed either together. Keyed jobs are settled (settle_keys).
        A rate-limited claim appends to ``start_by`` the ``time.monotonic()`` by which its
        jobs' handlers must start (the guard after the window's clock reading)."""
        queue = params["queue"]
        if start_by is not None:
            start_by.clear()  # a retried transaction reads the clock again
        row = self.execute(cur, "queue_control", {"queue": queue}).fetchone()
        max_running, rate_limit, period_ms, rate_log, fair, after = \
            row if row is not None else (None,) * 6

        def claim(cur: Any, params: dict[str, Any]) -> list[Sequence[Any]]:
            if fair:  # round-robin across keys: portq/backends/fair.py
                return fair_rows(self, cur, params, after)
            return self.claim_rows(cur, params)
        if max_running is None and rate_limit is None and not fair:
            self._unlimited_until[queue] = time.monotonic() + LIMIT_RECHECK_S
            return self.settle_keys(cur, params, claim(cur, params), locked=row is not None)
        self._unlimited_until.pop(queue, None)
        want = int(params["limit"])
        if max_running is not None:
            running = int(self.execute(cur, "running_count", {"queue": queue}).fetchone()[0])
            want = min(want, int(max_running) - running)
        window: RateWindow | None = None
        if rate_limit is not None and want > 0:
            if start_by is not None:  # read before the clock: no later than the DB's reading
                start_by.append(time.monotonic() + rate_guard_ms(int(period_ms or 0)) / 1000)
            now_ms = int(self.execute(cur, "db_clock_ms").fetchone()[0])
            window = RateWindow.read(int(rate_limit), int(period_ms or 0),
                                     self.load_text(rate_log), now_ms)
            want = min(want, window.allowed)
        if want <= 0:
            return []
        rows = self.settle_keys(cur, params, claim(cur, {**params, "limit": want}), locked=True)
        if window is not None and rows:
            self.execute(cur, "set_rate_log",
                         {"queue": queue, "rate_log": window.log_after(len(rows))})
        return rows

    def settle_after(self, params: dict[str, Any], rows: list[Sequence[Any]]
                     ) -> list[Sequence[Any]]:
        """After a one-statement claim (already committed) that returned keyed jobs: settle
        them in a transaction of its own, before any is handed out (:meth:`settle_keys`;
        the queue's next claims settle in their own transaction)."""
        if all(row[CKEY_COLUMN] is None for row in rows):
            return rows
        return self.run("claim", lambda cur: self.settle_keys(cur, params, rows, locked=False))

    def settle_keys(self, cur: Any, params: dict[str, Any], rows: list[Sequence[Any]], *,
                    locked: bool) -> list[Sequence[Any]]:
        """Enforce per-key limits on a claim's ``rows``: the claim's row filter races with
        other claimers (and passes several jobs of one key together), so lock the queue's
        row (made if missing; ``locked``: already held), recount each claimed key's running
        jobs (a non-locking read: committed claims plus this one's own) and put back to
        ready the jobs beyond a key's limit, last in claim order first. Claimers that took
        keyed jobs of a queue take turns here; each counts all that committed before it."""
        keyed = [row for row in rows if row[CKEY_COLUMN] is not None]
        if not keyed:
            return rows
        queue = params["queue"]
        self._keyed_until[queue] = time.monotonic() + KEYED_RECHECK_S
        if not locked:
            self.ensure_row(cur, "ensure_queue", {"queue": queue})
            self.execute(cur, "queue_control", {"queue": queue}).fetchall()
        running = {key: int(self.execute(cur, "key_running_count", {
            "queue": queue, "concurrency_key": key}).fetchone()[0])
            for key in sorted({str(row[CKEY_COLUMN]) for row in keyed})}
        back = {id(row) for row in over_key_limits(keyed, running)}
        for row in keyed:
            if id(row) in back:
                self.execute(cur, "unclaim", {"job_id": row[0],
                                              "generation": row[GENERATION_COLUMN],
                                              "worker_id": params["worker_id"]})
        return [row for row in rows if id(row) not in back]

    def set_concurrency_limit(self, queue: str, max_running: int | None) -> None:
        self.run("set_concurrency_limit", lambda cur: self.execute(
            cur, "set_concurrency_limit", {"queue": queue, "max_running": max_running}))
        self._unlimited_until.pop(queue, None)

    def set_rate_limit(self, queue: str, limit: int | None, period_ms: int | None) -> None:
        self.run("set_rate_limit", lambda cur: self.execute(
            cur, "set_rate_limit", {"queue": queue, "rate_limit": limit,
                                    "period_ms": period_ms}))
        self._unlimited_until.pop(queue, None)

    def claim_rows(self, cur: Any, params: dict[str, Any], name: str = "claim"
                   ) -> list[Sequence[Any]]:
        """Claim in the open transaction with statement ``name`` (``claim``, or a fair
        claim's ``claim_key`` / ``claim_unkeyed``); rows are CLAIM_COLUMNS. Default: one
        statement."""
        return list(self.execute(cur, name, params).fetchall())

    #: column order of claimed rows: job_id, queue, payload, priority, attempts,
    #: max_attempts, job_key, lease_until, concurrency_key, concurrency_limit, run_at, meta
    def job_from_row(self, row: Sequence[Any], worker_id: str,
                     start_by: float | None = None, leased_at: float | None = None) -> Job:
        (job_id, queue, payload, priority, attempts, max_attempts, key, lease_until,
         concurrency_key, _, timeout_ms, run_at, meta) = row
        lease = self.from_db_time(lease_until)
        assert lease is not None
        claim = Claim(int(job_id), int(attempts), worker_id, lease)
        return Job.claimed(
            id=int(job_id), queue=queue, payload=self.load_payload(payload),
            attempt=int(attempts), max_attempts=int(max_attempts), key=key,
            priority=int(priority), claim=claim, concurrency_key=concurrency_key,
            start_by=start_by, leased_at=leased_at,
            timeout=None if timeout_ms is None else int(timeout_ms) / 1000,
            run_at=self.from_db_time(run_at), meta=self.load_meta(meta),
            deps=self._dependency_reader)

    def load_meta(self, value: Any) -> dict[str, str]:
        """A job's stored ``meta`` (JSON text, or None) as a dict of strings."""
        if value is None:
            return {}
        loaded = self.load_payload(value)
        return {str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}

    def load_payload(self, value: Any) -> Any:
        if isinstance(value, bytes | bytearray | memoryview):
            value = bytes(value).decode("utf-8")
        elif not isinstance(value, str) and hasattr(value, "read"):
            value = value.read()  # LOBs
        return json.loads(value)

    @staticmethod
    def guard(claim: Claim) -> dict[str, Any]:
        return {"job_id": claim.job_id, "generation": claim.generation,
                "worker_id": claim.worker_id}

    def _guarded(self, op: str, params: dict[str, Any]) -> bool:
        return bool(self.run(op, lambda cur: self.execute(cur, op, params).rowcount == 1,
                             single=True))

    def renew(self, claim: Claim, lease_ms: int) -> bool:
        return self.renew_many([claim], lease_ms)[0]

    def renew_many(self, claims: Sequence[Claim], lease_ms: int) -> list[bool]:
        return self.fenced_many("renew_many", claims, {"lease_ms": lease_ms})

    def complete(self, claim: Claim) -> bool:
        return self.complete_many([claim])[0]

    def complete_many(self, claims: Sequence[Claim]) -> list[bool]:
        return self.fenced_many("complete_many", claims, {})

    @staticmethod
    def claims_json(claims: Sequence[Claim]) -> str:
        """The claims as the JSON array the ``*_many`` statements read:
        ``[{"job_id", "generation", "worker_id"}, ...]``."""
        return json.dumps([SqlBackend.guard(c) for c in claims])

    def fenced_many(self, op: str, claims: Sequence[Claim], params: dict[str, Any]
                    ) -> list[bool]:
        """Run the fenced batch statement ``op`` (``complete_many``, ``renew_many``) for
        ``claims`` in one transaction, whatever their number; one result per claim: did it
        still own its job (and so was it written)?"""
        if not claims:
            return []
        params = {**params, "claims": self.claims_json(claims)}
        # a completion that may release dependents needs a transaction unless the engine's
        # statement does it itself (completes_dependents_in_statement)
        single = op != "complete_many" or self.completes_dependents_in_statement
        done = self.run(op, lambda cur: self.fenced_rows(cur, op, params), single=single)
        return [(c.job_id, c.generation) in done for c in claims]

    def fenced_rows(self, cur: Any, op: str, params: dict[str, Any]) -> set[tuple[int, int]]:
        """Run ``op`` in the open transaction; the ``(job_id, generation)`` of every row it
        wrote. Default: one statement returning those two columns (RETURNING / OUTPUT), and
        for ``complete_many`` a third, ``has_dependents``: those jobs' dependents are
        resolved in this transaction (:meth:`completed_dependencies`)."""
        rows = self.execute(cur, op, params).fetchall()
        self.completed_dependencies(cur, [int(r[0]) for r in rows if len(r) > 2 and r[2]])
        return {(int(r[0]), int(r[1])) for r in rows}

    def release(self, claim: Claim) -> bool:
        return self._settled("release", self.guard(claim))

    def snooze(self, claim: Claim, delay_ms: int, max_snoozes: int) -> bool:
        return self._guarded("snooze", {**self.guard(claim), "delay_ms": delay_ms,
                                        "max_snoozes": max_snoozes})

    def fail_params(self, claim: Claim, error: str, retry_in_ms: int | None) -> dict[str, Any]:
        """Parameters of the ``fail`` statement (also used by :mod:`portq.aio`). NUL and
        lone surrogates, which not every engine stores, are written as escapes."""
        error = storable_error(error)
        return {**self.guard(claim), "error": error[:4000],
                "retryable": 0 if retry_in_ms is None else 1,
                "retry_ms": max(0, retry_in_ms or 0)}

    def fail(self, claim: Claim, error: str, retry_in_ms: int | None) -> bool:
        params = self.fail_params(claim, error, retry_in_ms)
        error = storable_error(error)

        def go(cur: Any) -> bool:
            if self.execute(cur, "fail", params).rowcount != 1:
                return False
            self.execute(cur, "record_error", {**params, "error": error[:8000]})
            self.settle_dependencies(cur)
            return True
        return self.run("fail", go)

    # ---- maintenance and operators ------------------------------------------------------

    def reap(self, limit: int, delay_ms: int) -> int:
        params = {"limit": limit, "delay_ms": delay_ms}
        return self.run("reap", lambda cur: self.settled_count(cur, self.reap_rows(cur, params)))

    def reap_rows(self, cur: Any, params: dict[str, Any]) -> int:
        return int(self.execute(cur, "reap", params).rowcount)

    def prune(self, older_than_ms: int, limit: int, states: Sequence[str],
              queue: str | None = None) -> int:
        params = {"older_than_ms": older_than_ms, "limit": limit, "states": tuple(states),
                  "queue": queue or ALL_QUEUES}
        return self.run("prune", lambda cur: self.prune_rows(cur, params), single=True)

    def prune_rows(self, cur: Any, params: dict[str, Any]) -> int:
        return int(self.execute(cur, "prune", params).rowcount)

    def retry_dead(self, job_id: int, extra_attempts: int) -> bool:
        """Make a dead or cancelled job ready again, reviving (in the same transaction) the
        dependents its end cancelled (:func:`dependencies.revive`)."""
        params = {"job_id": job_id, "extra": extra_attempts}

        def go(cur: Any) -> bool:
            if self.execute(cur, "retry_dead", params).rowcount != 1:
                return False
            dependencies.revive(self, cur, [job_id])
            return True
        return bool(self.run("retry_dead", go))

    def cancel(self, job_id: int) -> bool:
        return self._settled("cancel", {"job_id": job_id})

    def finished_per_minute(self, minutes: int) -> list[tuple[str, str, int, int]]:
        rows = self.run("finished_per_minute", lambda cur: self.execute(
            cur, "finished_per_minute", {"minutes": minutes}).fetchall(), write=False)
        return [(q, s, int(ago), int(n)) for q, s, ago, n in rows
                if ago is not None and 0 <= int(ago) < minutes]

    # ---- job statistics (Queue.job_stats; issue 31 item 11) ---- a separate block -------
    def stats_series(self, window_s: int, bucket_s: int) -> list[tuple[str, str, int, int]]:
        rows = self.run("stats_series", lambda cur: self.execute(
            cur, "stats_series", {"window_s": window_s, "bucket_s": bucket_s}).fetchall(),
            write=False)
        return [(q, s, int(ago), int(n)) for q, s, ago, n in rows if ago is not None]

    def stats_latency(self, window_s: int) -> list[tuple[str, int | None, int | None, int]]:
        rows = self.run("stats_latency", lambda cur: self.execute(
            cur, "stats_latency", {"window_s": window_s}).fetchall(), write=False)
        return [(q, None if w is None else int(w), None if r is None else int(r), int(n))
                for q, w, r, n in rows]
    # ---- end of job statistics ----------------------------------------------------------

    def delete_finished(self, job_id: int) -> bool:
        return bool(self.run("delete_finished", lambda cur: self.execute(
            cur, "delete_finished", {"job_id": job_id}).rowcount == 1))

    def pending(self, queue: str) -> tuple[bool, bool]:
        ready, running = self.run("pending", lambda cur: self.execute(
            cur, "pending", {"queue": queue}).fetchone(), write=False)
        return bool(ready), bool(running)

    def next_lease_expiry_ms(self) -> int | None:
        row = self.run("next_lease_expiry_ms", lambda cur: self.execute(
            cur, "next_lease_expiry_ms").fetchone(), write=False)
        return None if row is None or row[0] is None else int(row[0])

    def stats(self, queue: str | None = None) -> list[QueueStats]:
        params = {"queue": queue or ALL_QUEUES, "window_ms": STATS_WINDOW_S * 1000}

        def go(cur: Any) -> tuple[list[Any], list[Any], list[Any]]:
            return (list(self.execute(cur, "stats", params).fetchall()),
                    list(self.execute(cur, "attempt_stats", params).fetchall()),
                    list(self.execute(cur, "queue_limits", params).fetchall()))
        rows, attempt_rows, limit_rows = self.run("stats", go, write=False)
        limits = {str(q): QueueLimits(bool(p), _int_or_none(c), _int_or_none(r),
                                      None if ms is None else int(ms) / 1000, bool(f))
                  for q, p, c, r, ms, f in limit_rows}
        attempts = {q: (int(f or 0), int(s or 0)) for q, f, s in attempt_rows}
        out = []
        for q, ready, scheduled, running, succeeded, dead, cancelled, oldest, now, waiting \
                in rows:
            oldest_at, now_at = self.from_db_time(oldest), self.from_db_time(now)
            age = None
            if oldest_at is not None and now_at is not None:
                age = max(0.0, (now_at - oldest_at).total_seconds())
            failed_1h, succeeded_1h = attempts.get(q, (0, 0))
            ended = failed_1h + succeeded_1h
            out.append(QueueStats(
                queue=q, ready=int(ready or 0), scheduled=int(scheduled or 0),
                running=int(running or 0), succeeded=int(succeeded or 0), dead=int(dead or 0),
                cancelled=int(cancelled or 0), oldest_ready_age_s=age, failed_1h=failed_1h,
                waiting=int(waiting or 0),
                succeeded_1h=succeeded_1h, retry_rate=failed_1h / ended if ended else None,
                **limits.get(q, NO_LIMITS).as_fields()))
        listed = {s.queue for s in out}
        out += [QueueStats(queue=q, ready=0, scheduled=0, running=0, succeeded=0, dead=0,
                           cancelled=0, oldest_ready_age_s=None, **lim.as_fields())
                for q, lim in limits.items()
                if q not in listed and lim != NO_LIMITS]  # paused or limited, no jobs
        return sorted(out, key=lambda s: s.queue)

    def set_paused(self, queue: str, paused: bool) -> None:
        self.run("pause" if paused else "resume", lambda cur: self.execute(
            cur, "set_paused", {"queue": queue, "paused": int(paused)}))

    def paused_queues(self) -> list[str]:
        return [str(r[0]) for r in self.run("paused_queues", lambda cur: self.execute(
            cur, "paused_queues", {}).fetchall(), write=False)]

    def retry_many(self, queue: str | None, states: Sequence[str], limit: int,
                   extra_attempts: int) -> int:
        params = {"queue": queue or ALL_QUEUES, "states": tuple(states), "limit": limit,
                  "extra": extra_attempts}
        def go(cur: Any) -> int:
            retried = self.batch_ids(cur, "retry_many", params)
            dependencies.revive(self, cur, retried)
            return len(retried)
        return self.run("retry_many", go)

    def cancel_many(self, queue: str | None, states: Sequence[str], limit: int) -> int:
        params = {"queue": queue or ALL_QUEUES, "states": tuple(states), "limit": limit}
        return self.run("cancel_many", lambda cur: self.settled_count(
            cur, self.batch_rows(cur, "cancel_many", params)))

    def batch_rows(self, cur: Any, name: str, params: dict[str, Any]) -> int:
        """Run a bounded batch statement (``limit`` rows at most); return rows changed.
        Default: one statement."""
        return int(self.execute(cur, name, params).rowcount)

    def batch_ids(self, cur: Any, name: str, params: dict[str, Any]) -> list[int]:
        """:meth:`batch_rows`, returning the ids of the rows changed. Default: one
        statement that returns them (RETURNING, OUTPUT)."""
        return [int(row[0]) for row in self.execute(cur, name, params).fetchall()]

    def jobs(self, state: str | None = None, queue: str | None = None, limit: int = 100,
             after_id: int = 0, *, key: str | None = None, text: str | None = None,
             order: str = "id", after_run_at: datetime | None = None) -> list[JobRecord]:
        if key is not None:
            return self._job_of_key(key, state, queue, after_id, text)
        params = {"state": state or ALL_QUEUES, "queue": queue or ALL_QUEUES, "limit": limit,
                  "after_id": after_id, "any_text": int(not text),
                  "pattern": like_pattern(text or ""),
                  "after_run_at": self.to_db_time(after_run_at or datetime.now(UTC))}
        statement = JOB_ORDERS[order]
        rows = self.run("jobs", lambda cur: self.execute(cur, statement, params).fetchall(),
                        write=False)
        return [self.record_from_row(r) for r in rows]

    def db_now(self, conn: Any | None = None) -> datetime:
        """The database clock (UTC), rounded up to the next millisecond (it is read in
        whole milliseconds: a row written in this one must not look later than now); on
        ``conn`` (a caller's connection) when given, as :meth:`job` reads."""
        ms = self.read("db_clock_ms", lambda cur: self.execute(
            cur, "db_clock_ms").fetchone()[0], conn)
        return datetime.fromtimestamp((int(ms) + 1) / 1000, UTC)

    def _job_of_key(self, key: str, state: str | None, queue: str | None, after_id: int,
                    text: str | None) -> list[JobRecord]:
        """The listing filtered by key: the one job holding it (unique index), if it also
        passes the other filters and is not on a page already shown."""
        row = self.run("job_id_by_key", lambda cur: self.execute(
            cur, "job_id_by_key", {"key": key}).fetchone(), write=False)
        record = None if row is None or after_id else self.job(int(row[0]))
        if record is None or (state and record.state != state) or \
                (queue and record.queue != queue):
            return []
        if text and text.lower() not in json.dumps(record.payload, ensure_ascii=False,
                                                   separators=(",", ":")).lower():
            return []
        return [record]

    def caller_cursor(self, conn: Any) -> Any:
        """A cursor on a caller's connection (an engine may undo the caller's type
        adaptations there, so that values read back as on portq's own connections)."""
        return conn.cursor()

    def read(self, op: str, fn: Callable[[Any], T], conn: Any | None = None) -> T:
        """``fn(cursor)`` in a read transaction of portq's own, or with ``conn`` on that
        caller's connection (seeing its open transaction's uncommitted writes)."""
        if conn is None:
            return self.run(op, fn, write=False)
        return self.on_connection(conn, fn)

    def job(self, job_id: int, conn: Any | None = None) -> JobRecord | None:
        row = self.read("job", lambda cur: self.execute(
            cur, "job", {"job_id": job_id}).fetchone(), conn)
        return None if row is None else self.record_from_row(row)

    def record_from_row(self, r: Sequence[Any]) -> JobRecord:
        """A :class:`JobRecord` from a row of the ``jobs``/``job`` statements."""
        return JobRecord(
            id=int(r[0]), queue=r[1], state=r[2], payload=self.load_payload(r[3]),
            priority=int(r[4]), attempts=int(r[5]), max_attempts=int(r[6]), key=r[7],
            run_at=self.from_db_time(r[8]), worker_id=r[9],
            lease_until=self.from_db_time(r[10]), last_error=self.load_text(r[11]),
            created_at=self.from_db_time(r[12]), finished_at=self.from_db_time(r[13]),
            progress=None if r[14] is None else float(r[14]),
            progress_note=self.load_text(r[15]), progress_at=self.from_db_time(r[16]),
            released=int(r[17] or 0) if len(r) > 17 else 0,
            # the `job` statement adds meta, then when the latest and the first
            # attempt started
            meta=self.load_meta(r[18]) if len(r) > 18 else None,
            started_at=self.from_db_time(r[19]) if len(r) > 19 else None,
            first_started_at=self.from_db_time(r[20]) if len(r) > 20 else None)

    def error_history(self, job_id: int, conn: Any | None = None) -> list[JobError]:
        rows = self.read("job_errors", lambda cur: self.execute(
            cur, "job_errors", {"job_id": job_id}).fetchall(), conn)
        return [JobError(int(a), w, self.load_text(e) or "", self.from_db_time(t))
                for a, w, e, t in rows]

    def job_errors(self, job_id: int) -> list[tuple[int, str, str]]:
        """``(attempt, worker_id, error)`` for every failed attempt of a job, in order."""
        return [(e.attempt, e.worker_id, e.error) for e in self.error_history(job_id)]

    # ---- job dependencies (migration 12; the logic is portq/backends/dependencies.py) ----

    #: True where the ``complete_many`` statement itself releases the dependents of the
    #: jobs it completes (PostgreSQL's data-modifying CTEs), so that it may run as one
    #: autocommit statement; elsewhere it returns ``has_dependents`` and runs in a
    #: transaction that :meth:`completed_dependencies` continues
    completes_dependents_in_statement: ClassVar[bool] = False

    def insert_dependent(self, cur: Any, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """Enqueue jobs of which some have dependencies: lock and read every dependency
        first (an unknown id is refused before anything is written), insert each job, then
        record its edges and make it wait (or cancel it: a dependency already failed)."""
        states = dependencies.lock_dependencies(self, cur, jobs)
        results: list[EnqueueResult] = []
        for job in jobs:
            result = self.insert_all(cur, [replace(job, depends_on=())])[0]
            if job.depends_on:
                dependencies.attach(self, cur, job, result, states)
            results.append(result)
        return results

    def dependents_update(self, cur: Any, name: str, params: dict[str, Any]) -> None:
        """Run ``dep_release`` / ``dep_cancel`` (an update of a dependency's waiting
        dependents). Default: one statement; MySQL/MariaDB lock the ids first."""
        self.execute(cur, name, params)

    def completed_dependencies(self, cur: Any, flagged: Sequence[int]) -> None:
        """Release the dependents of jobs this transaction completed (``flagged``: those
        with ``has_dependents``)."""
        if flagged:
            dependencies.completed(self, cur, flagged)

    def settle_dependencies(self, cur: Any) -> None:
        """Resolve the dependents of jobs this transaction ended dead or cancelled."""
        dependencies.settle(self, cur)

    def settled_count(self, cur: Any, changed: int) -> int:
        """After a batch that ended ``changed`` jobs' attempts (reap, cancel_many): settle
        the dependents of those that ended dead or cancelled; return ``changed``."""
        if changed:
            self.settle_dependencies(cur)
        return changed

    def _settled(self, op: str, params: dict[str, Any]) -> bool:
        """A one-row operation (``release``, ``cancel``) that may end the job dead or
        cancelled, with its dependents settled in the same transaction."""
        def go(cur: Any) -> bool:
            if self.execute(cur, op, params).rowcount != 1:
                return False
            self.settle_dependencies(cur)
            return True
        return bool(self.run(op, go))

    def dependency_results(self, job_id: int, conn: Any | None = None) -> dict[int, Any]:
        """``{dependency id: result}`` for the job's dependencies that stored a result."""
        return dependencies.dependency_results(self, job_id, conn)

    def job_graph(self, job_id: int) -> tuple[list[tuple[int, str | None]],
                                             list[tuple[int, str]]]:
        """A job's dependencies and dependents, ``(id, state)`` each."""
        return dependencies.graph(self, job_id)

    # ---- progress -----------------------------------------------------------------------

    def set_progress(self, claim: Claim, fraction: float | None, note: str) -> bool:
        """Store a running job's progress report if ``claim`` still owns the job (fenced as
        :meth:`complete`); False: nothing was written."""
        return self.set_progress_many([(claim, fraction, note)])[0]

    def set_progress_many(self, reports: Sequence[tuple[Claim, float | None, str]]
                          ) -> list[bool]:
        """:meth:`set_progress` for several jobs in one transaction (a worker's progress
        writer); one result per report."""
        if not reports:
            return []
        params = [{**self.guard(claim), "progress": fraction,
                   "note": storable_error(note) or None} for claim, fraction, note in reports]
        return self.run("set_progress", lambda cur: [
            self.execute(cur, "set_progress", p).rowcount == 1 for p in params],
            single=len(params) == 1)

    # ---- results ------------------------------------------------------------------------

    def store_result(self, claim: Claim, result_json: str) -> bool:
        params = {**self.guard(claim), "result": result_json}

        def go(cur: Any) -> bool:
            if self.execute(cur, "lock_owned_job", params).fetchone() is None:
                return False
            self.execute(cur, "delete_result", params)
            self.insert_result(cur, params)
            return True
        return self.run("store_result", go)

    def insert_result(self, cur: Any, params: dict[str, Any]) -> None:
        """Insert the result row (Oracle binds the JSON text as a CLOB)."""
        self.execute(cur, "insert_result", params)

    def result(self, job_id: int, conn: Any | None = None) -> Any:
        row = self.read("job_result", lambda cur: self.execute(
            cur, "job_result", {"job_id": job_id}).fetchone(), conn)
        return None if row is None else self.load_payload(row[0])

    # ---- worker registry ----------------------------------------------------------------

    def beat_worker(self, info: WorkerInfo, ttl_ms: int) -> None:
        params = {"worker_id": info.worker_id, "host": info.host, "pid": info.pid,
                  "queues": json.dumps(list(info.queues)), "concurrency": info.concurrency,
                  "jobs_in_hand": info.jobs_in_hand,
                  "schedules": json.dumps(list(info.schedules)), "ttl_ms": ttl_ms}

        def go(cur: Any) -> None:
            self.execute(cur, "expire_workers")
            if self.execute(cur, "worker_heartbeat", params).rowcount != 1:
                self.execute(cur, "register_worker", params)
        self.run("beat_worker", go)

    def deregister_worker(self, worker_id: str) -> None:
        self.run("deregister_worker", lambda cur: self.execute(
            cur, "deregister_worker", {"worker_id": worker_id}))

    def workers(self) -> list[WorkerInfo]:
        rows = self.run("workers", lambda cur: self.execute(cur, "workers").fetchall(),
                        write=False)
        out = []
        for (worker_id, host, pid, queues, concurrency, in_hand, schedules, started, beat,
             now) in rows:
            beat_at, now_at = self.from_db_time(beat), self.from_db_time(now)
            age = None if beat_at is None or now_at is None else \
                max(0.0, (now_at - beat_at).total_seconds())
            out.append(WorkerInfo(
                worker_id=worker_id, host=host, pid=int(pid),
                queues=tuple(json.loads(self.load_text(queues) or "[]")),
                concurrency=int(concurrency), jobs_in_hand=int(in_hand),
                schedules=tuple(json.loads(self.load_text(schedules) or "[]")),
                started_at=self.from_db_time(started), heartbeat_at=beat_at,
                heartbeat_age_s=age))
        return out

    def job_concurrency(self, job_id: int) -> tuple[str, int] | None:
        row = self.run("job_concurrency", lambda cur: self.execute(
            cur, "job_concurrency", {"job_id": job_id}).fetchone(), write=False)
        if row is None or row[0] is None:
            return None
        return str(self.load_text(row[0])), int(row[1])

    def key_limits(self, queue: str, limit: int) -> list[tuple[str, int, int]]:
        rows = self.run("queue_key_limits", lambda cur: self.execute(
            cur, "queue_key_limits", {"queue": queue, "limit": limit}).fetchall(),
            write=False)
        return [(str(self.load_text(k)), int(n), int(c)) for k, n, c in rows]

    def worker_activity(self) -> dict[str, WorkerActivity]:
        rows = self.run("worker_activity", lambda cur: self.execute(
            cur, "worker_activity").fetchall(), write=False)
        out = {}
        for worker_id, expires, now, running in rows:
            expires_at, now_at = self.from_db_time(expires), self.from_db_time(now)
            left = 0.0 if expires_at is None or now_at is None else \
                max(0.0, (expires_at - now_at).total_seconds())
            out[str(worker_id)] = WorkerActivity(int(running or 0), left)
        return out

    def load_text(self, value: Any) -> str | None:
        if value is None or isinstance(value, str):
            return value
        if hasattr(value, "read"):
            return str(value.read())
        return str(value)

    def server_info(self) -> ServerInfo:
        try:
            version, isolation = self.run("server_info", lambda cur: self.execute(
                cur, "server_info").fetchone(), write=False)
        except Exception as exc:
            # an engine whose isolation query may be refused (a permission) has a
            # version-only statement: the version is still worth showing
            if "server_version" not in self.queries or isinstance(exc, DatabaseError) or \
                    self.classify(exc) is ErrorKind.CONNECTION:
                raise
            (version,) = self.run("server_version", lambda cur: self.execute(
                cur, "server_version").fetchone(), write=False)
            isolation = None
        return self.make_server_info(version, isolation)

    def make_server_info(self, version: Any, isolation: Any) -> ServerInfo:
        name = self.driver_module
        return ServerInfo(engine=self.engine, server_version=str(version), driver=name,
                          driver_version=driver_version(name),
                          isolation=None if isolation is None else
                          str(isolation).replace("-", " ").upper())

    def table_names(self) -> list[str]:
        """This prefix's tables, in creation order (the version table first)."""
        texts = [self.queries["create_version_table"]]
        texts += [s for _, statements in load_migrations(self.engine, self.prefix)
                  for s in statements]
        names: list[str] = []
        for text in texts:
            for name in _CREATED_TABLE.findall(text):
                if name not in names:
                    names.append(name)
        return names

    def existing_tables(self) -> list[str]:
        """Which of this prefix's tables exist, in creation order."""
        return self.run("existing_tables", lambda cur: [
            name for name in self.table_names()
            if self.execute(cur, "table_exists", {"name": name}).fetchone() is not None],
            write=False)

    #: how this engine drops one table (Oracle: PURGE, not into the recycle bin)
    drop_table_sql: ClassVar[str] = "DROP TABLE {name}"

    def drop_schema(self) -> list[str]:
        existing = self.existing_tables()

        def go(cur: Any) -> list[str]:
            for name in reversed(existing):
                cur.execute(self.drop_table_sql.format(name=name))
            return existing
        return self.run("drop_schema", go, retry=False)

    def close(self) -> None:
        self.pool.close()

    # ---- fair sharing across keys (migration 13; the claim: portq/backends/fair.py) -----

    def set_fairness(self, queue: str, fair: bool) -> None:
        self.run("set_fairness", lambda cur: self.execute(
            cur, "set_fairness", {"queue": queue, "fair": int(fair)}))
        self._unlimited_until.pop(queue, None)


class _MissingSchema(Exception):
    pass


@dataclass(frozen=True)
class QueueLimits:
    """A queue's flow control as ``portq stats`` shows it (its ``portq_queue`` row)."""

    paused: bool = False
    concurrency_limit: int | None = None
    rate_limit: int | None = None
    rate_period_s: float | None = None
    fair: bool = False

    def as_fields(self) -> dict[str, Any]:
        return {"paused": self.paused, "concurrency_limit": self.concurrency_limit,
                "rate_limit": self.rate_limit, "rate_period_s": self.rate_period_s,
                "fair": self.fair}


NO_LIMITS = QueueLimits()


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def rate_guard_ms(period_ms: int) -> int:
    """The guard added to a rate limit's window (see :class:`RateWindow`)."""
    return max(RATE_GUARD_MIN_MS, min(RATE_GUARD_MAX_MS, int(period_ms * RATE_GUARD_FRACTION)))


@dataclass(frozen=True)
class RateWindow:
    """A rate-limited queue's log as one claim reads it: ``allowed`` jobs may start now.

    The log holds ``[db_epoch_ms, jobs]`` per claim that started jobs. A claim at DB time
    ``now`` counts the entries at or after ``now - (period + guard)`` (whole milliseconds:
    "at" keeps a reading truncated or rounded to the millisecond counted): any set of
    claims within a span shorter than that window is counted whole by the latest of them,
    so claims obey "at most ``limit`` per ``period + guard``", and handler starts (each
    within ``guard`` after its claim's clock reading: a worker gives back a job it could
    not start by its ``Job.start_by``) obey "at most ``limit`` per ``period``" in every
    sliding window."""

    limit: int
    now_ms: int
    entries: tuple[tuple[int, int], ...]

    @classmethod
    def read(cls, limit: int, period_ms: int, log_text: str | None, now_ms: int
             ) -> RateWindow:
        since = now_ms - period_ms - rate_guard_ms(period_ms)
        entries = tuple((int(t), int(n)) for t, n in json.loads(log_text or "[]")
                        if int(t) >= since)  # a clock that stepped back: still counted
        return cls(limit, now_ms, entries)

    @property
    def allowed(self) -> int:
        return max(0, self.limit - sum(n for _, n in self.entries))

    def log_after(self, claimed: int) -> str:
        """The log to write back after claiming ``claimed`` jobs now (compact JSON)."""
        entries = [list(e) for e in self.entries] + [[self.now_ms, claimed]]
        while len(entries) > RATE_LOG_MAX:
            (t0, n0), (t1, n1) = entries[0], entries[1]
            entries[:2] = [[max(t0, t1), n0 + n1]]
        return json.dumps(entries, separators=(",", ":"))


def over_key_limits(keyed: Sequence[Sequence[Any]], running: dict[str, int]
                    ) -> list[Sequence[Any]]:
    """The claimed ``keyed`` rows to put back: per key, ``running[key]`` (this claim's own
    rows included) minus the key's limit, taken from the end of the claim order (priority,
    then job id). A job is kept while fewer than its own limit of its key run besides it."""
    back: list[Sequence[Any]] = []
    for key in {str(row[CKEY_COLUMN]) for row in keyed}:
        mine = sorted((row for row in keyed if str(row[CKEY_COLUMN]) == key),
                      key=lambda row: (-int(row[PRIORITY_COLUMN]), int(row[0])))
        others = running[key] - len(mine)
        kept = 0
        for row in mine:
            if others + kept < int(row[CLIMIT_COLUMN]):
                kept += 1
            else:
                back.append(row)
    return back


@dataclass
class TxProgress:
    """How far :meth:`SqlBackend.transaction` got: was COMMIT sent?"""

    committing: bool = False


def _scrub(text: str, url: DatabaseURL) -> str:
    """Remove the URL's secrets from a driver message, should a driver echo them."""
    return url.scrub(text)


def storable_error(text: str) -> str:
    """Error text every engine stores: NUL as ``\\x00``, lone surrogates as ``\\udcXX``."""
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def one_line(text: str) -> str:
    """A driver message on one line (psycopg's and ODBC's span several)."""
    return " ".join(text.split())


def driver_version(module: str) -> str:
    """The installed version of a driver module's distribution (sqlite3: the library's)."""
    if module == "sqlite3":
        import platform
        return f"Python {platform.python_version()} standard library"
    from importlib import metadata
    for dist in metadata.packages_distributions().get(module, [module]):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


_CREATED_TABLE = re.compile(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", re.IGNORECASE)


def like_pattern(text: str) -> str:
    """A lower-cased LIKE pattern matching ``text`` anywhere, escaped with ``!``."""
    escaped = text.lower().replace("!", "!!").replace("%", "!%").replace("_", "!_")
    return f"%{escaped}%"


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def utc_from_micros(value: int) -> datetime:
    return EPOCH + timedelta(microseconds=int(value))
