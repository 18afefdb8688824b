"""`portq worker --metrics-port` and `--schedule`, run as real processes on real engines."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

import portq
from portq.conformance.helpers import exit_code, free_port, wait_until
from portq.conformance.plugin import TEST_PREFIX

PORTQ = [sys.executable, "-m", "portq.cli"]
HANDLERS = '''
import time
import portq

def handle(job):
    if job.payload == "slow":
        time.sleep(3.0)
    elif job.payload == "dead":
        raise portq.Permanent("refused")
    elif job.payload == "flaky" and job.attempt == 1:
        raise RuntimeError("first attempt fails")
'''
SAMPLE = re.compile(r"^([a-z_]+)(\{[^}]*\})? (\S+)$")


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode("utf-8")
    samples = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        m = SAMPLE.match(line)
        assert m, f"malformed exposition line {line!r}"
        samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return samples


def start_worker(url: str, cwd: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([*PORTQ, "worker", url, "--prefix", TEST_PREFIX,
                             "--handler", "handlers:handle", "--lease", "10s", *args],
                            cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def test_metrics_endpoint_during_a_worker_run(engine_url: str, queue: portq.Queue,
                                              qname: str, tmp_path: Path) -> None:
    (tmp_path / "handlers.py").write_text(HANDLERS, encoding="utf-8")
    queue.enqueue(qname, "slow", priority=10)          # holds the only slot for 3 s
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(10)])
    queue.enqueue(qname, "dead")
    queue.enqueue(qname, "flaky", max_attempts=3)
    queue.enqueue(qname, "later", delay=3600)
    port = free_port()
    proc = start_worker(engine_url, tmp_path, "--queue", qname, "--concurrency", "1",
                        "--metrics-port", str(port))
    label = f'{{queue="{qname}"}}'
    try:
        seen_backlog: dict[str, float] = {}

        def backlog_observed() -> bool:
            try:
                m = scrape(port)
            except OSError:
                return False
            if m.get(f"portq_queue_ready{label}", 0) > 0 and \
                    m.get(f"portq_jobs_claimed_total{label}", 0) >= 1:
                seen_backlog.update(m)
                return True
            return False

        assert wait_until(backlog_observed, timeout=30, interval=0.1), proc.stderr
        assert seen_backlog[f"portq_queue_oldest_ready_age_seconds{label}"] > 0
        assert seen_backlog[f"portq_queue_scheduled{label}"] == 1

        def drained() -> bool:
            m = scrape(port)
            return m[f"portq_jobs_succeeded_total{label}"] == 12 and \
                m[f"portq_queue_ready{label}"] == 0
        assert wait_until(drained, timeout=60, interval=0.2)
        m = scrape(port)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert m[f"portq_jobs_claimed_total{label}"] == 14       # 13 jobs, one of them twice
    assert m[f"portq_jobs_failed_total{label}"] == 1
    assert m[f"portq_jobs_dead_total{label}"] == 1
    assert not [k for k in m if k.startswith("portq_jobs_") and label not in k], \
        "a job counter without its queue label"
    assert m[f"portq_queue_dead{label}"] == 1
    assert m[f"portq_queue_oldest_ready_age_seconds{label}"] == 0
    assert m["portq_stats_up"] == 1
    buckets = [v for k, v in m.items() if k.startswith("portq_claim_duration_seconds_bucket")]
    assert all(f'queue="{qname}",le=' in k for k in m
               if k.startswith("portq_claim_duration_seconds_bucket"))
    assert buckets == sorted(buckets)
    assert buckets[-1] == m[f"portq_claim_duration_seconds_count{label}"]
    assert m[f"portq_claim_duration_seconds_count{label}"] >= 10   # a claim per job at least
    assert m[f"portq_claim_duration_seconds_sum{label}"] > 0
    assert proc.returncode == 0


def test_two_workers_with_one_schedule_enqueue_each_minute_once(
        engine_url: str, queue: portq.Queue, qname: str, tmp_path: Path) -> None:
    (tmp_path / "handlers.py").write_text(HANDLERS, encoding="utf-8")
    schedule = tmp_path / "schedules.toml"
    schedule.write_text(f'[[schedule]]\nname = "{qname}"\nqueue = "{qname}"\n'
                        'cron = "* * * * *"\npayload = {{ from = "cron" }}\n'.replace("{{", "{")
                        .replace("}}", "}"), encoding="utf-8")
    first_minute = datetime.now(UTC).replace(second=0, microsecond=0)
    procs = [start_worker(engine_url, tmp_path, "--queue", qname, "--burst",
                          "--schedule", str(schedule)) for _ in range(2)]
    outputs = [p.communicate(timeout=60) for p in procs]
    last_minute = datetime.now(UTC).replace(second=0, microsecond=0)
    assert [p.returncode for p in procs] == [0, 0], outputs
    jobs = queue.jobs("succeeded", queue=qname, limit=100)
    keys = [j.key for j in jobs]
    assert len(keys) == len(set(keys)) >= 1
    assert all(j.payload == {"from": "cron"} for j in jobs)
    minutes = {datetime.strptime(k or "", f"cron:{qname}:%Y-%m-%dT%H:%M:%SZ")
               .replace(tzinfo=UTC) for k in keys}
    assert all(first_minute <= t <= last_minute for t in minutes), (keys, first_minute)
    if first_minute == last_minute:
        assert len(jobs) == 1, keys   # both workers saw the same due minute


def test_bad_schedule_file_is_a_clear_error(engine_url: str, qname: str,
                                            tmp_path: Path) -> None:
    (tmp_path / "handlers.py").write_text(HANDLERS, encoding="utf-8")
    bad = tmp_path / "bad.toml"
    bad.write_text('[[schedule]]\nname = "x"\nqueue = "q"\ncron = "61 * * * *"\n', "utf-8")
    proc = start_worker(engine_url, tmp_path, "--queue", qname, "--burst", "--schedule",
                        str(bad))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "61 is outside 0-59" in err


def test_metrics_host_binds_the_address_asked_for(engine_url: str, qname: str,
                                                  tmp_path: Path) -> None:
    """Default 127.0.0.1 only; --metrics-host binds the address asked for, and 0.0.0.0
    (what a Prometheus in another container scrapes) answers on every address. Proved with
    two loopback addresses only: 127.0.0.1 and 127.0.0.2 (Linux routes all of 127/8 to lo),
    so no traffic leaves the machine."""
    (tmp_path / "handlers.py").write_text(HANDLERS, encoding="utf-8")
    expected = {"127.0.0.1": (True, False), "127.0.0.2": (False, True),
                "0.0.0.0": (True, True)}
    for host, (on_first, on_second) in expected.items():
        port = free_port()
        proc = start_worker(engine_url, tmp_path, "--queue", qname, "--metrics-port",
                            str(port), "--metrics-host", host)
        try:
            probe = "127.0.0.1" if on_first else "127.0.0.2"
            assert wait_until(lambda p=port, h=probe: _answers(h, p), timeout=30), proc.stderr
            assert (_answers("127.0.0.1", port), _answers("127.0.0.2", port)) == \
                (on_first, on_second), host
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        assert f"metrics.serving url=http://{host}:{port}/metrics" in err


def _answers(host: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def test_async_worker_metrics_endpoint(engine_url: str, qname: str) -> None:
    import asyncio

    from portq import aio
    from portq.metrics import serve_metrics
    if portq.url.parse_url(engine_url).engine not in ("postgres", "sqlite"):
        pytest.skip("portq.aio is tested on PostgreSQL and SQLite")
    other = qname + "-b"

    async def handler(job: portq.Job) -> None:
        if job.payload == "boom":
            raise portq.Permanent("boom")

    async def main() -> dict[str, float]:
        async with await aio.connect(engine_url, prefix=TEST_PREFIX) as q:
            for name, n in ((qname, 3), (other, 2)):
                for i in range(n):
                    await q.enqueue(name, i)
            await q.enqueue(other, "boom")
            worker = aio.AsyncWorker(q, [qname, other], handler, burst=True,
                                     idle_min=0.01, idle_max=0.05)
            server = serve_metrics(q, worker, 0)
            try:
                await worker.run()
                return await asyncio.to_thread(scrape, server.port)
            finally:
                server.close()

    m = asyncio.run(main())
    a, b = f'{{queue="{qname}"}}', f'{{queue="{other}"}}'
    assert (m[f"portq_jobs_succeeded_total{a}"], m[f"portq_jobs_succeeded_total{b}"]) == (3, 2)
    assert (m[f"portq_jobs_dead_total{a}"], m[f"portq_jobs_dead_total{b}"]) == (0, 1)
    assert m[f"portq_jobs_claimed_total{a}"] == 3 and m[f"portq_jobs_claimed_total{b}"] == 3
    assert m[f"portq_claim_duration_seconds_count{a}"] >= 1
    assert m[f"portq_claim_duration_seconds_count{b}"] >= 1
    assert m[f"portq_queue_dead{b}"] == 1 and m["portq_stats_up"] == 1


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="no SIGUSR1 on this platform")
def test_sigusr1_dumps_every_threads_stack_and_the_worker_goes_on(
        engine_url: str, queue: portq.Queue, qname: str, tmp_path: Path) -> None:
    """``kill -USR1`` makes a stuck-looking worker say where each thread waits (on
    stderr); it keeps running and still stops cleanly on SIGTERM."""
    from portq.conformance.test_worker import processes, wait_for_records, worker_process
    queue.enqueue(qname, "stuck")
    record, log = tmp_path / "claims.jsonl", tmp_path / "worker.log"
    with processes() as procs:
        proc = worker_process(engine_url, TEST_PREFIX, qname, "block", record, log,
                              "--lease", "30s", "--grace", "0s")
        procs.append(proc)
        wait_for_records(record, 1, proc, log)
        proc.send_signal(signal.SIGUSR1)
        # the dump is written thread by thread: wait for the two stacks looked for
        assert wait_until(lambda: "in block" in (text := log.read_text()) and
                          "portq/runtime/claiming.py" in text, timeout=10), \
            log.read_text()[-3000:]
        assert "most recent call first" in log.read_text()
        assert proc.poll() is None, "SIGUSR1 ended the worker"
        proc.send_signal(signal.SIGTERM)
        assert exit_code(proc, log, 30) == 0, log.read_text()[-3000:]
    assert "job.released" in log.read_text()
