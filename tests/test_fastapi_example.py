"""examples/fastapi end to end on SQLite, PostgreSQL and MariaDB: uvicorn serving the app on
127.0.0.1 and the worker as subprocesses; an order and its job roll back together or commit
together, the worker's result reaches the API, the dashboard answers under /jobs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

for module, extra in (("fastapi", "fastapi"), ("uvicorn", "portq[web]"), ("jinja2", "portq[web]"),
                      ("httpx", "httpx"), ("sqlalchemy", "portq[sqlalchemy]")):
    pytest.importorskip(module, reason=f"the FastAPI example needs {extra}")

import httpx  # noqa: E402

import portq  # noqa: E402
from portq.conformance.helpers import free_port, wait_until  # noqa: E402
from portq.url import parse_url  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "fastapi"
DRIVERS = {"postgres": None, "sqlite": "aiosqlite", "mysql": "aiomysql"}


@pytest.fixture
def example_url(engine_url: str) -> str:
    engine = parse_url(engine_url).engine
    if engine not in DRIVERS:
        pytest.skip(f"the FastAPI example runs on {', '.join(DRIVERS)}")
    if DRIVERS[engine]:
        pytest.importorskip(str(DRIVERS[engine]), reason=f"pip install {DRIVERS[engine]}")
    return engine_url


def _start(args: list[str], url: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, *args], cwd=EXAMPLE, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, DATABASE_URL=url))


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return proc.returncode, out, err


@pytest.fixture
def api(example_url: str) -> Iterator[httpx.Client]:
    port = free_port()
    server = _start(["-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", str(port)],
                    example_url)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)

    def up() -> bool:
        if server.poll() is not None:
            raise AssertionError(f"uvicorn exited: {server.communicate()[1][-2000:]}")
        try:
            return client.get("/openapi.json").status_code == 200
        except httpx.TransportError:
            return False
    try:
        assert wait_until(up, timeout=60, interval=0.2), "uvicorn did not start"
        yield client
    finally:
        client.close()
        _stop(server)


def _invoices(url: str) -> int:
    with portq.connect(url) as q:
        return sum(s.ready + s.scheduled + s.running for s in q.stats("invoices"))


def test_order_and_job_commit_together_and_the_worker_result_reaches_the_api(
        example_url: str, api: httpx.Client) -> None:
    before = _invoices(example_url)
    refused = api.post("/orders", json={"customer": "eve", "total_cents": 1,
                                        "fail_after_enqueue": True})
    assert refused.status_code == 409
    assert _invoices(example_url) == before, "the rolled-back request left a job"

    created = api.post("/orders", json={"customer": "ada", "total_cents": 1999})
    assert created.status_code == 200, created.text
    order_id, job_id = created.json()["order_id"], created.json()["job_id"]
    order = api.get(f"/orders/{order_id}").json()
    assert order["job_state"] == "ready" and order["invoice"] is None
    assert _invoices(example_url) == before + 1

    worker = _start(["worker.py"], example_url)
    try:
        def invoiced() -> Any:
            return api.get(f"/orders/{order_id}").json()["invoice"]
        assert wait_until(lambda: invoiced() is not None, timeout=60, interval=0.2), \
            f"no invoice: {worker.poll()} {worker.stderr.read() if worker.poll() else ''}"
    finally:
        code, out, err = _stop(worker)
    assert code == 0, err[-2000:]
    assert "worker stopped: succeeded=" in out
    order = api.get(f"/orders/{order_id}").json()
    number = f"INV-{order_id:06d}"
    assert order["invoice"] == {"order_id": order_id, "invoice_number": number}
    assert order["invoice_number"] == number and order["job_state"] == "succeeded"
    with portq.connect(example_url) as q:
        record = q.job(job_id)
        assert record is not None and record.key == f"invoice:{order_id}"

    page = api.get("/jobs/")
    assert page.status_code == 200 and "invoices" in page.text, page.text[:500]
