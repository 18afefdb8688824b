"""``Job.claimed`` (the claim path's constructor, which skips the frozen dataclass's
``__init__`` for speed) makes exactly the job ``Job(...)`` makes."""

from __future__ import annotations

import dataclasses
import inspect
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from portq.job import Claim, DependencyReader, Job


def _values() -> dict[str, object]:
    lease = datetime(2026, 1, 1, tzinfo=UTC)
    return dict(id=7, queue="q", payload={"a": 1}, attempt=2, max_attempts=5, key="k",
                priority=3, claim=Claim(7, 2, "w", lease), concurrency_key="tenant",
                start_by=1.5, leased_at=1.0, timeout=30.0, run_at=lease,
                meta={"trace": "x"})


def test_claimed_takes_every_field_job_init_takes() -> None:
    init = [f.name for f in dataclasses.fields(Job) if f.init]
    params = [p for p in inspect.signature(Job.claimed).parameters
              if p not in ("deps", "loader")]
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


class CountingLoader:
    """Decodes JSON as a backend does, counting its calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def load_payload(self, value: Any) -> Any:
        self.calls.append("payload")
        return json.loads(value)

    def load_meta(self, value: Any) -> dict[str, str]:
        self.calls.append("meta")
        return {} if value is None else dict(json.loads(value))


def test_a_job_made_with_a_loader_decodes_payload_and_meta_once_on_first_use() -> None:
    """With ``loader`` the row's JSON text is kept and decoded on first use (on the
    handler's thread, not the claim loop's), once; the job then equals the one made from
    decoded values."""
    loader = CountingLoader()
    values = {**_values(), "payload": '{"a": 1}', "meta": '{"trace": "x"}'}
    lazy = Job.claimed(**values, deps=DependencyReader(), loader=loader)  # type: ignore[arg-type]
    assert loader.calls == []
    assert lazy.payload == {"a": 1} and lazy.payload is lazy.payload
    assert lazy.meta == {"trace": "x"}
    assert loader.calls == ["payload", "meta"]
    assert lazy == Job(**_values())  # type: ignore[arg-type]
    assert loader.calls == ["payload", "meta"]
    assert set(vars(lazy)) >= {f.name for f in dataclasses.fields(Job)}
    with pytest.raises(AttributeError):
        lazy.not_a_field  # type: ignore[attr-defined]  # noqa: B018


def test_a_payload_that_is_not_json_fails_where_it_is_read_not_at_the_claim() -> None:
    """Stored text that is not JSON (no engine's schema lets it in, but a driver might
    hand back something else): making the job succeeds, and reading ``payload`` raises
    (in the handler, whose attempt fails), each time."""
    values = {**_values(), "payload": "{not json", "meta": None}
    job = Job.claimed(**values, deps=DependencyReader(), loader=CountingLoader())  # type: ignore[arg-type]
    for _ in range(2):
        with pytest.raises(json.JSONDecodeError):
            job.payload  # noqa: B018
    assert job.meta == {}


def test_claimed_jobs_read_their_payload_lazily_from_a_real_claim(tmp_path: Any) -> None:
    """A claim on SQLite (whose driver gives JSON as text) makes jobs that hold the text
    until the payload is read; what they read is what was enqueued."""
    import portq
    with portq.connect(f"sqlite:///{tmp_path}/lazy.db") as queue:
        queue.migrate()
        queue.enqueue("q", {"n": [1, 2]})
        (job,) = queue.claim("q", "w", limit=1, lease=30)
        assert "payload" not in vars(job) and "_stored" in vars(job)
        assert job.payload == {"n": [1, 2]} and job.meta == {}
        assert queue.complete(job)
