"""`portq worker --middleware` and `--otel` as real processes, on both fronts: the worker
process continues the trace of a job enqueued by this one (the context travels in the
job's meta), on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import portq
from portq.conformance.helpers import run_portq
from portq.conformance.plugin import TEST_PREFIX

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider

from portq.contrib import otel

MODULE = '''
import json, os
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


class FileExporter(SpanExporter):
    def export(self, spans):
        with open(os.environ["SPANS_FILE"], "a") as f:
            for s in spans:
                f.write(json.dumps({"name": s.name, "kind": s.kind.name,
                                    "trace_id": format(s.context.trace_id, "032x"),
                                    "parent": None if s.parent is None
                                    else format(s.parent.span_id, "016x"),
                                    "attributes": dict(s.attributes)}) + "\\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
trace.set_tracer_provider(provider)


def stamp(job, call_next):
    return {"by": "middleware", "inner": call_next()}


async def astamp(job, call_next):
    return {"async": await call_next()}


def handle(job):
    return job.payload * 2
'''


@pytest.mark.parametrize("front", ["threads", "asyncio"])
def test_worker_middleware_and_otel_from_the_command_line(engine_url: str, qname: str,
                                                          tmp_path: Path, front: str) -> None:
    (tmp_path / "obs_app.py").write_text(MODULE, encoding="utf-8")
    spans_file = tmp_path / "spans.jsonl"
    with portq.connect(engine_url, prefix=TEST_PREFIX) as q:
        provider = TracerProvider()
        otel.instrument(q, tracer_provider=provider)
        with provider.get_tracer("test").start_as_current_span("request") as request:
            job_id = q.enqueue(qname, 21)
        run_portq("worker", "--prefix", TEST_PREFIX, "--queue", qname,
                  "--handler", "obs_app:handle", "--middleware", "obs_app:stamp",
                  "--middleware", "obs_app:astamp", "--otel", "--burst",
                  *(["--asyncio"] if front == "asyncio" else []),
                  env={"PORTQ_URL": engine_url, "SPANS_FILE": str(spans_file),
                       "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
                  cwd=tmp_path)
        assert q.result(job_id) == {"by": "middleware", "inner": {"async": 42}}
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    (consumer,) = [s for s in spans if s["kind"] == "CONSUMER"]
    assert consumer["name"] == f"process {qname}"
    assert consumer["trace_id"] == format(request.get_span_context().trace_id, "032x")
    assert consumer["attributes"]["messaging.message.id"] == str(job_id)
    assert consumer["attributes"]["messaging.portq.outcome"] == "succeeded"


def test_a_bad_middleware_spec_is_one_line_exit_2(engine_url: str, qname: str) -> None:
    proc = run_portq("worker", "--prefix", TEST_PREFIX, "--queue", qname, "--handler",
                     "json:dumps", "--middleware", "no-colon", "--burst",
                     env={"PORTQ_URL": engine_url}, check=False)
    assert proc.returncode == 2
    assert "middleware 'no-colon' must look like module:function" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
