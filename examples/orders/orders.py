"""Order-and-invoice example: an order row and its invoice job commit (or vanish) together.

The shop keeps its own tables (``orders``, ``invoices``) on its own connection — psycopg on
PostgreSQL, sqlite3 on SQLite — and passes that connection to ``queue.enqueue(conn=...)``
so the job is part of the order's transaction. The worker's handler writes the invoice
idempotently: delivery is at-least-once, so a re-run of the same job finds the invoice
already there (``invoices.order_id`` is unique) and writes nothing.

    python examples/orders/orders.py sqlite:///shop.db order alice 1999
    python examples/orders/worker.py sqlite:///shop.db        # processes the invoices
"""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import portq
from portq.url import parse_url

INVOICE_QUEUE = "invoices"
_TABLE = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")


class Shop:
    """The application: its tables, its connection, and the portq queue it writes to."""

    def __init__(self, url: str, queue: portq.Queue, *, orders: str = "orders",
                 invoices: str = "invoices", invoice_queue: str = INVOICE_QUEUE) -> None:
        for name in (orders, invoices):
            if not _TABLE.match(name):
                raise ValueError(f"bad table name {name!r}")
        self.url = url
        self.engine = parse_url(url).engine
        if self.engine not in ("postgres", "sqlite"):
            raise ValueError("this example runs on PostgreSQL and SQLite")
        self.queue = queue
        self.orders, self.invoices, self.invoice_queue = orders, invoices, invoice_queue
        self.mark = "%s" if self.engine == "postgres" else "?"   # the driver's placeholder

    @contextmanager
    def connect(self) -> Iterator[Any]:
        """The shop's own connection (not portq's), closed afterwards."""
        if self.engine == "postgres":
            import psycopg
            conn: Any = psycopg.connect(self.url.replace("+psycopg", "", 1))
        else:
            conn = sqlite3.connect(parse_url(self.url).path, timeout=10)
        try:
            yield conn
        finally:
            conn.close()

    def create_tables(self) -> None:
        key = "BIGSERIAL" if self.engine == "postgres" else "INTEGER"
        with self.connect() as conn:
            cur = conn.cursor()
            cur.execute(f"CREATE TABLE IF NOT EXISTS {self.orders} ("
                        f"order_id {key} PRIMARY KEY, customer TEXT NOT NULL, "
                        "amount_cents INTEGER NOT NULL CHECK (amount_cents > 0))")
            cur.execute(f"CREATE TABLE IF NOT EXISTS {self.invoices} ("
                        f"invoice_id {key} PRIMARY KEY, "
                        f"order_id BIGINT NOT NULL UNIQUE REFERENCES {self.orders}, "
                        "job_id BIGINT NOT NULL, amount_cents INTEGER NOT NULL)")
            conn.commit()

    def place_order(self, customer: str, amount_cents: int, *,
                    fail_after_enqueue: bool = False) -> int:
        """Insert the order and enqueue its invoice job in one transaction; return the
        order id. ``fail_after_enqueue`` simulates a crash before COMMIT."""
        m = self.mark
        with self.connect() as conn:
            try:
                cur = conn.cursor()
                cur.execute(f"INSERT INTO {self.orders} (customer, amount_cents) "
                            f"VALUES ({m}, {m}) RETURNING order_id", (customer, amount_cents))
                order_id = int(cur.fetchone()[0])
                self.queue.enqueue(self.invoice_queue, {"order_id": order_id},
                                   key=f"invoice:{self.orders}:{order_id}", conn=conn)
                if fail_after_enqueue:
                    raise RuntimeError("simulated failure before commit")
                conn.commit()
            except BaseException:
                conn.rollback()
                raise
        return order_id

    def handle_invoice(self, job: portq.Job) -> None:
        """The worker's handler: write the order's invoice once, however often it runs."""
        m = self.mark
        order_id = int(job.payload["order_id"])
        with self.connect() as conn:
            cur = conn.cursor()
            cur.execute(f"SELECT amount_cents FROM {self.orders} WHERE order_id = {m}",
                        (order_id,))
            row = cur.fetchone()
            if row is None:
                raise portq.Permanent(f"order {order_id} does not exist")
            cur.execute(f"INSERT INTO {self.invoices} (order_id, job_id, amount_cents) "
                        f"VALUES ({m}, {m}, {m}) ON CONFLICT (order_id) DO NOTHING",
                        (order_id, job.id, row[0]))
            conn.commit()

    def counts(self) -> tuple[int, int]:
        """(orders, invoices) rows."""
        with self.connect() as conn:
            cur = conn.cursor()
            cur.execute(f"SELECT count(*) FROM {self.orders}")
            orders = int(cur.fetchone()[0])
            cur.execute(f"SELECT count(*) FROM {self.invoices}")
            return orders, int(cur.fetchone()[0])


@contextmanager
def open_shop(url: str) -> Iterator[Shop]:
    """A :class:`Shop` on ``url`` with portq's and the shop's tables created."""
    with portq.connect(url) as queue:
        queue.migrate()
        shop = Shop(url, queue)
        shop.create_tables()
        yield shop


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[1] != "order":
        print("usage: orders.py URL order CUSTOMER AMOUNT_CENTS", file=sys.stderr)
        return 2
    with open_shop(argv[0]) as shop:
        print(shop.place_order(argv[2], int(argv[3])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
