"""The rate limit's sliding window (``RateWindow``), the arithmetic every engine's
rate-limited claim shares: claims read the database clock in whole milliseconds, and
however those readings fall, no span shorter than period + guard holds more than the
limit's claims (docs/operations.md, "Rate limits")."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from portq.backends.base import RATE_GUARD_MIN_MS, RateWindow, rate_guard_ms


@settings(max_examples=400, deadline=None)
@given(limit=st.integers(1, 6), period_ms=st.sampled_from([10, 100, 1000, 2000, 60000]),
       gaps_us=st.lists(st.one_of(  # a gap in microseconds, or one guarded window
           st.tuples(st.just(False), st.integers(0, 2_500_000)),  # plus up to +-1.5 ms
           st.tuples(st.just(True), st.integers(-1500, 1500))), min_size=1, max_size=40),
       wants=st.lists(st.integers(0, 8), min_size=40, max_size=40),
       rounded=st.booleans())
def test_no_span_shorter_than_the_guarded_window_holds_more_than_the_limit(
        limit: int, period_ms: int, gaps_us: list[tuple[bool, int]], wants: list[int],
        rounded: bool) -> None:
    """Claims at real times (microseconds), each reading the clock truncated or rounded
    to the millisecond, each taking what the window allows: any two claims less than
    period + guard apart (real time) hold at most ``limit`` jobs between them."""
    window_us = (period_ms + rate_guard_ms(period_ms)) * 1000
    log: str | None = None
    claims: list[tuple[int, int]] = []  # (real time in us, jobs)
    t_us = 1_000_000_000
    for (near_window, gap), want in zip(gaps_us, wants, strict=False):
        t_us += window_us + gap if near_window else gap
        now_ms = round(t_us / 1000) if rounded else math.floor(t_us / 1000)
        window = RateWindow.read(limit, period_ms, log, now_ms)
        took = min(want, window.allowed)
        if took:
            log = window.log_after(took)
            claims.append((t_us, took))
    for i, (start, _) in enumerate(claims):
        within = sum(n for t, n in claims[i:] if t - start < window_us)
        assert within <= limit, (claims, i)


def test_the_guard_is_five_percent_within_its_bounds() -> None:
    assert [rate_guard_ms(p) for p in (10, 1000, 2000, 5000, 86_400_000)] == \
        [RATE_GUARD_MIN_MS, 50, 100, 250, 250]


def test_an_entry_exactly_one_guarded_window_old_still_counts() -> None:
    """Readings in whole milliseconds: an entry at exactly now - (period + guard) may be
    less than that apart in real time, so it is counted."""
    log = RateWindow.read(2, 1000, None, 5000).log_after(2)
    assert RateWindow.read(2, 1000, log, 5000 + 1050).allowed == 0
    assert RateWindow.read(2, 1000, log, 5000 + 1051).allowed == 2
