"""examples/orders: an order and its invoice job commit or vanish together; the worker
writes each invoice once. Runs on PostgreSQL and SQLite."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import portq
from portq.conformance.helpers import counts
from portq.url import parse_url
from portq.worker import Worker

EXAMPLE_DIR = Path(__file__).resolve().parent.parent / "examples" / "orders"
sys.path.insert(0, str(EXAMPLE_DIR))
from orders import Shop  # noqa: E402


@pytest.fixture
def shop(engine_url: str, queue: portq.Queue, qname: str) -> Iterator[Shop]:
    if parse_url(engine_url).engine not in ("postgres", "sqlite"):
        pytest.skip("the order example runs on PostgreSQL and SQLite")
    suffix = uuid.uuid4().hex[:8]
    s = Shop(engine_url, queue, orders=f"ex_orders_{suffix}", invoices=f"ex_invoices_{suffix}",
             invoice_queue=qname)
    s.create_tables()
    yield s
    with s.connect() as conn:
        conn.cursor().execute(f"DROP TABLE {s.invoices}")
        conn.cursor().execute(f"DROP TABLE {s.orders}")
        conn.commit()


def test_order_and_job_commit_or_vanish_together(shop: Shop, queue: portq.Queue,
                                                 qname: str) -> None:
    ids = [shop.place_order(f"customer-{i}", 100 * (i + 1)) for i in range(5)]
    with pytest.raises(RuntimeError, match="simulated"):
        shop.place_order("ghost", 999, fail_after_enqueue=True)
    with pytest.raises(Exception, match=r"(?i)check"):      # the shop's own CHECK fails
        shop.place_order("negative", -5)
    assert shop.counts() == (5, 0)
    assert counts(queue, qname)["ready"] == 5              # no job for the failed orders

    worker = Worker(queue, qname, shop.handle_invoice, concurrency=3, burst=True,
                    idle_min=0.01, idle_max=0.1)
    result = worker.run()
    assert (result.succeeded, result.dead, result.retried) == (5, 0, 0)
    assert shop.counts() == (5, 5)

    # at-least-once: running a job again (redelivery) writes no second invoice
    done = queue.jobs("succeeded", queue=qname)
    assert sorted(j.payload["order_id"] for j in done) == sorted(ids)
    job = portq.Job(id=done[0].id, queue=qname, payload=done[0].payload, attempt=2,
                    max_attempts=25, key=done[0].key)
    shop.handle_invoice(job)
    assert shop.counts() == (5, 5)


def test_worker_script_processes_invoices(shop: Shop, engine_url: str, tmp_path: Path) -> None:
    """The example's own scripts, as a user runs them (default tables and queue)."""
    if parse_url(engine_url).engine != "sqlite":
        pytest.skip("the scripts use the default table names: run them on a private file")
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    env: dict[str, Any] = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for customer in ("ann", "bob"):
        out = subprocess.run([sys.executable, str(EXAMPLE_DIR / "orders.py"), url, "order",
                              customer, "1500"], env=env, capture_output=True, text=True,
                             timeout=60, check=True)
        assert out.stdout.strip().isdigit()
    subprocess.run([sys.executable, str(EXAMPLE_DIR / "worker.py"), url, "--burst"],
                   env=env, capture_output=True, text=True, timeout=60, check=True)
    with portq.connect(url) as q:
        assert Shop(url, q).counts() == (2, 2)
        assert counts(q, "invoices")["succeeded"] == 2
