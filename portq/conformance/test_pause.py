"""Pause and resume: a paused queue is persisted in the database; every worker process
stops claiming its jobs within one poll interval, running jobs finish normally, stats
list it as paused, and resume lets the rest run."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

import portq
from portq.conformance.helpers import counts, exit_code, run_portq, wait_until
from portq.conformance.test_worker import processes, wait_for_records, worker_process
from portq.conformance.worker_handlers import read_records


def test_a_paused_queue_claims_nothing_until_resumed(queue: portq.Queue, qname: str) -> None:
    other = f"{qname}-other"
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(3)])
    queue.enqueue(other, "x")
    (running,) = queue.claim(qname, "w", limit=1)
    queue.pause(qname)
    queue.pause(qname)  # idempotent
    assert queue.claim(qname, "w", limit=10) == []
    assert len(queue.claim(other, "w", limit=10)) == 1  # other queues are not affected
    assert queue.renew(running) and queue.complete(running)  # running jobs finish normally
    assert queue.enqueue(qname, "while paused") > 0          # enqueue still works
    (row,) = queue.stats(qname)
    assert row.paused and row.ready == 3 and row.succeeded == 1
    assert qname in queue.paused_queues() and other not in queue.paused_queues()
    queue.resume(qname)
    assert not queue.stats(qname)[0].paused
    assert {j.id for j in queue.claim(qname, "w", limit=10)} >= set(ids[1:])


def test_a_paused_queue_without_jobs_is_listed_by_stats(queue: portq.Queue, qname: str) -> None:
    queue.pause(qname)
    try:
        (row,) = queue.stats(qname)
        assert row.paused and row.ready == 0
        assert qname in {s.queue for s in queue.stats() if s.paused}
    finally:
        queue.resume(qname)
    assert queue.stats(qname) == []


@pytest.mark.slow
def test_pause_reaches_every_worker_process_within_a_poll(
        engine_url: str, queue: portq.Queue, qname: str, tmp_path: Path) -> None:
    """Three worker processes run 0.2 s jobs; after `portq pause` no handler starts later
    than one poll interval plus a claim's round trip (the handler's own timestamps);
    the jobs it left stay ready and run after `portq resume`. 150 jobs are 5 s of work,
    so that jobs are left however long the `portq pause` process takes to start."""
    n = 150
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(n)])
    record, log = tmp_path / "record.jsonl", tmp_path / "worker.log"
    idle_max = 0.5
    with processes() as procs:
        for _ in range(3):
            procs.append(worker_process(engine_url, queue.backend.prefix, qname, "record",
                                        record, log,
                                        "--concurrency", "2", "--idle-max", f"{idle_max}s",
                                        "--reap-interval", "0s", sleep=0.2))
        wait_for_records(record, 6, procs[0], log)
        run_portq("pause", engine_url, qname, "--prefix", queue.backend.prefix)
        paused_at = time.time()
        time.sleep(3 * idle_max + 1.0)
        starts = [r["at"] for r in read_records(record)]
        late = [t - paused_at for t in starts if t > paused_at + idle_max + 0.5]
        assert not late, f"handlers started {late} s after the pause"
        left = counts(queue, qname)
        assert left["ready"] > 0 and left["running"] == 0, left  # running ones finished
        stats = run_portq("stats", engine_url, "--prefix", queue.backend.prefix, "--queue", qname)
        assert "yes" in stats.stdout.splitlines()[-1], stats.stdout
        run_portq("resume", engine_url, qname, "--prefix", queue.backend.prefix)
        assert wait_until(lambda: counts(queue, qname)["succeeded"] == n, timeout=60), \
            counts(queue, qname)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        assert [exit_code(proc, log, 30) for proc in procs] == [0] * len(procs), \
            log.read_text()[-3000:]
    assert sorted(r["job_id"] for r in read_records(record)) == sorted(
        j.id for j in queue.jobs("succeeded", queue=qname, limit=n))


def test_burst_worker_leaves_a_paused_queue_for_later(engine_url: str, queue: portq.Queue,
                                                      qname: str, tmp_path: Path) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(3)])
    run_portq("pause", engine_url, qname, "--prefix", queue.backend.prefix)
    try:
        run_portq("worker", engine_url, "--prefix", queue.backend.prefix, "--queue", qname,
                  "--handler", "portq.conformance.worker_handlers:record", "--burst",
                  "--reap-interval", "0s", env={"PORTQT_RECORD": str(tmp_path / "r.jsonl")},
                  timeout=60)
        assert counts(queue, qname)["ready"] == 3
    finally:
        run_portq("resume", engine_url, qname, "--prefix", queue.backend.prefix)


def test_pause_refuses_a_bad_queue_name(engine_url: str, table_prefix: str) -> None:
    proc = run_portq("pause", engine_url, "no spaces", "--prefix", table_prefix, check=False)
    assert proc.returncode == 2 and "invalid queue name" in proc.stderr
