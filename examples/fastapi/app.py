"""FastAPI + portq: an order row and its invoice job commit (or vanish) in one async
SQLAlchemy transaction; the worker (``worker.py``) writes the invoice and returns it as the
job's result; portq's dashboard is mounted under ``/jobs``.

    export DATABASE_URL=sqlite:///shop.db        # or postgresql://..., mysql://...
    uvicorn app:app --app-dir examples/fastapi --host 127.0.0.1 --port 8000
    python examples/fastapi/worker.py            # in another shell

    curl -X POST localhost:8000/orders -H 'content-type: application/json' \\
         -d '{"customer": "ada", "total_cents": 1999}'
    curl localhost:8000/orders/1                 # the invoice once the worker ran
    open http://localhost:8000/jobs/             # the dashboard
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel
from shop_models import DATABASE_URL, INVOICES, Base, Order, async_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine

import portq
import portq.web
from portq import aio

queue = portq.connect(DATABASE_URL)                # the dashboard's (sync) Queue
state: dict[str, Any] = {}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    engine = create_async_engine(async_url(DATABASE_URL))
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    aq = aio.AsyncQueue(queue)
    await aq.open()
    await aq.migrate()
    state.update(engine=engine, queue=aq)
    try:
        yield
    finally:
        await aq.close()
        await engine.dispose()


app = FastAPI(title="shop", lifespan=lifespan)
app.mount("/jobs", portq.web.app(queue))           # portq's dashboard (portq[web])


class NewOrder(BaseModel):
    customer: str
    total_cents: int
    fail_after_enqueue: bool = False               # to show the rollback


@app.post("/orders")
async def create_order(body: NewOrder) -> dict[str, int]:
    engine: AsyncEngine = state["engine"]
    aq: aio.AsyncQueue = state["queue"]
    async with AsyncSession(engine) as session, session.begin():
        order = Order(customer=body.customer, total_cents=body.total_cents)
        session.add(order)
        await session.flush()                      # the order's id, same transaction
        order_id = order.id
        job_id = await aq.enqueue(INVOICES, {"order_id": order_id},
                                  key=f"invoice:{order_id}", conn=session)
        order.invoice_job = job_id
        if body.fail_after_enqueue:
            raise HTTPException(409, "refused after enqueue: order and job rolled back")
    return {"order_id": order_id, "job_id": job_id}


@app.get("/orders/{order_id}")
async def read_order(order_id: int) -> dict[str, Any]:
    engine: AsyncEngine = state["engine"]
    aq: aio.AsyncQueue = state["queue"]
    async with AsyncSession(engine) as session:
        order = await session.get(Order, order_id)
    if order is None:
        raise HTTPException(404, f"no order {order_id}")
    job = await aq.job(order.invoice_job) if order.invoice_job else None
    return {"order_id": order.id, "customer": order.customer,
            "invoice_number": order.invoice_number,
            "job_state": job.state if job else None,
            "invoice": await aq.result(order.invoice_job) if order.invoice_job else None}
