"""The ``portq`` command. ``PORTQ_URL`` stands in for the URL argument everywhere."""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import logging
import os
import re
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, NoReturn

import portq
from portq.aio import AsyncQueue, AsyncWorker
from portq.errors import ConfigurationError, PayloadError, PortqError
from portq.job import ALL_STATES, SCHEDULED, Job, JobRecord, State, error_line
from portq.logs import FORMATS, LEVELS, configure_logging
from portq.queue import MAX_PAYLOAD_DEPTH
from portq.rates import parse_rate, period_text
from portq.registry import live_workers, workers_per_queue
from portq.retry import Backoff
from portq.tasks import TaskRouter, import_module, load_app
from portq.tasks import queues as task_queues
from portq.worker import Worker

DESCRIPTION = ("portq: background jobs kept in an ordinary SQL table, claimed safely by "
               "competing workers. Each command takes the database URL as its first "
               "argument, or from $PORTQ_URL.")
DEFAULT_DEMO_URL = "sqlite:///portq-demo.sqlite3"
DEFAULT_PREFIX = "portq_"
UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
UNIT_HELP = "ms, s, m, h, d or w (e.g. 500ms, 30s, 15m, 12h, 7d)"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)$")
#: the shortest --lease the heartbeat can keep alive: it renews every third of the lease,
#: and a renewal's round trip must arrive before the lease ends
MIN_LEASE_S = 1.0


def parse_duration(text: str) -> float:
    """``'500ms'``, ``'30s'``, ``'15m'``, ``'2h'``, ``'7d'``, ``'1w'`` -> seconds. A unit is
    required: a bare number is an error naming the units."""
    value = text.strip()
    if value.startswith("-"):
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: must not be negative")
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        raise argparse.ArgumentTypeError(
            f"duration {text!r} needs a unit: one of {UNIT_HELP}")
    m = _DURATION.match(value)
    if not m:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: a number and a unit, one of {UNIT_HELP}")
    return float(m.group(1)) * UNITS[m.group(2)]


def format_duration(seconds: float) -> str:
    """Seconds in the largest unit up to days that holds them whole: 604800 -> ``'7d'``."""
    for unit in ("d", "h", "m", "s", "ms"):
        size = UNITS[unit]
        count = seconds / size
        if count >= 1 and abs(count - round(count)) < 1e-9:
            return f"{round(count)}{unit}"
    return f"{seconds:g}s"


def parse_lease(text: str) -> float:
    """A duration the heartbeat can renew: at least :data:`MIN_LEASE_S`."""
    seconds = parse_duration(text)
    if seconds < MIN_LEASE_S:
        raise argparse.ArgumentTypeError(
            f"lease {text!r} is too short: the heartbeat renews a lease every third of it, "
            f"so the minimum is {format_duration(MIN_LEASE_S)}")
    return seconds


def load_handler(spec: str, what: str = "handler") -> Callable[[Job], Any]:
    """Import ``module:function`` (a ``what``: handler, middleware); a clear error when it
    does not import."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"{what} {spec!r} must look like module:function")
    target: Any = import_module(module_name, what)
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigurationError(f"{what} {spec!r}: {module_name} has no {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigurationError(f"{what} {spec!r} is not callable")
    return target  # type: ignore[no-any-return]


def _instrument(args: argparse.Namespace, q: portq.Queue) -> None:
    """``--otel``: trace the worker's jobs with the application's OpenTelemetry setup."""
    if not args.otel:
        return
    try:
        from portq.contrib import otel
    except ModuleNotFoundError as exc:
        raise ConfigurationError(f"--otel needs OpenTelemetry ({exc.name} is missing): pip "
                                 "install 'portq[otel]', and configure an SDK and exporter "
                                 "(e.g. in the --handler/--app module)") from None
    otel.instrument(q)


def _url(args: argparse.Namespace) -> str:
    url = args.url or os.environ.get("PORTQ_URL")
    if not url:
        raise ConfigurationError("no database URL: pass URL or set PORTQ_URL")
    return str(url)


def _open(args: argparse.Namespace, *, create: bool = False) -> portq.Queue:
    """The command's queue. Only ``create`` (``portq migrate``) may create a SQLite file:
    every other command on a mistyped path says so instead of leaving an empty file."""
    url = _url(args)
    sized = {"pool_size": args.pool_size} if getattr(args, "pool_size", None) else {}
    queue = portq.connect(url, prefix=args.prefix, **sized)  # checks the URL's options first
    if not create:
        try:
            refuse_missing_sqlite_file(url)
        except ConfigurationError:
            queue.close()
            raise
    return queue


def refuse_missing_sqlite_file(url: str) -> None:
    """A clear error when ``url`` names a SQLite file that does not exist."""
    parsed = portq.url.parse_url(url)
    if parsed.engine == "sqlite" and parsed.path != ":memory:" and \
            not os.path.exists(parsed.path):
        raise ConfigurationError(f"no SQLite database at {parsed.path} (a typo? "
                                 "`portq migrate URL` creates it)")


def _job_ids(args: argparse.Namespace) -> list[int]:
    """The JOB_ID arguments; with $PORTQ_URL set, the first one may stand where URL does
    (``portq retry 1 2``)."""
    texts = list(args.job_ids)
    if args.url is not None and "://" not in args.url:
        texts.insert(0, args.url)   # not a URL: the first job id ($PORTQ_URL is the URL)
        args.url = None
    ids = []
    for text in texts:
        if not re.fullmatch(r"\d+", text) or int(text) < 1:
            raise ConfigurationError(f"job id {text!r} is not a positive integer")
        ids.append(int(text))
    return ids


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """Print ``data`` as JSON with --json, else ``text``."""
    print(json.dumps(data, indent=2, default=str) if getattr(args, "json", False) else text)


# ---- commands -----------------------------------------------------------------------------

def cmd_migrate(args: argparse.Namespace) -> int:
    with _open(args, create=True) as q:
        before = q.backend.schema_version()
        after = q.migrate()
        url = q.url
    if after == before:
        text = f"schema already at v{after}"
    elif before == 0:
        text = f"created schema v{after}"
    else:
        text = f"upgraded schema from v{before} to v{after}"
    _emit(args, {"url": url, "prefix": args.prefix, "before": before, "version": after,
                 "changed": after != before}, f"{text} ({url}, prefix {args.prefix})")
    return 0


def cmd_enqueue(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"--payload is not valid JSON: {exc}") from None
    except RecursionError:
        raise PayloadError(f"--payload nests arrays/objects more than "
                           f"{MAX_PAYLOAD_DEPTH} levels deep, the limit on every engine") from None
    with _open(args) as q:
        result = q.enqueue_result(args.queue, payload, priority=args.priority,
                                  delay=args.delay, key=args.key,
                                  max_attempts=args.max_attempts, timeout=args.timeout,
                                  **unique_options(args), **dependency_options(args))
    if result.created:
        text = f"created job {result.id} on queue {args.queue}"
    else:
        text = f"existing job {result.id} (key {args.key})"
    _emit(args, {"id": result.id, "created": result.created, "queue": args.queue,
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


def worker_handler(args: argparse.Namespace) -> tuple[Callable[[Job], Any], list[str]]:
    """The handler and queues of ``portq worker``: ``--handler`` serves ``--queue``;
    ``--app`` dispatches to its tasks and serves their queues (``--queue`` narrows)."""
    if (args.handler is None) == (args.app is None):
        raise ConfigurationError("portq worker needs exactly one of --handler module:function "
                                 "and --app module")
    if args.handler is not None:
        if not args.queue:
            raise ConfigurationError("--handler needs at least one --queue")
        return load_handler(args.handler), args.queue
    tasks = load_app(args.app)
    return TaskRouter(tasks), args.queue or task_queues(tasks)


def cmd_worker(args: argparse.Namespace) -> int:
    handler, queues = worker_handler(args)
    fixed = [f"--{name.replace('_', '-')}" for name in ("prefetch", "ack_delay", "claimers")
             if getattr(args, name) is not None]
    if fixed:
        print(f"portq worker: {', '.join(fixed)}: deprecated, the worker sizes its "
              "look-ahead, completion batches and claim loops itself (docs/operations.md"
              "#worker); the value given still applies", file=sys.stderr)
    with _open(args) as q, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # said once above
        q.backend.check_schema()
        options = dict(concurrency=args.concurrency, lease=args.lease, burst=args.burst,
                       grace=args.grace, install_signals=True,
                       backoff=Backoff(args.backoff, args.backoff_base, args.backoff_cap),
                       idle_max=args.idle_max, reap_interval=args.reap_interval or None,
                       reap_delay=args.reap_delay, prune_interval=args.prune_interval or None,
                       prune_older_than=args.prune_older_than, prefetch=args.prefetch,
                       ack_delay=args.ack_delay, claimers=args.claimers,
                       job_timeout=args.job_timeout,
                       middleware=[load_handler(spec, "middleware")
                                   for spec in args.middleware or ()])
        _instrument(args, q)
        worker: Worker | AsyncWorker = AsyncWorker(AsyncQueue(q), queues, handler, **options) \
            if args.asyncio else Worker(q, queues, handler, **options)
        _say_paused(q, queues, "claims none of {its} jobs until `portq resume URL QUEUE`")
        stops = _start_worker_extras(args, q, worker)
        try:
            if isinstance(worker, AsyncWorker):
                asyncio.run(worker.run())
            else:
                worker.run()
        finally:
            for stop in stops:
                stop()
        if args.burst:
            _say_paused(q, queues, "exits (--burst) with {its} jobs unclaimed")
    return 0


def _say_paused(q: portq.Queue, queues: str | Sequence[str], what: str) -> None:
    """Tell the operator, on stderr, which of the worker's queues are paused."""
    names = [queues] if isinstance(queues, str) else list(queues)
    paused = sorted(set(names) & set(q.paused_queues()))
    if paused:
        print(f"portq worker: paused queue{'s' if len(paused) > 1 else ''} "
              f"{', '.join(paused)}: this worker "
              f"{what.format(its='their' if len(paused) > 1 else 'its')}",
              file=sys.stderr, flush=True)


def _start_worker_extras(args: argparse.Namespace, q: portq.Queue,
                         worker: Worker | AsyncWorker) -> list[Callable[[], None]]:
    """Start the scheduler (--schedule) and metrics server (--metrics-port) beside a
    worker; return what stops them."""
    stops: list[Callable[[], None]] = []
    if args.schedule:
        from portq.schedule import Scheduler, load_schedules
        scheduler = Scheduler(q, load_schedules(args.schedule))
        scheduler.start()  # enqueues what is due now before the worker's first claim
        worker.scheduler = scheduler  # its entries go into the worker's registry row
        stops.append(scheduler.stop)
    if args.metrics_port is not None:
        from portq.metrics import serve_metrics
        try:
            server = serve_metrics(q, worker, args.metrics_port, args.metrics_host)
        except OSError as exc:
            for stop in stops:
                stop()
            raise ConfigurationError(f"cannot serve metrics on {args.metrics_host}:"
                                     f"{args.metrics_port}: {exc}") from None
        stops.append(server.close)
    return stops


STATS_COLUMNS = ["queue", "ready", "scheduled", "running", "waiting", "succeeded", "dead",
                 "cancelled",
                 "oldest_ready_age_s", "failed_1h", "succeeded_1h", "retry_rate", "workers",
                 "paused", "running_limit", "rate_limit", "fair"]


def cmd_stats(args: argparse.Namespace) -> int:
    if args.window is not None:
        return _job_stats(args)
    with _open(args) as q:
        live = live_workers(q)  # None before migration 3: the column shows "-"
        serving = None if live is None else workers_per_queue(live)
        rows = [{**s.as_dict(), "running_limit": s.concurrency_limit,
                 "workers": None if serving is None else serving.get(s.queue, 0)}
                for s in q.stats(args.queue)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no jobs" + (f" on queue {args.queue}" if args.queue else ""))
        return 0
    for r in rows:
        r["rate_limit"] = None if r["rate_limit"] is None else \
            f"{r['rate_limit']}/{period_text(r['rate_period_s'])}"
    _print_table(STATS_COLUMNS, [[_cell(r[c]) for c in STATS_COLUMNS] for r in rows])
    return 0


JOB_STATS_COLUMNS = ["queue", "succeeded", "dead", "cancelled", "per_min", "failed",
                     "wait_p50", "wait_p95", "wait_p99", "run_p50", "run_p95", "run_p99"]


def _ms_text(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms:.0f}ms" if ms < 1000 else f"{ms / 1000:.1f}s"


def _job_stats(args: argparse.Namespace) -> int:
    """``portq stats --window W``: throughput, failures, wait and run time percentiles."""
    with _open(args) as q:
        stats = q.job_stats(args.window, queue=args.queue)
    if args.json:
        print(json.dumps([s.as_dict() for s in stats], indent=2))
        return 0
    if not stats:
        print(f"no jobs finished in the last {args.window}" +
              (f" on queue {args.queue}" if args.queue else ""))
        return 0
    rows = []
    for s in stats:
        d = s.as_dict()
        failed = "-" if s.failure_rate is None else f"{100 * s.failure_rate:.1f}%"
        rows.append([s.queue, str(d["succeeded"]), str(d["dead"]), str(d["cancelled"]),
                     f"{s.per_minute:.1f}", failed,
                     *(_ms_text(s.wait_ms[p]) for p in ("p50", "p95", "p99")),
                     *(_ms_text(s.run_ms[p]) for p in ("p50", "p95", "p99"))])
    _print_table(JOB_STATS_COLUMNS, rows)
    return 0


def cmd_workers(args: argparse.Namespace) -> int:
    with _open(args) as q:
        workers = q.workers()
        activity = q.worker_activity()
    # the running jobs the job table says each worker holds (the heartbeat's own count is
    # up to a registry interval old)
    running = {w.worker_id: activity[w.worker_id].running if w.worker_id in activity
               else w.jobs_in_hand for w in workers}
    if args.json:
        print(json.dumps([{**w.as_dict(), "running": running[w.worker_id]} for w in workers],
                         indent=2))
        return 0
    cols = ["worker_id", "host", "pid", "queues", "concurrency", "running",
            "last_heartbeat", "started_at"]
    _print_table(cols, [[w.worker_id, w.host, str(w.pid), ",".join(w.queues),
                         str(w.concurrency), str(running[w.worker_id]),
                         _cell(w.heartbeat_age_s) + "s ago",
                         _cell(w.started_at and w.started_at.isoformat(timespec="seconds"))]
                        for w in workers])
    if not workers:
        print("(no live workers)")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    from portq.web.server import serve
    return serve(_url(args), prefix=args.prefix, host=args.host, port=args.port,
                 read_only=args.read_only, token=args.token, refresh=args.refresh,
                 allowed_hosts=args.allowed_host, query_timeout=args.query_timeout)


def _known_queue(q: portq.Queue, name: str, create: bool) -> None:
    """Refuse a queue with no job and no setting (most likely a typo) unless ``create``."""
    portq.queue.validate_queue(name)
    if create or q.stats(name):   # a row: the queue has jobs, or is paused or limited
        return
    raise ConfigurationError(
        f"queue {name!r} has no jobs and no settings (a typo?); pass --create to set it "
        "up before its first job")


def cmd_pause(args: argparse.Namespace) -> int:
    """``portq pause URL QUEUE``: no worker claims the queue's jobs until ``resume``."""
    with _open(args) as q:
        _known_queue(q, args.queue_name, args.create)
        q.pause(args.queue_name)
    print(f"paused {args.queue_name}: workers claim none of its jobs from their next poll; "
          f"running jobs finish")
    return 0


def cmd_limit(args: argparse.Namespace) -> int:
    """``portq limit URL QUEUE [--running N|none] [--rate N/PERIOD|none] [--fair|--no-fair]``:
    the queue's limit on running jobs and on jobs started per period, and its fairness."""
    if args.running is _UNSET and args.rate is _UNSET and args.fair is None:
        raise ConfigurationError("portq limit: give --running N, --rate N/PERIOD (none "
                                 "clears either) and/or --fair / --no-fair")
    with _open(args) as q:
        _known_queue(q, args.queue_name, args.create)
        if args.running is not _UNSET:
            q.set_concurrency_limit(args.queue_name, args.running)
        if args.rate is not _UNSET:
            q.set_rate_limit(args.queue_name, *(args.rate or (None,)))
        if args.fair is not None:
            q.set_fairness(args.queue_name, args.fair)
    if args.fair is not None:
        print(f"{args.queue_name} claims " + ("one job of each concurrency key in turn"
              if args.fair else "in plain order (priority, run_at, id)")
              + "; workers follow within a second")
    if args.running is None:
        print(f"cleared the running-jobs limit of {args.queue_name}")
    elif args.running is not _UNSET:
        print(f"limited {args.queue_name} to {args.running} running jobs across every worker; "
              f"workers see it within a second")
    if args.rate is None:
        print(f"cleared the rate limit of {args.queue_name}")
    elif args.rate is not _UNSET:
        n, seconds = args.rate
        print(f"limited {args.queue_name} to {n} jobs started per {period_text(seconds)} "
              f"(any sliding window) across every worker; workers see it within a second")
    return 0


def _rate_or_none(text: str) -> tuple[int, float] | None:
    """``--rate``: :func:`portq.rates.parse_rate` for argparse."""
    try:
        return parse_rate(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _limit_or_none(text: str) -> int | None:
    """A positive integer, or ``none`` (no limit)."""
    return None if text.strip().lower() == "none" else _positive(text)


_UNSET = object()


def cmd_resume(args: argparse.Namespace) -> int:
    """``portq resume URL QUEUE``: workers claim the queue's jobs again."""
    with _open(args) as q:
        _known_queue(q, args.queue_name, args.create)
        q.resume(args.queue_name)
    print(f"resumed {args.queue_name}")
    return 0


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


def _print_table(cols: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip())
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


def cmd_reap(args: argparse.Namespace) -> int:
    with _open(args) as q:
        n = q.reap(limit=args.limit, delay=args.delay)
    _emit(args, {"reaped": n},
          f"returned {n} expired lease{'' if n == 1 else 's'} (to ready, or to dead when "
          "attempts were spent)")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    states = args.state or ["succeeded", "cancelled"]
    total = 0
    with _open(args) as q:
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
    _emit(args, {"deleted": total, "states": states, "older_than_s": args.older_than,
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
    ids = _job_ids(args)
    if ids and (args.queue or args.state or args.all):
        raise ConfigurationError("give job ids or --queue (with --state/--all), not both")
    if not ids and not args.queue:
        raise ConfigurationError(f"nothing to {args.command}: give job ids, or --queue Q "
                                 "for a bulk action")
    with _open(args) as q:
        if ids:
            results, lines = _single(q, ids, lambda i: one(q, i), verb, wanted)
            _emit(args, results, "\n".join(lines))
            return 0 if all(r["result"] == verb for r in results) else 1
        states = args.state or default_states
        total, more = _bulk(args, lambda: many(q, states))
    _emit(args, {verb: total, "queue": args.queue, "states": states, "more": more},
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


JOB_COLUMNS = ["id", "state", "queue", "priority", "run_at", "attempts", "progress", "key",
               "last_error"]


def cmd_jobs(args: argparse.Namespace) -> int:
    with _open(args) as q:
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
    _print_table(JOB_COLUMNS, [[
        str(r.id), r.shown_state, r.queue, str(r.priority), _cell(r.run_at),
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
    ids = _job_ids(args)
    if len(ids) != 1:
        raise ConfigurationError("give exactly one job id")
    with _open(args) as q:
        nodes = graph(q, ids[0])
    if args.json:
        print(json.dumps(nodes, indent=2))
        return 0
    _print_table(["id", "state", "queue", "after"],
                 [[str(n["id"]), _cell(n["state"] or "pruned"), _cell(n["queue"]),
                   ",".join(map(str, n["after"])) or "-"] for n in nodes])
    return 0


def cmd_job(args: argparse.Namespace) -> int:
    ids = _job_ids(args)
    if len(ids) != 1:
        raise ConfigurationError("give exactly one job id")
    with _open(args) as q:
        record = q.job(ids[0])
        errors = q.error_history(ids[0]) if record is not None else []
        result = q.result(ids[0]) if record is not None else None
    if record is None:
        print(f"portq: error: no such job {ids[0]}", file=sys.stderr)
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
        print(f"  attempt {e.attempt} by {e.worker_id} at {_cell(e.failed_at)}:")
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
         f"{r.progress_text()} (at {_cell(r.progress_at)})"),
        ("meta", json.dumps(r.meta, ensure_ascii=False) if r.meta else None),
        ("result", None if r.state != State.SUCCEEDED else
         json.dumps(result, ensure_ascii=False)),
        ("last_error", error_line(r.last_error) or None)]
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        yield f"{name.ljust(width)}  {_cell(value)}"


def cmd_conformance(args: argparse.Namespace) -> int:
    url = _url(args)
    engine = portq.url.parse_url(url).engine  # a clear error before pytest starts
    try:
        import pytest  # noqa: F401
    except ModuleNotFoundError:
        raise ConfigurationError(
            "portq conformance runs on pytest, which is not installed; install it with: "
            f"pip install 'portq[{engine}]' (or: pip install 'pytest>=8')") from None

    from portq.conformance.runner import run_conformance
    return run_conformance(url, prefix=args.prefix, keep=args.keep,
                           as_json=args.json, junit=args.junit,
                           pytest_args=args.pytest_args)


def cmd_demo(args: argparse.Namespace) -> int:
    url = args.url or os.environ.get("PORTQ_URL") or DEFAULT_DEMO_URL
    with portq.connect(url) as q:
        q.migrate()
        name = "portq-demo"
        print(f"portq demo on {q.url}: {args.jobs} jobs, {args.workers} worker threads",
              file=sys.stderr)
        started = time.perf_counter()
        for start in range(0, args.jobs, 1000):
            q.enqueue_many([{"queue": name, "payload": {"n": i}}
                            for i in range(start, min(args.jobs, start + 1000))])
        enqueue_s = time.perf_counter() - started
        worker = Worker(q, name, _demo_handler, concurrency=args.workers, lease=30,
                        batch=args.batch, burst=True, install_signals=True,
                        idle_min=0.01, idle_max=0.2)
        run_started = time.perf_counter()
        t = threading.Thread(target=worker.run, daemon=True)
        t.start()
        while t.is_alive():
            _progress(worker.counters.succeeded, args.jobs, time.perf_counter() - run_started)
            t.join(0.2)
        elapsed = time.perf_counter() - run_started
        _progress(worker.counters.succeeded, args.jobs, elapsed)
        print(file=sys.stderr)
        stats = [s.as_dict() for s in q.stats(name)]
        done = worker.counters.succeeded
        print(json.dumps({
            "url": q.url, "jobs": args.jobs, "workers": args.workers,
            "enqueue_jobs_per_s": round(args.jobs / enqueue_s, 1),
            "claim_complete_jobs_per_s": round(done / elapsed, 1) if elapsed else None,
            "elapsed_s": round(elapsed, 3), "counters": worker.counters.as_dict(),
            "stats": stats}, indent=2))
        q.prune(0, limit=args.jobs + 1, queue=name)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from portq import bench
    url = _url(args)
    progress = None if args.no_progress else _progress
    report = bench.run(url, args.scenario or bench.DEFAULT_SCENARIOS, jobs=args.jobs,
                       workers=args.workers, batches=args.batch, sizes=args.sizes,
                       progress=progress, modes=args.mode or bench.DEFAULT_MODES,
                       repeat=args.repeat)
    if progress:
        print(file=sys.stderr)
    if args.json:
        print(bench.as_json(report))
        return 0
    print(f"{report['version']} at {report['url']}, {report['date']}")
    for title, key, cols in (
            ("enqueue", "enqueue", ["mode", "jobs", "seconds", "jobs_per_s"]),
            ("claim + complete, no-op handler", "throughput",
             ["mode", "workers", "batch", "jobs", "seconds", "jobs_per_s", "runs"]),
            (f"claim of {bench.CLAIM_LIMIT} jobs from 1 of {bench.QUEUE_COUNT} queues "
             "(rolled back)", "claim_latency",
             ["ready", "total", "claim_ms", "limited_claim_ms", "rate_claim_ms",
              "keyed_claim_ms", "server_ms", "ordered_walk",
              "nodes"]),
            (f"pickup: enqueue-commit to handler start, {bench.PICKUP_JOBS} jobs "
             f"{bench.PICKUP_GAP_S * 1000:.0f} ms apart, then after {bench.PICKUP_QUIET_S:.0f} s "
             "quiet spells", "pickup",
             ["p50_ms", "p99_ms", "max_ms", "after_quiet_ms", "idle_max_s", "listener",
              "idle_claims_per_s"])):
        if key in report:
            print(f"\n{title}")
            _print_table(cols, [[_cell(", ".join(map(str, v)) if isinstance(v, list) else v)
                                 for v in (r[c] for c in cols)] for r in report[key]])
    return 0


def _int_list(text: str) -> list[int]:
    return [_positive(part) for part in text.split(",")]


def _demo_handler(job: Job) -> None:
    """The demo's job: a tiny bit of CPU work on the payload."""
    sum(range(int(job.payload["n"]) % 100))


def _progress(done: int, total: int, elapsed: float) -> None:
    width = 30
    filled = int(width * done / total) if total else width
    rate = done / elapsed if elapsed > 0 else 0.0
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
                     f"{rate:,.0f} jobs/s")
    sys.stderr.flush()


# ---- parser ---------------------------------------------------------------------------------

def _sizes(text: str) -> list[tuple[int, int | None]]:
    from portq import bench
    try:
        return bench.parse_sizes(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _integer(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < minimum:
        bound = "> 0" if minimum == 1 else f">= {minimum}"
        raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
    return value


def _positive(text: str) -> int:
    return _integer(text, 1)


def _non_negative(text: str) -> int:
    return _integer(text, 0)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0-65535, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = PortqParser(add_help=False)
    logs = common.add_argument_group("logging (before or after the command)")
    logs.add_argument("--log-level", type=str.upper, choices=LEVELS, default=argparse.SUPPRESS,
                      help="least severe level logged to stderr (default INFO, or "
                           "$PORTQ_LOG_LEVEL)")
    logs.add_argument("--log-format", choices=FORMATS, default=argparse.SUPPRESS,
                      help="text lines (default, or $PORTQ_LOG_FORMAT) or json: one JSON "
                           "object per line")
    parser = PortqParser(prog="portq", description=DESCRIPTION, parents=[common])
    parser.add_argument("--version", action="version", version=f"portq {portq.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, fn: Callable[[argparse.Namespace], int], help_: str,
                url: bool = True, prefix: str = DEFAULT_PREFIX,
                json_help: str | None = "print the result as JSON, for scripts"
                ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_, parents=[common])
        if url:
            p.add_argument("url", nargs="?", metavar="URL",
                           help="database URL (default: $PORTQ_URL)")
            p.add_argument("--prefix", default=prefix,
                           help=f"table prefix (default {prefix})")
        if json_help:
            p.add_argument("--json", action="store_true", help=json_help)
        p.set_defaults(fn=fn)
        return p

    def duration(p: argparse.ArgumentParser, flag: str, default: float | None,
                 help_: str, parse: Callable[[str], float] = parse_duration,
                 required: bool = False) -> None:
        shown = "" if default is None else f" (default {format_duration(default)})"
        p.add_argument(flag, type=parse, default=default, metavar="DURATION",
                       required=required, help=help_ + shown)

    def create(p: argparse.ArgumentParser) -> None:
        p.add_argument("--create", action="store_true",
                       help="act on a queue that has no jobs yet (without it, a queue with "
                            "no jobs and no settings is refused as a likely typo)")

    command("migrate", cmd_migrate, "create or upgrade portq's tables; says which")
    p = command("enqueue", cmd_enqueue, "add a job; says its id, and whether it is new")
    p.add_argument("--queue", required=True, help="queue name")
    p.add_argument("--payload", default="null", help="JSON payload (default null)")
    p.add_argument("--priority", type=int, default=0,
                   help="higher runs first among due jobs (default 0)")
    duration(p, "--delay", None, "run no earlier than this from now (default: now)")
    p.add_argument("--key", default=None,
                   help="idempotency key, unique across all queues unless scoped below: an "
                        "existing job of this key is returned instead")
    p.add_argument("--max-attempts", type=_positive, default=None,
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

    p = command("worker", cmd_worker, "run a worker until SIGTERM/SIGINT (or --burst)",
                json_help=None)
    p.add_argument("--queue", action="append", default=None,
                   help="queue to serve; repeat for more (served round-robin); with --app: "
                        "narrows its tasks' queues")
    p.add_argument("--handler", default=None,
                   help="module:function taking a portq.Job (def, or async def: awaited on "
                        "an event loop of the handler thread)")
    p.add_argument("--app", default=None, metavar="MODULE",
                   help="module of @portq.task functions: serve their queues, running each "
                        "job's named task (a job naming an unknown task goes dead)")
    p.add_argument("--concurrency", type=_positive, default=4,
                   help="handler threads: jobs run at once (default 4)")
    duration(p, "--lease", 30.0, "how long a claimed job is this worker's before another "
             f"may take it; renewed every third of it (minimum "
             f"{format_duration(MIN_LEASE_S)})", parse_lease)
    duration(p, "--grace", 30.0,
             "how long shutdown waits for running jobs before releasing them; also how long "
             "a handler thread past its --job-timeout has to stop before it is abandoned")
    duration(p, "--job-timeout", None,
             "longest an attempt may run: past it the attempt fails with JobTimeout (retried "
             "by the backoff), its handler is told (job.cancelled(); an async handler's task "
             "is cancelled) and whatever it does later is not recorded (default: none)")
    p.add_argument("--middleware", action="append", default=None, metavar="MODULE:NAME",
                   help="a middleware mw(job, call_next) around every job (def or async "
                        "def); repeat for more, outermost first")
    p.add_argument("--otel", action="store_true",
                   help="trace every job with OpenTelemetry (portq[otel]; the handler's "
                        "module configures the SDK), continuing its enqueuer's trace")
    p.add_argument("--asyncio", action="store_true",
                   help="run handlers as asyncio tasks on one event loop (portq.aio."
                        "AsyncWorker; plain def handlers on threads of its own) instead of "
                        "--concurrency threads; the same runtime and options either way")
    p.add_argument("--prefetch", type=_non_negative, default=None,
                   help="deprecated: fixes the look-ahead (jobs claimed beyond the handler "
                        "threads), which the worker otherwise sizes itself")
    duration(p, "--ack-delay", None,
             "deprecated: how long a completion may wait for others of its batch (default "
             "0s: completions are written in the background, a batch at a time)")
    p.add_argument("--claimers", type=_positive, default=None,
                   help="deprecated: fixes the number of claim loops (default: up to 4 "
                        "while jobs are shorter than a claim's round trip, else 1)")
    p.add_argument("--pool-size", type=_positive, default=None,
                   help="most pooled database connections of this worker process (+1 for "
                        "PostgreSQL's LISTEN); its threads take turns on them (default: "
                        "concurrency + 3 + 2 x claim loops, 15 with the defaults)")
    p.add_argument("--burst", action="store_true",
                   help="exit 0 once nothing is left: no job of the queues is ready and "
                        "due, none is running (another worker's too: a crashed worker's "
                        "jobs are waited for until the reaper returns them, then run), and "
                        "the jobs this worker reaped have waited out --reap-delay and run; "
                        "jobs due later (--delay, retry backoff) are not waited for")
    p.add_argument("--backoff", choices=["full_jitter", "exponential", "fixed"],
                   default="full_jitter", help="retry delay policy (default full_jitter)")
    duration(p, "--backoff-base", 1.0, "first retry's delay ceiling")
    duration(p, "--backoff-cap", 3600.0, "longest retry delay")
    duration(p, "--idle-max", None,
             "longest sleep between polls of an empty queue, what a new job may wait for an "
             "idle worker (default: 2s on PostgreSQL and SQLite, whose workers are woken by "
             "LISTEN/NOTIFY and PRAGMA data_version; 250ms elsewhere, at most ~7 claims/s "
             "per idle worker)")
    duration(p, "--reap-interval", 10.0,
             "longest gap between this worker's reaps of expired leases (0s: never); it reaps "
             "sooner, when the earliest running lease expires")
    duration(p, "--reap-delay", 1.0, "how long a returned job waits before it runs again")
    duration(p, "--prune-interval", 3600.0,
             "how often this worker deletes old finished jobs (0s: never)")
    duration(p, "--prune-older-than", 7 * 86400.0, "age of finished jobs the worker prunes")
    p.add_argument("--metrics-port", type=_port, default=None, metavar="PORT",
                   help="serve Prometheus metrics at http://HOST:PORT/metrics")
    p.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                   help="address the metrics server binds (default 127.0.0.1; 0.0.0.0: "
                        "every interface, e.g. for a Prometheus in another container)")
    p.add_argument("--schedule", default=None, metavar="FILE",
                   help="TOML file of [[schedule]] cron jobs to enqueue (once per due time, "
                        "however many workers run it)")

    p = command("stats", cmd_stats, "per-queue counts, oldest ready age, failures and "
                "retry rate over the last hour (docs/operations.md)")
    p.add_argument("--queue", default=None, help="one queue (default: every queue)")
    p.add_argument("--window", default=None, metavar="DURATION",
                   help="instead: the jobs finished in the last DURATION (1h, 24h, 7d; up "
                        "to 31d): succeeded, dead, cancelled, per minute, failure rate, "
                        "wait (enqueue -> start) and run time p50/p95/p99")

    p = command("workers", cmd_workers, "the live workers: id, host, pid, queues, "
                "concurrency, jobs in hand, last heartbeat")

    p = command("dashboard", cmd_dashboard, "serve the web dashboard (needs portq[web])",
                json_help=None)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; any other needs --token)")
    p.add_argument("--port", type=_port, default=8765, help="port (default 8765)")
    p.add_argument("--read-only", action="store_true",
                   help="hide and refuse every action (retry, cancel, delete)")
    p.add_argument("--token", default=None,
                   help="access token the browser must present (default: "
                        "$PORTQ_DASHBOARD_TOKEN, which other users cannot read in `ps` "
                        "as they can an argument); required for a non-loopback --host")
    duration(p, "--refresh", 5.0, "how often the overview polls for new counts")
    duration(p, "--query-timeout", 15.0, "the longest any one dashboard query may run "
             "before the database stops it (0s: no limit)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="also answer requests for this Host name (repeatable; a leading "
                        "'.' allows subdomains), e.g. the name a reverse proxy forwards; "
                        "by default only loopback names are answered")

    p = command("reap", cmd_reap, "return expired leases to ready (or dead)")
    p.add_argument("--limit", type=_positive, default=1000,
                   help="most jobs returned (default 1000)")
    duration(p, "--delay", 1.0, "how long a returned job waits before it runs again")

    p = command("prune", cmd_prune, "delete finished jobs in bounded batches")
    duration(p, "--older-than", None, "delete jobs finished longer ago than this (e.g. 7d)",
             required=True)
    p.add_argument("--limit", type=_positive, default=1000,
                   help="most jobs deleted per batch (default 1000)")
    p.add_argument("--state", action="append", choices=["succeeded", "cancelled", "dead"],
                   help="states to delete; repeat for more (default succeeded and cancelled; "
                        "dead is kept)")
    p.add_argument("--queue", default=None, help="one queue (default: every queue)")
    p.add_argument("--all", action="store_true", help="repeat batches until none is left")

    for name, fn, help_, states, default in (
            ("retry", cmd_retry, "make dead (or cancelled) jobs ready again: by id, or every "
             "job of a queue in a state", ["dead", "cancelled"], "dead"),
            ("cancel", cmd_cancel, "cancel ready (or running) jobs: by id, or every job of "
             "a queue in a state", ["ready", "running"], "ready")):
        p = command(name, fn, help_)
        p.add_argument("job_ids", nargs="*", metavar="JOB_ID",
                       help="jobs to act on (URL may be left out when $PORTQ_URL is set)")
        p.add_argument("--queue", default=None, help="act on the jobs of this queue instead")
        p.add_argument("--state", action="append", choices=states,
                       help=f"with --queue: jobs in this state; repeat for more (default "
                            f"{default})")
        p.add_argument("--limit", type=_positive, default=1000,
                       help="with --queue: most jobs per batch (default 1000)")
        p.add_argument("--all", action="store_true",
                       help="with --queue: repeat batches until none is left")
        if name == "retry":
            p.add_argument("--extra-attempts", type=_positive, default=1,
                           help="attempts added to those the job had left (default 1)")

    p = command("jobs", cmd_jobs, "list jobs by id: state, queue, priority, run_at, "
                "attempts, key, last error")
    p.add_argument("--state", default=ALL_STATES, choices=[
                       State.READY.value, SCHEDULED,
                       *(s.value for s in State if s != State.READY), ALL_STATES],
                   help=f"only jobs in this state (default {ALL_STATES}); scheduled: ready "
                        "jobs not yet due (delayed, or waiting for a retry), by run_at")
    p.add_argument("--queue", default=None, help="one queue (default: every queue)")
    p.add_argument("--limit", type=_positive, default=50, help="most jobs shown (default 50)")
    p.add_argument("--after-id", type=_non_negative, default=0, metavar="ID",
                   help="start after this job id (the next page)")

    p = command("pause", cmd_pause, "stop every worker claiming a queue's jobs (persisted; "
                                    "running jobs finish)")
    p.add_argument("queue_name", metavar="QUEUE", help="the queue to pause")
    create(p)
    p = command("resume", cmd_resume, "let workers claim a paused queue's jobs again")
    p.add_argument("queue_name", metavar="QUEUE", help="the queue to resume")
    create(p)
    p = command("limit", cmd_limit, "set or clear a queue's limits on running jobs and on "
                                    "jobs started per period, across every worker "
                                    "(enforced in the claim transaction)")
    p.add_argument("queue_name", metavar="QUEUE", help="the queue to limit")
    create(p)
    p.add_argument("--running", type=_limit_or_none, default=_UNSET, metavar="N",
                   help="at most N running jobs of QUEUE at once; 'none' clears the limit")
    p.add_argument("--rate", type=_rate_or_none, default=_UNSET, metavar="N/PERIOD",
                   help="at most N jobs of QUEUE started per PERIOD in any sliding window "
                        "(e.g. 50/2s, 100/1m, 1000/1h); 'none' clears the limit")
    p.add_argument("--fair", action=argparse.BooleanOptionalAction, default=None,
                   help="claim round-robin across the jobs' concurrency keys (--no-fair: "
                        "plain priority order)")


    p = command("job", cmd_job, "one job in full, with the error of every failed attempt")
    p.add_argument("job_ids", nargs="*", metavar="JOB_ID",
                   help="the job (URL may be left out when $PORTQ_URL is set)")
    p = command("workflow", cmd_workflow, "the jobs linked to a job by dependencies, "
                "either way: id, state, queue and the ids each one waits for")
    p.add_argument("job_ids", nargs="*", metavar="JOB_ID",
                   help="a job of the workflow (URL may be left out when $PORTQ_URL is set)")

    from portq.conformance import TEST_PREFIX
    p = command("conformance", cmd_conformance,
                "check URL's engine against portq's conformance suite; prints the engine, "
                "then each property passed, failed or skipped (exit 0 only if none failed)",
                prefix=TEST_PREFIX, json_help="print the report as JSON")
    p.add_argument("--junit", metavar="FILE", default=None,
                   help="also write a JUnit XML report to FILE")
    p.add_argument("--keep", action="store_true",
                   help="keep the suite's tables afterwards (default: dropped)")
    p.set_defaults(pytest_args=[])
    p.epilog = "Arguments after -- go to pytest, e.g. portq conformance URL -- -k claim"

    p = command("demo", cmd_demo, f"enqueue and work a batch of jobs (default {DEFAULT_DEMO_URL})",
                json_help=None)
    p.add_argument("--jobs", type=_positive, default=5000,
                   help="jobs to enqueue and work (default 5000)")
    p.add_argument("--workers", type=_positive, default=4,
                   help="handler threads (default 4)")
    p.add_argument("--batch", type=_positive, default=20,
                   help="jobs claimed per claim statement (default 20)")

    from portq import bench
    p = command("bench", cmd_bench, "measure claim cost vs table size, throughput and "
                "enqueue rate in portqb_ tables (dropped afterwards)",
                json_help="print the report as JSON")
    p.add_argument("--scenario", action="append", choices=bench.SCENARIOS,
                   help="repeat for more (default: all but pickup)")
    p.add_argument("--jobs", type=_positive, default=bench.DEFAULT_JOBS,
                   help=f"jobs per throughput run (default {bench.DEFAULT_JOBS})")
    p.add_argument("--workers", type=_int_list, default=list(bench.DEFAULT_WORKERS),
                   help="worker thread counts, e.g. 4 or 1,2,4,8 (default)")
    p.add_argument("--batch", type=_int_list, default=list(bench.DEFAULT_BATCHES),
                   help="claim batch sizes (default 1,20)")
    p.add_argument("--mode", action="append", choices=bench.MODES,
                   help="throughput mode, repeat for both: 'worker' (default), the sync "
                        "Worker with no tuning options (it sizes its look-ahead, completion "
                        "batches and claim loops itself); 'async', portq.aio.AsyncWorker "
                        "with concurrency = the worker count and the same batch sizes")
    p.add_argument("--repeat", type=_positive, default=1,
                   help="run each throughput configuration this many times and report "
                        "the median run (default 1)")
    p.add_argument("--sizes", type=_sizes, default=list(bench.DEFAULT_SIZES),
                   help="claim-latency sizes: READY[/TOTAL],... ready jobs per queue "
                        "(default 1000,10000,100000,100000/1000000)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


def _join_negative_values(argv: Sequence[str]) -> list[str]:
    """``--delay -5s`` -> ``--delay=-5s``: argparse takes a value that starts with '-' for an
    option and says "expected one argument"; joined, the value reaches its type check."""
    out: list[str] = []
    for arg in argv:
        if out and re.match(r"^-\d", arg) and out[-1].startswith("--") and "=" not in out[-1]:
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


_ARGV: list[str] = []  # the command line being parsed, for PortqParser's hints


class PortqParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors suggest the closest option for each mistyped one
    (Python 3.11's argparse does not)."""

    def error(self, message: str) -> NoReturn:
        hints = self.hints(_ARGV)
        super().error(message + (f"; {'; '.join(hints)}" if hints else ""))

    def hints(self, argv: Sequence[str]) -> list[str]:
        known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        out = []
        for arg in argv:
            flag = arg.split("=")[0]
            if not flag.startswith("--") or any(k.startswith(flag) for k in known):
                continue
            close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
            if close:
                out.append(f"unknown option {flag} (did you mean {close[0]}?)")
        return out


def _subparser(parser: argparse.ArgumentParser,
               args: argparse.Namespace) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(getattr(args, "command", ""), parser)  # type: ignore[no-any-return]
    return parser


def _late_positionals(parser: argparse.ArgumentParser, args: argparse.Namespace,
                      extras: list[str]) -> list[str]:
    """argparse gives positionals only the words before the first option: in
    ``portq pause URL --prefix P QUEUE``, QUEUE is left over. Parse the command's
    positional words again, all together (options already parsed stay as they are);
    return what is still left over."""
    sub = _subparser(parser, args)
    if sub is parser or any(e.startswith("-") for e in extras) or any(
            a.required and a.option_strings for a in sub._actions):
        return extras
    words: list[str] = []
    for action in sub._actions:
        if action.option_strings or isinstance(action, argparse._SubParsersAction):
            continue
        value = getattr(args, action.dest, None)
        words += value if isinstance(value, list) else [] if value is None else [value]
    _, left = sub.parse_known_args(words + extras, namespace=args)
    return left


def _refuse_extras(parser: argparse.ArgumentParser, args: argparse.Namespace,
                   extras: Sequence[str]) -> NoReturn:
    """Refuse unknown arguments with the command's own parser (which adds the hints)."""
    sub = _subparser(parser, args)
    sub.error(f"unrecognized argument{'s' if len(extras) > 1 else ''}: {' '.join(extras)}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    passthrough: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    _ARGV[:] = argv
    args, extras = parser.parse_known_args(_join_negative_values(argv))
    if extras:
        extras = _late_positionals(parser, args, extras)
    if extras:
        _refuse_extras(parser, args, extras)
    if passthrough:
        if args.command != "conformance":
            parser.error(f"arguments after -- are only for conformance: {' '.join(passthrough)}")
        args.pytest_args = passthrough
    level = getattr(args, "log_level", None) or os.environ.get("PORTQ_LOG_LEVEL", "INFO").upper()
    log_format = getattr(args, "log_format", None) or os.environ.get("PORTQ_LOG_FORMAT", "text")
    if level not in LEVELS or log_format not in FORMATS:
        parser.error(f"log level {level!r} / format {log_format!r}: levels are "
                     f"{', '.join(LEVELS)}; formats {', '.join(FORMATS)}")
    configure_logging(level, log_format)
    try:
        return int(args.fn(args))
    except PortqError as exc:
        # one line: the message names the problem (exit 2: the user's to fix; 1: at run time)
        print(f"portq: error: {_one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug or an unmapped driver error: one line too
        logging.getLogger("portq.cli").debug("unexpected error", exc_info=True)
        text = _scrub_args(args, f"{type(exc).__name__}: {_one_line(str(exc))}")
        print(f"portq: error: unexpected {text} (--log-level DEBUG shows the traceback)",
              file=sys.stderr)
        return 1


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _scrub_args(args: argparse.Namespace, text: str) -> str:
    """``text`` without the secrets of the command's database URL."""
    url = getattr(args, "url", None) or os.environ.get("PORTQ_URL")
    try:
        return portq.url.parse_url(url).scrub(text) if url else text
    except ConfigurationError:
        return text


if __name__ == "__main__":
    raise SystemExit(main())
