"""What every ``portq`` command shares: the URL and queue it opens, argument types, the
``Commands`` registrar each command module declares its arguments through, and table output."""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import portq
from portq.durations import format_duration, parse_duration_text
from portq.engines import engine as engine_record
from portq.errors import ConfigurationError

DEFAULT_PREFIX = "portq_"


def parse_duration(text: str) -> float:
    """``'500ms'``, ``'30s'``, ``'15m'``, ``'2h'``, ``'7d'``, ``'1w'`` -> seconds, for argparse:
    :func:`portq.durations.parse_duration_text` with its error as the usage error."""
    try:
        return parse_duration_text(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def integer(text: str, minimum: int) -> int:
    """An integer argument of at least ``minimum``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < minimum:
        bound = "> 0" if minimum == 1 else f">= {minimum}"
        raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
    return value


def positive(text: str) -> int:
    return integer(text, 1)


def non_negative(text: str) -> int:
    return integer(text, 0)


def timestamp(text: str) -> datetime:
    """An ISO 8601 date and time with its UTC offset (``2026-12-24T09:00:00+01:00``, or
    ``...Z``): a time without one would be read in some zone the job's reader cannot know."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time, e.g. 2026-12-24T09:00:00+01:00") from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no UTC offset: add one, e.g. {text}Z or {text}+01:00")
    return value


def port(text: str) -> int:
    """A TCP port number, 0-65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0-65535, got {value}")
    return value


class Commands:
    """Adds commands to the ``portq`` parser; each command module declares its own arguments
    through it, next to its ``cmd_*`` functions."""

    def __init__(self, sub: Any, common: argparse.ArgumentParser) -> None:
        self.sub = sub
        self.common = common

    def command(self, name: str, fn: Callable[[argparse.Namespace], int], help_: str,
                url: bool = True, prefix: str = DEFAULT_PREFIX,
                json_help: str | None = "print the result as JSON, for scripts"
                ) -> argparse.ArgumentParser:
        """A subcommand running ``fn``, with the URL, --prefix and --json most commands take."""
        p: argparse.ArgumentParser = self.sub.add_parser(name, help=help_, description=help_,
                                                         parents=[self.common])
        if url:
            p.add_argument("url", nargs="?", metavar="URL",
                           help="database URL (default: $PORTQ_URL)")
            p.add_argument("--prefix", default=prefix,
                           help=f"table prefix (default {prefix})")
        if json_help:
            p.add_argument("--json", action="store_true", help=json_help)
        p.set_defaults(fn=fn)
        return p


def duration(p: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup, flag: str,
             default: float | None, help_: str,
             parse: Callable[[str], float] = parse_duration, required: bool = False) -> None:
    """A DURATION option whose help shows its default with a unit."""
    shown = "" if default is None else f" (default {format_duration(default)})"
    p.add_argument(flag, type=parse, default=default, metavar="DURATION",
                   required=required, help=help_ + shown)


def create_flag(p: argparse.ArgumentParser) -> None:
    """``--create`` of the commands that refuse an unknown queue as a likely typo."""
    p.add_argument("--create", action="store_true",
                   help="act on a queue that has no jobs yet (without it, a queue with "
                        "no jobs and no settings is refused as a likely typo)")


def url_of(args: argparse.Namespace) -> str:
    """The command's database URL: its argument, else $PORTQ_URL."""
    url = args.url or os.environ.get("PORTQ_URL")
    if not url:
        raise ConfigurationError("no database URL: pass URL or set PORTQ_URL")
    return str(url)


def open_queue(args: argparse.Namespace, *, create: bool = False) -> portq.Queue:
    """The command's queue. Only ``create`` (``portq migrate``) may create a SQLite file:
    every other command on a mistyped path says so instead of leaving an empty file."""
    url = url_of(args)
    sized = {"pool_size": args.pool_size} if getattr(args, "pool_size", None) else {}
    queue = portq.connect(url, prefix=args.prefix, **sized)  # checks the URL's options first
    if not create:
        try:
            refuse_missing_sqlite_file(url)
        except ConfigurationError:
            queue.close()
            raise
    return queue


def refuse_missing_sqlite_file(url: str) -> None:
    """A clear error when ``url`` names a SQLite file that does not exist."""
    parsed = portq.url.parse_url(url)
    if engine_record(parsed.engine).file_based and parsed.path != ":memory:" and \
            not os.path.exists(parsed.path):
        raise ConfigurationError(f"no SQLite database at {parsed.path} (a typo? "
                                 "`portq migrate URL` creates it)")


def job_ids(args: argparse.Namespace) -> list[int]:
    """The JOB_ID arguments; with $PORTQ_URL set, the first one may stand where URL does
    (``portq retry 1 2``)."""
    texts = list(args.job_ids)
    if args.url is not None and "://" not in args.url:
        texts.insert(0, args.url)   # not a URL: the first job id ($PORTQ_URL is the URL)
        args.url = None
    ids = []
    for text in texts:
        if not re.fullmatch(r"\d+", text) or int(text) < 1:
            raise ConfigurationError(f"job id {text!r} is not a positive integer")
        ids.append(int(text))
    return ids


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """Print ``data`` as JSON with --json, else ``text``."""
    print(json.dumps(data, indent=2, default=str) if getattr(args, "json", False) else text)


def cell(value: Any) -> str:
    """A value as a table cell: ``-`` for none, yes/no, 3 decimals, a second-precise time."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


def print_table(cols: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Left-aligned columns under a header line."""
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip())
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
