"""Workflows beyond the dependency basics (issue 34): enqueue hooks see every job of a
``portq.workflow``; a completion that makes dependents ready wakes idle workers as an
enqueue does; retrying a dead dependency revives the dependents its failure cancelled."""

from __future__ import annotations

import time
from typing import Any

import pytest

import portq
from portq.conformance.helpers import counts, quiet_worker, running, wait_until
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
        pytest.skip(f"{queue.backend.engine}: workers poll; nothing announces new jobs")
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
