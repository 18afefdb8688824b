"""``portq bench URL``: the scenarios run against an engine in portqb_ tables (dropped
afterwards) and the report."""

from __future__ import annotations

import contextlib
import json
import os
import platform
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import portq
from portq.bench.claims import DEFAULT_SIZES, claim_latency
from portq.bench.flow import (
    DEFAULT_BATCHES,
    DEFAULT_JOBS,
    DEFAULT_MODES,
    DEFAULT_WORKERS,
    enqueue_rates,
    pickup,
    throughput,
)
from portq.bench.table import (
    BENCH_PREFIX,
    QUEUE_COUNT,
    Progress,
    drop_tables,
    outside_transaction,
    server_version,
)
from portq.engines import engine as engine_record
from portq.errors import ConfigurationError
from portq.url import parse_url

SCENARIOS = ("claim-latency", "throughput", "enqueue", "pickup")
#: what runs when no scenario is named (pickup takes ~15 s of wall time: asked for only)
DEFAULT_SCENARIOS = ("claim-latency", "throughput", "enqueue")


def machine() -> dict[str, Any]:
    """nproc, memory, Python and OS of this machine."""
    mem = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "memory_gib": mem, "python": platform.python_version(),
            "platform": platform.platform(), "portq": portq.__version__}


def run(url: str, scenarios: Sequence[str] = DEFAULT_SCENARIOS, *, jobs: int = DEFAULT_JOBS,
        workers: Sequence[int] = DEFAULT_WORKERS, batches: Sequence[int] = DEFAULT_BATCHES,
        sizes: Sequence[tuple[int, int | None]] = DEFAULT_SIZES,
        progress: Progress | None = None, modes: Sequence[str] = DEFAULT_MODES,
        repeat: int = 1) -> dict[str, Any]:
    """Run ``scenarios`` against ``url`` in ``portqb_`` tables, dropped afterwards."""
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise ConfigurationError(f"unknown scenario(s) {unknown}; use {', '.join(SCENARIOS)}")
    parsed = parse_url(url)
    sqlite_file = parsed.path if engine_record(parsed.engine).file_based and \
        parsed.path != ":memory:" else None
    created = sqlite_file is not None and not os.path.exists(sqlite_file)
    try:
        with portq.connect(url, prefix=BENCH_PREFIX, pool_size=16) as queue:
            return _run(queue, scenarios, jobs, workers, batches, sizes, progress, modes,
                        repeat, url, vacuum=sqlite_file is not None and not created)
    finally:
        if created and sqlite_file is not None:   # the run made the file: remove it all
            for path in (sqlite_file, sqlite_file + "-wal", sqlite_file + "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)


def _run(queue: portq.Queue, scenarios: Sequence[str], jobs: int, workers: Sequence[int],
         batches: Sequence[int], sizes: Sequence[tuple[int, int | None]],
         progress: Progress | None, modes: Sequence[str], repeat: int, url: str, *,
         vacuum: bool) -> dict[str, Any]:
    backend = queue.backend
    drop_tables(backend)  # leftovers of an interrupted run
    queue.migrate()
    report: dict[str, Any] = {
        "url": queue.url, "engine": backend.engine, "version": server_version(backend),
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine()}
    try:
        if "enqueue" in scenarios:
            report["enqueue"] = enqueue_rates(queue, jobs)
        if "throughput" in scenarios:
            report["throughput"] = throughput(queue, jobs, workers, batches, progress,
                                              modes, repeat, url)
        if "claim-latency" in scenarios:
            report["claim_latency"] = claim_latency(queue, sizes)
        if "pickup" in scenarios:
            report["pickup"] = [pickup(queue)]
    finally:
        drop_tables(backend)
        if vacuum:   # an existing SQLite file gives the benchmark's pages back
            queue.close()
            outside_transaction(backend, "compact")
    return report


def parse_sizes(text: str) -> list[tuple[int, int | None]]:
    """``'1000,10000,100000/1000000'`` -> [(1000, None), (10000, None), (100000, 1000000)]."""
    sizes: list[tuple[int, int | None]] = []
    for part in text.split(","):
        ready, _, total = part.strip().partition("/")
        try:
            size = (int(ready), int(total) if total else None)
        except ValueError:
            raise ConfigurationError(f"invalid size {part!r}: use READY or READY/TOTAL") from None
        if size[0] <= 0 or (size[1] is not None and size[1] < QUEUE_COUNT * size[0]):
            raise ConfigurationError(f"invalid size {part!r}: READY > 0 and TOTAL >= "
                                     f"{QUEUE_COUNT} x READY ({QUEUE_COUNT} queues)")
        sizes.append(size)
    return sizes


def as_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, default=lambda o: asdict(o))
