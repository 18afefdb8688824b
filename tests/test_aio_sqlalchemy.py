"""portq.aio enqueue(conn=AsyncSession | AsyncConnection) joins the SQLAlchemy asyncio
transaction: PostgreSQL (postgresql+psycopg, psycopg 3 async), SQLite (sqlite+aiosqlite)
and MariaDB (mysql+aiomysql). asyncpg is refused with the URL to use instead."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import portq
from portq import aio
from portq.conformance.plugin import TEST_PREFIX
from portq.url import parse_url

sqlalchemy = pytest.importorskip("sqlalchemy")
from sqlalchemy import text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine  # noqa: E402

ASYNC_SCHEMES = {"postgres": ("postgresql+psycopg", None),
                 "sqlite": ("sqlite+aiosqlite", "aiosqlite"),
                 "mysql": ("mysql+aiomysql", "aiomysql")}


@pytest.fixture
def async_sqla_url(engine_url: str) -> str:
    """The engine under test as a SQLAlchemy asyncio URL (skipped where portq.aio has no
    async driver, or the driver is not installed)."""
    url = parse_url(engine_url)
    if url.engine not in ASYNC_SCHEMES:
        pytest.skip(f"portq.aio has no SQLAlchemy async driver for {url.engine}")
    scheme, module = ASYNC_SCHEMES[url.engine]
    if module:
        pytest.importorskip(module, reason=f"pip install {module}")
    return scheme + engine_url[engine_url.index("://"):]


def run(engine_url: str, body: Callable[[aio.AsyncQueue], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with await aio.connect(engine_url, prefix=TEST_PREFIX) as q:
            return await body(q)
    return asyncio.run(main())


def test_async_session_and_connection_join_the_transaction(
        engine_url: str, async_sqla_url: str, queue: portq.Queue, qname: str) -> None:
    table = f"aio_orders_{uuid.uuid4().hex[:8]}"

    async def body(q: aio.AsyncQueue) -> list[int]:
        engine = create_async_engine(async_sqla_url)
        try:
            async with engine.begin() as conn:
                await conn.execute(text(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY)"))
            async with AsyncSession(engine) as session:  # rolled back: neither row
                await session.execute(text(f"INSERT INTO {table} (id) VALUES (1)"))
                rolled = await q.enqueue(qname, {"order": 1}, conn=session)
                await session.rollback()
            async with AsyncSession(engine) as session:  # committed: both rows
                await session.execute(text(f"INSERT INTO {table} (id) VALUES (2)"))
                kept = await q.enqueue(qname, {"order": 2}, conn=session)
                await session.commit()
            async with engine.connect() as conn:  # AsyncConnection, enqueue first
                many = await q.enqueue_many([{"queue": qname, "payload": {"order": 3}},
                                             {"queue": qname, "payload": {"order": 4}}],
                                            conn=conn)
                await conn.execute(text(f"INSERT INTO {table} (id) VALUES (3)"))
                await conn.commit()
            async with engine.connect() as conn:
                orders = [r[0] for r in await conn.execute(
                    text(f"SELECT id FROM {table} ORDER BY id"))]
                await conn.execute(text(f"DROP TABLE {table}"))
                await conn.commit()
        finally:
            await engine.dispose()
        assert orders == [2, 3]
        return [rolled, kept, *many]
    rolled, kept, *many = run(engine_url, body)
    jobs = {j.id: j.payload for j in queue.jobs(queue=qname)}
    assert jobs == {kept: {"order": 2}, many[0]: {"order": 3}, many[1]: {"order": 4}}, \
        "the rolled-back job was committed, or a committed one is missing"
    assert rolled > 0


def test_async_engine_and_foreign_driver_are_refused(engine_url: str, async_sqla_url: str,
                                                     qname: str) -> None:
    async def body(q: aio.AsyncQueue) -> None:
        engine = create_async_engine(async_sqla_url)
        try:
            with pytest.raises(portq.ConfigurationError, match="AsyncEngine, which has no "
                                                               "transaction"):
                await q.enqueue(qname, 1, conn=engine)
        finally:
            await engine.dispose()
    run(engine_url, body)


def test_asyncpg_is_refused_naming_the_url_to_use(engine_url: str, qname: str) -> None:
    if parse_url(engine_url).engine != "postgres":
        pytest.skip("asyncpg is a PostgreSQL driver")
    pytest.importorskip("asyncpg", reason="pip install asyncpg")
    asyncpg_url = "postgresql+asyncpg" + engine_url[engine_url.index("://"):]

    async def body(q: aio.AsyncQueue) -> None:
        engine = create_async_engine(asyncpg_url)
        try:
            async with AsyncSession(engine) as session:
                with pytest.raises(portq.ConfigurationError,
                                   match=r"postgresql\+asyncpg driver.*postgresql\+psycopg://"):
                    await q.enqueue(qname, 1, conn=session)
        finally:
            await engine.dispose()
    run(engine_url, body)
    with pytest.raises(portq.ConfigurationError, match=r"postgresql\+psycopg://"):
        portq.connect(asyncpg_url)


def test_sync_queue_refuses_an_async_session_pointing_to_portq_aio(
        engine_url: str, async_sqla_url: str, queue: portq.Queue, qname: str) -> None:
    engine = create_async_engine(async_sqla_url)
    with pytest.raises(portq.ConfigurationError, match=r"portq\.aio"):
        queue.enqueue(qname, 1, conn=AsyncSession(engine))
