"""The ``portq`` command: one module per command group, each declaring its own arguments
(:mod:`portq.cli.app` assembles them). ``PORTQ_URL`` stands in for the URL argument
everywhere."""

from portq.cli.app import build_parser, main
from portq.cli.common import parse_duration, refuse_missing_sqlite_file
from portq.cli.worker import load_handler
from portq.durations import format_duration

__all__ = ["build_parser", "format_duration", "load_handler", "main", "parse_duration",
           "refuse_missing_sqlite_file"]
