"""The shop's tasks. Each runs in ``manage.py portq_worker``; ``using(backend=...)`` picks
the database (see settings.TASKS)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from django.tasks import TaskContext, task

from shop.models import Order


@task
def charge(order_id: int, database: str = "default") -> dict[str, Any]:
    """Mark an order paid (through the ORM, in the worker) and return what was charged."""
    order = Order.objects.using(database).get(id=order_id)
    order.paid = True
    order.save(using=database, update_fields=["paid"])
    return {"order": order.id, "charged_cents": order.total_cents}


@task(priority=50, queue_name="emails")
def add(a: int, b: int) -> int:
    return a + b


@task
def explode(message: str) -> None:
    raise ValueError(message)


@task(takes_context=True)
def attempt_number(context: TaskContext) -> int:
    return context.attempt


@task
def nap(seconds: float) -> str:
    time.sleep(seconds)
    return f"slept {seconds}"


@task
async def add_later(a: int, b: int) -> int:
    """An async task: the worker runs it with asgiref's async_to_sync."""
    await asyncio.sleep(0.01)
    return a + b
