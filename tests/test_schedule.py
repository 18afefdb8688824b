"""Cron parsing and exactly-once periodic enqueue across concurrent schedulers."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import portq
from portq.conformance.helpers import counts, on_own_connections
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
    start = at("2026-12-02T00:00:30")
    ids: list[set[int]] = []
    barrier = threading.Barrier(6)

    def run(q: portq.Queue, _: int) -> None:
        sched = Scheduler(q, schedules, catch_up=3600)
        mine: set[int] = set()
        for step in range(7):               # seven ticks, 10 minutes apart, all at once
            barrier.wait(30)
            mine.update(sched.tick(start + timedelta(minutes=10 * step)))
        ids.append(mine)

    on_own_connections(engine_url, TEST_PREFIX, 6, run)
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


PARIS = "Europe/Paris"  # 2026: clocks go 02:00 -> 03:00 on 29 March, 03:00 -> 02:00 on 25 Oct


def due_utc(expr: str, start: str, end: str, timezone: str | None = PARIS) -> list[str]:
    cron = Cron.parse(expr, timezone)
    return [t.strftime("%m-%dT%H:%M") for t in cron.due_between(at(start), at(end))]


@pytest.mark.parametrize(("shortcut", "fields"), [
    ("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"),
    ("@weekly", "0 0 * * 0"), ("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"), ("@DAILY", "0 0 * * *"),
])
def test_shortcuts_are_their_five_field_forms(shortcut: str, fields: str) -> None:
    short, full = Cron.parse(shortcut), Cron.parse(fields)
    assert short.text == shortcut.lower()
    t = T0
    for _ in range(5):
        assert short.next_after(t) == full.next_after(t)
        t = short.next_after(t)


def test_unknown_shortcut_and_timezone_are_refused() -> None:
    with pytest.raises(portq.ConfigurationError, match=r"@fortnightly.*not one of"):
        Cron.parse("@fortnightly")
    with pytest.raises(portq.ConfigurationError, match="unknown timezone 'Mars/Olympus'"):
        Cron.parse("0 3 * * *", "Mars/Olympus")
    with pytest.raises(portq.ConfigurationError, match="timezone 3 must be an IANA"):
        parse_schedules([{"name": "x", "queue": "q", "cron": "@daily", "timezone": 3}])


def test_timezone_fields_are_wall_clock_times() -> None:
    # 03:00 in Paris is 02:00 UTC in winter (CET) and 01:00 UTC in summer (CEST)
    assert due_utc("0 3 * * *", "2026-01-10T00:00", "2026-01-11T00:00") == ["01-10T02:00"]
    assert due_utc("0 3 * * *", "2026-07-10T00:00", "2026-07-11T00:00") == ["07-10T01:00"]
    assert due_utc("@daily", "2026-07-10T00:00", "2026-07-11T00:00") == ["07-10T22:00"]


def test_a_time_the_clocks_skip_runs_once_shifted_by_the_gap() -> None:
    """02:30 does not exist in Paris on 29 March 2026: it runs once, at 03:30 CEST."""
    assert due_utc("30 2 * * *", "2026-03-27T12:00", "2026-03-30T12:00") == \
        ["03-28T01:30", "03-29T01:30", "03-30T00:30"]   # 02:30 CET, 03:30 CEST, 02:30 CEST
    # an entry every 30 minutes keeps its real-time cadence, each instant once
    assert due_utc("*/30 * * * *", "2026-03-29T00:00", "2026-03-29T02:00") == \
        ["03-29T00:30", "03-29T01:00", "03-29T01:30", "03-29T02:00"]


def test_a_time_the_clocks_repeat_runs_once_at_its_first_occurrence() -> None:
    """02:30 happens twice in Paris on 25 October 2026 (CEST, then CET): it runs once."""
    assert due_utc("30 2 * * *", "2026-10-23T12:00", "2026-10-26T12:00") == \
        ["10-24T00:30", "10-25T00:30", "10-26T01:30"]   # 02:30 CEST, 02:30 CEST, 02:30 CET
    # starting inside the repeated hour (02:10 CET, the second pass) does not run it again
    assert due_utc("30 2 * * *", "2026-10-25T01:10", "2026-10-26T00:00") == []
    # a wildcard-hour entry runs in both passes of the repeated hour (each real instant once)
    assert due_utc("*/30 * * * *", "2026-10-24T23:45", "2026-10-25T02:15") == \
        ["10-25T00:00", "10-25T00:30", "10-25T01:00", "10-25T01:30", "10-25T02:00"]


@settings(max_examples=80, deadline=None)
@given(expr=st.sampled_from(["30 2 * * *", "*/20 * * * *", "0 1-3 * * *", "@hourly",
                             "15 2 25 10 *", "45 2 29 3 *"]),
       start=st.integers(min_value=0, max_value=60 * 24 * 4))
def test_zoned_due_times_ascend_without_repeats(expr: str, start: int) -> None:
    """Around both 2026 changes in Paris: strictly ascending instants, each a matching
    wall-clock minute (or a skipped one shifted by the gap)."""
    cron = Cron.parse(expr, PARIS)
    for base in (at("2026-03-27T00:00"), at("2026-10-23T00:00")):
        t = base + timedelta(minutes=start)
        for _ in range(6):
            nxt = cron.next_after(t)
            assert nxt > t
            wall = nxt.astimezone(cron.tz).replace(tzinfo=None)
            assert cron.matches(wall) or cron.matches(wall - timedelta(hours=1)), nxt
            t = nxt


def test_schedule_entry_timezone_priority_and_max_attempts(tmp_path: Path) -> None:
    path = tmp_path / "schedules.toml"
    path.write_text('[[schedule]]\nname = "n"\nqueue = "q"\ncron = "@daily"\n'
                    'timezone = "Europe/Paris"\npriority = 7\nmax_attempts = 2\n', "utf-8")
    (s,) = load_schedules(path)
    assert (s.cron.text, str(s.cron.tz), s.priority, s.max_attempts) == \
        ("@daily", PARIS, 7, 2)
    for bad, problem in [({"priority": "high"}, "priority must be an integer"),
                         ({"max_attempts": 0}, "max_attempts must be > 0")]:
        with pytest.raises(portq.ConfigurationError, match=problem):
            parse_schedules([{"name": "x", "queue": "q", "cron": "@daily", **bad}])


def test_scheduler_enqueues_with_the_entry_priority_and_max_attempts(
        engine_url: str, qname: str) -> None:
    schedules = parse_schedules([
        {"name": f"{qname}-a", "queue": qname, "cron": "30 2 * * *", "timezone": PARIS,
         "priority": 9, "max_attempts": 2},
        {"name": f"{qname}-b", "queue": qname, "cron": "@hourly"}])
    with portq.connect(engine_url, prefix=TEST_PREFIX, max_attempts=11) as q:
        ids = Scheduler(q, schedules, catch_up=3 * 3600).tick(at("2026-03-29T02:10:00"))
        rows = [q.job(i) for i in ids]
    by_key = {r.key: r for r in rows if r is not None}
    a = by_key[f"cron:{qname}-a:2026-03-29T01:30:00Z"]       # the skipped 02:30, run once
    assert (a.priority, a.max_attempts) == (9, 2)
    hourly = [r for k, r in by_key.items() if k and k.startswith(f"cron:{qname}-b:")]
    assert len(hourly) == 3 and all((r.priority, r.max_attempts) == (0, 11) for r in hourly)
