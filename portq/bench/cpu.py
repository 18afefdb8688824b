"""CPU accounting for the benchmark's runs (Linux /proc; empty figures elsewhere): the
threads of this process, the database server's processes and the whole machine, sampled
while a run lasts, so that a result can say what bounded it: the CPU of the client or of
the server (a busy machine), one thread of the client (a thread busy all the run: a
serial loop, or Python's GIL), or neither (the run waited: round trips, commits, locks).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from portq.engines import engine as engine_record

#: how often a :class:`CpuMeter` samples its process's threads (a thread that ends loses
#: at most this much of its CPU from the per-thread figures, unless it ran a target made
#: by :meth:`CpuMeter.tracked`: a run's own threads do); the server's processes are read
#: at the start and the end only (one that ended meanwhile is counted whole, through its
#: parent's reaped children)
METER_SAMPLE_S = 0.25
#: a run whose machine was at least this busy (% of every core) was CPU-bound
CPU_BOUND_PCT = 85.0
#: a run whose client used at least this much of one core was bound by that core
CORE_BOUND_PCT = 85.0
_METER_THREAD = "portq-bench-cpu-meter"


def cpu_seconds(pid: int, thread: int | None = None, *, reaped: bool = False
                ) -> float | None:
    """User + system CPU seconds of process ``pid`` (or of its thread ``thread``) from
    /proc, or with ``reaped`` those of its children that ended and were waited for (None:
    gone, or not Linux)."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    try:
        with open(path, encoding="ascii") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    first = 13 if reaped else 11
    return (int(fields[first]) + int(fields[first + 1])) / os.sysconf("SC_CLK_TCK")


def pids_named(names: Sequence[str]) -> list[int]:
    """The pids whose command name is one of ``names`` (Linux /proc; [] elsewhere)."""
    pids = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") and names else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm", encoding="utf-8") as f:
                    if f.read().strip() in names:
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def machine_busy() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of every core since boot, from /proc/stat."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK"), sum(ticks) / os.sysconf("SC_CLK_TCK")


def meter(engine: str) -> CpuMeter:
    """A :class:`CpuMeter` of ``engine``'s server processes (none: SQLite, in-process)."""
    return CpuMeter(engine_record(engine).server_processes)


class CpuMeter:
    """Samples, every :data:`METER_SAMPLE_S` from ``with`` to its end, the CPU of this
    process's threads (by name), and reads that of the processes named ``server_names``
    at both ends; then
    :meth:`figures` gives them per job. A process or thread that began during the run
    counts from its start."""

    def __init__(self, server_names: Sequence[str]) -> None:
        self.server_names = tuple(server_names)
        self._threads: dict[int, list[Any]] = {}  # tid -> [name, cpu at start, last]
        self._lock = threading.Lock()  # around _threads: the sampler and tracked threads
        self._server: dict[int, float] = {}  # server pid at the start -> its CPU then
        self._reaped: dict[int, float] = {}  # server pid -> its reaped children's CPU, at start
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self._began = self._process = 0.0
        self._wall = self._cpu = self._server_cpu = 0.0
        self._busy: tuple[float, float] | None = None

    def _sample_threads(self, first: bool = False) -> None:
        names = {t.native_id: t.name for t in threading.enumerate()}
        me = os.getpid()
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{me}/task")]
        except OSError:
            tids = []
        for tid in tids:
            cpu = cpu_seconds(me, tid)
            if cpu is not None:
                self._note(tid, names.get(tid, f"thread {tid}"), cpu, first)

    def _note(self, tid: int, name: str, cpu: float, first: bool = False) -> None:
        """Thread ``tid``'s CPU seconds so far (``first``: at the meter's start, where
        its count begins); a reading never lowers an earlier one (a tracked thread's own
        count is finer than the kernel's ticks)."""
        with self._lock:
            entry = self._threads.get(tid)
            if entry is None:
                self._threads[tid] = [name, cpu if first else 0.0, cpu]
            else:
                entry[2] = max(entry[2], cpu)

    def tracked(self, target: Callable[[], object]) -> Callable[[], None]:
        """``target``, made to record its thread's CPU as it returns or raises: a thread
        that runs it, started after the meter's start, counts whole even when it ends
        between two samples (a SQLite run of 10,000 jobs lasts about one
        :data:`METER_SAMPLE_S`, and its busiest thread went uncounted)."""
        def run() -> None:
            try:
                target()
            finally:
                self._note(threading.get_native_id(), threading.current_thread().name,
                           time.thread_time())
        return run

    def _run(self) -> None:
        while not self._stop.wait(METER_SAMPLE_S):
            self._sample_threads()

    def __enter__(self) -> CpuMeter:
        self._busy = machine_busy()
        self._sample_threads(first=True)
        for pid in pids_named(self.server_names):
            cpu, reaped = cpu_seconds(pid), cpu_seconds(pid, reaped=True)
            if cpu is not None and reaped is not None:
                self._server[pid], self._reaped[pid] = cpu, reaped
        self._began, self._process = time.perf_counter(), time.process_time()
        self._sampler = threading.Thread(target=self._run, name=_METER_THREAD, daemon=True)
        self._sampler.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._wall = time.perf_counter() - self._began
        self._cpu = time.process_time() - self._process
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join()
        self._sample_threads()
        self._server_cpu = self._server_seconds()
        busy = machine_busy()
        if self._busy is not None and busy is not None and busy[1] > self._busy[1]:
            self._busy = (busy[0] - self._busy[0], busy[1] - self._busy[1])
        else:
            self._busy = None

    def _server_seconds(self) -> float:
        """The server's CPU over the run: what its processes alive at the end used since
        the start (or their start), plus what those that ended used in all, read from
        their parent's reaped children (PostgreSQL's postmaster waits for each backend),
        less what those had used before the start."""
        gone = 0.0
        total = 0.0
        for pid in pids_named(self.server_names):
            now = cpu_seconds(pid)
            if now is not None:
                total += now - self._server.get(pid, 0.0)
        for pid, first in self._server.items():
            if cpu_seconds(pid) is None:
                gone += first
        for pid, before in self._reaped.items():
            after = cpu_seconds(pid, reaped=True)
            if after is not None:
                total += after - before
        return max(0.0, total - gone)

    def figures(self, jobs: int) -> dict[str, Any]:
        """Per job of ``jobs`` (µs): the client's CPU (this process but the meter) and the
        server's; the machine's busy share (% of every core); the share of one core the
        client used over the run, and its busiest thread's; and :func:`cpu_bound`'s
        verdict."""
        used: dict[str, float] = {}
        meter = 0.0
        with self._lock:
            threads = [list(entry) for entry in self._threads.values()]
        for name, first, last in threads:
            if name == _METER_THREAD:
                meter += last - first
            else:
                used[name] = used.get(name, 0.0) + last - first
        busiest = max(used.items(), key=lambda kv: kv[1], default=("", 0.0))
        wall = self._wall or 1e-9
        client = max(0.0, self._cpu - meter)
        out: dict[str, Any] = {
            "client_cpu_us_per_job": round(1e6 * client / jobs, 1)
            if jobs else None,
            "server_cpu_us_per_job": round(1e6 * self._server_cpu / jobs, 1)
            if jobs and self.server_names else None,
            "machine_busy_pct": round(100 * self._busy[0] / self._busy[1], 1)
            if self._busy else None,
            "client_core_pct": round(100 * client / wall, 1),
            "busiest_thread": busiest[0] if busiest[1] > 0 else None,
            "meter_cpu_us_per_job": round(1e6 * meter / jobs, 2) if jobs else None,
            "busiest_thread_pct": round(100 * busiest[1] / wall, 1)}
        out["bound"] = cpu_bound(out)
        return out


def cpu_bound(f: dict[str, Any]) -> str:
    """What bounded a metered run, in a few words: a machine at least
    :data:`CPU_BOUND_PCT` busy was CPU-bound, by whichever of the client and the server
    used more; else a client that used :data:`CORE_BOUND_PCT` of one core was bound by one
    core (Python runs one thread at a time; SQLite writes one at a time); else it waited
    (round trips, commits, locks)."""
    busy, client, server = f.get("machine_busy_pct"), f.get("client_cpu_us_per_job"), \
        f.get("server_cpu_us_per_job")
    if busy is not None and busy >= CPU_BOUND_PCT:
        return "CPU (server)" if server is not None and client is not None and \
            server > client else "CPU (client)"
    if f.get("client_core_pct", 0.0) >= CORE_BOUND_PCT:
        return "one core (client)"
    return "waits (round trips, commits, locks)"
