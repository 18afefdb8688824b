"""A FIFO between threads that hands over a whole batch with one wake-up."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")


class Mailbox(Generic[T]):
    """A FIFO between threads that hands over a whole batch with one wake-up: the claim
    loops' jobs to the handler threads, and the handlers' completions to the ack threads.
    (``queue.Queue`` wakes a waiting thread for every item, which on short jobs costs more
    than the job.) Waiting takers are woken one at a time, each by the one before it
    (:meth:`get`): a put that woke every one of them at once made them all contend for the
    GIL with the thread that put, which on SQLite's single writer (the claim loop) cost
    a third of the no-op throughput. A taker that lingers to fill a batch is not woken by
    each new item.
    After :meth:`close`, takers get what is left, then nothing."""

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        # entered as the lock itself: a Condition's ``with`` is Python-level code, and
        # short jobs enter the mailbox twice each
        self._lock = lock = threading.Lock()
        # takers waiting for a first item, each on a lock of its own that a put releases
        # (what threading.Condition does, without its Python-level checks: a short job
        # wakes a taker, or waits as one, about once each)
        self._hungry: deque[threading.Lock] = deque()
        self._lingering = threading.Condition(lock)  # takers filling a batch
        self._fill_to: list[int] = []  # the batch size each lingering taker waits for
        self._closed = False
        #: whether a taker that leaves items behind wakes the next hungry one (a chain).
        #: Off (the runtime's choice for jobs much shorter than a wake-up), the taker
        #: that is awake takes them one after another, and :meth:`nudge` wakes another
        #: when none was taken for a while (a long job among short ones)
        self.chain = True
        self._taken_at = 0.0  # time.monotonic() of the last get

    def __len__(self) -> int:
        return len(self._items)

    def put_many(self, items: Iterable[T]) -> None:
        """Append ``items``; wake one hungry taker (it wakes the next while items are
        left), and the lingering takers once there are enough items for one's batch."""
        with self._lock:
            before = len(self._items)
            self._items.extend(items)
            if self._hungry and len(self._items) > before:
                self._hungry.popleft().release()  # that taker wakes the next (see get)
            if self._fill_to and len(self._items) >= min(self._fill_to):
                self._lingering.notify_all()

    def get(self) -> T | None:
        """The oldest item, waiting for one; None once closed and empty."""
        with self._lock:
            while not self._items:
                if self._closed:
                    return None
                self._wait_locked()
            item = self._items.popleft()
            if self._items and self._hungry:
                if self.chain:
                    self._hungry.popleft().release()  # one taker woken at a time
                else:
                    self._taken_at = time.monotonic()
            return item

    def unattended(self) -> bool:
        """Items wait while takers sleep (without the chain, the awake takers may be
        busy)."""
        return bool(self._items) and bool(self._hungry)

    def nudge(self, after: float) -> bool:
        """Wake one hungry taker if items wait and none was taken in the last ``after``
        seconds; whether one was woken."""
        with self._lock:
            if self._items and self._hungry and \
                    time.monotonic() - self._taken_at >= after:
                self._taken_at = time.monotonic()
                self._hungry.popleft().release()
                return True
            return False

    def _wait_locked(self) -> None:
        """Wait (``_lock`` held, let go meanwhile) until a put, a taker before this one or
        :meth:`close` wakes this taker."""
        waiter = threading.Lock()
        waiter.acquire()
        self._hungry.append(waiter)
        self._lock.release()
        woken = False
        try:
            waiter.acquire()
            woken = True
        finally:
            self._lock.acquire()
            if not woken and waiter in self._hungry:  # interrupted before any wake
                self._hungry.remove(waiter)

    def get_batch(self, limit: int, linger: float, fill: int | None = None) -> list[T]:
        """Wait for one item, then take up to ``limit``, waiting at most ``linger`` seconds
        in all for ``fill`` items (default ``limit``) to gather; [] once closed and
        empty."""
        fill = limit if fill is None else min(fill, limit)
        with self._lock:
            while not self._items and not self._closed:
                self._wait_locked()
            deadline = time.monotonic() + linger
            while len(self._items) < fill and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._fill_to.append(fill)
                try:
                    self._lingering.wait(left)
                finally:
                    self._fill_to.remove(fill)
            return [self._items.popleft() for _ in range(min(limit, len(self._items)))]

    def take(self, limit: int) -> list[T]:
        """Up to ``limit`` of the oldest items, without waiting."""
        with self._lock:
            return [self._items.popleft() for _ in range(min(limit, len(self._items)))]

    def take_while(self, predicate: Callable[[T], bool]) -> list[T]:
        """The oldest items, for as long as ``predicate`` holds, without waiting."""
        with self._lock:
            taken = []
            while self._items and predicate(self._items[0]):
                taken.append(self._items.popleft())
            return taken

    def drain(self) -> list[T]:
        """Everything waiting, without waiting."""
        with self._lock:
            items = list(self._items)
            self._items.clear()
            return items

    def close(self) -> None:
        """No more items will come: wake every taker (none lingers any more)."""
        with self._lock:
            self._closed = True
            while self._hungry:
                self._hungry.popleft().release()
            self._lingering.notify_all()

