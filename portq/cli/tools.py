"""``portq conformance``, ``demo`` and ``bench``: check an engine, try portq, measure it."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

import portq
from portq.cli.common import Commands, cell, positive, print_table, url_of
from portq.engines import engine as engine_record
from portq.errors import ConfigurationError
from portq.job import Job
from portq.worker import Worker

DEFAULT_DEMO_URL = "sqlite:///portq-demo.sqlite3"


def cmd_conformance(args: argparse.Namespace) -> int:
    url = url_of(args)
    engine = portq.url.parse_url(url).engine  # a clear error before pytest starts
    try:
        import pytest  # noqa: F401
    except ModuleNotFoundError:
        raise ConfigurationError(
            "portq conformance runs on pytest, which is not installed; install it with: "
            f"pip install 'portq[{engine_record(engine).extra}]' (or: pip install "
            "'pytest>=8')") from None

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
    url = url_of(args)
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
            print_table(cols, [[cell(", ".join(map(str, v)) if isinstance(v, list) else v)
                                for v in (r[c] for c in cols)] for r in report[key]])
    return 0


def _int_list(text: str) -> list[int]:
    return [positive(part) for part in text.split(",")]


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


def _sizes(text: str) -> list[tuple[int, int | None]]:
    from portq import bench
    try:
        return bench.parse_sizes(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_conformance(cmds: Commands) -> None:
    from portq.conformance import TEST_PREFIX
    p = cmds.command("conformance", cmd_conformance,
                     "check URL's engine against portq's conformance suite; prints the engine, "
                     "then each property passed, failed or skipped (exit 0 only if none failed)",
                     prefix=TEST_PREFIX, json_help="print the report as JSON")
    p.add_argument("--junit", metavar="FILE", default=None,
                   help="also write a JUnit XML report to FILE")
    p.add_argument("--keep", action="store_true",
                   help="keep the suite's tables afterwards (default: dropped)")
    p.set_defaults(pytest_args=[])
    p.epilog = "Arguments after -- go to pytest, e.g. portq conformance URL -- -k claim"


def add_demo(cmds: Commands) -> None:
    p = cmds.command("demo", cmd_demo,
                     f"enqueue and work a batch of jobs (default {DEFAULT_DEMO_URL})",
                     json_help=None)
    p.add_argument("--jobs", type=positive, default=5000,
                   help="jobs to enqueue and work (default 5000)")
    p.add_argument("--workers", type=positive, default=4,
                   help="handler threads (default 4)")
    p.add_argument("--batch", type=positive, default=20,
                   help="jobs claimed per claim statement (default 20)")


def add_bench(cmds: Commands) -> None:
    from portq import bench
    p = cmds.command("bench", cmd_bench, "measure claim cost vs table size, throughput and "
                     "enqueue rate in portqb_ tables (dropped afterwards)",
                     json_help="print the report as JSON")
    p.add_argument("--scenario", action="append", choices=bench.SCENARIOS,
                   help="repeat for more (default: all but pickup)")
    p.add_argument("--jobs", type=positive, default=bench.DEFAULT_JOBS,
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
    p.add_argument("--repeat", type=positive, default=1,
                   help="run each throughput configuration this many times and report "
                        "the median run (default 1)")
    p.add_argument("--sizes", type=_sizes, default=list(bench.DEFAULT_SIZES),
                   help="claim-latency sizes: READY[/TOTAL],... ready jobs per queue "
                        "(default 1000,10000,100000,100000/1000000)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
