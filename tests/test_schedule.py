"""Cron parsing and exactly-once periodic enqueue across concurrent schedulers."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import portq
from portq.conformance.helpers import counts
from portq.conformance.plugin import TEST_PREFIX
from portq.schedule import Cron, Schedule, Scheduler, load_schedules, parse_schedules

T0 = datetime(2026, 12, 1, 23, 58, 30, tzinfo=UTC)  # a Tuesday


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(("expr", "after", "expected"), [
    ("*/5 * * * *", "2026-12-01T23:58:30", "2026-12-02T00:00:00"),
    ("0 3 * * *", "2026-12-01T23:58:30", "2026-12-02T03:00:00"),
    ("0 3 * * *", "2026-12-02T03:00:00", "2026-12-03T03:00:00"),
    ("0 0 29 2 *", "2026-03-01T00:00:00", "2028-02-29T00:00:00"),
    ("30 9 * * mon-fri", "2026-12-04T10:00:00", "2026-12-07T09:30:00"),  # Fri -> Mon
    ("0 0 * * 7", "2026-12-01T00:00:00", "2026-12-06T00:00:00"),         # 7 = Sunday
    ("0 0 13 * 5", "2026-12-01T00:00:00", "2026-12-04T00:00:00"),        # Friday 4th
    ("0 0 13 * 5", "2026-12-11T00:00:00", "2026-12-13T00:00:00"),        # or the 13th
    # "*/10" starts with "*": as in Vixie cron both day fields must match (Fri 11th)
    ("0 0 */10 * 5", "2026-12-01T00:00:00", "2026-12-11T00:00:00"),
    ("0 0 * jan,jul *", "2026-12-01T00:00:00", "2027-01-01T00:00:00"),
    ("1-10/3 * * * *", "2026-12-01T00:04:00", "2026-12-01T00:07:00"),
    ("59 23 31 12 *", "2026-12-31T23:59:00", "2027-12-31T23:59:00"),
])
def test_next_after(expr: str, after: str, expected: str) -> None:
    assert Cron.parse(expr).next_after(at(after)) == at(expected)


@pytest.mark.parametrize(("expr", "problem"), [
    ("* * * *", "5 fields"), ("60 * * * *", "outside 0-59"), ("*/0 * * * *", "step"),
    ("5-1 * * * *", "backwards"), ("* * * foo *", "not a number"),
    ("0 0 31 2 *", "never fires"), ("* * 0 * *", "outside 1-31"),
])
def test_bad_cron_is_refused(expr: str, problem: str) -> None:
    with pytest.raises(portq.ConfigurationError, match=problem):
        Cron.parse(expr).next_after(T0)


fields = st.sampled_from(["*", "*/2", "*/7", "1-20/4", "0", "5,10,15", "3-9"])


@settings(max_examples=60, deadline=None)
@given(minute=fields, hour=st.sampled_from(["*", "*/3", "0-5", "7,19"]),
       dom=st.sampled_from(["*", "1-15", "*/2", "13"]),
       dow=st.sampled_from(["*", "1-5", "0,6", "5"]),
       start=st.integers(min_value=0, max_value=60 * 24 * 60))
def test_next_after_is_the_first_matching_minute(minute: str, hour: str, dom: str, dow: str,
                                                 start: int) -> None:
    cron = Cron.parse(f"{minute} {hour} {dom} * {dow}")
    after = T0 + timedelta(minutes=start, seconds=7)
    found = cron.next_after(after)
    t = after.replace(second=0) + timedelta(minutes=1)
    while t < found:  # brute force: no earlier minute matches
        assert not cron.matches(t), t
        t += timedelta(minutes=1)
    assert cron.matches(found) and found > after


def test_schedule_file(tmp_path: Path) -> None:
    path = tmp_path / "schedules.toml"
    path.write_text('[[schedule]]\nname = "nightly"\nqueue = "reports"\ncron = "0 3 * * *"\n'
                    'payload = { kind = "nightly", n = 1 }\n', encoding="utf-8")
    (s,) = load_schedules(path)
    assert (s.name, s.queue, s.cron.text, s.payload) == \
        ("nightly", "reports", "0 3 * * *", {"kind": "nightly", "n": 1})
    assert s.key(at("2026-12-02T03:00:00")) == "cron:nightly:2026-12-02T03:00:00Z"
    path.write_text('[[schedule]]\nname = "x"\nqueue = "q"\ncron = "0 3 * *"\n', "utf-8")
    with pytest.raises(portq.ConfigurationError, match=r"#1 \(x\).*5 fields"):
        load_schedules(path)
    with pytest.raises(portq.ConfigurationError, match="missing"):
        parse_schedules([{"name": "x", "cron": "* * * * *"}])
    with pytest.raises(portq.ConfigurationError, match="unique"):
        parse_schedules([{"name": "x", "queue": "q", "cron": "* * * * *"}] * 2)


def test_concurrent_schedulers_enqueue_each_due_run_once(engine_url: str, qname: str) -> None:
    """Six schedulers (one connection each) tick over the same hour at once: one job per
    due time, keyed by schedule name and due time."""
    schedules = [Schedule(name=f"{qname}-5m", queue=qname, cron=Cron.parse("*/5 * * * *"),
                          payload={"every": "5m"})]
    queues = [portq.connect(engine_url, prefix=TEST_PREFIX) for _ in range(6)]
    start = at("2026-12-02T00:00:30")
    barrier = threading.Barrier(len(queues))
    errors: list[BaseException] = []
    ids: list[set[int]] = []

    def run(q: portq.Queue) -> None:
        sched = Scheduler(q, schedules, catch_up=3600)
        mine: set[int] = set()
        try:
            for step in range(7):               # seven ticks, 10 minutes apart
                barrier.wait(30)
                mine.update(sched.tick(start + timedelta(minutes=10 * step)))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        ids.append(mine)

    threads = [threading.Thread(target=run, args=(q,)) for q in queues]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        for q in queues:
            q.close()
    assert not errors, errors
    with portq.connect(engine_url, prefix=TEST_PREFIX) as q:
        # due times in (00:00:30 - 1h, 01:00:30]: 23:05 .. 01:00 -> 24 runs
        jobs = q.jobs("ready", queue=qname, limit=1000)
        assert counts(q, qname)["ready"] == 24
    keys = sorted(j.key or "" for j in jobs)
    assert len(set(keys)) == 24
    assert keys[0] == f"cron:{qname}-5m:2026-12-01T23:05:00Z"
    assert keys[-1] == f"cron:{qname}-5m:2026-12-02T01:00:00Z"
    assert all(i == ids[0] for i in ids)  # every scheduler got the same 24 ids


def test_scheduler_entries_report_next_due_and_last_enqueued(queue: portq.Queue,
                                                             qname: str) -> None:
    """What a worker's registry row (and the dashboard's Schedules page) shows."""
    sched = Scheduler(queue, [
        Schedule(name=f"{qname}-5m", queue=qname, cron=Cron.parse("*/5 * * * *")),
        Schedule(name=f"{qname}-3am", queue=qname, cron=Cron.parse("0 3 * * *"))],
        catch_up=600)
    before = sched.entries(at("2026-12-02T00:07:00"))
    assert [e["last_enqueued"] for e in before] == [None, None]
    sched.tick(at("2026-12-02T00:12:00"))  # due in the last 10 minutes: 00:05, 00:10
    five, three = sched.entries(at("2026-12-02T00:12:00"))
    assert five == {"name": f"{qname}-5m", "queue": qname, "cron": "*/5 * * * *",
                    "next_due": "2026-12-02T00:15:00+00:00",
                    "last_enqueued": "2026-12-02T00:10:00+00:00"}
    assert three["next_due"] == "2026-12-02T03:00:00+00:00" and three["last_enqueued"] is None
