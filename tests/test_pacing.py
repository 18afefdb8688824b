"""The claim loop's pacing policy (shared by Worker and AsyncWorker)."""

from __future__ import annotations

from portq.runtime.pacing import (
    LOOKAHEAD_BOUND_SHARE,
    LOOKAHEAD_SLOW_CYCLES,
    ONE_LOOP_SHARE,
    RoundRobin,
    claim_batch,
)
from portq.worker import LOOKAHEAD_CYCLES, LOOKAHEAD_LEASE_FRACTION, LookAhead, Pacing


def test_round_robin_and_a_missed_turn_is_kept() -> None:
    p = Pacing(RoundRobin(["a", "b", "c"]), idle_min=0.05, idle_max=2.0)
    assert p.turns() == ["a", "b", "c"]
    p.finish_round(tried=1, claimed=1)
    assert p.turns() == ["b", "c", "a"]
    p.finish_round(tried=0, claimed=0)  # no free slot: b keeps its turn
    assert p.turns() == ["b", "c", "a"]


def test_claim_loops_claiming_at_once_begin_with_different_queues() -> None:
    turns = RoundRobin(["a", "b"])
    first, second = (Pacing(turns, idle_min=0.05, idle_max=2.0) for _ in range(2))
    assert first.turns() == ["a", "b"] and second.turns() == ["b", "a"]
    second.finish_round(tried=1, claimed=1)
    first.finish_round(tried=0, claimed=0)  # another round took a turn since: not given back
    assert first.turns() == ["a", "b"]
    first.finish_round(tried=0, claimed=0)  # none since: a keeps its turn
    assert second.turns() == ["a", "b"]


def test_free_slots_are_shared_among_the_queues_left() -> None:
    assert [Pacing.share(3, n) for n in (3, 2, 1)] == [1, 2, 3]
    assert Pacing.share(4, 3) == 2 and Pacing.share(1, 3) == 1


def test_idle_and_error_delays_grow_to_their_caps_and_reset() -> None:
    p = Pacing(RoundRobin(["a"]), idle_min=0.05, idle_max=2.0)
    delays = [p.idle_delay() for _ in range(12)]
    assert 0.05 <= delays[0] <= 0.1
    assert all(0 < d <= 2.0 for d in delays) and max(delays[-3:]) >= 1.0
    p.finish_round(tried=1, claimed=2)
    assert p.idle_delay() <= 0.1  # a claim resets the backoff
    errors = [p.error_delay() for _ in range(20)]
    assert all(0 < d <= 5.0 for d in errors) and max(errors[-3:]) >= 2.5


def test_look_ahead_is_zero_until_measured_and_while_jobs_outlast_a_claim() -> None:
    look = LookAhead(concurrency=4, lease=30.0, ceiling=640)
    assert look.size() == 0  # nothing known yet: claim no more than free threads
    look.claim_took(0.002)
    assert look.size() == 0
    look.job_ran(0.050)      # a job outlasts a claim's round trip: refilling freed
    assert look.size() == 0  # threads keeps them busy, nothing is claimed ahead


def test_look_ahead_covers_claim_round_trips_of_short_jobs_within_its_bounds() -> None:
    look = LookAhead(concurrency=4, lease=30.0, ceiling=10_000)
    look.claim_took(0.004)
    look.job_ran(0.001)      # 4,000 starts/s x 4 ms x LOOKAHEAD_CYCLES round trips
    assert look.size() == int(4 / 0.001 * 0.004 * LOOKAHEAD_CYCLES)
    capped = LookAhead(concurrency=4, lease=30.0, ceiling=100)
    capped.claim_took(0.004)
    capped.job_ran(0.001)
    assert capped.size() == 100
    # never more jobs than the handlers start in a share (LOOKAHEAD_BOUND_SHARE) of the
    # bound after which an unstarted job is given back (LOOKAHEAD_LEASE_FRACTION of the lease)
    short = LookAhead(concurrency=4, lease=0.01, ceiling=10_000)
    short.claim_took(0.004)
    short.job_ran(0.001)
    assert short.max_wait == 0.01 * LOOKAHEAD_LEASE_FRACTION
    assert short.size() == int(4 / 0.001 * short.max_wait * LOOKAHEAD_BOUND_SHARE)


def test_look_ahead_follows_jobs_that_become_slow() -> None:
    look = LookAhead(concurrency=2, lease=30.0, ceiling=500)
    look.claim_took(0.003)
    for _ in range(5):
        look.job_ran(0.0001)
    assert look.size() > 0
    for _ in range(30):      # the moving average moves to the new run time
        look.job_ran(0.5)
    assert look.size() == 0


def test_look_ahead_judges_job_length_by_the_fastest_recent_claim() -> None:
    """A loaded moment (slow claims) does not make 50 ms jobs look short: the job is
    compared with the fastest of the recent claims, and a slow claim counts as 4 fast
    ones at most, so at most one job is claimed ahead (not the dozens that 200 ms claims
    would call for)."""
    look = LookAhead(concurrency=3, lease=30.0, ceiling=640)
    look.job_ran(0.050)
    look.claim_took(0.002)
    for _ in range(10):
        look.claim_took(0.200)  # the machine is loaded: claims take 200 ms for a while
    starts_per_s = 3 / 0.050
    assert look.size() == int(starts_per_s * 4 * 0.002 * LOOKAHEAD_SLOW_CYCLES) == 1


def test_one_claim_loop_keeps_up_while_few_jobs_start_per_round_trip() -> None:
    """The other claim loops rest while the handlers start fewer than ONE_LOOP_SHARE of
    a batch during the fastest recent claim's round trip (40 slots of 5 ms jobs, 1 ms
    claims: 8 starts a round trip against 13.3 of a batch of 40), and claim while more
    start (the same slots with 1 ms jobs: 40; short jobs: thousands). Nothing measured:
    all claim."""
    def look(concurrency: int, job_s: float, *claims_s: float) -> LookAhead:
        la = LookAhead(concurrency=concurrency, lease=30.0, ceiling=640)
        la.job_ran(job_s)
        for claim_s in claims_s:
            la.claim_took(claim_s)
        return la

    assert round(ONE_LOOP_SHARE * 40, 1) == 13.3
    assert look(40, 0.005, 0.001).one_loop_keeps_up(40)              # 8 starts
    assert not look(40, 0.005, 0.002).one_loop_keeps_up(40)          # 16
    assert look(40, 0.005, 0.002, 0.001).one_loop_keeps_up(40)       # the fastest counts
    assert not look(40, 0.001, 0.001).one_loop_keeps_up(40)          # 40
    assert not look(4, 0.00001, 0.001).one_loop_keeps_up(20)         # no-op jobs: 400
    assert look(4, 0.0005, 0.0005).one_loop_keeps_up(20)             # 4 of 6.7
    assert not look(4, 0.0005, 0.0005).one_loop_keeps_up(10)         # 4 of 3.3
    assert not LookAhead(concurrency=40, lease=30.0, ceiling=640).one_loop_keeps_up(40)
    assert not look(40, 0.005).one_loop_keeps_up(40)                 # no claim measured


def test_a_single_writer_claims_what_four_claim_loops_would() -> None:
    """The claim batch when none is given: 20 (or concurrency, when larger); a worker
    whose one claim loop also writes (SQLite) claims what its 4 loops would elsewhere,
    within its capacity and 100; a batch given is kept."""
    assert claim_batch(None, 4, 644) == 20
    assert claim_batch(None, 40, 680) == 40
    assert claim_batch(None, 4, 164, one_writing_loop=True) == 80
    assert claim_batch(None, 2, 162, one_writing_loop=True) == 40
    assert claim_batch(None, 1, 161, one_writing_loop=True) == 20
    assert claim_batch(None, 40, 200, one_writing_loop=True) == 100
    assert claim_batch(None, 4, 50, one_writing_loop=True) == 50
    assert claim_batch(20, 4, 164, one_writing_loop=True) == 20
