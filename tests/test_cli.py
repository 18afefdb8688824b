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
    first = int(run_portq("enqueue", *prefix, "--queue", qname, "--payload", '{"n": 1}',
                          "--key", qname + "-a", env=env).stdout)
    again_out = run_portq("enqueue", *prefix, "--queue", qname, "--payload", '{"n": 2}',
                          "--key", qname + "-a", env=env).stdout.split()
    assert again_out[1:] == ["existing"]  # the key named a job already
    again = int(again_out[0])
    second = int(run_portq("enqueue", *prefix, "--queue", qname, "--payload", "[1, 2]",
                           "--priority", "5", env=env).stdout)
    later = int(run_portq("enqueue", *prefix, "--queue", qname, "--delay", "1h", env=env).stdout)
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


@pytest.mark.parametrize("text", ["90", "30s", "15m", "2h", "7d", "250ms"])
def test_durations(text: str) -> None:
    from portq.cli import parse_duration
    seconds = {"90": 90, "30s": 30, "15m": 900, "2h": 7200, "7d": 604800, "250ms": 0.25}[text]
    assert parse_duration(text) == seconds


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
        .strip() == "retried"
    (again,) = queue.jobs("ready", queue=qname)
    assert (again.id, again.attempts, again.max_attempts) == (dead_id, 1, 3)
    refused = run_portq("retry", *prefix, str(dead_id), env=env, check=False)
    assert refused.returncode == 1 and "not dead or cancelled" in refused.stdout

    assert run_portq("cancel", *prefix, str(dead_id), env=env).stdout.strip() == "cancelled"
    refused = run_portq("cancel", *prefix, str(dead_id), env=env, check=False)
    assert refused.returncode == 1 and "not ready or running" in refused.stdout
    assert [r.id for r in queue.jobs("cancelled", queue=qname)] == [dead_id]

    expired_id = queue.enqueue(qname, {"n": "expired"})
    queue.claim(qname, "cli-test", limit=1, lease=0.2)
    time.sleep(0.5)
    # on a shared server another test run's worker may reap this table first; the SQLite
    # file is this session's own
    alone = queue.backend.engine == "sqlite"
    assert int(run_portq("reap", *prefix, "--delay", "0", env=env).stdout) >= (1 if alone else 0)
    (reaped,) = queue.jobs("ready", queue=qname)
    assert reaped.id == expired_id and reaped.last_error is not None
    assert "lease expired" in reaped.last_error
    (row,) = json.loads(run_portq("stats", *prefix, "--queue", qname, "--json", env=env).stdout)
    assert row["ready"] == 1 and row["oldest_ready_age_s"] is not None
    assert row["retry_rate"] is not None and row["retry_rate"] > 0  # the reaped job retries

    claimed: list[Any] = []
    assert wait_until(lambda: bool(claimed.extend(queue.claim(qname, "cli-test", lease=30))
                                   or claimed), timeout=10)
    assert queue.complete(claimed[0]) is True
    assert int(run_portq("prune", *prefix, "--older-than", "7d", "--queue", qname,
                         env=env).stdout) == 0
    time.sleep(0.05)
    assert int(run_portq("prune", *prefix, "--older-than", "0s", "--queue", qname, "--state",
                         "succeeded", env=env).stdout) == 1
    assert queue.jobs("succeeded", queue=qname) == []
    assert [r.id for r in queue.jobs("cancelled", queue=qname)] == [dead_id]  # not named

    (row,) = json.loads(run_portq("stats", *prefix, "--queue", qname, "--json", env=env).stdout)
    assert (row["cancelled"], row["ready"], row["succeeded"]) == (1, 0, 0)


ASYNC_HANDLER = '''
import asyncio, json, os
async def handle(job):
    await asyncio.sleep(0.01)
    with open(os.environ["PORTQ_TEST_OUT"], "a") as f:
        f.write(json.dumps({"id": job.id, "attempt": job.attempt}) + "\\n")
    if job.payload == "flaky" and job.attempt == 1:
        raise RuntimeError("async handler: first attempt fails")
def gen(job):
    yield job
not_callable = 42
'''


def test_worker_runs_an_async_handler_once(engine_url: str, queue: Any, qname: str,
                                           tmp_path: Path) -> None:
    """`--handler mod:fn` with an ``async def fn``: awaited on the handler thread's event
    loop, its effect happens once per attempt, a raise retries; a handler that cannot run
    is refused with one line before any job is claimed."""
    (tmp_path / "async_handlers.py").write_text(ASYNC_HANDLER)
    out = tmp_path / "out.jsonl"
    env = {"PORTQ_URL": engine_url, "PORTQ_TEST_OUT": str(out)}
    prefix = ["--prefix", "portqt_"]
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(5)])
    flaky = queue.enqueue(qname, "flaky")
    for spec, message in (("async_handlers:gen", "is a generator function"),
                          ("async_handlers:not_callable", "is not callable")):
        proc = run_portq("worker", *prefix, "--queue", qname, "--handler", spec, "--burst",
                         env=env, cwd=tmp_path, check=False)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert queue.stats(qname)[0].ready == 6, "a refused worker claimed a job"
    proc = run_portq("worker", *prefix, "--queue", qname, "--handler", "async_handlers:handle",
                     "--burst", "--concurrency", "2", "--backoff", "fixed", "--backoff-base",
                     "0", env=env, cwd=tmp_path)
    assert "never awaited" not in proc.stderr and "RuntimeWarning" not in proc.stderr
    calls = [(r["id"], r["attempt"]) for r in map(json.loads, out.read_text().splitlines())]
    assert sorted(calls) == sorted([(i, 1) for i in ids] + [(flaky, 1), (flaky, 2)])
    done = {r.id: r.attempts for r in queue.jobs("succeeded", queue=qname)}
    assert done == {**dict.fromkeys(ids, 1), flaky: 2}
    summary = json.loads(proc.stderr.strip().splitlines()[-1])
    assert (summary["succeeded"], summary["retried"]) == (6, 1)
