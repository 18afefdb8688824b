"""Claiming: the one-statement claim, the claim within a queue's limits (the policy
in :mod:`portq.backends.sql.limits`), per-key settling, fair claims and the limits'
setters."""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any

from portq.backends.fair import fair_rows
from portq.backends.sql.common import CKEY_COLUMN, GENERATION_COLUMN
from portq.backends.sql.enqueue import Enqueue
from portq.backends.sql.limits import (
    KEYED_RECHECK_S,
    LIMIT_RECHECK_S,
    RateWindow,
    over_key_limits,
    rate_guard_ms,
)
from portq.job import Claim, DependencyReader, Job


class Claiming(Enqueue):
    """Claims and the limits they obey."""

    # ---- claim and fencing --------------------------------------------------------------

    def claim(self, queue: str, worker_id: str, limit: int, lease_ms: int) -> list[Job]:
        params = {"queue": queue, "worker_id": worker_id, "limit": limit, "lease_ms": lease_ms}
        start_by: list[float] = []  # a rate-limited claim's deadline, if it had one
        sent = [0.0]  # when the (last) try was sent: its lease ends no sooner than that + lease

        def claim_unlimited(cur: Any) -> list[Sequence[Any]]:
            sent[0] = time.monotonic()
            return self.claim_rows(cur, params)

        def claim_limited(cur: Any) -> list[Sequence[Any]]:
            sent[0] = time.monotonic()
            return self.claim_within_limit(cur, params, start_by)

        if self.known_unlimited(queue):
            rows = self.run("claim", claim_unlimited, single=True)
            rows = self.settle_after(params, rows)
        else:
            rows = self.run("claim", claim_limited)
        deadline = start_by[-1] if start_by else None
        return [self.job_from_row(row, worker_id, deadline, sent[0]) for row in rows]

    def known_unlimited(self, queue: str) -> bool:
        """True while a claim of ``queue`` found no concurrency or rate limit less than
        ``LIMIT_RECHECK_S`` ago and none returned keyed jobs in ``KEYED_RECHECK_S``: its
        claims skip the limits' extra statements until then. A worker gives such a queue
        its look-ahead; a queue that is not known unlimited gets none."""
        now = time.monotonic()
        return self._unlimited_until.get(queue, 0.0) > now and \
            self._keyed_until.get(queue, 0.0) <= now

    def claim_within_limit(self, cur: Any, params: dict[str, Any],
                           start_by: list[float] | None = None) -> list[Sequence[Any]]:
        """Claim in the open transaction, at most the queue's concurrency limit minus its
        running jobs and its rate limit minus the jobs started in the (guarded) window: the
        queue's row stays locked to commit, so claimers of the queue on every host take
        turns and never exceed either together. Keyed jobs are settled (settle_keys).
        A rate-limited claim appends to ``start_by`` the ``time.monotonic()`` by which its
        jobs' handlers must start (the guard after the window's clock reading)."""
        queue = params["queue"]
        if start_by is not None:
            start_by.clear()  # a retried transaction reads the clock again
        row = self.execute(cur, "queue_control", {"queue": queue}).fetchone()
        max_running, rate_limit, period_ms, rate_log, fair, after = \
            row if row is not None else (None,) * 6

        def claim(cur: Any, params: dict[str, Any]) -> list[Sequence[Any]]:
            if fair:  # round-robin across keys: portq/backends/fair.py
                return fair_rows(self, cur, params, after)
            return self.claim_rows(cur, params)
        if max_running is None and rate_limit is None and not fair:
            self._unlimited_until[queue] = time.monotonic() + LIMIT_RECHECK_S
            return self.settle_keys(cur, params, claim(cur, params), locked=row is not None)
        self._unlimited_until.pop(queue, None)
        want = int(params["limit"])
        if max_running is not None:
            running = int(self.execute(cur, "running_count", {"queue": queue}).fetchone()[0])
            want = min(want, int(max_running) - running)
        window: RateWindow | None = None
        if rate_limit is not None and want > 0:
            if start_by is not None:  # read before the clock: no later than the DB's reading
                start_by.append(time.monotonic() + rate_guard_ms(int(period_ms or 0)) / 1000)
            now_ms = int(self.execute(cur, "db_clock_ms").fetchone()[0])
            window = RateWindow.read(int(rate_limit), int(period_ms or 0),
                                     self.load_text(rate_log), now_ms)
            want = min(want, window.allowed)
        if want <= 0:
            return []
        rows = self.settle_keys(cur, params, claim(cur, {**params, "limit": want}), locked=True)
        if window is not None and rows:
            self.execute(cur, "set_rate_log",
                         {"queue": queue, "rate_log": window.log_after(len(rows))})
        return rows

    def settle_after(self, params: dict[str, Any], rows: list[Sequence[Any]]
                     ) -> list[Sequence[Any]]:
        """After a one-statement claim (already committed) that returned keyed jobs: settle
        them in a transaction of its own, before any is handed out (:meth:`settle_keys`;
        the queue's next claims settle in their own transaction)."""
        if all(row[CKEY_COLUMN] is None for row in rows):
            return rows
        return self.run("claim", lambda cur: self.settle_keys(cur, params, rows, locked=False))

    def settle_keys(self, cur: Any, params: dict[str, Any], rows: list[Sequence[Any]], *,
                    locked: bool) -> list[Sequence[Any]]:
        """Enforce per-key limits on a claim's ``rows``: the claim's row filter races with
        other claimers (and passes several jobs of one key together), so lock the queue's
        row (made if missing; ``locked``: already held), recount each claimed key's running
        jobs (a non-locking read: committed claims plus this one's own) and put back to
        ready the jobs beyond a key's limit, last in claim order first. Claimers that took
        keyed jobs of a queue take turns here; each counts all that committed before it."""
        keyed = [row for row in rows if row[CKEY_COLUMN] is not None]
        if not keyed:
            return rows
        queue = params["queue"]
        self._keyed_until[queue] = time.monotonic() + KEYED_RECHECK_S
        if not locked:
            self.ensure_row(cur, "ensure_queue", {"queue": queue})
            self.execute(cur, "queue_control", {"queue": queue}).fetchall()
        running = {key: int(self.execute(cur, "key_running_count", {
            "queue": queue, "concurrency_key": key}).fetchone()[0])
            for key in sorted({str(row[CKEY_COLUMN]) for row in keyed})}
        back = {id(row) for row in over_key_limits(keyed, running)}
        for row in keyed:
            if id(row) in back:
                self.execute(cur, "unclaim", {"job_id": row[0],
                                              "generation": row[GENERATION_COLUMN],
                                              "worker_id": params["worker_id"]})
        return [row for row in rows if id(row) not in back]

    def set_concurrency_limit(self, queue: str, max_running: int | None) -> None:
        self.run("set_concurrency_limit", lambda cur: self.execute(
            cur, "set_concurrency_limit", {"queue": queue, "max_running": max_running}))
        self._unlimited_until.pop(queue, None)

    def set_rate_limit(self, queue: str, limit: int | None, period_ms: int | None) -> None:
        self.run("set_rate_limit", lambda cur: self.execute(
            cur, "set_rate_limit", {"queue": queue, "rate_limit": limit,
                                    "period_ms": period_ms}))
        self._unlimited_until.pop(queue, None)

    def claim_rows(self, cur: Any, params: dict[str, Any], name: str = "claim"
                   ) -> list[Sequence[Any]]:
        """Claim in the open transaction with statement ``name`` (``claim``, or a fair
        claim's ``claim_key`` / ``claim_unkeyed``); rows are CLAIM_COLUMNS. Default: one
        statement."""
        return list(self.execute(cur, name, params).fetchall())

    @functools.cached_property
    def _dependency_reader(self) -> DependencyReader:
        """How the jobs this backend claims read their dependencies' results (one reader
        for all of them; after the first claim a plain attribute)."""
        return DependencyReader(self.dependency_results)

    #: column order of claimed rows: job_id, queue, payload, priority, attempts,
    #: max_attempts, job_key, lease_until, concurrency_key, concurrency_limit, run_at, meta
    def job_from_row(self, row: Sequence[Any], worker_id: str,
                     start_by: float | None = None, leased_at: float | None = None) -> Job:
        (job_id, queue, payload, priority, attempts, max_attempts, key, lease_until,
         concurrency_key, _, timeout_ms, run_at, meta) = row
        lease = self.from_db_time(lease_until)
        assert lease is not None
        job_id, attempts = int(job_id), int(attempts)
        # JSON text is decoded on first use, on the handler's thread; what a driver gives
        # as bytes or a LOB is read now, while its cursor is open. The rest is made here:
        # made on first use instead (on the handler's thread) it measured slower, as the
        # handlers' Python takes the GIL from the claim loop too (docs/operations.md)
        lazy = type(payload) is str and (meta is None or type(meta) is str)
        return Job.claimed(
            job_id, queue, payload if lazy else self.load_payload(payload), attempts,
            int(max_attempts), key, int(priority), Claim.of_row(job_id, attempts, worker_id, lease),
            concurrency_key, start_by, leased_at,
            None if timeout_ms is None else int(timeout_ms) / 1000, self.from_db_time(run_at),
            meta if lazy else self.load_meta(meta), self._dependency_reader,
            self if lazy else None)

    # ---- fair sharing across keys (migration 13; the claim: portq/backends/fair.py) -----

    def set_fairness(self, queue: str, fair: bool) -> None:
        self.run("set_fairness", lambda cur: self.execute(
            cur, "set_fairness", {"queue": queue, "fair": int(fair)}))
        self._unlimited_until.pop(queue, None)


