"""Signals reach a worker on a thread of their own: a SIGTERM that arrives while the main
thread holds the lock that stopping takes still stops the worker (it used to hang it: a
CI run's worker process ignored SIGTERM for 30 s with its claim loop in Event.wait)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from portq.runtime.signals import relay_signals


def test_a_signal_taken_while_the_main_thread_holds_the_lock_waits_for_it() -> None:
    """The handler that needs the lock runs once the main thread lets it go; the main
    thread was never blocked by it, and the handlers before are back afterwards."""
    lock = threading.Lock()
    seen: list[tuple[int, float]] = []
    before = signal.getsignal(signal.SIGTERM)

    def on_signal(signum: int) -> None:
        with lock:
            seen.append((signum, time.monotonic()))

    restore = relay_signals(on_signal)
    try:
        with lock:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the Python-level handler runs here, the lock held
            released = time.monotonic()
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        restore()
    assert [s for s, _ in seen] == [signal.SIGTERM]
    assert seen[0][1] >= released
    assert signal.getsignal(signal.SIGTERM) == before
    assert "portq-signals" not in {t.name for t in threading.enumerate()}


def test_signals_are_relayed_in_order() -> None:
    seen: list[int] = []
    restore = relay_signals(seen.append, (signal.SIGUSR1, signal.SIGUSR2))
    try:
        for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGUSR1):
            os.kill(os.getpid(), s)
        deadline = time.monotonic() + 10
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        restore()
    assert seen == [signal.SIGUSR1, signal.SIGUSR2, signal.SIGUSR1]


def test_sigterm_stops_a_worker_whose_main_thread_holds_its_wake_lock(tmp_path: Path
                                                                      ) -> None:
    """A real Worker's handlers, a SIGTERM while its main thread holds the lock of the
    event the claim loop sleeps on (what Event.wait holds between its wake-up and its
    return): the worker is told to stop once the lock is let go. In a child process, so
    that a hang fails the test instead of the suite."""
    script = textwrap.dedent(f"""
        import logging, os, signal, time
        logging.basicConfig(level=logging.INFO)
        import portq
        q = portq.connect("sqlite:///{tmp_path / 'q.db'}")
        q.migrate()
        w = portq.Worker(q, "signals", lambda job: None, install_signals=True)
        restore = w._install_signal_handlers()
        with w.runtime._wake._cond:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
        assert w.runtime._stopping.wait(10), "not stopped"
        restore()
        print("stopped")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == "stopped", out.stderr[-2000:]
    assert "worker.stopping" in out.stderr and "signal=SIGTERM" in out.stderr
