"""Job.cancelled(), wait_cancelled() and raise_if_cancelled() before and after the
worker learns of a cancel (the engines' part is portq/conformance/test_cancel.py)."""

from __future__ import annotations

import pytest

from portq import Job, JobCancelled


def test_raise_if_cancelled_is_quiet_until_cancelled() -> None:
    job = Job(id=7, queue="q", payload=None, attempt=1, max_attempts=1, key=None)
    job.raise_if_cancelled()
    assert job.cancelled() is False and job.wait_cancelled(0.01) is False
    job._cancel.set()
    assert job.cancelled() is True and job.wait_cancelled(0) is True
    with pytest.raises(JobCancelled, match="job 7 was cancelled"):
        job.raise_if_cancelled()
