"""Operator commands as an operator types them, on every reachable engine: positional
QUEUE after options, typo-safe pause/resume/limit, a --burst worker on a paused queue,
the scheduled view, a job's result, errors on stderr, one name for the running limit, and
no empty SQLite file from a mistyped path. Plus the Python API's errors for a mistyped
enqueue option and timedelta durations."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import portq
from portq.conformance.helpers import run_portq
from portq.conformance.plugin import TEST_PREFIX

P = ["--prefix", TEST_PREFIX]


def test_queue_commands_take_the_queue_after_options(engine_url: str, queue: Any,
                                                     qname: str) -> None:
    queue.enqueue(qname, 1)
    out = run_portq("pause", engine_url, *P, qname).stdout
    assert out.startswith(f"paused {qname}") and qname in queue.paused_queues()
    run_portq("resume", engine_url, "--prefix", TEST_PREFIX, qname)
    assert qname not in queue.paused_queues()
    run_portq("limit", engine_url, *P, qname, "--running", "3")
    run_portq("limit", engine_url, "--running", "none", *P, qname, "--rate", "5/1s")
    stats = {s.queue: s for s in queue.stats(qname)}[qname]
    assert (stats.concurrency_limit, stats.rate_limit) == (None, 5)
    job_id = queue.enqueue(qname, 2)
    shown = run_portq("job", engine_url, *P, str(job_id)).stdout
    assert f"id           {job_id}" in shown


def test_a_mistyped_queue_is_refused_without_create(engine_url: str, queue: Any,
                                                    qname: str) -> None:
    typo = qname + "-typo"
    for command, extra in (("pause", []), ("resume", []), ("limit", ["--running", "2"])):
        proc = run_portq(command, engine_url, *P, typo, *extra, check=False)
        assert proc.returncode == 2 and proc.stdout == "", command
        assert f"queue {typo!r} has no jobs and no settings" in proc.stderr
        assert "--create" in proc.stderr and "Traceback" not in proc.stderr
    assert typo not in queue.paused_queues()
    run_portq("pause", engine_url, *P, "--create", typo)
    assert typo in queue.paused_queues()
    run_portq("resume", engine_url, *P, typo)   # paused: it has a setting, so it is known
    run_portq("limit", engine_url, *P, "--create", typo, "--running", "2")


def test_a_burst_worker_says_its_queue_is_paused(engine_url: str, queue: Any, qname: str,
                                                 tmp_path: Path) -> None:
    (tmp_path / "noop_handler.py").write_text("def handle(job):\n    return None\n")
    queue.enqueue(qname, 1)
    queue.pause(qname)
    proc = run_portq("worker", engine_url, *P, "--queue", qname, "--burst", "--handler",
                     "noop_handler:handle", env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 0
    said = [line for line in proc.stderr.splitlines() if "paused queue" in line]
    assert len(said) == 2 and qname in said[0] and "--burst" in said[1], proc.stderr
    assert queue.stats(qname)[0].ready == 1


def test_scheduled_is_a_view_of_its_own(engine_url: str, queue: Any, qname: str) -> None:
    due = queue.enqueue(qname, "now")
    later = queue.enqueue(qname, "later", delay=timedelta(hours=1))
    soon = queue.enqueue(qname, "soon", delay=600)
    records = queue.jobs("scheduled", queue=qname)
    assert [r.id for r in records] == [soon, later]        # by run_at
    assert all(r.scheduled and r.shown_state == "scheduled" for r in records)
    assert [r.id for r in queue.jobs("scheduled", queue=qname, limit=1, after_id=soon,
                                     after_run_at=records[0].run_at)] == [later]
    listed = {r.id: r.shown_state for r in queue.jobs("ready", queue=qname)}
    assert listed == {due: "ready", later: "scheduled", soon: "scheduled"}
    for order in ("id", "-id", "run_at"):   # every listing order returns text, not bytes
        rows = queue.jobs(None, queue=qname, order=order)
        assert {(r.queue, r.state) for r in rows} == {(qname, "ready")}, order
    assert queue.job(later).shown_state == "scheduled" and not queue.job(due).scheduled
    table = run_portq("jobs", engine_url, *P, "--queue", qname, "--state",
                      "scheduled").stdout.splitlines()
    assert [line.split()[0] for line in table[1:]] == [str(soon), str(later)]
    assert all(line.split()[1] == "scheduled" for line in table[1:])
    data = json.loads(run_portq("job", engine_url, *P, str(soon), "--json").stdout)
    assert data["state"] == "ready" and data["scheduled"] is True
    assert "state        scheduled" in run_portq("job", engine_url, *P, str(soon)).stdout


def test_job_shows_its_result(engine_url: str, queue: Any, qname: str) -> None:
    job_id = queue.enqueue(qname, {"n": 1})
    (job,) = queue.claim(qname, "w", limit=1)
    assert queue.store_result(job, {"total": 42, "ok": True}) and queue.complete(job)
    shown = run_portq("job", engine_url, *P, str(job_id)).stdout
    line = [x for x in shown.splitlines() if x.startswith("result ")]
    assert json.loads(line[0].split(None, 1)[1]) == {"total": 42, "ok": True}
    data = json.loads(run_portq("job", engine_url, *P, str(job_id), "--json").stdout)
    assert data["result"] == {"total": 42, "ok": True}
    pending = queue.enqueue(qname, 2)
    assert "result       -" in run_portq("job", engine_url, *P, str(pending)).stdout


def test_stats_names_the_running_limit_alike_in_text_and_json(engine_url: str, queue: Any,
                                                              qname: str) -> None:
    queue.enqueue(qname, 1)
    queue.set_concurrency_limit(qname, 4)
    text = run_portq("stats", engine_url, *P, "--queue", qname).stdout.splitlines()
    header, row = text[0].split(), text[1].split()
    assert row[header.index("running_limit")] == "4"
    data = json.loads(run_portq("stats", engine_url, *P, "--queue", qname, "--json").stdout)
    assert data[0]["running_limit"] == 4


def test_a_mistyped_sqlite_path_creates_no_file(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    url = f"sqlite:///{missing}"
    for args in (["stats", url], ["jobs", url], ["job", url, "1"], ["workers", url],
                 ["pause", url, "q"], ["enqueue", url, "--queue", "q"],
                 ["dashboard", url, "--port", "1"]):
        proc = run_portq(*args, check=False)
        assert proc.returncode == 2 and f"no SQLite database at {missing}" in proc.stderr, args
        assert not missing.exists(), f"{args[0]} created the file"
    run_portq("migrate", url)
    assert missing.exists()


def test_enqueue_names_a_mistyped_option_and_itself(queue: Any, qname: str) -> None:
    with pytest.raises(portq.ConfigurationError) as caught:
        queue.enqueue(qname, 1, retries=3)
    assert str(caught.value).startswith("enqueue() got an unexpected keyword argument "
                                        "'retries' (did you mean max_attempts?)")
    with pytest.raises(portq.ConfigurationError, match=r"did you mean priority\?"):
        queue.enqueue(qname, 1, priorty=3)
    assert "unique_scope" not in str(caught.value)
    with pytest.raises(portq.ConfigurationError, match=r"unknown fields \['retries'\]"):
        queue.enqueue_many([{"queue": qname, "payload": 1, "retries": 3}])


def test_timedelta_is_accepted_wherever_seconds_are(queue: Any, qname: str) -> None:
    job_id = queue.enqueue(qname, 1, delay=timedelta(minutes=5))
    record = queue.job(job_id)
    assert record.scheduled
    keyed = queue.enqueue(qname, 2, key=f"{qname}-k", unique_for=timedelta(hours=1))
    assert queue.enqueue(qname, 3, key=f"{qname}-k", unique_for=timedelta(hours=1)) == keyed
    now = queue.enqueue(qname + "-now", 4)
    (job,) = queue.claim(qname + "-now", "w", lease=timedelta(seconds=30))
    assert job.id == now and queue.renew(job, timedelta(seconds=60))
    assert queue.fail(job, "boom", retry_in=timedelta(0))
    queue.set_rate_limit(qname, 10, timedelta(seconds=2))
    assert {s.queue: s for s in queue.stats(qname)}[qname].rate_period_s == 2
    assert queue.reap(delay=timedelta(seconds=1)) >= 0
    assert queue.prune(timedelta(days=1)) >= 0
    with pytest.raises(portq.ConfigurationError, match="delay must be >= 0"):
        queue.enqueue(qname, 1, delay=timedelta(seconds=-1))


def test_async_queue_takes_timedelta_like_the_sync_one(engine_url: str, qname: str) -> None:
    import asyncio

    from portq import aio

    async def go() -> None:
        q = await aio.connect(engine_url, prefix=TEST_PREFIX)
        try:
            job_id = await q.enqueue(qname, 1)
            (job,) = await q.claim(qname, "w", lease=timedelta(seconds=30))
            assert job.id == job_id
            assert await q.renew(job, timedelta(minutes=1))
            assert await q.fail(job, "boom", retry_in=timedelta(0))
            with pytest.raises(portq.ConfigurationError, match="did you mean max_attempts"):
                await q.enqueue(qname, 1, retries=2)
        finally:
            await q.close()
    asyncio.run(go())


def test_workers_counts_the_running_jobs_in_the_job_table(engine_url: str, queue: Any,
                                                          qname: str) -> None:
    """The registry row says 0 jobs in hand (its last heartbeat); the job table says 2."""
    from portq.job import WorkerInfo
    wid = f"cli-{qname}"
    queue.backend.beat_worker(WorkerInfo(wid, "host-c", 4321, (qname,), 4, 0), 60_000)
    try:
        queue.enqueue_many([{"queue": qname, "payload": i} for i in range(3)])
        assert len(queue.claim(qname, wid, limit=2)) == 2
        table = run_portq("workers", engine_url, *P).stdout.splitlines()
        header = table[0].split()
        row = next(line.split() for line in table[1:] if line.startswith(wid))
        assert row[header.index("running")] == "2"
        data = json.loads(run_portq("workers", engine_url, *P, "--json").stdout)
        mine = next(w for w in data if w["worker_id"] == wid)
        assert mine["running"] == 2 and mine["jobs_in_hand"] == 0
        assert queue.worker_activity()[wid].running == 2
    finally:
        queue.backend.deregister_worker(wid)
