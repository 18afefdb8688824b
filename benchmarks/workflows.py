"""Job dependencies: what they cost and what they take (docs/benchmarks.md, "Workflows").

    .venv/bin/python benchmarks/workflows.py noop URL [--jobs 5000]
    .venv/bin/python benchmarks/workflows.py fanin URL [--jobs 10000]
    .venv/bin/python benchmarks/workflows.py chain URL [--jobs 1000]
    .venv/bin/python benchmarks/workflows.py compare --base DIR URL... [--rounds 3]

``noop``: the no-op throughput of one Worker (4 threads) and of the raw ``complete_many``
loop (4 threads) on jobs without dependencies, one JSON line. ``compare`` runs ``noop`` in
interleaved rounds with this checkout and with another portq source tree ``--base`` (the
commit before dependencies, e.g. ``git archive c2c895f | tar -x -C /tmp/base``) on its own
table prefix, and prints the medians and spreads. ``fanin``: ``--jobs`` jobs and one
callback depending on all of them; ``chain``: ``--jobs`` jobs each depending on the one
before; both time the enqueue and the Worker's run until the last job succeeded.
Benchmarks measure; nothing here passes or fails on a number.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _queue(url: str, prefix: str) -> Any:
    import portq
    q = portq.connect(url, prefix=prefix, pool_size=8)
    q.migrate()
    return q


def noop(url: str, jobs: int, prefix: str) -> dict[str, Any]:
    """One Worker's and the raw loop's no-op throughput (jobs without dependencies)."""
    from portq import bench
    q = _queue(url, prefix)
    try:
        worker = bench.throughput_run(q, jobs, 4, None)
        raw = bench.raw_throughput_run(q, jobs, 4, 16, "complete_many")
    finally:
        q.close()
    return {"worker": worker["jobs_per_s"], "raw": raw["jobs_per_s"]}


def _drain(q: Any, name: str, last: int, concurrency: int = 8) -> float:
    """Run a Worker on ``name`` until job ``last`` succeeded; seconds taken."""
    from portq import Worker
    # the reaper on (every second): a lease lost to a slow database is given back
    worker = Worker(q, name, lambda job: None, concurrency=concurrency, idle_max=0.05,
                    reap_interval=1.0, prune_interval=None)
    thread = threading.Thread(target=worker.run, daemon=True)
    started = time.perf_counter()
    thread.start()
    while (record := q.job(last)) is None or record.state != "succeeded":
        if record is not None and record.state in ("dead", "cancelled"):
            raise RuntimeError(f"job {last} ended {record.state}")
        time.sleep(0.01)
    took = time.perf_counter() - started
    worker.stop()
    thread.join(30)
    return took


def fanin(url: str, jobs: int, prefix: str) -> dict[str, Any]:
    """``jobs`` jobs and one callback depending on all of them."""
    q = _queue(url, prefix)
    name = f"bench-fanin-{uuid.uuid4().hex[:6]}"
    try:
        started = time.perf_counter()
        ids = q.enqueue_many([{"queue": name, "payload": i} for i in range(jobs)])
        fanned = time.perf_counter()
        callback = q.enqueue(name, "callback", depends_on=ids)
        enqueued = time.perf_counter()
        took = _drain(q, name, callback)
        q.prune(0, limit=jobs + 10, queue=name)
    finally:
        q.close()
    return {"jobs": jobs, "enqueue_jobs_s": round(fanned - started, 3),
            "enqueue_callback_s": round(enqueued - fanned, 3),
            "run_s": round(took, 3), "jobs_per_s": round((jobs + 1) / took, 1)}


def chain(url: str, jobs: int, prefix: str) -> dict[str, Any]:
    """``jobs`` jobs, each depending on the one before."""
    q = _queue(url, prefix)
    name = f"bench-chain-{uuid.uuid4().hex[:6]}"
    try:
        started = time.perf_counter()
        last = q.enqueue(name, 0)
        for i in range(1, jobs):
            last = q.enqueue(name, i, depends_on=[last])
        enqueued = time.perf_counter()
        took = _drain(q, name, last, concurrency=1)
        q.prune(0, limit=jobs + 10, queue=name)
    finally:
        q.close()
    return {"jobs": jobs, "enqueue_s": round(enqueued - started, 3), "run_s": round(took, 3),
            "steps_per_s": round(jobs / took, 1)}


def _noop_in(tree: str, url: str, jobs: int, prefix: str) -> dict[str, Any]:
    """``noop`` in a child process importing portq from ``tree``."""
    env = {**os.environ, "PYTHONPATH": tree}
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "noop", url,
                          "--jobs", str(jobs), "--prefix", prefix],
                         capture_output=True, text=True, env=env, check=True, cwd=tree)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def compare(base: str, urls: list[str], rounds: int, jobs: int) -> None:
    """Interleaved rounds of ``noop``: base then this checkout, per engine, per round."""
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in range(rounds):
        for url in urls:
            for label, tree, prefix in (("base", base, "hwbase_"), ("deps", ROOT, "hwdeps_")):
                numbers = _noop_in(tree, url, jobs, prefix)
                results.setdefault(url, {}).setdefault(label, []).append(numbers)
                print(f"round {r + 1} {url.split(':')[0]:10} {label}: {numbers} "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
    for url, by_label in results.items():
        for kind in ("worker", "raw"):
            cells = []
            for label in ("base", "deps"):
                values = [n[kind] for n in by_label[label]]
                cells.append(f"{label} {statistics.median(values):.0f} "
                             f"({min(values):.0f}-{max(values):.0f})")
            print(f"{url.split(':')[0]:10} {kind:6} " + " | ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("noop", "fanin", "chain", "compare"))
    parser.add_argument("urls", nargs="+")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--prefix", default="hwdeps_")
    parser.add_argument("--base", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.what == "compare":
        if not args.base:
            parser.error("compare needs --base DIR")
        compare(args.base, args.urls, args.rounds, args.jobs or 5000)
        return
    default = {"noop": 5000, "fanin": 10_000, "chain": 1000}[args.what]
    fn = {"noop": noop, "fanin": fanin, "chain": chain}[args.what]
    for url in args.urls:
        print(json.dumps(fn(url, args.jobs or default, args.prefix)), flush=True)


if __name__ == "__main__":
    main()
