"""Helpers for your own test suite: assert what was enqueued, and run jobs inline.

Everything runs real SQL on a real engine (the Queue you pass), never a mock::

    from portq.testing import assert_enqueued, drain, refute_enqueued

    def test_signup_sends_welcome_mail(portq_queue):
        signup("ada@example.com", queue=portq_queue)
        assert_enqueued(portq_queue, queue_name="emails", payload_subset={"to": "ada@example.com"})
        result = drain(portq_queue, {"emails": send_email})
        assert result.succeeded == 1
        refute_enqueued(portq_queue, queue_name="emails")

The pytest fixtures ``portq_url`` and ``portq_queue`` (:mod:`portq.pytest_plugin`) are
registered by portq's ``pytest11`` entry point: ``portq_queue`` is a migrated Queue on a
fresh SQLite file per test, or on ``PORTQ_TESTING_URL`` when that is set (then the tables
are shared by every test: use distinct queue names).
"""

from __future__ import annotations

import asyncio
import inspect
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from portq.errors import ConfigurationError, Permanent
from portq.handler import HandlerRunner
from portq.job import Job, JobRecord, State
from portq.queue import Queue, validate_queue
from portq.runtime.middleware import Middleware
from portq.worker import RetryAfter

Handler = Callable[[Job], Any]
PAGE = 500


def contains(value: Any, subset: Any) -> bool:
    """True when ``subset`` is part of ``value``: every key of a dict subset is in the dict
    with a matching value (recursively); any other value must be equal."""
    if isinstance(subset, Mapping):
        return isinstance(value, Mapping) and all(
            k in value and contains(value[k], v) for k, v in subset.items())
    return bool(value == subset)


def enqueued(queue: Queue, *, queue_name: str | None = None, payload_subset: Any = None,
             key: str | None = None) -> list[JobRecord]:
    """Ready jobs (due or scheduled) of ``queue_name`` (None: every queue) whose payload
    contains ``payload_subset`` and whose key is ``key`` (when given), oldest first."""
    if queue_name is not None:
        validate_queue(queue_name)
    found: list[JobRecord] = []
    after = 0
    while page := queue.jobs(State.READY, queue=queue_name, limit=PAGE, after_id=after):
        found += [j for j in page if (payload_subset is None or
                                      contains(j.payload, payload_subset))
                  and (key is None or j.key == key)]
        after = page[-1].id
    return found


def assert_enqueued(queue: Queue, *, queue_name: str | None = None,
                    payload_subset: Any = None, key: str | None = None,
                    count: int | None = None) -> list[JobRecord]:
    """Assert that a ready job matches (exactly ``count`` of them, when given); return the
    matching jobs. The failure message lists what is enqueued instead."""
    found = enqueued(queue, queue_name=queue_name, payload_subset=payload_subset, key=key)
    if (count is None and not found) or (count is not None and len(found) != count):
        want = "a job" if count is None else f"{count} job(s)"
        raise AssertionError(
            f"expected {want} enqueued{_describe(queue_name, payload_subset, key)}, found "
            f"{len(found)}; ready jobs{_in(queue_name)}: {_listing(queue, queue_name)}")
    return found


def refute_enqueued(queue: Queue, *, queue_name: str | None = None,
                    payload_subset: Any = None, key: str | None = None) -> None:
    """Assert that no ready job matches."""
    found = enqueued(queue, queue_name=queue_name, payload_subset=payload_subset, key=key)
    if found:
        raise AssertionError(
            f"expected no job enqueued{_describe(queue_name, payload_subset, key)}, found "
            f"{len(found)}: {[(j.id, j.queue, j.payload) for j in found[:10]]}")


def _describe(queue_name: str | None, payload_subset: Any, key: str | None) -> str:
    parts = [f"in queue {queue_name!r}" if queue_name else "",
             f"with payload containing {payload_subset!r}" if payload_subset is not None
             else "", f"with key {key!r}" if key else ""]
    return "".join(f" {p}" for p in parts if p)


def _in(queue_name: str | None) -> str:
    return f" in {queue_name!r}" if queue_name else ""


def _listing(queue: Queue, queue_name: str | None) -> str:
    jobs = queue.jobs(State.READY, queue=queue_name, limit=11)
    text = ", ".join(f"#{j.id} {j.queue} {j.payload!r}" for j in jobs[:10])
    return (text or "none") + (", ..." if len(jobs) > 10 else "")


@dataclass
class DrainResult:
    """What :func:`drain` did: outcomes counted, and each failure's ``(job id, error)``."""

    succeeded: int = 0
    retried: int = 0
    dead: int = 0
    lost: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)

    @property
    def ran(self) -> int:
        return self.succeeded + self.retried + self.dead + self.lost


def drain(queue: Queue, handler_or_tasks: Handler | Mapping[str, Handler], *,
          queues: Sequence[str] | str | None = None, max_jobs: int = 10_000,
          raise_errors: bool = False, lease: float = 300.0,
          worker_id: str = "portq-testing",
          middleware: Sequence[Middleware] | None = None) -> DrainResult:
    """Claim and run jobs one at a time, in this thread, until no due job is ready.

    ``handler_or_tasks`` is one handler for every queue, or a mapping of queue name to
    handler (which also names the queues to drain). ``queues`` narrows them; by default a
    single handler drains every queue with ready jobs. Outcomes are the worker's: a return
    value is stored as the result (not None), :class:`~portq.Permanent` sends the job to
    dead, :class:`~portq.RetryAfter` and other exceptions retry after the queue's backoff
    (a retry in the future is not run again by this drain). ``raise_errors`` re-raises a
    handler's exception once its failure is recorded. ``max_jobs`` bounds a handler that keeps
    enqueueing (a :class:`ConfigurationError` past it). ``middleware`` (and the queue's,
    :meth:`portq.Queue.add_middleware`) runs around each handler as a worker runs it, with
    the task's own for a :class:`~portq.tasks.TaskRouter`; progress reports are then written
    as a worker writes them.
    """
    handlers = dict(handler_or_tasks) if isinstance(handler_or_tasks, Mapping) else {}
    if not handlers and not callable(handler_or_tasks):
        raise ConfigurationError("drain needs a handler or a mapping of queue to handler")
    names = [queues] if isinstance(queues, str) else list(queues or handlers)
    result = DrainResult()
    runners: dict[int, HandlerRunner] = {}
    try:
        return _drain(queue, handlers, handler_or_tasks, names, result, runners, middleware,
                      max_jobs=max_jobs, raise_errors=raise_errors, lease=lease,
                      worker_id=worker_id)
    finally:
        for runner in runners.values():
            runner.close_thread()


def _drain(queue: Queue, handlers: dict[str, Handler],
           handler_or_tasks: Handler | Mapping[str, Handler], names: list[str],
           result: DrainResult, runners: dict[int, HandlerRunner],
           middleware: Sequence[Middleware] | None, *, max_jobs: int, raise_errors: bool,
           lease: float, worker_id: str) -> DrainResult:
    while True:
        pending = names or sorted(s.queue for s in queue.stats() if s.ready)
        claimed = 0
        for name in pending:
            handler = handlers.get(name) if handlers else cast(Handler, handler_or_tasks)
            if handler is None:
                raise ConfigurationError(f"drain has no handler for queue {name!r}")
            for job in queue.claim(name, worker_id, limit=1, lease=lease):
                claimed += 1
                if result.ran >= max_jobs:
                    queue.release(job)
                    raise ConfigurationError(f"drain ran max_jobs={max_jobs} jobs and the "
                                             "queues still hold ready jobs")
                if _has_middleware(handler, middleware, queue):
                    runner = runners.get(id(handler))
                    if runner is None:
                        runner = runners[id(handler)] = HandlerRunner(handler, middleware,
                                                                      queue=queue)
                    handler = runner.run
                _run_one(queue, job, handler, result, raise_errors)
        if not claimed:
            return result


def _has_middleware(handler: Handler, middleware: Sequence[Middleware] | None,
                    queue: Queue) -> bool:
    """Whether any middleware would run around ``handler`` (else it is called plainly)."""
    tasks = getattr(handler, "tasks", None) if hasattr(handler, "middleware_for") else None
    return bool(middleware or queue.middleware or
                (isinstance(tasks, Mapping) and any(getattr(t, "middleware", ())
                                                    for t in tasks.values())))


def _run_one(queue: Queue, job: Job, handler: Handler, result: DrainResult,
             raise_errors: bool) -> None:
    """Run one claimed job and record its outcome, as a worker would."""
    try:
        value = handler(job)
        if inspect.isawaitable(value):
            value = asyncio.run(_awaited(value))
        ok = value is None or queue.store_result(job, value)
        ok = ok and queue.complete(job)
        result.succeeded += ok
        result.lost += not ok
        return
    except Permanent as exc:  # a ResultError too
        failure: Exception = exc
        error, retry_in = f"{type(exc).__name__}: {exc}", None
    except RetryAfter as exc:
        failure, error, retry_in = exc, str(exc), max(0.0, exc.delay)
    except Exception as exc:  # noqa: BLE001 - a handler may raise anything
        failure = exc
        error = "".join(traceback.format_exception(exc, limit=8))[-4000:]
        retry_in = queue.backoff.delay(job.attempt)
    if not queue.fail(job, error, retry_in=retry_in):
        result.lost += 1
    elif retry_in is None or job.attempt >= job.max_attempts:
        result.dead += 1
    else:
        result.retried += 1
    result.errors.append((job.id, error))
    if raise_errors:
        raise failure


async def _awaited(value: Any) -> Any:
    return await value
