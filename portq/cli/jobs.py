"""``portq enqueue``, ``jobs``, ``job`` and ``workflow``: add a job, list jobs, show one."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any

from portq.cli.common import (
    Commands,
    cell,
    duration,
    emit,
    job_ids,
    non_negative,
    open_queue,
    positive,
    print_table,
    timestamp,
)
from portq.errors import ConfigurationError, PayloadError
from portq.job import ALL_STATES, SCHEDULED, JobRecord, State, error_line
from portq.queue import MAX_PAYLOAD_DEPTH

JOB_COLUMNS = ["id", "state", "queue", "priority", "run_at", "attempts", "progress", "key",
               "last_error"]


def cmd_enqueue(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"--payload is not valid JSON: {exc}") from None
    except RecursionError:
        raise PayloadError(f"--payload nests arrays/objects more than "
                           f"{MAX_PAYLOAD_DEPTH} levels deep, the limit on every engine") from None
    with open_queue(args) as q:
        result = q.enqueue_result(args.queue, payload, priority=args.priority,
                                  run_at=args.run_at, delay=args.delay, key=args.key,
                                  max_attempts=args.max_attempts, timeout=args.timeout,
                                  **unique_options(args), **dependency_options(args))
    if result.created:
        text = f"created job {result.id} on queue {args.queue}"
    else:
        text = f"existing job {result.id} (key {args.key})"
    emit(args, {"id": result.id, "created": result.created, "queue": args.queue,
                "key": args.key}, text)
    return 0


def dependency_options(args: argparse.Namespace) -> dict[str, Any]:
    """``--depends-on 3,4`` and ``--on-dependency-failure`` of ``portq enqueue``."""
    if args.depends_on is None:
        return {}
    try:
        ids = [int(part) for part in args.depends_on.split(",") if part.strip()]
    except ValueError:
        raise ConfigurationError(f"--depends-on {args.depends_on!r} must be job ids separated "
                                 "by commas, e.g. 3,4") from None
    return {"depends_on": ids, "on_dependency_failure": args.on_dependency_failure}


def unique_options(args: argparse.Namespace) -> dict[str, Any]:
    """The scoped-uniqueness options of ``portq enqueue`` that were given."""
    options: dict[str, Any] = {}
    if args.unique_per_queue:
        options["unique_per_queue"] = True
    if args.unique_for is not None:
        options["unique_for"] = args.unique_for
    if args.unique_states is not None:
        options["unique_states"] = [s for s in args.unique_states.split(",") if s]
    return options


def cmd_jobs(args: argparse.Namespace) -> int:
    with open_queue(args) as q:
        records = q.jobs(args.state, queue=args.queue, limit=args.limit,
                         after_id=args.after_id)
    if args.json:
        print(json.dumps([r.as_dict() for r in records], indent=2))
        return 0
    which = "jobs" if args.state == ALL_STATES else f"{args.state} jobs"
    where = f" on queue {args.queue}" if args.queue else ""
    if not records:
        print(f"no {which}{where}" + (f" after id {args.after_id}" if args.after_id else ""))
        return 0
    print_table(JOB_COLUMNS, [[
        str(r.id), r.shown_state, r.queue, str(r.priority), cell(r.run_at),
        f"{r.attempts_spent}/{r.attempts_allowed}", (r.progress_text() or "-")[:40],
        r.key or "-",
        error_line(r.last_error)[:80] or "-"]
        for r in records])
    if len(records) == args.limit:
        print(f"(the first {args.limit} {which}{where} by id; next page: --after-id "
              f"{records[-1].id})")
    return 0


def cmd_workflow(args: argparse.Namespace) -> int:
    """``portq workflow URL ID``: the jobs linked to ID by dependencies, either way."""
    from portq.workflow import graph
    job_id = _one_job_id(args)
    with open_queue(args) as q:
        nodes = graph(q, job_id)
    if len(nodes) == 1 and nodes[0]["state"] is None:
        # no row and no job linked to it: not a pruned job of a workflow, none at all
        print(f"portq: error: no such job {job_id} (never enqueued, or pruned with no "
              "job left that depends on it)", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(nodes, indent=2))
        return 0
    print_table(["id", "state", "queue", "after"],
                [[str(n["id"]), cell(n["state"] or "pruned"), cell(n["queue"]),
                  ",".join(map(str, n["after"])) or "-"] for n in nodes])
    return 0


def _one_job_id(args: argparse.Namespace) -> int:
    """The one JOB_ID of ``portq job`` / ``portq workflow``."""
    ids = job_ids(args)
    if len(ids) != 1:
        raise ConfigurationError("give exactly one job id")
    return ids[0]


def cmd_job(args: argparse.Namespace) -> int:
    job_id = _one_job_id(args)
    with open_queue(args) as q:
        record = q.job(job_id)
        errors = q.error_history(job_id) if record is not None else []
        result = q.result(job_id) if record is not None else None
    if record is None:
        print(f"portq: error: no such job {job_id}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({**record.as_dict(), "result": result,
                          "errors": [e.as_dict() for e in errors]}, indent=2, default=str))
        return 0
    for line in _describe(record, result):
        print(line)
    print(f"errors ({len(errors)} recorded attempt{'' if len(errors) == 1 else 's'}):"
          if errors else "errors: none recorded")
    for e in errors:
        print(f"  attempt {e.attempt} by {e.worker_id} at {cell(e.failed_at)}:")
        for line in e.error.rstrip().splitlines():
            print(f"    {line}")
    return 0


def _describe(r: JobRecord, result: Any) -> Iterator[str]:
    fields: list[tuple[str, Any]] = [
        ("id", r.id), ("queue", r.queue), ("state", r.shown_state), ("priority", r.priority),
        ("attempts", f"{r.attempts_spent}/{r.attempts_allowed}" + (
            f" ({r.released} given back)" if r.released else "")),
        ("generation", r.attempts), ("key", r.key),
        ("run_at", r.run_at), ("created_at", r.created_at), ("finished_at", r.finished_at),
        ("worker_id", r.worker_id), ("lease_until", r.lease_until),
        ("payload", json.dumps(r.payload, ensure_ascii=False)),
        ("progress", None if r.progress_at is None else
         f"{r.progress_text()} (at {cell(r.progress_at)})"),
        ("meta", json.dumps(r.meta, ensure_ascii=False) if r.meta else None),
        ("result", None if r.state != State.SUCCEEDED else
         json.dumps(result, ensure_ascii=False)),
        ("last_error", error_line(r.last_error) or None)]
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        yield f"{name.ljust(width)}  {cell(value)}"


def add_enqueue(cmds: Commands) -> None:
    p = cmds.command("enqueue", cmd_enqueue, "add a job; says its id, and whether it is new")
    p.add_argument("--queue", required=True, help="queue name")
    p.add_argument("--payload", default="null", help="JSON payload (default null)")
    p.add_argument("--priority", type=int, default=0,
                   help="higher runs first among due jobs (default 0)")
    when = p.add_mutually_exclusive_group()
    duration(when, "--delay", None, "run no earlier than this from now (default: now)")
    when.add_argument("--run-at", type=timestamp, default=None, metavar="TIME",
                      help="run no earlier than this time, ISO 8601 with its UTC offset "
                           "(e.g. 2026-12-24T09:00:00+01:00)")
    p.add_argument("--key", default=None,
                   help="idempotency key, unique across all queues unless scoped below: an "
                        "existing job of this key is returned instead")
    p.add_argument("--max-attempts", type=positive, default=None,
                   help="attempts before the job is dead (default 25)")
    duration(p, "--timeout", None, "the longest one attempt may run: past it the attempt "
             "fails with JobTimeout and is retried (default: the worker's --job-timeout)")
    p.add_argument("--unique-per-queue", action="store_true",
                   help="scope --key to this queue")
    duration(p, "--unique-for", None, "scope --key to jobs created within this long (e.g. 1h)")
    p.add_argument("--unique-states", default=None, metavar="STATES",
                   help="scope --key to jobs in these states, e.g. ready,running")
    p.add_argument("--depends-on", default=None, metavar="IDS",
                   help="job ids, e.g. 3,4: the job waits until they all succeeded")
    p.add_argument("--on-dependency-failure", choices=("cancel", "run"), default="cancel",
                   help="when a dependency ends dead or cancelled: cancel this job "
                        "(default) or run it anyway")


def add_jobs(cmds: Commands) -> None:
    p = cmds.command("jobs", cmd_jobs, "list jobs by id: state, queue, priority, run_at, "
                     "attempts, key, last error")
    p.add_argument("--state", default=ALL_STATES, choices=[
                       State.READY.value, SCHEDULED,
                       *(s.value for s in State if s != State.READY), ALL_STATES],
                   help=f"only jobs in this state (default {ALL_STATES}); scheduled: ready "
                        "jobs not yet due (delayed, or waiting for a retry), by run_at")
    p.add_argument("--queue", default=None, help="one queue (default: every queue)")
    p.add_argument("--limit", type=positive, default=50, help="most jobs shown (default 50)")
    p.add_argument("--after-id", type=non_negative, default=0, metavar="ID",
                   help="start after this job id (the next page)")


def add_job(cmds: Commands) -> None:
    p = cmds.command("job", cmd_job, "one job in full, with the error of every failed attempt")
    p.add_argument("job_ids", nargs="*", metavar="JOB_ID",
                   help="the job (URL may be left out when $PORTQ_URL is set)")


def add_workflow(cmds: Commands) -> None:
    p = cmds.command("workflow", cmd_workflow, "the jobs linked to a job by dependencies, "
                     "either way: id, state, queue and the ids each one waits for")
    p.add_argument("job_ids", nargs="*", metavar="JOB_ID",
                   help="a job of the workflow (URL may be left out when $PORTQ_URL is set)")
