"""Fair sharing across keys (issue 34, item 5): one key holding BURST ready jobs, ten keys
holding ten each; claims of one job each (``Queue.claim(limit=1)``) until every small
key's job is claimed, with ``set_fairness(q, True)`` and without, on each engine given.

    .venv/bin/python benchmarks/fairness.py URL [URL ...] [--burst 100000] [--rounds 3]

Prints, per engine: the claim at which the last small-key job was taken (fair), how many
small-key jobs the first 110 claims took (plain order), the median and p90 cost of one
claim in each mode (interleaved rounds of 200 claims each, the burst still ready), and the
EXPLAIN of the fair claim's two seeks. Tables ``hff_*`` are dropped afterwards.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import portq

KEYS = [f"tenant-{i:02d}" for i in range(10)]
PREFIX = "hff_"


def fill(q: portq.Queue, name: str, burst: int) -> list[int]:
    """The burst (key ``big``) first, then ten jobs of each small key; the small ids."""
    for start in range(0, burst, 5000):
        q.enqueue_many([{"queue": name, "payload": i, "concurrency_key": "big",
                         "concurrency_limit": 10**6}
                        for i in range(start, min(burst, start + 5000))])
    return q.enqueue_many([{"queue": name, "payload": i, "concurrency_key": k,
                            "concurrency_limit": 10**6} for i in range(10) for k in KEYS])


def claims_until_small_done(q: portq.Queue, name: str, small: set[int], cap: int) -> int:
    """Claims of one job until every small-key job is claimed (or ``cap`` claims)."""
    left, n = set(small), 0
    while left and n < cap:
        n += 1
        left -= {j.id for j in q.claim(name, "bench", limit=1)}
    return n


def claim_ms(q: portq.Queue, name: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        q.claim(name, "bench", limit=1)
        out.append((time.perf_counter() - t) * 1000)
    return out


EXPLAINS = {
    "postgres": ("EXPLAIN {}", "FOR UPDATE SKIP LOCKED"),
    "mysql": ("EXPLAIN {}", "FOR UPDATE SKIP LOCKED"),
    "sqlite": ("EXPLAIN QUERY PLAN {}", ""),
}


def explain(q: portq.Queue, name: str) -> list[str]:
    """The plans of the next-key seek and of one key's first-job seek."""
    backend: Any = q.backend
    engine = backend.engine
    wrap, lock = EXPLAINS[engine]
    table = f"{PREFIX}job"
    sqls = [f"SELECT concurrency_key FROM {table} WHERE queue = '{name}' AND state = 'ready' "
            f"AND concurrency_key > 'big' ORDER BY concurrency_key LIMIT 1",
            f"SELECT job_id FROM {table} WHERE queue = '{name}' AND state = 'ready' AND "
            f"concurrency_key = 'tenant-03' AND attempts < max_attempts "
            f"ORDER BY concurrency_key, priority DESC, run_at, job_id LIMIT 1 {lock}",
            # the plain claim's walk, for comparison (MariaDB: still portq_job_ready_idx)
            f"SELECT job_id FROM {table} WHERE queue = 'plain' AND state = 'ready' AND "
            f"attempts < max_attempts ORDER BY priority DESC, run_at, job_id LIMIT 1 {lock}"]
    lines = []
    conn = backend.pool.acquire()
    try:
        cur = conn.cursor()
        for sql in sqls:
            cur.execute(wrap.format(sql))
            lines.append(sql)
            lines += ["    " + " | ".join(str(c) for c in row) for row in cur.fetchall()]
        conn.rollback()
    finally:
        backend.pool.release(conn)
    return lines


def run(url: str, burst: int, rounds: int) -> None:
    q = portq.connect(url, prefix=PREFIX)
    q.migrate()
    try:
        fair, plain = "fair", "plain"
        q.set_fairness(fair, True)
        t = time.perf_counter()
        small_fair = set(fill(q, fair, burst))
        small_plain = set(fill(q, plain, burst))
        fill_s = time.perf_counter() - t
        done_at = claims_until_small_done(q, fair, small_fair, 10 * (burst + 100))
        first = {j.id for _ in range(110) for j in q.claim(plain, "bench", limit=1)}
        costs: dict[str, list[float]] = {fair: [], plain: []}
        for _ in range(rounds):
            for name in (plain, fair):
                costs[name].append(statistics.median(claim_ms(q, name, 200)))
        print(f"## {q.backend.engine} ({url.split('@')[-1]}), burst {burst}, "
              f"fill of both queues {fill_s:.0f} s, load {os.getloadavg()[0]:.1f}")
        print(f"fair: last small-key job claimed at claim {done_at} (of {len(small_fair)})")
        print(f"plain: small-key jobs among the first 110 claims: "
              f"{len(first & small_plain)}")
        for name in (plain, fair):
            c = sorted(costs[name])
            print(f"claim ms ({name}): median of round medians {statistics.median(c):.3f} "
                  f"(rounds {', '.join(f'{x:.3f}' for x in c)})")
        print("\n".join(explain(q, fair)))
    finally:
        q.backend.drop_schema()  # type: ignore[attr-defined]
        q.close()


#: migration 13's index undone, for the plain claim's cost without it
UNDO_INDEX = {
    "postgres": f"DROP INDEX {PREFIX}job_fair_idx",
    "sqlite": f"DROP INDEX {PREFIX}job_fair_idx",
    "mysql": f"ALTER TABLE {PREFIX}job DROP INDEX {PREFIX}job_ckey_idx, "
             f"ADD INDEX {PREFIX}job_ckey_idx (queue, concurrency_key, state)",
}


def plain_pass(url: str, with_index: bool, jobs: int) -> tuple[float, float]:
    """Fresh tables (with or without migration 13's index): enqueue ``jobs`` unkeyed jobs
    (enqueue_many, 500 a call), then claim 20 and complete them until none is left, on one
    thread; (enqueue jobs/s, claim + complete jobs/s)."""
    q = portq.connect(url, prefix=PREFIX)
    try:
        q.migrate()
        backend: Any = q.backend
        if not with_index:
            backend.run("undo", lambda cur: cur.execute(UNDO_INDEX[backend.engine]),
                        retry=False)
        t = time.perf_counter()
        for start in range(0, jobs, 500):
            q.enqueue_many([{"queue": "plain", "payload": i} for i in range(start, start + 500)])
        enq = jobs / (time.perf_counter() - t)
        t = time.perf_counter()
        done = 0
        while got := q.claim("plain", "bench", limit=20):
            q.complete_many(got)
            done += len(got)
        assert done == jobs
        return enq, jobs / (time.perf_counter() - t)
    finally:
        q.backend.drop_schema()  # type: ignore[attr-defined]
        q.close()


def index_cost(url: str, rounds: int, jobs: int) -> None:
    """Interleaved rounds of :func:`plain_pass` with and without the index (the order
    alternating by round); medians, spreads and the load average."""
    res: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    load = [os.getloadavg()[0]]
    for r in range(rounds):
        for variant in ((True, False) if r % 2 else (False, True)):
            res[variant].append(plain_pass(url, variant, jobs))
    load.append(os.getloadavg()[0])
    print(f"## plain queue, {jobs} jobs, {rounds} rounds, {url.split('@')[-1]}, load "
          f"{load[0]:.1f} -> {load[1]:.1f}")
    for variant in (False, True):
        enq = sorted(e for e, _ in res[variant])
        thr = sorted(c for _, c in res[variant])
        print(f"{'with' if variant else 'without'} migration 13's index: enqueue "
              f"{statistics.median(enq):.0f}/s ({enq[0]:.0f}-{enq[-1]:.0f}), claim+complete "
              f"{statistics.median(thr):.0f}/s ({thr[0]:.0f}-{thr[-1]:.0f})")
    for i, what in ((0, "enqueue"), (1, "claim+complete")):
        ratios = sorted(w[i] / wo[i] for w, wo in zip(res[True], res[False], strict=True))
        print(f"{what}: with/without, per round: median {statistics.median(ratios):.3f} "
              f"({ratios[0]:.3f}-{ratios[-1]:.3f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("urls", nargs="+")
    ap.add_argument("--burst", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--index-cost", type=int, default=0, metavar="JOBS",
                    help="instead: a plain queue's enqueue and claim+complete rate with and "
                         "without migration 13's index, JOBS jobs per pass")
    args = ap.parse_args()
    for url in args.urls:
        if args.index_cost:
            index_cost(url, args.rounds, args.index_cost)
        else:
            run(url, args.burst, args.rounds)


if __name__ == "__main__":
    main()
