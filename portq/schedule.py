"""Periodic jobs: 5-field cron schedules enqueued exactly once per due time.

Every worker may run the scheduler; each due run is enqueued with the idempotency key
``cron:<name>:<due time, UTC ISO-8601>``, so however many workers see the same due time,
one job exists. Schedules are read from TOML::

    [[schedule]]
    name = "nightly-report"
    queue = "reports"
    cron = "0 3 * * *"          # minute hour day-of-month month day-of-week, in UTC
    payload = { kind = "nightly" }

Cron fields accept ``*``, numbers, ranges ``a-b``, steps ``*/n`` / ``a-b/n`` / ``a/n``,
lists ``a,b``, month names ``jan``-``dec`` and day names ``sun``-``sat`` (0 and 7 are
Sunday). As in Vixie cron, when both day-of-month and day-of-week are restricted (neither
starts with ``*``), a day matches if either does.
"""

from __future__ import annotations

import logging
import re
import threading
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from portq.errors import ConfigurationError
from portq.queue import Queue, validate_queue

log = logging.getLogger("portq.schedule")
_MONTHS = {m: i + 1 for i, m in enumerate(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"])}
_DAYS = {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
MAX_YEARS_AHEAD = 8  # "0 0 29 2 1" (Feb 29th or any Monday) etc. always match sooner


def _parse_field(text: str, low: int, high: int, names: Mapping[str, int],
                 what: str) -> frozenset[int]:
    values: set[int] = set()

    def number(token: str) -> int:
        token = token.lower()
        if token in names:
            return names[token]
        if not token.isdigit():
            raise ConfigurationError(f"cron {what} {text!r}: {token!r} is not a number")
        value = int(token)
        if not low <= value <= high:
            raise ConfigurationError(f"cron {what} {text!r}: {value} is outside {low}-{high}")
        return value

    for part in text.split(","):
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ConfigurationError(f"cron {what} {text!r}: step must be a number > 0")
            step = int(step_text)
        if base == "*":
            start, end = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            start, end = number(a), number(b)
            if start > end:
                raise ConfigurationError(f"cron {what} {text!r}: range {base} runs backwards")
        else:
            start = number(base)
            end = high if slash else start
        values.update(range(start, end + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class Cron:
    """A parsed 5-field cron expression, evaluated in UTC."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]   # 0 = Sunday
    day_or: bool               # both day fields restricted: either may match

    @classmethod
    def parse(cls, text: str) -> Cron:
        fields = text.split() if isinstance(text, str) else []
        if len(fields) != 5:
            raise ConfigurationError(
                f"cron expression {text!r} must have 5 fields: minute hour day-of-month "
                "month day-of-week")
        minute, hour, dom, month, dow = fields
        weekdays = _parse_field(dow, 0, 7, _DAYS, "day-of-week")
        return cls(
            text=" ".join(fields),
            minutes=_parse_field(minute, 0, 59, {}, "minute"),
            hours=_parse_field(hour, 0, 23, {}, "hour"),
            days=_parse_field(dom, 1, 31, {}, "day-of-month"),
            months=_parse_field(month, 1, 12, _MONTHS, "month"),
            weekdays=frozenset(d % 7 for d in weekdays),
            day_or=not dom.startswith("*") and not dow.startswith("*"),
        )

    def _day_matches(self, t: datetime) -> bool:
        in_month = t.day in self.days
        in_week = (t.isoweekday() % 7) in self.weekdays
        return (in_month or in_week) if self.day_or else (in_month and in_week)

    def matches(self, t: datetime) -> bool:
        """True if the minute ``t`` (UTC) is a due time."""
        return (t.minute in self.minutes and t.hour in self.hours
                and t.month in self.months and self._day_matches(t))

    def next_after(self, after: datetime) -> datetime:
        """The first due minute strictly after ``after`` (an aware datetime), in UTC."""
        t = _utc(after).replace(second=0, microsecond=0) + timedelta(minutes=1)
        limit = t.year + MAX_YEARS_AHEAD
        while t.year <= limit:
            if t.month not in self.months:
                t = (t.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(day=1)
            elif not self._day_matches(t):
                t = t.replace(hour=0, minute=0) + timedelta(days=1)
            elif t.hour not in self.hours:
                t = t.replace(minute=0) + timedelta(hours=1)
            elif t.minute not in self.minutes:
                t += timedelta(minutes=1)
            else:
                return t
        raise ConfigurationError(f"cron expression {self.text!r} never fires "
                                 f"(e.g. 31st of a 30-day month)")

    def due_between(self, start: datetime, end: datetime) -> Iterator[datetime]:
        """Due minutes ``t`` with ``start < t <= end``."""
        t = self.next_after(start)
        while t <= end:
            yield t
            t = self.next_after(t)


def _utc(t: datetime) -> datetime:
    if t.tzinfo is None or t.utcoffset() is None:
        raise ConfigurationError("schedule times must be timezone-aware")
    return t.astimezone(UTC)


@dataclass(frozen=True)
class Schedule:
    """One periodic job: enqueue ``payload`` on ``queue`` at each due time of ``cron``."""

    name: str
    queue: str
    cron: Cron
    payload: Any = None
    priority: int = 0
    max_attempts: int | None = None

    def key(self, due: datetime) -> str:
        """The idempotency key of the run due at ``due``."""
        return f"cron:{self.name}:{_utc(due).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def parse_schedules(entries: Any, source: str = "schedule") -> list[Schedule]:
    """Validate ``[[schedule]]`` tables (a list of mappings) into :class:`Schedule` s."""
    if not isinstance(entries, list) or not entries:
        raise ConfigurationError(f"{source}: expected one or more [[schedule]] tables")
    out: list[Schedule] = []
    for i, entry in enumerate(entries):
        where = f"{source}: [[schedule]] #{i + 1}"
        if not isinstance(entry, dict):
            raise ConfigurationError(f"{where} is not a table")
        unknown = set(entry) - {"name", "queue", "cron", "payload", "priority", "max_attempts"}
        missing = {"name", "queue", "cron"} - set(entry)
        if unknown or missing:
            raise ConfigurationError(f"{where}: missing {sorted(missing)}, "
                                     f"unknown {sorted(unknown)}")
        name = entry["name"]
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigurationError(f"{where}: name {name!r} must be 1-100 characters of "
                                     "letters, digits, '_', '.' and '-'")
        try:
            schedule = Schedule(name=name, queue=validate_queue(entry["queue"]),
                                cron=Cron.parse(entry["cron"]), payload=entry.get("payload"),
                                priority=entry.get("priority", 0),
                                max_attempts=entry.get("max_attempts"))
        except ConfigurationError as exc:
            raise ConfigurationError(f"{where} ({name}): {exc}") from None
        out.append(schedule)
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise ConfigurationError(f"{source}: schedule names must be unique, got {names}")
    return out


def load_schedules(path: str | Path) -> list[Schedule]:
    """Read ``[[schedule]]`` tables from a TOML file."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read schedule file {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"schedule file {path} is not valid TOML: {exc}") from None
    unknown = set(data) - {"schedule"}
    if unknown:
        raise ConfigurationError(f"schedule file {path}: unknown top-level keys "
                                 f"{sorted(unknown)}; use [[schedule]] tables")
    return parse_schedules(data.get("schedule"), str(path))


class Scheduler:
    """Enqueues each due run of ``schedules``; safe to run in every worker at once.

    ``catch_up`` bounds how far back a (re)started or stalled scheduler looks: due times
    older than that are skipped rather than enqueued in a burst.
    """

    def __init__(self, queue: Queue, schedules: Sequence[Schedule], *,
                 catch_up: float = 60.0) -> None:
        self.queue = queue
        self.schedules = list(schedules)
        self.catch_up = timedelta(seconds=catch_up)
        self.enqueued = 0        # due runs this scheduler wrote or found already written
        self.last_enqueued: dict[str, datetime] = {}  # schedule name -> latest due run
        self._last: datetime | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self, now: datetime | None = None) -> list[int]:
        """Enqueue every run due since the last tick (at most ``catch_up`` ago); the ids."""
        now = _utc(now or datetime.now(UTC))
        start = now - self.catch_up
        if self._last is not None and self._last > start:
            start = self._last
        runs = [(s, due) for s in self.schedules for due in s.cron.due_between(start, now)]
        jobs = [{"queue": s.queue, "payload": s.payload, "priority": s.priority,
                 "max_attempts": s.max_attempts, "key": s.key(due), "run_at": due}
                for s, due in runs]
        ids = self.queue.enqueue_many(jobs) if jobs else []
        self._last = now
        self.enqueued += len(ids)
        for s, due in runs:  # due times ascend within each schedule
            self.last_enqueued[s.name] = due
        for job, job_id in zip(jobs, ids, strict=True):
            log.info("schedule.enqueued key=%s queue=%s job_id=%d", job["key"], job["queue"],
                     job_id)
        return ids

    def entries(self, now: datetime | None = None) -> list[dict[str, Any]]:
        """Each schedule as the worker registry reports it: name, queue, cron, next_due
        and last_enqueued (ISO-8601 UTC; last_enqueued None until this scheduler enqueued
        a run)."""
        now = _utc(now or datetime.now(UTC))
        out = []
        for s in self.schedules:
            last = self.last_enqueued.get(s.name)
            out.append({"name": s.name, "queue": s.queue, "cron": s.cron.text,
                        "next_due": s.cron.next_after(now).isoformat(),
                        "last_enqueued": None if last is None else last.isoformat()})
        return out

    def start(self) -> None:
        """Tick now and then at each minute in a daemon thread, until :meth:`stop`."""
        self.tick()
        self._thread = threading.Thread(target=self._loop, name="portq-scheduler",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            now = datetime.now(UTC)
            next_minute = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
            if self._stop.wait((next_minute - now).total_seconds() + 0.05):
                return
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - the database may be down: next minute
                log.warning("schedule.error error=%s: %s", type(exc).__name__, exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
