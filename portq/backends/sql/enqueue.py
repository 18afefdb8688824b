"""Enqueue: inserting jobs, uniqueness scopes, dependencies (the logic in
:mod:`portq.backends.dependencies`) and announcing new jobs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

from portq.backends import dependencies
from portq.backends.sql.common import in_job_id_order
from portq.backends.sql.schema import Schema
from portq.errors import DatabaseError
from portq.job import EnqueueResult
from portq.protocol import NewJob


class Enqueue(Schema):
    """Inserting jobs and the dependency glue."""

    # ---- enqueue ------------------------------------------------------------------------

    def accepts_connection(self, conn: Any) -> bool:
        return type(conn).__module__.split(".")[0] == self.driver_module

    def enqueue_results(self, jobs: Sequence[NewJob],
                        conn: Any | None = None) -> list[EnqueueResult]:
        if conn is None:
            return self.run("enqueue", lambda cur: self.insert_all(cur, jobs))
        return self.on_connection(conn, lambda cur: self.insert_all(cur, jobs))

    def insert_all(self, cur: Any, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """:meth:`insert_jobs` for runs of jobs without a uniqueness scope, and
        :meth:`insert_scoped` for each job with one; results in the order given. Jobs with
        dependencies: see :meth:`insert_dependent`."""
        if any(job.depends_on for job in jobs):
            return self.insert_dependent(cur, jobs)
        if all(job.unique is None for job in jobs):
            return self.insert_jobs(cur, jobs)
        results: list[EnqueueResult] = []
        start = 0
        while start < len(jobs):
            end = start
            while end < len(jobs) and jobs[end].unique is None:
                end += 1
            if end > start:
                results += self.insert_jobs(cur, jobs[start:end])
            else:
                results.append(self.insert_scoped(cur, jobs[start]))
                end = start + 1
            start = end
        return results

    def insert_scoped(self, cur: Any, job: NewJob) -> EnqueueResult:
        """Enqueue ``job`` unless its scoped key's latest job is still live in its scope
        (then that job's id, ``created=False``). The key's row is locked first, so that
        concurrent enqueues of one scoped key take turns (schema.sql, migration 6)."""
        unique = job.unique
        assert unique is not None
        params = {"hash": unique.hash}
        self.ensure_row(cur, "unique_ensure", params)
        locked = self.execute(cur, "unique_lock", params).fetchone()
        if locked is not None and locked[0] is not None and unique.holds_key(self.execute(
                cur, "unique_job", {"job_id": locked[0], "period_ms": unique.period_ms}
        ).fetchone()):
            return EnqueueResult(int(locked[0]), False)
        result = self.insert_job(cur, self.job_params(job))
        if result is None:
            raise DatabaseError("a scoped-unique job has no job key, yet its insert conflicted")
        self.execute(cur, "unique_point", {**params, "job_id": result.id})
        self.announce(cur, [job.queue])
        return result

    def insert_jobs(self, cur: Any, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """Insert each job on ``cur`` (never committing); existing keys return their id."""
        results = []
        for job in jobs:
            params = self.job_params(job)
            result = self.insert_job(cur, params)
            results.append(EnqueueResult(self.job_id_of_key(cur, job.key), False)
                           if result is None else result)
        self.announce(cur, sorted({job.queue for job in jobs}))
        return results

    def job_id_of_key(self, cur: Any, key: str | None) -> int:
        """The id of the job holding ``key`` (after an insert conflicted on it)."""
        row = self.execute(cur, "job_id_by_key", {"key": key}).fetchone()
        if row is None:
            raise DatabaseError(f"job key {key!r} conflicted but no job holds it")
        return int(row[0])

    def announce(self, cur: Any, queues: Sequence[str]) -> None:
        """Tell idle workers of ``queues`` that jobs arrived, effective when the enqueuing
        transaction commits. Default: nothing; workers find new jobs by polling."""

    def job_params(self, job: NewJob) -> dict[str, Any]:
        return {
            "queue": job.queue, "payload": job.payload_json, "priority": job.priority,
            "run_at": None if job.run_at is None else self.to_db_time(job.run_at),
            "delay_ms": job.delay_ms, "max_attempts": job.max_attempts, "key": job.key,
            "concurrency_key": job.concurrency_key, "concurrency_limit": job.concurrency_limit,
            "timeout_ms": job.timeout_ms,
            "meta": job.meta,
        }

    def insert_job(self, cur: Any, params: dict[str, Any]) -> EnqueueResult | None:
        """Insert one job; return what happened, or None when its key already exists (the
        caller then looks the existing id up)."""
        row = self.execute(cur, "insert_job", params).fetchone()
        return None if row is None else EnqueueResult(int(row[0]), True)

    # ---- job dependencies (migration 12; the logic is portq/backends/dependencies.py) ----

    #: True where the ``complete_many`` statement itself releases the dependents of the
    #: jobs it completes (PostgreSQL's data-modifying CTEs), so that it may run as one
    #: autocommit statement; elsewhere it returns ``has_dependents`` and runs in a
    #: transaction that :meth:`completed_dependencies` continues
    completes_dependents_in_statement: ClassVar[bool] = False

    def insert_dependent(self, cur: Any, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """Enqueue jobs of which some have dependencies: lock and read every dependency
        first (an unknown id is refused before anything is written), insert each job, then
        record its edges and make it wait (or cancel it: a dependency already failed)."""
        states = dependencies.lock_dependencies(self, cur, jobs)
        results: list[EnqueueResult] = []
        for job in jobs:
            result = self.insert_all(cur, [replace(job, depends_on=())])[0]
            if job.depends_on:
                dependencies.attach(self, cur, job, result, states)
            results.append(result)
        return results

    def dependents_update(self, cur: Any, name: str, params: dict[str, Any]) -> None:
        """Run ``dep_release`` / ``dep_cancel`` (an update of a dependency's waiting
        dependents). Default: one statement; MySQL/MariaDB lock the ids first."""
        self.execute(cur, name, params)

    def completed_dependencies(self, cur: Any, flagged: Sequence[int]) -> None:
        """Release the dependents of jobs this transaction completed (``flagged``: those
        with ``has_dependents``)."""
        if flagged:
            dependencies.completed(self, cur, flagged)

    def settle_dependencies(self, cur: Any) -> None:
        """Resolve the dependents of jobs this transaction ended dead or cancelled."""
        dependencies.settle(self, cur)

    def settled_count(self, cur: Any, changed: int) -> int:
        """After a batch that ended ``changed`` jobs' attempts (reap, cancel_many): settle
        the dependents of those that ended dead or cancelled; return ``changed``."""
        if changed:
            self.settle_dependencies(cur)
        return changed

    def _settled_many(self, op: str, params: Sequence[dict[str, Any]]) -> list[bool]:
        """A one-row operation (``release``, ``cancel``) that may end its job dead or
        cancelled, for each of ``params`` in one transaction (rows taken in job id order),
        dependents settled in it too; whether each changed its row, in ``params``' order."""
        if not params:
            return []

        def go(cur: Any) -> list[bool]:
            changed = [False] * len(params)
            for i in in_job_id_order(params):
                changed[i] = self.execute(cur, op, params[i]).rowcount == 1
            if any(changed):
                self.settle_dependencies(cur)
            return changed
        return self.run(op, go)

    def dependency_results(self, job_id: int, conn: Any | None = None) -> dict[int, Any]:
        """``{dependency id: result}`` for the job's dependencies that stored a result."""
        return dependencies.dependency_results(self, job_id, conn)

    def job_graph(self, job_id: int) -> tuple[list[tuple[int, str | None]],
                                             list[tuple[int, str]]]:
        """A job's dependencies and dependents, ``(id, state)`` each."""
        return dependencies.graph(self, job_id)

