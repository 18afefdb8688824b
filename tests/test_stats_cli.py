"""``portq stats URL --window W``: throughput, failures, wait and run time percentiles of
the jobs finished in the window, as a table and as JSON (real subprocesses)."""

from __future__ import annotations

import json
from typing import Any

from portq.conformance.helpers import run_portq


def test_stats_window_prints_throughput_and_percentiles(engine_url: str, queue: Any,
                                                        qname: str) -> None:
    queue.enqueue_many([{"queue": qname, "payload": i, "max_attempts": 1} for i in range(4)])
    jobs = queue.claim(qname, "w", limit=4)
    queue.complete_many(jobs[:3])
    queue.fail(jobs[3], "boom")
    env = {"PORTQ_URL": engine_url}
    base = ["stats", "--prefix", "portqt_", "--queue", qname, "--window"]
    lines = run_portq(*base, "24h", env=env).stdout.splitlines()
    assert lines[0].split() == ["queue", "succeeded", "dead", "cancelled", "per_min",
                                "failed", "wait_p50", "wait_p95", "wait_p99", "run_p50",
                                "run_p95", "run_p99"]
    assert lines[1].split()[:6] == [qname, "3", "1", "0", "0.0", "25.0%"]
    (row,) = json.loads(run_portq(*base, "1h", "--json", env=env).stdout)
    assert row["succeeded"] == 3 and row["dead"] == 1 and row["bucket_s"] == 60
    assert len(row["series"]["succeeded"]) == 60 and row["wait_ms"]["p50"] is not None
    empty = run_portq(*base, "7d", "--queue", f"{qname}-idle", env=env).stdout
    assert empty.strip() == f"no jobs finished in the last 7d on queue {qname}-idle"
    bad = run_portq(*base, "30s", env=env, check=False)
    assert bad.returncode == 2 and "window must be from 1 minute to 31 days" in bad.stderr
