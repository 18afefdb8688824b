"""Durations as users write them: seconds (int or float), a :class:`datetime.timedelta`, or
text with a unit (``'500ms'``, ``'30s'``, ``'15m'``, ``'2h'``, ``'7d'``, ``'1w'``)."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Any

from portq.errors import ConfigurationError

UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
UNIT_HELP = "ms, s, m, h, d or w (e.g. 500ms, 30s, 15m, 12h, 7d)"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)$")


def parse_duration_text(text: str) -> float:
    """``'30s'`` -> 30.0. A unit is required; raises :class:`ValueError` naming the problem
    (the CLI turns it into its usage error)."""
    value = text.strip()
    if value.startswith("-"):
        raise ValueError(f"invalid duration {text!r}: must not be negative")
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        raise ValueError(f"duration {text!r} needs a unit: one of {UNIT_HELP}")
    m = _DURATION.match(value)
    if not m:
        raise ValueError(f"invalid duration {text!r}: a number and a unit, one of {UNIT_HELP}")
    return float(m.group(1)) * UNITS[m.group(2)]


def format_duration(seconds: float) -> str:
    """Seconds in the largest unit up to days that holds them whole: 604800 -> ``'7d'``,
    0.25 -> ``'250ms'``."""
    for unit in ("d", "h", "m", "s", "ms"):
        count = seconds / UNITS[unit]
        if count >= 1 and abs(count - round(count)) < 1e-9:
            return f"{round(count)}{unit}"
    return f"{seconds:g}s"


def seconds_of(value: Any, what: str) -> float:
    """``value`` (seconds, a timedelta or text with a unit) as finite seconds >= 0, or a
    :class:`ConfigurationError` naming ``what``."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, str):
        try:
            seconds = parse_duration_text(value)
        except ValueError as exc:
            raise ConfigurationError(f"{what}: {exc}") from None
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{what} must be seconds, a timedelta or a duration such as "
                                 f"'30s', got {value!r}")
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigurationError(f"{what} must be a finite duration >= 0, got {value!r}")
    return seconds
