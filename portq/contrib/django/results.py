"""How a Django task is stored as a portq job, and read back as a ``TaskResult``.

The payload is ``{"task": module path, "args": [...], "kwargs": {...}, "queue": Django
queue name, "run_after": ISO-8601 or None}``; the job's portq queue is
``"<backend alias>:<queue name>"`` (:func:`portq_queue`), so that two TASKS aliases on one
database never share jobs. The times of a result are the database's: ``enqueued_at`` =
the job's ``created_at``, ``started_at`` = when its first attempt started,
``last_attempted_at`` = when its latest attempt started (both set by the claim),
``finished_at`` = ``finished_at``.

A failed attempt's error text (written by :class:`~portq.contrib.django.runner.TaskRunner`)
is a header line naming the exception's class path, then the whole traceback as Django's
immediate backend formats it (:func:`error_text`, :func:`task_error`).
"""

from __future__ import annotations

import builtins
import re
import traceback
from datetime import datetime
from typing import Any

from django.conf import settings
from django.tasks import TaskResult, TaskResultStatus
from django.tasks.base import Task, TaskError
from django.tasks.exceptions import InvalidTask
from django.utils import timezone
from django.utils.module_loading import import_string

from portq import errors as portq_errors
from portq.errors import Permanent
from portq.job import JobError, JobRecord, error_line

STATUS = {"ready": TaskResultStatus.READY, "running": TaskResultStatus.RUNNING,
          # waiting for its dependencies (enqueue(depends_on=...)): not started
          "waiting": TaskResultStatus.READY,
          "succeeded": TaskResultStatus.SUCCESSFUL, "dead": TaskResultStatus.FAILED,
          "cancelled": TaskResultStatus.FAILED}
#: the first line of an error text written by the task runner: ``[django.tasks] <class path>``
HEADER = "[django.tasks] "
#: an error text is cut to this many characters (MySQL's TEXT holds 65,535 bytes): its
#: first HEAD characters and its end are kept, the middle frames replaced by one line
MAX_ERROR_CHARS, HEAD = 16_000, 3_000
CANCELLED = TaskError(exception_class_path="portq.errors.JobCancelled",
                      traceback="portq.errors.JobCancelled: cancelled by an operator\n")


def portq_queue(alias: str, queue_name: str) -> str:
    """The portq queue holding the tasks that backend ``alias`` enqueues to ``queue_name``."""
    return f"{alias}:{queue_name}"


def payload_of(task: Task, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    run_after = task.run_after.isoformat() if task.run_after is not None else None
    return {"task": task.module_path, "args": args, "kwargs": kwargs,
            "queue": task.queue_name, "run_after": run_after}


def is_task_payload(payload: Any) -> bool:
    return isinstance(payload, dict) and isinstance(payload.get("task"), str) and \
        isinstance(payload.get("args"), list) and isinstance(payload.get("kwargs"), dict)


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


def task_of(record: JobRecord, alias: str) -> Task:
    """The task of a stored job as it was enqueued (priority, queue, ``run_after``, the
    backend alias); a stand-in that raises ImportError when called if its path no longer
    names a task (a result must still be readable after the code changed)."""
    payload: dict[str, Any] = record.payload
    queue_name = payload.get("queue")
    run_after = _parse_time(payload.get("run_after"))
    try:
        task = load_task(payload["task"])
    except Permanent as exc:
        return _stand_in(payload["task"], str(exc), priority=record.priority, backend=alias,
                         queue_name=queue_name or "default", run_after=run_after)
    try:
        as_enqueued: Task = task.using(priority=record.priority, queue_name=queue_name,
                                       run_after=run_after, backend=alias)
        return as_enqueued
    except InvalidTask:  # the settings changed since (a queue removed): as declared
        return task


def _stand_in(path: str, reason: str, **fields: Any) -> Task:
    module, _, name = path.rpartition(".")

    def missing(*args: Any, **kwargs: Any) -> Any:
        raise ImportError(reason)
    missing.__module__, missing.__name__, missing.__qualname__ = module, name, name
    task: Task = object.__new__(Task)  # no validation: the function is not a task's
    for key, value in {"func": missing, "takes_context": False, **fields}.items():
        object.__setattr__(task, key, value)
    return task


def _parse_time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def shown(value: datetime | None) -> datetime | None:
    """An aware UTC time as Django shows times: aware, or naive local when USE_TZ=False."""
    if value is None or settings.USE_TZ or timezone.is_naive(value):
        return value
    naive: datetime = timezone.make_naive(value)
    return naive


def result_of(record: JobRecord, alias: str, history: list[JobError], stored: Any,
              task: Task | None = None) -> TaskResult:
    """The ``TaskResult`` of a job row, its failed attempts and its stored result."""
    errors = [task_error(e.error) for e in history]
    if record.state == "cancelled":
        errors.append(CANCELLED)
    payload: dict[str, Any] = record.payload
    result = TaskResult(
        task=task or task_of(record, alias), id=str(record.id), status=STATUS[record.state],
        enqueued_at=shown(record.created_at), started_at=shown(record.first_started_at),
        last_attempted_at=shown(record.started_at), finished_at=shown(record.finished_at),
        args=payload["args"], kwargs=payload["kwargs"], backend=alias, errors=errors,
        worker_ids=worker_ids(record, history, stored))
    if record.state == "succeeded" and isinstance(stored, dict):
        object.__setattr__(result, "_return_value", stored.get("return_value"))
    return result


def worker_ids(record: JobRecord, history: list[JobError], stored: Any) -> list[str]:
    """One worker id per attempt: the failed ones, then the running or succeeded one."""
    ids = [e.worker_id for e in history]
    if record.state == "running" and record.worker_id:
        ids.append(record.worker_id)
    elif record.state == "succeeded" and isinstance(stored, dict) and \
            isinstance(stored.get("worker_id"), str):
        ids.append(stored["worker_id"])
    return ids


def error_text(exc: BaseException) -> str:
    """What a failed attempt stores: the header naming the exception's class (from the
    object, not its message), then the whole traceback, cut in the middle when longer
    than :data:`MAX_ERROR_CHARS`."""
    text = "".join(traceback.format_exception(exc))
    if len(text) > MAX_ERROR_CHARS:
        tail = MAX_ERROR_CHARS - HEAD
        text = (f"{text[:HEAD]}\n[... {len(text) - HEAD - tail} characters of the "
                f"traceback cut ...]\n{text[-tail:]}")
    return f"{HEADER}{class_path(type(exc))}\n{text}"


def class_path(cls: type[BaseException]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def task_error(text: str) -> TaskError:
    """A stored error text as a ``TaskError``. Texts the task runner did not write (a
    lease that expired, a job the worker refused) name a class only in their last line:
    a name portq or Python defines is used, anything else reads ``builtins.Exception``."""
    first, _, rest = text.partition("\n")
    first = re.sub(r"^TaskFailedPermanently: ", "", first)  # the worker's prefix (runner.py)
    if first.startswith(HEADER):
        return TaskError(exception_class_path=first[len(HEADER):].strip(), traceback=rest)
    return TaskError(exception_class_path=_guess_class(text), traceback=text)


def _guess_class(text: str) -> str:
    name = error_line(text).split(":", 1)[0].strip()
    if re.fullmatch(r"[A-Za-z_][\w.]*", name) is None:
        return "builtins.Exception"
    if "." in name:
        return name
    for module in (builtins, portq_errors):
        cls = getattr(module, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            return class_path(cls)
    return "builtins.Exception"
