"""A client-side watchdog over a worker's database calls: one that has waited longer than
a third of the lease is logged (one WARNING per call per period), so that a stalled
database is never silent."""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Iterator


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

    @contextlib.contextmanager
    def __call__(self, operation: str) -> Iterator[None]:
        key = next(self._ids)
        started = time.monotonic()
        self._calls[key] = (operation, started, [started])
        try:
            yield
        finally:
            del self._calls[key]

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
