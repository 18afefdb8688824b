"""A client-side watchdog over a worker's database calls: one that has waited longer than
a third of the lease is logged (one WARNING per call per period), so that a stalled
database is never silent."""

from __future__ import annotations

import itertools
import logging
import time


class Watch:
    """``with watch("claim"): ...`` around each database call; :meth:`warn_slow` (from the
    worker's watchdog thread) logs the calls still waiting after ``after`` seconds, again
    every ``after`` seconds while they wait."""

    def __init__(self, worker_id: str, after: float, logger: logging.Logger) -> None:
        self.worker_id, self.after, self.log = worker_id, after, logger
        self._calls: dict[int, tuple[str, float, list[float]]] = {}
        self._ids = itertools.count()
        #: how many warnings it logged (for tests and the summary)
        self.warned = 0

    def __call__(self, operation: str) -> _Watched:
        return _Watched(self._calls, operation, next(self._ids))

    def warn_slow(self) -> None:
        """Log each call that has waited past the bound and was not logged this period."""
        now = time.monotonic()
        for operation, started, last in list(self._calls.values()):
            if now - last[0] >= self.after:
                last[0] = now
                self.warned += 1
                self.log.warning("worker.db_slow worker=%s operation=%s waited=%.1fs: the "
                                 "database has not answered for over a third of the lease "
                                 "(%.1fs); no job will start whose lease cannot be renewed",
                                 self.worker_id, operation, now - started, self.after * 3)


class _Watched:
    """One watched call (a plain context manager: one is made per database call)."""

    __slots__ = ("calls", "key", "operation")

    def __init__(self, calls: dict[int, tuple[str, float, list[float]]], operation: str,
                 key: int) -> None:
        self.calls, self.operation, self.key = calls, operation, key

    def __enter__(self) -> None:
        started = time.monotonic()
        self.calls[self.key] = (self.operation, started, [started])

    def __exit__(self, *exc: object) -> None:
        del self.calls[self.key]
