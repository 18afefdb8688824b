"""The ceiling of portq's SQL on an engine: threads looping over the backend's own claim and
completion statements on DB-API connections of their own (no pool, no Worker)."""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from portq.backends.base import GENERATION_COLUMN, ErrorKind, SqlBackend
from portq.bench.cpu import meter
from portq.bench.flow import bulk_enqueue, clear_queue
from portq.bench.table import (
    T,
    claim_params,
    settle,
    statement,
)
from portq.errors import ConfigurationError
from portq.pool import close_quietly
from portq.queue import Queue

#: the raw loop's ways to write completions: one statement and commit per completed job
#: (``complete``), one per claimed batch (``complete_many``, what the Worker writes), or
#: the batch's completion and the next claim in one statement (``complete_claim``, on
#: engines whose dialect has that statement: PostgreSQL)
RAW_COMPLETES = ("complete", "complete_many", "complete_claim")


def raw_completes(backend: SqlBackend) -> list[str]:
    """The raw loop's completion forms that ``backend`` has statements for."""
    combined = complete_claim_sql(backend) is not None
    return [c for c in RAW_COMPLETES if c in backend.queries or (c == "complete_claim" and
                                                               combined)]


def complete_claim_sql(backend: SqlBackend) -> str | None:
    """The dialect's ``bench_complete_claim`` (None: it has none), composed from the
    backend's own ``complete_many`` (its final SELECT, ``bench_complete_many_tail``,
    replaced) and ``claim``, so that it can never drift from them."""
    template = statement(backend, "complete_claim")
    tail = statement(backend, "complete_many_tail")
    if template is None or tail is None:
        return None
    complete = str(backend.queries["complete_many"]).strip().rstrip(";")
    if not complete.endswith(tail):
        raise ConfigurationError(f"{backend.engine} complete_many must end with {tail!r}")
    return template.format(complete_ctes=complete[:-len(tail)].rstrip(),
                           claim=backend.queries["claim"].strip().rstrip(";"))


class _RawLoop:
    """One thread of :func:`raw_throughput_run`: a DB-API connection of its own looping
    over claim and completion until a claim comes back empty."""

    def __init__(self, backend: SqlBackend, queue: str, batch: int, complete: str,
                 slot: int) -> None:
        self.backend, self.complete = backend, complete
        self.worker_id = f"raw-{slot}"
        self.params = {**claim_params(queue, batch), "worker_id": self.worker_id}
        self.combined = complete_claim_sql(backend) if complete == "complete_claim" else None
        self.done = self.retries = 0
        # each statement of the loop is its whole transaction: sent as the Worker sends it
        # (in autocommit where the backend runs one-statement operations so; a batch's
        # completion, which may release dependents, only where its statement does that
        # itself: SQLite's runs in BEGIN IMMEDIATE ... COMMIT, as Outcomes.fenced_many)
        self.auto = backend.autocommit_single
        self.completes_auto = self.auto and backend.completes_dependents_in_statement

    def tx(self, conn: Any, fn: Callable[[], T], auto: bool | None = None) -> T:
        """``fn`` in a transaction (in autocommit where ``auto``, default the loop's),
        run again after a transient conflict."""
        while True:
            if not (self.auto if auto is None else auto):
                self.backend.begin(conn, True)
            try:
                result = fn()
                conn.commit()
                return result
            except Exception as exc:
                conn.rollback()
                if self.backend.classify(exc) is not ErrorKind.RETRYABLE:
                    raise
                self.retries += 1

    def guard(self, row: Sequence[Any]) -> dict[str, Any]:
        return {"job_id": row[0], "generation": row[GENERATION_COLUMN],
                "worker_id": self.worker_id}

    def complete_one(self, cur: Any, guard: dict[str, Any]) -> int:
        """One job's completion: 1 when it was still this loop's, else 0."""
        return int(self.backend.execute(cur, "complete", guard).rowcount)

    def complete_claim(self, cur: Any, claims: str) -> list[Sequence[Any]]:
        """The batch's completion and the next claim in one statement."""
        rows = self.backend.execute(cur, str(self.combined), {**self.params, "claims": claims})
        claimed = []
        for kind, *row in rows.fetchall():
            if kind == "done":
                self.done += 1
            else:
                claimed.append(row)
        return claimed

    def run(self) -> None:
        backend = self.backend
        conn = backend.connect()
        cur = conn.cursor()
        if self.auto:
            backend.set_autocommit(conn, True)
        try:
            rows = self.tx(conn, lambda: backend.claim_rows(cur, self.params))
            while rows:
                guards = json.dumps([self.guard(row) for row in rows])
                if self.complete == "complete_claim":
                    rows = self.tx(conn, functools.partial(self.complete_claim, cur, guards))
                    continue
                if self.complete == "complete_many":
                    self.done += len(self.tx(conn, functools.partial(
                        backend.fenced_rows, cur, "complete_many", {"claims": guards}),
                        self.completes_auto))
                else:
                    for row in rows:
                        self.done += self.tx(conn, functools.partial(
                            self.complete_one, cur, self.guard(row)))
                rows = self.tx(conn, lambda: backend.claim_rows(cur, self.params))
        finally:
            close_quietly(cur)
            close_quietly(conn)


def raw_throughput_run(queue: Queue, jobs: int, workers: int, batch: int,
                       complete: str = "complete_many") -> dict[str, Any]:
    """The ceiling of portq's SQL on any engine: ``workers`` threads, each with a DB-API
    connection of its own (no pool, no Worker, no look-ahead), loop over the backend's own
    claim statement(s) and commit, then its ``complete`` (a commit per job),
    ``complete_many`` (a commit per batch) or ``complete_claim`` (the batch's completion
    in the next claim's statement), until a claim comes back empty. Each is sent as the
    Worker sends it: one autocommit statement where the backend's ``autocommit_single``
    says so (PostgreSQL, SQLite), else BEGIN, statement(s), COMMIT; ``complete_many`` in
    autocommit only where its statement releases the completed jobs' dependents itself
    (``completes_dependents_in_statement``: PostgreSQL), else, as the Worker, in a
    transaction (SQLite: BEGIN IMMEDIATE ... COMMIT). A transient conflict
    (busy, deadlock, serialization failure) rolls back and runs the transaction again;
    ``retries`` counts those."""
    backend = queue.backend
    if complete not in raw_completes(backend):
        raise ConfigurationError(f"unknown raw completion {complete!r} on "
                                 f"{backend.engine}; use "
                                 f"{', '.join(raw_completes(backend))}")
    settle(backend)
    name = f"bench-raw-{uuid.uuid4().hex[:8]}"
    enqueued_s = bulk_enqueue(queue, name, jobs)
    loops = [_RawLoop(backend, name, batch, complete, slot) for slot in range(workers)]
    errors: list[BaseException] = []

    def run(loop: _RawLoop) -> None:
        try:
            loop.run()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller below
            errors.append(exc)

    with meter(backend.engine) as cpu:
        threads = [threading.Thread(target=cpu.tracked(functools.partial(run, loop)),
                                    name=f"portq-bench-raw-{i}")
                   for i, loop in enumerate(loops)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
    clear_queue(queue, name, jobs + 1)
    if errors:
        raise errors[0]
    done = sum(loop.done for loop in loops)
    return {"engine": backend.engine, "complete": complete, "workers": workers,
            "batch": batch, "jobs": jobs, "succeeded": done,
            "retries": sum(loop.retries for loop in loops),
            "seconds": round(elapsed, 4), "jobs_per_s": round(done / elapsed, 1),
            "cpu": cpu.figures(done),
            "enqueue_jobs_per_s": round(jobs / enqueued_s, 1) if enqueued_s > 0 else 0.0}
