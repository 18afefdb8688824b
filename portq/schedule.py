"""Periodic jobs: 5-field cron schedules enqueued exactly once per due time.

Every worker may run the scheduler; each due run is enqueued with the idempotency key
``cron:<name>:<due time, UTC ISO-8601>``, so however many workers see the same due time,
one job exists. Schedules are read from TOML::

    [[schedule]]
    name = "nightly-report"
    queue = "reports"
    cron = "0 3 * * *"          # minute hour day-of-month month day-of-week
    timezone = "Europe/Paris"   # IANA zone of the cron fields (default UTC)
    payload = { kind = "nightly" }
    priority = 5                # optional, as Queue.enqueue
    max_attempts = 3            # optional, as Queue.enqueue

Cron fields accept ``*``, numbers, ranges ``a-b``, steps ``*/n`` / ``a-b/n`` / ``a/n``,
lists ``a,b``, month names ``jan``-``dec`` and day names ``sun``-``sat`` (0 and 7 are
Sunday). As in Vixie cron, when both day-of-month and day-of-week are restricted (neither
starts with ``*``), a day matches if either does. The shortcuts ``@hourly``, ``@daily``
(``@midnight``), ``@weekly``, ``@monthly`` and ``@yearly`` (``@annually``) stand for their
5-field forms.

With a ``timezone``, the fields are wall-clock times of that zone, and each due wall-clock
time runs once across daylight-saving changes: a time the clocks skip (02:30 on the night
of spring-forward in Europe/Paris) runs once, shifted by the gap (03:30 summer time); a
time the clocks repeat (02:30 on the night of fall-back) runs once, at its first
occurrence.
"""

from __future__ import annotations

import logging
import re
import threading
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from portq.errors import ConfigurationError
from portq.queue import Queue, positive_int, validate_priority, validate_queue

log = logging.getLogger("portq.schedule")
_MONTHS = {m: i + 1 for i, m in enumerate(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"])}
_DAYS = {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
MAX_YEARS_AHEAD = 8  # "0 0 29 2 1" (Feb 29th or any Monday) etc. always match sooner
REPEAT_BACKOFF = timedelta(hours=3)  # longer than any daylight-saving shift in the tz database
SHORTCUTS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
             "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *",
             "@annually": "0 0 1 1 *"}


def time_zone(name: Any) -> tzinfo:
    """The IANA time zone ``name`` (e.g. ``"Europe/Paris"``); ConfigurationError if unknown."""
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"timezone {name!r} must be an IANA zone name such as "
                                 "'Europe/Paris'")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(
            f"unknown timezone {name!r}: use an IANA zone name such as 'Europe/Paris' (if "
            "this system has no time zone database, pip install tzdata)") from None


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
    """A parsed 5-field cron expression, evaluated in the wall-clock time of ``tz``."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]   # 0 = Sunday
    day_or: bool               # both day fields restricted: either may match
    tz: tzinfo = UTC

    @classmethod
    def parse(cls, text: str, timezone: str | None = None) -> Cron:
        """Parse ``text`` (5 fields or a shortcut such as ``@daily``) in ``timezone``."""
        tz = UTC if timezone is None else time_zone(timezone)
        shortcut = text.strip().lower() if isinstance(text, str) else ""
        if shortcut.startswith("@"):
            if shortcut not in SHORTCUTS:
                raise ConfigurationError(f"cron shortcut {text!r} is not one of "
                                         f"{', '.join(SHORTCUTS)}")
            return replace(cls.parse(SHORTCUTS[shortcut], timezone), text=shortcut)
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
            tz=tz,
        )

    def _day_matches(self, t: datetime) -> bool:
        in_month = t.day in self.days
        in_week = (t.isoweekday() % 7) in self.weekdays
        return (in_month or in_week) if self.day_or else (in_month and in_week)

    def matches(self, t: datetime) -> bool:
        """True if the minute ``t`` (aware, or naive wall-clock time of ``tz``) matches."""
        if t.tzinfo is not None:
            t = t.astimezone(self.tz).replace(tzinfo=None)
        return (t.minute in self.minutes and t.hour in self.hours
                and t.month in self.months and self._day_matches(t))

    def next_after(self, after: datetime) -> datetime:
        """The first due time strictly after ``after`` (an aware datetime), in UTC.

        Due times are matching wall-clock minutes of ``tz``. One the clocks skip maps to the
        instant its pre-transition offset gives (shifted by the gap); one they repeat runs
        at its first occurrence only, unless the hour field is ``*``: such an entry keeps
        its real-time cadence and runs in both passes of the repeated hour (as Vixie cron
        runs its wildcard-hour jobs)."""
        after = _utc(after)
        # start a little before ``after``'s wall time: its repeated hour may lie behind it
        local = after.astimezone(self.tz).replace(tzinfo=None) - REPEAT_BACKOFF
        best: datetime | None = None
        horizon: datetime | None = None
        # offsets make instants out of order only among walls less than a shift apart
        while horizon is None or local <= horizon:
            local = self._next_wall_time(local)
            for due in self._instants(local):
                if due > after and (best is None or due < best):
                    best, horizon = due, horizon or local + REPEAT_BACKOFF
        assert best is not None
        return best

    def _instants(self, wall: datetime) -> list[datetime]:
        """The UTC instants at which wall-clock minute ``wall`` of ``tz`` is due."""
        first = wall.replace(tzinfo=self.tz, fold=0).astimezone(UTC)
        if not self.every_hour:
            return [first]
        second = wall.replace(tzinfo=self.tz, fold=1).astimezone(UTC)
        exists = first.astimezone(self.tz).replace(tzinfo=None) == wall
        return [first, second] if exists and second != first else [first]

    @property
    def every_hour(self) -> bool:
        """True when the hour field is ``*`` (every hour of the day)."""
        return len(self.hours) == 24

    def _next_wall_time(self, after: datetime) -> datetime:
        """The first matching naive wall-clock minute strictly after naive ``after``."""
        t = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
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
        unknown = set(entry) - {"name", "queue", "cron", "timezone", "payload", "priority",
                                "max_attempts"}
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
                                cron=Cron.parse(entry["cron"], entry.get("timezone")),
                                payload=entry.get("payload"),
                                priority=validate_priority(entry.get("priority", 0)),
                                max_attempts=None if "max_attempts" not in entry else
                                positive_int(entry["max_attempts"], "max_attempts"))
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
