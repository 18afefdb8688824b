"""Operators and listings: maintenance (reap, prune), operator actions (retry, cancel,
pause), statistics, job listings and the worker registry."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from portq.backends import dependencies
from portq.backends.sql.common import ALL_QUEUES, JOB_ORDERS, like_pattern
from portq.backends.sql.limits import NO_LIMITS, QueueLimits, _int_or_none
from portq.backends.sql.outcomes import Outcomes
from portq.job import STATS_WINDOW_S, JobError, JobRecord, QueueStats, WorkerActivity, WorkerInfo


class Operators(Outcomes):
    """Maintenance, operator actions, listings and the worker registry."""

    # ---- maintenance and operators ------------------------------------------------------

    def reap(self, limit: int, delay_ms: int) -> int:
        params = {"limit": limit, "delay_ms": delay_ms}
        return self.run("reap", lambda cur: self.settled_count(cur, self.reap_rows(cur, params)))

    def reap_rows(self, cur: Any, params: dict[str, Any]) -> int:
        return int(self.execute(cur, "reap", params).rowcount)

    def prune(self, older_than_ms: int, limit: int, states: Sequence[str],
              queue: str | None = None) -> int:
        params = {"older_than_ms": older_than_ms, "limit": limit, "states": tuple(states),
                  "queue": queue or ALL_QUEUES}
        return self.run("prune", lambda cur: self.prune_rows(cur, params), single=True)

    def prune_rows(self, cur: Any, params: dict[str, Any]) -> int:
        return int(self.execute(cur, "prune", params).rowcount)

    def retry_dead(self, job_id: int, extra_attempts: int) -> bool:
        """Make a dead or cancelled job ready again, reviving (in the same transaction) the
        dependents its end cancelled (:func:`dependencies.revive`)."""
        params = {"job_id": job_id, "extra": extra_attempts}

        def go(cur: Any) -> bool:
            if self.execute(cur, "retry_dead", params).rowcount != 1:
                return False
            dependencies.revive(self, cur, [job_id])
            return True
        return bool(self.run("retry_dead", go))

    def cancel(self, job_id: int) -> bool:
        return self._settled_many("cancel", [{"job_id": job_id}])[0]

    def finished_per_minute(self, minutes: int) -> list[tuple[str, str, int, int]]:
        rows = self.run("finished_per_minute", lambda cur: self.execute(
            cur, "finished_per_minute", {"minutes": minutes}).fetchall(), write=False)
        return [(q, s, int(ago), int(n)) for q, s, ago, n in rows
                if ago is not None and 0 <= int(ago) < minutes]

    # ---- job statistics (Queue.job_stats; issue 31 item 11) ---- a separate block -------
    def stats_series(self, window_s: int, bucket_s: int) -> list[tuple[str, str, int, int]]:
        rows = self.run("stats_series", lambda cur: self.execute(
            cur, "stats_series", {"window_s": window_s, "bucket_s": bucket_s}).fetchall(),
            write=False)
        return [(q, s, int(ago), int(n)) for q, s, ago, n in rows if ago is not None]

    def stats_latency(self, window_s: int) -> list[tuple[str, int | None, int | None, int]]:
        rows = self.run("stats_latency", lambda cur: self.execute(
            cur, "stats_latency", {"window_s": window_s}).fetchall(), write=False)
        return [(q, None if w is None else int(w), None if r is None else int(r), int(n))
                for q, w, r, n in rows]
    # ---- end of job statistics ----------------------------------------------------------

    def delete_finished(self, job_id: int) -> bool:
        return bool(self.run("delete_finished", lambda cur: self.execute(
            cur, "delete_finished", {"job_id": job_id}).rowcount == 1))

    def pending(self, queue: str) -> tuple[bool, bool]:
        ready, running = self.run("pending", lambda cur: self.execute(
            cur, "pending", {"queue": queue}).fetchone(), write=False)
        return bool(ready), bool(running)

    def next_lease_expiry_ms(self) -> int | None:
        row = self.run("next_lease_expiry_ms", lambda cur: self.execute(
            cur, "next_lease_expiry_ms").fetchone(), write=False)
        return None if row is None or row[0] is None else int(row[0])

    def stats(self, queue: str | None = None) -> list[QueueStats]:
        params = {"queue": queue or ALL_QUEUES, "window_ms": STATS_WINDOW_S * 1000}

        def go(cur: Any) -> tuple[list[Any], list[Any], list[Any]]:
            return (list(self.execute(cur, "stats", params).fetchall()),
                    list(self.execute(cur, "attempt_stats", params).fetchall()),
                    list(self.execute(cur, "queue_limits", params).fetchall()))
        rows, attempt_rows, limit_rows = self.run("stats", go, write=False)
        limits = {str(q): QueueLimits(bool(p), _int_or_none(c), _int_or_none(r),
                                      None if ms is None else int(ms) / 1000, bool(f))
                  for q, p, c, r, ms, f in limit_rows}
        attempts = {q: (int(f or 0), int(s or 0)) for q, f, s in attempt_rows}
        out = []
        for q, ready, scheduled, running, succeeded, dead, cancelled, oldest, now, waiting \
                in rows:
            oldest_at, now_at = self.from_db_time(oldest), self.from_db_time(now)
            age = None
            if oldest_at is not None and now_at is not None:
                age = max(0.0, (now_at - oldest_at).total_seconds())
            failed_1h, succeeded_1h = attempts.get(q, (0, 0))
            ended = failed_1h + succeeded_1h
            out.append(QueueStats(
                queue=q, ready=int(ready or 0), scheduled=int(scheduled or 0),
                running=int(running or 0), succeeded=int(succeeded or 0), dead=int(dead or 0),
                cancelled=int(cancelled or 0), oldest_ready_age_s=age, failed_1h=failed_1h,
                waiting=int(waiting or 0),
                succeeded_1h=succeeded_1h, retry_rate=failed_1h / ended if ended else None,
                **limits.get(q, NO_LIMITS).as_fields()))
        listed = {s.queue for s in out}
        out += [QueueStats(queue=q, ready=0, scheduled=0, running=0, succeeded=0, dead=0,
                           cancelled=0, oldest_ready_age_s=None, **lim.as_fields())
                for q, lim in limits.items()
                if q not in listed and lim != NO_LIMITS]  # paused or limited, no jobs
        return sorted(out, key=lambda s: s.queue)

    def set_paused(self, queue: str, paused: bool) -> None:
        self.run("pause" if paused else "resume", lambda cur: self.execute(
            cur, "set_paused", {"queue": queue, "paused": int(paused)}))

    def paused_queues(self) -> list[str]:
        return [str(r[0]) for r in self.run("paused_queues", lambda cur: self.execute(
            cur, "paused_queues", {}).fetchall(), write=False)]

    def retry_many(self, queue: str | None, states: Sequence[str], limit: int,
                   extra_attempts: int) -> int:
        params = {"queue": queue or ALL_QUEUES, "states": tuple(states), "limit": limit,
                  "extra": extra_attempts}

        def go(cur: Any) -> int:
            retried = self.batch_ids(cur, "retry_many", params)
            dependencies.revive(self, cur, retried)
            return len(retried)
        return self.run("retry_many", go)

    def cancel_many(self, queue: str | None, states: Sequence[str], limit: int) -> int:
        params = {"queue": queue or ALL_QUEUES, "states": tuple(states), "limit": limit}
        return self.run("cancel_many", lambda cur: self.settled_count(
            cur, self.batch_rows(cur, "cancel_many", params)))

    def batch_rows(self, cur: Any, name: str, params: dict[str, Any]) -> int:
        """Run a bounded batch statement (``limit`` rows at most); return rows changed.
        Default: one statement."""
        return int(self.execute(cur, name, params).rowcount)

    def batch_ids(self, cur: Any, name: str, params: dict[str, Any]) -> list[int]:
        """:meth:`batch_rows`, returning the ids of the rows changed. Default: one
        statement that returns them (RETURNING, OUTPUT)."""
        return [int(row[0]) for row in self.execute(cur, name, params).fetchall()]

    def jobs(self, state: str | None = None, queue: str | None = None, limit: int = 100,
             after_id: int = 0, *, key: str | None = None, text: str | None = None,
             order: str = "id", after_run_at: datetime | None = None) -> list[JobRecord]:
        if key is not None:
            return self._job_of_key(key, state, queue, after_id, text)
        params = {"state": state or ALL_QUEUES, "queue": queue or ALL_QUEUES, "limit": limit,
                  "after_id": after_id, "any_text": int(not text),
                  "pattern": like_pattern(text or ""),
                  "after_run_at": self.to_db_time(after_run_at or datetime.now(UTC))}
        statement = JOB_ORDERS[order]
        rows = self.run("jobs", lambda cur: self.execute(cur, statement, params).fetchall(),
                        write=False)
        return [self.record_from_row(r) for r in rows]

    def db_now(self, conn: Any | None = None) -> datetime:
        """The database clock (UTC), rounded up to the next millisecond (it is read in
        whole milliseconds: a row written in this one must not look later than now); on
        ``conn`` (a caller's connection) when given, as :meth:`job` reads."""
        ms = self.read("db_clock_ms", lambda cur: self.execute(
            cur, "db_clock_ms").fetchone()[0], conn)
        return datetime.fromtimestamp((int(ms) + 1) / 1000, UTC)

    def _job_of_key(self, key: str, state: str | None, queue: str | None, after_id: int,
                    text: str | None) -> list[JobRecord]:
        """The listing filtered by key: the one job holding it (unique index), if it also
        passes the other filters and is not on a page already shown."""
        row = self.run("job_id_by_key", lambda cur: self.execute(
            cur, "job_id_by_key", {"key": key}).fetchone(), write=False)
        record = None if row is None or after_id else self.job(int(row[0]))
        if record is None or (state and record.state != state) or \
                (queue and record.queue != queue):
            return []
        if text and text.lower() not in json.dumps(record.payload, ensure_ascii=False,
                                                   separators=(",", ":")).lower():
            return []
        return [record]

    def job(self, job_id: int, conn: Any | None = None) -> JobRecord | None:
        row = self.read("job", lambda cur: self.execute(
            cur, "job", {"job_id": job_id}).fetchone(), conn)
        return None if row is None else self.record_from_row(row)

    def record_from_row(self, r: Sequence[Any]) -> JobRecord:
        """A :class:`JobRecord` from a row of the ``jobs``/``job`` statements."""
        return JobRecord(
            id=int(r[0]), queue=r[1], state=r[2], payload=self.load_payload(r[3]),
            priority=int(r[4]), attempts=int(r[5]), max_attempts=int(r[6]), key=r[7],
            run_at=self.from_db_time(r[8]), worker_id=r[9],
            lease_until=self.from_db_time(r[10]), last_error=self.load_text(r[11]),
            created_at=self.from_db_time(r[12]), finished_at=self.from_db_time(r[13]),
            progress=None if r[14] is None else float(r[14]),
            progress_note=self.load_text(r[15]), progress_at=self.from_db_time(r[16]),
            released=int(r[17] or 0) if len(r) > 17 else 0,
            # the `job` statement adds meta, then when the latest and the first
            # attempt started
            meta=self.load_meta(r[18]) if len(r) > 18 else None,
            started_at=self.from_db_time(r[19]) if len(r) > 19 else None,
            first_started_at=self.from_db_time(r[20]) if len(r) > 20 else None)

    def error_history(self, job_id: int, conn: Any | None = None) -> list[JobError]:
        rows = self.read("job_errors", lambda cur: self.execute(
            cur, "job_errors", {"job_id": job_id}).fetchall(), conn)
        return [JobError(int(a), w, self.load_text(e) or "", self.from_db_time(t))
                for a, w, e, t in rows]

    def job_errors(self, job_id: int) -> list[tuple[int, str, str]]:
        """``(attempt, worker_id, error)`` for every failed attempt of a job, in order."""
        return [(e.attempt, e.worker_id, e.error) for e in self.error_history(job_id)]

    # ---- worker registry ----------------------------------------------------------------

    def beat_worker(self, info: WorkerInfo, ttl_ms: int) -> None:
        params = {"worker_id": info.worker_id, "host": info.host, "pid": info.pid,
                  "queues": json.dumps(list(info.queues)), "concurrency": info.concurrency,
                  "jobs_in_hand": info.jobs_in_hand,
                  "schedules": json.dumps(list(info.schedules)), "ttl_ms": ttl_ms}

        def go(cur: Any) -> None:
            self.execute(cur, "expire_workers")
            if self.execute(cur, "worker_heartbeat", params).rowcount != 1:
                self.execute(cur, "register_worker", params)
        self.run("beat_worker", go)

    def deregister_worker(self, worker_id: str) -> None:
        self.run("deregister_worker", lambda cur: self.execute(
            cur, "deregister_worker", {"worker_id": worker_id}))

    def workers(self) -> list[WorkerInfo]:
        rows = self.run("workers", lambda cur: self.execute(cur, "workers").fetchall(),
                        write=False)
        out = []
        for (worker_id, host, pid, queues, concurrency, in_hand, schedules, started, beat,
             now) in rows:
            beat_at, now_at = self.from_db_time(beat), self.from_db_time(now)
            age = None if beat_at is None or now_at is None else \
                max(0.0, (now_at - beat_at).total_seconds())
            out.append(WorkerInfo(
                worker_id=worker_id, host=host, pid=int(pid),
                queues=tuple(json.loads(self.load_text(queues) or "[]")),
                concurrency=int(concurrency), jobs_in_hand=int(in_hand),
                schedules=tuple(json.loads(self.load_text(schedules) or "[]")),
                started_at=self.from_db_time(started), heartbeat_at=beat_at,
                heartbeat_age_s=age))
        return out

    def job_concurrency(self, job_id: int) -> tuple[str, int] | None:
        row = self.run("job_concurrency", lambda cur: self.execute(
            cur, "job_concurrency", {"job_id": job_id}).fetchone(), write=False)
        if row is None or row[0] is None:
            return None
        return str(self.load_text(row[0])), int(row[1])

    def key_limits(self, queue: str, limit: int) -> list[tuple[str, int, int]]:
        rows = self.run("queue_key_limits", lambda cur: self.execute(
            cur, "queue_key_limits", {"queue": queue, "limit": limit}).fetchall(),
            write=False)
        return [(str(self.load_text(k)), int(n), int(c)) for k, n, c in rows]

    def worker_activity(self) -> dict[str, WorkerActivity]:
        rows = self.run("worker_activity", lambda cur: self.execute(
            cur, "worker_activity").fetchall(), write=False)
        out = {}
        for worker_id, expires, now, running in rows:
            expires_at, now_at = self.from_db_time(expires), self.from_db_time(now)
            left = 0.0 if expires_at is None or now_at is None else \
                max(0.0, (expires_at - now_at).total_seconds())
            out[str(worker_id)] = WorkerActivity(int(running or 0), left)
        return out

