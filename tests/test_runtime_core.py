"""The runtime core driven by an executor whose handler slots never take a job (a front
whose threads died): it must notice that everything it claims is given back unstarted and
stop claiming, instead of claiming and giving back without end (each claim a new
generation)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

import portq
from portq.conformance.helpers import claim_sizes, counts
from portq.job import Job
from portq.runtime.core import FUTILE_GIVE_BACKS, Runtime
from portq.runtime.options import WorkerOptions, settle
from portq.runtime.writer import WRITE_LINGER_S


class DeadSlots:
    """An executor whose handler slots never serve the waiting line."""

    def start(self, runtime: Runtime) -> None: ...
    def jobs_waiting(self) -> None: ...
    def timed_out(self, job: Job) -> None: ...
    def abandon(self, job: Job) -> bool:
        return False
    def cancel_running(self) -> None: ...
    def close(self) -> None: ...


def test_claims_that_are_never_started_stop_the_claiming(
        queue: portq.Queue, qname: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="portq.worker")
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(3)])
    options = WorkerOptions(concurrency=1, lease=1.0, idle_min=0.01, idle_max=0.05,
                            reap_interval=None, prune_interval=None, grace=0)
    runtime = Runtime(queue, [qname], lambda job: None, settle(options, queue.backend),
                      worker_id="dead-slots:1:0")
    thread = threading.Thread(target=runtime.run, args=(DeadSlots(),), daemon=True)
    thread.start()
    try:
        time.sleep(3.0)  # 30 look-ahead bounds (0.1 s of the 1 s lease)
        released = runtime.counters.released
    finally:
        runtime.stop()
        thread.join(30)
    # FUTILE_GIVE_BACKS at once, then at most one claim a lease (1 s): never without end
    assert FUTILE_GIVE_BACKS <= released <= FUTILE_GIVE_BACKS + 3, released
    stalled = [r for r in caplog.records if r.getMessage().startswith("worker.stalled")]
    assert len(stalled) == 1
    # each give-back kept the attempt: nothing ran, so no job may be closer to dead
    records = [queue.job(i) for i in ids]
    assert all(r is not None and r.state == "ready" for r in records)
    assert counts(queue, qname)["ready"] == 3


def test_next_lease_expiry_reads_the_earliest_running_lease(queue: portq.Queue,
                                                              qname: str) -> None:
    """The reaper's schedule: milliseconds to the earliest running lease by the database
    clock, negative once expired, None when nothing runs (on this suite's table, other
    tests' leases may be earlier: the value is at most this test's)."""
    before = queue.backend.next_lease_expiry_ms()
    queue.enqueue(qname, "x")
    [job] = queue.claim(qname, "lease-reader:1:0", limit=1, lease=5.0)
    ms = queue.backend.next_lease_expiry_ms()
    assert ms is not None and ms <= 5000
    if before is None:
        assert 4000 <= ms <= 5000, ms
    assert queue.complete(job)


def test_a_workers_connections_are_bounded_and_kept_alive(queue: portq.Queue,
                                                           qname: str) -> None:
    """While a worker runs, each statement of its queue's connections is bounded
    server-side (its lease, at least 5 s), and their sockets probe a vanished server (TCP
    keepalives), read from the connections themselves; the bound goes when it stops."""
    backend = queue.backend
    seen: list[int] = []
    worker = portq.Worker(queue, qname, lambda job: seen.append(
        backend.statement_timeout_ms), lease=12, burst=True, reap_interval=None,
        prune_interval=None)
    queue.enqueue(qname, "x")
    backend.pool.release(backend.pool.acquire())
    before = {id(c) for c in backend.pool._idle}
    worker.run()
    assert seen == [None if backend.engine == "sqlite" else 12000]
    assert backend.statement_timeout_ms is None
    # the bound came and went on the pooled connections themselves: none was closed
    assert before <= {id(c) for c in backend.pool._idle}
    again = backend.pool.acquire()
    try:
        if backend.engine in ("postgres", "mysql"):
            cur = again.cursor()
            cur.execute("SHOW statement_timeout" if backend.engine == "postgres" else
                        "SELECT @@SESSION.innodb_lock_wait_timeout")
            lifted = cur.fetchone()[0]
            cur.close()
            again.rollback()
            assert str(lifted) in ("0", "50"), lifted  # no limit / InnoDB's default
    finally:
        backend.pool.release(again)
    backend.bound_statements(12000)
    conn = backend.pool.acquire()
    try:
        cur = conn.cursor()
        if backend.engine == "postgres":
            cur.execute("SHOW statement_timeout")
            assert cur.fetchone()[0] == "12s"
            cur.execute("SHOW lock_timeout")
            assert cur.fetchone()[0] == "6s"
            params = conn.info.get_parameters()
            assert params["keepalives"] == "1" and params["keepalives_idle"] == "30"
        elif backend.engine == "mysql":
            import socket
            cur.execute("SELECT @@SESSION.innodb_lock_wait_timeout")
            assert int(cur.fetchone()[0]) == 12
            assert conn._sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
            assert conn._sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 30
        cur.close()
        conn.rollback()
    finally:
        backend.pool.release(conn)
        backend.bound_statements(None)  # the suite's other tests share this queue


@pytest.mark.parametrize("front", ["Worker", "AsyncWorker"])
def test_both_fronts_take_the_same_options_defaults_and_errors(
        queue: portq.Queue, qname: str, front: str) -> None:
    """One options object: the same defaults, the same refusals (one ConfigurationError
    naming the option), the same warning for the deprecated sizes, on both fronts."""
    from portq import aio
    from portq.errors import ConfigurationError

    def make(**options: object) -> portq.Worker | aio.AsyncWorker:
        if front == "AsyncWorker":
            return aio.AsyncWorker(aio.AsyncQueue(queue), qname, lambda job: None, **options)
        return portq.Worker(queue, qname, lambda job: None, **options)

    worker = make()
    assert (worker.concurrency, worker.lease, worker.grace) == (4, 30.0, 30.0)
    assert worker.settings.job_timeout is None and worker.burst is False
    with pytest.raises(ConfigurationError, match=r"unknown option.*concurency"):
        make(concurency=3)
    with pytest.raises(ConfigurationError, match="concurrency"):
        make(concurrency=0)
    with pytest.raises(ConfigurationError, match="job_timeout"):
        make(job_timeout="soon")
    with pytest.raises(ConfigurationError, match="at least one queue"):
        (aio.AsyncWorker(aio.AsyncQueue(queue), [], print) if front == "AsyncWorker"
         else portq.Worker(queue, [], print))
    with pytest.warns(DeprecationWarning, match="prefetch, claimers: deprecated"):
        make(prefetch=2, claimers=2)


def test_a_retry_claimed_again_while_its_failure_is_being_written_gets_its_outcome(
        queue: portq.Queue, qname: str) -> None:
    """A failed attempt retried at once can be claimed again by the same worker before its
    writer has let go of the first attempt (here the failure's write lingers after it
    committed): the second attempt's outcome is its own, written, never taken for the
    first's and dropped (the job then stayed running while the worker lived)."""
    if queue.backend.single_writer:
        pytest.skip("one writer claims and writes in turn: a claim cannot overtake a write")
    job_id = queue.enqueue(qname, "x", max_attempts=5)
    failed = threading.Event()
    fail = queue.fail

    def lingering_fail(*args: object, **kwargs: object) -> bool:
        ok = fail(*args, **kwargs)  # type: ignore[arg-type]
        failed.set()
        time.sleep(0.5)  # committed; the writer still holds the first attempt meanwhile
        return ok

    queue.fail = lingering_fail  # type: ignore[method-assign]
    seen: list[int] = []

    def handler(job: Job) -> None:
        seen.append(job.attempt)
        if job.attempt == 1:
            raise RuntimeError("first attempt fails; its retry is due at once")

    worker = portq.Worker(queue, qname, handler, concurrency=2, lease=30, idle_min=0.01,
                          idle_max=0.02, backoff=portq.Backoff("fixed", 0.0),
                          reap_interval=None, prune_interval=None)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and worker.counters.succeeded < 1:
            time.sleep(0.02)
        record = queue.job(job_id)
        assert failed.is_set() and seen[:2] == [1, 2], seen
        assert record is not None and (record.state, record.attempts) == ("succeeded", 2), \
            (record and record.state, worker.counters)
    finally:
        worker.stop()
        thread.join(30)
        del queue.fail


def test_a_shutdown_gives_back_its_unstarted_jobs_in_one_transaction(
        queue: portq.Queue, qname: str) -> None:
    """Jobs claimed ahead and never started go back to ready at the shutdown in one
    ``release_many`` (one commit, one take of SQLite's write lock), not one transaction
    per job; each keeps its attempt."""
    total = 24
    ids = queue.enqueue_many([{"queue": qname, "payload": i} for i in range(total)])
    options = WorkerOptions(concurrency=4, prefetch=20, lease=60, idle_min=0.01,
                            idle_max=0.05, reap_interval=None, prune_interval=None, grace=0)
    runtime = Runtime(queue, [qname], lambda job: None, settle(options, queue.backend),
                      worker_id="dead-slots:2:0")
    calls: list[int] = []
    release_many = queue.release_many

    def counted(jobs: list[Job]) -> list[bool]:
        calls.append(len(jobs))
        return release_many(jobs)
    queue.release_many = counted  # type: ignore[method-assign,assignment]
    thread = threading.Thread(target=runtime.run, args=(DeadSlots(),), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while runtime.counters.claimed < total and time.monotonic() < deadline:
            time.sleep(0.01)
        assert runtime.counters.claimed == total, runtime.counters
    finally:
        runtime.stop()
        thread.join(30)
        del queue.release_many
    assert calls == [total]
    assert runtime.counters.released == total
    records = [queue.job(i) for i in ids]
    assert all(r is not None and r.state == "ready" and r.max_attempts == 26
               for r in records), records


def burst_sleeps(queue: portq.Queue, qname: str, handler: Any, *,
                 writing_only: bool = False) -> list[float]:
    """The sleeps a burst runtime's main claim loop asked for while it held jobs, for one
    job run by ``handler`` (two slots: one stays free, so the loop keeps looking); with
    ``writing_only``, only those while the job's outcome was being written (its handler
    had returned)."""
    from portq.runtime.threaded import ThreadExecutor
    queue.enqueue(qname, "one")
    options = WorkerOptions(concurrency=2, burst=True, lease=30, idle_min=0.01, idle_max=5,
                            reap_interval=None, prune_interval=None)
    runtime = Runtime(queue, [qname], handler, settle(options, queue.backend),
                      worker_id="burst-end:1:0")
    main = threading.current_thread()
    sleeps: list[float] = []
    sleep = runtime._sleep

    def recorded(seconds: float) -> None:
        if threading.current_thread() is main and not runtime._idle() and \
                not (writing_only and runtime._busy):
            sleeps.append(seconds)
        sleep(seconds)
    runtime._sleep = recorded  # type: ignore[method-assign]
    assert runtime.run(ThreadExecutor(2)).succeeded == 1
    return sleeps


def test_a_burst_waiting_only_for_its_last_writes_looks_again_within_idle_min(
        queue: portq.Queue, qname: str) -> None:
    """With ``burst``, once nothing is left to claim and no handler runs, only the writes
    of the worker's last outcomes keep it from exiting: its main claim loop looks again
    within ``idle_min`` (not after the idle sleep that doubles each empty round), so it
    exits within about ``idle_min`` of its last write. Here that write takes 0.6 s. Only
    the sleeps after the handler returned count: on a loaded machine the handler thread
    may take longer than ``idle_min`` to start the job, and while a job waits for its
    handler the loop backs off as usual."""
    complete_many = queue.complete_many

    def slow_write(jobs: list[Job]) -> list[bool]:
        time.sleep(0.6)
        return complete_many(jobs)
    queue.complete_many = slow_write  # type: ignore[method-assign,assignment]
    try:
        sleeps = burst_sleeps(queue, qname, lambda job: None, writing_only=True)
    finally:
        del queue.complete_many
    if queue.backend.capabilities.single_writer:
        # the main claim loop is the writer itself: it writes, then exits, with no sleep
        assert sleeps == [], sleeps
        return
    assert len(sleeps) >= 5, sleeps
    assert max(sleeps) <= 0.01, sleeps


def test_a_burst_waiting_for_a_running_handler_backs_off_as_when_idle(
        queue: portq.Queue, qname: str) -> None:
    """While one of its handlers runs (a long job), a burst worker with nothing to claim
    backs off as an idle one does (sleeps growing towards ``idle_max``), not polling at
    ``idle_min`` for the whole job."""
    sleeps = burst_sleeps(queue, qname, lambda job: time.sleep(0.6))
    assert max(sleeps) > 0.05, sleeps


def test_a_burst_exits_on_its_first_drained_probe_beside_other_loops_empty_claims(
        queue: portq.Queue, qname: str) -> None:
    """The other claim loops, woken by the same last write, claim beside the main loop's
    exit test. A claim of theirs that overlaps the probe and comes back empty holds
    nothing: the first probe that finds the queues drained ends the burst (it was
    discarded for any claim begun meanwhile, and the exit came an idle round later)."""
    from portq.runtime.threaded import ThreadExecutor
    if queue.backend.capabilities.single_writer:
        pytest.skip("one claim loop on a single-writer engine (SQLite): nothing overlaps")
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(8)])
    # a fixed prefetch: the other loops claim whenever slots are free (no look-ahead
    # needed), so that they claim, slowly, around every probe
    options = WorkerOptions(concurrency=4, claimers=4, prefetch=4, burst=True, lease=30,
                            idle_min=0.3, idle_max=0.3, reap_interval=None,
                            prune_interval=None)
    runtime = Runtime(queue, [qname], lambda job: None, settle(options, queue.backend),
                      worker_id="burst-end:2:0")
    main = threading.current_thread()
    claim = queue.claim

    def slow_elsewhere(*args: Any, **kwargs: Any) -> list[Job]:
        if threading.current_thread() is not main:
            time.sleep(0.05)
        return claim(*args, **kwargs)
    probes: list[bool] = []
    beside: list[bool] = []
    drained = runtime._drained

    def recorded() -> bool:
        if not beside:  # the first probe waits for another loop's claim to be on its way
            deadline = time.monotonic() + 2
            while not runtime._claiming and time.monotonic() < deadline:
                time.sleep(0.002)
            beside.append(runtime._claiming > 0)
        probes.append(drained())
        return probes[-1]
    queue.claim = slow_elsewhere  # type: ignore[method-assign]
    runtime._drained = recorded  # type: ignore[method-assign]
    try:
        assert runtime.run(ThreadExecutor(4)).succeeded == 8
    finally:
        del queue.claim
    assert beside == [True], "no other loop's claim was on its way beside the first probe"
    assert probes.count(True) == 1 and probes[-1], probes


def test_a_single_writer_worker_claims_a_batch_of_four_loops(
        queue: portq.Queue, qname: str) -> None:
    """SQLite's worker (one claim loop, which writes the outcomes too) claims up to 80 jobs
    at a time with ``concurrency`` 4 and no ``batch``; elsewhere 20 a claim loop."""
    from portq.worker import Worker
    single = queue.backend.capabilities.single_writer
    queue.enqueue_many([{"queue": qname, "payload": i} for i in range(400)])
    worker = Worker(queue, qname, lambda job: None, concurrency=4, burst=True,
                    idle_min=0.01, idle_max=0.05, registry_interval=None)
    assert worker.runtime.claim_batch == (80 if single else 20)
    with claim_sizes(queue) as sizes:
        assert worker.run().succeeded == 400
    assert max(sizes) <= worker.runtime.claim_batch, sizes
    if single:
        assert max(sizes) > 20, sizes


def test_the_writer_waits_for_a_batch_only_where_one_gathers_and_no_slot_waits(
        queue: portq.Queue, qname: str) -> None:
    """How long the writer waits for a batch once an outcome waits (``_linger``): a
    claim's worth of run time, at most half the slots' worth and at most
    ``WRITE_LINGER_S``; none for short jobs (a batch fills while the last one is
    written), none for few slots of long jobs (nothing would gather), none where waiting
    outcomes hold slots (a single writer, SQLite), and the deprecated ``ack_delay`` when
    it is given."""
    def linger(concurrency: int, job_s: float | None, **extra: Any) -> float:
        options = WorkerOptions(concurrency=concurrency, reap_interval=None,
                                prune_interval=None, **extra)
        runtime = Runtime(queue, [qname], lambda job: None, settle(options, queue.backend),
                          worker_id="linger:1:0")
        if job_s is not None:
            runtime.lookahead.job_ran(job_s)
        return runtime._linger()

    if queue.backend.capabilities.single_writer:
        assert linger(40, 0.005) == 0.0  # its outcomes hold their slots: written at once
        return
    assert linger(40, None) == 0.0  # nothing known yet
    # 40 slots of 5 ms jobs: 20 of them (half the slots) finish in 2.5 ms
    assert linger(40, 0.005) == pytest.approx(0.0025)
    assert linger(40, 0.02) == WRITE_LINGER_S  # 10 ms for 20: capped
    assert linger(4, 0.00001) == 0.0  # no-op jobs: 20 finish in 50 µs
    assert linger(4, 1.0) == 0.0  # 2 more take 0.5 s: nothing to gather
    assert linger(40, 0.005, ack_delay=0.05) == 0.05
