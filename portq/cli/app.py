"""The ``portq`` parser and entry point: global options, the commands in the order ``--help``
lists them (each declared by its command module), argument fix-ups, and one-line errors."""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

import portq
from portq.cli import jobs, observe, operators, queues, schema, tools, worker
from portq.cli.common import Commands
from portq.errors import ConfigurationError, PortqError
from portq.logs import FORMATS, LEVELS, configure_logging

DESCRIPTION = ("portq: background jobs kept in an ordinary SQL table, claimed safely by "
               "competing workers. Each command takes the database URL as its first "
               "argument, or from $PORTQ_URL.")

#: every command, in the order ``portq --help`` lists them
COMMANDS: tuple[Callable[[Commands], None], ...] = (
    schema.add_migrate, jobs.add_enqueue, worker.add_worker, observe.add_stats,
    observe.add_workers, observe.add_dashboard, operators.add_reap, operators.add_prune,
    operators.add_retry_cancel, operators.add_delete, jobs.add_jobs, queues.add_pause,
    queues.add_resume, queues.add_limit, jobs.add_job, jobs.add_workflow,
    tools.add_conformance, tools.add_demo, tools.add_bench)


def build_parser() -> argparse.ArgumentParser:
    """The ``portq`` parser with every command."""
    common = PortqParser(add_help=False)
    logs = common.add_argument_group("logging (before or after the command)")
    logs.add_argument("--log-level", type=str.upper, choices=LEVELS, default=argparse.SUPPRESS,
                      help="least severe level logged to stderr (default INFO, or "
                           "$PORTQ_LOG_LEVEL)")
    logs.add_argument("--log-format", choices=FORMATS, default=argparse.SUPPRESS,
                      help="text lines (default, or $PORTQ_LOG_FORMAT) or json: one JSON "
                           "object per line")
    parser = PortqParser(prog="portq", description=DESCRIPTION, parents=[common])
    parser.add_argument("--version", action="version", version=f"portq {portq.__version__}")
    cmds = Commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"),
                    common)
    for add in COMMANDS:
        add(cmds)
    return parser


def _join_negative_values(argv: Sequence[str]) -> list[str]:
    """``--delay -5s`` -> ``--delay=-5s``: argparse takes a value that starts with '-' for an
    option and says "expected one argument"; joined, the value reaches its type check."""
    out: list[str] = []
    for arg in argv:
        if out and re.match(r"^-\d", arg) and out[-1].startswith("--") and "=" not in out[-1]:
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


_ARGV: list[str] = []  # the command line being parsed, for PortqParser's hints


class PortqParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors suggest the closest option for each mistyped one
    (Python 3.11's argparse does not)."""

    def error(self, message: str) -> NoReturn:
        hints = self.hints(_ARGV)
        super().error(message + (f"; {'; '.join(hints)}" if hints else ""))

    def hints(self, argv: Sequence[str]) -> list[str]:
        known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        out = []
        for arg in argv:
            flag = arg.split("=")[0]
            if not flag.startswith("--") or any(k.startswith(flag) for k in known):
                continue
            close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
            if close:
                out.append(f"unknown option {flag} (did you mean {close[0]}?)")
        return out


def _subparser(parser: argparse.ArgumentParser,
               args: argparse.Namespace) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(getattr(args, "command", ""), parser)  # type: ignore[no-any-return]
    return parser


def _late_positionals(parser: argparse.ArgumentParser, args: argparse.Namespace,
                      extras: list[str]) -> list[str]:
    """argparse gives positionals only the words before the first option: in
    ``portq pause URL --prefix P QUEUE``, QUEUE is left over. Parse the command's
    positional words again, all together (options already parsed stay as they are);
    return what is still left over."""
    sub = _subparser(parser, args)
    if sub is parser or any(e.startswith("-") for e in extras) or any(
            a.required and a.option_strings for a in sub._actions):
        return extras
    words: list[str] = []
    for action in sub._actions:
        if action.option_strings or isinstance(action, argparse._SubParsersAction):
            continue
        value = getattr(args, action.dest, None)
        words += value if isinstance(value, list) else [] if value is None else [value]
    _, left = sub.parse_known_args(words + extras, namespace=args)
    return left


def _refuse_extras(parser: argparse.ArgumentParser, args: argparse.Namespace,
                   extras: Sequence[str]) -> NoReturn:
    """Refuse unknown arguments with the command's own parser (which adds the hints)."""
    sub = _subparser(parser, args)
    sub.error(f"unrecognized argument{'s' if len(extras) > 1 else ''}: {' '.join(extras)}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    passthrough: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    _ARGV[:] = argv
    args, extras = parser.parse_known_args(_join_negative_values(argv))
    if extras:
        extras = _late_positionals(parser, args, extras)
    if extras:
        _refuse_extras(parser, args, extras)
    if passthrough:
        if args.command != "conformance":
            parser.error(f"arguments after -- are only for conformance: {' '.join(passthrough)}")
        args.pytest_args = passthrough
    level = getattr(args, "log_level", None) or os.environ.get("PORTQ_LOG_LEVEL", "INFO").upper()
    log_format = getattr(args, "log_format", None) or os.environ.get("PORTQ_LOG_FORMAT", "text")
    if level not in LEVELS or log_format not in FORMATS:
        parser.error(f"log level {level!r} / format {log_format!r}: levels are "
                     f"{', '.join(LEVELS)}; formats {', '.join(FORMATS)}")
    configure_logging(level, log_format)
    try:
        return int(args.fn(args))
    except PortqError as exc:
        # one line: the message names the problem (exit 2: the user's to fix; 1: at run time)
        print(f"portq: error: {_one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug or an unmapped driver error: one line too
        logging.getLogger("portq.cli").debug("unexpected error", exc_info=True)
        text = _scrub_args(args, f"{type(exc).__name__}: {_one_line(str(exc))}")
        print(f"portq: error: unexpected {text} (--log-level DEBUG shows the traceback)",
              file=sys.stderr)
        return 1


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _scrub_args(args: argparse.Namespace, text: str) -> str:
    """``text`` without the secrets of the command's database URL."""
    url = getattr(args, "url", None) or os.environ.get("PORTQ_URL")
    try:
        return portq.url.parse_url(url).scrub(text) if url else text
    except ConfigurationError:
        return text

