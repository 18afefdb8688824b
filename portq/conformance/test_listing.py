"""Listing jobs as an operator (the dashboard's Jobs page): filters by state, queue, key and
payload text, three orders, paging by key; deleting one finished job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import portq


def _pages(q: portq.Queue, size: int, **filters: object) -> list[list[int]]:
    pages: list[list[int]] = []
    after_id, after_run_at = 0, None
    while True:
        rows = q.jobs(limit=size, after_id=after_id, after_run_at=after_run_at,
                          **filters)  # type: ignore[arg-type]
        if not rows:
            return pages
        pages.append([r.id for r in rows])
        after_id, after_run_at = rows[-1].id, rows[-1].run_at


def _flat(pages: list[list[int]]) -> list[int]:
    return [i for page in pages for i in page]


def test_filters_by_key_and_payload_text(queue: portq.Queue, qname: str) -> None:
    ids = queue.enqueue_many([
        {"queue": qname, "payload": {"user": "Alice", "n": 1}, "key": f"{qname}-a"},
        {"queue": qname, "payload": {"user": "bob", "note": "50% off_now!"}},
        {"queue": qname, "payload": {"user": "carol"}, "key": f"{qname}-c"},
    ])
    (one,) = queue.jobs(queue=qname, key=f"{qname}-c")
    assert one.id == ids[2] and one.key == f"{qname}-c"
    assert queue.jobs(queue=qname, key=f"{qname}-missing") == []
    # a key filter combines with the others
    assert queue.jobs("dead", queue=qname, key=f"{qname}-c") == []
    assert queue.jobs(queue="elsewhere", key=f"{qname}-c") == []
    assert [r.id for r in queue.jobs(key=f"{qname}-a", text="ALICE")] == [ids[0]]
    assert queue.jobs(key=f"{qname}-a", text="carol") == []
    assert queue.jobs(key=f"{qname}-a", after_id=ids[0]) == [], "one job: one page"
    assert [r.id for r in queue.jobs(queue=qname, text="alice")] == [ids[0]], \
        "payload search must ignore case"
    # LIKE wildcards in the search text are literal characters
    assert [r.id for r in queue.jobs(queue=qname, text="50% off_")] == [ids[1]]
    assert queue.jobs(queue=qname, text="5_%") == []
    assert [r.id for r in queue.jobs(queue=qname, text="")] == ids, "empty text: no filter"


def test_orders_page_by_key_without_gaps_or_repeats(queue: portq.Queue, qname: str) -> None:
    base = datetime.now(UTC) + timedelta(hours=1)
    # run_at ties between different ids, and run_at order unlike id order
    offsets = [5, 1, 3, 1, 4, 1, 2, 5, 0, 3, 1]
    ids = queue.enqueue_many([{"queue": qname, "payload": i,
                               "run_at": base + timedelta(seconds=s)}
                              for i, s in enumerate(offsets)])
    assert _flat(_pages(queue, 3, queue=qname)) == ids
    assert _flat(_pages(queue, 4, queue=qname, order="-id")) == ids[::-1]
    by_run_at = [i for _, i in sorted(zip(offsets, ids, strict=True))]
    assert _flat(_pages(queue, 2, queue=qname, order="run_at")) == by_run_at
    assert all(len(p) <= 2 for p in _pages(queue, 2, queue=qname, order="run_at"))


def test_state_filter_and_newest_first(queue: portq.Queue, qname: str) -> None:
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(5)])
    for job in queue.claim(qname, "w", limit=2):
        assert queue.complete(job)
    assert [r.id for r in queue.jobs("succeeded", queue=qname, order="-id")] == ids[1::-1]
    assert [r.id for r in queue.jobs("ready", queue=qname, order="-id", limit=2)] == \
        ids[:1:-1][:2]


def test_delete_finished_deletes_only_a_finished_job(queue: portq.Queue, qname: str) -> None:
    done, ready = queue.enqueue_many([{"queue": qname, "payload": 1},
                                      {"queue": qname, "payload": 2}])
    (job,) = queue.claim(qname, "w", limit=1)
    queue.fail(job, "boom <script>", retry_in=None)
    assert queue.error_history(done)
    assert not queue.delete_finished(ready), "deleted a ready job"
    assert queue.delete_finished(done)
    assert queue.job(done) is None and queue.error_history(done) == []
    assert not queue.delete_finished(done)
    assert queue.job(ready) is not None


def test_listing_arguments_are_validated(queue: portq.Queue, qname: str) -> None:
    for bad in ({"order": "payload"}, {"key": ""}, {"text": "x" * 201},
                {"order": "run_at", "after_id": 5},
                {"after_run_at": datetime(2030, 1, 1)}):
        with pytest.raises(portq.ConfigurationError):
            queue.jobs(queue=qname, **bad)


def test_finished_per_minute_counts_by_the_database_clock(queue: portq.Queue,
                                                         qname: str) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i, "max_attempts": 1} for i in range(5)])
    jobs = queue.claim(qname, "w", limit=5)
    for job in jobs[:3]:
        assert queue.complete(job)
    assert queue.fail(jobs[3], "boom")
    assert queue.cancel(jobs[4].id)
    series = queue.finished_per_minute(60)[qname]
    assert all(len(s) == 60 for s in series.values())
    # all finished within the last minute or two (the current minute is the last entry)
    assert sum(series["succeeded"][-2:]) == 3 and sum(series["succeeded"]) == 3
    assert sum(series["dead"]) == 1 and sum(series["cancelled"]) == 1
