"""Run every benchmark and write docs/benchmarks.md with tables and PNG plots.

    .venv/bin/python benchmarks/run.py [--jobs 10000] [--rounds 5] [--engine-rounds 25]
        [--skip-peers] [--engines sqlite,postgres,mysql] [--no-growth] [--growth-rows 10000000]
        [--processes 1,2,4,8,16] [--from-json results.json]
        [--middleware none,empty,otel,metrics] [--middleware-only]

A short validation run: ``--jobs 2000 --rounds 1 --engine-rounds 1 --skip-peers
--growth-rows 200000 --processes 1,4``. Each section logs its start and its wall time;
the results JSON keeps them (``sections``) so the next runner knows what a full run
costs.

* portq (`portq.bench`) on SQLite, PostgreSQL and MariaDB: enqueue, throughput (the sync
  Worker and `portq.aio.AsyncWorker`), claim latency vs table size;
* growth: on each engine the table filled to 10M rows (1M ready over 3 queues), the fill
  timed, the claim timed at that size, and the Worker's throughput on the full table
  against the empty one;
* worker processes: 1-16 OS processes, each one sync Worker with its defaults, with the
  CPU of the workers and of the database server sampled meanwhile;
* a raw-SQL ceiling on every engine (`portq.bench.raw_throughput_run`): portq's own claim
  and complete statements driven by a minimal loop (one thread and DB-API connection per
  worker, no pool, no Worker), in up to three forms: one commit per completed job
  (`complete`), one statement and commit for each claimed batch (`complete_many`, what
  portq's worker writes), and on PostgreSQL the batch's completion and the next claim in
  one statement (`complete_claim`);
* rounds at 4 workers: on PostgreSQL every contender (raw loops, both portq workers, the
  peers) once per round (``--rounds``); on every engine the raw `complete_many` loop and
  the Worker once per round (``--engine-rounds``: a pair takes seconds, and batches of
  8-40 rounds on one machine put the SQLite ratio anywhere in 0.71-0.92; on PostgreSQL one
  round's ratio ran anywhere in 0.82-1.49 within 25 rounds, so the 5 head-to-head rounds
  cannot tell a Worker at 0.98 of the raw loop from one at 1.04);
  the targets come from those rounds' medians (each Worker-against-raw target from its
  engine's pair rounds, the others from the head-to-head); each of portq's runs in
  them is metered (`portq.bench.cpu`: the CPU of the client's threads, of the database
  server and of the machine, sampled from /proc), and the doc says what bounded each
  contender's median round;
* the I/O-bound workload on PostgreSQL (``--io``): one process of 40 slots, each job
  waiting 5 ms, in interleaved rounds of both portq fronts, the bare ceilings
  (`portq.bench.sleep_ceiling`) and the four peers with the same concurrency
  (benchmarks/peers.py ``--io-slots``), and an AsyncWorker of 200 slots on 5 ms and
  on no-op jobs;
* middleware cost (benchmarks/middleware.py): no-op jobs drained by a burst worker on
  each engine and front with no middleware, an empty chain, one pass-through
  middleware, OpenTelemetry, the metrics' histograms (``--middleware`` picks them; ''
  skips the section); ``--middleware-only`` runs just this section and rewrites the doc
  from the results JSON with it replaced (the other sections and plots as they were);
* procrastinate, pgqueuer, oban and chancy on the same PostgreSQL, installed only into
  benchmarks/.venv-peers by this script (never portq dependencies), each in a schema of
  its own of the benchmark database, bulk-enqueued and then VACUUM ANALYZEd exactly as
  portq's own table is before each run; matplotlib for the plots lives there too.

Benchmarks measure; nothing here passes or fails on a number.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from middleware import FRONTS, middleware_rounds, middleware_section, parse_variants

import portq
from portq import bench
from portq.backends.sqlite import DATA_VERSION_POLL_S
from portq.runtime.pacing import LOOKAHEAD_PER_CLAIMER, claim_batch

ROOT = Path(__file__).resolve().parent.parent
PEERS_VENV = ROOT / "benchmarks" / ".venv-peers"
PEERS_PACKAGES = ["procrastinate", "pgqueuer", "asyncpg", "psycopg[binary]", "psycopg-pool",
                  "matplotlib"]
RESULTS = ROOT / "benchmarks" / "results" / "latest.json"
DOC = ROOT / "docs" / "benchmarks.md"
IMAGES = ROOT / "docs" / "benchmarks"
PG_URL = os.environ.get("PORTQ_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
MYSQL_URL = os.environ.get("PORTQ_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
# (ratio key, floor, target as the report states it, short name, unit: see floored)
TARGETS = (("worker_vs_pgqueuer", 2.0, "portq worker >= 2x pgqueuer at 4 workers",
            "pgqueuer", "x"),
           ("worker_vs_procrastinate", 2.0, "portq worker >= 2x procrastinate at 4 workers",
            "procrastinate", "x"),
           ("worker_vs_raw", 1.0, "portq worker >= 1.0x the raw `complete_many` ceiling "
            "at 4 workers (issue 32)", "raw-ceiling", "%"),
           ("async_vs_worker", 0.9, "AsyncWorker within 10% of the sync Worker (>= 90%) at "
            "4 workers", "AsyncWorker", "%"),
           ("worker_vs_raw_mysql", 0.95, "MariaDB: portq worker >= 95% of its raw "
            "`complete_many` ceiling at 4 workers (issue 32)", "MariaDB raw-ceiling",
            "%"),
           ("worker_vs_raw_sqlite", 0.85, "SQLite: portq worker >= 85% of its raw "
            "`complete_many` ceiling at 4 workers", "SQLite raw-ceiling", "%"),
           ("bulk_enqueue_mysql", 20_000, "MariaDB bulk enqueue >= 20,000 jobs/s",
            "MariaDB bulk-enqueue", "jobs/s"))


def floored(value: float, unit: str = "%") -> str:
    """``value`` as a percentage (``unit`` "%"), a multiple ("x") or a rate ("jobs/s"),
    cut down to the precision shown, never rounded up: a figure judged against a target
    must not read as the target while it falls short (a Worker at 99.6% of the raw loop
    read "100%")."""
    if unit == "jobs/s":
        return f"{math.floor(value):,} jobs/s"
    hundredths = math.floor(value * 100 + 1e-9)
    return f"{hundredths}%" if unit == "%" else f"{hundredths / 100:.2f}x"


#: pickup targets: (engine, most p99 ms, target as the report states it, short name)
PICKUP_TARGETS = (("postgres", 10, "PostgreSQL pickup p99 <= 10 ms (LISTEN/NOTIFY)",
                   "PostgreSQL pickup"),
                  ("sqlite", 10, "SQLite pickup p99 <= 10 ms (PRAGMA data_version)",
                   "SQLite pickup"),
                  ("mysql", 250, "MariaDB pickup p99 <= 250 ms (polling, its default "
                   "idle_max)", "MariaDB pickup"))
#: the contenders of each engine's pair rounds, in the order they run in each
ENGINE_ROUNDS = ("raw complete_many", "portq worker")
#: SQLite's Worker claims more than 20 a claim when no batch is given (its one claim loop
#: also writes: docs/operations.md, "Claim batch"): its rounds also run that pair at that
#: batch, the Worker with no batch given (the targets stay on the pair at 20)
OWN_BATCH = claim_batch(None, 4, 4 + LOOKAHEAD_PER_CLAIMER, one_writing_loop=True)
OWN_BATCH_ROUNDS = {"sqlite": (f"raw complete_many, batch {OWN_BATCH}",
                               f"portq worker, no batch given ({OWN_BATCH} a claim)")}
#: the contenders of every head-to-head round, in the order they run in it
HEAD_TO_HEAD = ("raw complete", "raw complete_many", "raw complete_claim", "portq worker",
                "portq async",
                "pgqueuer", "procrastinate", "oban", "chancy")
#: how each contender runs (the doc states it beside the head-to-head table)
CONFIGS = {
    "raw complete": "portq's claim SQL (batch 20) and its one-job `complete` in a bare "
                    "loop, 4 threads with a DB-API connection each, a commit per job",
    "raw complete_many": "the same loop, one `complete_many` statement and commit per "
                         "claimed batch (what the Worker writes)",
    "raw complete_claim": "the same loop, each batch's completion and the next claim in "
                          "one statement and commit (`complete_claim`, PostgreSQL only)",
    "portq worker": "one sync `portq.Worker`, concurrency 4, batch 20, no tuning options "
                    "(it sizes look-ahead, completion batches and claim loops itself)",
    "portq async": "one `portq.aio.AsyncWorker`, concurrency 4, batch 20, async no-op "
                   "handler, no tuning options (the Worker's sizing)",
    "pgqueuer": "4 QueueManagers in one event loop, default batch (10), buffered "
                "acknowledgements, drain mode",
    "procrastinate": "one worker, concurrency 4, no LISTEN/NOTIFY, 50 ms polling",
    "oban": "one server-mode Oban, one queue of concurrency 4, defaults otherwise",
    "chancy": "one Worker, queue concurrency 4, asyncio executor, eager polling (1 s)",
}
#: growth's table and the worker-process counts of a full run
GROWTH_ROWS, GROWTH_READY = bench.GROWTH_ROWS, bench.GROWTH_READY
PROCESSES = "1,2,4,8,16"
#: seconds of wall time per unit, from validation runs on the 2-core machine (rough)
ESTIMATE = {"sweep_job": 0.0012, "h2h_job": 0.0009, "peers_job": 0.004,
            "fill_row": 8e-6, "process_run": 6.0, "pickup_run": 20.0}
PEERS = ("pgqueuer", "procrastinate", "oban", "chancy")
#: oban-py needs Python 3.12+: a venv of its own (chancy runs there too), made with the
#: interpreter at PORTQ_PY312 (default: pyenv's 3.12 where it exists)
PEERS312_VENV = ROOT / "benchmarks" / ".venv-peers312"
PEERS312_PACKAGES = ["oban", "chancy", "psycopg[binary]", "psycopg-pool"]
PY312 = os.environ.get("PORTQ_PY312", "/root/.pyenv/versions/3.12.1/bin/python3")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Sections:
    """Logs each section's start and wall time, and keeps the times for the results."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str) -> Sections:
        self.name, self.started = name, time.perf_counter()
        log(f"{name}: start")
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        spent = time.perf_counter() - self.started
        self.seconds[self.name] = round(self.seconds.get(self.name, 0) + spent, 1)
        log(f"{self.name}: {spent:.0f} s")


def estimate(args: argparse.Namespace) -> float:
    """Rough wall time (s) of a run with ``args``, from :data:`ESTIMATE`."""
    engines = len(args.engines.split(","))
    workers = len(args.workers.split(","))
    pg = "postgres" in args.engines
    seconds = engines * args.jobs * workers * 4 * ESTIMATE["sweep_job"]  # 2 batches x 2 modes
    seconds += engines * args.jobs * workers * 3 * ESTIMATE["sweep_job"]  # raw loops
    seconds += engines * args.engine_rounds * args.jobs * 2 * ESTIMATE["h2h_job"]
    if not args.skip_peers:
        seconds += pg * args.jobs * workers * 4 * ESTIMATE["peers_job"]
    seconds += pg * args.rounds * args.jobs * (5 + 4 * (not args.skip_peers)) * \
        ESTIMATE["h2h_job"]
    if args.growth:
        seconds += engines * (args.growth_rows * ESTIMATE["fill_row"] +
                              2 * args.jobs * ESTIMATE["sweep_job"])
    seconds += engines * len(process_counts(args)) * args.process_rounds * ESTIMATE["process_run"]
    seconds += args.pickup * (engines + 2 * pg * (not args.skip_peers)) * ESTIMATE["pickup_run"]
    seconds += pg * args.io * args.rounds * args.io_jobs * 3 / 4000  # ~4,000 jobs/s each
    # the peers' I/O-bound runs: procrastinate ~400 jobs/s, oban and chancy ~1,500
    seconds += pg * args.io * (not args.skip_peers) * args.rounds * args.io_jobs * \
        (1 / 400 + 2 / 1500)
    return float(seconds)


def process_counts(args: argparse.Namespace) -> list[int]:
    return [int(n) for n in args.processes.split(",") if n.strip()]


def peers_python() -> Path:
    """The peers venv's python, creating the venv and installing the peers if needed."""
    python = PEERS_VENV / "bin" / "python"
    if not python.exists():
        log(f"creating {PEERS_VENV}")
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
    check = subprocess.run([str(python), "-c", "import procrastinate, pgqueuer, matplotlib"],
                           capture_output=True)
    if check.returncode != 0:
        log(f"installing {', '.join(PEERS_PACKAGES)} into {PEERS_VENV}")
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PEERS_PACKAGES], check=True)
    return python


def peers312_python() -> Path | None:
    """The Python 3.12 peers venv (oban), created if needed; None where no 3.12 exists."""
    python = PEERS312_VENV / "bin" / "python"
    if not python.exists():
        if not Path(PY312).exists():
            log(f"no Python 3.12 at {PY312} (set PORTQ_PY312): oban not run")
            return None
        subprocess.run([PY312, "-m", "venv", str(PEERS312_VENV)], check=True)
    if subprocess.run([str(python), "-c", "import oban, chancy"],
                      capture_output=True).returncode:
        log(f"installing {', '.join(PEERS312_PACKAGES)} into {PEERS312_VENV}")
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PEERS312_PACKAGES],
                       check=True)
    return python


def python_for(peer: str, python: Path) -> Path | None:
    """The interpreter that runs ``peer``."""
    return peers312_python() if peer in ("oban", "chancy") else python


def raw_runs(url: str, jobs: int, workers: list[int],
             completes: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """`portq.bench.raw_throughput_run` at each worker count, in each completion form the
    engine has (or those of ``completes``), batch 20."""
    with portq.connect(url, prefix=bench.BENCH_PREFIX) as queue:
        queue.migrate()
        forms = [c for c in bench.raw_completes(queue.backend)
                 if completes is None or c in completes]
        return [bench.raw_throughput_run(queue, jobs, w, 20, complete)
                for complete in forms for w in workers]


#: jobs/s per round of each contender, and the CPU figures of each of those runs
#: (:func:`portq.bench.cpu.CpuMeter.figures`)
Rounds = tuple[dict[str, list[float]], dict[str, list[dict[str, Any]]]]
#: each engine's pair rounds: jobs/s and CPU per contender, and the jobs/s of every
#: run's bulk enqueue (each contender's run enqueues its jobs first)
EngineRounds = tuple[dict[str, list[float]], dict[str, list[dict[str, Any]]], list[float]]


def _record(rounds: Rounds, name: str, row: dict[str, Any]) -> None:
    """One run of contender ``name``: its jobs/s and its CPU figures."""
    rounds[0].setdefault(name, []).append(row["jobs_per_s"])
    rounds[1].setdefault(name, []).append(row["cpu"])


def engine_rounds(url: str, jobs: int, rounds: int) -> EngineRounds:
    """The raw `complete_many` loop and the Worker at 4 workers, one after the other in
    each of ``rounds`` rounds: jobs/s and CPU per round (each engine's Worker-against-raw
    target), and each run's bulk-enqueue jobs/s (the MariaDB bulk-enqueue target: a
    median of many, not the sweep's one measurement)."""
    with portq.connect(url, prefix=bench.BENCH_PREFIX, pool_size=16) as queue:
        queue.migrate()
        own = OWN_BATCH_ROUNDS.get(queue.backend.engine, ())
        out: Rounds = ({name: [] for name in (*ENGINE_ROUNDS, *own)}, {})
        enqueues: list[float] = []

        def record(name: str, row: dict[str, Any]) -> None:
            _record(out, name, row)
            enqueues.append(row["enqueue_jobs_per_s"])
        for n in range(rounds):
            log(f"{queue.backend.engine} rounds, round {n + 1} of {rounds}")
            record("raw complete_many", bench.raw_throughput_run(
                queue, jobs, 4, 20, "complete_many"))
            record("portq worker", bench.throughput_run(queue, jobs, 4, 20))
            if own:
                record(own[0], bench.raw_throughput_run(
                    queue, jobs, 4, OWN_BATCH, "complete_many"))
                record(own[1], bench.throughput_run(queue, jobs, 4, None))
    return (*out, enqueues)


def run_peer(python: Path, peer: str, jobs: int, *options: str) -> list[dict[str, Any]]:
    """peers.py in the peers venv, for ``peer`` with ``options`` (``--workers``, or the
    I/O-bound ``--io-slots``): its JSON result rows."""
    proc = subprocess.run(
        [str(python), str(ROOT / "benchmarks" / "peers.py"), PG_URL, "--peer", peer,
         "--jobs", str(jobs), *options],
        capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    rows: list[dict[str, Any]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return rows


def head_to_head(jobs: int, rounds: int, python: Path | None) -> Rounds:
    """The targets' contenders at 4 workers on PostgreSQL, run one after another in each of
    ``rounds`` rounds, so that every contender sees the same machine: jobs/s per round,
    and portq's CPU per round (the peers run in processes of their own: none)."""
    out: Rounds = ({name: [] for name in HEAD_TO_HEAD
                    if python is not None or name not in PEERS}, {})
    runs = out[0]
    with portq.connect(PG_URL, prefix=bench.BENCH_PREFIX, pool_size=16) as queue:
        bench.drop_tables(queue.backend)
        queue.migrate()
        try:
            for n in range(rounds):
                log(f"head to head, round {n + 1} of {rounds}")
                for complete in bench.raw_completes(queue.backend):
                    _record(out, f"raw {complete}", bench.raw_throughput_run(
                        queue, jobs, 4, 20, complete))
                _record(out, "portq worker", bench.throughput_run(queue, jobs, 4, 20))
                _record(out, "portq async",
                        bench.async_throughput_run(queue, PG_URL, jobs, 4, 20))
                for peer in PEERS if python is not None else ():
                    interpreter = python_for(peer, python) if python is not None else None
                    if interpreter is None:
                        continue
                    row = run_peer(interpreter, peer, jobs, "--workers", "4")[0]
                    if "jobs_per_s" in row:
                        runs[peer].append(row["jobs_per_s"])
                    else:
                        log(f"{peer} round {n + 1} not run: {row.get('error')}")
        finally:
            bench.drop_tables(queue.backend)
    return out


#: the I/O-bound workload: slots of one worker process, and how long each job waits
IO_SLOTS, IO_JOB_MS = 40, 5.0
#: the wide asyncio case: an AsyncWorker of this many slots, its handler awaiting
#: asyncio.sleep(IO_JOB_MS); its ceiling is the lower of the ideal and the machine's CPU
#: limit, measured in the same round as the same worker's no-op jobs
IO_WIDE_SLOTS = 200


def io_peer_run(python: Path, peer: str, jobs: int) -> dict[str, Any]:
    """One I/O-bound run of ``peer`` (benchmarks/peers.py ``--io-slots``): its JSON row,
    or ``{"error": ...}``."""
    try:
        return run_peer(python, peer, jobs, "--io-slots", str(IO_SLOTS),
                        "--job-ms", str(IO_JOB_MS))[0]
    except RuntimeError as exc:
        return {"error": str(exc)[-500:]}


def io_rounds(jobs: int, rounds: int, python: Path | None) -> dict[str, Any]:
    """The I/O-bound workload on PostgreSQL (one process, :data:`IO_SLOTS` slots, each
    job waiting :data:`IO_JOB_MS`: ideal slots / job time), portq's two fronts and the
    peers (:data:`IO_CONFIGS`: as many concurrent jobs) one after another in each of
    ``rounds`` rounds; jobs/s per round, and the load average before and after."""
    out: Rounds = ({"portq worker": [], "portq async": []}, {})
    runs = out[0]
    peers: dict[str, Path] = {}  # each peer's interpreter
    if python is not None:
        for peer in PEERS:
            if (peer_python := python_for(peer, python)) is not None:
                peers[peer] = peer_python
                runs[peer] = []
    # jobs/s of each wide round, and its CPU figures (portq.bench.cpu) beside them
    wide: dict[str, list[Any]] = {"io": [], "noop": [], "io_cpu": [], "noop_cpu": []}
    ceiling: dict[str, list[float]] = {front: [] for front in bench.CEILING_FRONTS}
    load = [os.getloadavg()[0]]
    with portq.connect(PG_URL, prefix=bench.BENCH_PREFIX, pool_size=16) as queue:
        bench.drop_tables(queue.backend)
        queue.migrate()
        try:
            for n in range(rounds):
                log(f"I/O-bound workload, round {n + 1} of {rounds}")
                _record(out, "portq worker", bench.throughput_run(
                    queue, jobs, IO_SLOTS, None, job_ms=IO_JOB_MS))
                _record(out, "portq async", bench.async_throughput_run(
                    queue, PG_URL, jobs, IO_SLOTS, None, job_ms=IO_JOB_MS))
                for front in bench.CEILING_FRONTS:
                    ceiling[front].append(bench.sleep_ceiling(front, IO_SLOTS, IO_JOB_MS, jobs))
                for kind, job_ms in (("io", IO_JOB_MS), ("noop", 0.0)):
                    run = bench.async_throughput_run(
                        queue, PG_URL, jobs * IO_WIDE_SLOTS // IO_SLOTS, IO_WIDE_SLOTS,
                        None, job_ms=job_ms)
                    wide[kind].append(run["jobs_per_s"])
                    wide[f"{kind}_cpu"].append(run["cpu"])
                for peer, peer_python in peers.items():
                    row = io_peer_run(peer_python, peer, jobs)
                    if "jobs_per_s" in row:
                        runs[peer].append(row["jobs_per_s"])
                    else:
                        log(f"{peer} I/O round {n + 1} not run: {row.get('error')}")
                load.append(os.getloadavg()[0])
        finally:
            bench.drop_tables(queue.backend)
    return {"slots": IO_SLOTS, "job_ms": IO_JOB_MS, "jobs": jobs,
            "ideal": IO_SLOTS * 1000 / IO_JOB_MS, "runs": runs, "cpu": out[1], "loadavg": load,
            "ceiling": ceiling,
            "wide": {"slots": IO_WIDE_SLOTS, "jobs": jobs * IO_WIDE_SLOTS // IO_SLOTS,
                     "ideal": IO_WIDE_SLOTS * 1000 / IO_JOB_MS, **wide}}


def io_section(res: dict[str, Any]) -> list[str]:
    """The I/O-bound workload's table: median and spread of each contender, as a share
    of the ideal and against pgqueuer, with the targets' verdicts."""
    io = res.get("io")
    if not io:
        return []
    ideal = io["ideal"]
    pgq = statistics.median(io["runs"]["pgqueuer"]) if io["runs"].get("pgqueuer") else None
    lines = ["", "## I/O-bound jobs", "",
             f"One process on PostgreSQL, {io['slots']} slots, {io['jobs']:,} jobs each "
             f"waiting {io['job_ms']:g} ms (ideal {ideal:,.0f} jobs/s); "
             f"{len(next(iter(io['runs'].values())))} interleaved rounds; load average "
             f"{', '.join(f'{x:.1f}' for x in io['loadavg'])} (before, after each round). "
             "Targets: each front >= 85% of the ideal and >= 1.5x pgqueuer. The bare "
             "ceiling is its front's own in the same rounds (`portq.bench.sleep_ceiling`: "
             "as many threads, or asyncio tasks, doing nothing but the wait). Each peer's "
             "job awaits the same `asyncio.sleep`, with the same concurrency: "
             + "; ".join(f"{peer}: {how}" for peer, how in IO_CONFIGS.items()
                         if io["runs"].get(peer)) + ".", "",
             "| contender | median jobs/s | spread (min-max) | % of ideal | % of its bare "
             "ceiling | vs pgqueuer | verdict |", "|---|---|---|---|---|---|---|"]
    ceilings = {front: statistics.median(v) for front, v in io.get("ceiling", {}).items() if v}
    for name, values in io["runs"].items():
        if not values:
            continue
        med = statistics.median(values)
        versus = floored(med / pgq, "x") if pgq and name != "pgqueuer" else ""
        bare = ceilings.get(IO_FRONT_OF[name])
        of_bare = f"{100 * med / bare:.0f}%" if bare else ""
        ok = med >= 0.85 * ideal and (pgq is None or med >= 1.5 * pgq)
        verdict = ("met" if ok else "missed") if name.startswith("portq") else ""
        lines.append(f"| {name} | {med:,.0f} | {min(values):,.0f}-{max(values):,.0f} | "
                     f"{floored(med / ideal)} | {of_bare} | {versus} | {verdict} |")
    return lines + ceiling_lines(io, pgq) + wide_io_lines(io.get("wide"))


#: which bare ceiling (:data:`portq.bench.CEILING_FRONTS`) each I/O contender runs on
IO_FRONT_OF = {"portq worker": "threads", "portq async": "asyncio",
               **{peer: "asyncio" for peer in PEERS}}
#: how each peer runs the I/O-bound workload (benchmarks/peers.py ``--io-slots``)
IO_CONFIGS = {
    "pgqueuer": f"one QueueManager, max_concurrent_tasks {IO_SLOTS}, default batch (10)",
    "procrastinate": f"one worker, concurrency {IO_SLOTS}, no LISTEN/NOTIFY, 50 ms polling",
    "oban": f"one server-mode Oban, one queue of concurrency {IO_SLOTS}",
    "chancy": f"one Worker, queue concurrency {IO_SLOTS}, asyncio executor, eager polling",
}


def ceiling_lines(io: dict[str, Any], pgq: float | None) -> list[str]:
    """The bare ceilings of the rounds, and whether 85% of the ideal and 1.5x pgqueuer
    lie under each."""
    runs = {front: v for front, v in io.get("ceiling", {}).items() if v}
    if not runs:
        return []
    parts = [f"{front} {statistics.median(v):,.0f} jobs/s ({min(v):,.0f}-{max(v):,.0f}, "
             f"{100 * statistics.median(v) / io['ideal']:.0f}% of the ideal)"
             for front, v in runs.items()]
    line = f"Bare ceilings, medians of the rounds: {'; '.join(parts)}."

    def under(level: float) -> list[str]:
        """The fronts whose bare ceiling's median is under ``level`` jobs/s."""
        return [front for front, v in runs.items() if statistics.median(v) < level]
    share = 0.85 * io["ideal"]
    if short := under(share):
        line += (f" 85% of the ideal is {share:,.0f} jobs/s, above the bare "
                 f"{' and '.join(short)} ceiling: no queue on that front could reach it in "
                 "these rounds.")
    if pgq:
        need = 1.5 * pgq
        above = under(need)
        line += (f" 1.5x pgqueuer is {need:,.0f} jobs/s" +
                 (f", above the bare {' and '.join(above)} ceiling: no queue on that front "
                  "could reach it on this machine." if above else
                  ", under every bare ceiling."))
    return ["", line]


def wide_io_lines(wide: dict[str, Any] | None) -> list[str]:
    """The wide asyncio case: its jobs/s against the lower of its ideal and the machine's
    CPU limit (the same AsyncWorker's no-op jobs, in the same rounds)."""
    if not wide or not wide.get("io"):
        return []
    io, noop = statistics.median(wide["io"]), statistics.median(wide["noop"])
    ceiling = min(wide["ideal"], noop)
    bound = "the machine's CPU (no-op jobs)" if noop < wide["ideal"] else "the ideal"
    verdict = "met" if io >= 0.85 * ceiling else "missed"
    paired = [a / b for a, b in zip(wide["io"], wide["noop"], strict=True) if b]
    pairs = (f" Each round's own ratio of the two (the no-op run right after the 5 ms "
             f"one): median {floored(statistics.median(paired))} [{floored(min(paired))}-"
             f"{floored(max(paired))}], shown, not judged." if paired else "")
    return ["", f"An AsyncWorker of {wide['slots']} slots, its handler awaiting "
            f"`asyncio.sleep({IO_JOB_MS / 1000:g})`, {wide['jobs']:,} jobs a round: median "
            f"{io:,.0f} jobs/s ({min(wide['io']):,.0f}-{max(wide['io']):,.0f}); its ideal "
            f"is {wide['ideal']:,.0f}, and the same worker's no-op jobs (the machine's CPU "
            f"limit for it) ran at {noop:,.0f} ({min(wide['noop']):,.0f}-"
            f"{max(wide['noop']):,.0f}). The lower, {bound}, bounds it: "
            f"{floored(io / ceiling)} of {ceiling:,.0f}, target >= 85%: {verdict}."
            f"{pairs}" + (" What bounded its median rounds: the table \"What bounded each "
                          "run\"." if wide.get("io_cpu") else "")]


#: the wide case's two kinds of rounds: (key in the results, name in the report)
WIDE_KINDS = (("io", "5 ms jobs"), ("noop", "no-op jobs"))


def pickup_runs(engines: list[str], urls: dict[str, str],
                python: Path | None) -> list[dict[str, Any]]:
    """`portq.bench.pickup` on each engine, then procrastinate's and pgqueuer's pickup on
    PostgreSQL (benchmarks/peers.py --pickup) where the peers run."""
    rows: list[dict[str, Any]] = []
    for engine in engines:
        try:
            with portq.connect(urls[engine], prefix=bench.BENCH_PREFIX) as queue:
                queue.migrate()
                rows.append(bench.pickup(queue))
        except Exception as exc:  # noqa: BLE001 - report it as not run, go on
            rows.append({"engine": engine, "error": f"{type(exc).__name__}: {exc}"})
        log(f"pickup on {engine}: {rows[-1]}")
    if python is not None and "postgres" in engines:
        proc = subprocess.run(
            [str(python), str(ROOT / "benchmarks" / "peers.py"), PG_URL, "--pickup",
             "--pickup-jobs", str(bench.PICKUP_JOBS),
             "--pickup-gap-ms", str(bench.PICKUP_GAP_S * 1000),
             "--pickup-quiet-s", str(bench.PICKUP_QUIET_S),
             "--pickup-after-quiet", str(bench.PICKUP_AFTER_QUIET)],
            capture_output=True, text=True, timeout=600)
        if proc.returncode == 0:
            rows += json.loads(proc.stdout.strip().splitlines()[-1])
        else:
            rows.append({"peer": "peers", "error": proc.stderr[-1000:]})
    return rows


def pickup_section(res: dict[str, Any]) -> list[str]:
    """The pickup table: enqueue-commit to handler-start per engine and peer."""
    rows = res.get("pickup") or []
    if not rows:
        return []
    lines = ["", "## Pickup latency", "",
             f"An idle worker with 4 handler threads (slots) and its defaults; after a "
             f"{bench.PICKUP_QUIET_S:g} s quiet spell, {bench.PICKUP_JOBS} single jobs "
             f"{bench.PICKUP_GAP_S * 1000:g} ms apart, each enqueued in a transaction of "
             f"its own; then {bench.PICKUP_AFTER_QUIET} more, each after another "
             f"{bench.PICKUP_QUIET_S:g} s quiet spell. Latency is enqueue-commit to "
             "handler-start in the same process (`portq.bench.pickup`; the peers: "
             "benchmarks/peers.py --pickup). Idle cost: the claims per second an idle portq "
             "worker sends (PostgreSQL and SQLite wait on their listener and claim only "
             "when woken or after `idle_max`; MariaDB polls, backing off to its "
             "`idle_max`, 250 ms by default, `--idle-max` sets it). Beside those claims, "
             "PostgreSQL's listener costs one idle LISTEN connection and no queries; "
             "SQLite's reads `PRAGMA data_version` every "
             f"{DATA_VERSION_POLL_S * 1000:g} ms on a connection of its own "
             f"({1 / DATA_VERSION_POLL_S:,.0f} reads/s of a counter, no table read).", "",
             "| system | wakes by | p50 ms | p99 ms | max ms | after a quiet spell, ms "
             "| idle claims/s |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        name = f"portq {r['engine']}" if "engine" in r else f"{r['peer']} postgres"
        if "error" in r:
            lines.append(f"| {name} | not run: {r['error'][:200]} | - | - | - | - | - |")
            continue
        wakes = r.get("configuration") or (
            f"{r['listener']}, idle_max {r['idle_max_s']:g} s" if r.get("listener")
            else f"polling, idle_max {r['idle_max_s']:g} s")
        lines.append(f"| {name} | {wakes} | {r['p50_ms']} | {r['p99_ms']} | {r['max_ms']} | "
                     f"{', '.join(f'{x:g}' for x in r['after_quiet_ms'])} | "
                     f"{r.get('idle_claims_per_s', '-')} |")
    return lines


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    engines = args.engines.split(",")
    urls = {"sqlite": f"sqlite:///{tempfile.mkdtemp(prefix='portq-bench-')}/bench.db",
            "postgres": PG_URL, "mysql": MYSQL_URL}
    workers = [int(w) for w in args.workers.split(",")]
    out: dict[str, Any] = {"machine": bench.machine(), "jobs": args.jobs, "workers": workers,
                           "engines": {}, "raw": [], "peers": [], "growth": {},
                           "engine_rounds": {}, "engine_rounds_cpu": {},
                           "engine_rounds_enqueue": {},
                           "processes": {}, "notes": [], "loadavg_start": os.getloadavg()}
    section = Sections()
    log(f"estimated wall time of this run: ~{estimate(args) / 60:.0f} min")
    for engine in engines:
        with section(f"portq on {engine}"):
            try:
                out["engines"][engine] = bench.run(urls[engine], jobs=args.jobs,
                                                   workers=workers, modes=bench.MODES)
            except Exception as exc:  # noqa: BLE001 - report the engine as not run, go on
                out["notes"].append(f"portq on {engine} not run: {type(exc).__name__}: {exc}")
                log(out["notes"][-1])
    for engine in engines:
        with section(f"raw-SQL ceiling on {engine}"):
            try:
                out["raw"] += raw_runs(urls[engine], args.jobs, workers)
            except Exception as exc:  # noqa: BLE001 - report it as not run, go on
                out["notes"].append(f"raw SQL on {engine} not run: {type(exc).__name__}: {exc}")
                log(out["notes"][-1])
    for engine in engines if args.engine_rounds else ():
        with section(f"rounds on {engine}"):
            try:
                (out["engine_rounds"][engine], out["engine_rounds_cpu"][engine],
                 out["engine_rounds_enqueue"][engine]) = \
                    engine_rounds(urls[engine], args.jobs, args.engine_rounds)
            except Exception as exc:  # noqa: BLE001 - report it as not run, go on
                out["notes"].append(f"rounds on {engine} not run: {type(exc).__name__}: {exc}")
                log(out["notes"][-1])
    python = None
    if not args.skip_peers:
        with section("peers on postgres"):
            try:
                python = peers_python()
                for peer in PEERS:
                    interpreter = python_for(peer, python)
                    if interpreter is not None:
                        out["peers"] += run_peer(interpreter, peer, args.jobs,
                                                 "--workers", args.workers)
            except Exception as exc:  # noqa: BLE001 - report the peers as not run, go on
                python = None
                out["notes"].append(f"peers not run: {type(exc).__name__}: {exc}")
                log(out["notes"][-1])
    if "postgres" in engines and args.rounds:
        with section("head to head"):
            out["head_to_head"], out["head_to_head_cpu"] = head_to_head(args.jobs, args.rounds,
                                                                        python)
    if args.pickup:
        with section("pickup latency"):
            out["pickup"] = pickup_runs(engines, urls, python)
    if "postgres" in engines and args.rounds and args.io:
        with section("I/O-bound jobs"):
            out["io"] = io_rounds(args.io_jobs, args.rounds, python)
    if args.middleware:
        with section("middleware cost"):
            out["middleware"] = run_middleware(args, {e: urls[e] for e in engines})
    for engine in engines if args.growth else ():
        with section(f"growth on {engine}"):
            try:
                out["growth"][engine] = bench.growth(
                    urls[engine], args.growth_rows, args.growth_ready, jobs=args.jobs)
                log(f"growth on {engine}: {out['growth'][engine]['rows']:,} rows filled in "
                    f"{out['growth'][engine]['fill_s']:.0f} s")
            except Exception as exc:  # noqa: BLE001 - report it as not run, go on
                out["notes"].append(f"growth on {engine} not run: {type(exc).__name__}: {exc}")
                log(out["notes"][-1])
    for engine in engines if process_counts(args) else ():
        with section(f"processes on {engine}"):
            try:
                out["processes"][engine] = bench.processes_sweep(
                    urls[engine], process_counts(args), args.process_jobs,
                    rounds=args.process_rounds, pool_size=args.process_pool_size)
            except Exception as exc:  # noqa: BLE001 - report it as not run, go on
                out["notes"].append(f"processes on {engine} not run: "
                                    f"{type(exc).__name__}: {exc}")
                log(out["notes"][-1])
    out["versions"] = {e: r["version"] for e, r in out["engines"].items()}
    out["versions"].update({p["peer"]: p["version"] for p in out["peers"] if "version" in p})
    out["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out["loadavg"] = os.getloadavg()
    out["sections"] = section.seconds
    out["wall_s"] = round(sum(section.seconds.values()), 1)
    out["estimate_s"] = round(estimate(args), 1)
    return out


def run_middleware(args: argparse.Namespace, urls: dict[str, str]) -> dict[str, Any]:
    """The middleware cost rounds (benchmarks/middleware.py) on ``urls``' engines."""
    fronts = tuple(f for f in FRONTS if f in args.middleware_fronts.split(","))
    out = middleware_rounds(urls, parse_variants(args.middleware), args.middleware_jobs,
                            args.middleware_rounds, fronts, log)
    out["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return out


def middleware_only(args: argparse.Namespace) -> dict[str, Any]:
    """``--middleware-only``: the results JSON with its middleware section measured anew."""
    res: dict[str, Any] = json.loads(args.results.read_text())
    urls = {"sqlite": f"sqlite:///{tempfile.mkdtemp(prefix='portq-bench-')}/bench.db",
            "postgres": PG_URL, "mysql": MYSQL_URL}
    res["middleware"] = run_middleware(args, {e: urls[e] for e in args.engines.split(",")})
    return res


def rate(rows: list[dict[str, Any]], workers: int, batch: int | None = None,
         **match: str) -> float | None:
    for r in rows:
        if r.get("workers") == workers and (batch is None or r.get("batch") == batch) and \
                all(r.get(k) == v for k, v in match.items()):
            return r.get("jobs_per_s")
    return None


def throughput_series(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Every throughput line of the report (portq per engine, mode and batch; the raw loops;
    the peers), with its jobs/s at each worker count: the table and the plot draw these."""
    ws = res["workers"]
    out = []
    for engine, rep in res["engines"].items():
        tp = rep.get("throughput", [])
        for mode, b in sorted({(t["mode"], t["batch"]) for t in tp},
                              key=lambda mb: (mb[0], mb[1] or 0)):
            out.append({"kind": "portq", "engine": engine, "mode": mode, "batch": b,
                        "jobs_per_s": [rate(tp, w, b, mode=mode) for w in ws]})
    for engine, complete in sorted({(r.get("engine", "postgres"), r["complete"])
                                    for r in res["raw"]}):
        rows = [r for r in res["raw"] if r.get("engine", "postgres") == engine]
        out.append({"kind": "raw", "engine": engine, "mode": complete, "batch": 20,
                    "jobs_per_s": [rate(rows, w, complete=complete) for w in ws]})
    for peer in sorted({p["peer"] for p in res["peers"]}):
        rows = [p for p in res["peers"] if p["peer"] == peer]
        out.append({"kind": "peer", "engine": "postgres", "mode": peer, "batch": None,
                    "jobs_per_s": [rate(rows, w) for w in ws]})
    return out


def medians(res: dict[str, Any], engine: str | None = None) -> dict[str, float]:
    """Each contender's median jobs/s in ``engine``'s pair rounds (None: the PostgreSQL
    head to head)."""
    rounds = res.get("head_to_head", {}) if engine is None else \
        res.get("engine_rounds", {}).get(engine, {})
    return {name: statistics.median(runs) for name, runs in rounds.items() if runs}


def target_rounds(res: dict[str, Any], engine: str, mine: str, over: str
                  ) -> dict[str, list[float]]:
    """The rounds a ratio target of ``mine`` over ``over`` on ``engine`` reads: the
    engine's pair rounds where both ran in them, else (PostgreSQL) the head to head where
    both ran in it; {} when no rounds hold both."""
    for rounds in (res.get("engine_rounds", {}).get(engine, {}),
                   res.get("head_to_head", {}) if engine == "postgres" else {}):
        if rounds.get(mine) and rounds.get(over):
            return dict(rounds)
    return {}


def bulk_rate(res: dict[str, Any], engine: str) -> float | None:
    """``engine``'s bulk-enqueue jobs/s: the median of its rounds' bulk enqueues where it
    had rounds, else the sweep's one measurement."""
    rounds = res.get("engine_rounds_enqueue", {}).get(engine)
    if rounds:
        return float(statistics.median(rounds))
    rows = res["engines"].get(engine, {}).get("enqueue", [])
    return next((r["jobs_per_s"] for r in rows if r["mode"].startswith("bulk")), None)


def ratios(res: dict[str, Any]) -> dict[str, Any]:
    """The targets of the report: the Worker (its one mode) against the peers and the
    AsyncWorker against the Worker from the head-to-head medians of one run (every
    contender took part in every round); the Worker against the raw loop that completes
    each claimed batch in one statement from each engine's pair rounds (the PostgreSQL
    head to head where it had none); from the sweeps only when the run had no rounds."""
    pg = res["engines"].get("postgres", {})
    tp = pg.get("throughput", [])
    h2h = medians(res)
    if h2h:
        mine = h2h.get("portq worker")
        mine_async = h2h.get("portq async")
        peers = {p: h2h[p] for p in PEERS if p in h2h}
    else:
        mine = rate(tp, 4, 20, mode="worker")
        mine_async = rate(tp, 4, 20, mode="async")
        peers = {p["peer"]: p["jobs_per_s"] for p in res["peers"]
                 if p.get("workers") == 4 and "jobs_per_s" in p}
    out: dict[str, Any] = {"portq_4_workers": mine, "portq_async_4_workers": mine_async,
                           "bulk_enqueue": bulk_rate(res, "postgres"),
                           "bulk_enqueue_mysql": bulk_rate(res, "mysql"),
                           "from": "head-to-head medians" if h2h else "sweeps"}
    if h2h.get("raw complete_claim") and h2h.get("raw complete_many"):
        out["complete_claim_vs_complete_many"] = \
            round(h2h["raw complete_claim"] / h2h["raw complete_many"], 2)
    for row in res.get("pickup", []):
        if "engine" in row and row.get("p99_ms") is not None:
            out[f"pickup_p99_{row['engine']}"] = row["p99_ms"]
    if mine:
        for peer, theirs in peers.items():
            out[f"worker_vs_{peer}"] = mine / theirs
        if mine_async:
            out["async_vs_worker"] = mine_async / mine
    raw, worker = ENGINE_ROUNDS
    for engine, key in RAW_TARGET_KEYS.items():
        rounds = target_rounds(res, engine, worker, raw)
        if rounds:
            out[key] = statistics.median(rounds[worker]) / statistics.median(rounds[raw])
            continue
        # no rounds: the sweeps, the engine's own raw loop (raw rows without an engine
        # are PostgreSQL's, as in throughput_series)
        worker_rate = rate(res["engines"].get(engine, {}).get("throughput", []), 4, 20,
                           mode="worker")
        raw_rate = rate([r for r in res["raw"] if r.get("engine", "postgres") == engine], 4,
                        complete="complete_many")
        if worker_rate and raw_rate:
            out[key] = worker_rate / raw_rate
    return out


#: the ratio targets read from rounds: (ratio key, engine of the rounds, contender, over)
PAIRED = (("worker_vs_pgqueuer", "postgres", "portq worker", "pgqueuer"),
          ("worker_vs_procrastinate", "postgres", "portq worker", "procrastinate"),
          ("worker_vs_raw", "postgres", "portq worker", "raw complete_many"),
          ("async_vs_worker", "postgres", "portq async", "portq worker"),
          ("worker_vs_raw_mysql", "mysql", "portq worker", "raw complete_many"),
          ("worker_vs_raw_sqlite", "sqlite", "portq worker", "raw complete_many"))
#: the key of each engine's Worker-against-raw target: the ratio targets over its pair
#: rounds' two contenders
RAW_TARGET_KEYS = {engine: key for key, engine, mine, over in PAIRED
                   if (over, mine) == ENGINE_ROUNDS}


def paired_ratios(res: dict[str, Any]) -> dict[str, tuple[float, float, float]]:
    """For each ratio target read from rounds: the ratio of the two contenders within each
    round (they ran one after the other), as its median, lowest and highest. Pairing
    leaves out how the machine's speed drifted from one round to the next, which the ratio
    of the two medians keeps (those may come from different rounds)."""
    out: dict[str, tuple[float, float, float]] = {}
    for key, engine, mine, over in PAIRED:
        rounds = target_rounds(res, engine, mine, over)
        pairs = [a / b for a, b in zip(rounds.get(mine) or [], rounds.get(over) or [],
                                       strict=False) if a and b]
        if pairs:
            out[key] = (statistics.median(pairs), min(pairs), max(pairs))
    return out


def rounds_read(res: dict[str, Any], r: dict[str, Any]) -> str:
    """The end of the targets' sentence "Every ratio below comes from this run's ...": which
    rounds the ratios ``r`` read besides ``r["from"]``."""
    engines = list(res.get("engine_rounds") or ())
    if not engines:
        return " (this run had no rounds)." if not r["from"].startswith("head") else \
            ": every contender ran in every round."
    pairs = (f" and its pair rounds on {' and '.join(engines)} (the raw `complete_many` "
             "loop and the Worker, one after the other in each), which each Worker-against-"
             "raw target reads")
    return pairs + ": every contender of a round ran in every round."


def verdict(r: dict[str, Any]) -> str:
    """One sentence: which targets this run's ratios met and missed."""
    met: list[str] = []
    missed: list[str] = []
    for key, floor, _, name, _ in TARGETS:
        value = r.get(key)
        if value is not None:
            (met if value >= floor else missed).append(name)
    for engine, most, _, name in PICKUP_TARGETS:
        value = r.get(f"pickup_p99_{engine}")
        if value is not None:
            (met if value <= most else missed).append(name)

    def listed(names: list[str]) -> str:
        return " and ".join(filter(None, [", ".join(names[:-1]), names[-1]]))
    parts = [f"{word} the {listed(names)} target{'s' if len(names) > 1 else ''}"
             for word, names in (("meets", met), ("misses", missed)) if names]
    if not parts:
        return "This run has no ratios for the targets."
    return f"In this run portq {' and '.join(parts)}."


def _median_round(rates: list[float]) -> int:
    """The index of the round whose jobs/s is the median (the lower of the middle two)."""
    return sorted(range(len(rates)), key=lambda i: rates[i])[(len(rates) - 1) // 2]


def cpu_section(res: dict[str, Any]) -> list[str]:
    """What bounded each of portq's contenders in its median round, from the CPU meter
    (:mod:`portq.bench.cpu`): a table per set of rounds."""
    sets = [("PostgreSQL, head to head", res.get("head_to_head", {}),
             res.get("head_to_head_cpu", {}))]
    sets += [(f"{engine}, rounds", res["engine_rounds"].get(engine, {}), cpu)
             for engine, cpu in res.get("engine_rounds_cpu", {}).items()]
    io = res.get("io") or {}
    sets.append(("PostgreSQL, I/O-bound jobs", io.get("runs", {}), io.get("cpu", {})))
    wide = io.get("wide") or {}
    sets.append((f"PostgreSQL, AsyncWorker of {wide.get('slots')} slots",
                 {name: wide.get(kind, []) for kind, name in WIDE_KINDS},
                 {name: wide.get(f"{kind}_cpu") for kind, name in WIDE_KINDS}))
    lines = ["### What bounded each run", "",
             "Each contender's round with the median jobs/s, as `portq.bench.cpu` sampled it "
             "from /proc while it ran: the CPU of the "
             "client (the benchmark's process: the Worker, or the raw loop's threads) and of "
             "the database server per job; the share of one core the client used and its "
             "busiest thread's; how busy the machine's cores were. The bound: a machine "
             f"at least {bench.CPU_BOUND_PCT:.0f}% busy is CPU-bound (by whichever of client "
             f"and server used more); else a client using at least {bench.CORE_BOUND_PCT:.0f}% "
             "of one core is bound by that core (Python runs one thread at a time, SQLite "
             "writes one at a time); else the run waited (round trips, commits, locks). CPU "
             "times are counted in 10 ms ticks: a run under a second is a few ticks per "
             "thread.", "",
             "| rounds | contender | jobs/s | client µs/job | server µs/job | client, % of a "
             "core | busiest thread, % of a core | machine busy | bound |",
             "|---|---|---|---|---|---|---|---|---|"]
    shown = False
    for title, runs, cpu in sets:
        for name, figures in cpu.items():
            rates = runs.get(name, [])
            if not figures or len(figures) != len(rates):
                continue
            i = _median_round(rates)
            f = figures[i]

            def num(key: str, unit: str = "", f: dict[str, Any] = f) -> str:
                value = f.get(key)
                return "-" if value is None else f"{value:,.0f}{unit}"
            lines.append(f"| {title} | {name} | {rates[i]:,.0f} | "
                         f"{num('client_cpu_us_per_job')} | {num('server_cpu_us_per_job')} | "
                         f"{num('client_core_pct', '%')} | {f.get('busiest_thread') or '-'} "
                         f"{num('busiest_thread_pct', '%')} | {num('machine_busy_pct', '%')} "
                         f"| {f.get('bound', '-')} |")
            shown = True
    return [*lines, ""] if shown else []


def bound_sentence(engine: str, rows: list[dict[str, Any]]) -> str:
    """What bounded the worker processes on ``engine`` at its largest process count
    (:func:`portq.bench.process_bound`'s rule), and how far that count is from the best."""
    if not rows:
        return f"{engine}: no process runs."
    r = max(rows, key=lambda x: x["processes"])
    best = max(rows, key=lambda x: x["jobs_per_s"])
    w, d, m = r["worker_cpu_pct"], r["server_cpu_pct"], r["machine_busy_pct"]
    split = f"the worker processes used {w:.0f}% of a core"
    split += f" and the server {d:.0f}%" if d is not None else " (SQLite runs inside them)"
    busy = f"{m:.0f}% of the {r['cores']} cores busy" if m is not None else "machine load unknown"
    per = r.get("commits_per_1000_jobs")
    commits = f", {per:,.0f} commits per 1,000 jobs" if per is not None else ""
    conns = r.get("peak_connections")
    held = f", at most {conns} connections at once" if conns is not None else ""
    return (f"**{engine}**: {r['jobs_per_s']:,.0f} jobs/s with {r['processes']} processes, "
            f"{r['jobs_per_s'] / best['jobs_per_s']:.0%} of the best ({best['jobs_per_s']:,.0f} "
            f"with {best['processes']}); at {r['processes']} {split}, {busy}{commits}{held}; "
            f"bound: {', '.join(r.get('bounds') or [bench.process_bound(r)])}.")


def target_rows(res: dict[str, Any]) -> list[str]:
    """The targets table's ratio rows: each target, its ratio of medians (what the verdict
    reads) and each round's own ratio (median and range), every figure floored."""
    r = ratios(res)
    paired = paired_ratios(res)
    rows = []
    for key, _, target, _, unit in TARGETS:
        value = r.get(key)
        pair = paired.get(key)
        each = f"{floored(pair[0], unit)} [{floored(pair[1], unit)}-" \
            f"{floored(pair[2], unit)}]" if pair else "-"
        rows.append(f"| {target} | {floored(value, unit) if value is not None else '-'} | "
                    f"{each} |")
    return rows


def write_doc(res: dict[str, Any], images: list[str]) -> None:
    """docs/benchmarks.md from one run's results (every table and sentence from ``res``)."""
    m = res["machine"]
    lines = [
        "# portq benchmarks", "",
        f"Generated by `benchmarks/run.py` on {res['date']}: {m['nproc']} cores, "
        f"{m['memory_gib']} GiB, Python {m['python']}, {m['platform']}; load average "
        + (f"at the start {', '.join(f'{x:.2f}' for x in res['loadavg_start'])}, "
           if "loadavg_start" in res else "")
        + f"at the end {', '.join(f'{x:.2f}' for x in res['loadavg'])}"
        + (f"; the run took {res['wall_s'] / 60:.0f} min" if "wall_s" in res else "") + ".",
        "",
        "**Noise:** on this 2-core machine, shared by the database and the benchmark, one "
        "configuration's jobs/s moves by tens of percent from run to run. The sweeps below "
        "are one run each; the targets come from rounds, in which every contender runs once "
        "per round, one after another, and the median of the rounds counts: the head to "
        "head on PostgreSQL, and on each engine a pair of the raw loop and the Worker "
        "repeated for more rounds than the head to head can afford, which its "
        "Worker-against-raw target reads. Every run starts from a vacuumed table (this "
        "server runs with autovacuum off, so dead rows from earlier runs would otherwise "
        "slow later ones). Nothing here is a pass/fail test. Reproduce with "
        "`.venv/bin/python benchmarks/run.py` or one engine with `portq bench URL`.", "",
        "Versions: " + "; ".join(f"{k}: {v}" for k, v in res["versions"].items()) + ".", "",
    ]
    for note in res["notes"]:
        lines.append(f"- not run: {note}")
    r = ratios(res)
    lines += ["## Targets (this run)", "",
              "The Worker has one mode: no tuning options (it sizes its look-ahead, "
              "completion batches and claim loops itself; docs/operations.md#worker). Its "
              "raw ceiling on each engine is portq's claim and `complete_many` SQL in a bare "
              "loop (`portq.bench.raw_throughput_run`). "
              f"Every ratio below comes from this run's {r['from']}{rounds_read(res, r)} "
              + verdict(r) + " The verdicts "
              "read the second column, one contender's median over the other's; the third "
              "pairs the two within each round (one ran right after the other) and gives "
              "those ratios' median and range, which leaves out how the machine's speed "
              "drifted between rounds. It is shown, not judged.", "",
              "| target | this run | each round's own ratio: median [range] |",
              "|---|---|---|"]
    lines += target_rows(res)
    for engine, _, target, _ in PICKUP_TARGETS:
        value = r.get(f"pickup_p99_{engine}")
        lines.append(f"| {target} | {f'{value:g} ms' if value is not None else '-'} | - |")
    if r.get("bulk_enqueue"):
        lines.append(f"| PostgreSQL bulk enqueue (no target) | {r['bulk_enqueue']:,.0f} "
                     "jobs/s | - |")
    if r.get("complete_claim_vs_complete_many"):
        lines.append("| PostgreSQL raw `complete_claim` / raw `complete_many` (no target: "
                     "the ceiling raised by one round trip per batch) | "
                     f"{r['complete_claim_vs_complete_many']:.0%} | - |")
    lines.append("")
    for engine, rates in res.get("engine_rounds_enqueue", {}).items():
        if rates:
            lines += [f"Bulk enqueue on {engine}, the median of the "
                      f"{len(rates)} bulk enqueues of its rounds (each run enqueued its "
                      f"{res['jobs']:,} jobs first, {bench.BULK_CHUNK:,} a call): "
                      f"{statistics.median(rates):,.0f} jobs/s "
                      f"[{min(rates):,.0f}-{max(rates):,.0f}].", ""]
    h2h = res.get("head_to_head", {})
    if h2h:
        rounds = max(len(v) for v in h2h.values())
        lines += ["### Head to head: 4 workers, PostgreSQL", "",
                  f"{res['jobs']:,} no-op jobs per run, {rounds} round{'s' * (rounds > 1)}; in "
                  "each round the contenders ran one after another in this order, each "
                  "from its own freshly bulk-enqueued, VACUUM ANALYZEd table "
                  "(benchmarks/peers.py's docstring says how and why for the peers).", "",
                  "| contender | configuration | median jobs/s | each round |",
                  "|---|---|---|---|"]
        for name, med in medians(res).items():
            lines.append(f"| {name} | {CONFIGS.get(name, '-')} | {med:,.0f} | "
                         f"{', '.join(f'{x:,.0f}' for x in h2h[name])} |")
        lines.append("")
    for engine, rounds_of in res.get("engine_rounds", {}).items():
        count = max((len(v) for v in rounds_of.values()), default=0)
        lines += [f"### Rounds: 4 workers, {engine}", "",
                  f"{res['jobs']:,} no-op jobs per run, {count} round{'s' * (count > 1)}, the "
                  "raw loop and the Worker one after the other in each, configured as in the "
                  "head-to-head table" + (
                      f"; then the same pair at the batch the Worker takes when none is "
                      f"given ({OWN_BATCH}: one claim loop, which also writes), not part "
                      "of the target" if engine in OWN_BATCH_ROUNDS else "") + ".", "",
                  "| contender | median jobs/s | each round |", "|---|---|---|"]
        for name, med in medians(res, engine).items():
            lines.append(f"| {name} | {med:,.0f} | "
                         f"{', '.join(f'{x:,.0f}' for x in rounds_of[name])} |")
        lines.append("")
    lines += cpu_section(res)

    lines += ["## Claim latency vs table size", "",
              f"The backend's own claim of {bench.CLAIM_LIMIT} jobs from one of "
              f"{bench.QUEUE_COUNT} queues (each queue holding READY ready jobs, finished "
              "jobs padding the table to TOTAL), in a transaction that is rolled back. "
              "`claim ms` is the client-side median of 5 runs; `engine ms` is the engine's "
              "own figure (PostgreSQL EXPLAIN ANALYZE execution time; MariaDB ANALYZE "
              "r_total_time_ms of the locking SELECT). The 10M-row size is in Growth below. "
              "Reference (published PostgreSQL "
              "queue study, multi-queue `ANY` predicate): 1.58, 5.11, 53.57, 51.85 ms; "
              "5.3 ms single-queue at 1M/100K.", "",
              "| engine | ready/queue | total | claim ms | engine ms | ordered index walk | plan |",
              "|---|---|---|---|---|---|---|"]
    limits = ["", "### With limits", "", LIMITS_TEXT, "",
              "| engine | ready/queue | total | claim ms | limited | rate | keyed |",
              "|---|---|---|---|---|---|---|"]
    for engine, rep in res["engines"].items():
        for c in rep.get("claim_latency", []):
            size = f"| {engine} | {c['ready']:,} | {c['total']:,} | {c['claim_ms']} | "
            lines.append(f"{size}{c['server_ms'] if c['server_ms'] is not None else '-'} | "
                         f"{'yes' if c['ordered_walk'] else 'NO'} | {' → '.join(c['nodes'])} |")
            limits.append(f"{size}{c.get('limited_claim_ms', '-')} | "
                          f"{c.get('rate_claim_ms', '-')} | {c.get('keyed_claim_ms', '-')} |")
    lines += limits
    lines += ["", "## Throughput: claim + complete, no-op handler", "",
              f"{res['jobs']:,} jobs per run, one run each; portq `worker` = one "
              "`portq.Worker` with N handler threads and claim batch B, no other option; "
              "portq `async` = one `portq.aio.AsyncWorker` with concurrency N and an async "
              "no-op handler and claim batch B, no other option; "
              "raw = portq's claim (batch 20) and complete SQL "
              "in a bare loop, N threads with a DB-API connection each, committing each "
              "completion (`complete`), each batch's (`complete_many`), or each batch's with "
              "the next claim in one statement (`complete_claim`, PostgreSQL); peers as in "
              "the head-to-head configurations, with N in place of 4.", "",
              "| system | mode | batch | " +
              " | ".join(f"{w} workers" for w in res["workers"]) + " |",
              "|---|---|---|" + "---|" * len(res["workers"])]
    for line in throughput_series(res):
        label, mode = {"portq": (f"portq {line['engine']}", line["mode"]),
                       "raw": (f"raw SQL {line['engine']}", f"`{line['mode']}`"),
                       "peer": (f"{line['mode']} postgres", "its default")}[line["kind"]]
        lines.append(f"| {label} | {mode} | {line['batch'] or '-'} | " +
                     " | ".join(f"{c:,.0f}" if c else "-" for c in line["jobs_per_s"]) + " |")
    lines += ["", "## Enqueue", "", "| system | mode | jobs | jobs/s |", "|---|---|---|---|"]
    for engine, rep in res["engines"].items():
        for e in rep.get("enqueue", []):
            lines.append(f"| portq {engine} | {e['mode']} | {e['jobs']:,} | "
                         f"{e['jobs_per_s']:,.0f} |")
    for p in res["peers"]:
        if p.get("workers") == res["workers"][0] and "enqueue_jobs_per_s" in p:
            lines.append(f"| {p['peer']} | bulk (1000/call) | {p['jobs']:,} | "
                         f"{p['enqueue_jobs_per_s']:,.0f} |")
    lines += pickup_section(res) + io_section(res) + growth_section(res) + \
        processes_section(res) + middleware_section(res)
    lines += ["", "## Plots", ""] + [f"![{Path(i).stem}](benchmarks/{Path(i).name})"
                                      for i in images]
    def share(key: str) -> str:
        value = r.get(key)
        return floored(value) if value else "an unmeasured share"
    lines += ["", "## What bounds throughput", "",
              ANALYSIS.format(verdict=verdict(r), worker_vs_raw=share("worker_vs_raw"),
                              sqlite_share=share("worker_vs_raw_sqlite"),
                              mysql_share=share("worker_vs_raw_mysql")), "", ELSEWHERE]
    DOC.write_text("\n".join(lines), encoding="utf-8")


def growth_section(res: dict[str, Any]) -> list[str]:
    """The growth table: fill time, claim at full size, the Worker and the raw loop on the
    empty vs the full table, and one generated sentence per engine."""
    growth = res.get("growth") or {}
    if not growth:
        return []
    any_row = next(iter(growth.values()))
    lines = ["", "## Growth: a 10M-row table" if any_row["rows"] >= 10_000_000 else
             f"## Growth: a {any_row['rows']:,}-row table", "",
             f"On each engine the job table filled with `portq.bench.fill_jobs` (one "
             f"statement per {bench.FILL_CHUNK:,} rows, each committed) to TOTAL rows, READY "
             f"of them ready over {bench.QUEUE_COUNT} queues and the rest finished "
             "(succeeded), then ANALYZEd: `fill s` is that fill. The claim is timed as in "
             "the claim-latency table. Throughput: one sync Worker, 4 workers, batch 20, "
             f"{any_row['empty']['jobs']:,} no-op jobs of a queue of their own, and the raw "
             "`complete_many` loop (4 threads) over as many, first on the empty table and "
             "again on the full one (the padding is the other queues' rows). A burst "
             "Worker's exit test is two index probes per queue (`pending`), so the table's "
             "size does not enter it either.", "",
             "| engine | total | ready | fill s | rows/s | claim ms | engine ms | ordered walk "
             "| Worker empty jobs/s | Worker full jobs/s | full / empty | raw empty jobs/s "
             "| raw full jobs/s | raw full / empty |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for engine, g in growth.items():
        c, e, f = g["claim"], g["empty"]["jobs_per_s"], g["padded"]["jobs_per_s"]
        re_, rf = (g.get(k, {}).get("jobs_per_s") for k in ("empty_raw", "padded_raw"))
        raw = f"{re_:,.0f} | {rf:,.0f} | {rf / re_:.0%}" if re_ and rf else "- | - | -"
        lines.append(f"| {engine} | {g['rows']:,} | {g['ready']:,} | {g['fill_s']:,.0f} | "
                     f"{g['fill_rows_per_s'] or 0:,.0f} | {c['claim_ms']} | "
                     f"{c['server_ms'] if c['server_ms'] is not None else '-'} | "
                     f"{'yes' if c['ordered_walk'] else 'NO'} | {e:,.0f} | {f:,.0f} | "
                     f"{f / e:.0%} | {raw} |" if e else "| - |")
        if e and re_ and rf:
            notes.append(f"- **{engine}**: on the full table the Worker ran at {f / e:.0%} "
                         f"and the raw loop at {rf / re_:.0%} of their empty-table rates, "
                         f"the claim at {c['claim_ms']} ms; " + (
                             "the Worker kept pace with the engine's own SQL (within 15 "
                             "points), so what the table's size costs is in the engine's "
                             "SQL, not in the Worker." if f / e >= rf / re_ - 0.15
                             else "the Worker lost more than the engine's own SQL did: "
                             "something in the Worker grows with the table."))
    if notes:
        lines += ["", "What the table's size costs, per engine (generated from the rows above: "
                  "the raw loop runs the same claim and `complete_many` SQL without the "
                  "Worker, so a drop it shares is the engine's):", "", *notes]
    return lines


def processes_section(res: dict[str, Any]) -> list[str]:
    """The worker-process table and one generated sentence per engine."""
    procs = res.get("processes") or {}
    if not procs:
        return []
    lines = ["", "## Worker processes", "",
             "N OS processes (multiprocessing spawn), each one sync `portq.Worker` with its "
             "default options (concurrency 4, `burst`), over one queue of no-op jobs "
             "(enough that a run lasts >= 2 s). The processes connect, then wait on a "
             "barrier; the clock runs from the barrier's release to the last job's "
             "`finished_at` (the database's clock), so interpreter start-up and the burst "
             "workers' last idle poll are excluded. The counts run in interleaved rounds "
             "(every other round in reverse order); jobs/s is the median, with every round's "
             "rate and the 1-minute load average at its start; the other columns are the "
             "median run's. CPU is % of one core over that window: "
             "the workers' own CPU time, the database server's processes (every `postgres` "
             "or `mariadbd` process, so other clients of the shared server count too) from "
             "/proc, and the machine's busy share of all cores. Commits: PostgreSQL "
             "`pg_stat_database.xact_commit` of the benchmark database (read-only "
             "transactions count too); MariaDB's global `Handler_commit`. Connections: the "
             "most seen at once on the benchmark database (PostgreSQL `pg_stat_activity`, "
             "MariaDB's process list, sampled every "
             f"{bench.SAMPLE_S * 1000:.0f} ms), LISTEN connections included. Empty claims: "
             "claims that found no job. Waits: PostgreSQL active backends of the benchmark "
             "database by `wait_event_type`; MariaDB InnoDB row-lock waits; SQLite busy "
             "retries counted by the backend. Bound: each round's, by the rule below.", "",
             "| engine | processes | jobs/s (median) | rounds (load) | worker CPU % "
             "| server CPU % | machine busy % | commits per 1,000 jobs | connections "
             "| empty claims | waits / lock waits / retries | bound |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for engine, rows in procs.items():
        for r in rows:
            lines.append(_process_row(engine, r))
    lines += ["", "What bounds them, per engine, at the largest process count (the rule: a "
              "machine >= 85% busy is CPU-bound by whichever of the workers and the server "
              "used more CPU, else heavyweight-lock waits >= 25% of the samples, else "
              "LWLock/IO (WAL) waits >= 50%, else row-lock waits or busy retries, else round "
              "trips):", ""]
    lines += [f"- {bound_sentence(engine, rows)}" for engine, rows in procs.items()]
    lines += ["", "Target (issue 35): the most processes deliver >= 90% of the best process "
              "count's median:", ""]
    for engine, rows in procs.items():
        best = max(rows, key=lambda r: r["jobs_per_s"])
        most = max(rows, key=lambda r: r["processes"])
        share = most["jobs_per_s"] / best["jobs_per_s"] if best["jobs_per_s"] else 0.0
        lines.append(f"- {engine}: {most['processes']} processes {most['jobs_per_s']:,.0f} "
                     f"jobs/s, {share:.0%} of {best['processes']} processes' "
                     f"{best['jobs_per_s']:,.0f}: {'met' if share >= 0.9 else 'missed'}.")
    return lines


def _process_row(engine: str, r: dict[str, Any]) -> str:
    """One row of the worker-process table."""
    waits = r.get("pg_wait_samples")
    counters = r.get("server_counters") or {}
    if waits:
        wait = ", ".join(f"{k} {v}" for k, v in sorted(waits.items()))
    elif "row_lock_waits" in counters:
        wait = f"{counters['row_lock_waits']:,.0f} row-lock waits"
    else:
        wait = f"{r['retries']} retries"
    runs = r.get("runs") or [r["jobs_per_s"]]
    loads = r.get("loads") or [None] * len(runs)
    rounds = ", ".join(f"{x:,.0f}" + (f" ({lo:.1f})" if lo is not None else "")
                       for x, lo in zip(runs, loads, strict=True))

    def cell(key: str) -> str:
        value = r.get(key)
        return "-" if value is None else f"{value}"
    return (f"| {engine} | {r['processes']} | {r['jobs_per_s']:,.0f} | {rounds} | "
            f"{r['worker_cpu_pct']} | {cell('server_cpu_pct')} | {cell('machine_busy_pct')} | "
            f"{cell('commits_per_1000_jobs')} | {cell('peak_connections')} | "
            f"{cell('empty_claims')} | {wait} | {', '.join(r.get('bounds') or [])} |")


LIMITS_TEXT = """\
The same claim, timed also for a queue with a per-queue concurrency limit (`limited`: the
queue's `portq_queue` row locked, its running jobs counted, then the claim; the limit is
1,000,000 so both claim the full batch), with a rate limit of 1,000,000 a minute (`rate`:
row locked, the DB clock read, the rate log read, the claim, the log written back), and
of 100 jobs with 10 concurrency keys at the head of the second queue (`keyed`: the claim
counts each keyed candidate's running jobs, then the settle locks the queue row and
recounts the keys). Medians of 5 rolled-back claims of 20, ms, one run each."""

ELSEWHERE = """\
## Elsewhere

Dashboard page and API response times on a 1,000,000-job table (PostgreSQL, MariaDB,
SQLite): [benchmarks-dashboard.md](benchmarks-dashboard.md). Worker hosts and engines beyond
one database server: [scaling.md](scaling.md).
"""

ANALYSIS = """\
Claim cost is flat because the claim is an ordered walk of the partial ready index for
one queue that stops after 20 rows (plans above; `portq/conformance/test_claim_cost.py`
asserts that plan shape on every engine). Table size does not enter the claim's cost;
what varies between the rows of that table is machine noise.

{verdict} The Worker has one mode since issue 20: completions written in the
background by a completion batcher (one `complete_many` statement per batch), claims sized
to free threads plus a look-ahead that Little's law sizes from the measured job and claim
times (0 while jobs outlast a claim's round trip, bounded by a tenth of the lease), and up
to 4 claim loops while there is a look-ahead and one alone would not keep up (below).
What bounds it is Python CPU per job
(binding, dispatch, bookkeeping) under the GIL, on 2 cores it shares with PostgreSQL and
the other contenders' leftovers: with 4 workers it ran at {worker_vs_raw} of the bare
`complete_many` loop, which does the same SQL with none of the Worker's bookkeeping.

MariaDB's jobs/s are lower than PostgreSQL's because each batch costs more round trips
there: its claim is three statements (no `UPDATE ... RETURNING`), its `complete_many` two
(lock the owned rows through JSON_TABLE, then update them), each transaction ending in a
COMMIT of its own; the Worker ran at {mysql_share} of that engine's raw loop.

SQLite is bound by one thread: the Worker on SQLite has one writer thread
(`single_writer`), its one claim loop, which writes every claim and every completion, so
its threads never wait for each other in SQLite's sleeping busy handler (measured 15.5k ->
17.7k jobs/s before and after it, 5 rounds each, same hour). The raw loop's four threads
do the same statements, but while one runs SQL (sqlite3 lets go of the GIL inside a
statement) another runs its Python, so only the SQL is serial; in the Worker the one
writer runs both, one after the other, and the handler threads' Python runs beside it.
What the one writer no longer does is copy the WAL into the database file: the worker's
listener checkpoints it on its own thread, at most every 10 ms while commits come,
(`SqliteListener`; docs/engines.md, SQLite), where the raw loop's commits still run
SQLite's auto-checkpoint each time the WAL reaches 1,000 pages (before: 11.9k
[11.3k-13.1k], after: 14.4k [12.5k-16.2k] jobs/s, medians of 6 interleaved rounds, 20,000
no-op jobs each, load average 1.2-1.4).
The Worker ran at {sqlite_share} of the raw loop in this run.

Many slots, one completion batcher: an AsyncWorker of 200 slots finishes more jobs during
one `complete_many` than a claim holds. The batcher takes all of them, up to 1,000
(`WRITE_BATCH_LIMIT`), where it took at most 100 and fell behind for good. In 4
interleaved rounds against the previous commit, 5 ms jobs went from 15,055 to 20,412
jobs/s and no-op jobs from 14,576 to 24,235. 4 and 40 slots, where it kept up, did not
move. The 200-slot line of the I/O-bound section gives this run's figures and what bounded
them.

One claim loop where it keeps up: the loops beyond the first rest while the handlers
start fewer than a third of a claim batch during the fastest recent claim's round trip
(`ONE_LOOP_SHARE`; 40 slots of 5 ms jobs start about 8,000 a second, a quarter of a batch
of 40 per round trip). There, 4 loops only split the same jobs into more, smaller claims,
each a round trip, a wake-up of the handlers and a turn of the GIL. Against the previous
commit, 4 interleaved rounds on PostgreSQL, a fresh process a run, paired ratios: 40
slots of 5 ms jobs 1.018 [1.010-1.031] on the asyncio front (6,834 -> 6,957 jobs/s) and
1.034 [1.027-1.035] on threads (7,202 -> 7,436); 4 threads of 0.5 ms jobs 1.064
[1.056-1.093]. No-op jobs (0.995 [0.935-1.018]), 200 slots of 5 ms jobs (1.001
[0.939-1.030]) and 40 slots of 1 ms jobs, which one loop left 8-15% slower, keep all
their loops.

What changed on 2026-12-06 (issue 32), each measured in interleaved rounds (a fresh
process per run, 30,000 no-op jobs, 4 threads, batch 20), against the raw loop of the
same rounds:

- The writer writes the completions once 4 claims' worth wait (or when a claim found
  nothing, or too few slots are free), not before every claim: one `complete_many` of 80
  cost 5.3-5.8 µs a job against 7.0-7.9 µs for 20 (one thread, no Worker).
- A claimed job keeps its payload and meta as JSON text, decoded on first use on the
  handler's thread (building a job from a row: 3.9 -> about 2 µs); the fenced claims'
  JSON is formatted directly (20 claims: 4.1 against 11.6 µs); a statement's text is
  rendered once; lease and `run_at` times are cached per value.
- Handler threads take short jobs without waking each other (below 100 µs a job on
  average): each wake-up had taken the GIL from the writer (49,015 [48,092-49,271]
  against 44,346 [41,074-44,610] jobs/s in one process, medians of 5 rounds).

Together: 24,448-29,562 jobs/s before (45-54% of the raw loop in two sets of 5 rounds)
against 39,602-48,487 after (74-80%). What is left: the writer's claim statement took
147-175 µs inside the Worker against 100 µs alone, while its fetch of 20 rows took about
the same (112-120 against 92-107 µs): the handler thread runs the previous claim's jobs
while the statement runs, and the writer waits for the GIL when it returns. Tried and
measured, not kept: the claim as an `UPDATE` without `RETURNING` and one `SELECT
json_group_array(...)` row (fewer hand-offs of the GIL; 31,340-33,719 against
34,591-41,777 jobs/s), a shorter GIL switch interval (0.5 and 0.1 ms: 77% and 73% against
75%), completions every 5 claims (within the noise of 4). Earlier attempts (2026-12-05):
the completions and the next claim in one transaction, `complete_many` as a fenced
`SELECT json_group_array(...)` plus an `UPDATE`, handler threads letting go of the GIL
after each job: none faster. Later (2026-12-06, docs/operations.md): a claimed job's
fields made on first use on the handler's thread (0.934 of the Worker's jobs/s, paired,
6 rounds: the handlers' Python takes the GIL from the writer as the writer's own does),
handler threads handing over up to 8 outcomes at once (+2.6%, not kept); later still,
claims and writes on two connections of their own, as on the other engines (0.78 of the
one writer's jobs/s, medians of 2 interleaved rounds of 3 runs: the two meet in SQLite's
sleeping busy handler), and the same with the two taking turns on an in-process lock
instead (0.57-0.61; why that is slower still was not looked into). The table "What
bounded each run" above gives this run's CPU per job and per core.
"""

PLOT = r'''
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
res = json.load(sys.stdin); out = sys.argv[1]
fig, ax = plt.subplots(figsize=(7, 4))
for engine, rep in res["engines"].items():
    rows = rep.get("claim_latency", [])
    if rows:
        ax.plot([r["total"] for r in rows], [r["claim_ms"] for r in rows], marker="o",
                label=f"portq {engine}")
ax.plot([3000, 30000, 300000, 1000000], [1.58, 5.11, 53.57, 51.85], "k--", marker="x",
        label="reference study (ANY, PostgreSQL)")
ax.set_xscale("log"); ax.set_yscale("log"); ax.set_xlabel("rows in table")
ax.set_ylabel("claim of 20 jobs, ms"); ax.legend(); ax.grid(True, alpha=.3)
ax.set_title("Claim latency vs table size")
fig.tight_layout(); fig.savefig(f"{out}/claim_latency.png", dpi=110)
fig, ax = plt.subplots(figsize=(10, 4.5))
ws = res["workers"]
for line in res["throughput"]:
    kind, mode, ys = line["kind"], line["mode"], line["jobs_per_s"]
    if kind == "portq":
        batch = line["batch"]
        ax.plot(ws, ys, marker="o" if mode == "worker" else "D",
                linestyle="-" if batch > 1 else "-.",
                label=f"portq {line['engine']} {mode} batch {batch}")
    elif kind == "raw":
        ax.plot(ws, ys, {"complete": "--", "complete_many": ":"}.get(mode, "-."),
                marker="s", label=f"raw SQL {line['engine']} {mode}")
    else:
        ax.plot(ws, ys, linestyle=":", marker="^", label=f"{mode} (pg)")
ax.set_xlabel("workers"); ax.set_ylabel("jobs/s (claim + complete)"); ax.set_xticks(ws)
ax.set_yscale("log"); ax.grid(True, alpha=.3)
ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
ax.set_title("Throughput vs workers, no-op jobs")
fig.tight_layout(); fig.savefig(f"{out}/throughput.png", dpi=110)
if res.get("processes"):
    fig, ax = plt.subplots(figsize=(7, 4))
    for engine, rows in res["processes"].items():
        ax.plot([r["processes"] for r in rows], [r["jobs_per_s"] for r in rows],
                marker="o", label=f"portq {engine}")
    counts = sorted({r["processes"] for rows in res["processes"].values() for r in rows})
    ax.set_xscale("log", base=2); ax.set_xticks(counts, [str(c) for c in counts])
    ax.set_xlabel("worker processes (one Worker each, defaults)")
    ax.set_ylabel("jobs/s (claim + complete)"); ax.grid(True, alpha=.3); ax.legend()
    ax.set_title("Throughput vs worker processes, no-op jobs")
    fig.tight_layout(); fig.savefig(f"{out}/processes.png", dpi=110)
if res.get("growth"):
    fig, ax = plt.subplots(figsize=(7, 4))
    engines = list(res["growth"])
    xs = range(len(engines))
    rows = next(iter(res["growth"].values()))["rows"]
    ax.bar([x - 0.2 for x in xs], [res["growth"][e]["empty"]["jobs_per_s"] for e in engines],
           0.4, label="empty table")
    ax.bar([x + 0.2 for x in xs], [res["growth"][e]["padded"]["jobs_per_s"] for e in engines],
           0.4, label=f"{rows:,} rows")
    ax.set_xticks(list(xs), engines); ax.set_ylabel("jobs/s (Worker, 4 workers, batch 20)")
    ax.legend(); ax.grid(True, axis="y", alpha=.3)
    ax.set_title("Throughput: empty table vs full table")
    fig.tight_layout(); fig.savefig(f"{out}/growth.png", dpi=110)
'''


def plot(res: dict[str, Any]) -> list[str]:
    IMAGES.mkdir(parents=True, exist_ok=True)
    data = {"engines": res["engines"], "workers": res["workers"],
            "throughput": throughput_series(res), "processes": res.get("processes"),
            "growth": res.get("growth")}
    proc = subprocess.run([str(peers_python()), "-c", PLOT, str(IMAGES)],
                          input=json.dumps(data), capture_output=True, text=True)
    if proc.returncode != 0:
        log(f"plots not made: {proc.stderr[-1000:]}")
        return []
    return plotted(res)


def plotted(res: dict[str, Any]) -> list[str]:
    """The plots of ``res``, in the doc's order (as :func:`plot` made them)."""
    names = ["claim_latency", "throughput"] + [name for name in ("processes", "growth")
                                                if res.get(name)]
    return [str(IMAGES / f"{name}.png") for name in names]


def main() -> int:
    global DOC, IMAGES  # where write_doc and plot write
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--engines", default="sqlite,postgres,mysql")
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument("--rounds", type=int, default=5,
                        help="head-to-head rounds at 4 workers on PostgreSQL (0: none)")
    parser.add_argument("--engine-rounds", type=int, default=25,
                        help="rounds of the raw loop and the Worker at 4 workers on each "
                        "engine, whose medians its Worker-against-raw target reads (0: none)")
    parser.add_argument("--pickup", action=argparse.BooleanOptionalAction, default=True,
                        help="measure pickup latency on each engine and of the peers "
                             "(default: on)")
    parser.add_argument("--io", action=argparse.BooleanOptionalAction, default=True,
                        help="the I/O-bound workload (40 slots, 5 ms jobs) on PostgreSQL")
    parser.add_argument("--io-jobs", type=int, default=20_000)
    parser.add_argument("--growth", action=argparse.BooleanOptionalAction, default=True,
                        help="fill each engine's table to --growth-rows and measure claim "
                             "and throughput there (default: on)")
    parser.add_argument("--growth-rows", type=int, default=GROWTH_ROWS,
                        help=f"rows of the growth table (default {GROWTH_ROWS:,})")
    parser.add_argument("--growth-ready", type=int, default=GROWTH_READY,
                        help=f"ready jobs among them, over {bench.QUEUE_COUNT} queues "
                             f"(default {GROWTH_READY:,})")
    parser.add_argument("--processes", default=PROCESSES,
                        help=f"worker-process counts (default {PROCESSES}; '': none)")
    parser.add_argument("--process-rounds", type=int, default=3,
                        help="interleaved rounds of the process sweep (median reported)")
    parser.add_argument("--process-pool-size", type=int, default=None,
                        help="each worker process's connect(pool_size=...): bounds its "
                             "connections (default: the worker sizes its pool)")
    parser.add_argument("--process-jobs", type=int, default=20_000,
                        help="jobs per process run, raised until a run lasts >= 2 s")
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="results JSON written (default benchmarks/results/latest.json)")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md",
                        help="the doc written (default docs/benchmarks.md); its plots go to "
                             "benchmarks/ beside it")
    parser.add_argument("--estimate", action="store_true",
                        help="only print the estimated wall time of a run with these flags")
    parser.add_argument("--from-json", type=Path, help="only rewrite the doc from results")
    parser.add_argument("--middleware", default="none,empty,otel,metrics",
                        help="middleware variants measured, of none, empty, pass, otel, "
                             "metrics (default none,empty,otel,metrics; '': not measured)")
    parser.add_argument("--middleware-jobs", type=int, default=3000,
                        help="no-op jobs per middleware run (default 3000)")
    parser.add_argument("--middleware-rounds", type=int, default=5,
                        help="interleaved middleware rounds (default 5)")
    parser.add_argument("--middleware-fronts", default=",".join(FRONTS),
                        help="worker fronts of the middleware runs (default threads,asyncio)")
    parser.add_argument("--middleware-only", action="store_true",
                        help="only measure the middleware cost: the results JSON gets it, "
                             "the doc is rewritten from that JSON (plots as they were)")
    args = parser.parse_args()
    DOC, IMAGES = args.doc, args.doc.parent / "benchmarks"
    if args.estimate:
        print(f"~{estimate(args) / 60:.0f} min")
        return 0
    if args.middleware_only:
        res = middleware_only(args)
        args.results.write_text(json.dumps(res, indent=1))
        write_doc(res, plotted(res))
        return 0
    if args.from_json:
        res = json.loads(args.from_json.read_text())
    else:
        res = run_all(args)
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(res, indent=1))
    write_doc(res, plot(res))
    print(json.dumps(ratios(res)))
    if "sections" in res:
        log(f"wall time by section (s): {json.dumps(res['sections'])}; total "
            f"{res['wall_s'] / 60:.1f} min (estimated {res['estimate_s'] / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
