"""Throughput and latency of finished jobs over a window (:meth:`portq.Queue.job_stats`,
``portq stats``, the dashboard's Throughput page).

The database does the counting: two statements (``stats_series``, ``stats_latency`` in
each dialect) walk the finished-jobs index over the window only, so their cost follows the
jobs finished in the window, never the size of the table. Wait time (created -> first
start) and run time (latest start -> finish) come back as counts per logarithmic bucket
(four per doubling, from 1 ms); their percentiles are read from those counts here,
interpolated within a bucket, so each is within 19 % of the exact value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from portq.durations import seconds_of
from portq.errors import ConfigurationError

#: the windows the dashboard and ``portq stats`` offer
WINDOWS = {"1h": 3600, "24h": 86400, "7d": 604800}
MAX_WINDOW_S = 31 * 86400
MAX_BUCKETS = 200
#: bucket widths, the narrowest giving at most MAX_BUCKETS buckets is used
BUCKET_WIDTHS = (60, 300, 900, 3600, 21600, 86400)
PERCENTILES = (50, 95, 99)
STEPS_PER_DOUBLING = 4        # the dialects' stats_latency: floor(4 * log2(ms))


def window_seconds(window: float | timedelta | str) -> int:
    """A statistics window (``'1h'``, ``'24h'``, ``'7d'``, any duration, seconds or a
    timedelta) as whole seconds, from one minute to 31 days."""
    seconds = seconds_of(window, "window")
    if not 60 <= seconds <= MAX_WINDOW_S:
        raise ConfigurationError(f"window must be from 1 minute to 31 days, got {window!r}")
    return int(seconds)


def bucket_seconds(window_s: int) -> int:
    """The series' bucket width for a window: 1 h -> 1 min, 24 h -> 15 min, 7 d -> 1 h."""
    for width in BUCKET_WIDTHS:
        if math.ceil(window_s / width) <= MAX_BUCKETS:
            return width
    return BUCKET_WIDTHS[-1]


def bucket_floor_ms(bucket: int) -> float:
    """The shortest duration (ms) of a latency bucket (bucket 0 also holds under 1 ms)."""
    return 0.0 if bucket <= 0 else 2.0 ** (bucket / STEPS_PER_DOUBLING)


def percentile(histogram: Mapping[int, int], p: float) -> float | None:
    """The ``p``-th percentile (ms) of a histogram of latency buckets, interpolated
    geometrically within its bucket; None for no data."""
    total = sum(histogram.values())
    if total <= 0:
        return None
    rank = p / 100 * total
    seen = 0
    for bucket in sorted(histogram):
        count = histogram[bucket]
        if count and seen + count >= rank:
            low, high = bucket_floor_ms(bucket), bucket_floor_ms(bucket + 1)
            part = (rank - seen) / count
            if low == 0.0:
                return round(high * part, 3)
            return round(float(low * (high / low) ** part), 3)
        seen += count
    return bucket_floor_ms(max(histogram) + 1)


@dataclass(frozen=True)
class JobStats:
    """One queue's finished jobs over a window: per-bucket counts (oldest first) and the
    wait and run time percentiles (ms) of its succeeded and dead jobs."""

    queue: str
    window_s: int
    bucket_s: int
    succeeded: list[int]
    dead: list[int]
    cancelled: list[int]
    wait_ms: dict[str, float | None] = field(default_factory=dict)
    run_ms: dict[str, float | None] = field(default_factory=dict)

    @property
    def finished(self) -> int:
        return sum(self.succeeded) + sum(self.dead) + sum(self.cancelled)

    @property
    def failure_rate(self) -> float | None:
        """Dead jobs per succeeded-or-dead job of the window (None: neither)."""
        done = sum(self.succeeded) + sum(self.dead)
        return None if not done else sum(self.dead) / done

    @property
    def per_minute(self) -> float:
        """Succeeded and dead jobs per minute over the window."""
        return (sum(self.succeeded) + sum(self.dead)) * 60 / self.window_s

    def as_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "window_s": self.window_s, "bucket_s": self.bucket_s,
                "succeeded": sum(self.succeeded), "dead": sum(self.dead),
                "cancelled": sum(self.cancelled), "per_minute": round(self.per_minute, 3),
                "failure_rate": self.failure_rate, "wait_ms": self.wait_ms,
                "run_ms": self.run_ms, "series": {"succeeded": self.succeeded,
                                                  "dead": self.dead,
                                                  "cancelled": self.cancelled}}


def build_stats(series: Iterable[tuple[str, str, int, int]],
                latency: Iterable[tuple[str, int | None, int | None, int]],
                window_s: int, bucket_s: int) -> list[JobStats]:
    """Per-queue :class:`JobStats` from the rows of ``stats_series`` (queue, state,
    buckets ago, count) and ``stats_latency`` (queue, wait bucket, run bucket, count)."""
    n = math.ceil(window_s / bucket_s)
    counts: dict[str, dict[str, list[int]]] = {}
    for queue, state, ago, count in series:
        if state in ("succeeded", "dead", "cancelled") and 0 <= ago < n:
            per_state = counts.setdefault(queue, {s: [0] * n for s in
                                                  ("succeeded", "dead", "cancelled")})
            per_state[state][n - 1 - ago] += count
    waits: dict[str, dict[int, int]] = {}
    runs: dict[str, dict[int, int]] = {}
    for queue, wait_b, run_b, count in latency:
        for hist, bucket in ((waits, wait_b), (runs, run_b)):
            if bucket is not None:
                per_queue = hist.setdefault(queue, {})
                per_queue[bucket] = per_queue.get(bucket, 0) + count
    out = []
    for queue in sorted(set(counts) | set(waits) | set(runs)):
        per_state = counts.get(queue) or {s: [0] * n for s in
                                          ("succeeded", "dead", "cancelled")}
        out.append(JobStats(
            queue=queue, window_s=window_s, bucket_s=bucket_s, **per_state,
            wait_ms={f"p{p}": percentile(waits.get(queue, {}), p) for p in PERCENTILES},
            run_ms={f"p{p}": percentile(runs.get(queue, {}), p) for p in PERCENTILES}))
    return out
