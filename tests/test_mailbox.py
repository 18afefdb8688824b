"""The worker's Mailbox: batches handed between threads, lingering takers, close."""

from __future__ import annotations

import threading
import time

from portq.worker import Mailbox


def start_takers(box: Mailbox[int], n: int, got: list[int | None]) -> list[threading.Thread]:
    """``n`` threads each taking one item into ``got``, waiting (given 50 ms to)."""
    takers = [threading.Thread(target=lambda: got.append(box.get())) for _ in range(n)]
    for t in takers:
        t.start()
    time.sleep(0.05)
    return takers


def test_items_come_out_in_order_in_batches_up_to_the_limit() -> None:
    box: Mailbox[int] = Mailbox()
    box.put_many(range(5))
    assert box.get_batch(3, 0.0) == [0, 1, 2]
    assert box.get() == 3
    assert box.drain() == [4]
    assert box.drain() == []


def test_a_waiting_taker_is_woken_by_a_put_from_another_thread() -> None:
    box: Mailbox[str] = Mailbox()
    got: list[str | None] = []
    taker = threading.Thread(target=lambda: got.append(box.get()))
    taker.start()
    time.sleep(0.05)
    assert taker.is_alive(), "get() returned before anything was put"
    box.put_many(["job"])
    taker.join(5)
    assert got == ["job"]


def test_every_waiting_taker_gets_one_of_a_batch() -> None:
    box: Mailbox[int] = Mailbox()
    got: list[int | None] = []
    takers = start_takers(box, 3, got)
    box.put_many([1, 2, 3])
    for t in takers:
        t.join(5)
    assert sorted(x for x in got if x is not None) == [1, 2, 3]


def test_a_lingering_taker_collects_what_arrives_until_the_linger_ends() -> None:
    box: Mailbox[int] = Mailbox()
    box.put_many([1])

    def later() -> None:
        for i in range(2, 5):
            time.sleep(0.02)
            box.put_many([i])
    threading.Thread(target=later).start()
    started = time.monotonic()
    batch = box.get_batch(100, 0.3)
    took = time.monotonic() - started
    assert batch == [1, 2, 3, 4]
    assert 0.25 <= took < 2, f"lingered {took:.3f}s for a 0.3 s linger"


def test_a_full_batch_returns_without_lingering() -> None:
    box: Mailbox[int] = Mailbox()
    box.put_many(range(10))
    started = time.monotonic()
    assert box.get_batch(10, 5.0) == list(range(10))
    assert time.monotonic() - started < 1


def test_a_lingering_taker_returns_as_soon_as_its_batch_fills() -> None:
    box: Mailbox[int] = Mailbox()
    box.put_many([0])
    threading.Timer(0.1, lambda: box.put_many(range(1, 10))).start()
    started = time.monotonic()
    assert box.get_batch(5, 5.0) == [0, 1, 2, 3, 4]
    assert time.monotonic() - started < 2, "lingered past a full batch"
    assert box.drain() == [5, 6, 7, 8, 9]


def test_a_taker_filling_to_fewer_than_its_limit_stops_lingering_there() -> None:
    """``fill``: the taker stops lingering once that many items wait (the writer's claim's
    worth), and still takes every waiting item up to its limit."""
    box: Mailbox[int] = Mailbox()
    box.put_many([0])
    threading.Timer(0.1, lambda: box.put_many(range(1, 7))).start()
    started = time.monotonic()
    assert box.get_batch(100, 5.0, fill=4) == list(range(7))
    assert time.monotonic() - started < 2, "lingered past its fill"
    box.put_many([7, 8])
    started = time.monotonic()
    assert box.get_batch(100, 0.2, fill=4) == [7, 8]  # the linger ends it: what gathered
    assert time.monotonic() - started >= 0.15


def test_close_hands_out_what_is_left_then_nothing_and_wakes_waiters() -> None:
    box: Mailbox[int] = Mailbox()
    got: list[int | None] = []
    waiter = threading.Thread(target=lambda: got.append(box.get()))
    waiter.start()
    time.sleep(0.05)
    box.close()
    waiter.join(5)
    assert got == [None], "a waiting taker was not released by close()"
    box.put_many([7, 8])  # e.g. acks handed over while shutting down are still written
    started = time.monotonic()
    assert box.get_batch(10, 5.0) == [7, 8], "a closed mailbox must not linger"
    assert time.monotonic() - started < 1
    assert box.get() is None and box.get_batch(10, 1.0) == []


def test_without_the_chain_one_taker_is_woken_and_a_nudge_wakes_another() -> None:
    """``chain`` off: a put wakes one hungry taker and it wakes no other (the awake one
    takes the rest in turn); :meth:`nudge` wakes one more once no item was taken for
    ``after`` seconds, and none sooner."""
    box: Mailbox[int] = Mailbox()
    box.chain = False
    got: list[int | None] = []
    takers = start_takers(box, 3, got)
    box.put_many([1, 2, 3])
    time.sleep(0.2)
    assert got == [1], got  # one woken; the others sleep beside two waiting items
    assert box.unattended()
    assert not box.nudge(10.0)  # an item was taken just now
    time.sleep(0.05)
    assert box.nudge(0.01)
    time.sleep(0.2)
    assert sorted(x for x in got if x is not None) == [1, 2]
    box.chain = True
    box.put_many([4])  # with the chain, a put wakes the last taker at once
    for t in takers:
        t.join(5)
    assert sorted(x for x in got if x is not None) == [1, 2, 3]
    assert box.drain() == [4]
