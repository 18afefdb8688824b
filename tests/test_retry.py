"""Backoff policies: bounds, growth and the spread that full jitter gives."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from portq.errors import ConfigurationError
from portq.retry import Backoff


@given(attempt=st.integers(1, 200), base=st.floats(0, 100), cap=st.floats(0, 10_000),
       seed=st.integers(0, 2**32))
def test_every_policy_stays_within_cap(attempt: int, base: float, cap: float, seed: int) -> None:
    rng = random.Random(seed)
    for kind in ("fixed", "exponential", "full_jitter"):
        delay = Backoff(kind, base, cap).delay(attempt, rng)  # type: ignore[arg-type]
        assert 0 <= delay <= cap


def test_exponential_doubles_until_the_cap() -> None:
    b = Backoff("exponential", base=1, cap=10)
    assert [b.delay(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_full_jitter_spreads_over_the_whole_window() -> None:
    rng = random.Random(42)
    b = Backoff("full_jitter", base=1, cap=60)
    delays = [b.delay(5, rng) for _ in range(5000)]
    assert max(delays) <= 16
    # uniform on [0, 16): each quarter of the window gets roughly a quarter of the retries
    quarters = [sum(1 for d in delays if q * 4 <= d < (q + 1) * 4) for q in range(4)]
    assert all(1000 < n < 1500 for n in quarters), quarters


def test_bad_policies_are_rejected() -> None:
    with pytest.raises(ConfigurationError):
        Backoff("linear")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        Backoff(base=-1)
