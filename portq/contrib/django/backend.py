"""The ``django.tasks`` backend: jobs in portq's table, written through Django's connection.

A task becomes one portq job: queue = the task's ``queue_name``, priority = its priority
(Django's -100..100, larger first, is portq's order as is), ``run_at`` = ``run_after``,
payload ``{"task": "<module path>", "args": [...], "kwargs": {...}}``. Enqueueing runs on
Django's connection of the ``database`` alias, so inside ``transaction.atomic()`` the job
is part of that transaction. Everything else (results, the worker, migrations) uses a portq
:class:`~portq.Queue` on the same database, opened lazily from Django's settings (or from
OPTIONS ``url``).

A worker (``manage.py portq_worker``) imports the task named by a job, refuses anything
that is not a ``django.tasks.Task`` at exactly that path, runs it, and stores
``{"return_value", "started_at", "worker_id"}`` as the job's portq result. Failures follow
portq's retries (OPTIONS ``max_attempts``, ``backoff``): between attempts a result reads
``READY``; each failed attempt is one ``TaskError``.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, connections
from django.tasks import TaskContext, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskError
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from portq.backends import backend_for
from portq.errors import ConfigurationError, Permanent, ResultError
from portq.job import Job, JobError, JobRecord
from portq.queue import Queue
from portq.url import LIBPQ_CHOICES, DatabaseURL, host_items, parse_url

#: Django's ``connection.vendor`` -> portq URL scheme (MariaDB's vendor is "mysql")
VENDOR_SCHEMES = {"postgresql": "postgresql", "mysql": "mysql", "sqlite": "sqlite",
                  "oracle": "oracle", "microsoft": "mssql"}
STATUS = {"ready": TaskResultStatus.READY, "running": TaskResultStatus.RUNNING,
          "succeeded": TaskResultStatus.SUCCESSFUL, "dead": TaskResultStatus.FAILED,
          "cancelled": TaskResultStatus.FAILED}
QUEUE_OPTIONS = {"max_attempts", "backoff", "max_payload_bytes", "max_result_bytes"}
OPTIONS = {"database", "url", "prefix", "pool_size"} | QUEUE_OPTIONS


def database_url(alias: str) -> DatabaseURL:
    """The portq URL of Django's database ``alias`` (from ``settings.DATABASES``)."""
    if alias not in settings.DATABASES:
        raise ImproperlyConfigured(f"portq: OPTIONS database {alias!r} is not in DATABASES")
    conn = connections[alias]
    return url_for(conn.vendor, conn.settings_dict, alias)


def url_for(vendor: str, db: dict[str, Any], alias: str = "default") -> DatabaseURL:
    """The portq URL of a Django database of ``vendor`` with settings ``db``."""
    scheme = VENDOR_SCHEMES.get(vendor)
    if scheme is None:
        raise ImproperlyConfigured(
            f"portq: Django database {alias!r} is {vendor!r}; portq supports "
            f"{', '.join(sorted(VENDOR_SCHEMES))} (or give OPTIONS url)")
    if scheme == "sqlite":
        return DatabaseURL(engine="sqlite", scheme="sqlite", database=str(db["NAME"]))
    # HOST "h1,h2" with PORT "5432,5433" (or one port for all) is libpq's host list,
    # which Django hands to psycopg as it is; portq's URL parser checks it the same way
    host_text, port_text = str(db.get("HOST") or "localhost"), str(db.get("PORT") or "")
    hosts, ports = host_text.split(","), port_text.split(",")
    try:
        netloc = ",".join(host_items(host_text, port_text, f"portq: Django database {alias!r}"))
    except ConfigurationError as exc:
        raise ImproperlyConfigured(str(exc)) from None
    options = {k: str(v) for k, v in (db.get("OPTIONS") or {}).items() if k in LIBPQ_CHOICES}
    # engine, scheme, the host list and its options, validated by portq (a single HOST
    # may be a socket directory, which no URL holds: it is taken as it is)
    url = parse_url(f"{scheme}://{netloc if len(hosts) > 1 else 'localhost'}"
                    + ("?" + urlencode(options) if options else ""))
    return DatabaseURL(engine=url.engine, scheme=scheme, host=hosts[0],
                       port=int(ports[0]) if ports[0] else None,
                       username=db.get("USER") or None, password=db.get("PASSWORD") or None,
                       database=str(db["NAME"]) if db.get("NAME") else None,
                       query=url.query, hosts=url.hosts if len(hosts) > 1 else ())


class PortqBackend(BaseTaskBackend):  # type: ignore[misc]
    """``django.tasks`` backend storing tasks as portq jobs (see the module docstring)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = set(self.options) - OPTIONS
        if unknown:
            raise ImproperlyConfigured(f"portq: unknown TASKS[{alias!r}] OPTIONS "
                                       f"{sorted(unknown)}; known: {', '.join(sorted(OPTIONS))}")
        self.database: str = self.options.get("database", "default")
        self._queue: Queue | None = None
        self._lock = threading.Lock()

    @property
    def queue(self) -> Queue:
        """portq's :class:`~portq.Queue` on this backend's database (opened on first use)."""
        with self._lock:
            if self._queue is None:
                url = self.options.get("url")
                backend = backend_for(parse_url(url) if url else database_url(self.database),
                                      prefix=self.options.get("prefix", "portq_"),
                                      pool_size=self.options.get("pool_size", 4))
                self._queue = Queue(backend, **{k: v for k, v in self.options.items()
                                                if k in QUEUE_OPTIONS})
            return self._queue

    @property
    def queue_url(self) -> str:
        """The portq database URL, without its password."""
        return self.queue.url

    def close(self) -> None:
        """Close portq's own connections (Django's are Django's)."""
        with self._lock:
            if self._queue is not None:
                self._queue.close()
                self._queue = None

    # ---- enqueue ------------------------------------------------------------------------

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        run_at = task.run_after
        if run_at is not None and timezone.is_naive(run_at):  # USE_TZ = False: local time
            run_at = timezone.make_aware(run_at)
        payload = {"task": task.module_path, "args": list(args), "kwargs": dict(kwargs)}
        django_conn = connections[self.database]
        django_conn.ensure_connection()
        job_id = self.queue.enqueue(task.queue_name, payload, priority=task.priority,
                                    run_at=run_at, conn=django_conn.connection)
        result = TaskResult(
            task=task, id=str(job_id), status=TaskResultStatus.READY,
            enqueued_at=timezone.now(), started_at=None, last_attempted_at=None,
            finished_at=None, args=list(args), kwargs=dict(kwargs), backend=self.alias,
            errors=[], worker_ids=[])
        task_enqueued.send(type(self), task_result=result)
        return result

    # ---- results ------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult:
        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(f"{result_id!r} is not a portq job id") from None
        record = self.queue.job(job_id) if job_id > 0 else None
        if record is None or not _is_task_payload(record.payload):
            raise TaskResultDoesNotExist(f"no Django task has id {result_id!r}")
        payload: dict[str, Any] = record.payload
        try:
            task = load_task(payload["task"])
        except Permanent as exc:
            raise TaskResultDoesNotExist(f"job {job_id}: {exc}") from None
        history = self.queue.error_history(job_id)
        stored = self.queue.result(job_id) if record.state == "succeeded" else None
        started = _started_at(stored)  # the worker's clock; finished_at is the database's
        if started is not None and record.finished_at is not None:
            started = min(started, record.finished_at)
        result = TaskResult(
            task=task, id=str(job_id), status=STATUS[record.state],
            enqueued_at=_local(record.created_at), started_at=_local(started),
            last_attempted_at=_local(started or (history[-1].failed_at if history else None)),
            finished_at=_local(record.finished_at),
            args=payload["args"], kwargs=payload["kwargs"], backend=self.alias,
            errors=[TaskError(exception_class_path=exception_path(e.error),
                              traceback=e.error) for e in history],
            worker_ids=_worker_ids(record, history, stored))
        if isinstance(stored, dict):
            object.__setattr__(result, "_return_value", stored.get("return_value"))
        return result


def _is_task_payload(payload: Any) -> bool:
    return isinstance(payload, dict) and isinstance(payload.get("task"), str) and \
        isinstance(payload.get("args"), list) and isinstance(payload.get("kwargs"), dict)


def _started_at(stored: Any) -> datetime | None:
    if isinstance(stored, dict) and isinstance(stored.get("started_at"), str):
        return datetime.fromisoformat(stored["started_at"])
    return None


def _local(value: datetime | None) -> datetime | None:
    """An aware UTC time as Django shows times: aware, or naive local when USE_TZ=False."""
    if value is None or settings.USE_TZ:
        return value
    naive: datetime = timezone.make_naive(value)
    return naive


def _worker_ids(record: JobRecord, history: list[JobError], stored: Any) -> list[str]:
    """One worker id per attempt: the failed ones, then the running or succeeded one."""
    ids = [e.worker_id for e in history]
    if record.state == "running" and record.worker_id:
        ids.append(record.worker_id)
    elif isinstance(stored, dict) and isinstance(stored.get("worker_id"), str):
        ids.append(stored["worker_id"])
    return ids


def exception_path(error: str) -> str:
    """The exception class path from the last line of a recorded traceback
    (``myapp.errors.Declined: ...`` or ``ValueError: ...`` for builtins)."""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    name = lines[-1].split(":", 1)[0].strip() if lines else ""
    if not name or " " in name:
        return "builtins.Exception"
    return name if "." in name else f"builtins.{name}"


def load_task(path: str) -> Task:
    """The ``django.tasks.Task`` at ``path``; :class:`~portq.Permanent` naming the problem
    when the path does not import or names anything else (a worker runs only tasks)."""
    try:
        obj = import_string(path)
    except ImportError as exc:
        raise Permanent(f"task {path!r} cannot be imported: {exc}") from None
    if not isinstance(obj, Task) or obj.module_path != path:
        raise Permanent(f"{path!r} is not a django.tasks Task (a function decorated with "
                        "@task); refusing to run it")
    return obj


class TaskRunner:
    """A portq handler that runs the Django task each job names (``portq_worker``)."""

    def __init__(self, backend: PortqBackend) -> None:
        self.backend = backend

    def __call__(self, job: Job) -> dict[str, Any]:
        if not _is_task_payload(job.payload):
            raise Permanent("the job's payload is not a Django task "
                            "({'task': path, 'args': [...], 'kwargs': {...}})")
        task = load_task(job.payload["task"])
        args, kwargs = job.payload["args"], job.payload["kwargs"]
        worker_id = job.claim.worker_id if job.claim else ""
        started = timezone.now()
        close_old_connections()
        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=self._running(job, task, started)),
                                  *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
        finally:
            close_old_connections()
        try:
            value = normalize_json(value)
        except TypeError as exc:
            raise ResultError(f"the return value of {task.module_path} is not JSON: "
                              f"{exc}") from None
        return {"return_value": value, "started_at": started.isoformat(),
                "worker_id": worker_id}

    def _running(self, job: Job, task: Task, started: datetime) -> TaskResult:
        """The TaskResult a ``takes_context`` task sees (``context.attempt`` = portq's)."""
        history = self.backend.queue.error_history(job.id) if job.attempt > 1 else []
        worker_id = job.claim.worker_id if job.claim else ""
        ids = [e.worker_id for e in history][:job.attempt - 1]
        ids += [""] * (job.attempt - 1 - len(ids)) + [worker_id]
        return TaskResult(
            task=task, id=str(job.id), status=TaskResultStatus.RUNNING, enqueued_at=None,
            started_at=started, last_attempted_at=started, finished_at=None,
            args=job.payload["args"], kwargs=job.payload["kwargs"],
            backend=self.backend.alias,
            errors=[TaskError(exception_class_path=exception_path(e.error), traceback=e.error)
                    for e in history], worker_ids=ids)
