"""Signals handed to a thread of their own.

A Python signal handler runs on the main thread between two of its bytecodes, wherever
that thread is: inside ``threading.Event.wait`` it may hold the event's lock, and a
handler that sets the same event (a worker's stop) waits for that lock for ever. A worker
whose main thread ran its claim loop hung that way on SIGTERM. The handler installed
here only writes the signal's number to a pipe; a thread reads it and does the work.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Sequence
from types import FrameType

#: what the relay's pipe carries to end its thread (no signal has number 0)
_END = b"\0"


def relay_signals(on_signal: Callable[[int], None],
                  signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT),
                  name: str = "portq-signals") -> Callable[[], None]:
    """Handle ``signals`` by calling ``on_signal(signum)`` on a daemon thread ``name``,
    in the order they came; what restores the handlers before and ends that thread. Call
    it on the main thread (only it may install signal handlers)."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def handler(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(BlockingIOError):  # a full pipe holds signals enough
            os.write(write_end, bytes([signum]))

    def relay() -> None:
        while True:
            for signum in os.read(read_end, 64):
                if signum == _END[0]:
                    return
                on_signal(signum)

    thread = threading.Thread(target=relay, name=name, daemon=True)
    thread.start()
    previous = {s: signal.signal(s, handler) for s in signals}

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)
        os.set_blocking(write_end, True)
        os.write(write_end, _END)
        thread.join()
        os.close(read_end)
        os.close(write_end)
    return restore
