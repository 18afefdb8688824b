"""Workflows beyond the dependency basics (issue 34): enqueue hooks see every job of a
``portq.workflow``; a completion that makes dependents ready wakes idle workers as an
enqueue does; retrying a dead dependency revives the dependents its failure cancelled."""

from __future__ import annotations

import time
from typing import Any

import pytest

import portq
from portq.conformance.helpers import counts, not_applicable, quiet_worker, running, wait_until
from portq.conformance.plugin import raw_connection
from portq.job import Job


def test_enqueue_hooks_run_for_every_job_of_a_workflow(queue: portq.Queue,
                                                        qname: str) -> None:
    """Before hooks see each job (their meta is stored), after hooks get each id; a hook
    that raises writes nothing; with ``conn=`` the after hooks run before the caller's
    rollback, which leaves no job."""
    from portq.workflow import enqueue, group, job
    before: list[Any] = []
    after: list[tuple[Any, int | None, BaseException | None]] = []

    def tag(view: portq.Enqueueing) -> None:
        if view.payload_json == '"boom"':
            raise ValueError("refused by a hook")
        before.append(view)
        view.meta["step"] = view.payload_json

    def seen(view: portq.Enqueueing) -> None:
        after.append((view.payload_json, view.id, view.error))
    queue.add_enqueue_hook(before=tag, after=seen)
    try:
        flow = group(job(qname, "a"), job(qname, "b")).then(job(qname, "c"))
        written = enqueue(queue, flow)
        assert [v.payload_json for v in before] == ['"a"', '"b"', '"c"']
        assert after == [(p, i, None) for p, i in zip(['"a"', '"b"', '"c"'], written.ids,
                                                       strict=True)]
        for job_id, payload in zip(written.ids, ['"a"', '"b"', '"c"'], strict=True):
            record = queue.job(job_id)
            assert record is not None and record.meta == {"step": payload}
        with pytest.raises(ValueError, match="refused by a hook"):
            enqueue(queue, job(qname, "x").then(job(qname, "boom")))
        assert sum(counts(queue, qname)[s] for s in ("ready", "waiting")) == 3
        after.clear()
        conn = raw_connection(queue)
        try:
            rolled = enqueue(queue, job(qname, "y").then(job(qname, "z")), conn=conn)
            assert [i for _, i, _ in after] == rolled.ids
            conn.rollback()
        finally:
            conn.close()
        assert sum(counts(queue, qname)[s] for s in ("ready", "waiting")) == 3
    finally:
        queue.hooks.before, queue.hooks.after = (), ()


def test_released_dependents_wake_idle_workers(queue: portq.Queue, qname: str) -> None:
    """A 20-step chain alternating between two queues, each run by its own worker that
    polls every 5 s when idle: each completion that makes the next step ready announces it
    to the other queue's worker as an enqueue does (PostgreSQL: NOTIFY in the completing
    transaction; SQLite: the commit its listener sees), so the chain takes far less than 20
    polls. Engines whose workers only poll are skipped."""
    listener = queue.backend.listener([qname])
    if listener is None:
        not_applicable("workers poll; nothing announces new jobs")
    listener.close()
    # the second queue's name is past PostgreSQL's 63-byte channel names: its channel is
    # the hashed one, computed by the completing statement as the listener computes it
    steps, other = 20, f"{qname}-{'b' * 60}"
    from portq.workflow import enqueue, job
    flow = job(qname, 0)
    for i in range(1, steps):
        flow = flow.then(job(other if i % 2 else qname, i))

    def handler(j: Job) -> int:
        return int(j.payload)

    def done() -> int:
        return int(counts(queue, qname)["succeeded"] + counts(queue, other)["succeeded"])
    first = quiet_worker(queue, qname, handler, concurrency=1, idle_min=5.0, idle_max=5.0)
    second = quiet_worker(queue, other, handler, concurrency=1, idle_min=5.0, idle_max=5.0)
    with running(first), running(second):
        time.sleep(0.5)  # both workers idle, in their 5 s sleeps, before the chain exists
        started = time.monotonic()
        enqueue(queue, flow)
        assert wait_until(lambda: done() == steps, timeout=150), done()
        took = time.monotonic() - started
    assert took < 10.0, f"a {steps}-step chain took {took:.1f}s with 5 s idle polls"
    print(f"\n[{queue.backend.engine}] {steps}-step chain over two queues' workers, 5 s "
          f"idle polls: {took:.2f}s")


def _record(queue: portq.Queue, job_id: int) -> tuple[str, str | None]:
    record = queue.job(job_id)
    assert record is not None
    return str(record.state), record.last_error


def _kill(queue: portq.Queue, qname: str, *job_ids: int) -> None:
    """Claim the ready jobs of ``qname`` and fail ``job_ids`` dead (the rest are given
    back ready)."""
    claimed = queue.claim(qname, "w-revive", limit=100, lease=30)
    assert {j.id for j in claimed} >= set(job_ids)
    for j in claimed:
        if j.id in job_ids:
            assert queue.fail(j, "boom", retry_in=None) is True
        else:
            assert queue.release(j) is True


def test_retrying_a_dead_dependency_revives_what_its_failure_cancelled(
        queue: portq.Queue, qname: str) -> None:
    """``retry_dead`` of a dead dependency puts the dependents its failure cancelled back
    to waiting (transitively, reason cleared), and the workflow then runs to the end; a
    dependent an operator cancelled, or one whose other dependency is dead too, stays
    cancelled."""
    a, other = queue.enqueue(qname, "a"), queue.enqueue(qname, "other")
    b = queue.enqueue(qname, "b", depends_on=[a])
    c = queue.enqueue(qname, "c", depends_on=[b])
    by_operator = queue.enqueue(qname, "op", depends_on=[a])
    both = queue.enqueue(qname, "both", depends_on=[a, other])
    assert queue.cancel(by_operator) is True
    _kill(queue, qname, a, other)
    assert _record(queue, b) == ("cancelled", f"cancelled: its dependency, job {a}, ended dead")
    assert _record(queue, c)[0] == "cancelled" and _record(queue, both)[0] == "cancelled"
    assert queue.retry_dead(a) is True
    assert _record(queue, b) == ("waiting", None) and _record(queue, c) == ("waiting", None)
    assert _record(queue, by_operator)[0] == "cancelled"
    assert _record(queue, both)[0] == "cancelled", "revived although its other dependency is dead"
    assert counts(queue, qname)["waiting"] == 2
    order: list[Any] = []

    def handler(j: Job) -> Any:
        order.append(j.payload)
        return j.payload
    worker = quiet_worker(queue, qname, handler, concurrency=2, idle_max=0.05)
    with running(worker):
        assert wait_until(lambda: _record(queue, c)[0] == "succeeded", timeout=60), \
            counts(queue, qname)
    assert order == ["a", "b", "c"]
    assert queue.dependency_results(c) == {b: "b"}
    assert _record(queue, by_operator)[0] == "cancelled" and _record(queue, both)[0] == \
        "cancelled"


def test_retry_many_revives_dependents_and_a_later_failure_cancels_them_again(
        queue: portq.Queue, qname: str) -> None:
    """``retry_many`` (the CLI's and the dashboard's bulk retry) revives as ``retry_dead``
    does, in its batch's transaction; the revived dependents are real dependents again: a
    second failure of the dependency cancels them again, and a second retry revives them
    again. A fan-in whose every failed dependency is retried in one batch waits again."""
    fan = [queue.enqueue(qname, f"f{i}") for i in range(3)]
    callback = queue.enqueue(f"{qname}-cb", "callback", depends_on=fan)
    _kill(queue, qname, fan[0], fan[1])
    assert _record(queue, callback) == (
        "cancelled", f"cancelled: its dependency, job {fan[0]}, ended dead")
    assert queue.retry_many(qname, states=("dead",), limit=10) == 2
    assert _record(queue, callback) == ("waiting", None)
    _kill(queue, qname, fan[0])
    assert _record(queue, callback)[0] == "cancelled"
    assert queue.retry_many(qname, states=("dead",), limit=10) == 1
    assert _record(queue, callback) == ("waiting", None)
    done = queue.claim(qname, "w-revive", limit=10, lease=30)
    assert sorted(j.id for j in done) == fan
    assert queue.complete_many(done) == [True] * 3
    assert _record(queue, callback)[0] == "ready"
