"""A backend's configuration, connections, server identity, error translation, value
conversion and capabilities: the defaults of the engine hooks
(:class:`portq.backends.contract.EngineHooks`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from typing import Any, ClassVar

from portq.backends.contract import KIND_ORDER, ErrorKind
from portq.backends.sql.common import POLL_IDLE_MAX, _scrub, one_line
from portq.errors import (
    CannotConnect,
    ConfigurationError,
    ConnectionLost,
    DatabaseBusy,
    DatabaseMissing,
    LoginFailed,
    PortqError,
    SchemaMissingError,
    StatementTimeout,
)
from portq.pool import Pool, close_quietly
from portq.protocol import Backend, Capabilities, Listener, ServerIdentity
from portq.sql import ParamStyle, load_queries, validate_prefix
from portq.url import DatabaseURL


class SqlSession(Backend):
    """Configuration, connections and the engine hooks' defaults."""

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

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url.redacted()!r}, prefix={self.prefix!r})"

    # ---- what an engine module supplies -------------------------------------------------

    def connect(self) -> Any:
        """Open a new DB-API connection with autocommit off (or managed by :meth:`begin`)."""
        raise NotImplementedError

    def classify(self, exc: BaseException) -> ErrorKind:
        """Map a driver exception to an :class:`ErrorKind`."""
        raise NotImplementedError

    #: True where :meth:`connect_async` opens a driver's asyncio connection, which an
    #: async runner uses through :mod:`portq.aio_bridge` (elsewhere: threads)
    native_async: ClassVar[bool] = False

    async def connect_async(self) -> Any:
        """Open the driver's asyncio connection, as :meth:`connect` (where
        ``native_async``)."""
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

    def open_connection(self, connect: Callable[[], Any] | None = None) -> Any:
        """:meth:`connect` (or ``connect()``: an async runner's bridged connection), with
        the session setup (statement timeout, server identity check) done and a refused
        login, a missing database or an unreachable server raised as portq's own errors
        (what the pool calls)."""
        try:
            conn = (connect or self.connect)()
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
                            announces_cancel=self.announces_cancel,
                            listen_mode=self.listen_mode,
                            row_locking=not self.single_writer)

    @property
    def pool_size(self) -> int:
        return self.pool.max_size

    def resize_pool(self, size: int) -> None:
        self.pool.resize(size)

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

    def load_text(self, value: Any) -> str | None:
        if value is None or isinstance(value, str):
            return value
        if hasattr(value, "read"):
            return str(value.read())
        return str(value)


    def close(self) -> None:
        self.pool.close()

