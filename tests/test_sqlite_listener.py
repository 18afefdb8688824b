"""SQLite idle workers learn of new jobs from PRAGMA data_version (no table read): a job
enqueued by another connection reaches a worker in a 20 s idle sleep within milliseconds,
and a write that changes nothing does not wake it."""

from __future__ import annotations

import time
from pathlib import Path

import portq
from portq.backends.sqlite import CHECKPOINT_EVERY_S, SqliteListener
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


def _wal_bytes_after_enqueues(url: str, listen: bool) -> int:
    """Enqueue 30 jobs of 60 KB, each in its own transaction; with ``listen``, let a
    listener see each commit and, a checkpoint interval later, look again (when it
    checkpoints). The size the WAL file reached (a WAL started over is written from its
    beginning)."""
    with portq.connect(url) as q:
        q.migrate()
        listener = q.backend.listener(["q"]) if listen else None
        assert listener is None or isinstance(listener, SqliteListener)
        try:
            if listener is not None:
                assert listener.wait(0.01) is False  # the baseline
            for n in range(30):
                q.enqueue("q", {"n": n, "blob": "x" * 60_000})
                if listener is not None:
                    assert listener.wait(0.5) is True
                    time.sleep(CHECKPOINT_EVERY_S)
                    listener.wait(0.001)
        finally:
            if listener is not None:
                listener.close()
        return Path(q.backend.url.path + "-wal").stat().st_size


def test_the_listener_checkpoints_the_wal_so_writers_need_not(tmp_path: Path) -> None:
    """Without a checkpoint the 30 commits' 1.8 MB pile up in the WAL (under SQLite's
    own auto-checkpoint of 1,000 pages, 4 MB); with the listener's, each next write
    transaction starts the WAL over, which stays about one commit long."""
    alone = _wal_bytes_after_enqueues(f"sqlite:///{tmp_path / 'alone.db'}", listen=False)
    listened = _wal_bytes_after_enqueues(f"sqlite:///{tmp_path / 'listened.db'}",
                                         listen=True)
    print(f"\n[sqlite] WAL after 30 commits of 60 KB: {alone:,} bytes alone, "
          f"{listened:,} with the listener")
    assert alone > 1_800_000, alone
    assert listened < 400_000, listened
