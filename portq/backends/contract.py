"""The engine seam: what an engine module of :mod:`portq.backends` may supply.

The operations every backend offers are :class:`portq.protocol.Backend` (the abstract
contract :class:`portq.Queue` and the runtime are typed on) and what differs per engine
for the runtime is :class:`portq.protocol.Capabilities`. The shared SQL machinery
(:mod:`portq.backends.sql`) runs the named statements of ``dialects/<engine>/`` and calls
the hooks of :class:`EngineHooks`, which an engine module (``sqlite.py``, ``postgres.py``,
``mysql.py``, ``sqlserver.py``, ``oracle.py``) overrides where its engine differs; an
engine module overrides nothing else (tests/test_engine_seam.py checks it).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, ClassVar, Protocol

from portq.errors import PortqError
from portq.job import EnqueueResult, ServerInfo
from portq.protocol import Listener, NewJob, ServerIdentity
from portq.sql import ParamStyle


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


class EngineHooks(Protocol):
    """Every hook an engine module may override; :mod:`portq.backends.sql` supplies a
    default for each but :meth:`connect` and :meth:`classify`. ``cur`` is an open
    cursor of the engine's DB-API driver, inside a transaction portq runs."""

    # ---- identity and tuning (class attributes) ----
    #: the engine's name (``dialects/<engine>/``, URL schemes)
    engine: ClassVar[str]
    #: the driver's DB-API paramstyle (:func:`portq.sql.bind`)
    paramstyle: ClassVar[ParamStyle]
    #: module prefix of the connection classes this backend accepts as ``conn=``
    driver_module: ClassVar[str]
    #: the engine's error codes for each kind (:meth:`SqlBackend.kind_of`)
    error_codes: ClassVar[dict[ErrorKind, frozenset[object]]]
    #: retries of a transaction that met a transient conflict
    max_retries: ClassVar[int]
    #: a worker's longest idle sleep unless given (:class:`Capabilities`)
    default_idle_max: ClassVar[float]
    #: one write lock whose waiters sleep in a busy handler (:class:`Capabilities`)
    single_writer: ClassVar[bool]
    #: one-statement operations run in autocommit, one round trip (:meth:`set_autocommit`)
    autocommit_single: ClassVar[bool]
    #: a pooled connection keeps one cursor for all its transactions (a new cursor costs
    #: the driver's per-cursor set-up: psycopg's row loaders)
    keeps_cursor: ClassVar[bool]
    #: the ``complete_many`` statement releases dependents itself (data-modifying CTEs)
    completes_dependents_in_statement: ClassVar[bool]
    #: how one table is dropped (``{name}``)
    drop_table_sql: ClassVar[str]
    #: :meth:`connect_async` opens the driver's asyncio connection: ``portq.aio`` runs
    #: operations on it through its greenlet bridge (else on threads)
    native_async: ClassVar[bool]

    # ---- capabilities (properties where the engine decides per URL) ----
    @property
    def idle_max_default(self) -> float:
        """A worker's longest idle sleep unless given."""

    @property
    def listen_mode(self) -> str:
        """How a worker finds new jobs, for its start-up line."""

    @property
    def announces_cancel(self) -> bool:
        """Cancelling a running job tells its worker at once (the listener)."""

    # ---- connections and sessions ----
    def connect(self) -> Any:
        """Open a new DB-API connection with autocommit off (or managed by :meth:`begin`)."""

    async def connect_async(self) -> Any:
        """Open the driver's asyncio connection, as :meth:`connect` (``native_async``)."""

    def classify(self, exc: BaseException) -> ErrorKind:
        """Map a driver exception to an :class:`ErrorKind`."""

    def begin(self, conn: Any, write: bool) -> None:
        """Start a transaction on a pooled connection (default: the driver does)."""

    def set_autocommit(self, conn: Any, on: bool) -> None:
        """Switch a pooled connection's autocommit (where ``autocommit_single``)."""

    def limit_statements(self, conn: Any, ms: int | None) -> None:
        """Bound every statement of ``conn`` server-side to ``ms`` (None: unbounded)."""

    def bound_statements(self, ms: int | None) -> None:
        """Change the statement bound of portq's own connections from now on."""

    def read_identity(self, conn: Any) -> ServerIdentity | None:
        """Which server history ``conn`` reached (default: none)."""

    def caller_cursor(self, conn: Any) -> Any:
        """A cursor on a caller's connection, values read back as on portq's own."""

    def accepts_connection(self, conn: Any) -> bool:
        """Whether a caller's ``conn=`` is this engine's driver's connection."""

    def translate(self, op: str, exc: BaseException, kind: ErrorKind, *,
                  connecting: bool = False, attempts: int = 1) -> PortqError | None:
        """portq's error for a driver exception ``op`` gives up on (None: the driver's)."""

    def busy_message(self, op: str, detail: str, attempts: int) -> str:
        """What to say when ``op`` still met a lock after ``attempts``."""

    # ---- values ----
    def to_db_time(self, value: datetime) -> Any:
        """An aware datetime as the engine's column value."""

    def from_db_time(self, value: Any) -> datetime | None:
        """A column value as an aware UTC datetime."""

    def execute(self, cur: Any, name_or_sql: str, params: dict[str, Any] | None = None) -> Any:
        """Run a named statement (or raw SQL) with its parameters bound for the driver."""

    # ---- schema ----
    def migration_lock(self, cur: Any) -> AbstractContextManager[None]:
        """Serialise concurrent migrations (default: the transaction is enough)."""

    def create_version_table(self, cur: Any) -> None:
        """Create the schema-version table if missing."""

    def run_ddl(self, cur: Any, statement: str) -> None:
        """Run one statement of a migration."""

    def record_version(self, cur: Any, version: int) -> None:
        """Record an applied migration."""

    def migrate(self) -> int:
        """Create or upgrade the schema (SQL Server checks its compatibility level)."""

    def check_schema(self) -> None:
        """Raise unless the schema is at this portq's version."""

    def server_info(self) -> ServerInfo:
        """Engine, versions, isolation (MySQL tells MariaDB apart)."""

    # ---- enqueue ----
    def insert_jobs(self, cur: Any, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """Insert jobs without a uniqueness scope (a multi-row insert where it pays)."""

    def insert_job(self, cur: Any, params: dict[str, Any]) -> EnqueueResult | None:
        """Insert one job; None when its key already exists."""

    def ensure_row(self, cur: Any, name: str, params: dict[str, Any]) -> None:
        """Run a make-if-missing statement; a concurrent first insert is not an error."""

    def announce(self, cur: Any, queues: Sequence[str]) -> None:
        """Tell idle workers of ``queues`` that jobs arrived, at commit (default: nothing)."""

    def listener(self, queues: Sequence[str]) -> Listener | None:
        """What hears :meth:`announce` (None: workers only poll)."""

    # ---- claim, outcomes, maintenance (where one statement cannot do it) ----
    def claim_rows(self, cur: Any, params: dict[str, Any], name: str = "claim"
                   ) -> list[Sequence[Any]]:
        """Claim in the open transaction; rows are the claim's columns."""

    def fenced_rows(self, cur: Any, op: str, params: dict[str, Any]) -> set[tuple[int, int]]:
        """Run a fenced batch (``complete_many``, ``renew_many``); the rows it wrote."""

    def reap_rows(self, cur: Any, params: dict[str, Any]) -> int:
        """Return expired leases to ready (or dead); how many."""

    def prune_rows(self, cur: Any, params: dict[str, Any]) -> int:
        """Delete finished jobs; how many."""

    def batch_rows(self, cur: Any, name: str, params: dict[str, Any]) -> int:
        """Run a bounded operator batch (``retry_many``, ``cancel_many``); how many."""

    def batch_ids(self, cur: Any, name: str, params: dict[str, Any]) -> list[int]:
        """:meth:`batch_rows`, returning the ids of the rows changed (``retry_many``: a
        retry revives the dependents its jobs' ends cancelled)."""

    def dependents_update(self, cur: Any, name: str, params: dict[str, Any]) -> None:
        """Update a dependency's waiting dependents (``dep_release``, ``dep_cancel``)."""

    def pending(self, queue: str) -> tuple[bool, bool]:
        """Whether ``queue`` has a job ready and one running (Oracle: two probes)."""

