"""Tasks by name: functions registered with :func:`task`, enqueued by name, dispatched
to by a worker that serves all their queues.

::

    import portq

    @portq.task(queue="emails", max_attempts=5)
    def send_email(to: str, subject: str) -> None: ...

    q = portq.connect(url)
    send_email.enqueue("ada@example.com", subject="hi", using=q)      # or conn=...
    await send_email.defer_async("ada@example.com", subject="hi", using=aq)

    portq.Worker(q, portq.tasks.queues(), portq.tasks.router())  # or: portq worker --app

A task's job payload is ``{"task": name, "args": [...], "kwargs": {...}}``; the name is
``module.qualname`` unless given. :func:`current_job` tells a running task its
:class:`portq.Job`. ``using`` defaults to the queue given to :func:`bind`; ``conn``
writes the job in the caller's open transaction, as :meth:`portq.Queue.enqueue` does.
"""

from __future__ import annotations

import contextvars
import importlib
import inspect
import os
import sys
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from portq.durations import seconds_of
from portq.errors import ConfigurationError, Permanent
from portq.job import EnqueueResult, Job
from portq.queue import (
    CONCURRENCY_OPTIONS,
    UNIQUE_OPTIONS,
    Queue,
    positive_int,
    validate_priority,
    validate_queue,
)
from portq.runtime.middleware import Middleware, Step, steps_of

if TYPE_CHECKING:
    from portq.aio import AsyncQueue

P = ParamSpec("P")
R = TypeVar("R")

#: every task registered in this process, by name
REGISTRY: dict[str, Task[Any, Any]] = {}
_current_job: contextvars.ContextVar[Job] = contextvars.ContextVar("portq_current_job")
_bound: list[Any] = []  # the queue of bind(), if any


#: the job-dependency options of :meth:`portq.Queue.enqueue` a task's options may carry
DEPENDENCY_OPTIONS = ("depends_on", "on_dependency_failure")


class UnknownTask(Permanent):
    """A job names a task this worker does not know (the job goes dead at once)."""


def current_job() -> Job:
    """The :class:`portq.Job` the calling task runs for (inside a task only)."""
    try:
        return _current_job.get()
    except LookupError:
        raise RuntimeError("portq.current_job() is only available inside a running "
                           "task") from None


def bind(queue: Queue | AsyncQueue | None) -> None:
    """Make ``queue`` the default ``using`` of every task's enqueue (None unbinds)."""
    _bound[:] = [] if queue is None else [queue]


@dataclass(frozen=True)
class JobOptions:
    """The job fields of a task's enqueue (its defaults, or :meth:`Task.options`)."""

    queue: str
    priority: int = 0
    max_attempts: int | None = None
    key: str | None = None
    delay: float | None = None
    run_at: datetime | None = None
    #: the longest one attempt may run (seconds, a timedelta or '30s'), or None
    timeout: Any = None
    #: unique_per_queue / unique_for / unique_states / concurrency_key / concurrency_limit
    #: / depends_on / on_dependency_failure
    unique: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Task(Generic[P, R]):
    """A registered function; calling it runs it directly, :meth:`enqueue` makes a job."""

    name: str
    fn: Callable[P, R]
    defaults: JobOptions = field(repr=False)
    #: middleware around this task's function, inside the worker's (``middleware=``)
    middleware: tuple[Step, ...] = field(default=(), repr=False)

    @property
    def queue(self) -> str:
        return self.defaults.queue

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def options(self, *, queue: str | None = None, priority: int | None = None,
                max_attempts: int | None = None, key: str | None = None,
                delay: float | None = None, run_at: datetime | None = None,
                timeout: Any = None, **unique: Any) -> Task[P, R]:
        """This task with other job fields for the next enqueue (key, delay, the
        ``unique_*`` scopes, ``concurrency_key``/``concurrency_limit`` and
        ``depends_on``/``on_dependency_failure`` of :meth:`portq.Queue.enqueue`, ...)."""
        unknown = set(unique) - {*UNIQUE_OPTIONS, *CONCURRENCY_OPTIONS, *DEPENDENCY_OPTIONS}
        if "depends_on" in unique and unique["depends_on"] is not None:
            unique["depends_on"] = tuple(unique["depends_on"])
        if unknown:
            raise ConfigurationError(f"task options: unknown {sorted(unknown)}")
        changes: dict[str, Any] = {k: v for k, v in (
            ("queue", None if queue is None else validate_queue(queue)),
            ("priority", None if priority is None else validate_priority(priority)),
            ("max_attempts", max_attempts), ("key", key), ("delay", delay),
            ("run_at", run_at), ("timeout", timeout),
            ("unique", tuple(sorted(unique.items())) or None))
            if v is not None}
        return replace(self, defaults=replace(self.defaults, **changes))

    def payload(self, args: Iterable[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The job payload naming this task with these arguments."""
        return {"task": self.name, "args": list(args), "kwargs": dict(kwargs)}

    def _spec(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        o = self.defaults
        return {"queue": o.queue, "payload": self.payload(args, kwargs), "priority": o.priority,
                "max_attempts": o.max_attempts, "key": o.key, "delay": o.delay,
                "run_at": o.run_at, "timeout": o.timeout, **dict(o.unique)}

    def enqueue_result(self, *args: Any, conn: Any = None, using: Queue | None = None,
                       **kwargs: Any) -> EnqueueResult:
        """Enqueue a job running this task with ``args``/``kwargs``; whether it is new."""
        queue = _target(using)
        if not isinstance(queue, Queue):
            raise ConfigurationError(f"task {self.name}: enqueue needs a portq.Queue "
                                     f"(use defer_async with an AsyncQueue)")
        return queue.enqueue_result(**self._spec(args, kwargs), conn=conn)

    def enqueue(self, *args: Any, conn: Any = None, using: Queue | None = None,
                **kwargs: Any) -> int:
        """Enqueue a job running this task with ``args``/``kwargs``; its id."""
        return self.enqueue_result(*args, conn=conn, using=using, **kwargs).id

    async def defer_async(self, *args: Any, conn: Any = None,
                          using: AsyncQueue | None = None, **kwargs: Any) -> int:
        """:meth:`enqueue` through a :class:`portq.aio.AsyncQueue`; the job's id."""
        from portq.aio import AsyncQueue
        queue = _target(using)
        if not isinstance(queue, AsyncQueue):
            raise ConfigurationError(f"task {self.name}: defer_async needs a "
                                     f"portq.aio.AsyncQueue (use enqueue with a Queue)")
        return await queue.enqueue(**self._spec(args, kwargs), conn=conn)


def _target(using: Any) -> Any:
    if using is not None:
        return using
    if not _bound:
        raise ConfigurationError("no queue to enqueue into: pass using=queue or call "
                                 "portq.tasks.bind(queue) once")
    return _bound[0]


def task(*, queue: str, name: str | None = None, priority: int = 0,
         max_attempts: int | None = None, timeout: Any = None,
         middleware: Iterable[Middleware] | None = None
         ) -> Callable[[Callable[P, R]], Task[P, R]]:
    """Register a function (``def`` or ``async def``) as a task of ``queue``; ``timeout``
    (seconds, a timedelta or ``'30s'``) is the longest one attempt of its jobs may run;
    ``middleware`` runs around it, inside the worker's (:mod:`portq.runtime.middleware`)."""
    if timeout is not None:
        seconds_of(timeout, "timeout")  # refused now, not at the first enqueue
    defaults = JobOptions(queue=validate_queue(queue), priority=validate_priority(priority),
                          max_attempts=None if max_attempts is None else
                          positive_int(max_attempts, "max_attempts"), timeout=timeout)
    steps = steps_of(middleware, "@portq.task middleware")

    def register(fn: Callable[P, R]) -> Task[P, R]:
        if not callable(fn) or inspect.isgeneratorfunction(fn) or \
                inspect.isasyncgenfunction(fn):
            raise ConfigurationError(f"@portq.task needs a function (def or async def), "
                                     f"got {fn!r}")
        task_name = name or f"{fn.__module__}.{fn.__qualname__}"
        if not isinstance(task_name, str) or not 1 <= len(task_name) <= 200:
            raise ConfigurationError(f"task name {task_name!r} must be 1-200 characters")
        known = REGISTRY.get(task_name)
        if known is not None and _origin(known.fn) != _origin(fn):
            raise ConfigurationError(f"task name {task_name!r} is already registered for "
                                     f"{_origin(known.fn)}")
        registered: Task[P, R] = Task(task_name, fn, defaults, steps)
        REGISTRY[task_name] = registered  # a reloaded module replaces its own tasks
        return registered

    return register


def _origin(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def queues(tasks: Mapping[str, Task[Any, Any]] | None = None) -> list[str]:
    """The queues of ``tasks`` (default: every registered task), sorted."""
    return sorted({t.queue for t in (REGISTRY if tasks is None else tasks).values()})


class TaskRouter:
    """A worker handler that runs the task each job names (see the module docstring).

    A job naming no known task, or with malformed arguments, goes dead at once with an
    :class:`UnknownTask` error; an ``async def`` task is awaited by either worker."""

    def __init__(self, tasks: Mapping[str, Task[Any, Any]] | None = None) -> None:
        self.tasks = REGISTRY if tasks is None else tasks

    def __repr__(self) -> str:
        return f"TaskRouter({sorted(self.tasks)})"

    def middleware_for(self, job: Job) -> tuple[Step, ...]:
        """The middleware of the task ``job`` names (none for an unknown task: its handler
        call then fails, inside the worker's middleware)."""
        name = job.task
        found = None if name is None else self.tasks.get(name)
        return () if found is None else found.middleware

    def resolve(self, job: Job) -> tuple[Task[Any, Any], list[Any], dict[str, Any]]:
        """The task ``job`` names and its arguments; :class:`UnknownTask` otherwise."""
        payload = job.payload
        name = payload.get("task") if isinstance(payload, dict) else None
        if not isinstance(name, str):
            raise UnknownTask(f"job {job.id} names no task: its payload is not "
                              f'{{"task": name, "args": [...], "kwargs": {{...}}}}')
        found = self.tasks.get(name)
        if found is None:
            known = ", ".join(sorted(self.tasks)) or "none"
            raise UnknownTask(f"unknown task {name!r} (job {job.id}, queue {job.queue}); "
                              f"this worker knows: {known}")
        args, kwargs = payload.get("args", []), payload.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise UnknownTask(f"job {job.id} of task {name!r}: args must be a list and "
                              f"kwargs an object")
        return found, args, kwargs

    def __call__(self, job: Job) -> Any:
        found, args, kwargs = self.resolve(job)
        token = _current_job.set(job)
        try:
            result = found.fn(*args, **kwargs)
        finally:
            _current_job.reset(token)
        if inspect.isawaitable(result):
            return _as_job(job, result)  # awaited by the worker, in this job's context
        return result


def router() -> TaskRouter:
    """A :class:`TaskRouter` over every registered task."""
    return TaskRouter()


async def _as_job(job: Job, awaitable: Awaitable[Any]) -> Any:
    _current_job.set(job)  # this coroutine runs in the awaiting task's own context
    return await awaitable


def import_module(module_name: str, what: str) -> Any:
    """Import ``module_name``, from the working directory too; one clear error if not."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {what} module {module_name!r}: "
                                 f"{exc}") from None
    except Exception as exc:  # noqa: BLE001 - the user's module may raise anything on import
        raise ConfigurationError(
            f"{what} module {module_name!r} raised {type(exc).__name__} while importing"
            f"{_where(exc)}: {exc}") from None


def _where(exc: BaseException) -> str:
    """`` at file:line`` of the innermost frame (or the SyntaxError's place) of ``exc``."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" at {exc.filename}:{exc.lineno}"
    frames = traceback.extract_tb(exc.__traceback__)
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def load_app(module_name: str) -> dict[str, Task[Any, Any]]:
    """Import ``module_name`` (from the working directory too) and return the tasks it
    registered; a clear error when it does not import or registers none."""
    before = dict(REGISTRY)
    import_module(module_name, "app")
    added = {n: t for n, t in REGISTRY.items() if before.get(n) is not t}
    of_module = {n: t for n, t in REGISTRY.items()
                 if t.fn.__module__ == module_name or
                 t.fn.__module__.startswith(module_name + ".")}
    found = {**of_module, **added}
    if not found:
        raise ConfigurationError(f"app module {module_name!r} registers no task: decorate "
                                 f"its functions with @portq.task(queue=...)")
    return found
