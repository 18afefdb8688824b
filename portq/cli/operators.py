"""``portq reap``, ``prune``, ``retry``, ``cancel`` and ``delete``: operator actions on
jobs, by id or in bounded batches."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import portq
from portq.cli.common import Commands, duration, emit, job_ids, open_queue, positive
from portq.durations import format_duration
from portq.errors import ConfigurationError


def cmd_reap(args: argparse.Namespace) -> int:
    with open_queue(args) as q:
        n = q.reap(limit=args.limit, delay=args.delay)
    emit(args, {"reaped": n},
          f"returned {n} expired lease{'' if n == 1 else 's'} (to ready, or to dead when "
          "attempts were spent)")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    states = args.state or ["succeeded", "cancelled"]
    total = 0
    with open_queue(args) as q:
        while True:
            n = q.prune(args.older_than, limit=args.limit, states=states, queue=args.queue)
            total += n
            if n < args.limit or not args.all:
                break
    age = format_duration(args.older_than)
    more = n == args.limit and not args.all
    text = (f"deleted {total} {' or '.join(states)} job{'' if total == 1 else 's'} older "
            f"than {age}" + (f" from queue {args.queue}" if args.queue else "") +
            ("; more may be left: repeat, or add --all" if more else ""))
    emit(args, {"deleted": total, "states": states, "older_than_s": args.older_than,
                 "queue": args.queue, "more": more}, text)
    return 0


def _bulk(args: argparse.Namespace, action: Callable[[], int]) -> tuple[int, bool]:
    """Run one bounded batch (--limit), or batches until one comes back short (--all);
    return the total and whether more may be left."""
    total = 0
    while True:
        n = action()
        total += n
        if n < args.limit or not args.all:
            return total, n == args.limit and not args.all


def _single(q: portq.Queue, ids: Sequence[int], act: Callable[[int], bool], done: str,
            wanted: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Apply ``act`` to each job id; say for each what happened (or why not)."""
    results, lines = [], []
    for job_id in ids:
        if act(job_id):
            results.append({"id": job_id, "result": done})
            lines.append(f"{done} job {job_id}")
            continue
        record = q.job(job_id)
        if record is None:
            results.append({"id": job_id, "result": "no such job"})
            lines.append(f"no such job {job_id}")
        else:
            results.append({"id": job_id, "result": f"not {wanted}", "state": record.state})
            lines.append(f"job {job_id} is {record.state}, not {wanted}")
    return results, lines


def _operator(args: argparse.Namespace, verb: str, wanted: str, default_states: list[str],
              one: Callable[[portq.Queue, int], bool],
              many: Callable[[portq.Queue, list[str]], int]) -> int:
    """``portq retry`` / ``portq cancel``: job ids, or --queue Q [--state S] in batches."""
    ids = job_ids(args)
    if ids and (args.queue or args.state or args.all):
        raise ConfigurationError("give job ids or --queue (with --state/--all), not both")
    if not ids and not args.queue:
        raise ConfigurationError(f"nothing to {args.command}: give job ids, or --queue Q "
                                 "for a bulk action")
    with open_queue(args) as q:
        if ids:
            results, lines = _single(q, ids, lambda i: one(q, i), verb, wanted)
            emit(args, results, "\n".join(lines))
            return 0 if all(r["result"] == verb for r in results) else 1
        states = args.state or default_states
        total, more = _bulk(args, lambda: many(q, states))
    emit(args, {verb: total, "queue": args.queue, "states": states, "more": more},
          f"{verb} {total} {' or '.join(states)} job{'' if total == 1 else 's'} of queue "
          f"{args.queue}" + ("; more may be left: repeat, or add --all" if more else ""))
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    extra = args.extra_attempts
    return _operator(args, "retried", "dead or cancelled", ["dead"],
                     lambda q, i: q.retry_dead(i, extra_attempts=extra),
                     lambda q, states: q.retry_many(args.queue, states=states,
                                                    limit=args.limit, extra_attempts=extra))


def cmd_cancel(args: argparse.Namespace) -> int:
    return _operator(args, "cancelled", "ready or running", ["ready"],
                     lambda q, i: q.cancel(i),
                     lambda q, states: q.cancel_many(args.queue, states=states,
                                                     limit=args.limit))


def cmd_delete(args: argparse.Namespace) -> int:
    ids = job_ids(args)
    if not ids:
        raise ConfigurationError("nothing to delete: give job ids (portq prune deletes "
                                 "finished jobs by age)")
    with open_queue(args) as q:
        results, lines = _single(q, ids, q.delete_finished, "deleted",
                                 "finished (succeeded, dead or cancelled)")
    emit(args, results, "\n".join(lines))
    return 0 if all(r["result"] == "deleted" for r in results) else 1


def add_delete(cmds: Commands) -> None:
    p = cmds.command("delete", cmd_delete, "delete finished (succeeded, dead or cancelled) "
                     "jobs by id, with their errors and results")
    p.add_argument("job_ids", nargs="*", metavar="JOB_ID",
                   help="jobs to delete (URL may be left out when $PORTQ_URL is set)")


def add_reap(cmds: Commands) -> None:
    p = cmds.command("reap", cmd_reap, "return expired leases to ready (or dead)")
    p.add_argument("--limit", type=positive, default=1000,
                   help="most jobs returned (default 1000)")
    duration(p, "--delay", 1.0, "how long a returned job waits before it runs again")


def add_prune(cmds: Commands) -> None:
    p = cmds.command("prune", cmd_prune, "delete finished jobs in bounded batches")
    duration(p, "--older-than", None, "delete jobs finished longer ago than this (e.g. 7d)",
             required=True)
    p.add_argument("--limit", type=positive, default=1000,
                   help="most jobs deleted per batch (default 1000)")
    p.add_argument("--state", action="append", choices=["succeeded", "cancelled", "dead"],
                   help="states to delete; repeat for more (default succeeded and cancelled; "
                        "dead is kept)")
    p.add_argument("--queue", default=None, help="one queue (default: every queue)")
    p.add_argument("--all", action="store_true", help="repeat batches until none is left")


def add_retry_cancel(cmds: Commands) -> None:
    for name, fn, help_, states, default in (
            ("retry", cmd_retry, "make dead (or cancelled) jobs ready again: by id, or every "
             "job of a queue in a state", ["dead", "cancelled"], "dead"),
            ("cancel", cmd_cancel, "cancel ready (or running) jobs: by id, or every job of "
             "a queue in a state", ["ready", "running"], "ready")):
        p = cmds.command(name, fn, help_)
        p.add_argument("job_ids", nargs="*", metavar="JOB_ID",
                       help="jobs to act on (URL may be left out when $PORTQ_URL is set)")
        p.add_argument("--queue", default=None, help="act on the jobs of this queue instead")
        p.add_argument("--state", action="append", choices=states,
                       help=f"with --queue: jobs in this state; repeat for more (default "
                            f"{default})")
        p.add_argument("--limit", type=positive, default=1000,
                       help="with --queue: most jobs per batch (default 1000)")
        p.add_argument("--all", action="store_true",
                       help="with --queue: repeat batches until none is left")
        if name == "retry":
            p.add_argument("--extra-attempts", type=positive, default=1,
                           help="attempts added to those the job had left (default 1)")
