"""The `portq` command end to end, as users' scripts call it (real subprocesses)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from portq.conformance.helpers import run_portq, wait_until

HANDLER = '''
import json, os
def handle(job):
    with open(os.environ["PORTQ_TEST_OUT"], "a") as f:
        f.write(json.dumps({"id": job.id, "payload": job.payload, "attempt": job.attempt}) + "\\n")
'''


def test_enqueue_worker_stats_round_trip(engine_url: str, qname: str, tmp_path: Path) -> None:
    (tmp_path / "cli_handlers.py").write_text(HANDLER)
    out = tmp_path / "out.jsonl"
    env = {"PORTQ_URL": engine_url, "PORTQ_TEST_OUT": str(out)}
    prefix = ["--prefix", "portqt_"]
    run_portq("migrate", *prefix, env=env)

    def enqueue(*args: str) -> int:
        return int(json.loads(run_portq("enqueue", *prefix, "--queue", qname, "--json", *args,
                                        env=env).stdout)["id"])
    first = enqueue("--payload", '{"n": 1}', "--key", qname + "-a")
    again = enqueue("--payload", '{"n": 2}', "--key", qname + "-a")
    second = enqueue("--payload", "[1, 2]", "--priority", "5")
    later = enqueue("--delay", "1h")
    assert first == again and len({first, second, later}) == 3
    run_portq("worker", *prefix, "--queue", qname, "--handler", "cli_handlers:handle", "--burst",
              "--concurrency", "2", env=env, cwd=tmp_path)
    ran = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["id"], json.dumps(r["payload"])) for r in ran) == sorted(
        [(first, '{"n": 1}'), (second, "[1, 2]")])
    (row,) = json.loads(run_portq("stats", *prefix, "--queue", qname, "--json", env=env).stdout)
    assert (row["succeeded"], row["scheduled"], row["ready"], row["running"]) == (2, 1, 0, 0)
    table = run_portq("stats", *prefix, "--queue", qname, env=env).stdout
    assert qname in table and "oldest_ready_age_s" in table


def test_url_is_required_and_errors_are_clear(tmp_path: Path) -> None:
    proc = run_portq("stats", env={"PORTQ_URL": None}, check=False, timeout=60)
    assert proc.returncode == 2 and "no database URL" in proc.stderr
    proc = run_portq("stats", "mongodb://h/db", check=False)
    assert proc.returncode == 2 and "unknown database engine 'mongodb'" in proc.stderr
    proc = run_portq("enqueue", f"sqlite:///{tmp_path}/x.db", "--queue", "q", "--payload", "{bad",
                     check=False)
    assert proc.returncode == 2 and "--payload is not valid JSON" in proc.stderr


@pytest.mark.parametrize("text", ["30s", "15m", "2h", "7d", "250ms", "1w", "1.5s"])
def test_durations(text: str) -> None:
    from portq.cli import format_duration, parse_duration
    seconds = {"30s": 30, "15m": 900, "2h": 7200, "7d": 604800, "250ms": 0.25, "1w": 604800,
               "1.5s": 1.5}[text]
    assert parse_duration(text) == seconds
    assert parse_duration(format_duration(seconds)) == seconds


def test_demo_on_sqlite(tmp_path: Path) -> None:
    proc = run_portq("demo", f"sqlite:///{tmp_path}/demo.db", "--jobs", "300", "--workers", "2",
                     cwd=tmp_path)
    report = json.loads(proc.stdout)
    assert report["counters"]["succeeded"] == 300
    assert report["claim_complete_jobs_per_s"] > 0


def test_operator_commands_reap_prune_retry_cancel_jobs(engine_url: str, queue: Any,
                                                        qname: str) -> None:
    """`portq jobs/retry/cancel/reap/prune/stats` against real rows, as an operator runs
    them."""
    env = {"PORTQ_URL": engine_url}
    prefix = ["--prefix", "portqt_"]
    dead_id = queue.enqueue(qname, {"n": "dead"}, max_attempts=1)
    (job,) = queue.claim(qname, "cli-test", limit=1, lease=30)
    assert queue.fail(job, "boom: no such customer", retry_in=None) is True
    listed = json.loads(run_portq("jobs", *prefix, "--state", "dead", "--queue", qname, "--json",
                                  env=env).stdout)
    assert [(r["id"], r["state"], r["last_error"]) for r in listed] == [
        (dead_id, "dead", "boom: no such customer")]
    assert str(dead_id) in run_portq("jobs", *prefix, "--queue", qname, env=env).stdout

    assert run_portq("retry", *prefix, str(dead_id), "--extra-attempts", "2", env=env).stdout \
        .strip() == f"retried job {dead_id}"
    (again,) = queue.jobs("ready", queue=qname)
    assert (again.id, again.attempts, again.max_attempts) == (dead_id, 1, 3)
    refused = run_portq("retry", *prefix, str(dead_id), env=env, check=False)
    assert refused.returncode == 1
    assert refused.stdout.strip() == f"job {dead_id} is ready, not dead or cancelled"

    assert run_portq("cancel", *prefix, str(dead_id), env=env).stdout.strip() == \
        f"cancelled job {dead_id}"
    refused = run_portq("cancel", *prefix, str(dead_id), env=env, check=False)
    assert refused.returncode == 1
    assert refused.stdout.strip() == f"job {dead_id} is cancelled, not ready or running"
    assert [r.id for r in queue.jobs("cancelled", queue=qname)] == [dead_id]

    expired_id = queue.enqueue(qname, {"n": "expired"})
    queue.claim(qname, "cli-test", limit=1, lease=0.2)
    time.sleep(0.5)
    # on a shared server another test run's worker may reap this table first; the SQLite
    # file is this session's own
    alone = queue.backend.engine == "sqlite"
    reaped_n = json.loads(run_portq("reap", *prefix, "--delay", "0s", "--json", env=env).stdout)
    assert reaped_n["reaped"] >= (1 if alone else 0)
    (reaped,) = queue.jobs("ready", queue=qname)
    assert reaped.id == expired_id and reaped.last_error is not None
    assert "lease expired" in reaped.last_error
    (row,) = json.loads(run_portq("stats", *prefix, "--queue", qname, "--json", env=env).stdout)
    assert row["ready"] == 1 and row["oldest_ready_age_s"] is not None
    assert (row["failed_1h"], row["succeeded_1h"], row["retry_rate"]) == (1, 0, 1.0)

    claimed: list[Any] = []
    assert wait_until(lambda: bool(claimed.extend(queue.claim(qname, "cli-test", lease=30))
                                   or claimed), timeout=10)
    assert queue.complete(claimed[0]) is True
    assert run_portq("prune", *prefix, "--older-than", "7d", "--queue", qname,
                     env=env).stdout.strip() == \
        f"deleted 0 succeeded or cancelled jobs older than 7d from queue {qname}"
    time.sleep(0.05)
    assert run_portq("prune", *prefix, "--older-than", "0s", "--queue", qname, "--state",
                     "succeeded", env=env).stdout.strip() == \
        f"deleted 1 succeeded job older than 0s from queue {qname}"
    assert queue.jobs("succeeded", queue=qname) == []
    assert [r.id for r in queue.jobs("cancelled", queue=qname)] == [dead_id]  # not named

    (row,) = json.loads(run_portq("stats", *prefix, "--queue", qname, "--json", env=env).stdout)
    assert (row["cancelled"], row["ready"], row["succeeded"]) == (1, 0, 0)
