"""The ceiling of portq's SQL on an engine: threads looping over the backend's own claim and
completion statements on DB-API connections of their own (no pool, no Worker)."""


import functools
import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from portq.backends.base import GENERATION_COLUMN, ErrorKind, SqlBackend
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


def raw_throughput_run(queue: Queue, jobs: int, workers: int, batch: int,
                       complete: str = "complete_many") -> dict[str, Any]:
    """The ceiling of portq's SQL on any engine: ``workers`` threads, each with a DB-API
    connection of its own (no pool, no Worker, no look-ahead), loop over the backend's own
    claim statement(s) and commit, then its ``complete`` (a commit per job),
    ``complete_many`` (a commit per batch) or ``complete_claim`` (the batch's completion
    in the next claim's statement), until a claim comes back empty. Each is sent as the
    Worker sends it: one autocommit statement where the backend's ``autocommit_single``
    says so (PostgreSQL, SQLite), else BEGIN, statement(s), COMMIT. A transient conflict
    (busy, deadlock, serialization failure) rolls back and runs the transaction again;
    ``retries`` counts those."""
    backend = queue.backend
    if complete not in raw_completes(backend):
        raise ConfigurationError(f"unknown raw completion {complete!r} on "
                                 f"{backend.engine}; use "
                                 f"{', '.join(raw_completes(backend))}")
    settle(backend)
    name = f"bench-raw-{uuid.uuid4().hex[:8]}"
    bulk_enqueue(queue, name, jobs)
    done, retries = [0] * workers, [0] * workers
    errors: list[BaseException] = []

    def loop(slot: int) -> None:
        try:
            run_loop(slot)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller below
            errors.append(exc)

    def run_loop(slot: int) -> None:
        worker_id = f"raw-{slot}"
        conn = backend.connect()
        cur = conn.cursor()

        # each statement of the loop is its whole transaction: sent as the Worker sends it
        # (in autocommit where the backend runs one-statement operations so)
        auto = backend.autocommit_single
        if auto:
            backend.set_autocommit(conn, True)

        def tx(fn: Callable[[], T]) -> T:
            while True:
                if not auto:
                    backend.begin(conn, True)
                try:
                    result = fn()
                    conn.commit()
                    return result
                except Exception as exc:
                    conn.rollback()
                    if backend.classify(exc) is not ErrorKind.RETRYABLE:
                        raise
                    retries[slot] += 1

        def guards(rows: Sequence[Sequence[Any]]) -> str:
            return json.dumps([{"job_id": row[0], "generation": row[GENERATION_COLUMN],
                                "worker_id": worker_id} for row in rows])

        def complete_one(guard: dict[str, Any]) -> int:
            return int(backend.execute(cur, "complete", guard).rowcount)

        def complete_claim(claims: str) -> list[Sequence[Any]]:
            rows = backend.execute(cur, str(combined), {**params, "claims": claims})
            claimed = []
            for kind, *row in rows.fetchall():
                if kind == "done":
                    done[slot] += 1
                else:
                    claimed.append(row)
            return claimed

        params = {**claim_params(name, batch), "worker_id": worker_id}
        combined = complete_claim_sql(backend) if complete == "complete_claim" else None
        try:
            rows = tx(lambda: backend.claim_rows(cur, params))
            while rows:
                if complete == "complete_claim":
                    rows = tx(functools.partial(complete_claim, guards(rows)))
                    continue
                if complete == "complete_many":
                    done[slot] += len(tx(functools.partial(backend.fenced_rows, cur, complete,
                                                           {"claims": guards(rows)})))
                else:
                    for row in rows:
                        guard = {"job_id": row[0], "generation": row[GENERATION_COLUMN],
                                 "worker_id": worker_id}
                        done[slot] += tx(functools.partial(complete_one, guard))
                rows = tx(lambda: backend.claim_rows(cur, params))
        finally:
            close_quietly(cur)
            close_quietly(conn)

    threads = [threading.Thread(target=loop, args=(i,), name=f"portq-bench-raw-{i}")
               for i in range(workers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    clear_queue(queue, name, jobs + 1)
    if errors:
        raise errors[0]
    return {"engine": backend.engine, "complete": complete, "workers": workers,
            "batch": batch, "jobs": jobs, "succeeded": sum(done), "retries": sum(retries),
            "seconds": round(elapsed, 4), "jobs_per_s": round(sum(done) / elapsed, 1)}
