"""Retry delays: fixed, exponential, and exponential with full jitter (the default), capped.

Full jitter (delay = uniform(0, min(cap, base * 2 ** (attempt - 1)))) spreads the retries of
jobs that failed together, so an outage does not come back as a synchronised storm.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from portq.errors import ConfigurationError

Kind = Literal["fixed", "exponential", "full_jitter"]


@dataclass(frozen=True)
class Backoff:
    """How long to wait before attempt ``attempt + 1`` after attempt ``attempt`` failed."""

    kind: Kind = "full_jitter"
    base: float = 1.0
    cap: float = 3600.0

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "exponential", "full_jitter"):
            raise ConfigurationError(f"unknown backoff kind {self.kind!r}")
        if not (self.base >= 0 and self.cap >= 0):
            raise ConfigurationError("backoff base and cap must not be negative")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if self.kind == "fixed":
            return min(self.cap, self.base)
        ceiling = min(self.cap, self.base * 2.0 ** min(max(attempt - 1, 0), 62))
        if self.kind == "exponential":
            return ceiling
        return (rng or random).uniform(0.0, ceiling)


DEFAULT_BACKOFF = Backoff()
