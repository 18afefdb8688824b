"""SQLAlchemy 2 interop, imported lazily: SQLAlchemy is an optional dependency.

portq writes through the DB-API connection under a SQLAlchemy ``Connection`` or ORM
``Session`` (its current transaction), and never commits or rolls it back.
"""

from __future__ import annotations

import sys
from typing import Any

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

    if type(obj).__module__.startswith("sqlalchemy.ext.asyncio"):
        raise ConfigurationError(
            "conn is a SQLAlchemy asyncio object; pass a sync Session/Connection, or use "
            "portq.aio with a psycopg AsyncConnection")
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
