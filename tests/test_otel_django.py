"""portq.contrib.otel through the Django backend (Django 6, Python >= 3.12): a task enqueued
with ``task.enqueue()`` inside a request's span is run by the backend's worker
(``TaskRunner``, as ``manage.py portq_worker`` runs it) in the same trace, on SQLite
(Django's "default" alias: this module's settings, or the example shop's when
tests/test_django.py configured Django first in the same run)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

if sys.version_info < (3, 12):
    pytest.skip("Django 6 (django.tasks) needs Python >= 3.12", allow_module_level=True)
pytest.importorskip("django.tasks")
pytest.importorskip("opentelemetry.sdk")

import django
from django.conf import settings

DB = Path(tempfile.mkdtemp(prefix="portq-otel-django-")) / "site.sqlite3"
if not settings.configured:
    settings.configure(
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(DB)}},
        TASKS={"default": {"BACKEND": "portq.contrib.django.PortqBackend",
                           "QUEUES": ["default"]}},
        INSTALLED_APPS=["portq.contrib.django"], USE_TZ=True)
    django.setup()

from django.tasks import task  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind  # noqa: E402

import portq  # noqa: E402
from portq.contrib import otel  # noqa: E402
from portq.contrib.django.management.commands._common import portq_backend  # noqa: E402
from portq.contrib.django.runner import TaskRunner  # noqa: E402


@task()
def add(a: int, b: int) -> int:
    return a + b


def test_a_django_task_runs_in_the_trace_that_enqueued_it() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    backend = portq_backend("default")
    backend.queue.migrate()
    otel.instrument_django("default", tracer_provider=provider)
    with provider.get_tracer("app").start_as_current_span("request") as request:
        result: Any = add.enqueue(2, 3)
    worker = portq.Worker(backend.queue, backend.portq_queues(["default"]), TaskRunner(backend),
                          burst=True,
                          reap_interval=None, prune_interval=None, registry_interval=None)
    assert worker.run().succeeded >= 1  # jobs another test left on the queue run too
    result.refresh()
    assert result.return_value == 5
    mine = [s for s in exporter.get_finished_spans()
            if (s.attributes or {}).get("messaging.message.id") == result.id]
    (producer,) = [s for s in mine if s.kind == SpanKind.PRODUCER]
    (consumer,) = [s for s in mine if s.kind == SpanKind.CONSUMER]
    trace_id = request.get_span_context().trace_id
    assert producer.context.trace_id == consumer.context.trace_id == trace_id
    assert consumer.parent is not None and consumer.parent.span_id == producer.context.span_id
    assert (consumer.attributes or {})["messaging.portq.task"] == f"{__name__}.add"
    assert (consumer.attributes or {})["messaging.message.id"] == result.id
    backend.close()
