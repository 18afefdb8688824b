"""The limits policy of a claim, free of I/O: a rate-limited queue's window
(:class:`RateWindow`), per-key limits (:func:`over_key_limits`) and a queue's flow
control as ``portq stats`` shows it (:class:`QueueLimits`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from portq.backends.sql.common import CKEY_COLUMN, CLIMIT_COLUMN, PRIORITY_COLUMN

#: a worker that found no concurrency limit on a queue looks again after this long
LIMIT_RECHECK_S = 1.0
#: a queue whose claim returned jobs with a concurrency key claims in a transaction of its
#: own (which settles the keys) for this long before the one-statement claim is tried again
KEYED_RECHECK_S = 60.0
#: most entries a queue's rate log keeps: older ones merge into the next (counted as late
#: as it: stricter, never looser)
RATE_LOG_MAX = 64
#: the guard added to a rate limit's window: RATE_GUARD_FRACTION of the period, within
#: [RATE_GUARD_MIN_MS, RATE_GUARD_MAX_MS] (the time a worker has to start a claimed job)
RATE_GUARD_MIN_MS = 20
RATE_GUARD_MAX_MS = 250
RATE_GUARD_FRACTION = 0.05


@dataclass(frozen=True)
class QueueLimits:
    """A queue's flow control as ``portq stats`` shows it (its ``portq_queue`` row)."""

    paused: bool = False
    concurrency_limit: int | None = None
    rate_limit: int | None = None
    rate_period_s: float | None = None
    fair: bool = False

    def as_fields(self) -> dict[str, Any]:
        return {"paused": self.paused, "concurrency_limit": self.concurrency_limit,
                "rate_limit": self.rate_limit, "rate_period_s": self.rate_period_s,
                "fair": self.fair}


NO_LIMITS = QueueLimits()


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def rate_guard_ms(period_ms: int) -> int:
    """The guard added to a rate limit's window (see :class:`RateWindow`)."""
    return max(RATE_GUARD_MIN_MS, min(RATE_GUARD_MAX_MS, int(period_ms * RATE_GUARD_FRACTION)))


@dataclass(frozen=True)
class RateWindow:
    """A rate-limited queue's log as one claim reads it: ``allowed`` jobs may start now.

    The log holds ``[db_epoch_ms, jobs]`` per claim that started jobs. A claim at DB time
    ``now`` counts the entries at or after ``now - (period + guard)`` (whole milliseconds:
    "at" keeps a reading truncated or rounded to the millisecond counted): any set of
    claims within a span shorter than that window is counted whole by the latest of them,
    so claims obey "at most ``limit`` per ``period + guard``", and handler starts (each
    within ``guard`` after its claim's clock reading: a worker gives back a job it could
    not start by its ``Job.start_by``) obey "at most ``limit`` per ``period``" in every
    sliding window."""

    limit: int
    now_ms: int
    entries: tuple[tuple[int, int], ...]

    @classmethod
    def read(cls, limit: int, period_ms: int, log_text: str | None, now_ms: int
             ) -> RateWindow:
        since = now_ms - period_ms - rate_guard_ms(period_ms)
        entries = tuple((int(t), int(n)) for t, n in json.loads(log_text or "[]")
                        if int(t) >= since)  # a clock that stepped back: still counted
        return cls(limit, now_ms, entries)

    @property
    def allowed(self) -> int:
        return max(0, self.limit - sum(n for _, n in self.entries))

    def log_after(self, claimed: int) -> str:
        """The log to write back after claiming ``claimed`` jobs now (compact JSON)."""
        entries = [list(e) for e in self.entries] + [[self.now_ms, claimed]]
        while len(entries) > RATE_LOG_MAX:
            (t0, n0), (t1, n1) = entries[0], entries[1]
            entries[:2] = [[max(t0, t1), n0 + n1]]
        return json.dumps(entries, separators=(",", ":"))


def over_key_limits(keyed: Sequence[Sequence[Any]], running: dict[str, int]
                    ) -> list[Sequence[Any]]:
    """The claimed ``keyed`` rows to put back: per key, ``running[key]`` (this claim's own
    rows included) minus the key's limit, taken from the end of the claim order (priority,
    then job id). A job is kept while fewer than its own limit of its key run besides it."""
    back: list[Sequence[Any]] = []
    for key in {str(row[CKEY_COLUMN]) for row in keyed}:
        mine = sorted((row for row in keyed if str(row[CKEY_COLUMN]) == key),
                      key=lambda row: (-int(row[PRIORITY_COLUMN]), int(row[0])))
        others = running[key] - len(mine)
        kept = 0
        for row in mine:
            if others + kept < int(row[CLIMIT_COLUMN]):
                kept += 1
            else:
                back.append(row)
    return back


