"""Concurrency limits: at most N running jobs of a queue across every worker process,
enforced in the claim transaction; the rest wait ready and run as slots free. Checked
from the handlers' own start and end times."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import portq
from portq.conformance.helpers import counts, exit_code, run_portq, wait_until
from portq.conformance.test_worker import processes, worker_process
from portq.conformance.worker_handlers import read_records


def most_at_once(spans: Sequence[dict[str, Any]]) -> int:
    """The most handler runs (start, end) that overlapped at any instant."""
    events = sorted([(s["start"], 1) for s in spans] + [(s["end"], -1) for s in spans],
                    key=lambda e: (e[0], e[1]))  # an end before a start at the same time
    peak = now = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def spans_of_workers(engine_url: str, queue: portq.Queue, qname: str, tmp_path: Path,
                     jobs: Sequence[dict[str, Any]], *, processes_n: int, concurrency: int,
                     sleep: float, idle_max: str = "0.2s", timeout: float = 90
                     ) -> list[dict[str, Any]]:
    """Start ``processes_n`` worker processes running the ``span`` handler, enqueue
    ``jobs`` once they all started, wait until every job succeeded, stop them; the handlers'
    records (every job ran exactly once, on two processes at least)."""
    record, log = tmp_path / "record.jsonl", tmp_path / "worker.log"
    with processes() as procs:
        for _ in range(processes_n):
            procs.append(worker_process(engine_url, queue.backend.prefix, qname, "span",
                                        record, log, "--concurrency", str(concurrency),
                                        "--idle-max", idle_max, "--reap-interval", "0s",
                                        sleep=sleep))
        assert wait_until(lambda: log.read_text().count("worker.started") == processes_n,
                          timeout=60)
        ids = queue.enqueue_many(jobs)
        done = wait_until(lambda: counts(queue, qname)["succeeded"] == len(jobs),
                          timeout=timeout)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = [exit_code(proc, log, 30) for proc in procs]
    assert done, (counts(queue, qname), log.read_text()[-3000:])
    spans = read_records(record)
    assert sorted(s["job_id"] for s in spans) == sorted(ids)
    assert len({s["pid"] for s in spans}) >= 2  # the limit held across processes
    assert codes == [0] * processes_n, (codes, log.read_text()[-3000:])
    return spans


def test_claims_stop_at_the_concurrency_limit(queue: portq.Queue, qname: str) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(5)])
    queue.set_concurrency_limit(qname, 2)
    first = queue.claim(qname, "w1", limit=10)
    assert len(first) == 2
    assert queue.claim(qname, "w2", limit=10) == []
    assert queue.complete(first[0])
    assert len(queue.claim(qname, "w2", limit=10)) == 1
    queue.set_concurrency_limit(qname, None)
    assert len(queue.claim(qname, "w3", limit=10)) == 2
    c = counts(queue, qname)
    assert (c["running"], c["ready"]) == (4, 0)


def test_a_limit_of_one_queue_leaves_others_alone(queue: portq.Queue, qname: str) -> None:
    other = f"{qname}-free"
    queue.enqueue_many([{"queue": q, "payload": i} for q in (qname, other) for i in range(3)])
    queue.set_concurrency_limit(qname, 1)
    assert len(queue.claim(qname, "w", limit=10)) == 1
    assert len(queue.claim(other, "w", limit=10)) == 3


def test_bad_limits_are_refused(queue: portq.Queue, qname: str) -> None:
    for bad in (0, -1, "2", True):
        with pytest.raises(portq.ConfigurationError, match="max_running"):
            queue.set_concurrency_limit(qname, bad)  # type: ignore[arg-type]


@pytest.mark.slow
def test_worker_processes_never_exceed_the_queue_limit(
        engine_url: str, queue: portq.Queue, qname: str, tmp_path: Path) -> None:
    """Five worker processes, limit 2: never more than two handlers run at once (their own
    timestamps), though the processes could run five; every job runs once."""
    n, limit = 24, 2
    queue.set_concurrency_limit(qname, limit)
    spans = spans_of_workers(engine_url, queue, qname, tmp_path,
                             [{"queue": qname, "payload": i} for i in range(n)],
                             processes_n=5, concurrency=1, sleep=0.3)
    assert most_at_once(spans) == limit, most_at_once(spans)


def test_portq_limit_sets_and_clears_the_running_limit(
        engine_url: str, queue: portq.Queue, qname: str) -> None:
    """``portq limit URL QUEUE --running N`` sets the limit the claim enforces;
    ``--running none`` clears it; bad values are one-line errors, not tracebacks."""
    prefix = queue.backend.prefix
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(4)])
    out = run_portq("limit", engine_url, qname, "--running", "1", "--prefix", prefix)
    assert "1 running" in out.stdout
    assert len(queue.claim(qname, "w1", limit=10)) == 1
    run_portq("limit", engine_url, qname, "--running", "none", "--prefix", prefix)
    assert len(queue.claim(qname, "w2", limit=10)) == 3
    for bad in ("0", "-3", "two"):
        proc = run_portq("limit", engine_url, qname, "--running", bad, "--prefix",
                         prefix, check=False)
        assert proc.returncode != 0 and "--running" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    proc = run_portq("limit", engine_url, qname, "--prefix", prefix, check=False)
    assert proc.returncode != 0 and "--running" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
