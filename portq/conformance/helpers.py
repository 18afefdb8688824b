"""Small helpers shared by the conformance tests (no database fakes: real engines only)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, cast

import portq
from portq.aio import AsyncQueue, AsyncWorker
from portq.backends.contract import ErrorKind
from portq.conformance import NOT_APPLICABLE
from portq.job import Claim, Job
from portq.runtime.counters import WorkerCounters
from portq.runtime.front import WorkerFront
from portq.worker import Worker


def not_applicable(reason: str) -> NoReturn:
    """Skip a test that does not apply to the engine under test (not a missing server or
    driver: those are skips, which a conformance run must not have)."""
    import pytest
    pytest.skip(NOT_APPLICABLE + reason)


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0,
               interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def exit_code(proc: subprocess.Popen[bytes], log: Path, timeout: float) -> int:
    """``proc``'s exit code once it exits within ``timeout`` seconds. A ``portq worker``
    process that does not is asked for its threads' stacks (SIGUSR1, which the CLI turns
    into a dump on stderr) and the test fails with the tail of ``log``, stacks included."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        usr1 = getattr(signal, "SIGUSR1", None)
        if usr1 is not None:
            proc.send_signal(usr1)
            time.sleep(1.0)
        raise AssertionError(f"worker process {proc.pid} did not exit within {timeout:g}s; "
                             f"its log, thread stacks last:\n{log.read_text()[-6000:]}"
                             ) from None


def counts(queue: portq.Queue, qname: str) -> dict[str, Any]:
    """The stats of one queue as a dict (zeros when the queue has no rows)."""
    for s in queue.stats(qname):
        return s.as_dict()
    return {"queue": qname, "ready": 0, "scheduled": 0, "running": 0, "succeeded": 0,
            "dead": 0, "cancelled": 0, "oldest_ready_age_s": None, "failed_1h": 0,
            "succeeded_1h": 0, "retry_rate": None}


def raw_update(queue: portq.Queue, sql: str, params: dict[str, Any]) -> ErrorKind | None:
    """Run one raw statement on the test table; return the error kind it raised, if any."""
    backend = queue.backend
    sql = sql.replace("portq_", backend.prefix)
    try:
        with backend.transaction() as cur:
            backend.execute(cur, sql, params)
    except Exception as exc:  # noqa: BLE001 - the test inspects what the engine said
        return backend.classify(exc)
    return None


OTHER_OWNER = "another-worker:1:0"


def take_away(queue: portq.Queue, job_id: int) -> None:
    """Hand a running job to another (made-up) worker, its lease left as it is: its owner
    has lost it (an operator's cancel is not a loss: see test_cancel.py)."""
    assert raw_update(queue, "UPDATE portq_job SET worker_id = :other WHERE job_id = :job_id",
                      {"other": OTHER_OWNER, "job_id": job_id}) is None


def free_port() -> int:
    """A TCP port of 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_portq(*args: str, env: Mapping[str, str | None] | None = None,
              cwd: Path | None = None, check: bool = True,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the real ``portq`` command in a subprocess. ``env`` overrides this process's
    environment (a None value removes the variable); ``check`` fails on a non-zero exit."""
    environ = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    proc = subprocess.run([sys.executable, "-m", "portq.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=environ, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"portq {args} exited {proc.returncode}: {proc.stderr}")
    return proc


#: the front quiet_worker builds (the plugin's ``worker_front`` fixture sets it)
FRONT = "Worker"


class ThreadDrivenAsyncWorker(AsyncWorker):
    """The asyncio front as the suite drives a worker: :meth:`run` blocks the calling
    thread, running the worker on an event loop of its own, as ``Worker.run`` does."""

    def run(self) -> WorkerCounters:  # type: ignore[override]
        return asyncio.run(AsyncWorker.run(self))


def quiet_worker(queue: portq.Queue, names: Sequence[str] | str,
                 handler: Callable[[Job], Any], **options: Any) -> Worker:
    """A worker of the front under test (:data:`FRONT`) with maintenance off unless asked
    for (tests share one database)."""
    options.setdefault("reap_interval", None)
    options.setdefault("prune_interval", None)
    with warnings.catch_warnings():
        # the suite still checks the deprecated sizes (prefetch, claimers, ack_delay) it
        # passes on purpose; their warning is tested in tests/test_bad_input.py
        warnings.simplefilter("ignore", DeprecationWarning)
        if FRONT == "AsyncWorker":
            driven = ThreadDrivenAsyncWorker(AsyncQueue(queue), names, handler, **options)
            return cast(Worker, driven)  # the same attributes and a blocking run()
        return Worker(queue, names, handler, **options)


@contextmanager
def running(worker: Worker) -> Iterator[Worker]:
    """Run ``worker`` on a thread for the duration of the block; stop and join it after."""
    thread = threading.Thread(target=worker.run, name="portq-test-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(worker.grace + 30)
        assert not thread.is_alive(), "worker did not stop"


class PeakHandler:
    """A handler that sleeps ``seconds`` per job and records the most handlers that ran at
    once (``most``) and the queue of each job in the order they started (``order``)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.active = self.most = 0
        self.order: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, job: Job) -> None:
        with self._lock:
            self.active += 1
            self.most = max(self.most, self.active)
            self.order.append(job.queue)
        time.sleep(self.seconds)
        with self._lock:
            self.active -= 1


@contextmanager
def claim_sizes(queue: portq.Queue) -> Iterator[list[int]]:
    """How many jobs each ``queue.claim`` made while inside returned (the worker's own
    claims, through the real backend)."""
    sizes: list[int] = []
    claim = queue.claim

    def counted(*args: Any, **kwargs: Any) -> list[Job]:
        jobs = claim(*args, **kwargs)
        sizes.append(len(jobs))
        return jobs
    queue.claim = counted  # type: ignore[method-assign]
    try:
        yield sizes
    finally:
        del queue.claim


@contextmanager
def completion_sizes(queue: portq.Queue) -> Iterator[list[int]]:
    """How many jobs each ``queue.complete_many`` was given while inside (the worker's
    own completion statements, through the real backend)."""
    sizes: list[int] = []
    complete_many = queue.complete_many

    def counted(jobs: Sequence[Job | Claim]) -> list[bool]:
        sizes.append(len(jobs))
        return complete_many(jobs)
    queue.complete_many = counted  # type: ignore[method-assign]
    try:
        yield sizes
    finally:
        del queue.complete_many


def wait_for_succeeded(queue: portq.Queue, names: Sequence[str], n: int,
                       timeout: float) -> tuple[bool, int]:
    """Poll (every 5 ms) until the queues ``names`` hold ``n`` succeeded jobs: whether they
    did within ``timeout``, and the most jobs the database showed running meanwhile."""
    most_running = 0

    def finished() -> bool:
        nonlocal most_running
        stats = [s for s in queue.stats() if s.queue in names]
        most_running = max([most_running, *(s.running for s in stats)])
        return sum(s.succeeded for s in stats) == n
    return wait_until(finished, timeout=timeout, interval=0.005), most_running


def stopped_counters(log_text: str) -> dict[str, int]:
    """The counters of a worker's last ``worker.stopped`` log line (``claimed=3 ...``)."""
    lines = [line for line in log_text.splitlines() if "worker.stopped" in line]
    assert lines, f"no worker.stopped line in:\n{log_text[-2000:]}"
    return {k: int(v) for k, v in re.findall(r"\b(\w+)=(\d+)\b", lines[-1])}


def on_own_connections(engine_url: str, prefix: str, n: int,
                       fn: Callable[[portq.Queue, int], None]) -> None:
    """Run ``fn(queue, i)`` in ``n`` threads at once, each on a Queue (pool) of its own on
    the tables of ``prefix``, released together by a barrier; re-raise the first error any
    of them raised."""
    queues = [portq.connect(engine_url, prefix=prefix) for _ in range(n)]
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def run(q: portq.Queue, i: int) -> None:
        try:
            barrier.wait(30)
            fn(q, i)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(q, i)) for i, q in enumerate(queues)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        for q in queues:
            q.close()
    if errors:
        raise errors[0]


def _enqueue_keys(engine_url: str, prefix: str, qname: str, keys: int, barrier: Any,
                  out: Any) -> None:
    """One process of :func:`enqueue_keys_in_processes` (module level: spawned by name)."""
    queue = portq.connect(engine_url, prefix=prefix)
    try:
        barrier.wait(60)
        results = []
        for k in range(keys):
            result = queue.enqueue_result(qname, {"pid": os.getpid()}, key=f"{qname}-{k}")
            results.append((k, result.id, result.created))
        out.put(results)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as text
        out.put(f"{type(exc).__name__}: {exc}")
    finally:
        queue.close()


def enqueue_keys_in_processes(engine_url: str, prefix: str, qname: str, processes: int,
                              keys: int, timeout: float = 240
                              ) -> list[list[tuple[int, int, bool]]]:
    """``processes`` processes, released together, each enqueue the same ``keys`` keys
    (``{qname}-0`` ...) in the same order, each in its own transaction; every process's
    ``(key number, job id, created)`` list."""
    import multiprocessing
    import queue as queue_module
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(processes), ctx.Queue()
    procs = [ctx.Process(target=_enqueue_keys, args=(engine_url, prefix, qname, keys,
                                                     barrier, out), daemon=True)
             for _ in range(processes)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    results: list[list[tuple[int, int, bool]]] = []
    try:
        for _ in procs:
            try:
                got = out.get(timeout=max(1.0, deadline - time.monotonic()))
            except queue_module.Empty:
                raise AssertionError(f"{processes} enqueuing processes did not finish "
                                     f"within {timeout:.0f} s") from None
            if isinstance(got, str):
                raise AssertionError(f"an enqueuing process failed: {got}")
            results.append(got)
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
    return results


class RenewalRace:
    """Makes the heartbeat's race with a job's own outcome certain: after each outcome
    write (``complete_many``, ``fail``) of ``worker``'s queue, the writer, once it has let
    go of its lock on writes to its own rows (which the heartbeat's renewal takes too),
    waits until a renewal of one of the written jobs, made after the write, was refused;
    only then does it go on to its write's results. ``before_write(jobs)`` runs first
    (e.g. an operator cancelling them). Use as a context manager; the queue and the
    worker are restored after."""

    PATCHED = ("complete_many", "fail", "renew", "renew_many")

    def __init__(self, worker: WorkerFront,
                 before_write: Callable[[Sequence[Job]], None] = lambda jobs: None) -> None:
        self.worker, self.before_write = worker, before_write
        self.queue = worker.runtime.queue
        self.written: set[tuple[int, int]] = set()  # (job id, generation)
        self.refused: set[tuple[int, int]] = set()
        self.timeouts = 0
        self._pending: dict[int, set[tuple[int, int]]] = {}  # written, by writing thread
        self._row_writes = worker.runtime._row_writes

    def _wrote(self, jobs: Sequence[Job]) -> None:
        tokens = {(j.id, j.attempt) for j in jobs}
        self.written |= tokens
        self._pending[threading.get_ident()] = tokens

    def __enter__(self) -> RenewalRace:
        complete_many, fail, renew, renew_many = (
            self.queue.complete_many, self.queue.fail, self.queue.renew, self.queue.renew_many)

        def racing_complete_many(jobs: Sequence[Job]) -> list[bool]:
            self.before_write(jobs)
            results = complete_many(jobs)
            self._wrote(jobs)
            return results

        def racing_fail(job: Job, error: str, *, retry_in: float | None = None) -> bool:
            self.before_write([job])
            ok = fail(job, error, retry_in=retry_in)
            self._wrote([job])
            return ok

        def watched_renew(job: Job, lease: float = 30.0) -> bool:
            ok = renew(job, lease=lease)
            if not ok and (job.id, job.attempt) in self.written:
                self.refused.add((job.id, job.attempt))
            return ok

        def watched_renew_many(jobs: Sequence[Job], lease: float = 30.0) -> list[bool]:
            results = renew_many(jobs, lease=lease)  # the heartbeat's tick
            for job, ok in zip(jobs, results, strict=True):
                if not ok and (job.id, job.attempt) in self.written:
                    self.refused.add((job.id, job.attempt))
            return results

        self.queue.complete_many = racing_complete_many  # type: ignore[method-assign,assignment]
        self.queue.fail = racing_fail  # type: ignore[method-assign,assignment]
        self.queue.renew = watched_renew  # type: ignore[method-assign,assignment]
        self.queue.renew_many = watched_renew_many  # type: ignore[method-assign,assignment]
        self.worker.runtime._row_writes = _ThenWaitForRefusal(self)  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        self.worker.runtime._row_writes = self._row_writes
        for name in self.PATCHED:
            delattr(self.queue, name)


class _ThenWaitForRefusal:
    """The worker's lock on writes to its own rows (:class:`RenewalRace`): a thread that
    wrote one of the race's outcomes lets go of it, then waits for a refused renewal."""

    def __init__(self, race: RenewalRace) -> None:
        self.race = race

    def __enter__(self) -> None:
        self.race._row_writes.acquire()

    def __exit__(self, *exc: object) -> None:
        self.race._row_writes.release()
        tokens = self.race._pending.pop(threading.get_ident(), None)
        if tokens and not wait_until(lambda: bool(tokens & self.race.refused), timeout=10,
                                     interval=0.005):
            self.race.timeouts += 1
