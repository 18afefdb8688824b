"""Compatibility: the names :mod:`portq.backends.base` has always exported. The machinery
now lives in :mod:`portq.backends.sql` (split by concern), the engine seam in
:mod:`portq.backends.contract` and :mod:`portq.protocol`."""

from __future__ import annotations

from portq.backends.contract import KIND_ORDER, EngineHooks, ErrorKind
from portq.backends.sql.backend import SqlBackend
from portq.backends.sql.common import (
    ALL_QUEUES,
    CKEY_COLUMN,
    CLIMIT_COLUMN,
    EPOCH,
    GENERATION_COLUMN,
    JOB_ORDERS,
    POLL_IDLE_MAX,
    PRIORITY_COLUMN,
    TxProgress,
    _scrub,
    conflict_delay,
    driver_version,
    like_pattern,
    one_line,
    storable_error,
    utc_from_micros,
)
from portq.backends.sql.limits import (
    KEYED_RECHECK_S,
    LIMIT_RECHECK_S,
    NO_LIMITS,
    RATE_GUARD_FRACTION,
    RATE_GUARD_MAX_MS,
    RATE_GUARD_MIN_MS,
    RATE_LOG_MAX,
    QueueLimits,
    RateWindow,
    over_key_limits,
    rate_guard_ms,
)
from portq.protocol import Backend, Listener


def listen_mode(backend: Backend, listen: bool) -> str:
    """How a worker with ``listen`` finds new jobs on ``backend`` (its start-up line)."""
    return backend.capabilities.listen_mode if listen else "polling (listen=False)"


__all__ = [
    "ALL_QUEUES", "CKEY_COLUMN", "CLIMIT_COLUMN", "EPOCH", "GENERATION_COLUMN", "JOB_ORDERS",
    "KEYED_RECHECK_S", "KIND_ORDER", "LIMIT_RECHECK_S", "NO_LIMITS", "POLL_IDLE_MAX",
    "PRIORITY_COLUMN", "RATE_GUARD_FRACTION", "RATE_GUARD_MAX_MS", "RATE_GUARD_MIN_MS",
    "RATE_LOG_MAX", "EngineHooks", "ErrorKind", "Listener", "QueueLimits", "RateWindow",
    "SqlBackend", "TxProgress", "_scrub", "conflict_delay", "driver_version", "like_pattern",
    "listen_mode",
    "one_line", "over_key_limits", "rate_guard_ms", "storable_error", "utc_from_micros",
]
