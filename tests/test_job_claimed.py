"""``Job.claimed`` (the claim path's constructor, which skips the frozen dataclass's
``__init__`` for speed) makes exactly the job ``Job(...)`` makes."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import UTC, datetime

from portq.job import Claim, DependencyReader, Job


def _values() -> dict[str, object]:
    lease = datetime(2026, 1, 1, tzinfo=UTC)
    return dict(id=7, queue="q", payload={"a": 1}, attempt=2, max_attempts=5, key="k",
                priority=3, claim=Claim(7, 2, "w", lease), concurrency_key="tenant",
                start_by=1.5, leased_at=1.0, timeout=30.0, run_at=lease,
                meta={"trace": "x"})


def test_claimed_takes_every_field_job_init_takes() -> None:
    init = [f.name for f in dataclasses.fields(Job) if f.init]
    params = [p for p in inspect.signature(Job.claimed).parameters if p != "deps"]
    assert params == init  # a field added to Job must be added to Job.claimed too


def test_claimed_equals_the_job_init_makes_in_every_field() -> None:
    reader = DependencyReader(lambda job_id: {job_id: "r"})
    fast = Job.claimed(**_values(), deps=reader)  # type: ignore[arg-type]
    slow = Job(**_values())  # type: ignore[arg-type]
    for f in dataclasses.fields(Job):
        if f.name.startswith("_"):
            continue
        assert getattr(fast, f.name) == getattr(slow, f.name), f.name
    names = {f.name for f in dataclasses.fields(Job)}
    assert set(vars(fast)) == names  # every field set on the instance
    assert set(vars(slow)) <= names  # (Job(...) leaves a plain default to the class)
    assert fast == slow
    # per-job state is the job's own, not shared with another job's
    other = Job.claimed(**_values(), deps=reader)  # type: ignore[arg-type]
    assert fast._cancel is not other._cancel and fast._progress is not other._progress
    assert fast.dependency_results() == {7: "r"}
    assert slow.dependency_results() == {}
    fast._cancel.set()
    assert fast.cancelled() and not other.cancelled()
    try:
        fast.id = 8  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("a claimed job must stay frozen")
