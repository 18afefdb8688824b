"""SQLite idle workers learn of new jobs from PRAGMA data_version (no table read): a job
enqueued by another connection reaches a worker in a 20 s idle sleep within milliseconds,
and a write that changes nothing does not wake it."""

from __future__ import annotations

import time
from pathlib import Path

import portq
from portq.backends.sqlite import SqliteListener
from portq.conformance.helpers import quiet_worker, running, wait_until


def test_another_connections_enqueue_wakes_an_idle_worker(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'wake.db'}"
    with portq.connect(url) as worker_q, portq.connect(url) as app_q:
        worker_q.migrate()
        picked: list[float] = []
        worker = quiet_worker(worker_q, "q", lambda job: picked.append(time.monotonic()),
                              idle_min=20.0, idle_max=20.0)
        with running(worker):
            time.sleep(0.5)  # the first claim found nothing: now in a 20 s idle sleep
            latencies = []
            for n in range(5):
                enqueued = time.monotonic()
                app_q.enqueue("q", n)  # the application's own Queue: other connections
                assert wait_until(lambda n=n: len(picked) > n, timeout=5.0)
                latencies.append(picked[n] - enqueued)
                time.sleep(0.2)
        print(f"\n[sqlite] enqueue-to-handler latency with a 20 s idle sleep: "
              f"{', '.join(f'{x * 1000:.1f}' for x in latencies)} ms")
        assert max(latencies) < 1.0, latencies


def test_data_version_changes_only_for_committed_changes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'dv.db'}"
    with portq.connect(url) as q:
        q.migrate()
        listener = q.backend.listener(["q"])
        assert isinstance(listener, SqliteListener)
        try:
            assert listener.wait(0.01) is False          # first call: the baseline
            assert q.claim("q", "w", limit=5) == []      # an empty write transaction
            assert listener.wait(0.05) is False
            q.enqueue("q", 1)
            assert listener.wait(0.5) is True
            assert listener.wait(0.05) is False
        finally:
            listener.close()
