"""Fair sharing across concurrency keys (``Queue.set_fairness``; migration 13).

A fair queue's claim runs in the transaction that holds the queue's ``portq_queue`` row
(``SqlBackend.claim_within_limit``), so claimers of the queue take turns and share one
cursor, ``fair_after``: the key served last. The claim walks the keys with ready jobs in
key order from that cursor, taking one job of each key in turn (``claim_key``); after the
largest key comes the turn of the unkeyed jobs (``claim_unkeyed``) and the round starts
over. Each step is one index seek on ``portq_job_fair_idx`` (queue, concurrency_key,
priority, run_at, job_id over ready rows): the next key (``fair_first_key`` /
``fair_next_key``), then that key's first job in claim order. No step reads the ready set
as a whole, so one key's burst costs the other keys one turn per round, never a wait
behind the burst.

A key whose ready jobs are not due yet, or that has its limit of running jobs, gives
nothing in its turn and the walk moves on; a walk stops after a full round that gave
nothing, or after :data:`SPARE_PROBES` turns more than twice the claim's limit (so a claim
stays bounded when many keys have nothing to give; the next claim goes on from there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from portq.backends.sql.claim import Claiming

#: turns a fair claim may spend on keys that give nothing, beyond two per job it claims
SPARE_PROBES = 64


def fair_key(value: Any) -> str | None:
    """A concurrency key as the database returned it (text, or bytes where keys are stored
    as VARBINARY), as text; None stays None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8")
    return str(value)


def next_key(backend: Claiming, cur: Any, queue: str, after: str | None) -> str | None:
    """The smallest key after ``after`` (None: the smallest key) with a ready job of
    ``queue``; None when there is none (the unkeyed jobs' turn)."""
    if after is None:
        row = backend.execute(cur, "fair_first_key", {"queue": queue}).fetchone()
    else:
        row = backend.execute(cur, "fair_next_key", {"queue": queue, "after": after}).fetchone()
    return None if row is None else fair_key(row[0])


def fair_rows(backend: Claiming, cur: Any, params: dict[str, Any],
              after: Any) -> list[Sequence[Any]]:
    """Claim up to ``params["limit"]`` jobs of a fair queue round-robin across its keys,
    from the cursor ``after`` (the key served last; None: the unkeyed jobs were), in the
    open transaction holding the queue's row; store the cursor where the walk stopped."""
    queue, want = params["queue"], int(params["limit"])
    start = key = fair_key(after)
    rows: list[Sequence[Any]] = []
    dry: set[str | None] = set()  # turns since the last job claimed: a repeat is a dry round
    turns = 2 * want + SPARE_PROBES
    while len(rows) < want and turns > 0:
        turns -= 1
        turn = next_key(backend, cur, queue, key)
        if turn in dry:
            break
        key = turn
        if key is None:
            got = backend.claim_rows(cur, {**params, "limit": 1}, "claim_unkeyed")
        else:
            got = backend.claim_rows(cur, {**params, "limit": 1, "concurrency_key": key},
                                     "claim_key")
        rows.extend(got)
        dry = set() if got else dry | {key}
    if key != start:
        backend.execute(cur, "set_fair_after", {"queue": queue, "after": key})
    return rows
