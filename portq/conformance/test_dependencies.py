"""Job dependencies (migration 12): a job enqueued with ``depends_on`` waits outside the
ready index until every dependency succeeded, released in the transaction that completes
the last one, exactly once however the dependencies end together; a dependency ending dead
or cancelled cancels it (naming the dependency) or runs it anyway; unknown ids are refused;
results flow to dependents and are kept from pruning while one still needs them; worker
processes killed mid-workflow lose or double-release nothing."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import portq
from portq.backends.dependencies import UnknownDependency
from portq.conformance.helpers import (
    counts,
    exit_code,
    quiet_worker,
    run_portq,
    running,
    wait_until,
)
from portq.conformance.plugin import raw_connection
from portq.conformance.test_worker import processes, wait_for_records, worker_process
from portq.job import Job


def _claim_all(queue: portq.Queue, qname: str, n: int = 100) -> list[Job]:
    return queue.claim(qname, "w-deps", limit=n, lease=30)


def _state(queue: portq.Queue, job_id: int) -> str:
    record = queue.job(job_id)
    assert record is not None
    return str(record.state)


def _edges(queue: portq.Queue, job_ids: list[int]) -> dict[int, tuple[int, int]]:
    """job id -> (deps_left, unresolved edges) read straight from the tables."""
    b = queue.backend
    out = {}
    for job_id in job_ids:
        def go(cur: Any, job_id: int = job_id) -> tuple[int, int]:
            left = b.execute(cur, f"SELECT deps_left FROM {b.prefix}job WHERE job_id = "
                                  ":job_id", {"job_id": job_id}).fetchone()[0]
            open_edges = b.execute(cur, f"SELECT COUNT(*) FROM {b.prefix}job_dep WHERE "
                                        "job_id = :job_id AND resolved = 0",
                                   {"job_id": job_id}).fetchone()[0]
            return int(left), int(open_edges)
        out[job_id] = b.run("edges", go, write=False)
    return out


def test_a_waiting_job_is_not_claimed_and_is_released_by_the_last_dependency(
        queue: portq.Queue, qname: str) -> None:
    a, b = queue.enqueue(qname, "a"), queue.enqueue(qname, "b")
    c = queue.enqueue(qname, "c", depends_on=[a, b])
    assert _state(queue, c) == "waiting"
    stats = counts(queue, qname)
    assert (stats["ready"], stats["waiting"]) == (2, 1)
    assert [r.id for r in queue.jobs("waiting", queue=qname)] == [c]
    first = _claim_all(queue, qname)
    assert sorted(j.id for j in first) == [a, b], "a waiting job was claimed"
    assert queue.complete_many([j for j in first if j.id == a]) == [True]
    assert _state(queue, c) == "waiting" and _edges(queue, [c])[c] == (1, 1)
    assert queue.complete(next(j for j in first if j.id == b)) is True
    assert _state(queue, c) == "ready" and _edges(queue, [c])[c] == (0, 0)
    assert [j.id for j in _claim_all(queue, qname)] == [c]


def test_dependencies_ending_together_release_each_dependent_once(
        queue: portq.Queue, qname: str) -> None:
    """Two dependencies of each dependent completed at the same moment by two writers (two
    transactions, two connections): every dependent is released, each exactly once."""
    pairs = [(queue.enqueue(qname, "a"), queue.enqueue(qname, "b")) for _ in range(15)]
    dependents = [queue.enqueue(f"{qname}-after", i, depends_on=list(p))
                  for i, p in enumerate(pairs)]
    jobs = {j.id: j for j in _claim_all(queue, qname)}
    assert len(jobs) == 30
    lefts = [jobs[a] for a, _ in pairs]
    rights = [jobs[b] for _, b in reversed(pairs)]  # opposite order: contention both ways
    barrier = threading.Barrier(2)
    results: list[list[bool]] = []

    def complete(batch: list[Job]) -> None:
        barrier.wait()
        for job in batch:
            results.append(queue.complete_many([job]))
    threads = [threading.Thread(target=complete, args=(side,)) for side in (lefts, rights)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(r == [True] for r in results) == 30
    assert all(left == (0, 0) for left in _edges(queue, dependents).values())
    claimed = _claim_all(queue, f"{qname}-after")
    assert sorted(j.id for j in claimed) == sorted(dependents)
    assert _claim_all(queue, f"{qname}-after") == []


def test_a_dead_dependency_cancels_its_dependents_naming_it_or_runs_them(
        queue: portq.Queue, qname: str) -> None:
    a = queue.enqueue(qname, "a")
    cancelled = queue.enqueue(qname, "c", depends_on=[a])
    grandchild = queue.enqueue(qname, "g", depends_on=[cancelled])
    runs = queue.enqueue(qname, "r", depends_on=[a], on_dependency_failure="run")
    (job,) = _claim_all(queue, qname)
    assert queue.fail(job, "boom", retry_in=None) is True
    record = queue.job(cancelled)
    assert record is not None and record.state == "cancelled"
    assert record.last_error is not None and f"job {a}, ended dead" in record.last_error
    grand = queue.job(grandchild)
    assert grand is not None and grand.state == "cancelled"
    assert grand.last_error is not None and f"job {cancelled}, ended cancelled" in \
        grand.last_error
    assert _state(queue, runs) == "ready"
    # enqueued after the dependency died: cancelled at once, or ready with "run"
    late = queue.enqueue(qname, "late", depends_on=[a])
    assert _state(queue, late) == "cancelled"
    assert _state(queue, queue.enqueue(qname, "l2", depends_on=[a],
                                       on_dependency_failure="run")) == "ready"


def test_cancel_reap_and_give_back_settle_dependents_too(queue: portq.Queue,
                                                         qname: str) -> None:
    """Every way a dependency can end dead or cancelled settles its dependents: an
    operator's cancel (of a ready job and of a waiting one), and the reaper."""
    a = queue.enqueue(qname, "a")
    b = queue.enqueue(qname, "b", depends_on=[a])
    c = queue.enqueue(qname, "c", depends_on=[b])
    assert queue.cancel(b) is True  # a waiting job can be cancelled
    assert _state(queue, c) == "cancelled"
    assert queue.cancel(a) is True
    spent = queue.enqueue(qname, "s", max_attempts=1)
    after = queue.enqueue(qname, "after", depends_on=[spent])
    (job,) = queue.claim(qname, "w-deps", limit=1, lease=0.2)
    assert job.id == spent
    assert wait_until(lambda: queue.reap(limit=10_000, delay=0) >= 0 and
                      _state(queue, spent) == "dead", timeout=10)
    assert _state(queue, after) == "cancelled"
    assert queue.cancel_many(qname, states=("waiting",)) == 0


def test_unknown_dependencies_are_refused_before_anything_is_written(
        queue: portq.Queue, qname: str) -> None:
    a = queue.enqueue(qname, "a")
    with pytest.raises(UnknownDependency, match=r"depends_on: job \d+ does not exist"):
        queue.enqueue_many([{"queue": qname, "payload": 1},
                            {"queue": qname, "payload": 2, "depends_on": [a, 2**31 - 3]}])
    assert [r.id for r in queue.jobs(None, queue=qname)] == [a]
    for bad in ([0], ["x"], 5, [True]):
        with pytest.raises(portq.ConfigurationError, match="depends_on"):
            queue.enqueue(qname, 1, depends_on=bad)
    with pytest.raises(portq.ConfigurationError, match="on_dependency_failure"):
        queue.enqueue(qname, 1, depends_on=[a], on_dependency_failure="ignore")


def test_a_succeeded_dependency_counts_at_enqueue(queue: portq.Queue, qname: str) -> None:
    a = queue.enqueue(qname, "a")
    assert queue.complete(_claim_all(queue, qname)[0]) is True
    assert _state(queue, queue.enqueue(qname, "b", depends_on=[a, a])) == "ready"


def test_results_flow_to_dependents_and_are_kept_from_pruning(queue: portq.Queue,
                                                             qname: str) -> None:
    a, b = queue.enqueue(qname, "a"), queue.enqueue(qname, "b")
    c = queue.enqueue(qname, "c", depends_on=[a, b])
    for job in _claim_all(queue, qname):
        assert queue.store_result(job, {"from": job.id}) is True
        assert queue.complete(job) is True
    time.sleep(0.05)  # finished before now by the database clock
    assert queue.prune(0, limit=100, queue=qname) == 0, "pruned a result c still needs"
    (job,) = _claim_all(queue, qname)
    assert job.id == c
    assert job.dependency_results() == {a: {"from": a}, b: {"from": b}}
    assert queue.dependency_results(c) == {a: {"from": a}, b: {"from": b}}
    assert queue.complete(job) is True
    time.sleep(0.05)
    assert queue.prune(0, limit=100, queue=qname) == 3


def test_a_worker_runs_a_chain_and_a_fan_in_in_order(queue: portq.Queue,
                                                     qname: str) -> None:
    """The worker's completion paths (batched, and the single writer on SQLite) release
    dependents: a 5-step chain and a 10-job fan-in, each step after its dependencies."""
    chain = [queue.enqueue(qname, "step0")]
    for i in range(1, 5):
        chain.append(queue.enqueue(qname, f"step{i}", depends_on=[chain[-1]]))
    fan = [queue.enqueue(qname, f"f{i}") for i in range(10)]
    callback = queue.enqueue(qname, "callback", depends_on=fan)
    order: list[int] = []

    def handler(job: Job) -> dict[str, int]:
        order.append(job.id)
        return {"n": job.id}
    worker = quiet_worker(queue, qname, handler, concurrency=4, idle_max=0.05)
    with running(worker):
        assert wait_until(lambda: counts(queue, qname)["succeeded"] == 16, timeout=60), \
            counts(queue, qname)
    assert [i for i in order if i in chain] == chain
    assert order.index(callback) > max(order.index(i) for i in fan)
    assert queue.dependency_results(callback) == {i: {"n": i} for i in fan}


def test_killed_worker_processes_lose_and_double_release_nothing(
        queue: portq.Queue, engine_url: str, qname: str, tmp_path: Path) -> None:
    """Worker processes SIGKILLed mid-workflow (a fan-in and a chain), then a rescuer:
    every job succeeds, each dependent started only after all its dependencies finished
    (an early release would start it sooner), and no edge is left unresolved."""
    prefix = queue.backend.prefix
    fan = [queue.enqueue(qname, f"f{i}") for i in range(12)]
    callback = queue.enqueue(qname, "callback", depends_on=fan)
    chain = [queue.enqueue(qname, "c0", depends_on=[callback])]
    for i in range(1, 6):
        chain.append(queue.enqueue(qname, f"c{i}", depends_on=[chain[-1]]))
    deps = {callback: fan, **{c: [p] for p, c in zip([callback, *chain[:-1]], chain, strict=True)}}
    total = len(fan) + 1 + len(chain)
    record, log = tmp_path / "claims.jsonl", tmp_path / "workers.log"
    with processes() as procs:
        for round_ in range(3):
            victim = worker_process(engine_url, prefix, qname, "workflow_step", record, log,
                                    "--concurrency", "3", "--lease", "1s",
                                    "--reap-interval", "200ms", "--reap-delay", "0s",
                                    "--idle-max", "100ms", sleep=0.15)
            procs.append(victim)
            wait_for_records(record, 3 * (round_ + 1), victim, log)
            os.kill(victim.pid, signal.SIGKILL)
            assert victim.wait(10) == -signal.SIGKILL
    rescue_log = tmp_path / "rescuer.log"
    with processes() as procs:
        rescuer = worker_process(engine_url, prefix, qname, "workflow_step",
                                 tmp_path / "rescued.jsonl", rescue_log, "--burst",
                                 "--concurrency", "3", "--reap-interval", "200ms",
                                 "--reap-delay", "0s", "--idle-max", "100ms", "--lease", "30s")
        procs.append(rescuer)
        deadline = time.monotonic() + 120
        while rescuer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert rescuer.poll() == 0, rescue_log.read_text()[-3000:]
        if counts(queue, qname)["succeeded"] < total:  # burst met leases not yet expired
            again = worker_process(engine_url, prefix, qname, "workflow_step",
                                   tmp_path / "again.jsonl", rescue_log, "--burst",
                                   "--reap-interval", "200ms", "--reap-delay", "0s",
                                   "--idle-max", "100ms")
            procs.append(again)
            assert exit_code(again, rescue_log, 120) == 0, rescue_log.read_text()[-3000:]
    assert counts(queue, qname)["succeeded"] == total, counts(queue, qname)
    records = {i: queue.job(i) for i in [*fan, callback, *chain]}
    # both times are their transactions' start (PostgreSQL's now()): a claim whose
    # transaction began just before a completion's, and took its snapshot after that
    # completion committed, rightly claims the released dependent with an earlier time
    # (seen once: 0.7 ms earlier, under CI's load). An early release starts a dependent
    # while its dependency's handler still runs (each sleeps 150 ms), which is far more
    skew = timedelta(milliseconds=50)
    for job_id, needs in deps.items():
        started = records[job_id].first_started_at  # type: ignore[union-attr]
        for dep in needs:
            finished = records[dep].finished_at  # type: ignore[union-attr]
            assert started is not None and finished is not None and \
                started >= finished - skew, \
                f"job {job_id} started at {started}, before its dependency {dep} finished " \
                f"at {finished}"
    assert all(v == (0, 0) for v in _edges(queue, list(deps)).values())
    # the order without clocks: each dependent's handler read every dependency's result,
    # which exists only once that dependency's completion committed
    for job_id, needs in deps.items():
        assert queue.result(job_id) == {"id": job_id, "seen": sorted(needs)}, job_id
    print(f"\n[{queue.backend.engine}] 3 workers SIGKILLed mid-workflow; {total} jobs "
          "succeeded, each after its dependencies")


def test_workflow_helpers_fan_out_fan_in_and_chain_in_one_transaction(
        queue: portq.Queue, qname: str) -> None:
    """group(...).then(callback) and a.then(b).then(c), each step reading the one before;
    a workflow written with the caller's rolled-back transaction leaves no job."""
    from portq.workflow import enqueue, graph, group, job, previous_result
    flow = group(job(qname, 1), job(qname, 2), job(qname, 3)).then(job(qname, "sum"))
    fan = enqueue(queue, flow)
    steps = enqueue(queue, job(qname, "a").then(job(qname, "b")).then(job(qname, "c")))
    assert len(fan.ids) == 4 and fan.last == [fan.ids[3]] and steps.last == [steps.ids[2]]
    assert [n["after"] for n in graph(queue, fan.ids[3])] == [[], [], [], fan.ids[:3]]
    seen: dict[int, Any] = {}

    def handler(j: Job) -> Any:
        if j.id == fan.ids[3]:
            return sum(j.dependency_results().values())
        if j.id in steps.ids:
            seen[j.id] = previous_result(j)
            return f"{seen[j.id]}>{j.payload}"
        return j.payload
    worker = quiet_worker(queue, qname, handler, concurrency=3, idle_max=0.05)
    with running(worker):
        assert wait_until(lambda: counts(queue, qname)["succeeded"] == 7, timeout=60)
    assert queue.result(fan.ids[3]) == 6
    assert queue.result(steps.ids[2]) == "None>a>b>c"
    conn = raw_connection(queue)
    try:
        written = enqueue(queue, job(qname, "x").then(job(qname, "y")), conn=conn)
        assert len(written.ids) == 2
        conn.rollback()
    finally:
        conn.close()
    assert counts(queue, qname)["waiting"] == 0 and counts(queue, qname)["ready"] == 0


def test_cli_enqueue_depends_on_and_workflow_shows_the_graph(
        queue: portq.Queue, engine_url: str, qname: str) -> None:
    """``portq enqueue --depends-on 3,4`` and ``portq workflow URL ID``."""
    prefix = queue.backend.prefix
    a, b = queue.enqueue(qname, "a"), queue.enqueue(qname, "b")
    out = run_portq("enqueue", engine_url, "--prefix", prefix, "--queue", qname,
                    "--depends-on", f"{a},{b}", "--json").stdout
    c = json.loads(out)["id"]
    assert _state(queue, c) == "waiting"
    nodes = json.loads(run_portq("workflow", engine_url, str(a), "--prefix", prefix,
                                 "--json").stdout)
    assert [(n["id"], n["state"], n["after"]) for n in nodes] == \
        [(a, "ready", []), (b, "ready", []), (c, "waiting", [a, b])]
    text = run_portq("workflow", engine_url, str(c), "--prefix", prefix).stdout
    assert "waiting" in text and f"{a},{b}" in text
    # an id that no job has, and that no job depends on: an error, as `portq job` gives
    missing = run_portq("workflow", engine_url, str(c + 10**9), "--prefix", prefix,
                        check=False)
    assert missing.returncode == 1 and missing.stdout == ""
    assert f"no such job {c + 10**9}" in missing.stderr, missing.stderr
    bad = run_portq("enqueue", engine_url, "--prefix", prefix, "--queue", qname,
                    "--depends-on", "x,1", check=False)
    assert bad.returncode == 2 and "--depends-on 'x,1' must be job ids" in bad.stderr
