"""What ``Queue.job_stats`` (the dashboard's Throughput page, ``portq stats --window``)
costs on a large job table, per engine and window, with each engine's plan; writes
docs/benchmarks-job-stats.md.

    .venv/bin/python benchmarks/job_stats.py --url postgresql://postgres@127.0.0.1:5432/DB \\
        [--url mysql://root@127.0.0.1:3306/DB] [--url sqlite:////tmp/stats.db] \\
        [--jobs 1000000] [--repeat 9]

It fills ``portqd_`` tables (dropped afterwards) as benchmarks/dashboard.py does: finished
jobs whose finish times spread evenly over the last 7 days (every 1000th dead), with wait
and run times of up to 3.5 s and 0.5 s, so the 1 h window holds ~0.6 % of them, 24 h
~14 % and 7 d all. Then, in interleaved rounds (1h, 24h, 7d, 1h, ...), it times both
statements in this process and prints each engine's plan (PostgreSQL EXPLAIN (ANALYZE,
BUFFERS), MariaDB ANALYZE FORMAT=JSON's access type and key, SQLite EXPLAIN QUERY PLAN).
A benchmark, not a test: nothing passes or fails on a number.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dashboard import PREFIX, existing, fill

import portq
from portq import bench
from portq.stats import WINDOWS, bucket_seconds

ROOT = Path(__file__).resolve().parent.parent
#: wait (created -> first start) and run (start -> finish) times for the filled jobs
TIMES_SQL = {
    "postgres": "UPDATE {t} SET started_at = finished_at - (job_id % 500) * interval '1 ms', "
                "first_started_at = finished_at - (job_id % 500) * interval '1 ms', "
                "created_at = finished_at - (job_id % 500 + job_id % 3000) * interval '1 ms' "
                "WHERE finished_at IS NOT NULL",
    "mysql": "UPDATE {t} SET started_at = finished_at - INTERVAL (job_id % 500) * 1000 "
             "MICROSECOND, first_started_at = finished_at - INTERVAL (job_id % 500) * 1000 "
             "MICROSECOND, created_at = finished_at - INTERVAL (job_id % 500 + job_id % "
             "3000) * 1000 MICROSECOND WHERE finished_at IS NOT NULL",
    "sqlite": "UPDATE {t} SET started_at = finished_at - (job_id % 500) * 1000, "
              "first_started_at = finished_at - (job_id % 500) * 1000, "
              "created_at = finished_at - (job_id % 500 + job_id % 3000) * 1000 "
              "WHERE finished_at IS NOT NULL",
}
EXPLAIN = {"postgres": "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ",
           "mysql": "ANALYZE FORMAT=JSON ", "sqlite": "EXPLAIN QUERY PLAN "}


def mariadb_tables(value: Any) -> list[dict[str, Any]]:
    """The table accesses of a MariaDB ANALYZE FORMAT=JSON document, in order."""
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        if "table_name" in value:
            found.append({k: value.get(k) for k in (
                "table_name", "access_type", "key", "rows", "r_rows", "r_total_time_ms",
                "filtered", "r_filtered")})
        for v in value.values():
            found += mariadb_tables(v)
    elif isinstance(value, list):
        for v in value:
            found += mariadb_tables(v)
    return found


def plans(queue: portq.Queue, window: str) -> dict[str, str]:
    """Each statement's plan for ``window`` (as the engine prints it, shortened)."""
    backend = queue.backend
    window_s = WINDOWS[window]
    out = {}
    for name in ("stats_series", "stats_latency"):
        params: dict[str, Any] = {"window_s": window_s}
        if name == "stats_series":
            params["bucket_s"] = bucket_seconds(window_s)
        sql = EXPLAIN[backend.engine] + backend.queries[name]
        with backend.transaction(write=False) as cur:
            backend.execute(cur, sql, params)
            rows = cur.fetchall()
        if backend.engine == "mysql":
            tables = mariadb_tables(json.loads(rows[0][0]))
            out[name] = json.dumps(tables)
        elif backend.engine == "sqlite":
            out[name] = "; ".join(str(r[-1]) for r in rows)
        else:
            out[name] = "\n".join(str(r[0]) for r in rows)
    return out


def measure(url: str, total: int, repeat: int, keep: bool) -> dict[str, Any]:
    with portq.connect(url, prefix=PREFIX) as queue:
        backend = queue.backend
        ids = existing(queue) if keep else None
        if ids is None or ids["rows"] != total:
            print(f"filling {total:,} jobs on {queue.url} ...", file=sys.stderr, flush=True)
            ids = fill(queue, total)
            with backend.transaction() as cur:
                backend.execute(cur, TIMES_SQL[backend.engine].format(t=f"{PREFIX}job"))
            bench.analyze_table(backend)
        version = bench.server_version(backend)
        finished = {w: sum(s.finished for s in queue.job_stats(w)) for w in WINDOWS}
        load_before = os.getloadavg()
        times: dict[str, dict[str, list[float]]] = {
            w: {"stats_series": [], "stats_latency": []} for w in WINDOWS}
        for _ in range(repeat + 1):
            for w, window_s in WINDOWS.items():
                t0 = time.perf_counter()
                backend.stats_series(window_s, bucket_seconds(window_s))
                t1 = time.perf_counter()
                backend.stats_latency(window_s)
                t2 = time.perf_counter()
                times[w]["stats_series"].append((t1 - t0) * 1000)
                times[w]["stats_latency"].append((t2 - t1) * 1000)
        load_after = os.getloadavg()
        result = {w: {n: {"median_ms": round(statistics.median(v[1:]), 1),
                          "min_ms": round(min(v[1:]), 1), "max_ms": round(max(v[1:]), 1)}
                      for n, v in per.items()} for w, per in times.items()}
        shown = {w: plans(queue, w) for w in ("1h", "7d")}
        if not keep:
            bench.drop_tables(backend)
    return {"engine": backend.engine, "version": version, "rows": ids["rows"],
            "finished_in_window": finished, "times": result, "plans": shown,
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in load_after]}


def report(runs: list[dict[str, Any]], repeat: int) -> str:
    lines = ["# Job statistics on a large job table", "",
             "Generated by `benchmarks/job_stats.py` "
             f"({datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}), one run. Each "
             f"statement timed in-process ({repeat} interleaved rounds after one warm-up "
             "round; median, min-max). The machine (2 cores) was shared with other "
             "developers' test runs; load averages (1, 5, 15 min) below.", "",
             "| engine | rows | window | finished in window | stats_series ms | "
             "stats_latency ms |", "|---|---|---|---|---|---|"]
    for r in runs:
        for w in WINDOWS:
            t = r["times"][w]
            cells = [f"{t[n]['median_ms']} ({t[n]['min_ms']}-{t[n]['max_ms']})"
                     for n in ("stats_series", "stats_latency")]
            lines.append(f"| {r['engine']} {r['version'].split(' on ')[0]} | {r['rows']:,} "
                         f"| {w} | {r['finished_in_window'][w]:,} | " + " | ".join(cells)
                         + " |")
    lines += ["", "| engine | load before | load after |", "|---|---|---|"]
    lines += [f"| {r['engine']} | {r['load_before']} | {r['load_after']} |" for r in runs]
    for r in runs:
        for w, per in r["plans"].items():
            for name, plan in per.items():
                lines += ["", f"### {r['engine']} {name}, window {w}", "", "```", plan, "```"]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", action="append", required=True)
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--keep", action="store_true", help="keep (and reuse) the filled tables")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-job-stats.md"))
    args = ap.parse_args()
    runs = [measure(u, args.jobs, args.repeat, args.keep) for u in args.url]
    Path(args.out).write_text(report(runs, args.repeat))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
