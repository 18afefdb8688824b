"""Tasks by name: jobs naming registered tasks are dispatched to them by one worker
serving all their queues (``portq worker --app``), in both the sync and async fronts; a
job naming an unknown task goes dead at once with an error naming it."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import portq
from portq import aio, tasks
from portq.conformance.helpers import counts, quiet_worker, run_portq, running, wait_until
from portq.retry import Backoff

APP = '''
import json, os, time
import portq

def record(name, **fields):
    job = portq.current_job()
    with open(os.environ["PORTQT_RECORD"], "a") as f:
        f.write(json.dumps({"task": name, "job_id": job.id, "queue": job.queue,
                            "attempt": job.attempt, "at": time.time(), **fields}) + "\\n")

@portq.task(queue="{qa}", name="{qa}.send", max_attempts=5, priority=3)
def send(to, subject="none"):
    record("send", to=to, subject=subject)

@portq.task(queue="{qb}", name="{qb}.notify")
async def notify(user_id):
    import asyncio
    await asyncio.sleep(0)
    record("notify", user_id=user_id)
'''


@pytest.fixture
def app(tmp_path: Path, qname: str) -> Iterator[tuple[Any, Path, str, str]]:
    """A task module (two tasks, two queues) importable by this process and the CLI."""
    qa, qb = f"{qname}-a", f"{qname}-b"
    module = f"portqt_app_{qname.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(APP.replace("{qa}", qa).replace("{qb}", qb), "utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(module), tmp_path, qa, qb
    finally:
        sys.path.remove(str(tmp_path))
        for name in (f"{qa}.send", f"{qb}.notify"):
            tasks.REGISTRY.pop(name, None)


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()] \
        if path.exists() else []


def test_cli_worker_app_dispatches_each_job_to_its_task(
        engine_url: str, queue: portq.Queue, app: tuple[Any, Path, str, str]) -> None:
    module, cwd, qa, qb = app
    sent = module.send.enqueue("ada@example.com", subject="hi", using=queue)
    notified = module.notify.enqueue(42, using=queue)
    unknown = queue.enqueue(qa, {"task": "gone.task", "args": [], "kwargs": {}})
    assert queue.job(sent).max_attempts == 5 and queue.job(sent).priority == 3  # type: ignore[union-attr]
    log = cwd / "calls.jsonl"
    # --queue narrows: only the first queue's jobs run
    run_portq("worker", engine_url, "--prefix", queue.backend.prefix, "--app", module.__name__,
              "--queue", qa, "--burst", "--reap-interval", "0s", cwd=cwd,
              env={"PORTQT_RECORD": str(log)})
    assert [(r["task"], r["job_id"]) for r in records(log)] == [("send", sent)]
    assert counts(queue, qb)["ready"] == 1
    run_portq("worker", engine_url, "--prefix", queue.backend.prefix, "--app", module.__name__,
              "--burst", "--reap-interval", "0s", cwd=cwd, env={"PORTQT_RECORD": str(log)})
    calls = records(log)
    assert [(r["task"], r["job_id"]) for r in calls] == [("send", sent), ("notify", notified)]
    assert calls[0]["to"] == "ada@example.com" and calls[0]["subject"] == "hi"
    assert calls[1]["user_id"] == 42 and calls[1]["queue"] == qb
    dead = queue.job(unknown)
    assert dead is not None and dead.state == "dead" and dead.attempts == 1
    assert "UnknownTask: unknown task 'gone.task'" in (dead.last_error or "")
    listing = run_portq("jobs", engine_url, "--prefix", queue.backend.prefix, "--state", "dead",
                        "--queue", qa).stdout
    assert str(unknown) in listing and "unknown task 'gone.task'" in listing


def test_cli_worker_refuses_an_app_without_tasks(tmp_path: Path, engine_url: str,
                                                  table_prefix: str) -> None:
    (tmp_path / "portqt_empty_app.py").write_text("X = 1\n", "utf-8")
    proc = run_portq("worker", engine_url, "--prefix", table_prefix, "--app",
                     "portqt_empty_app", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "registers no task" in proc.stderr, proc.stderr
    proc = run_portq("worker", engine_url, "--prefix", table_prefix, "--app", "nope_missing",
                     cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "cannot import app module 'nope_missing'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_sync_worker_routes_both_kinds_of_task(
        queue: portq.Queue, app: tuple[Any, Path, str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    module, cwd, qa, qb = app
    log = cwd / "sync.jsonl"
    monkeypatch.setenv("PORTQT_RECORD", str(log))
    ids = [module.send.enqueue(f"u{i}@x", using=queue) for i in range(3)]
    ids += [module.notify.enqueue(i, using=queue) for i in range(3)]
    router = tasks.TaskRouter({t.name: t for t in (module.send, module.notify)})
    worker = quiet_worker(queue, [qa, qb], router, concurrency=2,
                          backoff=Backoff("fixed", 0.0), idle_min=0.01, idle_max=0.05)
    with running(worker):
        assert wait_until(lambda: counts(queue, qa)["succeeded"] + counts(queue, qb)[
            "succeeded"] == 6, timeout=30)
    assert sorted(r["job_id"] for r in records(log)) == sorted(ids)


def test_async_worker_routes_tasks_deferred_async(
        engine_url: str, queue: portq.Queue, app: tuple[Any, Path, str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    module, cwd, qa, qb = app
    log = cwd / "async.jsonl"
    monkeypatch.setenv("PORTQT_RECORD", str(log))

    async def main() -> list[int]:
        async with await aio.connect(engine_url, prefix=queue.backend.prefix) as aq:
            ids = [await module.notify.defer_async(7, using=aq),
                   await module.send.defer_async("b@x", using=aq)]
            worker = aio.AsyncWorker(aq, [qa, qb], tasks.router(), concurrency=2,
                                     burst=True, idle_min=0.01, idle_max=0.05)
            await asyncio.wait_for(worker.run(), 60)
            return ids

    ids = asyncio.run(main())
    assert sorted(r["job_id"] for r in records(log)) == sorted(ids)
    assert counts(queue, qa)["succeeded"] == counts(queue, qb)["succeeded"] == 1


def test_task_enqueue_needs_a_queue_and_json_arguments(
        queue: portq.Queue, app: tuple[Any, Path, str, str]) -> None:
    module, _, qa, _ = app
    tasks.bind(None)
    with pytest.raises(portq.ConfigurationError, match="no queue to enqueue into"):
        module.send.enqueue("x")
    with pytest.raises(portq.PayloadError):
        module.send.enqueue(object(), using=queue)
    tasks.bind(queue)
    try:
        first = module.send.options(key=f"{qa}-k").enqueue_result("x")
        again = module.send.options(key=f"{qa}-k").enqueue_result("y")
    finally:
        tasks.bind(None)
    assert first.created and not again.created and again.id == first.id
    assert counts(queue, qa)["ready"] == 1
    per_queue = module.send.options(key=f"{qa}-k", unique_per_queue=True)
    scoped = per_queue.enqueue_result("z", using=queue)
    assert scoped.created and not per_queue.enqueue_result("w", using=queue).created


#: every test here runs on both worker fronts (Worker, AsyncWorker): see plugin.FRONTS
WORKER_FRONTS = True
