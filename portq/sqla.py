"""SQLAlchemy 2 interop, imported lazily: SQLAlchemy is an optional dependency.

portq writes through the DB-API connection under a SQLAlchemy ``Connection`` or ORM
``Session`` (its current transaction), and never commits or rolls it back.
"""

from __future__ import annotations

import sys
from typing import Any

from portq.engines import ENGINES, SQLALCHEMY_DIALECTS
from portq.errors import ConfigurationError


def is_sqlalchemy(obj: Any) -> bool:
    """True if ``obj`` is (a subclass of) a SQLAlchemy object, without importing SQLAlchemy."""
    if "sqlalchemy" not in sys.modules:
        return False
    return any(cls.__module__.split(".")[0] == "sqlalchemy" for cls in type(obj).__mro__)


def dbapi_connection(obj: Any) -> Any:
    """The driver connection inside a SQLAlchemy ``Session``/``scoped_session``/``Connection``.

    A Session is asked for its connection, which joins (or begins) its transaction; a
    Connection outside a transaction begins one (as its next statement would), so the
    caller's ``commit()``/``rollback()`` covers the job.
    """
    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.orm import Session, scoped_session

    if is_async(obj):
        raise ConfigurationError(
            "conn is a SQLAlchemy asyncio object; pass it to portq.aio's enqueue (await "
            "aq.enqueue(..., conn=session)), or pass a sync Session/Connection here")
    if isinstance(obj, Engine):
        raise ConfigurationError(
            "conn is a SQLAlchemy Engine, which has no transaction; pass the Connection "
            "(engine.begin()) or Session whose transaction the job belongs to")
    if isinstance(obj, Session | scoped_session):
        obj = obj.connection()
    if not isinstance(obj, Connection):
        raise ConfigurationError(
            f"conn is a SQLAlchemy {type(obj).__name__}; pass a Session or Connection")
    if obj.closed or obj.invalidated:
        raise ConfigurationError("conn is a closed or invalidated SQLAlchemy Connection")
    if not obj.in_transaction():
        # portq's SQL bypasses SQLAlchemy, which would otherwise not know a transaction is
        # open: its commit() would do nothing and the pool would roll the job back
        obj.begin()
    return obj.connection.dbapi_connection


#: SQLAlchemy dialect name -> portq engine, for async connections
DIALECT_ENGINES = SQLALCHEMY_DIALECTS
#: async drivers portq.aio can write through, per engine (docs/operations.md)
ASYNC_DRIVERS = {e.name: e.sqlalchemy_async_drivers for e in ENGINES
                 if e.sqlalchemy_async_drivers}


def is_async(obj: Any) -> bool:
    """True for SQLAlchemy's asyncio objects (AsyncSession, AsyncConnection, ...)."""
    return is_sqlalchemy(obj) and any(
        cls.__module__.startswith("sqlalchemy.ext.asyncio") for cls in type(obj).__mro__)


async def async_connection(obj: Any, engine: str) -> Any:
    """The ``AsyncConnection`` of an ``AsyncSession``/``async_scoped_session``/
    ``AsyncConnection`` (its transaction begun, as its next statement would), checked to
    be a driver portq can use for ``engine``."""
    from sqlalchemy.ext.asyncio import (
        AsyncConnection,
        AsyncEngine,
        AsyncSession,
        async_scoped_session,
    )

    if isinstance(obj, AsyncEngine):
        raise ConfigurationError(
            "conn is a SQLAlchemy AsyncEngine, which has no transaction; pass the "
            "AsyncConnection (async with engine.begin() as conn) or the AsyncSession")
    if isinstance(obj, AsyncSession | async_scoped_session):
        obj = await obj.connection()
    if not isinstance(obj, AsyncConnection):
        raise ConfigurationError(
            f"conn is a SQLAlchemy {type(obj).__name__}; pass an AsyncSession or "
            "AsyncConnection")
    if obj.closed or obj.invalidated:
        raise ConfigurationError("conn is a closed or invalidated SQLAlchemy AsyncConnection")
    dialect, driver = obj.dialect.name, obj.dialect.driver
    if DIALECT_ENGINES.get(dialect) != engine:
        raise ConfigurationError(f"conn is a SQLAlchemy connection to {dialect}; this queue "
                                 f"is on {engine}")
    if driver not in ASYNC_DRIVERS.get(engine, ()):
        hint = ("create the engine with postgresql+psycopg://... (psycopg 3's async driver, "
                "the one portq uses)" if driver == "asyncpg" else
                f"use {' or '.join(f'{dialect}+{d}://' for d in ASYNC_DRIVERS[engine])}"
                if engine in ASYNC_DRIVERS else
                "portq.aio has no async driver for this engine: use a sync Session in a "
                "thread")
        raise ConfigurationError(f"conn uses SQLAlchemy's {dialect}+{driver} driver, which "
                                 f"portq cannot write through; {hint}")
    if not obj.in_transaction():
        await obj.begin()
    return obj


def adapted_dbapi(sync_conn: Any) -> Any:
    """Inside ``AsyncConnection.run_sync``: SQLAlchemy's sync DB-API adapter of the async
    driver connection (its calls run on the event loop through greenlets)."""
    return sync_conn.connection.dbapi_connection
