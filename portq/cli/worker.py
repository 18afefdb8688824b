"""``portq worker``: run a worker (sync threads or asyncio) with its scheduler and metrics."""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import portq
from portq.aio import AsyncQueue, AsyncWorker
from portq.cli.common import (
    Commands,
    duration,
    non_negative,
    open_queue,
    parse_duration,
    port,
    positive,
)
from portq.durations import format_duration
from portq.errors import ConfigurationError
from portq.job import Job
from portq.retry import Backoff
from portq.tasks import TaskRouter, import_module, load_app
from portq.tasks import queues as task_queues
from portq.worker import Worker

#: the shortest --lease the heartbeat can keep alive: it renews every third of the lease,
#: and a renewal's round trip must arrive before the lease ends
MIN_LEASE_S = 1.0


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
    with open_queue(args) as q, warnings.catch_warnings():
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
        stops = [_dump_stacks_on(getattr(signal, "SIGUSR1", None)),
                 *_start_worker_extras(args, q, worker)]
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


def _dump_stacks_on(signum: signal.Signals | None) -> Callable[[], None]:
    """``kill -USR1 PID`` writes every thread's stack to stderr (a worker that seems
    stuck says where it waits) and the worker goes on; what undoes it (nothing where the
    platform has no such signal)."""
    if signum is None:
        return lambda: None
    faulthandler.register(signum, file=sys.stderr, all_threads=True, chain=False)
    return lambda: faulthandler.unregister(signum)


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




def add_worker(cmds: Commands) -> None:
    p = cmds.command("worker", cmd_worker, "run a worker until SIGTERM/SIGINT (or --burst); "
                     "SIGUSR1 writes every thread's stack to stderr",
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
    p.add_argument("--concurrency", type=positive, default=4,
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
    p.add_argument("--prefetch", type=non_negative, default=None,
                   help="deprecated: fixes the look-ahead (jobs claimed beyond the handler "
                        "threads), which the worker otherwise sizes itself")
    duration(p, "--ack-delay", None,
             "deprecated: how long a completion may wait for others of its batch (default "
             "0s: completions are written in the background, a batch at a time)")
    p.add_argument("--claimers", type=positive, default=None,
                   help="deprecated: fixes the number of claim loops (default: up to 4 "
                        "while jobs are shorter than a claim's round trip, else 1)")
    p.add_argument("--pool-size", type=positive, default=None,
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
    p.add_argument("--metrics-port", type=port, default=None, metavar="PORT",
                   help="serve Prometheus metrics at http://HOST:PORT/metrics")
    p.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                   help="address the metrics server binds (default 127.0.0.1; 0.0.0.0: "
                        "every interface, e.g. for a Prometheus in another container)")
    p.add_argument("--schedule", default=None, metavar="FILE",
                   help="TOML file of [[schedule]] cron jobs to enqueue (once per due time, "
                        "however many workers run it)")
