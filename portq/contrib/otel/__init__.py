"""OpenTelemetry tracing for portq (``pip install 'portq[otel]'``: opentelemetry-api only).

::

    import portq
    from portq.contrib import otel

    queue = portq.connect(url)
    otel.instrument(queue)          # before workers are made on it; AsyncQueue too

Every enqueue makes a PRODUCER span (``send <queue>``) whose context is stored with the
job (its ``meta``: ``traceparent``, ``tracestate``, baggage: whatever the global
propagator writes); every execution attempt makes a CONSUMER span (``process <queue>``)
continuing that context, so the attempt is in the trace of the request that enqueued it,
and each retry is a span of its own in the same trace. Attributes follow OpenTelemetry's
messaging conventions: ``messaging.system`` = ``portq``, ``messaging.destination.name`` =
the queue, ``messaging.message.id`` = the job id, ``messaging.operation.type`` /
``.name``; portq's own under ``messaging.portq.*``: ``attempt``, ``max_attempts``,
``task``, ``outcome`` (``succeeded``, ``retry``, ``dead``, ``snoozed``, ``cancelled``, as
the handler ended; the worker's write decides the job's state). A failed attempt's span has
status ERROR, ``error.type`` and the exception recorded; a snoozed one (``portq.Snooze``:
its attempt given back, not a failure) has neither. No SDK or exporter is configured here:
the application's (or ``tracer_provider=``) receives the spans.

The Django backend: :func:`instrument_django` instruments the backend's queue (enqueues
from ``task.enqueue()``) and so ``manage.py portq_worker``'s worker.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from portq.errors import Permanent
from portq.hooks import Enqueueing
from portq.job import Job
from portq.queue import Queue
from portq.runtime.execution import Snooze

SYSTEM = "portq"
_SPAN = "portq.otel.span"
_MARK = "_portq_otel"


def instrument(queue: Any, *, tracer_provider: trace.TracerProvider | None = None
               ) -> Tracing:
    """Trace ``queue``'s enqueues and every job run by workers made on it (a
    :class:`portq.Queue` or :class:`portq.aio.AsyncQueue`; once: a second call returns
    the first's :class:`Tracing`)."""
    sync: Queue = queue if isinstance(queue, Queue) else queue.queue
    done: Tracing | None = getattr(sync, _MARK, None)
    if done is not None:
        return done
    from portq import __version__
    tracing = Tracing(trace.get_tracer("portq", __version__, tracer_provider=tracer_provider))
    sync.add_enqueue_hook(before=tracing.before_enqueue, after=tracing.after_enqueue)
    sync.add_middleware(tracing)
    setattr(sync, _MARK, tracing)
    return tracing


def instrument_django(alias: str = "default", *,
                      tracer_provider: trace.TracerProvider | None = None) -> Tracing:
    """:func:`instrument` the portq queue of Django's task backend ``alias`` (again after
    that backend's ``close()``, which drops its queue)."""
    from django.tasks import task_backends
    return instrument(task_backends[alias].queue, tracer_provider=tracer_provider)


class Tracing:
    """The enqueue hooks and the worker middleware of one instrumented queue."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    # ---- enqueue: a PRODUCER span per job, its context stored with the job --------------

    def before_enqueue(self, job: Enqueueing) -> None:
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM, "messaging.destination.name": job.queue,
            "messaging.operation.type": "send", "messaging.operation.name": "send"}
        task = job.task
        if task is not None:
            attributes["messaging.portq.task"] = task
        span = self.tracer.start_span(f"send {job.queue}", kind=SpanKind.PRODUCER,
                                      attributes=attributes)
        propagate.inject(job.meta, context=trace.set_span_in_context(span))
        job.scratch[_SPAN] = span

    def after_enqueue(self, job: Enqueueing) -> None:
        span: Span | None = job.scratch.pop(_SPAN, None)
        if span is None:
            return
        if job.id is not None:
            span.set_attribute("messaging.message.id", str(job.id))
        if job.error is not None:
            _failed(span, job.error)
        span.end()

    # ---- execution: a CONSUMER span per attempt, continuing the enqueuer's trace --------

    def __call__(self, job: Job, call_next: Callable[[], Any]) -> Any:
        with self._span(job) as span:
            try:
                result = call_next()
            except BaseException as exc:
                _ended(span, job, exc)
                raise
            _ended(span, job, None)
            return result

    async def acall(self, job: Job, call_next: Callable[[], Awaitable[Any]]) -> Any:
        with self._span(job) as span:
            try:
                result = await call_next()
            except BaseException as exc:
                _ended(span, job, exc)
                raise
            _ended(span, job, None)
            return result

    def _span(self, job: Job) -> Any:
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM, "messaging.destination.name": job.queue,
            "messaging.message.id": str(job.id), "messaging.operation.type": "process",
            "messaging.operation.name": "process", "messaging.portq.attempt": job.attempt,
            "messaging.portq.max_attempts": job.max_attempts}
        if job.task is not None:
            attributes["messaging.portq.task"] = job.task
        return self.tracer.start_as_current_span(
            f"process {job.queue}", context=propagate.extract(job.meta),
            kind=SpanKind.CONSUMER, attributes=attributes, record_exception=False,
            set_status_on_exception=False)


def outcome_of(job: Job, exc: BaseException | None) -> str:
    """How the attempt ended, as the handler left it."""
    if job.cancelled():
        return "cancelled"
    if exc is None:
        return "succeeded"
    if isinstance(exc, Snooze):
        return "snoozed"
    if isinstance(exc, Permanent) or job.attempt >= job.max_attempts:
        return "dead"
    return "retry"


def _ended(span: Span, job: Job, exc: BaseException | None) -> None:
    outcome = outcome_of(job, exc)
    span.set_attribute("messaging.portq.outcome", outcome)
    if exc is not None and outcome != "snoozed":
        _failed(span, exc)


def _failed(span: Span, exc: BaseException) -> None:
    span.set_attribute("error.type", f"{type(exc).__module__}.{type(exc).__qualname__}")
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
