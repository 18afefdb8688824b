"""The claim loop's pacing policy (shared by Worker and AsyncWorker)."""

from __future__ import annotations

from portq.worker import Pacing


def test_round_robin_and_a_missed_turn_is_kept() -> None:
    p = Pacing(["a", "b", "c"], idle_min=0.05, idle_max=2.0)
    assert p.turns() == ["a", "b", "c"]
    p.finish_round(tried=1, claimed=1)
    assert p.turns() == ["b", "c", "a"]
    p.finish_round(tried=0, claimed=0)  # no free slot: b keeps its turn
    assert p.turns() == ["b", "c", "a"]


def test_free_slots_are_shared_among_the_queues_left() -> None:
    assert [Pacing.share(3, n) for n in (3, 2, 1)] == [1, 2, 3]
    assert Pacing.share(4, 3) == 2 and Pacing.share(1, 3) == 1


def test_idle_and_error_delays_grow_to_their_caps_and_reset() -> None:
    p = Pacing(["a"], idle_min=0.05, idle_max=2.0)
    delays = [p.idle_delay() for _ in range(12)]
    assert 0.05 <= delays[0] <= 0.1
    assert all(0 < d <= 2.0 for d in delays) and max(delays[-3:]) >= 1.0
    p.finish_round(tried=1, claimed=2)
    assert p.idle_delay() <= 0.1  # a claim resets the backoff
    errors = [p.error_delay() for _ in range(20)]
    assert all(0 < d <= 5.0 for d in errors) and max(errors[-3:]) >= 2.5
