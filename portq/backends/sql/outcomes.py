"""Fenced writes of a claim's owner: renew, complete, fail, release, snooze, progress
and results (each written only while the claim still owns the job)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from portq.backends.sql.claim import Claiming
from portq.backends.sql.common import in_job_id_order, storable_error
from portq.job import Claim


class Outcomes(Claiming):
    """Fenced outcome writes."""

    @staticmethod
    def guard(claim: Claim) -> dict[str, Any]:
        return {"job_id": claim.job_id, "generation": claim.generation,
                "worker_id": claim.worker_id}

    def _guarded(self, op: str, params: dict[str, Any]) -> bool:
        return bool(self.run(op, lambda cur: self.execute(cur, op, params).rowcount == 1,
                             single=True))

    def renew(self, claim: Claim, lease_ms: int) -> bool:
        return self.renew_many([claim], lease_ms)[0]

    def renew_many(self, claims: Sequence[Claim], lease_ms: int) -> list[bool]:
        return self.fenced_many("renew_many", claims, {"lease_ms": lease_ms})

    def complete(self, claim: Claim) -> bool:
        return self.complete_many([claim])[0]

    def complete_many(self, claims: Sequence[Claim]) -> list[bool]:
        return self.fenced_many("complete_many", claims, {})

    @staticmethod
    def claims_json(claims: Sequence[Claim]) -> str:
        """The claims as the JSON array the ``*_many`` statements read:
        ``[{"job_id", "generation", "worker_id"}, ...]`` (formatted here, each worker id
        encoded once: a third of ``json.dumps``'s time, on the claim loop's thread)."""
        names: dict[str, str] = {}
        parts = []
        for c in claims:
            name = names.get(c.worker_id)
            if name is None:
                name = names[c.worker_id] = json.dumps(c.worker_id)
            parts.append(f'{{"job_id":{int(c.job_id)},"generation":{int(c.generation)},'
                         f'"worker_id":{name}}}')
        return "[" + ",".join(parts) + "]"

    def fenced_many(self, op: str, claims: Sequence[Claim], params: dict[str, Any]
                    ) -> list[bool]:
        """Run the fenced batch statement ``op`` (``complete_many``, ``renew_many``) for
        ``claims`` in one transaction, whatever their number; one result per claim: did it
        still own its job (and so was it written)?"""
        if not claims:
            return []
        params = {**params, "claims": self.claims_json(claims)}
        # a completion that may release dependents needs a transaction unless the engine's
        # statement does it itself (completes_dependents_in_statement)
        single = op != "complete_many" or self.completes_dependents_in_statement
        done = self.run(op, lambda cur: self.fenced_rows(cur, op, params), single=single)
        return [(c.job_id, c.generation) in done for c in claims]

    def fenced_rows(self, cur: Any, op: str, params: dict[str, Any]) -> set[tuple[int, int]]:
        """Run ``op`` in the open transaction; the ``(job_id, generation)`` of every row it
        wrote. Default: one statement returning those two columns (RETURNING / OUTPUT), and
        for ``complete_many`` a third, ``has_dependents``: those jobs' dependents are
        resolved in this transaction (:meth:`completed_dependencies`)."""
        rows = self.execute(cur, op, params).fetchall()
        self.completed_dependencies(cur, [int(r[0]) for r in rows if len(r) > 2 and r[2]])
        return {(int(r[0]), int(r[1])) for r in rows}

    def release(self, claim: Claim) -> bool:
        return self.release_many([claim])[0]

    def release_many(self, claims: Sequence[Claim]) -> list[bool]:
        """Each claim's ``release`` statement, all in one transaction (a worker shutting
        down, or giving back a look-ahead that waited too long, commits once, and on
        SQLite takes the write lock once): see :meth:`_settled_many`."""
        return self._settled_many("release", [self.guard(claim) for claim in claims])

    def snooze(self, claim: Claim, delay_ms: int, max_snoozes: int) -> bool:
        return self._guarded("snooze", {**self.guard(claim), "delay_ms": delay_ms,
                                        "max_snoozes": max_snoozes})

    def fail_params(self, claim: Claim, error: str, retry_in_ms: int | None) -> dict[str, Any]:
        """Parameters of the ``fail`` statement (also used by :mod:`portq.aio`). NUL and
        lone surrogates, which not every engine stores, are written as escapes."""
        error = storable_error(error)
        return {**self.guard(claim), "error": error[:4000],
                "retryable": 0 if retry_in_ms is None else 1,
                "retry_ms": max(0, retry_in_ms or 0)}

    def fail(self, claim: Claim, error: str, retry_in_ms: int | None) -> bool:
        params = self.fail_params(claim, error, retry_in_ms)
        error = storable_error(error)

        def go(cur: Any) -> bool:
            if self.execute(cur, "fail", params).rowcount != 1:
                return False
            self.execute(cur, "record_error", {**params, "error": error[:8000]})
            self.settle_dependencies(cur)
            return True
        return self.run("fail", go)

    # ---- progress -----------------------------------------------------------------------

    def set_progress(self, claim: Claim, fraction: float | None, note: str) -> bool:
        """Store a running job's progress report if ``claim`` still owns the job (fenced as
        :meth:`complete`); False: nothing was written."""
        return self.set_progress_many([(claim, fraction, note)])[0]

    def set_progress_many(self, reports: Sequence[tuple[Claim, float | None, str]]
                          ) -> list[bool]:
        """:meth:`set_progress` for several jobs in one transaction (a worker's progress
        writer); one result per report."""
        if not reports:
            return []
        params = [{**self.guard(claim), "progress": fraction,
                   "note": storable_error(note) or None} for claim, fraction, note in reports]
        return self.run("set_progress", lambda cur: [
            self.execute(cur, "set_progress", p).rowcount == 1 for p in params],
            single=len(params) == 1)

    # ---- results ------------------------------------------------------------------------

    def store_result(self, claim: Claim, result_json: str) -> bool:
        return self.store_results([(claim, result_json)])[0]

    def store_results(self, results: Sequence[tuple[Claim, str]]) -> list[bool]:
        """Each result stored while its claim owns the job (its row locked first), all in
        one transaction: one commit for a writer's batch, not one per job. Rows are locked
        in job id order, as a batch's completion locks them."""
        if not results:
            return []
        params = [{**self.guard(claim), "result": text} for claim, text in results]

        def go(cur: Any) -> list[bool]:
            stored = [False] * len(params)
            for i in in_job_id_order(params):
                if self.execute(cur, "lock_owned_job", params[i]).fetchone() is None:
                    continue
                self.execute(cur, "delete_result", params[i])
                self.insert_result(cur, params[i])
                stored[i] = True
            return stored
        return self.run("store_result", go)

    def insert_result(self, cur: Any, params: dict[str, Any]) -> None:
        """Insert the result row (Oracle binds the JSON text as a CLOB)."""
        self.execute(cur, "insert_result", params)

    def result(self, job_id: int, conn: Any | None = None) -> Any:
        row = self.read("job_result", lambda cur: self.execute(
            cur, "job_result", {"job_id": job_id}).fetchone(), conn)
        return None if row is None else self.load_payload(row[0])

