"""Failover of a PostgreSQL primary to its streaming standby, with workers on the libpq
multi-host URL (``target_session_attrs=read-write``). Two throw-away PostgreSQL 15 clusters
(tests/pgcluster.py) on spare loopback ports; the primary is stopped ``-m immediate`` and
the standby promoted. The outcome per replication mode is the one docs/operations.md
("Failover") states:

- synchronous (``synchronous_standby_names='*'``): every committed claim is on the new
  primary; no job is lost and no (job, generation) runs twice; jobs running at the crash run
  again as their next generation after their lease.
- asynchronous with replica lag (the replication link held by a proxy): claims committed
  on the old primary are lost with it; the new primary hands those jobs out again with the
  SAME generation while the first handlers still run. What the backend does about it: every
  connection reads the server identity (system identifier, timeline) and
  ``watch_identity`` reports the change once per backend, before any statement runs on the
  new history; the worker then tells every job it holds (``job.cancelled()``, results
  fenced) and logs ``worker.history_changed`` once. This test asserts that the overlapping
  runs are exactly jobs held when the change was reported, and that each was told.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import pgcluster
import pytest
from tcpproxy import TcpProxy

import portq
from portq.conformance.helpers import wait_until
from portq.job import Job
from portq.protocol import ServerIdentity
from portq.worker import Worker

pytestmark = pytest.mark.fault
PREFIX = "portq_"


@dataclass
class Run:
    job_id: int
    generation: int
    worker: str
    start: float
    claimed: datetime | None = None  # by the database clock (the claim's lease - lease)
    end: float | None = None
    told: bool = False  # the worker told the handler (job.cancelled()) before it ended


@dataclass
class Record:
    """Every handler run and every identity change the workers' backends reported."""
    runs: list[Run] = field(default_factory=list)
    changes: list[tuple[float, ServerIdentity, ServerIdentity]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handler(self, seconds: float, worker_name: str, lease: float) -> object:
        def handle(job: Job) -> None:
            claimed = None if job.claim is None else \
                job.claim.lease_until - timedelta(seconds=lease)
            run = Run(job.id, job.attempt, worker_name, time.monotonic(), claimed)
            with self.lock:
                self.runs.append(run)
            run.told = job.wait_cancelled(seconds)  # cut short when the worker says so
            run.end = time.monotonic()
        return handle

    def same_generation_twice(self) -> list[tuple[Run, Run]]:
        seen: dict[tuple[int, int], Run] = {}
        pairs = []
        for run in sorted(self.runs, key=lambda r: r.start):
            first = seen.setdefault((run.job_id, run.generation), run)
            if first is not run:
                pairs.append((first, run))
        return pairs


class Logs(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def root() -> Iterator[Path]:
    why = pgcluster.missing()
    if why:
        pytest.skip(why)
    path = Path(tempfile.mkdtemp(prefix="portq-failover-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def logs() -> Iterator[Logs]:
    handler = Logs()
    logger = logging.getLogger("portq")
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(old)


def _url(*ports: int) -> str:
    hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
    return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write" \
           "&connect_timeout=2"


def _caught_up(primary: pgcluster.Cluster) -> bool:
    return primary.psql("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' "
                        "AND replay_lsn = pg_current_wal_lsn()") == "1"


def _no_tracebacks(logs: Logs) -> list[str]:
    """Log records with a traceback, or spanning several lines."""
    return [r.getMessage() for r in logs.records
            if r.exc_info or "Traceback" in r.getMessage() or "\n" in r.getMessage()]


Started = tuple[list[portq.Queue], list[Worker], list[threading.Thread]]


def _start_workers(urls: str, qname: str, record: Record, seconds: float, lease: float,
                   n: int = 3, first: int = 0) -> Started:
    queues, workers, threads = [], [], []
    for i in range(first, first + n):
        q = portq.connect(urls, prefix=PREFIX)
        q.backend.watch_identity(lambda old, new: record.changes.append(  # type: ignore[attr-defined]
            (time.monotonic(), old, new)))
        w = Worker(q, qname, record.handler(seconds, f"w{i}", lease), concurrency=2, lease=lease,
                   reap_interval=1.0, reap_delay=0.1, registry_interval=None,
                   prune_interval=None, grace=1)
        queues.append(q)
        workers.append(w)
        threads.append(threading.Thread(target=w.run, daemon=True, name=f"failover-w{i}"))
    for t in threads:
        t.start()
    return queues, workers, threads


def _stop(queues: list[portq.Queue], workers: list[Worker],
          threads: list[threading.Thread]) -> None:
    for w in workers:
        w.stop()
    for t in threads:
        t.join(30)
    for q in queues:
        q.close()


def test_synchronous_failover_loses_nothing_and_no_generation_runs_twice(
        root: Path, logs: Logs) -> None:
    p_port, s_port = pgcluster.spare_port(), pgcluster.spare_port()
    primary = standby = None
    record = Record()
    qname = f"fo-{uuid.uuid4().hex[:8]}"
    try:
        primary = pgcluster.make_primary(root, p_port, synchronous=True)
        standby = pgcluster.make_standby(root, primary, s_port)
        urls = _url(p_port, s_port)
        with portq.connect(urls, prefix=PREFIX) as q:
            q.migrate()
            ids = q.enqueue_many([{"queue": qname, "payload": n} for n in range(1500)])
            before = q.backend.server_identity()
        assert wait_until(lambda: _caught_up(primary), timeout=30)
        queues, workers, threads = _start_workers(urls, qname, record, 0.02, lease=3)
        try:
            assert wait_until(lambda: len(record.runs) >= 300, timeout=60)
            primary.stop("immediate")
            standby.promote()
            promoted = datetime.fromisoformat(standby.psql("SELECT now()"))

            def claimed_after() -> list[datetime]:
                return [r.claimed for r in list(record.runs)
                        if r.claimed is not None and r.claimed > promoted]
            assert wait_until(lambda: bool(claimed_after()), timeout=15)
            # the first claim the new primary granted, by its own clock
            resumed = (min(claimed_after()) - promoted).total_seconds()
            with portq.connect(urls, prefix=PREFIX) as q:
                assert wait_until(lambda: q.stats(qname)[0].succeeded == len(ids),
                                  timeout=120), q.stats(qname)
                after = q.backend.server_identity()
        finally:
            _stop(queues, workers, threads)
        assert before is not None and after is not None
        assert after.system_identifier == before.system_identifier
        assert after.timeline > before.timeline
        assert {r.job_id for r in record.runs} == set(ids)  # 0 lost
        assert record.same_generation_twice() == []  # no generation ran twice
        reruns = len(record.runs) - len(ids)
        assert reruns <= 6 * 2  # at most the jobs running at the crash (2 per worker)
        assert resumed < 5.0, f"claims resumed {resumed:.1f}s after the promote"
        assert len(record.changes) == len(queues)  # each backend reported it once
        assert _no_tracebacks(logs) == []
        warnings = [r for r in logs.records if r.levelno >= logging.WARNING]
        assert warnings  # the outage is logged
        print(f"sync: {len(ids)} jobs, {reruns} reruns, resumed {resumed:.3f}s after the "
              f"promote, {len(warnings)} WARNING lines")
    finally:
        pgcluster.destroy(primary, standby)


def test_asynchronous_failover_with_lag_reruns_claims_of_the_lost_history(
        root: Path, logs: Logs) -> None:
    p_port, s_port = pgcluster.spare_port(), pgcluster.spare_port()
    primary = standby = None
    link: TcpProxy | None = None
    record = Record()
    qname = f"fo-{uuid.uuid4().hex[:8]}"
    try:
        primary = pgcluster.make_primary(root, p_port, synchronous=False)
        link = TcpProxy(("127.0.0.1", p_port)).start()  # the replication link
        standby = pgcluster.make_standby(root, primary, s_port, via_port=link.port)
        urls = _url(p_port, s_port)
        with portq.connect(urls, prefix=PREFIX) as q:
            q.migrate()
            ids = q.enqueue_many([{"queue": qname, "payload": n} for n in range(12)])
        assert wait_until(lambda: _caught_up(primary), timeout=30)
        link.pause()  # replica lag from here on: the claims below stay on the primary
        queues, workers, threads = _start_workers(urls, qname, record, 6.0, lease=30)
        try:
            assert wait_until(lambda: len(record.runs) >= 6, timeout=30)
            time.sleep(0.5)  # the claims' commits are acknowledged to the workers
            primary.stop("immediate")
            standby.promote()
            promoted = time.monotonic()
            link.stop()
            # a worker with free capacity (another host's, a restarted one) joins: it finds
            # the lost claims' jobs ready on the new primary, as the same generation
            late = _start_workers(urls, qname, record, 6.0, lease=30, n=1, first=3)
            queues += late[0]
            workers += late[1]
            threads += late[2]
            with portq.connect(urls, prefix=PREFIX) as q:
                assert wait_until(lambda: q.stats(qname)[0].succeeded == len(ids),
                                  timeout=120), q.stats(qname)
        finally:
            _stop(queues, workers, threads)
        twice = record.same_generation_twice()
        overlapping = [(a, b) for a, b in twice if a.end is None or b.start < a.end]
        assert {r.job_id for r in record.runs} == set(ids)  # 0 lost
        # the documented hazard: jobs claimed on the lost history ran again as the same
        # generation, while their first handler was still running
        assert overlapping, "expected same-generation reruns of the lost claims"
        # what the backend reports: each worker's backend saw the history change once,
        # same cluster, a later timeline, before its first statement on the new primary
        assert len(record.changes) == len(queues) - 1  # the late one saw one history only
        for _, old, new in record.changes:
            assert new.system_identifier == old.system_identifier
            assert new.timeline > old.timeline
        reported = min(at for at, _, _ in record.changes)
        # ... and every overlapping first run started before it: the jobs held at that
        # moment are exactly what the worker must cancel (job.cancelled(), fence results)
        assert all(a.start < reported for a, _ in overlapping)
        # the worker's part: each of those first runs' handlers was told (job.cancelled())
        # when its worker's backend reported the new history, and the worker said so once
        assert all(a.told for a, _ in overlapping), [(a.job_id, a.told) for a, _ in overlapping]
        said = [r for r in logs.records if r.getMessage().startswith("worker.history_changed")]
        assert 1 <= len(said) <= len(queues) - 1
        assert _no_tracebacks(logs) == []
        print(f"async: {len(ids)} jobs, {len(twice)} same-generation reruns, "
              f"{len(overlapping)} overlapping in time; history change reported "
              f"{reported - promoted:.2f}s after the promote")
    finally:
        if link is not None:
            link.stop()
        pgcluster.destroy(primary, standby)


def test_identity_is_none_where_the_control_functions_are_refused(root: Path) -> None:
    """A role refused pg_control_system() (revoked on a throw-away cluster) still connects
    and works; ``server_identity()`` is None and the pooler check still runs."""
    primary = None
    try:
        primary = pgcluster.make_primary(root, pgcluster.spare_port(), synchronous=False)
        primary.psql("CREATE ROLE app LOGIN; GRANT CREATE ON SCHEMA public TO app; "
                     "REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC")
        with portq.connect(f"postgresql://postgres@127.0.0.1:{primary.port}/postgres") as q:
            assert q.backend.server_identity() is None  # no connection yet
            q.backend.server_info()
            assert q.backend.server_identity() is not None  # a superuser reads it
        with portq.connect(f"postgresql://app@127.0.0.1:{primary.port}/postgres",
                           prefix="app_") as q:
            q.migrate()
            job_id = q.enqueue("x", 1)
            assert q.job(job_id) is not None
            assert q.backend.server_identity() is None
            assert q.backend.behind_pooler is False
    finally:
        pgcluster.destroy(primary)
