"""``portq conformance URL``: check the connection, print what is being tested, run the
suite in this process, report one row per property, drop the suite's tables."""

from __future__ import annotations

import json
import logging
import os
import sys
import time

import portq
from portq.conformance import SUITE_DIR
from portq.conformance.plugin import ENGINE_LABELS, TEST_PREFIX
from portq.conformance.report import OUTCOMES, Collector, properties_json, render_table
from portq.job import ServerInfo
from portq.url import parse_url

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _fail(message: str) -> int:
    print(f"portq: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _first_line(exc: BaseException) -> str:
    """The first line of what the driver said (the cause of a wrapping portq error)."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    text = str(cause).strip().splitlines()
    return text[0].strip() if text else type(cause).__name__


def check_target(url: str, prefix: str) -> tuple[ServerInfo, list[str]] | str:
    """The server's description and this prefix's existing tables, or one line saying
    why the database cannot be used."""
    redacted = parse_url(url).redacted()
    backend_log = logging.getLogger("portq.backend")
    level = backend_log.level
    backend_log.setLevel(logging.WARNING)   # not its "retrying on a new connection" line
    try:
        with portq.connect(url, prefix=prefix, pool_size=1) as q:
            info = q.backend.server_info()
            existing = q.backend.existing_tables()
    except Exception as exc:  # noqa: BLE001 - whatever failed, one line says it
        return f"cannot connect to {redacted}: {_first_line(exc)}"
    finally:
        backend_log.setLevel(level)
    return info, existing


def banner(info: ServerInfo, url: str, prefix: str, keep: bool) -> list[str]:
    rows = [("engine", f"{ENGINE_LABELS.get(info.engine, info.engine)} ({info.engine})"),
            ("server", info.server_version),
            ("driver", f"{info.driver} {info.driver_version}"),
            ("isolation", info.isolation or "not reported by the engine"),
            ("database", parse_url(url).redacted()),
            ("prefix", f"{prefix} (tables {'kept' if keep else 'dropped'} at the end)")]
    return [f"portq {portq.__version__} conformance"] + [f"  {k:<10} {v}" for k, v in rows]


def run_conformance(url: str, *, prefix: str = TEST_PREFIX, keep: bool = False,
                    as_json: bool = False, junit: str | None = None,
                    pytest_args: list[str] | None = None) -> int:
    import pytest

    parsed = parse_url(url)  # a malformed URL: a clear error before anything else
    checked = check_target(url, prefix)
    if isinstance(checked, str):
        return _fail(checked)
    info, existing = checked
    if existing and prefix != TEST_PREFIX:
        return _fail(f"tables with prefix {prefix!r} already exist ({', '.join(existing)}): "
                     "the suite writes to its tables and drops them at the end; choose a "
                     f"prefix no application uses (default {TEST_PREFIX})")
    head = banner(info, url, prefix, keep)
    out = sys.stderr if as_json else sys.stdout
    print("\n".join(head), file=out, flush=True)
    collector = Collector(progress=True)
    argv = [str(SUITE_DIR), "-p", "portq.conformance.plugin", "-p", "no:terminal",
            "-p", "no:cacheprovider", "-c", os.devnull, "--rootdir", str(SUITE_DIR),
            "--portq-url", url, "--portq-require", parsed.engine, "--portq-prefix", prefix,
            "-m", "not fault", *(["--junitxml", junit] if junit else []),
            *(pytest_args or [])]
    started = time.monotonic()
    try:
        rc = int(pytest.main(argv, plugins=[collector]))
    finally:
        dropped = [] if keep else _drop(url, prefix)
    elapsed = time.monotonic() - started
    sys.stderr.write("\n")
    results = collector.properties()
    tally = dict.fromkeys(OUTCOMES, 0)
    for t in collector.outcomes.values():
        tally[t.outcome] += 1
    failed = tally["failed"] > 0 or bool(collector.errors) or rc not in (0, 1, 5)
    if as_json:
        print(json.dumps({"engine": info.as_dict(), "database": parsed.redacted(),
                          "prefix": prefix, "properties": properties_json(results),
                          "summary": {**tally, "seconds": round(elapsed, 1)},
                          "collection_errors": collector.errors, "dropped_tables": dropped,
                          "passed": not failed and rc != 5}, indent=2))
    else:
        print()
        print("\n".join(render_table(results)))
        for t in collector.outcomes.values():
            if t.outcome == "failed":
                print(f"FAILED {t.name}: {t.reason}")
        for error in collector.errors:
            print(f"ERROR collecting {error}")
        skipped = f", {tally['skipped']} skipped" if tally["skipped"] else ""
        if tally["not_applicable"]:
            skipped += f", {tally['not_applicable']} not applicable to {info.engine}"
        print(f"\n{tally['passed']} passed, {tally['failed']} failed{skipped} in "
              f"{elapsed:.0f}s; "
              + (f"dropped {', '.join(dropped)}" if dropped else
                 "kept the suite's tables" if keep else "no tables to drop")
              + (f"; JUnit report in {junit}" if junit else ""))
    if rc == 5:
        print("portq: error: no conformance test was selected", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_FAILED if failed else EXIT_OK


def _drop(url: str, prefix: str) -> list[str]:
    try:
        with portq.connect(url, prefix=prefix, pool_size=1) as q:
            return q.backend.drop_schema()
    except Exception as exc:  # noqa: BLE001 - the report still prints; say what is left
        print(f"portq: warning: could not drop the {prefix} tables: {_first_line(exc)}",
              file=sys.stderr)
        return []
