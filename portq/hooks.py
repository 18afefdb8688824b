"""Enqueue hooks: user code that sees each new job before it is inserted and after.

::

    def add_tenant(job: portq.Enqueueing) -> None:
        job.meta["tenant"] = current_tenant()          # stored with the job

    def audit(job: portq.Enqueueing) -> None:
        if job.error is None:
            log.info("enqueued %s id=%s created=%s", job.queue, job.id, job.created)

    queue.add_enqueue_hook(before=add_tenant, after=audit)

A ``before`` hook runs for each job of an enqueue (``enqueue``, ``enqueue_many``, a task's
``enqueue``, :class:`portq.aio.AsyncQueue`'s, the Django backend's, each job of a
:func:`portq.workflow.enqueue`), in the order hooks
were added, before anything is written: it may add strings to ``job.meta`` (stored with the
job, at most 4000 bytes of JSON, read by the worker as :attr:`portq.Job.meta`), and what it
raises aborts the enqueue. An ``after`` hook runs for each job once the insert returned
(inside the caller's transaction when ``conn`` was given: before its commit), with ``id``
and ``created`` set, or with ``error`` set when the insert raised (then re-raised); after
hooks run in reverse order, so a before/after pair nests like a context manager. What an
after hook raises is logged, not raised: the job is already written.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from portq.errors import ConfigurationError
from portq.job import EnqueueResult
from portq.protocol import NewJob

log = logging.getLogger("portq.queue")

#: most bytes of a job's meta as JSON text (the column's size on every engine)
META_LIMIT = 4000


@dataclass
class Enqueueing:
    """A job being enqueued, as enqueue hooks see it."""

    queue: str
    payload_json: str
    priority: int
    run_at: datetime | None
    key: str | None
    #: strings to store with the job (before hooks add to it)
    meta: dict[str, str] = field(default_factory=dict)
    #: set for after hooks: the job's id and whether it was created (False: its key named
    #: an existing job), or the error the insert raised
    id: int | None = None
    created: bool | None = None
    error: BaseException | None = None
    #: free for hooks to keep state between their before and after calls (e.g. a span)
    scratch: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def payload(self) -> Any:
        return json.loads(self.payload_json)

    @property
    def task(self) -> str | None:
        """The task name the payload gives (``{"task": name, ...}``), or None."""
        payload = self.payload
        name = payload.get("task") if isinstance(payload, dict) else None
        return name if isinstance(name, str) else None


Hook = Callable[[Enqueueing], None]


def meta_json(meta: dict[str, str]) -> str | None:
    """``meta`` as the JSON text stored with a job (None when empty); a
    :class:`ConfigurationError` for anything but strings, or over :data:`META_LIMIT`."""
    if not meta:
        return None
    for k, v in meta.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ConfigurationError(f"job meta must map strings to strings; got "
                                     f"{k!r}: {type(v).__name__}")
    text = json.dumps(meta, separators=(",", ":"), sort_keys=True)  # ASCII: bytes = chars
    if len(text) > META_LIMIT:
        raise ConfigurationError(f"job meta is {len(text)} bytes as JSON; at most "
                                 f"{META_LIMIT} are stored")
    return text


class EnqueueHooks:
    """The hooks of one queue (see the module)."""

    def __init__(self) -> None:
        self.before: tuple[Hook, ...] = ()
        self.after: tuple[Hook, ...] = ()

    def add(self, before: Hook | None = None, after: Hook | None = None) -> None:
        for what, hook in (("before", before), ("after", after)):
            if hook is not None and not callable(hook):
                raise ConfigurationError(f"enqueue hook {what}={hook!r} is not callable")
        if before is None and after is None:
            raise ConfigurationError("add_enqueue_hook needs before= or after= (or both)")
        if before is not None:
            self.before = (*self.before, before)
        if after is not None:
            self.after = (after, *self.after)

    def __bool__(self) -> bool:
        return bool(self.before or self.after)

    def prepare(self, jobs: Sequence[NewJob]) -> tuple[list[NewJob], list[Enqueueing]]:
        """Run the before hooks for each job; the jobs with their meta, and what the after
        hooks will see (nothing to do without hooks)."""
        if not self:
            return list(jobs), []
        seen = [Enqueueing(j.queue, j.payload_json, j.priority, j.run_at, j.key)
                for j in jobs]
        out = []
        for job, view in zip(jobs, seen, strict=True):
            for hook in self.before:
                hook(view)
            out.append(replace(job, meta=meta_json(view.meta)))
        return out, seen

    def finish(self, seen: Sequence[Enqueueing],
               results: Sequence[EnqueueResult] | Sequence[int] | None,
               error: BaseException | None = None) -> None:
        """Run the after hooks for each job with its result (an id alone: ``created``
        stays None) or the insert's error."""
        if not self.after:
            return
        for i, view in enumerate(seen):
            if results is not None:
                result = results[i]
                if isinstance(result, EnqueueResult):
                    view.id, view.created = result.id, result.created
                else:
                    view.id = result
            view.error = error
            for hook in self.after:
                try:
                    hook(view)
                except Exception as exc:  # noqa: BLE001 - the job is written: only log
                    log.warning("enqueue.hook_error queue=%s job_id=%s hook=%s error=%s: %s",
                                view.queue, view.id, getattr(hook, "__qualname__", hook),
                                type(exc).__name__, exc)
