"""The `portq` command end to end, as users' scripts call it (real subprocesses)."""

from __future__ import annotations

import argparse
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from portq.conformance.helpers import counts, run_portq, stopped_counters, wait_until

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
                     "0s", env=env, cwd=tmp_path)
    assert "never awaited" not in proc.stderr and "RuntimeWarning" not in proc.stderr
    calls = [(r["id"], r["attempt"]) for r in map(json.loads, out.read_text().splitlines())]
    assert sorted(calls) == sorted([(i, 1) for i in ids] + [(flaky, 1), (flaky, 2)])
    done = {r.id: r.attempts for r in queue.jobs("succeeded", queue=qname)}
    assert done == {**dict.fromkeys(ids, 1), flaky: 2}
    summary = stopped_counters(proc.stderr)
    assert (summary["succeeded"], summary["retried"]) == (6, 1)


def test_worker_tuning_flags_are_deprecated_with_one_line(tmp_path: Path) -> None:
    """The worker has one mode: --prefetch/--ack-delay/--claimers still apply but say, once,
    that they are deprecated; without them nothing is said."""
    url = f"sqlite:///{tmp_path}/dep.db"
    run_portq("migrate", url)
    run_portq("enqueue", url, "--queue", "q", "--payload", "1")
    plain = run_portq("worker", url, "--queue", "q", "--handler", "json:dumps", "--burst")
    assert "deprecated" not in plain.stderr
    run_portq("enqueue", url, "--queue", "q", "--payload", "2")
    tuned = run_portq("worker", url, "--queue", "q", "--handler", "json:dumps", "--burst",
                      "--prefetch", "4", "--claimers", "2")
    lines = [line for line in tuned.stderr.splitlines() if "deprecated" in line]
    assert len(lines) == 1 and "--prefetch, --claimers" in lines[0], tuned.stderr
    assert "DeprecationWarning" not in tuned.stderr


# ---- issue 16: help, flags, durations, logging ----------------------------------------------

def test_version_and_help_text_for_every_option() -> None:
    import portq
    from portq.cli import build_parser
    assert run_portq("--version").stdout.strip() == f"portq {portq.__version__}"
    top = run_portq("--help").stdout
    assert "``" not in top and "$PORTQ_URL" in top
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [f"{name} {a.dest}" for name, p in sub.choices.items() for a in p._actions
               if not a.help and a.dest not in ("help",)]
    assert missing == [], f"options without help text: {missing}"
    worker_help = run_portq("worker", "--help").stdout
    for flag in ("--log-level", "--log-format", "--concurrency", "--lease", "--metrics-host"):
        assert flag in worker_help
    assert "minimum 1s" in worker_help and "(default 30s)" in worker_help
    assert "default portqt_" in run_portq("conformance", "--help").stdout
    assert "default all" in run_portq("jobs", "--help").stdout


@pytest.mark.parametrize(("args", "hint"), [
    (["worker", "--queue", "q", "--handler", "m:f", "--concurency", "4"], "--concurrency"),
    (["prune", "--older-then", "7d"], "--older-than"),
    (["jobs", "--stat", "dead", "--limt", "3"], "--limit"),
])
def test_mistyped_flags_suggest_the_right_one(args: list[str], hint: str) -> None:
    proc = run_portq(*args, env={"PORTQ_URL": "sqlite:///unused.db"}, check=False)
    assert proc.returncode == 2
    assert f"(did you mean {hint}?)" in proc.stderr, proc.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["prune", "--older-than", "7"], "duration '7' needs a unit: one of ms, s, m, h, d or w"),
    (["reap", "--delay", "1"], "duration '1' needs a unit"),
    (["enqueue", "--queue", "q", "--delay", "-5s"],
     "argument --delay: invalid duration '-5s': must not be negative"),
    (["worker", "--queue", "q", "--handler", "m:f", "--lease", "1ms"],
     "lease '1ms' is too short: the heartbeat renews a lease every third of it, so the "
     "minimum is 1s"),
    (["worker", "--queue", "q", "--handler", "m:f", "--grace", "5x"], "invalid duration '5x'"),
])
def test_durations_need_a_unit_on_the_cli(args: list[str], message: str) -> None:
    proc = run_portq(*args, env={"PORTQ_URL": "sqlite:///unused.db"}, check=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_log_options_before_or_after_the_command(tmp_path: Path) -> None:
    for n, args in enumerate((["--log-format", "json", "--log-level", "debug", "migrate"],
                              ["migrate", "--log-format", "json", "--log-level", "DEBUG"])):
        url = f"sqlite:///{tmp_path}/logs{n}.db"
        proc = run_portq(*args, url, env={"PORTQ_LOG_LEVEL": None})
        records = [json.loads(line) for line in proc.stderr.splitlines()]
        assert records and {"time", "level", "logger", "message"} <= set(records[0])
    quiet = run_portq("migrate", f"sqlite:///{tmp_path}/quiet.db", "--log-level", "ERROR",
                      env={"PORTQ_LOG_LEVEL": None})
    assert quiet.stderr == ""
    default = run_portq("migrate", f"sqlite:///{tmp_path}/fresh.db",
                        env={"PORTQ_LOG_LEVEL": None})
    assert " INFO portq.backend migrated sqlite schema to version" in default.stderr


# ---- issue 16: commands say what they did ------------------------------------------------------

def test_migrate_says_whether_it_created_the_schema(tmp_path: Path) -> None:
    from portq.sql import load_migrations
    url = f"sqlite:///{tmp_path}/m.db"
    version = max(v for v, _ in load_migrations("sqlite", "portq_"))
    assert run_portq("migrate", url).stdout.startswith(f"created schema v{version} (")
    assert run_portq("migrate", url).stdout.startswith(f"schema already at v{version} (")
    data = json.loads(run_portq("migrate", url, "--json").stdout)
    assert data == {"url": url, "prefix": "portq_", "before": version, "version": version,
                    "changed": False}


def test_enqueue_says_new_or_existing(engine_url: str, qname: str) -> None:
    env = {"PORTQ_URL": engine_url}
    base = ["enqueue", "--prefix", "portqt_", "--queue", qname, "--key", f"{qname}-dup"]
    first = run_portq(*base, env=env).stdout.strip()
    assert first.startswith("created job ") and first.endswith(f" on queue {qname}")
    job_id = int(first.split()[2])
    assert run_portq(*base, env=env).stdout.strip() == f"existing job {job_id} (key {qname}-dup)"
    assert json.loads(run_portq(*base, "--json", env=env).stdout) == {
        "id": job_id, "created": False, "queue": qname, "key": f"{qname}-dup"}


def test_enqueue_at_a_time_with_its_offset(engine_url: str, queue: Any, qname: str) -> None:
    """``--run-at`` takes an ISO 8601 time with its UTC offset (the job's ``run_at``, in
    UTC); one without an offset, an unreadable one, or one with ``--delay`` is a one-line
    usage error and no job."""
    from datetime import UTC, datetime
    env = {"PORTQ_URL": engine_url}
    base = ["enqueue", "--prefix", "portqt_", "--queue", qname]
    out = run_portq(*base, "--run-at", "2031-12-24T09:00:00+01:00", "--json", env=env).stdout
    record = queue.job(json.loads(out)["id"])
    assert record.run_at == datetime(2031, 12, 24, 8, 0, tzinfo=UTC)
    assert record.state == "ready" and counts(queue, qname)["scheduled"] == 1
    for bad, says in (("2031-12-24T09:00:00", "has no UTC offset"),
                      ("next tuesday", "is not an ISO 8601 time")):
        proc = run_portq(*base, "--run-at", bad, env=env, check=False)
        last = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == 2 and last.startswith("portq enqueue: error: argument "
                                                        "--run-at: ") and says in last, last
        assert "Traceback" not in proc.stderr
    proc = run_portq(*base, "--run-at", "2031-12-24T09:00:00Z", "--delay", "5s", env=env,
                     check=False)
    assert proc.returncode == 2 and "not allowed with argument --run-at" in proc.stderr
    assert counts(queue, qname)["scheduled"] == 1 and counts(queue, qname)["ready"] == 0


def test_delete_by_id_takes_only_finished_jobs(engine_url: str, queue: Any,
                                               qname: str) -> None:
    """``portq delete ID...`` removes finished jobs (with their results), says why for
    the others (exit 1) and changes nothing else; without ids it is a one-line error."""
    env = {"PORTQ_URL": engine_url}
    done = queue.enqueue(qname, "done")
    (job,) = queue.claim(qname, "w", limit=1)
    assert queue.store_result(job, {"kept": True}) and queue.complete(job)
    ready = queue.enqueue(qname, "ready")
    missing = ready + 10_000_000
    proc = run_portq("delete", str(done), str(ready), str(missing), "--prefix", "portqt_",
                     env=env, check=False)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines() == [
        f"deleted job {done}",
        f"job {ready} is ready, not finished (succeeded, dead or cancelled)",
        f"no such job {missing}"]
    assert queue.job(done) is None and queue.result(done) is None
    assert queue.job(ready) is not None and counts(queue, qname)["ready"] == 1
    again = run_portq("delete", engine_url, str(done), "--prefix", "portqt_", "--json",
                      check=False)
    assert again.returncode == 1 and json.loads(again.stdout) == [
        {"id": done, "result": "no such job"}]
    bare = run_portq("delete", engine_url, "--prefix", "portqt_", check=False)
    assert bare.returncode == 2 and bare.stderr.strip() == (
        "portq: error: nothing to delete: give job ids (portq prune deletes finished jobs "
        "by age)")


def test_retry_and_cancel_by_id_without_url_and_unknown_ids(engine_url: str, queue: Any,
                                                            qname: str) -> None:
    env = {"PORTQ_URL": engine_url}
    prefix = ["--prefix", "portqt_"]
    dead = []
    for _ in range(2):
        job_id = queue.enqueue(qname, "x", max_attempts=1)
        (job,) = queue.claim(qname, "w", limit=1)
        assert queue.fail(job, "boom", retry_in=None)
        dead.append(job_id)
    missing = dead[-1] + 10_000_000
    proc = run_portq("retry", str(dead[0]), str(dead[1]), str(missing), *prefix, env=env,
                     check=False)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines() == [f"retried job {dead[0]}", f"retried job {dead[1]}",
                                        f"no such job {missing}"]
    assert {r.state for r in queue.jobs(queue=qname)} == {"ready"}
    proc = run_portq("cancel", str(missing), *prefix, "--json", env=env, check=False)
    assert proc.returncode == 1
    assert json.loads(proc.stdout) == [{"id": missing, "result": "no such job"}]
    proc = run_portq("retry", "x1", *prefix, env=env, check=False)
    assert proc.returncode == 2 and "job id 'x1' is not a positive integer" in proc.stderr


def test_jobs_lists_every_state_and_job_shows_the_error_history(engine_url: str, queue: Any,
                                                                 qname: str) -> None:
    env = {"PORTQ_URL": engine_url}
    prefix = ["--prefix", "portqt_"]
    ready = queue.enqueue(qname, {"n": 1}, priority=7, key=f"{qname}-k")
    failing = queue.enqueue(qname, {"n": 2}, max_attempts=2, priority=9)  # claimed first
    for attempt in (1, 2):
        (job,) = queue.claim(qname, "cli-w", limit=1)
        assert job.id == failing
        assert queue.fail(job, "Traceback (most recent call last):\n  File \"h.py\", line 1,"
                          f" in f\n    x()\nValueError: bad row {attempt}\n", retry_in=0)
    table = run_portq("jobs", *prefix, "--queue", qname, env=env).stdout.splitlines()
    assert table[0].split() == ["id", "state", "queue", "priority", "run_at", "attempts",
                                "progress", "key", "last_error"]
    rows = {line.split()[0]: line for line in table[1:]}
    assert " ready " in rows[str(ready)] and " 7 " in rows[str(ready)]
    assert "0/25" in rows[str(ready)] and f"{qname}-k" in rows[str(ready)]
    assert " dead " in rows[str(failing)] and "2/2" in rows[str(failing)]
    assert rows[str(failing)].endswith("ValueError: bad row 2")
    only_dead = json.loads(run_portq("jobs", *prefix, "--queue", qname, "--state", "dead",
                                     "--json", env=env).stdout)
    assert [r["id"] for r in only_dead] == [failing] and only_dead[0]["attempts"] == 2
    paged = run_portq("jobs", *prefix, "--queue", qname, "--limit", "1", env=env).stdout
    assert f"next page: --after-id {ready}" in paged
    shown = run_portq("job", str(failing), *prefix, env=env).stdout
    assert "state        dead" in shown and "attempts     2/2" in shown
    assert "errors (2 recorded attempts):" in shown
    assert "attempt 1 by cli-w at " in shown and "    ValueError: bad row 1" in shown
    data = json.loads(run_portq("job", str(failing), *prefix, "--json", env=env).stdout)
    assert [e["attempt"] for e in data["errors"]] == [1, 2] and data["payload"] == {"n": 2}
    gone = run_portq("job", "99999999", *prefix, env=env, check=False)
    assert gone.returncode == 1 and gone.stdout == ""
    assert gone.stderr.strip() == "portq: error: no such job 99999999"


def test_bulk_retry_and_cancel_in_bounded_batches(engine_url: str, queue: Any,
                                                  qname: str) -> None:
    env = {"PORTQ_URL": engine_url}
    prefix = ["--prefix", "portqt_"]
    queue.enqueue_many([{"queue": qname, "payload": i, "max_attempts": 1} for i in range(5)])
    for job in queue.claim(qname, "w", limit=5):
        assert queue.fail(job, "boom", retry_in=None)
    bulk = ["retry", *prefix, "--queue", qname, "--state", "dead", "--limit", "2"]
    assert run_portq(*bulk, env=env).stdout.strip() == \
        f"retried 2 dead jobs of queue {qname}; more may be left: repeat, or add --all"
    assert json.loads(run_portq(*bulk, "--all", "--json", env=env).stdout) == {
        "retried": 3, "queue": qname, "states": ["dead"], "more": False}
    assert {r.state for r in queue.jobs(queue=qname)} == {"ready"}
    assert run_portq("cancel", *prefix, "--queue", qname, "--all", "--limit", "2",
                     env=env).stdout.strip() == f"cancelled 5 ready jobs of queue {qname}"
    assert {r.state for r in queue.jobs(queue=qname)} == {"cancelled"}
    proc = run_portq("retry", *prefix, env=env, check=False)
    assert proc.returncode == 2 and "give job ids, or --queue Q" in proc.stderr


# ---- issue 16: worker logs ---------------------------------------------------------------------

FLAKY = '''
def handle(job):
    if job.payload == "flaky" and job.attempt == 1:
        raise ValueError("upstream said no\\nsecond line")
    if job.payload == "bad":
        raise KeyError("missing")
'''


def test_worker_logs_start_retries_dead_and_shutdown_at_info(engine_url: str, queue: Any,
                                                              qname: str, tmp_path: Path
                                                              ) -> None:
    (tmp_path / "flaky_handlers.py").write_text(FLAKY)
    flaky = queue.enqueue(qname, "flaky", max_attempts=3)
    bad = queue.enqueue(qname, "bad", max_attempts=1)
    queue.enqueue(qname, "ok")
    proc = run_portq("worker", engine_url, "--prefix", "portqt_", "--queue", qname,
                     "--handler", "flaky_handlers:handle", "--burst", "--backoff", "fixed",
                     "--backoff-base", "0s", "--concurrency", "2", "--lease", "20s",
                     cwd=tmp_path, env={"PORTQ_LOG_LEVEL": None})
    lines = proc.stderr.splitlines()
    (start,) = [line for line in lines if "worker.started" in line]
    engine = queue.backend.engine
    assert " INFO portq.worker worker.started worker=" in start
    for part in (f"engine={engine}", f"queues={qname}", "concurrency=2", "lease=20s",
                 "prefetch=auto<=", f"url={queue.url}"):  # the look-ahead, sized itself
        assert part in start, start
    (retry,) = [line for line in lines if "job.retry" in line]
    assert f"job_id={flaky} queue={qname}" in retry and "attempt=1/3" in retry
    assert retry.endswith("error=ValueError: upstream said no"), retry
    (dead,) = [line for line in lines if "job.dead" in line]
    assert f"job_id={bad} queue={qname}" in dead and "attempt=1/1" in dead
    assert dead.endswith("error=KeyError: 'missing'"), dead
    (stopped,) = [line for line in lines if "worker.stopped" in line]
    assert "claimed=4 succeeded=2 retried=1 dead=1 lost=0" in stopped
    assert not [line for line in lines if "job.succeeded" in line or "job.claimed" in line]


def test_sigterm_is_logged_at_info(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    url = f"sqlite:///{tmp_path}/t.db"
    run_portq("migrate", url)
    proc = subprocess.Popen([sys.executable, "-m", "portq.cli", "worker", url, "--queue", "q",
                             "--handler", "json:loads"], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        assert "worker.started" in proc.stderr.readline()
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[1]
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert " INFO portq.worker worker.stopping" in rest and "signal=SIGTERM" in rest
    assert "WARNING" not in rest


# ---- issue 16: portq conformance -------------------------------------------------------------

def test_every_conformance_test_has_one_property() -> None:
    import ast

    from portq.conformance import SUITE_DIR
    from portq.conformance.properties import PROPERTIES
    tests = {node.name for path in SUITE_DIR.glob("test_*.py")
             for node in ast.parse(path.read_text()).body
             if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
             and node.name.startswith("test_")}
    mapped = [t for p in PROPERTIES for t in p.tests]
    assert len(mapped) == len(set(mapped)), "a test is mapped to two properties"
    assert sorted(tests - set(mapped)) == [], "tests without a property"
    assert sorted(set(mapped) - tests) == [], "properties naming tests that do not exist"


def test_conformance_unreachable_database_is_one_line_exit_2() -> None:
    proc = run_portq("conformance", "postgresql://app:s3cret@127.0.0.1:1/nowhere",
                     check=False, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("portq: error: cannot connect to postgresql://app:***@127.0.0.1:1/"
                           "nowhere: "), line
    assert "s3cret" not in line


@pytest.mark.slow
def test_conformance_reports_a_test_the_engine_cannot_have_as_not_applicable(
        tmp_path: Path) -> None:
    """SQLite has no login: that test is n/a, not a skip (a skip fails .ci/run's check)."""
    url = f"sqlite:///{tmp_path}/c.db"
    selected = ["--", "-k", "test_refused_login_and_missing_database or test_cancel_many"]
    text = run_portq("conformance", url, *selected, check=False, timeout=300)
    assert text.returncode == 0, text.stdout + text.stderr
    last = text.stdout.splitlines()[-1]
    assert last.startswith("1 passed, 0 failed, 1 not applicable to sqlite in "), last
    assert "skipped" not in last
    row = next(line for line in text.stdout.splitlines()
               if line.startswith("schema constraints and migrations"))
    assert row.split()[4:7] == ["n/a", "0/1", "SQLite"], row
    report = json.loads(run_portq("conformance", url, "--json", *selected).stdout)
    assert report["summary"]["not_applicable"] == 1 and report["summary"]["skipped"] == 0
    (schema,) = [p for p in report["properties"]
                 if p["property"] == "schema constraints and migrations"]
    assert schema["result"] == "not_applicable"
    assert schema["reason"] == "SQLite has no login and no server-side database"


#: a plugin whose fixture fails one conformance test by a plain ``assert`` (line 7), and
#: fails another after a step of the system clock as the report reads it (line 17)
FAILING_PLUGIN = """import pytest


@pytest.fixture(autouse=True)
def _fails(request):
    waited = request.node.name.startswith("test_cancel_many")
    assert not waited
    yield


@pytest.fixture(autouse=True)
def _clock_steps(request, monkeypatch):
    if request.node.name.startswith("test_cancel["):
        from portq.conformance import report
        stepped = report.clock_offset() - 2.5
        monkeypatch.setattr(report, "clock_offset", lambda: stepped)
        assert not "stepped"
    yield
"""


@pytest.mark.slow
def test_conformance_failure_names_the_file_line_and_source_of_the_assertion(
        tmp_path: Path) -> None:
    """A bare ``assert False`` does not say which of a test's waits ran out: the report's
    FAILED line (and the JSON's reason) adds where it was raised and that line's source,
    and, when this host's system clock stepped during the test, by how much (leases and
    due times read that clock; a test's waits the monotonic one)."""
    (tmp_path / "failing_plugin.py").write_text(FAILING_PLUGIN)
    url = f"sqlite:///{tmp_path}/c.db"
    selected = ["--", "-p", "failing_plugin", "-k", "test_cancel_many or test_cancel["]
    env = {"PYTHONPATH": str(tmp_path)}
    text = run_portq("conformance", url, *selected, env=env, check=False, timeout=300)
    assert text.returncode == 1, text.stdout + text.stderr
    failed = sorted(line for line in text.stdout.splitlines() if line.startswith("FAILED "))
    assert len(failed) == 2, text.stdout
    assert failed[0].endswith(": assert not 'stepped' (failing_plugin.py:17: assert not "
                              "\"stepped\") [this host's system clock stepped -2.50 s "
                              "during the test]"), failed[0]
    assert failed[1].endswith(": assert not True (failing_plugin.py:7: assert not waited)"), \
        failed[1]
    report = json.loads(run_portq("conformance", url, "--json", *selected, env=env,
                                  check=False).stdout)
    reasons = sorted(t["reason"] for p in report["properties"] for t in p["tests"]
                     if t["result"] == "failed")
    assert reasons[1] == "assert not True (failing_plugin.py:7: assert not waited)"
    assert reasons[0].endswith("[this host's system clock stepped -2.50 s during the test]")


@pytest.mark.slow
def test_conformance_report_json_junit_prefix_and_cleanup(engine_url: str,
                                                          tmp_path: Path) -> None:
    """A few tests of the suite through the real command: banner, properties, JSON, JUnit;
    its own prefix (never the running suite's portqt_), dropped at the end, or kept."""
    import portq
    # a server kept from an earlier run may still hold an interrupted run's tables
    prefix = f"portqc{uuid.uuid4().hex[:6]}_"
    junit = tmp_path / "report.xml"
    selected = ["--", "-k", "claim_is_bounded or stale_generation_cannot_finish or "
                "test_retries and test_cancel or test_cancel_many"]
    proc = run_portq("conformance", engine_url, "--prefix", prefix, "--json", "--junit",
                     str(junit), *selected, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    engine = portq.url.parse_url(engine_url).engine
    assert report["engine"]["engine"] == engine and report["engine"]["server_version"]
    assert report["engine"]["driver_version"] and report["prefix"] == prefix
    assert {p["property"]: p["result"] for p in report["properties"]} == {
        "claim disjointness under concurrency": "passed", "fencing of stale owners": "passed",
        "cancel, single and bulk": "passed"}
    assert report["summary"]["passed"] == 4 and report["summary"]["failed"] == 0
    assert report["passed"] is True
    assert set(report["dropped_tables"]) >= {f"{prefix}job", f"{prefix}job_error"}
    xml = junit.read_text()
    assert 'name="portq_property" value="fencing of stale owners"' in xml
    with portq.connect(engine_url, prefix=prefix) as q:
        assert q.backend.existing_tables() == []

    text = run_portq("conformance", engine_url, "--prefix", prefix, "--keep",
                     "--", "-k", "test_retries and test_cancel or test_cancel_many",
                     check=False, timeout=300)
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert out.startswith("portq ") and "  engine     " in out and "  isolation  " in out
    assert f"  prefix     {prefix} (tables kept at the end)" in out
    assert "property" in out and "cancel, single and bulk" in out and "passed" in out
    assert "2 passed, 0 failed in " in out and "kept the suite's tables" in out
    assert "skipped" not in out.splitlines()[-1]   # .ci/run fails a run whose last line has it
    try:
        refused = run_portq("conformance", engine_url, "--prefix", prefix, check=False)
        assert refused.returncode == 2
        assert f"tables with prefix '{prefix}' already exist" in refused.stderr
    finally:
        with portq.connect(engine_url, prefix=prefix) as q:
            q.backend.drop_schema()


@pytest.mark.slow
def test_conformance_with_its_own_prefix_reaches_its_tables_from_every_process(
        tmp_path: Path) -> None:
    """With ``--prefix``, the suite's tests that run the CLI, worker processes, enqueuing
    processes or queues of their own work on that prefix's tables too (they named the
    default prefix, and failed with 'no portq tables with prefix portqt_')."""
    url = f"sqlite:///{tmp_path}/own-prefix.db"
    selected = ["--", "-k", "test_cli_enqueue_says_existing_with_the_id or "
                "test_pause_refuses_a_bad_queue_name or "
                "test_concurrent_enqueues_of_a_key_report_created_once or "
                "test_portq_limit_sets_and_clears_the_running_limit or "
                "test_concurrent_claimers_never_exceed_a_key"]
    proc = run_portq("conformance", url, "--prefix", "portqown_", "--json", *selected,
                     check=False, timeout=300)
    report = json.loads(proc.stdout)
    failed = [t["reason"] for p in report["properties"] for t in p["tests"]
              if t["result"] == "failed"]
    assert proc.returncode == 0 and not failed, failed or proc.stderr
    assert report["summary"]["passed"] == 5 and report["prefix"] == "portqown_"


def test_jobs_and_job_show_progress_and_meta(engine_url: str, queue: Any, qname: str) -> None:
    env = {"PORTQ_URL": engine_url}
    prefix = ["--prefix", "portqt_"]
    job_id = queue.enqueue(qname, {"n": 1})
    idle = queue.enqueue(qname, {"n": 2})
    (job,) = queue.claim(qname, "cli-w", limit=1)
    assert job.id == job_id and queue.set_progress(job, 0.4, "resized 40 of 100")
    table = run_portq("jobs", *prefix, "--queue", qname, env=env).stdout.splitlines()
    rows = {line.split()[0]: line for line in table[1:]}
    assert " 40% resized 40 of 100 " in rows[str(job_id)]
    assert "%" not in rows[str(idle)]  # no progress reported
    shown = run_portq("job", str(job_id), *prefix, env=env).stdout
    assert re.search(r"^progress\s+40% resized 40 of 100 \(at \d{4}-", shown, re.M), shown
    listed = json.loads(run_portq("jobs", *prefix, "--queue", qname, "--json",
                                  env=env).stdout)
    mine = {r["id"]: r for r in listed}
    assert (mine[job_id]["progress"], mine[job_id]["progress_note"]) == \
        (0.4, "resized 40 of 100")
    assert mine[idle]["progress"] is None and mine[idle]["progress_at"] is None
    one = json.loads(run_portq("job", str(job_id), *prefix, "--json", env=env).stdout)
    assert one["progress"] == 0.4 and one["progress_at"] is not None and one["meta"] == {}
