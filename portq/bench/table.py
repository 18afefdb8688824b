"""The benchmark's tables and the statements ``portq bench`` runs on them, read from each
dialect's ``bench.sql`` (``dialects/<engine>/bench.sql``): an engine without one has no
table filler or plan reader, and a statement missing from it is a figure not measured."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

from portq.backends.base import SqlBackend
from portq.engines import ENGINES
from portq.errors import ConfigurationError
from portq.sql import dialects_dir, load_queries

T = TypeVar("T")
BENCH_PREFIX = "portqb_"
CLAIM_LIMIT = 20
QUEUE_COUNT = 3
#: rows per fill statement (each committed); the MySQL filler numbers up to this many
FILL_CHUNK = 100_000
Progress = Callable[[int, int, float], None]
#: engines whose table can be filled and whose claim plan can be read: those with a bench.sql
PLANNED_ENGINES = tuple(e.name for e in ENGINES
                        if (dialects_dir() / e.name / "bench.sql").is_file())


@cache
def _statements(engine: str, prefix: str) -> dict[str, str]:
    if engine not in PLANNED_ENGINES:
        return {}
    return load_queries(engine, prefix, "bench.sql")


def statement(backend: SqlBackend, name: str) -> str | None:
    """The backend's ``bench_<name>`` statement (its prefix applied), or None."""
    return _statements(backend.engine, backend.prefix).get(f"bench_{name}")


def _read(backend: SqlBackend, name: str, fetch: Callable[[Any], T],
          params: dict[str, Any] | None = None) -> T | None:
    """Run the ``bench_<name>`` statement and ``fetch`` its result (None: no statement)."""
    sql = statement(backend, name)
    if sql is None:
        return None
    return backend.run(f"bench.{name}", lambda c: fetch(backend.execute(c, sql, params)),
                       write=False)


def claim_params(queue: str, limit: int = CLAIM_LIMIT) -> dict[str, Any]:
    return {"queue": queue, "worker_id": "portq-bench", "limit": limit, "lease_ms": 60_000}


def fill_jobs(backend: SqlBackend, queue: str, count: int, *, state: str = "ready",
              offset: int = 0) -> None:
    """Insert ``count`` due jobs of ``queue`` in ``state`` ('ready' or 'succeeded') with
    the dialect's row generator, in chunks of :data:`FILL_CHUNK` (each committed)."""
    sql = statement(backend, "fill")
    if sql is None:
        raise ConfigurationError(f"portq bench cannot fill a {backend.engine} table yet")
    if state not in ("ready", "succeeded"):
        raise ConfigurationError(f"fill state must be ready or succeeded, got {state!r}")
    done = 0
    while done < count:
        n = min(FILL_CHUNK, count - done)
        params = {"queue": queue, "state": state, "count": n, "offset": offset + done}

        def insert(cur: Any, params: dict[str, Any] = params) -> None:
            backend.execute(cur, sql, params)
        backend.run("bench.fill", insert)
        done += n


def analyze_table(backend: SqlBackend) -> None:
    """Refresh the planner's statistics of the job table (as autovacuum would)."""
    sql = statement(backend, "analyze")
    if sql is None:
        return

    def go(cur: Any) -> None:
        backend.execute(cur, sql)
        if cur.description:   # MySQL's ANALYZE TABLE answers with rows
            cur.fetchall()
    backend.run("bench.analyze", go)


def drop_tables(backend: SqlBackend) -> None:
    """Drop every table of ``backend``'s (throw-away) prefix, dependents first."""
    if backend.prefix == "portq_":
        raise ConfigurationError("refusing to drop the application's portq_ tables")
    backend.drop_schema()


def outside_transaction(backend: SqlBackend, name: str) -> None:
    """Run the ``bench_<name>`` statement (VACUUM) on a connection of its own in autocommit;
    nothing when the dialect has none."""
    sql = statement(backend, name)
    if sql is None:
        return
    with contextlib.closing(backend.connect()) as conn:
        backend.set_autocommit(conn, True)
        cur = conn.cursor()
        try:
            backend.execute(cur, sql)
        finally:
            cur.close()


def settle(backend: SqlBackend) -> None:
    """Start a run from a clean table: the dialect's ``bench_settle`` (PostgreSQL: VACUUM the
    job table, whose dead rows would slow the next run wherever autovacuum is off or
    behind; InnoDB purges, and SQLite reuses free pages, on their own)."""
    outside_transaction(backend, "settle")


def server_version(backend: SqlBackend, cur: Any | None = None) -> str:
    """The engine's version string (the engine's name when its dialect has no query)."""
    sql = statement(backend, "version")
    if sql is None:
        return backend.engine
    if cur is not None:
        return str(backend.execute(cur, sql).fetchone()[0])
    return str(_read(backend, "version", lambda c: c.fetchone()[0]))


def db_clock(backend: SqlBackend, queue: str | None = None) -> float | None:
    """The database's clock in epoch seconds, or (``queue`` given) the latest
    ``finished_at`` of that queue's jobs, on the same clock (None: no such query or job)."""
    value = _read(backend, "clock" if queue is None else "finished_clock",
                  lambda c: c.fetchone()[0], {"queue": queue} if queue else None)
    return None if value is None else float(value)


def connections(backend: SqlBackend) -> int | None:
    """Connections to the benchmark database but this one (None: not known, SQLite)."""
    value = _read(backend, "connections", lambda c: c.fetchone()[0])
    return None if value is None else int(value)


#: the server counters' names in the report (MariaDB's status variables renamed)
COUNTER_NAMES = {"Handler_commit": "commits", "Innodb_row_lock_waits": "row_lock_waits",
                 "Innodb_row_lock_time": "row_lock_ms", "Innodb_deadlocks": "deadlocks"}


def server_stats(backend: SqlBackend) -> dict[str, float]:
    """Cumulative commit and lock counters of the server (PostgreSQL: this database's;
    MariaDB: the server's global status); empty where the dialect reads none."""
    rows = _read(backend, "server_stats", lambda c: c.fetchall()) or []
    return {COUNTER_NAMES.get(str(k), str(k)): float(v) for k, v in rows}


def waits(backend: SqlBackend) -> list[tuple[str, int]]:
    """(wait event type or 'CPU', backends) of this database's active backends, where the
    dialect can tell (PostgreSQL)."""
    rows = _read(backend, "waits", lambda c: c.fetchall()) or []
    return [(str(k), int(n)) for k, n in rows]
