"""Job dependencies (migration 12), written once for every engine over named statements.

A job enqueued with ``depends_on`` waits (state ``waiting``, outside the ready index) with
``deps_left`` counting its unfinished dependencies. Each edge is a ``portq_job_dep`` row,
``resolved`` once its dependency's end was counted. Whatever ends a dependency (a
completion, a failure, the reaper, a give-back, a cancel) resolves its edges in the same
transaction, while it holds the dependency's row: the dependents' counters go down (the
last one makes a dependent ready), or, after ``dead``/``cancelled``, dependents that do not
run anyway are cancelled, and their own dependents after them.

Concurrency: an enqueue locks each dependency's row before reading its state and recording
the edge, so an edge is never added to a dependency being finished unseen; a dependency's
edges are resolved only by the transaction holding its row, so each is counted once; two
dependencies of one job ending at once serialise on the dependent's row, whose
``deps_left - 1`` is evaluated on the row as the later one finds it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from portq.errors import ConfigurationError
from portq.job import EnqueueResult

if TYPE_CHECKING:
    from portq.backends.sql.enqueue import Enqueue as SqlBackend  # the layer it needs
    from portq.protocol import NewJob

#: states in which a dependency is still to finish
UNFINISHED = frozenset({"ready", "running", "waiting"})
#: ``on_dependency_failure`` values and their ``dep_failure`` column value
ON_FAILURE = {"cancel": 0, "run": 1}


class UnknownDependency(ConfigurationError):
    """``depends_on`` named a job that does not exist (never enqueued, or pruned)."""


#: lengths of the id lists the dependency statements are sent with (a list is padded to the
#: next by repeating its last id): a few statement shapes for engines with statement
#: caches, each under Oracle's 1000 IN-list items and SQL Server's 2100 parameters
ID_LIST_LENGTHS = (1, 4, 16, 64, 256, 512)


def id_lists(ids: Sequence[int]) -> list[tuple[int, ...]]:
    """``ids`` in lists of the lengths in :data:`ID_LIST_LENGTHS`, each padded by repeating
    its last id (an IN list matches a repeated id once)."""
    longest = ID_LIST_LENGTHS[-1]
    out = []
    for i in range(0, len(ids), longest):
        chunk = tuple(ids[i:i + longest])
        size = next(n for n in ID_LIST_LENGTHS if n >= len(chunk))
        out.append(chunk + (chunk[-1],) * (size - len(chunk)))
    return out


def lock_dependencies(backend: SqlBackend, cur: Any, jobs: Sequence[NewJob]) -> dict[int, str]:
    """Lock every dependency row of ``jobs`` (ascending id: concurrent enqueues take them
    in one order) and read its state; raise :class:`UnknownDependency` before anything is
    written when one does not exist."""
    wanted = sorted({d for job in jobs for d in job.depends_on})
    states: dict[int, str] = {}
    for ids in id_lists(wanted):
        for job_id, state in backend.execute(cur, "dep_lock", {"dep_ids": ids}).fetchall():
            states[int(job_id)] = state_text(state)
    missing = [d for d in wanted if d not in states]
    if missing:
        raise UnknownDependency(f"depends_on: job {missing[0]} does not exist (it was never "
                                "enqueued, or it was pruned)")
    return states


def state_text(value: Any) -> str:
    """A state column's value as text (MySQL's binary collation returns bytes)."""
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)


def attach(backend: SqlBackend, cur: Any, job: NewJob, result: EnqueueResult,
           states: dict[int, str]) -> None:
    """Record the new job's edges and make it wait for its unfinished dependencies (or
    cancel it at once when one already ended dead/cancelled and it does not run anyway)."""
    if not result.created:
        return
    failed = [(d, states[d]) for d in job.depends_on
              if states[d] in ("dead", "cancelled")] if job.on_dependency_failure == "cancel" \
        else []
    left = 0 if failed else sum(states[d] in UNFINISHED for d in job.depends_on)
    for ids in id_lists(job.depends_on):
        if left:
            backend.execute(cur, "dep_flag", {"dep_ids": ids})
        backend.execute(cur, "dep_insert", {"job_id": result.id, "dep_ids": ids,
                                            "count_unfinished": int(not failed)})
    if failed:
        dep, state = failed[0]
        backend.execute(cur, "dep_cancel_job", {"job_id": result.id,
                                                "error": failure_reason(dep, state)})
    elif left:
        backend.execute(cur, "dep_wait", {"job_id": result.id, "deps_left": left,
                                          "dep_failure": ON_FAILURE[job.on_dependency_failure]})


def failure_reason(dep: int, state: str) -> str:
    """The ``last_error`` of a job cancelled because dependency ``dep`` ended ``state``."""
    return f"cancelled: its dependency, job {dep}, ended {state}"


def completed(backend: SqlBackend, cur: Any, flagged: Sequence[int]) -> None:
    """Resolve the edges of jobs this transaction just completed that have dependents
    (``has_dependents`` as the completion returned it)."""
    for job_id in sorted(flagged):
        resolve(backend, cur, job_id, "succeeded")


def settle(backend: SqlBackend, cur: Any) -> None:
    """Resolve the edges of the jobs this transaction ended dead or cancelled that have
    dependents (``dep_unsettled``: flagged and ended; the flag is cleared once resolved).
    Called by every operation that can end a job that way, after its statement."""
    for job_id, state in list(backend.execute(cur, "dep_unsettled").fetchall()):
        resolve(backend, cur, int(job_id), state_text(state))


def resolve(backend: SqlBackend, cur: Any, job_id: int, state: str) -> None:
    """Count ``job_id``'s end (``state``) off its waiting dependents; after dead/cancelled,
    cancel those that do not run anyway, then resolve their own dependents likewise."""
    pending = [(job_id, state)]
    while pending:
        dep, end = pending.pop()
        params = {"job_id": dep}
        backend.dependents_update(cur, "dep_release", {**params, "every": int(end == "succeeded")})
        if end != "succeeded":
            doomed = [(int(i), int(flag)) for i, flag in
                      backend.execute(cur, "dep_cancel_ids", params).fetchall()]
            if doomed:
                backend.dependents_update(cur, "dep_cancel", {
                    **params, "error": failure_reason(dep, end)})
                pending += [(i, "cancelled") for i, flag in doomed if flag]
        backend.execute(cur, "dep_resolve", params)
        if end != "succeeded":  # out of dep_unsettled's index (a success never re-runs)
            backend.execute(cur, "dep_unflag", params)


def revive(backend: SqlBackend, cur: Any, retried: Sequence[int]) -> None:
    """After ``retried`` jobs were made ready again (``retry_dead``/``retry_many``), in the
    same transaction: put back to ``waiting`` the dependents that their end cancelled (the
    reason :func:`failure_reason` wrote names one of them), then those dependents' own
    dependents likewise. A dependent is revived only when none of its other dependencies
    ended dead or cancelled or was pruned; its unfinished dependencies are locked (in id
    order, as an enqueue locks them), flagged, and its edges to them count again. A job an
    operator cancelled has no such reason and stays cancelled."""
    pending = sorted(set(retried))
    while pending:
        candidates: list[int] = []
        for ids in id_lists(pending):
            candidates += [int(row[0]) for row in
                           backend.execute(cur, "dep_revive_ids", {"dep_ids": ids}).fetchall()]
        pending = [job_id for job_id in sorted(set(candidates)) if _reopen(backend, cur, job_id)]


def _reopen(backend: SqlBackend, cur: Any, job_id: int) -> bool:
    """Revive one dependency-cancelled job (its row locked) unless one of its dependencies
    failed or is gone; True when it waits again."""
    wanted = [int(dep) for dep, _ in
              backend.execute(cur, "job_dependencies", {"job_id": job_id}).fetchall()]
    states: dict[int, str] = {}
    for ids in id_lists(wanted):
        for dep, state in backend.execute(cur, "dep_lock", {"dep_ids": ids}).fetchall():
            states[int(dep)] = state_text(state)
    if len(states) < len(wanted) or any(s in ("dead", "cancelled") for s in states.values()):
        return False
    unfinished = [dep for dep in wanted if states[dep] in UNFINISHED]
    if not unfinished:  # every dependency succeeded since: nothing to wait for
        return False
    for ids in id_lists(unfinished):
        backend.execute(cur, "dep_flag", {"dep_ids": ids})
        backend.execute(cur, "dep_reopen", {"job_id": job_id, "dep_ids": ids})
    return bool(backend.execute(cur, "dep_revive", {"job_id": job_id,
                                                    "deps_left": len(unfinished)}).rowcount)


def validate_depends_on(depends_on: Any, on_failure: Any) -> tuple[tuple[int, ...], str]:
    """``depends_on`` (job ids, or jobs/results with an ``id``) as a sorted tuple of
    distinct ids, and the failure policy; raise :class:`ConfigurationError` naming the
    problem."""
    if on_failure not in ON_FAILURE:
        raise ConfigurationError(f"on_dependency_failure={on_failure!r} must be 'cancel' "
                                 "or 'run'")
    if depends_on is None:
        return (), str(on_failure)
    if isinstance(depends_on, str | bytes | int) or not hasattr(depends_on, "__iter__"):
        raise ConfigurationError(f"depends_on must be a list of job ids, got {depends_on!r}")
    ids = set()
    for item in depends_on:
        value = getattr(item, "id", item)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(f"depends_on: {item!r} is not a job id")
        ids.add(value)
    return tuple(sorted(ids)), str(on_failure)


def dependency_results(backend: SqlBackend, job_id: int, conn: Any | None = None
                       ) -> dict[int, Any]:
    """``{dependency id: stored result}`` of the job's dependencies that stored one."""
    rows = backend.read("dependency_results", lambda cur: backend.execute(
        cur, "dependency_results", {"job_id": job_id}).fetchall(), conn)
    return {int(dep): backend.load_payload(value) for dep, value in rows}


def graph(backend: SqlBackend, job_id: int) -> tuple[list[tuple[int, str | None]],
                                                     list[tuple[int, str]]]:
    """A job's dependencies and dependents, each ``(id, state)`` (state None: pruned)."""
    def go(cur: Any) -> tuple[list[Any], list[Any]]:
        return (list(backend.execute(cur, "job_dependencies", {"job_id": job_id}).fetchall()),
                list(backend.execute(cur, "job_dependents", {"job_id": job_id}).fetchall()))
    before, after = backend.run("job_graph", go, write=False)
    return ([(int(i), None if s is None else state_text(s)) for i, s in before],
            [(int(i), state_text(s)) for i, s in after])


@dataclass(frozen=True)
class Neighbours:
    """One side of a job's place in a workflow, bounded for display: the first ``shown``
    jobs ``(id, state)`` by id (state None: pruned), how many ``more`` there are, and the
    count of every one of them by state (``"pruned"`` for pruned ones)."""

    shown: list[tuple[int, str | None]] = field(default_factory=list)
    more: int = 0
    states: dict[str, int] = field(default_factory=dict)


def neighbours(backend: SqlBackend, job_id: int, limit: int) -> tuple[Neighbours, Neighbours]:
    """A job's dependencies and dependents (the dashboard's job page): at most ``limit``
    of each kept, the rest only counted, so that a 10,000-job fan-in's callback shows a
    page, not 10,000 nodes."""
    before, after = graph(backend, job_id)
    return _bounded(before, limit), _bounded(list(after), limit)


def _bounded(jobs: list[tuple[int, str | None]], limit: int) -> Neighbours:
    """The first ``limit`` of ``jobs``, the number left out, and all of them by state."""
    states = Counter(state or "pruned" for _, state in jobs)
    return Neighbours(jobs[:limit], max(0, len(jobs) - limit), dict(sorted(states.items())))
