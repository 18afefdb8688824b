"""Faults: server restarts, killed connections, lock contention and a skewed worker clock.

Tests marked ``fault`` restart a shared database server: they always bring it back up
(``finally``), keep the outage short, and are run by ``.ci/run`` but not by
``portq conformance``. The others only disturb connections and rows this test owns.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import portq
from portq.conformance.helpers import counts, wait_until
from portq.conformance.plugin import TEST_PREFIX
from portq.engines import ENGINES
from portq.job import Job
from portq.worker import Worker

REPO = Path(__file__).resolve().parent.parent
#: the engines whose server runs here (the faults stop and start it)
SERVER_ENGINES = tuple(e.name for e in ENGINES if e.live_here and not e.file_based)


def _need(engine: str, engines: tuple[str, ...]) -> None:
    if engine not in engines:
        pytest.skip(f"not applicable to {engine}")


# ---- restarting a server (always brought back up) ------------------------------------------

def _run(cmd: list[str], timeout: float = 60) -> None:
    subprocess.run(cmd, check=True, timeout=timeout, capture_output=True)


def _accepts_connections(url: str) -> bool:
    try:
        with portq.connect(url, prefix=TEST_PREFIX, pool_size=1) as q:
            q.stats("probe")
        return True
    except Exception:  # noqa: BLE001 - down or starting: not yet
        return False


def _pg_cluster() -> list[str]:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    return ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main"]


def _start_server(engine: str) -> None:
    if engine == "postgres":
        subprocess.run([*_pg_cluster(), "start"], timeout=60, capture_output=True)
    else:
        subprocess.run(["start-stop-daemon", "--start", "--oknodo", "--background",
                        "--exec", "/usr/sbin/mariadbd"], timeout=60, capture_output=True)


@contextmanager
def restartable(engine: str, url: str) -> Iterator[Callable[[], float]]:
    """Yield ``restart()`` (returns seconds until the server accepts connections again);
    whatever happens, the server is started and accepting connections on exit."""
    if os.geteuid() != 0:
        pytest.skip("restarting a database server needs root")
    tools = {"postgres": ["pg_ctlcluster"], "mysql": ["mariadb-admin", "start-stop-daemon"]}
    missing = [t for t in tools[engine] if shutil.which(t) is None]
    if missing or (engine == "postgres" and not os.path.isdir("/etc/postgresql")):
        pytest.skip(f"cannot restart the local {engine} server here (missing {missing})")

    def restart() -> float:
        started = time.monotonic()
        if engine == "postgres":
            _run([*_pg_cluster(), "restart", "-m", "fast"])
        else:
            _run(["mariadb-admin", "-uroot", "--protocol=socket", "shutdown"])
            wait_until(lambda: subprocess.run(["pidof", "mariadbd"],
                                               capture_output=True).returncode != 0, 60)
            _start_server(engine)
        if not wait_until(lambda: _accepts_connections(url), timeout=120, interval=0.1):
            raise AssertionError(f"{engine} did not come back within 120s")
        return time.monotonic() - started

    try:
        yield restart
    finally:
        if not _accepts_connections(url):
            _start_server(engine)
            wait_until(lambda: _accepts_connections(url), timeout=120, interval=0.2)


# ---- database restart mid-run ---------------------------------------------------------------

@pytest.mark.fault
def test_restart_mid_run_loses_nothing(target: Any, engine_url: str, queue: portq.Queue,
                                       qname: str, caplog: pytest.LogCaptureFixture) -> None:
    """5,000 jobs, 4 workers, the server restarted at ~20%: every job succeeds, each
    (job_id, generation) runs at most once, nothing is left running or half-written."""
    _need(target.id, SERVER_ENGINES)  # only the local servers this machine can restart
    total, n_workers, lease = 5000, 4, 5.0
    for start in range(0, total, 1000):
        queue.enqueue_many([{"queue": qname, "payload": {"n": i}}
                            for i in range(start, min(total, start + 1000))])
    calls: list[tuple[int, int, float]] = []
    calls_lock = threading.Lock()

    def handler(job: Job) -> None:
        time.sleep(0.001)  # enough work for the restart to land mid-run
        with calls_lock:
            calls.append((job.id, job.attempt, time.monotonic()))

    caplog.set_level(logging.DEBUG, logger="portq")
    queues = [portq.connect(engine_url, prefix=TEST_PREFIX) for _ in range(n_workers)]
    workers = [Worker(q, qname, handler, concurrency=2, lease=lease, reap_interval=1.0,
                      reap_delay=0.1, prune_interval=None, idle_min=0.01, idle_max=0.2,
                      grace=5) for q in queues]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    outage: dict[str, float] = {}
    try:
        with restartable(target.engine, engine_url) as restart:
            for t in threads:
                t.start()
            assert wait_until(lambda: len(calls) >= total // 5, timeout=300, interval=0.01)
            outage["before"] = len(calls)
            outage["restart_began"] = time.monotonic()
            outage["restart_s"] = restart()
            outage["back_at"] = time.monotonic()
            outage["back_at_wall"] = time.time()
        finished = wait_until(lambda: counts(queue, qname)["succeeded"] == total,
                              timeout=300, interval=0.5)
    finally:
        for w in workers:
            w.stop()
        for t in threads:
            t.join(timeout=60)
        for q in queues:
            q.close()
    c = counts(queue, qname)
    assert finished, f"run did not finish after the restart: {c}"
    assert (c["succeeded"], c["ready"], c["running"], c["dead"]) == (total, 0, 0, 0)
    per_generation = Counter((job_id, gen) for job_id, gen, _ in calls)
    assert [k for k, n in per_generation.items() if n > 1] == [], "a generation ran twice"
    assert {job_id for job_id, _, _ in calls} == {job_id for job_id, _ in per_generation}
    records = queue.jobs("succeeded", queue=qname, limit=total)
    assert len(records) == total
    for r in records:  # completed by the generation that ran last, fully written
        assert (r.id, r.attempts) in per_generation
        assert r.finished_at is not None and r.lease_until is None and r.worker_id is None
    errors = [r for r in caplog.records if r.getMessage().startswith("worker.db_error")]
    assert errors, "the workers did not log the outage"
    claims_after = sorted(r.created for r in caplog.records
                          if r.getMessage().startswith("job.claimed")
                          and r.created > outage["back_at_wall"])
    rerun = sum(1 for n in Counter(j for j, _ in per_generation).values() if n > 1)
    first_claim = (f"{claims_after[0] - outage['back_at_wall']:.2f}s" if claims_after
                   else "(not logged at this level)")
    print(f"\n[{target.engine}] restart after {outage['before']:.0f} jobs took "
          f"{outage['restart_s']:.2f}s; first claim "
          f"{first_claim} "
          f"after the server was back; {len(errors)} worker.db_error lines; {rerun} jobs "
          f"ran in a second generation; lost={sum(w.counters.lost for w in workers)} "
          f"reaped={sum(w.counters.reaped for w in workers)}")


# ---- the pool replaces dead connections -----------------------------------------------------

def _session_ids(q: portq.Queue, n: int) -> list[int]:
    """Fill the pool with ``n`` idle connections; return their server-side ids."""
    backend = q.backend
    sql = "SELECT pg_backend_pid()" if backend.engine == "postgres" else "SELECT CONNECTION_ID()"
    conns = [backend.pool.acquire() for _ in range(n)]
    try:
        ids = []
        for conn in conns:
            with conn.cursor() as cur:
                cur.execute(sql)
                ids.append(int(cur.fetchone()[0]))
            conn.commit()
        return ids
    finally:
        for conn in conns:
            backend.pool.release(conn)


def _kill_sessions(q: portq.Queue, ids: list[int]) -> None:
    """Kill exactly these server sessions (never another test's) from a separate one."""
    backend = q.backend
    conn = backend.connect()
    try:
        with conn.cursor() as cur:
            for sid in ids:
                if backend.engine == "postgres":
                    cur.execute("SELECT pg_terminate_backend(%s)", (sid,))
                else:
                    cur.execute(f"KILL {int(sid)}")
        conn.commit()
    finally:
        conn.close()


def test_pool_replaces_killed_connections(target: Any, engine_url: str, qname: str) -> None:
    """Every pooled session is killed server-side; the next operations all succeed on
    fresh connections (the drop came before COMMIT, so run() retries it once)."""
    _need(target.engine, SERVER_ENGINES)
    with portq.connect(engine_url, prefix=TEST_PREFIX, pool_size=4) as q:
        before = _session_ids(q, 4)
        _kill_sessions(q, before)
        assert wait_until(lambda: not set(before) & set(_live_sessions(q, before)), 10)
        ids = q.enqueue_many([{"queue": qname, "payload": i} for i in range(10)])
        jobs = q.claim(qname, "w-pool", limit=10, lease=30)
        assert sorted(j.id for j in jobs) == sorted(ids)
        assert all(q.complete(j) for j in jobs)
        assert counts(q, qname)["succeeded"] == 10
        after = _session_ids(q, 4)
        assert not set(before) & set(after), "a killed session was handed out again"


def _live_sessions(q: portq.Queue, ids: list[int]) -> list[int]:
    backend = q.backend
    conn = backend.connect()
    try:
        with conn.cursor() as cur:
            if backend.engine == "postgres":
                cur.execute("SELECT pid FROM pg_stat_activity")
            else:
                cur.execute("SELECT id FROM information_schema.processlist")
            return [int(r[0]) for r in cur.fetchall() if int(r[0]) in ids]
    finally:
        conn.close()


# ---- lock contention ------------------------------------------------------------------------

HOLD_WRITE_LOCK = textwrap.dedent("""
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    sys.stdin.read()          # hold the write lock until the test closes stdin
    conn.execute("COMMIT")
""")


def test_sqlite_outside_write_lock_delays_then_allows_claims(
        target: Any, engine_url: str, qname: str) -> None:
    """An outside BEGIN IMMEDIATE held past busy_timeout: a claim waits and retries a
    bounded time, then raises; a worker keeps retrying and drains once it is released."""
    _need(target.engine, ("sqlite",))
    with portq.connect(engine_url, prefix=TEST_PREFIX, busy_timeout_ms=200) as q:
        q.enqueue_many([{"queue": qname, "payload": i} for i in range(20)])
        holder = subprocess.Popen([sys.executable, "-c", HOLD_WRITE_LOCK, q.backend.url.path],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        done: list[int] = []
        worker = Worker(q, qname, lambda job: done.append(job.id), concurrency=2,
                        lease=30, idle_min=0.01, idle_max=0.1, burst=True,
                        reap_interval=None, prune_interval=None)
        thread = threading.Thread(target=worker.run, daemon=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            started = time.monotonic()
            with pytest.raises(Exception, match="locked") as raised:
                q.claim(qname, "w-direct", limit=1)
            waited = time.monotonic() - started
            # 1 + max_retries attempts, each waiting busy_timeout: bounded, not forever
            assert 0.2 * (1 + q.backend.max_retries) * 0.9 <= waited < 30
            thread.start()
            time.sleep(1.0)
            assert done == [] and thread.is_alive(), "claimed through a held write lock"
        finally:
            assert holder.stdin is not None
            holder.stdin.close()
            holder.wait(timeout=30)
        thread.join(timeout=60)
        assert not thread.is_alive()
        assert sorted(done) == sorted(set(done)) and len(done) == 20
        assert counts(q, qname)["succeeded"] == 20
        print(f"\n[sqlite] claim gave up after {waited:.2f}s with "
              f"{type(raised.value).__name__}: {raised.value}")


@pytest.fixture
def fresh_queue(engine_url: str) -> Iterator[portq.Queue]:
    """A Queue on tables of its own, just created (a small table, as on a new install),
    dropped after the test."""
    q = portq.connect(engine_url, prefix=f"pqlock{uuid.uuid4().hex[:8]}_")
    q.migrate()
    try:
        yield q
    finally:
        q.backend.drop_schema()
        q.close()


def test_rows_locked_outside_are_skipped_not_waited_for(
        target: Any, fresh_queue: portq.Queue, qname: str,
        request: pytest.FixtureRequest) -> None:
    """An outside SELECT ... FOR UPDATE on 10 of 30 rows: claims take the other 20 at
    once, and the 10 after the outside transaction ends. On tables of the test's own: how
    many other rows the table holds decides MariaDB's plan, and with it the outcome."""
    _need(target.engine, SERVER_ENGINES)
    queue = fresh_queue
    if "mariadb" in queue.backend.server_info().server_version.lower():
        request.applymarker(pytest.mark.xfail(strict=True, reason=(
            "MariaDB 10.11: on a small table (a full scan is the plan) a claim whose first "
            "rows in order are locked by another transaction returns no rows at all, not "
            "the 20 unlocked ones; with a few hundred other rows (the ready index's range "
            "is the plan) it returns them. Reported to the lead; runtime code unchanged")))
    prefix = queue.backend.prefix
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(30)])
    locked = sorted(ids)[:10]
    conn = queue.backend.connect()
    try:
        with conn.cursor() as cur:
            marks = ", ".join(["%s"] * len(locked))
            cur.execute(f"SELECT job_id FROM {prefix}job WHERE job_id IN ({marks}) "
                        "FOR UPDATE", locked)
            assert len(cur.fetchall()) == 10
        started = time.monotonic()
        first = queue.claim(qname, "w-skip", limit=30, lease=30)
        took = time.monotonic() - started
        assert sorted(j.id for j in first) == sorted(ids)[10:]
        assert queue.claim(qname, "w-skip", limit=30, lease=30) == []
        assert took < 10, f"claim waited {took:.1f}s on rows locked by another transaction"
    finally:
        conn.rollback()
        conn.close()
    second = queue.claim(qname, "w-skip", limit=30, lease=30)
    assert sorted(j.id for j in second) == locked
    assert all(queue.complete(j) for j in first + second)


# ---- the worker's clock is not the lease clock ----------------------------------------------

SKEWED_WORKER = textwrap.dedent("""
    import datetime as dt, json, sys, time
    shift = float(sys.argv[4]) * 3600
    real_time = time.time
    time.time = lambda: real_time() + shift
    real_datetime = dt.datetime
    class SkewedMeta(type):     # drivers still build real datetimes: keep isinstance true
        def __instancecheck__(cls, obj):
            return isinstance(obj, real_datetime)
    class SkewedDatetime(dt.datetime, metaclass=SkewedMeta):
        @classmethod
        def now(cls, tz=None):
            return super().now(tz) + dt.timedelta(seconds=shift)
        @classmethod
        def utcnow(cls):
            return super().utcnow() + dt.timedelta(seconds=shift)
    dt.datetime = SkewedDatetime          # before portq imports it
    import portq
    from portq.worker import Worker
    url, prefix, qname = sys.argv[1:4]
    out = {"worker_clock": dt.datetime.now(dt.timezone.utc).isoformat()}
    with portq.connect(url, prefix=prefix) as q:
        q.enqueue_many([{"queue": qname, "payload": i} for i in range(5)])
        (job,) = q.claim(qname, "skewed", limit=1, lease=1)
        out["short_lease_until"] = job.claim.lease_until.isoformat()
        out["renew_live"] = q.renew(job, lease=1)
        time.sleep(2.5)                   # past the lease by the real (DB) clock
        out["renew_expired"] = q.renew(job, lease=30)
        out["complete_expired"] = q.complete(job)
        (job,) = q.claim(qname, "skewed", limit=1, lease=30)
        out["renew"] = q.renew(job, lease=30)
        out["complete"] = q.complete(job)
        w = Worker(q, qname, lambda job: None, concurrency=2, lease=1, burst=True,
                   idle_min=0.01, idle_max=0.1, prune_interval=None, reap_interval=0.5,
                   reap_delay=0)
        out["worker"] = w.run().as_dict()
        q.enqueue(qname, "held")
        (held,) = q.claim(qname, "skewed", limit=1, lease=60)
        out["held_lease_until"] = held.claim.lease_until.isoformat()
    print(json.dumps(out))
""")


@pytest.mark.parametrize("shift_hours", [-6, 9])
def test_worker_clock_skew_does_not_move_leases(engine_url: str, qname: str,
                                                queue: portq.Queue, shift_hours: int) -> None:
    """A worker whose time.time()/datetime.now() are hours off claims, renews and completes
    normally; lease_until comes from the database clock and expires by it."""
    real_start = datetime.now(UTC)
    proc = subprocess.run([sys.executable, "-c", SKEWED_WORKER, engine_url, TEST_PREFIX,
                           qname, str(shift_hours)], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    skew = datetime.fromisoformat(out["worker_clock"]) - real_start
    assert abs(skew - timedelta(hours=shift_hours)) < timedelta(minutes=5), "clock not shifted"
    slack = timedelta(minutes=2)  # far below the hours of skew
    short = datetime.fromisoformat(out["short_lease_until"])
    assert real_start <= short <= real_start + timedelta(seconds=1) + slack
    held = datetime.fromisoformat(out["held_lease_until"])
    assert real_start + timedelta(seconds=60) - slack <= held <= \
        datetime.now(UTC) + timedelta(seconds=60) + slack
    assert out["renew_live"] is True
    assert out["renew_expired"] is False and out["complete_expired"] is False
    assert out["renew"] is True and out["complete"] is True
    # the first job's lease expired by the DB clock: reaped and run again by the worker
    assert out["worker"]["succeeded"] == 4 and out["worker"]["reaped"] >= 1
    (stored,) = queue.jobs("running", queue=qname, limit=10)
    assert stored.lease_until == held
    c = counts(queue, qname)
    assert (c["succeeded"], c["running"], c["ready"]) == (5, 1, 0)
