"""The ``portq`` command. ``PORTQ_URL`` stands in for the URL argument everywhere."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import portq
from portq.errors import ConfigurationError, PortqError
from portq.job import Job
from portq.retry import Backoff
from portq.tasks import TaskRouter, import_module, load_app
from portq.tasks import queues as task_queues
from portq.worker import Worker

DEFAULT_DEMO_URL = "sqlite:///portq-demo.sqlite3"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, None: 1}


def parse_duration(text: str) -> float:
    """``'90'``, ``'30s'``, ``'15m'``, ``'2h'``, ``'7d'`` -> seconds."""
    m = _DURATION.match(text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: use a number with an optional unit ms/s/m/h/d/w")
    return float(m.group(1)) * _UNITS[m.group(2)]


def load_handler(spec: str) -> Callable[[Job], Any]:
    """Import ``module:function``; a clear error when it does not import."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"handler {spec!r} must look like module:function")
    target: Any = import_module(module_name, "handler")
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigurationError(f"handler {spec!r}: {module_name} has no {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigurationError(f"handler {spec!r} is not callable")
    return target  # type: ignore[no-any-return]


def _url(args: argparse.Namespace) -> str:
    url = args.url or os.environ.get("PORTQ_URL")
    if not url:
        raise ConfigurationError("no database URL: pass URL or set PORTQ_URL")
    return str(url)


def _open(args: argparse.Namespace) -> portq.Queue:
    return portq.connect(_url(args), prefix=args.prefix)


# ---- commands -----------------------------------------------------------------------------

def cmd_migrate(args: argparse.Namespace) -> int:
    with _open(args) as q:
        print(f"schema version {q.migrate()} at {q.url}")
    return 0


def cmd_enqueue(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"--payload is not valid JSON: {exc}") from None
    with _open(args) as q:
        result = q.enqueue_result(args.queue, payload, priority=args.priority,
                                  delay=args.delay, key=args.key,
                                  max_attempts=args.max_attempts, **unique_options(args))
    print(result.id if result.created else f"{result.id} existing")
    return 0


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
    with _open(args) as q:
        q.backend.check_schema()
        worker = Worker(q, queues, handler, concurrency=args.concurrency, lease=args.lease,
                        burst=args.burst, grace=args.grace, install_signals=True,
                        backoff=Backoff(args.backoff, args.backoff_base, args.backoff_cap),
                        idle_max=args.idle_max, reap_interval=args.reap_interval or None,
                        reap_delay=args.reap_delay,
                        prune_interval=args.prune_interval or None,
                        prune_older_than=args.prune_older_than, prefetch=args.prefetch,
                        ack_delay=args.ack_delay, claimers=args.claimers)
        stops = _start_worker_extras(args, q, worker)
        try:
            counters = worker.run()
        finally:
            for stop in stops:
                stop()
    print(json.dumps(counters.as_dict()), file=sys.stderr)
    return 0


def _start_worker_extras(args: argparse.Namespace, q: portq.Queue,
                         worker: Worker) -> list[Callable[[], None]]:
    """Start the scheduler (--schedule) and metrics server (--metrics-port) beside a
    worker; return what stops them."""
    stops: list[Callable[[], None]] = []
    if args.schedule:
        from portq.schedule import Scheduler, load_schedules
        scheduler = Scheduler(q, load_schedules(args.schedule))
        scheduler.start()  # enqueues what is due now before the worker's first claim
        stops.append(scheduler.stop)
    if args.metrics_port is not None:
        from portq.metrics import serve_metrics
        try:
            server = serve_metrics(q, worker, args.metrics_port)
        except OSError as exc:
            for stop in stops:
                stop()
            raise ConfigurationError(
                f"cannot serve metrics on 127.0.0.1:{args.metrics_port}: {exc}") from None
        stops.append(server.close)
    return stops


def cmd_stats(args: argparse.Namespace) -> int:
    with _open(args) as q:
        rows = [s.as_dict() for s in q.stats(args.queue)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    cols = ["queue", "ready", "scheduled", "running", "succeeded", "dead", "cancelled",
            "oldest_ready_age_s", "retry_rate", "paused"]
    table = [[("yes" if r[c] else "no") if c == "paused" else _cell(r[c]) for c in cols]
             for r in rows]
    _print_table(cols, table)
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    """``portq pause URL QUEUE``: no worker claims the queue's jobs until ``resume``."""
    with _open(args) as q:
        q.pause(args.queue_name)
    print(f"paused {args.queue_name}: workers claim none of its jobs from their next poll; "
          f"running jobs finish")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    """``portq resume URL QUEUE``: workers claim the queue's jobs again."""
    with _open(args) as q:
        q.resume(args.queue_name)
    print(f"resumed {args.queue_name}")
    return 0


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _print_table(cols: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))


def cmd_reap(args: argparse.Namespace) -> int:
    with _open(args) as q:
        print(q.reap(limit=args.limit, delay=args.delay))
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    total = 0
    with _open(args) as q:
        while True:
            n = q.prune(args.older_than, limit=args.limit, states=args.state or
                        ["succeeded", "cancelled"], queue=args.queue)
            total += n
            if n < args.limit or not args.all:
                break
    print(total)
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    with _open(args) as q:
        ok = q.retry_dead(args.job_id, extra_attempts=args.extra_attempts)
    print("retried" if ok else f"job {args.job_id} is not dead or cancelled")
    return 0 if ok else 1


def cmd_cancel(args: argparse.Namespace) -> int:
    with _open(args) as q:
        ok = q.cancel(args.job_id)
    print("cancelled" if ok else f"job {args.job_id} is not ready or running")
    return 0 if ok else 1


def cmd_jobs(args: argparse.Namespace) -> int:
    with _open(args) as q:
        records = q.jobs(args.state, queue=args.queue, limit=args.limit)
    if args.json:
        print(json.dumps([{**vars(r), **{k: getattr(r, k).isoformat() for k in
                                         ("run_at", "lease_until", "created_at", "finished_at")
                                         if getattr(r, k) is not None}} for r in records],
                         indent=2, default=str))
        return 0
    cols = ["id", "queue", "state", "attempts", "max_attempts", "key", "last_error"]
    _print_table(cols, [[_cell(getattr(r, c)) if c != "last_error" else
                         (r.last_error or "-").strip().splitlines()[-1][:80]
                         for c in cols] for r in records])
    return 0


def cmd_conformance(args: argparse.Namespace) -> int:
    import pytest

    from portq.conformance import SUITE_DIR
    url = _url(args)
    portq.url.parse_url(url)  # a clear error before pytest starts
    argv = [str(SUITE_DIR), "-p", "portq.conformance.plugin", "--portq-url", url,
            "--portq-require", portq.url.parse_url(url).engine, "-p", "no:cacheprovider",
            "-c", os.devnull, "--rootdir", str(SUITE_DIR), "-m", "not fault", "-q", "-ra",
            *args.pytest_args]
    return int(pytest.main(argv))


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
    report = bench.run(url, args.scenario or bench.SCENARIOS, jobs=args.jobs,
                       workers=args.workers, batches=args.batch, sizes=args.sizes,
                       progress=progress, modes=args.mode or bench.MODES,
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
             ["ready", "total", "claim_ms", "server_ms", "ordered_walk", "nodes"])):
        if key in report:
            print(f"\n{title}")
            _print_table(cols, [[_cell(", ".join(v) if isinstance(v, list) else v)
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
    parser = argparse.ArgumentParser(prog="portq", description=__doc__)
    parser.add_argument("--log-level", default=os.environ.get("PORTQ_LOG_LEVEL", "WARNING"),
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, fn: Callable[[argparse.Namespace], int], help_: str,
                url: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        if url:
            p.add_argument("url", nargs="?", metavar="URL",
                           help="database URL (default: $PORTQ_URL)")
            p.add_argument("--prefix", default="portq_", help="table prefix (default portq_)")
        p.set_defaults(fn=fn)
        return p

    command("migrate", cmd_migrate, "create or upgrade portq's tables")
    p = command("enqueue", cmd_enqueue, "add a job; prints its id")
    p.add_argument("--queue", required=True)
    p.add_argument("--payload", default="null", help="JSON payload")
    p.add_argument("--priority", type=int, default=0)
    p.add_argument("--delay", type=parse_duration, default=None, help="e.g. 30s, 5m")
    p.add_argument("--key", default=None,
                   help="idempotency key, unique across all queues unless scoped below; "
                        "an existing job's id is printed with 'existing'")
    p.add_argument("--max-attempts", type=_positive, default=None)
    p.add_argument("--unique-per-queue", action="store_true",
                   help="scope --key to this queue")
    p.add_argument("--unique-for", type=parse_duration, default=None, metavar="DURATION",
                   help="scope --key to jobs created within DURATION (e.g. 1h)")
    p.add_argument("--unique-states", default=None, metavar="STATES",
                   help="scope --key to jobs in these states, e.g. ready,running")

    p = command("worker", cmd_worker, "run a worker")
    p.add_argument("--queue", action="append", default=None,
                   help="repeat for more queues (with --app: narrows its tasks' queues)")
    p.add_argument("--handler", default=None,
                   help="module:function taking a portq.Job (def, or async def: awaited on "
                        "an event loop of the handler thread)")
    p.add_argument("--app", default=None, metavar="MODULE",
                   help="module of @portq.task functions: serve their queues, running each "
                        "job's named task (a job naming an unknown task goes dead)")
    p.add_argument("--concurrency", type=_positive, default=4)
    p.add_argument("--lease", type=parse_duration, default=30.0)
    p.add_argument("--grace", type=parse_duration, default=30.0,
                   help="how long shutdown waits for running jobs before releasing them")
    p.add_argument("--prefetch", type=_non_negative, default=0,
                   help="jobs claimed ahead of free handler threads (default 0); they are "
                        "leased while they wait and given back when shutdown starts")
    p.add_argument("--ack-delay", type=parse_duration, default=None,
                   help="write completions in the background, batched, at most this long "
                        "after the handler returns (e.g. 0s, 10ms); default: the handler's "
                        "thread waits for its own commit")
    p.add_argument("--claimers", type=_positive, default=1,
                   help="claim loops, each on its own connection (default 1); more keep a "
                        "worker of many short jobs from waiting on one claim's round trip")
    p.add_argument("--burst", action="store_true",
                   help="exit 0 once nothing is left: no job of the queues is ready and "
                        "due, none is running (another worker's too: a crashed worker's "
                        "jobs are waited for until the reaper returns them, then run), and "
                        "the jobs this worker reaped have waited out --reap-delay and run; "
                        "jobs due later (--delay, retry backoff) are not waited for")
    p.add_argument("--backoff", choices=["full_jitter", "exponential", "fixed"],
                   default="full_jitter", help="retry delay policy (default full_jitter)")
    p.add_argument("--backoff-base", type=parse_duration, default=1.0,
                   help="first retry's delay ceiling (default 1s)")
    p.add_argument("--backoff-cap", type=parse_duration, default=3600.0,
                   help="longest retry delay (default 1h)")
    p.add_argument("--idle-max", type=parse_duration, default=2.0,
                   help="longest sleep between polls of an empty queue (default 2s)")
    p.add_argument("--reap-interval", type=parse_duration, default=10.0,
                   help="how often this worker returns expired leases (0: never; default 10s)")
    p.add_argument("--reap-delay", type=parse_duration, default=1.0,
                   help="how long a returned job waits before it runs again (default 1s)")
    p.add_argument("--prune-interval", type=parse_duration, default=3600.0,
                   help="how often this worker deletes old finished jobs (0: never; "
                        "default 1h)")
    p.add_argument("--prune-older-than", type=parse_duration, default=7 * 86400.0,
                   help="age of finished jobs the worker prunes (default 7d)")
    p.add_argument("--metrics-port", type=_port, default=None, metavar="PORT",
                   help="serve Prometheus metrics at http://127.0.0.1:PORT/metrics")
    p.add_argument("--schedule", default=None, metavar="FILE",
                   help="TOML file of [[schedule]] cron jobs to enqueue (once per due time, "
                        "however many workers run it)")

    p = command("stats", cmd_stats, "per-queue counts, oldest ready age, retry rate")
    p.add_argument("--queue", default=None)
    p.add_argument("--json", action="store_true")

    p = command("reap", cmd_reap, "return expired leases to ready (or dead)")
    p.add_argument("--limit", type=_positive, default=1000)
    p.add_argument("--delay", type=parse_duration, default=1.0)

    p = command("prune", cmd_prune, "delete finished jobs in bounded batches")
    p.add_argument("--older-than", type=parse_duration, required=True, help="e.g. 7d")
    p.add_argument("--limit", type=_positive, default=1000)
    p.add_argument("--state", action="append", choices=["succeeded", "cancelled", "dead"],
                   help="states to delete (default succeeded and cancelled; dead is kept)")
    p.add_argument("--queue", default=None)
    p.add_argument("--all", action="store_true", help="repeat batches until none is left")

    p = command("retry", cmd_retry, "replay a dead or cancelled job")
    p.add_argument("job_id", type=_positive)
    p.add_argument("--extra-attempts", type=_positive, default=1)

    p = command("cancel", cmd_cancel, "cancel a ready or running job")
    p.add_argument("job_id", type=_positive)

    p = command("pause", cmd_pause, "stop every worker claiming a queue's jobs (persisted; "
                                    "running jobs finish)")
    p.add_argument("queue_name", metavar="QUEUE")
    p = command("resume", cmd_resume, "let workers claim a paused queue's jobs again")
    p.add_argument("queue_name", metavar="QUEUE")

    p = command("jobs", cmd_jobs, "list jobs in one state")
    p.add_argument("--state", default="dead",
                   choices=["ready", "running", "succeeded", "dead", "cancelled"])
    p.add_argument("--queue", default=None)
    p.add_argument("--limit", type=_positive, default=50)
    p.add_argument("--json", action="store_true")

    p = command("conformance", cmd_conformance,
                "run the conformance suite against URL (exit 0 only if nothing failed)")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER,
                   help="extra pytest arguments, e.g. -k claim")

    p = command("demo", cmd_demo, f"enqueue and work a batch of jobs (default {DEFAULT_DEMO_URL})")
    p.add_argument("--jobs", type=_positive, default=5000)
    p.add_argument("--workers", type=_positive, default=4)
    p.add_argument("--batch", type=_positive, default=20)

    from portq import bench
    p = command("bench", cmd_bench, "measure claim cost vs table size, throughput and "
                "enqueue rate in portqb_ tables (dropped afterwards)")
    p.add_argument("--scenario", action="append", choices=bench.SCENARIOS,
                   help="repeat for more (default: all)")
    p.add_argument("--jobs", type=_positive, default=bench.DEFAULT_JOBS)
    p.add_argument("--workers", type=_int_list, default=list(bench.DEFAULT_WORKERS),
                   help="worker thread counts, e.g. 4 or 1,2,4,8 (default)")
    p.add_argument("--batch", type=_int_list, default=list(bench.DEFAULT_BATCHES),
                   help="claim batch sizes (default 1,20)")
    p.add_argument("--mode", action="append", choices=bench.MODES,
                   help="throughput mode, repeat for more (default: both); pipelined = "
                        "one claim loop per worker, each holding up to "
                        f"{bench.PIPELINE_DEPTH} batches ahead, and background acks "
                        "(ack_delay 0)")
    p.add_argument("--repeat", type=_positive, default=1,
                   help="run each throughput configuration this many times and report "
                        "the median run (default 1)")
    p.add_argument("--sizes", type=_sizes, default=list(bench.DEFAULT_SIZES),
                   help="claim-latency sizes: READY[/TOTAL],... ready jobs per queue "
                        "(default 1000,10000,100000,100000/1000000)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        return int(args.fn(args))
    except PortqError as exc:
        print(f"portq: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
