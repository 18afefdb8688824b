"""Tasks for tests/test_django_contract.py (module level, as django.tasks requires; the
in-process burst worker imports them by path)."""

from __future__ import annotations

from typing import Any

from django.tasks import TaskContext, task


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def multi_line() -> None:
    exc = ValueError("first line\nsecond line")
    exc.add_note("a note")
    raise exc


@task
def deep(n: int) -> None:
    """n frames that alternate (Python folds only repeats of one frame)."""
    _ping(n)


def _ping(n: int) -> None:
    if n == 0:
        raise LookupError("at the bottom")
    _pong(n - 1)


def _pong(n: int) -> None:
    _ping(n)


@task
def not_json() -> Any:
    return {1, 2}


@task
def system_exit() -> None:
    raise SystemExit("task asked to exit")


@task
def keyboard_interrupt() -> None:
    raise KeyboardInterrupt("task interrupted")


@task(takes_context=True)
def context_times(context: TaskContext) -> dict[str, Any]:
    r = context.task_result
    return {"enqueued_at": r.enqueued_at.isoformat() if r.enqueued_at else None,
            "started_at": r.started_at.isoformat() if r.started_at else None,
            "attempt": context.attempt, "priority": r.task.priority,
            "queue": r.task.queue_name}


@task
def refuse() -> None:
    from portq import Permanent
    raise Permanent("never worth retrying")
