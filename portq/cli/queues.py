"""``portq pause``, ``resume`` and ``limit``: a queue's persisted settings."""

from __future__ import annotations

import argparse

import portq
from portq.cli.common import Commands, create_flag, open_queue, positive
from portq.errors import ConfigurationError
from portq.rates import parse_rate, period_text

_UNSET = object()


def _known_queue(q: portq.Queue, name: str, create: bool) -> None:
    """Refuse a queue with no job and no setting (most likely a typo) unless ``create``."""
    portq.queue.validate_queue(name)
    if create or q.stats(name):   # a row: the queue has jobs, or is paused or limited
        return
    raise ConfigurationError(
        f"queue {name!r} has no jobs and no settings (a typo?); pass --create to set it "
        "up before its first job")


def cmd_pause(args: argparse.Namespace) -> int:
    """``portq pause URL QUEUE``: no worker claims the queue's jobs until ``resume``."""
    with open_queue(args) as q:
        _known_queue(q, args.queue_name, args.create)
        q.pause(args.queue_name)
    print(f"paused {args.queue_name}: workers claim none of its jobs from their next poll; "
          f"running jobs finish")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    """``portq resume URL QUEUE``: workers claim the queue's jobs again."""
    with open_queue(args) as q:
        _known_queue(q, args.queue_name, args.create)
        q.resume(args.queue_name)
    print(f"resumed {args.queue_name}")
    return 0


def cmd_limit(args: argparse.Namespace) -> int:
    """``portq limit URL QUEUE [--running N|none] [--rate N/PERIOD|none] [--fair|--no-fair]``:
    the queue's limit on running jobs and on jobs started per period, and its fairness."""
    if args.running is _UNSET and args.rate is _UNSET and args.fair is None:
        raise ConfigurationError("portq limit: give --running N, --rate N/PERIOD (none "
                                 "clears either) and/or --fair / --no-fair")
    with open_queue(args) as q:
        _known_queue(q, args.queue_name, args.create)
        if args.running is not _UNSET:
            q.set_concurrency_limit(args.queue_name, args.running)
        if args.rate is not _UNSET:
            q.set_rate_limit(args.queue_name, *(args.rate or (None,)))
        if args.fair is not None:
            q.set_fairness(args.queue_name, args.fair)
    if args.fair is not None:
        print(f"{args.queue_name} claims " + ("one job of each concurrency key in turn"
              if args.fair else "in plain order (priority, run_at, id)")
              + "; workers follow within a second")
    if args.running is None:
        print(f"cleared the running-jobs limit of {args.queue_name}")
    elif args.running is not _UNSET:
        print(f"limited {args.queue_name} to {args.running} running jobs across every worker; "
              f"workers see it within a second")
    if args.rate is None:
        print(f"cleared the rate limit of {args.queue_name}")
    elif args.rate is not _UNSET:
        n, seconds = args.rate
        print(f"limited {args.queue_name} to {n} jobs started per {period_text(seconds)} "
              f"(any sliding window) across every worker; workers see it within a second")
    return 0


def _rate_or_none(text: str) -> tuple[int, float] | None:
    """``--rate``: :func:`portq.rates.parse_rate` for argparse."""
    try:
        return parse_rate(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _limit_or_none(text: str) -> int | None:
    """A positive integer, or ``none`` (no limit)."""
    return None if text.strip().lower() == "none" else positive(text)


def add_pause(cmds: Commands) -> None:
    p = cmds.command("pause", cmd_pause, "stop every worker claiming a queue's jobs (persisted; "
                                         "running jobs finish)")
    p.add_argument("queue_name", metavar="QUEUE", help="the queue to pause")
    create_flag(p)


def add_resume(cmds: Commands) -> None:
    p = cmds.command("resume", cmd_resume, "let workers claim a paused queue's jobs again")
    p.add_argument("queue_name", metavar="QUEUE", help="the queue to resume")
    create_flag(p)


def add_limit(cmds: Commands) -> None:
    p = cmds.command("limit", cmd_limit, "set or clear a queue's limits on running jobs and on "
                                         "jobs started per period, across every worker "
                                         "(enforced in the claim transaction)")
    p.add_argument("queue_name", metavar="QUEUE", help="the queue to limit")
    create_flag(p)
    p.add_argument("--running", type=_limit_or_none, default=_UNSET, metavar="N",
                   help="at most N running jobs of QUEUE at once; 'none' clears the limit")
    p.add_argument("--rate", type=_rate_or_none, default=_UNSET, metavar="N/PERIOD",
                   help="at most N jobs of QUEUE started per PERIOD in any sliding window "
                        "(e.g. 50/2s, 100/1m, 1000/1h); 'none' clears the limit")
    p.add_argument("--fair", action=argparse.BooleanOptionalAction, default=None,
                   help="claim round-robin across the jobs' concurrency keys (--no-fair: "
                        "plain priority order)")
