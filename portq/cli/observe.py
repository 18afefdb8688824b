"""``portq stats``, ``workers`` and ``dashboard``: what the queues and workers are doing."""

from __future__ import annotations

import argparse
import json

from portq.cli.common import Commands, cell, duration, open_queue, port, print_table, url_of
from portq.rates import period_text
from portq.registry import live_workers, workers_per_queue

STATS_COLUMNS = ["queue", "ready", "scheduled", "running", "waiting", "succeeded", "dead",
                 "cancelled",
                 "oldest_ready_age_s", "failed_1h", "succeeded_1h", "retry_rate", "workers",
                 "paused", "running_limit", "rate_limit", "fair"]


def cmd_stats(args: argparse.Namespace) -> int:
    if args.window is not None:
        return _job_stats(args)
    with open_queue(args) as q:
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
    print_table(STATS_COLUMNS, [[cell(r[c]) for c in STATS_COLUMNS] for r in rows])
    return 0


JOB_STATS_COLUMNS = ["queue", "succeeded", "dead", "cancelled", "per_min", "failed",
                     "wait_p50", "wait_p95", "wait_p99", "run_p50", "run_p95", "run_p99"]


def _ms_text(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms:.0f}ms" if ms < 1000 else f"{ms / 1000:.1f}s"


def _job_stats(args: argparse.Namespace) -> int:
    """``portq stats --window W``: throughput, failures, wait and run time percentiles."""
    with open_queue(args) as q:
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
    print_table(JOB_STATS_COLUMNS, rows)
    return 0


def cmd_workers(args: argparse.Namespace) -> int:
    with open_queue(args) as q:
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
    print_table(cols, [[w.worker_id, w.host, str(w.pid), ",".join(w.queues),
                         str(w.concurrency), str(running[w.worker_id]),
                         cell(w.heartbeat_age_s) + "s ago",
                         cell(w.started_at and w.started_at.isoformat(timespec="seconds"))]
                        for w in workers])
    if not workers:
        print("(no live workers)")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    from portq.web.server import serve
    return serve(url_of(args), prefix=args.prefix, host=args.host, port=args.port,
                 read_only=args.read_only, token=args.token, refresh=args.refresh,
                 allowed_hosts=args.allowed_host, query_timeout=args.query_timeout)


def add_stats(cmds: Commands) -> None:
    p = cmds.command("stats", cmd_stats, "per-queue counts, oldest ready age, failures and "
                     "retry rate over the last hour (docs/operations.md)")
    p.add_argument("--queue", default=None, help="one queue (default: every queue)")
    p.add_argument("--window", default=None, metavar="DURATION",
                   help="instead: the jobs finished in the last DURATION (1h, 24h, 7d; up "
                        "to 31d): succeeded, dead, cancelled, per minute, failure rate, "
                        "wait (enqueue -> start) and run time p50/p95/p99")


def add_workers(cmds: Commands) -> None:
    cmds.command("workers", cmd_workers, "the live workers: id, host, pid, queues, "
                 "concurrency, jobs in hand, last heartbeat")


def add_dashboard(cmds: Commands) -> None:
    p = cmds.command("dashboard", cmd_dashboard, "serve the web dashboard (needs portq[web])",
                     json_help=None)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; any other needs --token)")
    p.add_argument("--port", type=port, default=8765, help="port (default 8765)")
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
