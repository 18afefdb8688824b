"""What jobs carry for observability (migration 11): meta written at enqueue by enqueue
hooks and returned by the claim, and progress written only by the job's owner."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import portq
from portq.aio import AsyncQueue
from portq.conformance.helpers import OTHER_OWNER, take_away


@pytest.fixture
def queue(own_queue: portq.Queue) -> portq.Queue:
    """This module's tests add hooks and middleware: each gets a Queue of its own."""
    return own_queue


def test_enqueue_hooks_store_meta_that_the_claim_returns(queue: portq.Queue,
                                                         qname: str) -> None:
    seen: list[tuple[str, Any, Any, Any]] = []

    def before(job: portq.Enqueueing) -> None:
        job.meta["tenant"] = f"t-{job.payload['n']}"
        job.meta["note"] = "é ✓"  # stored as ASCII JSON escapes, read back as text

    def after(job: portq.Enqueueing) -> None:
        seen.append(("after", job.id, job.created, job.error))

    queue.add_enqueue_hook(before=before, after=after)
    first = queue.enqueue(qname, {"n": 1}, key=f"{qname}-k")
    again = queue.enqueue_result(qname, {"n": 2}, key=f"{qname}-k")
    many = queue.enqueue_many([{"queue": qname, "payload": {"n": 3}},
                               {"queue": qname, "payload": {"n": 4}}])
    assert seen == [("after", first, True, None), ("after", first, False, None),
                    ("after", many[0], True, None), ("after", many[1], True, None)]
    assert again.id == first and not again.created
    jobs = {j.id: j for j in queue.claim(qname, "w1", limit=10)}
    assert set(jobs) == {first, *many}
    assert jobs[first].meta == {"tenant": "t-1", "note": "é ✓"}
    assert jobs[many[1]].meta["tenant"] == "t-4"
    assert jobs[first].run_at is not None
    record = queue.job(first)
    assert record is not None and record.meta == {"tenant": "t-1", "note": "é ✓"}


def test_async_enqueue_runs_the_same_hooks(queue: portq.Queue, qname: str) -> None:
    seen: list[int | None] = []
    queue.add_enqueue_hook(before=lambda job: job.meta.update(origin="async"),
                           after=lambda job: seen.append(job.id))

    async def go() -> list[int]:
        aq = AsyncQueue(queue)
        await aq.open()
        try:
            return [await aq.enqueue(qname, 1),
                    *await aq.enqueue_many([{"queue": qname, "payload": 2}])]
        finally:
            await aq.close(queue=False)  # the fixture's queue stays open
    ids = asyncio.run(go())
    assert seen == ids
    assert all(j.meta == {"origin": "async"} for j in queue.claim(qname, "w1", limit=5))


def test_a_hook_that_raises_aborts_the_enqueue_and_bad_meta_is_refused(
        queue: portq.Queue, qname: str) -> None:
    errors: list[BaseException | None] = []

    def veto(job: portq.Enqueueing) -> None:
        if job.payload == "no":
            raise PermissionError("tenant is read-only")
        if job.payload == "big":
            job.meta["blob"] = "x" * 5000
        if job.payload == "number":
            job.meta["n"] = 1  # type: ignore[assignment]

    queue.add_enqueue_hook(before=veto, after=lambda job: errors.append(job.error))
    with pytest.raises(PermissionError):
        queue.enqueue(qname, "no")
    with pytest.raises(portq.ConfigurationError, match="at most 4000"):
        queue.enqueue(qname, "big")
    with pytest.raises(portq.ConfigurationError, match="strings to strings"):
        queue.enqueue(qname, "number")
    assert queue.jobs(queue=qname) == [] and errors == []


def test_progress_write_is_fenced(queue: portq.Queue, qname: str) -> None:
    """Only the claim that owns a running job writes its progress; a stale owner cannot."""
    job_id = queue.enqueue(qname, None)
    (job,) = queue.claim(qname, "w1", limit=1)
    assert queue.set_progress(job, 0.25, "a quarter")
    record = queue.job(job_id)
    assert record is not None
    assert (record.progress, record.progress_note) == (0.25, "a quarter")
    assert record.progress_at is not None
    assert queue.set_progress(job, None, "")  # no fraction, no note: cleared
    cleared = queue.job(job_id)
    assert cleared is not None and (cleared.progress, cleared.progress_note) == (None, None)
    take_away(queue, job_id)
    assert not queue.set_progress(job, 0.9, "stale")
    listed = queue.jobs(queue=qname)[0]
    assert listed.worker_id == OTHER_OWNER and listed.progress is None
    assert queue.complete(job) is False


@pytest.mark.parametrize("fraction", [-0.1, 1.5, float("nan"), True, "0.5"])
def test_progress_refuses_a_fraction_outside_0_to_1(queue: portq.Queue, qname: str,
                                                    fraction: Any) -> None:
    queue.enqueue(qname, None)
    (job,) = queue.claim(qname, "w1", limit=1)
    with pytest.raises(portq.ConfigurationError, match="from 0 to 1"):
        job.progress(fraction, "x")
    with pytest.raises(portq.ConfigurationError, match="from 0 to 1"):
        queue.set_progress(job, fraction, "x")


def test_a_long_progress_note_is_cut(queue: portq.Queue, qname: str) -> None:
    job_id = queue.enqueue(qname, None)
    (job,) = queue.claim(qname, "w1", limit=1)
    assert queue.set_progress(job, 1, "ü" * 500)
    record = queue.job(job_id)
    assert record is not None and record.progress == 1.0
    assert record.progress_note == "ü" * 199 + "…"
