"""The handler of ``manage.py portq_worker``: runs the Django task a job names, with
Django's signals and log lines, and reports every outcome the way ``django.tasks`` does.

For each job: ``task_started`` (a ``RUNNING`` result whose times are the database's), the
task in the worker's thread (Django's connections closed around it, as a request's are),
then ``task_finished``: ``SUCCESSFUL`` with the JSON-normalised return value, or, for any
exception the task raises (``SystemExit`` and ``KeyboardInterrupt`` too: they end that
task, never the worker), ``FAILED`` when the job has no attempt left and ``READY`` when
portq retries it. ``task_finished`` is sent when the task has returned or raised, before
the worker records the outcome in the database.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from django.db import close_old_connections
from django.tasks import TaskContext, TaskResult, TaskResultStatus
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from portq.contrib.django.results import (
    error_text,
    is_task_payload,
    load_task,
    result_of,
    shown,
    task_error,
)
from portq.errors import Permanent
from portq.job import Job
from portq.worker import RetryAfter

if TYPE_CHECKING:
    from portq.contrib.django.backend import PortqBackend


class TaskFailed(RetryAfter):
    """A task raised: ``str()`` is the attempt's whole error text (:func:`error_text`),
    which the worker stores as it is; the job is retried after the backend's backoff, or
    dead when its attempts are spent (as every failed attempt is)."""


class TaskFailedPermanently(Permanent):
    """A task raised :class:`portq.Permanent`: no retry, the job is dead at once (the
    worker stores ``"TaskFailedPermanently: " + str()``, which :func:`task_error` reads)."""


class TaskRunner:
    """A portq handler that runs the Django task each job names (``portq_worker``)."""

    def __init__(self, backend: PortqBackend) -> None:
        self.backend = backend

    def __call__(self, job: Job) -> dict[str, Any]:
        if not is_task_payload(job.payload):
            raise Permanent("the job's payload is not a Django task "
                            "({'task': path, 'args': [...], 'kwargs': {...}})")
        task = load_task(job.payload["task"])
        running = self.running(job)
        task_started.send(sender=type(self.backend), task_result=running)
        close_old_connections()
        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=running), *running.args,
                                  **running.kwargs)
            else:
                value = task.call(*running.args, **running.kwargs)
            value = normalize_json(value)  # Django's TypeError when it is not JSON
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: that task failed
            text = error_text(exc)
            permanent = isinstance(exc, Permanent)
            last = permanent or job.attempt >= job.max_attempts
            failed = replace(running, status=TaskResultStatus.FAILED if last
                             else TaskResultStatus.READY,
                             finished_at=shown(timezone.now()) if last else None,
                             errors=[*running.errors, task_error(text)])
            # inside the handler: Django's log line carries the exception
            task_finished.send(sender=type(self.backend), task_result=failed)
            if permanent:
                raise TaskFailedPermanently(text) from None
            raise TaskFailed(self.backend.queue.backoff.delay(job.attempt), text) from None
        finally:
            close_old_connections()
        done = replace(running, status=TaskResultStatus.SUCCESSFUL,
                       finished_at=shown(timezone.now()))
        object.__setattr__(done, "_return_value", value)
        task_finished.send(sender=type(self.backend), task_result=done)
        return {"return_value": value, "worker_id": self.worker_id(job)}

    @staticmethod
    def worker_id(job: Job) -> str:
        return job.claim.worker_id if job.claim else ""

    def running(self, job: Job) -> TaskResult:
        """The job's ``RUNNING`` result (the ``takes_context`` task's ``context``): its
        times as the database recorded them, one worker id per attempt so far."""
        queue = self.backend.queue
        record = queue.job(job.id)
        history = queue.error_history(job.id) if job.attempt > 1 else []
        if record is None:  # deleted meanwhile: nothing to run for
            raise Permanent(f"job {job.id} no longer exists")
        result = result_of(record, self.backend.alias, history, None)
        ids = [e.worker_id for e in history][:job.attempt - 1]
        ids += [""] * (job.attempt - 1 - len(ids)) + [self.worker_id(job)]
        return replace(result, status=TaskResultStatus.RUNNING, worker_ids=ids)
