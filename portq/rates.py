"""Rate limits as an operator writes them: ``N/PERIOD`` (``50/2s``, ``100/1m``)."""

from __future__ import annotations

import re

from portq.durations import UNITS, format_duration
from portq.errors import ConfigurationError

#: ``N/PERIOD``; the period's units are the durations' (:data:`portq.durations.UNITS`)
RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*\.?\d*)\s*(" +
                  "|".join(sorted(UNITS, key=len, reverse=True)) + r")\s*$")


def parse_rate(text: str) -> tuple[int, float] | None:
    """``N/PERIOD`` (``50/2s``, ``100/1m``, ``1000/1h``; a bare unit means 1 of it:
    ``100/m``) as (N, seconds), or None for ``none``."""
    if text.strip().lower() == "none":
        return None
    match = RATE.match(text.lower())
    if not match:
        raise ConfigurationError(
            f"{text!r} is not a rate: give N/PERIOD such as 50/2s, 100/1m or 1000/1h "
            f"(units {', '.join(UNITS)}), or none")
    n, amount, unit = int(match[1]), match[2] or "1", match[3]
    try:
        seconds = float(amount) * UNITS[unit]
    except ValueError:
        seconds = 0.0
    if n < 1 or not 0.01 <= seconds <= 366 * 86400:
        raise ConfigurationError(
            f"{text!r}: the rate needs N >= 1 and a period from 10ms to 366d")
    return n, seconds


def period_text(seconds: float | None) -> str:
    """A period as the shortest of ``2s``, ``1m``, ``1h``, ``1d``, ``250ms``; ``-`` for none."""
    return "-" if seconds is None else format_duration(seconds)
