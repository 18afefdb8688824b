"""Workflows built from job dependencies: groups, callbacks and chains, enqueued in one
transaction.

    from portq.workflow import group, job, enqueue

    flow = group(job("resize", {"img": 1}), job("resize", {"img": 2})).then(
        job("notify", {"album": 7}))                 # fan-out, then a callback (fan-in)
    steps = job("etl", "extract").then(job("etl", "transform")).then(job("etl", "load"))
    done = enqueue(queue, flow, conn=session)        # every job, or none, with the caller's

Each job of a step depends on every last job of the step before it, so it runs once they
all succeeded and reads their results with ``job.dependency_results()`` (a chain's step:
:func:`previous_result`). A dependency that ends dead or cancelled cancels what follows,
unless the job was given ``on_dependency_failure="run"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from portq.errors import ConfigurationError
from portq.job import EnqueueResult, Job
from portq.protocol import NewJob

if TYPE_CHECKING:
    from portq.queue import Queue


class Node:
    """A part of a workflow: one job, a group running side by side, or a sequence."""

    def then(self, after: Node) -> Node:
        """This part, then ``after`` once every last job of this part succeeded."""
        if not isinstance(after, Node):
            raise ConfigurationError(f"then() takes a job(), group() or chain, got {after!r}")
        return _Then(self, after)


@dataclass(frozen=True)
class _Job(Node):
    queue: str
    payload: Any
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Group(Node):
    members: tuple[Node, ...]


@dataclass(frozen=True)
class _Then(Node):
    first: Node
    after: Node


def job(queue: str, payload: Any = None, **options: Any) -> Node:
    """One job: the arguments of :meth:`portq.Queue.enqueue` (``depends_on`` adds to the
    workflow's own dependencies)."""
    if "conn" in options:
        raise ConfigurationError("give conn= to portq.workflow.enqueue, not to job()")
    return _Job(queue, payload, dict(options))


def group(*members: Node) -> Node:
    """Parts that run side by side; what follows waits for every one of them."""
    if not members or not all(isinstance(m, Node) for m in members):
        raise ConfigurationError("group() takes one or more job(), group() or chains")
    return _Group(tuple(members))


@dataclass(frozen=True)
class Enqueued:
    """What :func:`enqueue` wrote: every job id in order, and the last step's ids."""

    ids: list[int]
    last: list[int]


def enqueue(queue: Queue, flow: Node, *, conn: Any = None) -> Enqueued:
    """Enqueue every job of ``flow`` in one transaction: portq's own, or the caller's
    ``conn`` (then nothing is committed or rolled back here). Every job is validated, and
    the queue's enqueue hooks run for it (:mod:`portq.hooks`), before anything is written."""
    planned = _plan(queue, flow)
    backend = queue.backend
    dbapi = queue._dbapi(conn)
    hooked, seen = queue.hooks.prepare([new_job for new_job, _ in planned])
    results: list[EnqueueResult] = []

    def write(cur: Any) -> Enqueued:
        results.clear()  # a retried transaction starts over
        ids: list[int] = []
        for new_job, (_, after) in zip(hooked, planned, strict=True):
            depends = sorted({*new_job.depends_on, *(ids[i] for i in after)})
            results.append(backend.insert_all(cur, [_with_dependencies(new_job, depends)])[0])
            ids.append(results[-1].id)
        last = [ids[i] for i in _last(flow, _Counter())]
        return Enqueued(ids, last)
    try:
        done = backend.run("workflow", write) if dbapi is None else \
            backend.on_connection(dbapi, write)
    except BaseException as exc:
        queue.hooks.finish(seen, None, exc)
        raise
    queue.hooks.finish(seen, results)
    return done


def previous_result(job: Job) -> Any:
    """A chain step's view of the step before it: the one dependency's result (None when
    it stored none); more than one dependency is an error (use ``dependency_results``)."""
    results = job.dependency_results()
    if len(results) > 1:
        raise ConfigurationError(f"job {job.id} has {len(results)} dependencies with results; "
                                 "read them with job.dependency_results()")
    return next(iter(results.values()), None)


class _Counter:
    """Numbers the jobs of a flow in the order :func:`_plan` and :func:`_last` walk it."""

    def __init__(self) -> None:
        self.n = 0

    def take(self) -> int:
        self.n += 1
        return self.n - 1


def _plan(queue: Queue, flow: Node) -> list[tuple[NewJob, list[int]]]:
    """Each job as validated (``queue.new_job``) with the indexes of the jobs it follows."""
    planned: list[tuple[NewJob, list[int]]] = []

    def place(node: Node, after: list[int]) -> list[int]:
        if isinstance(node, _Job):
            planned.append((queue.new_job(node.queue, node.payload, **node.options), after))
            return [len(planned) - 1]
        if isinstance(node, _Group):
            return [i for member in node.members for i in place(member, after)]
        if isinstance(node, _Then):
            return place(node.after, place(node.first, after))
        raise ConfigurationError(f"not a workflow part: {node!r}")
    place(flow, [])
    return planned


def _last(node: Node, counter: _Counter) -> list[int]:
    """The indexes of the last jobs of ``node`` (walked in :func:`_plan`'s order)."""
    if isinstance(node, _Job):
        return [counter.take()]
    if isinstance(node, _Group):
        return [i for member in node.members for i in _last(member, counter)]
    assert isinstance(node, _Then)
    _last(node.first, counter)
    return _last(node.after, counter)


def _with_dependencies(new_job: NewJob, depends: Sequence[int]) -> NewJob:
    return replace(new_job, depends_on=tuple(depends))


def graph(queue: Queue, job_id: int, limit: int = 1000) -> list[dict[str, Any]]:
    """The workflow around ``job_id``: every job reachable through dependencies either way
    (at most ``limit``), each ``{"id", "state", "queue", "after": [ids]}``, by id."""
    backend = queue.backend
    seen: dict[int, dict[str, Any]] = {}
    todo = [job_id]
    while todo and len(seen) < limit:
        current = todo.pop()
        if current in seen:
            continue
        record = queue.job(current)
        before, after = backend.job_graph(current)
        seen[current] = {"id": current, "state": None if record is None else record.state,
                         "queue": None if record is None else record.queue,
                         "after": [i for i, _ in before]}
        todo += [i for i, _ in before] + [i for i, _ in after]
    return [seen[i] for i in sorted(seen)]
