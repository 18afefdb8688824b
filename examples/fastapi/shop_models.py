"""What the app and the worker share: the database URL, the order table, the queue name."""

from __future__ import annotations

import os

from sqlalchemy import Integer, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from portq.url import parse_url

INVOICES = "invoices"
#: portq URL scheme -> the SQLAlchemy asyncio driver portq.aio can write through
ASYNC_DRIVERS = {"postgres": "postgresql+psycopg", "sqlite": "sqlite+aiosqlite",
                 "mysql": "mysql+aiomysql"}


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "fastapi_orders"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    customer: Mapped[str] = mapped_column(String(100))
    total_cents: Mapped[int] = mapped_column(Integer)
    invoice_job: Mapped[int | None] = mapped_column(Integer, nullable=True)
    invoice_number: Mapped[str | None] = mapped_column(String(40), nullable=True)


def async_url(url: str) -> str:
    """The SQLAlchemy asyncio URL of a portq URL (same database)."""
    engine = parse_url(url).engine
    if engine not in ASYNC_DRIVERS:
        raise SystemExit(f"this example runs on {', '.join(ASYNC_DRIVERS)}, not {engine}")
    return ASYNC_DRIVERS[engine] + url[url.index("://"):]


DATABASE_URL = os.environ.get("DATABASE_URL", "sqlite:///shop.db")
