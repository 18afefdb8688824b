"""portq.contrib.otel on real engines and both worker fronts, read back from
opentelemetry-sdk's in-memory exporter."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

import portq
from portq.aio import AsyncQueue
from portq.conformance.helpers import quiet_worker
from portq.contrib import otel
from portq.job import Job
from portq.retry import Backoff

#: every test here runs on both worker fronts (Worker, AsyncWorker)
WORKER_FRONTS = True


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


@pytest.fixture
def queue(own_queue: portq.Queue) -> portq.Queue:
    """This module's tests add hooks and middleware: each gets a Queue of its own."""
    return own_queue


def by_kind(exporter: InMemorySpanExporter, kind: SpanKind) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind == kind]


def test_consumer_spans_continue_the_enqueuers_trace_one_per_attempt(
        queue: portq.Queue, qname: str,
        spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    otel.instrument(queue, tracer_provider=provider)
    assert otel.instrument(queue, tracer_provider=provider) is otel.instrument(queue)
    tracer = provider.get_tracer("app")

    def handler(job: Job) -> str:
        if job.attempt < 3:
            raise RuntimeError(f"attempt {job.attempt} fails")
        # the handler runs inside the consumer span: its own spans are its children
        with tracer.start_as_current_span("handler work"):
            pass
        return "done"

    with tracer.start_as_current_span("http request") as request:
        job_id = queue.enqueue(qname, {"n": 1}, max_attempts=5)
    trace_id = request.get_span_context().trace_id
    worker = quiet_worker(queue, qname, handler, burst=True,
                          backoff=Backoff("fixed", base=0.0))
    worker.run()
    assert queue.result(job_id) == "done"

    (producer,) = by_kind(exporter, SpanKind.PRODUCER)
    assert producer.name == f"send {qname}"
    assert producer.context.trace_id == trace_id
    assert producer.parent is not None and producer.parent.span_id == \
        request.get_span_context().span_id
    assert producer.attributes is not None
    assert dict(producer.attributes) == {
        "messaging.system": "portq", "messaging.destination.name": qname,
        "messaging.operation.type": "send", "messaging.operation.name": "send",
        "messaging.message.id": str(job_id)}

    consumers = sorted(by_kind(exporter, SpanKind.CONSUMER),
                       key=lambda s: (s.attributes or {})["messaging.portq.attempt"])
    assert [(s.attributes or {})["messaging.portq.attempt"] for s in consumers] == [1, 2, 3]
    assert len({s.context.span_id for s in consumers}) == 3  # a span per attempt
    for span in consumers:
        assert span.name == f"process {qname}"
        assert span.context.trace_id == trace_id  # the enqueuer's trace
        assert span.parent is not None and span.parent.span_id == producer.context.span_id
        attrs = dict(span.attributes or {})
        assert attrs["messaging.system"] == "portq"
        assert attrs["messaging.destination.name"] == qname
        assert attrs["messaging.message.id"] == str(job_id)
        assert attrs["messaging.operation.type"] == "process"
    failed = consumers[:2]
    assert [(s.attributes or {})["messaging.portq.outcome"] for s in consumers] == \
        ["retry", "retry", "succeeded"]
    for span in failed:
        assert span.status.status_code is StatusCode.ERROR
        assert (span.attributes or {})["error.type"] == "builtins.RuntimeError"
        assert [e.name for e in span.events] == ["exception"]
    assert consumers[2].status.status_code is StatusCode.UNSET
    (work,) = [s for s in exporter.get_finished_spans() if s.name == "handler work"]
    assert work.parent is not None and work.parent.span_id == consumers[2].context.span_id


def test_a_dead_job_and_an_async_enqueue_are_traced(
        queue: portq.Queue, qname: str,
        spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    aq = AsyncQueue(queue)
    otel.instrument(aq, tracer_provider=provider)

    async def enqueue() -> int:
        await aq.open()
        try:
            return await aq.enqueue(qname, "refuse")
        finally:
            await aq.close(queue=False)  # the fixture's queue stays open
    job_id = asyncio.run(enqueue())

    async def handler(job: Job) -> None:
        raise portq.Permanent("never")

    quiet_worker(queue, qname, handler, burst=True).run()
    (producer,) = by_kind(exporter, SpanKind.PRODUCER)
    (consumer,) = by_kind(exporter, SpanKind.CONSUMER)
    assert (producer.attributes or {})["messaging.message.id"] == str(job_id)
    assert consumer.context.trace_id == producer.context.trace_id
    assert (consumer.attributes or {})["messaging.portq.outcome"] == "dead"
    assert (consumer.attributes or {})["error.type"] == "portq.errors.Permanent"
    record = queue.job(job_id)
    assert record is not None and record.meta is not None
    assert record.meta["traceparent"].split("-")[1] == \
        format(producer.context.trace_id, "032x")


def test_an_enqueue_that_fails_ends_its_span_with_the_error(
        engine_url: str, qname: str,
        spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    with portq.connect(engine_url, prefix="portqnone_") as unmigrated:
        otel.instrument(unmigrated, tracer_provider=provider)
        with pytest.raises(portq.SchemaMissingError):
            unmigrated.enqueue(qname, 1)
    (producer,) = by_kind(exporter, SpanKind.PRODUCER)
    assert producer.status.status_code is StatusCode.ERROR
    assert (producer.attributes or {})["error.type"] == "portq.errors.SchemaMissingError"
    assert "messaging.message.id" not in (producer.attributes or {})


def test_a_snoozed_attempt_is_no_error_and_the_next_runs_in_the_same_trace(
        queue: portq.Queue, qname: str,
        spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    otel.instrument(queue, tracer_provider=provider)
    calls: list[int] = []

    def handler(job: Job) -> str:
        calls.append(job.attempt)
        if len(calls) == 1:
            raise portq.Snooze(0, "not yet")
        return "done"

    job_id = queue.enqueue(qname, "later")
    quiet_worker(queue, qname, handler, burst=True).run()
    assert queue.result(job_id) == "done" and len(calls) == 2
    (producer,) = by_kind(exporter, SpanKind.PRODUCER)
    consumers = sorted(by_kind(exporter, SpanKind.CONSUMER), key=lambda s: s.start_time or 0)
    assert [(s.attributes or {})["messaging.portq.outcome"] for s in consumers] == \
        ["snoozed", "succeeded"]
    for span in consumers:
        assert span.context.trace_id == producer.context.trace_id
        assert span.status.status_code is StatusCode.UNSET
        assert "error.type" not in (span.attributes or {}) and not span.events
