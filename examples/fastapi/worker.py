"""The shop's worker: an AsyncWorker writing each order's invoice number (idempotently: a
re-run finds it set) and returning the invoice as the job's result. SIGTERM drains.

    DATABASE_URL=sqlite:///shop.db python examples/fastapi/worker.py [--burst]
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

from shop_models import DATABASE_URL, INVOICES, Order, async_url
from sqlalchemy import update
from sqlalchemy.ext.asyncio import create_async_engine

import portq
from portq import aio


async def main(burst: bool) -> None:
    engine = create_async_engine(async_url(DATABASE_URL))
    aq = await aio.connect(DATABASE_URL)

    async def invoice(job: portq.Job) -> dict[str, Any]:
        order_id = int(job.payload["order_id"])
        number = f"INV-{order_id:06d}"
        async with engine.begin() as conn:
            await conn.execute(update(Order).where(Order.id == order_id)
                               .values(invoice_number=number))
        return {"order_id": order_id, "invoice_number": number}

    worker = aio.AsyncWorker(aq, INVOICES, invoice, concurrency=8, burst=burst,
                             install_signals=True)
    try:
        counters = await worker.run()
        print(f"worker stopped: succeeded={counters.succeeded} dead={counters.dead}",
              flush=True)
    finally:
        await aq.close()
        await engine.dispose()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(main("--burst" in sys.argv[1:]))
